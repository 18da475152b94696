package org.pgidempotency.relay;

import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.pgidempotency.Idempotency;
import org.pgidempotency.IdempotencyException;
import org.pgidempotency.OutboxEvent;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * The outbox relay (doc/clients.md, "The relay"; doc/reference.md, "Waking
 * relays"). {@link #run()} keeps one connection of the DataSource in
 * autocommit, LISTENs on idempotency_outbox (on that connection, or on one
 * of {@link #listenOn}'s), claims batches with
 * claim_events until none is left, looks again twice
 * idempotency.outbox_notify_interval later (outbox_quiet_commits), then
 * waits for a notification (pgjdbc's getNotifications) or the poll timer.
 * It publishes each batch in id order through the {@link Publisher} and
 * marks it under the batch's lease token; after a failure the later events
 * of that aggregate are left in this batch so they never overtake it.
 * {@link #stop()} (call it from a shutdown hook) finishes the event in hand
 * and hands the rest of the batch back with mark_failed ("relay stopped"),
 * which releases their lease. A database error is retried with exponential
 * backoff; an Error thrown by the publisher ends run() without marks (the
 * lease runs out and another relay takes the events).
 *
 * <p>Behind a transaction pooler a LISTEN runs on whichever server session
 * the pooler lends it, and a notification reaches that session while it
 * serves another client, or none (PgBouncer drops it): the relay would
 * never be woken. So once it LISTENs, the relay LISTENs on a channel of
 * its own too, notifies it from another connection (a notification of the
 * listening session's own would come back to it through the pooler as
 * well) and waits up to PROBE_WAIT for it; when it does not come the relay
 * logs so, once per relay, and polls at its interval. {@link #listenOn}
 * gives it a direct or session-mode connection for LISTEN instead.
 */
public final class Relay implements Runnable {
    private static final Logger LOG = Logger.getLogger("org.pgidempotency.relay");
    /** The notification channel of enqueue_event. */
    public static final String CHANNEL = "idempotency_outbox";
    /** Twice idempotency.outbox_notify_interval. */
    static final long SECOND_LOOK_MILLIS = 20;
    /** How long the relay waits for its own notification. */
    static final Duration PROBE_WAIT = Duration.ofSeconds(2);

    private final Idempotency idem;
    private final Publisher publisher;
    private final AtomicBoolean probed = new AtomicBoolean();
    private DataSource listenOn;
    private volatile boolean stopping;
    private int batch = 100;
    private Duration lease = Duration.ofSeconds(30);
    private Duration poll = Duration.ofSeconds(1);
    private Duration maxBackoff = Duration.ofSeconds(30);
    private long published;
    private long failed;

    public Relay(DataSource dataSource, Publisher publisher) {
        this(new Idempotency(dataSource), publisher);
    }

    public Relay(Idempotency idem, Publisher publisher) {
        this.idem = idem;
        this.publisher = publisher;
    }

    /** Events per claim_events (100). */
    public Relay batch(int n) { this.batch = n; return this; }
    /** The batch's lease (30 seconds): how long before another relay may take it. */
    public Relay lease(Duration d) { this.lease = d; return this; }
    /** The idle timer (1 second). */
    public Relay poll(Duration d) { this.poll = d; return this; }
    /** The longest wait between reconnects (30 seconds). */
    public Relay maxBackoff(Duration d) { this.maxBackoff = d; return this; }
    /**
     * A DataSource of a direct or session-mode address for LISTEN (one
     * connection kept); without it the relay LISTENs on its claiming
     * connection, which behind a transaction pooler gets no notification.
     */
    public Relay listenOn(DataSource ds) { this.listenOn = ds; return this; }

    /** Events marked published so far. */
    public synchronized long published() { return published; }
    /** Events marked failed so far. */
    public synchronized long failed() { return failed; }

    /** Asks run() to stop after the event in hand; the rest of the batch is handed back. */
    public void stop() {
        stopping = true;
    }

    /** Runs until stop(); reconnects with backoff after database errors. */
    @Override
    public void run() {
        long backoff = 100;
        while (!stopping) {
            try (Connection c = idem.connection();
                 Connection own = listenOn == null ? null : listenOn.getConnection()) {
                Connection listener = own == null ? c : own;
                c.setAutoCommit(true);
                listener.setAutoCommit(true);
                execute(listener, "LISTEN " + CHANNEL);
                if (!probed.getAndSet(true)) {
                    probe(listener);
                }
                backoff = 100;
                loop(c, listener.unwrap(PGConnection.class));
            } catch (SQLException | IdempotencyException e) {
                if (stopping) {
                    break;
                }
                LOG.log(Level.WARNING, "relay: " + e.getMessage() + "; retrying in " + backoff + " ms");
                sleep(backoff);
                backoff = Math.min(backoff * 2, maxBackoff.toMillis());
            }
        }
    }

    /** Claims and publishes one batch on an autocommit connection; how many events it claimed. */
    public int runOnce(Connection c) {
        List<OutboxEvent> events = idem.claimEvents(c, batch, lease);
        if (events.isEmpty()) {
            return 0;
        }
        long token = events.get(0).leaseToken();
        List<Long> done = new ArrayList<>(), bad = new ArrayList<>(), left = new ArrayList<>();
        Set<String> blocked = new HashSet<>();
        String error = "error";
        for (OutboxEvent e : events) {
            String aggregate = e.aggregateType() + "\u0000" + e.aggregateId();
            if (stopping) {
                left.add(e.id());
            } else if (!blocked.contains(aggregate)) {
                try {
                    publisher.publish(e);
                    done.add(e.id());
                } catch (Exception x) {
                    bad.add(e.id());
                    blocked.add(aggregate);
                    error = x.getMessage() == null ? x.getClass().getSimpleName() : x.getMessage();
                }
            }
        }
        if (!done.isEmpty()) {
            int n = idem.markPublished(c, done, token);
            synchronized (this) { published += n; }
        }
        if (!bad.isEmpty()) {
            int n = idem.markFailed(c, bad, error, token);
            synchronized (this) { failed += n; }
        }
        if (!left.isEmpty()) {
            idem.markFailed(c, left, "relay stopped", token);
        }
        return events.size();
    }

    private static void execute(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute(sql);
        }
    }

    /** Checks that a notification reaches the listener (see the class's comment); says once when none does. */
    private void probe(Connection listener) throws SQLException {
        byte[] random = new byte[8];
        new SecureRandom().nextBytes(random);
        String channel = "idempotency_relay_" + HexFormat.of().formatHex(random);
        PGConnection pg = listener.unwrap(PGConnection.class);
        execute(listener, "LISTEN " + channel);
        try {
            try (Connection other = idem.connection()) {
                other.setAutoCommit(true);
                execute(other, "SELECT pg_notify('" + channel + "', '')");
            } catch (SQLException e) {      // no second connection (a pool of one): the relay runs on unchecked
                LOG.log(Level.WARNING, "relay: pg_notify of the notification probe: " + e.getMessage());
                return;
            }
            long deadline = System.nanoTime() + PROBE_WAIT.toNanos();
            while (!stopping && System.nanoTime() < deadline) {
                long left = Math.max(1, Math.min(100, (deadline - System.nanoTime()) / 1_000_000));
                PGNotification[] notes = pg.getNotifications((int) left);
                // an outbox notification meanwhile is no loss: the first claims come next
                for (PGNotification n : notes == null ? new PGNotification[0] : notes) {
                    if (n.getName().equals(channel)) {
                        return;
                    }
                }
            }
            if (!stopping) {
                long ms = poll.toMillis();
                LOG.warning("relay: notifications do not reach this connection (a transaction pooler?); polling every "
                    + (ms % 1000 == 0 ? ms / 1000 + "s" : ms + "ms")
                    + "; give the relay a direct or session-mode connection for LISTEN");
            }
        } finally {
            execute(listener, "UNLISTEN " + channel);
        }
    }

    private void loop(Connection c, PGConnection pg) throws SQLException {
        while (!stopping) {
            while (runOnce(c) > 0 && !stopping) {
                // drain
            }
            // the second look of doc/reference.md, "Waking relays"
            while (!stopping) {
                sleep(SECOND_LOOK_MILLIS);
                long quiet = idem.outboxQuietCommits(c);
                if (runOnce(c) > 0) {
                    break;
                }
                if (quiet == 0) {
                    await(pg);
                    break;
                }
            }
        }
    }

    /** Waits for a notification, the poll timer or stop(). */
    private void await(PGConnection pg) throws SQLException {
        long deadline = System.nanoTime() + poll.toNanos();
        while (!stopping && System.nanoTime() < deadline) {
            long left = Math.max(1, Math.min(100, (deadline - System.nanoTime()) / 1_000_000));
            var notes = pg.getNotifications((int) left);
            if (notes != null && notes.length > 0) {
                return;
            }
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
