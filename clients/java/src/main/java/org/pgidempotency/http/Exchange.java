package org.pgidempotency.http;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.pgidempotency.ClaimOutcome;
import org.pgidempotency.ClaimResult;
import org.pgidempotency.Idempotency;
import org.pgidempotency.IdempotencyException;
import org.pgidempotency.KeyExpiry;

/**
 * One keyed request, whatever the framework: the behaviour table of
 * doc/clients.md, shared by {@link IdempotencyFilter} and the @Idempotent
 * interceptor.
 *
 * <pre>
 *   key empty, over 400 characters, control characters   400 problem+json, before any query
 *   claim raises 22023 and the key is over the session's   400 problem+json (another 22023 is thrown)
 *     idempotency.max_key_length
 *   claimed / resumed                    the handler runs; its answer is stored (complete / fail)
 *   replay                               the stored answer + Idempotent-Replayed: true
 *   gone (1.6)                           410 problem+json; the handler does not run again
 *   in_progress (wait ran out)           409 problem+json, Retry-After (seconds, rounded up, at least 1)
 *   mismatch                             422 problem+json
 *   handler answers 5xx or throws        fail(retryable); the handler's answer, or 500 problem+json
 *   lease lost (55000) at complete/fail  409 problem+json, Retry-After: 1
 *   answer over max_response_bytes       500 problem+json; fail(retryable)
 *   claim raises another error           thrown (55000 / 0A000 of wait: the server's configuration)
 * </pre>
 *
 * Every answer that follows a claim carries Idempotency-Key-Expires and,
 * while the answer is kept for less than the key, Idempotency-Replay-Expires.
 * Outside one-transaction mode no connection is held while the handler runs.
 */
public final class Exchange {
    private static final Logger LOG = Logger.getLogger("org.pgidempotency");
    private static final DateTimeFormatter HTTP_DATE =
        DateTimeFormatter.ofPattern("EEE, dd MMM yyyy HH:mm:ss 'GMT'", Locale.US).withZone(ZoneOffset.UTC);

    /**
     * The claims that sleep with wait, per DataSource. A sleeping claim
     * keeps its connection, and a holder needs one for its handler's
     * queries and to store its answer: were every connection of the pool
     * asleep in a claim, the holder would wait until its lease ran out and
     * a waiter took the key over, running the request twice. The server
     * lets one claim per key sleep (idempotency.max_waiters_per_key); this
     * bounds the sleepers of all keys to the pool's size minus one, so a
     * connection is always left for the holders. The size is the one the
     * pool reports (POOL_SIZE); a DataSource that reports none (pgjdbc's
     * opens a connection per call) is not bounded here. A duplicate past
     * the bound claims without wait: 409 with Retry-After at once. The
     * wait never outlasts the holder's lease: the server wakes the waiter
     * when the lease runs out. Behind a transaction pooler the connections a
     * sleeper keeps are the pooler's server connections (the policy's
     * serverConnections, when set and fewer).
     */
    private static final Map<DataSource, AtomicInteger> SLEEPERS = Collections.synchronizedMap(new WeakHashMap<>());
    /** How pools report their size: HikariCP, DBCP 2, tomcat-jdbc, c3p0. */
    private static final List<String> POOL_SIZE =
        List.of("getMaximumPoolSize", "getMaxTotal", "getMaxActive", "getMaxPoolSize");
    /**
     * How long the holder's store waits for a connection in all, trying
     * again after a refusal: its handler's side effect has run, and an
     * answer not stored lets a retry run it again once the lease (by
     * default 30 s) is out.
     */
    private static final Duration STORE_PATIENCE = Duration.ofSeconds(30);

    private final Idempotency idem;
    private final Policy policy;

    private final boolean logFailures;

    public Exchange(Idempotency idem, Policy policy) {
        this(idem, policy, true);
    }

    /** logFailures: log the handler's exception (the filter's, whose answer is a 500; not for a caller that rethrows it). */
    public Exchange(Idempotency idem, Policy policy, boolean logFailures) {
        this.idem = idem;
        this.policy = policy;
        this.logFailures = logFailures;
    }

    /** The pool's size as it reports it, or 0 when it does not. */
    static int poolSize(DataSource ds) {
        for (String name : POOL_SIZE) {
            try {
                Object size = ds.getClass().getMethod(name).invoke(ds);
                if (size instanceof Integer n) {
                    return n;
                }
            } catch (ReflectiveOperationException | RuntimeException e) {
                // not this pool's way
            }
        }
        return 0;
    }

    private static boolean enterWait(DataSource ds, int servers) {
        int size = poolSize(ds);
        if (servers > 0 && (size == 0 || servers < size)) {
            size = servers;
        }
        AtomicInteger n = SLEEPERS.computeIfAbsent(ds, k -> new AtomicInteger());
        if (n.incrementAndGet() > size - 1 && size > 0) {
            n.decrementAndGet();
            return false;
        }
        return true;
    }

    private static void leaveWait(DataSource ds) {
        SLEEPERS.get(ds).decrementAndGet();
    }

    /** A connection for the holder's store: refusals are tried again for STORE_PATIENCE. */
    private Connection storeConnection() throws SQLException {
        long until = System.nanoTime() + STORE_PATIENCE.toNanos();
        while (true) {
            try {
                return idem.connection();
            } catch (SQLException e) {
                if (System.nanoTime() > until) {
                    throw e;
                }
                LOG.log(Level.WARNING, "no connection to store the answer yet; trying again", e);
                try {
                    Thread.sleep(50);
                } catch (InterruptedException i) {
                    Thread.currentThread().interrupt();
                    throw e;
                }
            }
        }
    }

    /** What the handler learns about the key it holds (recoveryPoint: where a resumed run may start). */
    public record Holding(String key, String scope, long fence, ClaimOutcome outcome, String recoveryPoint,
                          int attempts, Connection connection) {
    }

    /** The handler: runs the request, given the key it holds, and answers. */
    @FunctionalInterface
    public interface Handler {
        Answer handle(Holding holding) throws Exception;
    }

    /**
     * The result: the answer to send, the claim's outcome (null when no claim
     * was made), and the handler's exception, if it threw.
     */
    public record Result(Answer answer, ClaimOutcome outcome, Throwable failure) {
    }

    public static Answer invalidKey(String detail) {
        return Answer.problem(400, "Invalid Idempotency-Key", detail);
    }

    public static Answer missingKey() {
        return Answer.problem(400, "Idempotency-Key is missing", "This operation requires an Idempotency-Key header.");
    }

    public static Answer unauthenticated() {
        return Answer.problem(401, "Unauthenticated", "Idempotency keys belong to an authenticated caller.");
    }

    public static Answer scopeFailed(Throwable e) {
        LOG.log(Level.SEVERE, "idempotency scope function failed", e);
        return Answer.problem(500, "Internal Server Error",
            "The request's idempotency scope could not be computed; nothing was done.");
    }

    /** An HTTP date (IMF-fixdate). */
    public static String httpDate(Instant at) {
        return HTTP_DATE.format(at);
    }

    /** Runs one keyed request; request is its fingerprint (any JSON value). */
    public Result run(String key, String scope, Object request, Handler handler) throws SQLException {
        String bad = KeyRules.problem(key);
        if (bad != null) {
            return new Result(invalidKey(bad), null, null);
        }
        if (scope == null) {
            return new Result(unauthenticated(), null, null);
        }
        DataSource ds = idem.dataSource();
        Connection c = idem.connection();
        try {
            c.setAutoCommit(false);
            ClaimResult claim;
            boolean waiting = policy.holderWait() != null && enterWait(ds, policy.serverConnections());
            try {
                claim = idem.claim(c, key, request, scope, policy.ttl(), policy.lease(),
                    waiting ? policy.holderWait() : null);
            } catch (IdempotencyException e) {
                c.rollback();
                if (e instanceof IdempotencyException.InvalidParameterException) {
                    boolean tooLong = idem.keyTooLong(c, key);
                    c.rollback();
                    if (tooLong) {
                        return new Result(invalidKey("The key is longer than idempotency.max_key_length characters."),
                            null, null);
                    }
                }
                throw e;
            } finally {
                if (waiting) {
                    leaveWait(ds);
                }
            }
            if (!claim.holds()) {
                Answer answer = answerFor(claim).with(expiryHeaders(c, key, scope));
                c.commit();
                return new Result(answer, claim.outcome(), null);
            }
            if (!policy.oneTransaction()) {
                c.commit();
                c.close();
                c = null;
            }
            Answer answer;
            Throwable failure = null;
            try {
                answer = handler.handle(new Holding(key, scope, claim.fence(), claim.outcome(),
                    claim.recoveryPoint() == null ? "started" : claim.recoveryPoint(),
                    claim.attempts() == null ? 1 : claim.attempts().intValue(), c));
            } catch (Exception e) {
                answer = Answer.problem(500, "Internal Server Error", "The request failed; it may be retried.");
                failure = e;
            }
            if (c == null) {
                c = storeConnection();
                c.setAutoCommit(false);
            }
            answer = store(c, key, scope, claim.fence(), answer);
            answer = answer.with(expiryHeaders(c, key, scope));
            c.commit();
            if (failure != null && logFailures) {
                LOG.log(Level.SEVERE, "idempotent handler failed", failure);
            }
            return new Result(answer, claim.outcome(), failure);
        } catch (SQLException | RuntimeException e) {
            if (c != null) {
                try {
                    c.rollback();
                } catch (SQLException r) {
                    e.addSuppressed(r);
                }
            }
            throw e;
        } finally {
            if (c != null) {
                c.close();
            }
        }
    }

    /** complete or fail the held key with the handler's answer; the answer to send. */
    private Answer store(Connection c, String key, String scope, long fence, Answer answer) throws SQLException {
        try {
            if (answer.status() >= 500) {
                c.rollback();
                if (!policy.oneTransaction()) {
                    idem.fail(c, key, fence, answer.stored(policy.storedHeaders()), answer.status(), true, scope);
                }
            } else {
                idem.complete(c, key, fence, answer.stored(policy.storedHeaders()), answer.status(), scope,
                    policy.ttl(), policy.responseTtl());
            }
            c.commit();
            return answer;
        } catch (IdempotencyException.LeaseLostException e) {
            c.rollback();
            return Answer.problem(409, "Idempotency-Key lease lost", "Another request holds this key now.",
                List.of(Map.entry("Retry-After", "1")));
        } catch (IdempotencyException.ResponseTooLargeException e) {
            c.rollback();
            if (!policy.oneTransaction()) {
                idem.fail(c, key, fence, null, 500, true, scope);
                c.commit();
            }
            return Answer.problem(500, "Response too large to store",
                "The answer exceeds idempotency.max_response_bytes; it was not kept.");
        }
    }

    /** The expiry headers of the key as it is now; none when it is absent or the read fails. */
    private List<Map.Entry<String, String>> expiryHeaders(Connection c, String key, String scope) throws SQLException {
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        if (policy.keyExpiresHeader() == null && policy.replayExpiresHeader() == null) {
            return headers;
        }
        KeyExpiry expiry;
        try {
            expiry = idem.keyExpiry(c, key, scope);
        } catch (IdempotencyException e) {
            LOG.log(Level.WARNING, "idempotency key expiry not read", e);
            c.rollback();
            return headers;
        }
        if (expiry != null && policy.keyExpiresHeader() != null) {
            headers.add(Map.entry(policy.keyExpiresHeader(), httpDate(expiry.expiresAt())));
        }
        if (expiry != null && expiry.responseExpiresAt() != null && policy.replayExpiresHeader() != null) {
            headers.add(Map.entry(policy.replayExpiresHeader(), httpDate(expiry.responseExpiresAt())));
        }
        return headers;
    }

    /** The answer of a claim that does not hold the key. */
    public static Answer answerFor(ClaimResult claim) {
        return switch (claim.outcome()) {
            case REPLAY -> Answer.replayed(claim.responseCode() == null ? 200 : claim.responseCode(),
                claim.responseBody());
            case GONE -> Answer.problem(410, "The answer to this Idempotency-Key is gone",
                "The request was processed and its answer is no longer kept; it does not run again. "
                + "Use a new key to send it again.");
            case IN_PROGRESS -> Answer.problem(409, "A request with this Idempotency-Key is being processed",
                "Retry after the time given in Retry-After.",
                List.of(Map.entry("Retry-After", Long.toString(claim.retryAfterSeconds()))));
            case MISMATCH -> Answer.problem(422, "Idempotency-Key reused with another request",
                "This key was used for a different request; use a new key.");
            default -> throw new IllegalStateException("the caller holds the key: " + claim.outcome());
        };
    }
}
