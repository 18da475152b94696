package org.pgidempotency;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import javax.sql.DataSource;
import org.postgresql.PGConnection;
import org.postgresql.PGStatement;

/**
 * The SQL API of the idempotency extension (doc/reference.md) on JDBC.
 *
 * <p>Every call of the contract takes a {@link Connection} first and runs
 * one parameterised statement on it, in the caller's transaction: nothing
 * commits or rolls back here, and nothing is kept in the session between
 * calls (fences and lease tokens are passed back explicitly), so each call
 * may use another pooled connection. The {@link DataSource} (HikariCP,
 * Spring's, a plain one) serves the helpers that own their transaction:
 * {@link #checkVersion()}, {@link #inTransaction}, {@link #processOnce}.
 * A failing statement raises the {@link IdempotencyException} of its
 * SQLSTATE ({@link IdempotencyException.LeaseLostException} for 55000, ...).
 * Durations are passed as intervals; null means the extension's default.
 *
 * <p>Behind a transaction pooler (PgBouncer in transaction mode, RDS
 * Proxy, Supavisor) each transaction may run on another server session,
 * which serves other clients too; a named prepared statement lives in one
 * session only. pgjdbc names a statement from its fifth run on a
 * connection (prepareThreshold) and its COMMIT and ROLLBACK at once, so
 * every statement of this package is sent unnamed (prepareThreshold 0 on
 * the statement), and the connections the package takes from the
 * DataSource itself ({@link #connection()}) have a prepareThreshold of 0
 * while it holds them: their BEGIN, COMMIT and ROLLBACK and the statements
 * created on them (a one-transaction handler's, the work of
 * {@link #inTransaction}) are unnamed too.
 */
public final class Idempotency {
    /** The oldest extension version this package works with. */
    public static final String MIN_EXTENSION_VERSION = "1.3";

    private static final String CLAIM_COLUMNS = "outcome, fence, status::text, response_code, "
        + "response_body::text, recovery_point, attempts, extract(epoch FROM retry_after)::float8";

    private final DataSource dataSource;

    public Idempotency(DataSource dataSource) {
        this.dataSource = dataSource;
    }

    public DataSource dataSource() {
        return dataSource;
    }

    /** Work on a connection in a transaction. */
    @FunctionalInterface
    public interface Work<T> {
        T run(Connection conn) throws Exception;
    }

    // ---------------------------------------------------------------- keys

    /** claim(key, request, scope, ttl, lease); request is any JSON value (null: not compared). */
    public ClaimResult claim(Connection c, String key, Object request, String scope, Duration ttl,
                             Duration lease) {
        return claim(c, key, request, scope, ttl, lease, null);
    }

    /**
     * claim with wait (extension 1.6): a duplicate waits up to wait for the
     * holder; sent by name only when not null, so that the call works before
     * 1.6. It needs the library preloaded (else 55000) and READ COMMITTED
     * (else 0A000).
     */
    public ClaimResult claim(Connection c, String key, Object request, String scope, Duration ttl,
                             Duration lease, Duration wait) {
        String sql = "SELECT " + CLAIM_COLUMNS + " FROM idempotency.claim(?, ?::jsonb, ?, ?::interval, ?::interval"
            + (wait != null ? ", wait => ?::interval)" : ")");
        return query(c, sql, rs -> claimResult(rs), key, Json.encode(request), scope(scope),
            interval(ttl), interval(lease), wait != null ? interval(wait) : SKIP);
    }

    /** complete(key, fence, responseBody, responseCode, scope, ttl[, response_ttl => ...]). */
    public void complete(Connection c, String key, long fence, Object responseBody, int responseCode,
                         String scope, Duration ttl, Duration responseTtl) {
        String sql = "SELECT idempotency.complete(?, ?, ?::jsonb, ?, ?, ?::interval"
            + (responseTtl != null ? ", response_ttl => ?::interval)" : ")");
        query(c, sql, rs -> null, key, fence, Json.encode(responseBody), responseCode, scope(scope),
            interval(ttl), responseTtl != null ? interval(responseTtl) : SKIP);
    }

    /** fail(key, fence, error, responseCode, retryable, scope). */
    public void fail(Connection c, String key, long fence, Object error, int responseCode,
                     boolean retryable, String scope) {
        fail(c, key, fence, error, responseCode, retryable, scope, null, null);
    }

    /** fail with a ttl and response_ttl (a final failure only: retryable refuses them, 22023). */
    public void fail(Connection c, String key, long fence, Object error, int responseCode,
                     boolean retryable, String scope, Duration ttl, Duration responseTtl) {
        String sql = "SELECT idempotency.fail(?, ?, ?::jsonb, ?, ?, ?, ?::interval"
            + (responseTtl != null ? ", response_ttl => ?::interval)" : ")");
        query(c, sql, rs -> null, key, fence, Json.encode(error), responseCode, retryable, scope(scope),
            interval(ttl), responseTtl != null ? interval(responseTtl) : SKIP);
    }

    /** checkpoint(key, fence, recoveryPoint, lease, scope): records progress, extends the lease. */
    public void checkpoint(Connection c, String key, long fence, String recoveryPoint, Duration lease,
                           String scope) {
        query(c, "SELECT idempotency.checkpoint(?, ?, ?, ?::interval, ?)", rs -> null,
            key, fence, recoveryPoint, interval(lease), scope(scope));
    }

    /** release(key, fence, scope): deletes the key; the next claim gets claimed. */
    public void release(Connection c, String key, long fence, String scope) {
        query(c, "SELECT idempotency.release(?, ?, ?)", rs -> null, key, fence, scope(scope));
    }

    /** The key's row as JSON (to_jsonb of lookup's row), or null when absent or expired. */
    public String lookup(Connection c, String key, String scope) {
        return query(c, "SELECT CASE WHEN l IS NULL THEN NULL ELSE to_jsonb(l)::text END "
            + "FROM idempotency.lookup(?, ?) AS l", rs -> rs.getString(1), key, scope(scope));
    }

    /**
     * The key's expiry (doc/clients.md, "Expiry headers"), or null when the
     * key is absent or expired. Works before 1.6 (no response_expires_at).
     */
    public KeyExpiry keyExpiry(Connection c, String key, String scope) {
        return query(c, "SELECT to_timestamp(ceil(extract(epoch FROM k.expires_at))), "
            + "CASE WHEN k.answer_goes > clock_timestamp() "
            + "THEN to_timestamp(ceil(extract(epoch FROM k.answer_goes))) END "
            + "FROM (SELECT l.expires_at, "
            + "(to_jsonb(jsonb_populate_record(l, '{\"response_body\": null}')) "
            + "->> 'response_expires_at')::timestamptz AS answer_goes "
            + "FROM idempotency.lookup(?, ?) AS l WHERE l.idempotency_key IS NOT NULL) AS k",
            rs -> new KeyExpiry(instant(rs.getTimestamp(1)), instant(rs.getTimestamp(2))), key, scope(scope));
    }

    /** True when key has more characters than this session's idempotency.max_key_length (255 unset). */
    public boolean keyTooLong(Connection c, String key) {
        return query(c, "SELECT char_length(?) > coalesce(current_setting('idempotency.max_key_length', true)::int, 255)",
            rs -> rs.getBoolean(1), key);
    }

    /**
     * execute(key, request, statement, params, scope, ttl[, response_ttl, wait]):
     * statement is the application's fixed SQL text, never client input; its
     * values go in params ($1..$n, bound as text).
     */
    public ClaimResult execute(Connection c, String key, Object request, String statement, List<String> params,
                               String scope, Duration ttl, Duration responseTtl, Duration wait) {
        String sql = "SELECT " + CLAIM_COLUMNS + " FROM idempotency.execute(?, ?::jsonb, ?, ?::text[], ?, ?::interval"
            + (responseTtl != null ? ", response_ttl => ?::interval" : "")
            + (wait != null ? ", wait => ?::interval)" : ")");
        return query(c, sql, rs -> claimResult(rs), key, Json.encode(request), statement,
            textArray(c, params == null ? List.of() : params), scope(scope), interval(ttl),
            responseTtl != null ? interval(responseTtl) : SKIP, wait != null ? interval(wait) : SKIP);
    }

    // -------------------------------------------------------------- tokens

    /** issue_token(scope, ttl): a one-time token. */
    public UUID issueToken(Connection c, String scope, Duration ttl) {
        return query(c, "SELECT idempotency.issue_token(?, ?::interval)::text",
            rs -> UUID.fromString(rs.getString(1)), scope(scope), interval(ttl));
    }

    /** consume_token(token, scope): true exactly once per token. */
    public boolean consumeToken(Connection c, UUID token, String scope) {
        return query(c, "SELECT idempotency.consume_token(?::uuid, ?)", rs -> rs.getBoolean(1),
            token.toString(), scope(scope));
    }

    // --------------------------------------------------------- transitions

    /**
     * transition(table, keyColumn, key, stateColumn, from, to, setColumns):
     * table and columns are passed as values (regclass, name), never spliced.
     */
    public TransitionResult transition(Connection c, String table, String keyColumn, String key,
                                       String stateColumn, String fromState, String toState,
                                       Map<String, ?> setColumns) {
        return query(c, "SELECT outcome, current_state FROM idempotency.transition("
                + "?::regclass, ?::name, ?, ?::name, ?, ?, ?::jsonb)",
            rs -> new TransitionResult(TransitionResult.Outcome.valueOf(rs.getString(1).toUpperCase(java.util.Locale.ROOT)),
                rs.getString(2)),
            table, keyColumn, key, stateColumn, fromState, toState, Json.encode(setColumns));
    }

    // -------------------------------------------------------------- outbox

    /** enqueue_event(aggregateType, aggregateId, eventType, payload, headers) in c's transaction; its id. */
    public long enqueueEvent(Connection c, String aggregateType, String aggregateId, String eventType,
                             Object payload, Object headers) {
        return query(c, "SELECT idempotency.enqueue_event(?, ?, ?, ?::jsonb, ?::jsonb)", rs -> rs.getLong(1),
            aggregateType, aggregateId, eventType, Json.encode(payload), Json.encode(headers));
    }

    /** An event for {@link #enqueueEvents}; payload and headers are JSON values (headers may be null). */
    public record NewEvent(String aggregateType, String aggregateId, String eventType, Object payload, Object headers) {
    }

    /** enqueue_events: many events in one statement, in c's transaction; their ids in order. */
    public List<Long> enqueueEvents(Connection c, List<NewEvent> events) {
        List<String> types = new ArrayList<>(), ids = new ArrayList<>(), kinds = new ArrayList<>(),
            payloads = new ArrayList<>(), headers = new ArrayList<>();
        boolean anyHeaders = false;
        for (NewEvent e : events) {
            types.add(e.aggregateType());
            ids.add(e.aggregateId());
            kinds.add(e.eventType());
            payloads.add(Json.encode(e.payload()));
            headers.add(Json.encode(e.headers()));
            anyHeaders |= e.headers() != null;
        }
        return queryAll(c, "SELECT * FROM idempotency.enqueue_events(?::text[], ?::text[], ?::text[], "
                + "?::text[]::jsonb[], ?::text[]::jsonb[])", rs -> rs.getLong(1),
            textArray(c, types), textArray(c, ids), textArray(c, kinds), textArray(c, payloads),
            anyHeaders ? textArray(c, headers) : null);
    }

    /** claim_events(batch, lease): a batch leased under one lease token (READ COMMITTED, else 0A000). */
    public List<OutboxEvent> claimEvents(Connection c, int batch, Duration lease) {
        return queryAll(c, "SELECT id, aggregate_type, aggregate_id, event_type, payload::text, headers::text, "
                + "attempts, lease_token, created_at FROM idempotency.claim_events(?, ?::interval)",
            rs -> new OutboxEvent(rs.getLong(1), rs.getString(2), rs.getString(3), rs.getString(4),
                rs.getString(5), rs.getString(6), rs.getInt(7), rs.getLong(8),
                rs.getObject(9, OffsetDateTime.class)),
            batch, interval(lease));
    }

    /** mark_published(ids, leaseToken): how many were marked. */
    public int markPublished(Connection c, List<Long> ids, long leaseToken) {
        return query(c, "SELECT idempotency.mark_published(?::bigint[], ?)", rs -> rs.getInt(1),
            longArray(c, ids), leaseToken);
    }

    /** mark_failed(ids, error, leaseToken): backs them off (or dead-letters them); releases the lease. */
    public int markFailed(Connection c, List<Long> ids, String error, long leaseToken) {
        return query(c, "SELECT idempotency.mark_failed(?::bigint[], ?, ?)", rs -> rs.getInt(1),
            longArray(c, ids), error, leaseToken);
    }

    /** outbox_quiet_commits(): the relay's second look (doc/reference.md, "Waking relays"). */
    public long outboxQuietCommits(Connection c) {
        return query(c, "SELECT idempotency.outbox_quiet_commits()", rs -> rs.getLong(1));
    }

    // --------------------------------------------------------------- inbox

    /** process_once(consumer, eventId): true the first time, in c's transaction. */
    public boolean processOnce(Connection c, String consumer, String eventId) {
        return query(c, "SELECT idempotency.process_once(?, ?::text)", rs -> rs.getBoolean(1), consumer, eventId);
    }

    /** process_once(consumer, ids[]): the ids seen for the first time, in order. */
    public List<String> processOnce(Connection c, String consumer, List<String> eventIds) {
        return queryAll(c, "SELECT * FROM idempotency.process_once(?, ?::text[])", rs -> rs.getString(1),
            consumer, textArray(c, eventIds));
    }

    /**
     * Runs work and marks eventId processed for consumer in one transaction
     * on a connection of the DataSource: the first delivery runs work and
     * commits both; a later one (or a concurrent one, once the first commits)
     * does not run it and returns false. An exception from work rolls both
     * back and is rethrown (the event may be delivered again).
     */
    public boolean processOnce(String consumer, String eventId, Work<?> work) {
        return inTransaction(c -> {
            if (!processOnce(c, consumer, eventId)) {
                return false;
            }
            work.run(c);
            return true;
        });
    }

    // ------------------------------------------------------------- helpers

    /**
     * Runs work in a transaction on a connection of the DataSource: commits
     * when it returns, rolls back when it throws (SQLExceptions come out as
     * IdempotencyExceptions, other checked ones wrapped in a RuntimeException).
     */
    public <T> T inTransaction(Work<T> work) {
        try (Connection c = connection()) {
            boolean auto = c.getAutoCommit();
            c.setAutoCommit(false);
            try {
                T result = work.run(c);
                c.commit();
                return result;
            } catch (Throwable t) {
                try {
                    c.rollback();
                } catch (SQLException ignored) {
                    t.addSuppressed(ignored);
                }
                throw t;
            } finally {
                try {
                    c.setAutoCommit(auto);
                } catch (SQLException ignored) {
                    // a broken connection: the pool discards it
                }
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (SQLException e) {
            throw IdempotencyException.of(e);
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    /**
     * The installed extension's version (C edition or pg_tle: pg_extension;
     * the portable plain script: idempotency.plain_version). Throws
     * {@link IdempotencyException.ExtensionVersionException} when it is
     * missing or older than {@link #MIN_EXTENSION_VERSION}.
     */
    public String checkVersion() {
        try (Connection c = connection()) {
            return checkVersion(c);
        } catch (SQLException e) {
            throw IdempotencyException.of(e);
        }
    }

    /** checkVersion on c (one read-only statement). */
    public String checkVersion(Connection c) {
        String version = query(c, "SELECT coalesce((SELECT extversion FROM pg_catalog.pg_extension "
            + "WHERE extname = 'idempotency'), "
            + "CASE WHEN to_regclass('idempotency.plain_version') IS NOT NULL THEN "
            + "(xpath('/row/version/text()', "
            + "query_to_xml('SELECT version FROM idempotency.plain_version', false, true, '')))[1]::text END)",
            rs -> rs.getString(1));
        if (version == null) {
            throw new IdempotencyException.ExtensionVersionException(
                "the idempotency extension is not installed in this database (CREATE EXTENSION idempotency, "
                + "or the portable edition's script); pg-idempotency needs " + MIN_EXTENSION_VERSION + " or later");
        }
        if (compareVersions(version, MIN_EXTENSION_VERSION) < 0) {
            throw new IdempotencyException.ExtensionVersionException(
                "the idempotency extension in this database is version " + version + "; pg-idempotency needs "
                + MIN_EXTENSION_VERSION + " or later (ALTER EXTENSION idempotency UPDATE)");
        }
        return version;
    }

    /** a compared with b, as dotted numbers ("1.10" after "1.9"). */
    static int compareVersions(String a, String b) {
        String[] x = a.split("\\."), y = b.split("\\.");
        for (int i = 0; i < Math.max(x.length, y.length); i++) {
            int p = i < x.length ? leadingInt(x[i]) : 0, q = i < y.length ? leadingInt(y[i]) : 0;
            if (p != q) {
                return Integer.compare(p, q);
            }
        }
        return 0;
    }

    private static int leadingInt(String s) {
        int n = 0;
        for (char ch : s.toCharArray()) {
            if (ch < '0' || ch > '9') {
                break;
            }
            n = n * 10 + (ch - '0');
        }
        return n;
    }

    /**
     * A connection of the DataSource for the package's own transactions:
     * until it is closed its prepareThreshold is 0, so that pgjdbc sends
     * its statements, BEGIN, COMMIT and ROLLBACK unnamed, as a transaction
     * pooler needs (see above); close() restores the threshold and gives it
     * back. A connection of another driver is returned as it is.
     */
    public Connection connection() throws SQLException {
        Connection c = dataSource.getConnection();
        if (!c.isWrapperFor(PGConnection.class)) {
            return c;
        }
        PGConnection pg = c.unwrap(PGConnection.class);
        int threshold = pg.getPrepareThreshold();
        if (threshold == 0) {
            return c;
        }
        pg.setPrepareThreshold(0);
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
                if (method.getName().equals("close") && args == null) {
                    pg.setPrepareThreshold(threshold);
                }
                try {
                    return method.invoke(c, args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    /** A Duration as an interval's text (microseconds); null stays null. */
    static String interval(Duration d) {
        return d == null ? null : (d.toNanos() / 1000) + " microseconds";
    }

    private static String scope(String scope) {
        return scope == null ? "" : scope;
    }

    private static java.time.Instant instant(Timestamp t) {
        return t == null ? null : t.toInstant();
    }

    private static ClaimResult claimResult(ResultSet rs) throws SQLException {
        long fence = rs.getLong(2);
        Long fenceOrNull = rs.wasNull() ? null : fence;
        int code = rs.getInt(4);
        Integer codeOrNull = rs.wasNull() ? null : code;
        int attempts = rs.getInt(7);
        Integer attemptsOrNull = rs.wasNull() ? null : attempts;
        double retry = rs.getDouble(8);
        Duration retryAfter = rs.wasNull() ? null : Duration.ofNanos((long) (retry * 1e9));
        return new ClaimResult(ClaimOutcome.of(rs.getString(1)), fenceOrNull, rs.getString(3), codeOrNull,
            rs.getString(5), rs.getString(6), attemptsOrNull, retryAfter);
    }

    private static Array textArray(Connection c, List<String> values) {
        try {
            return c.createArrayOf("text", values.toArray());
        } catch (SQLException e) {
            throw IdempotencyException.of(e);
        }
    }

    private static Array longArray(Connection c, List<Long> values) {
        try {
            return c.createArrayOf("int8", values.toArray());
        } catch (SQLException e) {
            throw IdempotencyException.of(e);
        }
    }

    /** A parameter left out (an argument of 1.6 sent by name only when set). */
    private static final Object SKIP = new Object();

    @FunctionalInterface
    private interface Row<T> {
        T read(ResultSet rs) throws SQLException;
    }

    private static <T> T query(Connection c, String sql, Row<T> row, Object... params) {
        List<T> rows = queryAll(c, sql, row, params);
        return rows.isEmpty() ? null : rows.get(0);
    }

    private static <T> List<T> queryAll(Connection c, String sql, Row<T> row, Object... params) {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            if (ps.isWrapperFor(PGStatement.class)) {
                ps.unwrap(PGStatement.class).setPrepareThreshold(0);     // unnamed: see the class's comment
            }
            int i = 1;
            for (Object p : params) {
                if (p != SKIP) {
                    ps.setObject(i++, p);
                }
            }
            try (ResultSet rs = ps.executeQuery()) {
                List<T> out = new ArrayList<>();
                while (rs.next()) {
                    out.add(row.read(rs));
                }
                return out;
            }
        } catch (SQLException e) {
            throw IdempotencyException.of(e);
        }
    }
}
