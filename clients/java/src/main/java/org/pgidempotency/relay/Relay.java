package org.pgidempotency.relay;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.pgidempotency.Idempotency;
import org.pgidempotency.IdempotencyException;
import org.pgidempotency.OutboxEvent;
import org.postgresql.PGConnection;

/**
 * The outbox relay (doc/clients.md, "The relay"; doc/reference.md, "Waking
 * relays"). {@link #run()} keeps one connection of the DataSource in
 * autocommit, LISTENs on idempotency_outbox, claims batches with
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
 */
public final class Relay implements Runnable {
    private static final Logger LOG = Logger.getLogger("org.pgidempotency.relay");
    /** The notification channel of enqueue_event. */
    public static final String CHANNEL = "idempotency_outbox";
    /** Twice idempotency.outbox_notify_interval. */
    static final long SECOND_LOOK_MILLIS = 20;

    private final Idempotency idem;
    private final Publisher publisher;
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
            try (Connection c = idem.dataSource().getConnection()) {
                c.setAutoCommit(true);
                try (Statement s = c.createStatement()) {
                    s.execute("LISTEN " + CHANNEL);
                }
                backoff = 100;
                loop(c);
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

    private void loop(Connection c) throws SQLException {
        PGConnection pg = c.unwrap(PGConnection.class);
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
