package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.ResultSet;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.pgidempotency.relay.Publisher;
import org.pgidempotency.relay.Relay;

/** The outbox relay: kill and take-over, clean hand-back, the wake-up rule, failures. */
class RelayTest {
    static Idempotency idem;

    /** What a crash looks like to the relay: an Error out of the publisher, no marks. */
    static class Killed extends Error {
        private static final long serialVersionUID = 1L;
    }

    @BeforeAll
    static void setUp() {
        idem = new Idempotency(Db.dataSource());
        Db.exec(idem.dataSource(), "CREATE TABLE IF NOT EXISTS java_relay_sink (n bigserial, consumer text, "
            + "aggregate text, seq int, event_id bigint)");
    }

    /** Enqueues count events of type, round robin over aggregates, payload {"seq": n} per aggregate. */
    static List<Long> enqueue(String type, int aggregates, int count) {
        return idem.inTransaction(c -> {
            List<Long> ids = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                ids.add(idem.enqueueEvent(c, type, "agg-" + (i % aggregates), "step", Map.of("seq", i / aggregates), null));
            }
            return ids;
        });
    }

    /** The consumer: processOnce writes the event into the sink once, whatever the deliveries. */
    static void consume(String consumer, OutboxEvent e) {
        idem.processOnce(consumer, Long.toString(e.id()), c -> {
            try (var s = c.prepareStatement("INSERT INTO java_relay_sink (consumer, aggregate, seq, event_id) "
                + "VALUES (?, ?, ?, ?)")) {
                s.setString(1, consumer);
                s.setString(2, e.aggregateId());
                s.setInt(3, Json.parse(e.payload()).get("seq").asInt());
                s.setLong(4, e.id());
                s.executeUpdate();
            }
            return null;
        });
    }

    static long count(String sql) {
        return ((Number) Db.value(idem.dataSource(), sql)).longValue();
    }

    static Thread start(Relay relay, String name) {
        Thread t = new Thread(relay, name);
        t.setUncaughtExceptionHandler((th, ex) -> { });
        t.start();
        return t;
    }

    /** The relay's lines that notifications do not arrive, while open. */
    static final class ProbeLines extends Handler implements AutoCloseable {
        final List<String> lines = java.util.Collections.synchronizedList(new ArrayList<>());
        final Logger log = Logger.getLogger("org.pgidempotency.relay");

        ProbeLines() {
            log.addHandler(this);
        }

        @Override
        public void publish(LogRecord r) {
            if (r.getMessage().contains("notifications do not reach this connection")) {
                lines.add(r.getMessage());
            }
        }

        @Override public void flush() { }

        @Override
        public void close() {
            log.removeHandler(this);
        }
    }

    static void waitFor(java.util.function.BooleanSupplier done, long millis) throws InterruptedException {
        long end = System.currentTimeMillis() + millis;
        while (!done.getAsBoolean() && System.currentTimeMillis() < end) {
            Thread.sleep(50);
        }
    }

    @Test
    void aRelayKilledMidBatchIsFinishedByAnother() throws Exception {
        String type = Db.unique("java-kill");
        String consumer = type;
        List<Long> ids = enqueue(type, 3, 30);
        AtomicInteger seen = new AtomicInteger();
        Publisher dies = e -> {
            if (e.aggregateType().equals(type)) {
                if (seen.incrementAndGet() == 12) {
                    throw new Killed();
                }
                consume(consumer, e);
            }
        };
        Thread first = start(new Relay(idem, dies).lease(Duration.ofSeconds(1)).poll(Duration.ofMillis(200))
            .listenOn(Db.listenDataSource()), "relay-1");
        first.join(10_000);
        assertEquals(11L, count("SELECT count(*) FROM java_relay_sink WHERE consumer = '" + consumer + "'"));
        assertEquals(0L, count("SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_type = '" + type
            + "' AND published_at IS NOT NULL"), "the killed relay marked nothing");

        Relay second = new Relay(idem, e -> {
            if (e.aggregateType().equals(type)) {
                consume(consumer, e);
            }
        }).lease(Duration.ofSeconds(1)).poll(Duration.ofMillis(200)).listenOn(Db.listenDataSource());
        Thread t = start(second, "relay-2");
        waitFor(() -> count("SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_type = '" + type
            + "' AND published_at IS NULL") == 0, 20_000);
        second.stop();
        t.join(10_000);
        assertTrue(!t.isAlive());
        assertOnceInOrder(consumer, 3, 10);
        assertEquals(30, ids.size());
    }

    /** Each of the consumer's events received once, aggregates x perAggregate, each aggregate's in order. */
    static void assertOnceInOrder(String consumer, int aggregates, int perAggregate) {
        long n = (long) aggregates * perAggregate;
        assertEquals(n, count("SELECT count(DISTINCT event_id) FROM java_relay_sink WHERE consumer = '" + consumer + "'"));
        assertEquals(n, count("SELECT count(*) FROM java_relay_sink WHERE consumer = '" + consumer + "'"));
        Map<String, List<Integer>> order = new HashMap<>();
        idem.inTransaction(c -> {
            try (var s = c.prepareStatement("SELECT aggregate, seq, event_id FROM java_relay_sink WHERE consumer = ? ORDER BY n")) {
                s.setString(1, consumer);
                try (ResultSet rs = s.executeQuery()) {
                    while (rs.next()) {
                        order.computeIfAbsent(rs.getString(1), k -> new ArrayList<>()).add(rs.getInt(2));
                    }
                }
            }
            return null;
        });
        assertEquals(aggregates, order.size());
        for (List<Integer> seqs : order.values()) {
            assertEquals(java.util.stream.IntStream.range(0, perAggregate).boxed().toList(), seqs);
        }
    }

    @Test
    void stopHandsTheRestBack() throws Exception {
        String type = Db.unique("java-stop");
        enqueue(type, 1, 5);
        Relay[] relay = new Relay[1];
        AtomicInteger seen = new AtomicInteger();
        relay[0] = new Relay(idem, e -> {
            if (e.aggregateType().equals(type) && seen.incrementAndGet() == 2) {
                relay[0].stop();      // a shutdown hook, say: the event in hand is finished
            }
        }).poll(Duration.ofMillis(200)).listenOn(Db.listenDataSource());
        Thread t = start(relay[0], "relay-stop");
        t.join(10_000);
        assertTrue(!t.isAlive());
        assertEquals(2L, count("SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_type = '" + type
            + "' AND published_at IS NOT NULL"));
        // the rest: handed back under the lease token, the lease released
        assertEquals(3L, count("SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_type = '" + type
            + "' AND published_at IS NULL AND last_error = 'relay stopped' AND attempts = 1"
            + " AND (locked_until IS NULL OR locked_until <= now())"));
    }

    @Test
    void aNotificationWakesAnIdleRelay() throws Exception {
        String type = Db.unique("java-wake");
        List<Long> published = java.util.Collections.synchronizedList(new ArrayList<>());
        Relay relay = new Relay(idem, e -> {
            if (e.aggregateType().equals(type)) {
                published.add(System.nanoTime());
            }
        }).poll(Duration.ofSeconds(60)).listenOn(Db.listenDataSource());   // direct, behind a pooler
        ProbeLines probe = new ProbeLines();
        Thread t = start(relay, "relay-wake");
        Thread.sleep(700);      // idle: past the probe and the second look, waiting for a notification
        long sent = System.nanoTime();
        enqueue(type, 1, 1);
        waitFor(() -> !published.isEmpty(), 5_000);
        relay.stop();
        t.join(10_000);
        assertEquals(1, published.size());
        long ms = (published.get(0) - sent) / 1_000_000;
        assertTrue(ms < 3_000, "woken after " + ms + " ms, not by the 60 s poll");
        probe.close();
        assertEquals(List.of(), probe.lines, "notifications arrive on this connection");
    }

    /**
     * Without a LISTEN connection of its own: through a transaction pooler
     * (PGIDEM_POOLER) the relay says once that notifications do not arrive,
     * and polling delivers every event once, each aggregate's in order; on
     * a direct connection it says nothing.
     */
    @Test
    void withoutNotificationsItPolls() throws Exception {
        String type = Db.unique("java-poll");
        Relay relay = new Relay(idem, e -> {
            if (e.aggregateType().equals(type)) {
                consume(type, e);
            }
        }).poll(Duration.ofMillis(300));
        try (ProbeLines probe = new ProbeLines()) {
            Thread t = start(relay, "relay-poll");
            enqueue(type, 3, 30);
            waitFor(() -> count("SELECT count(*) FROM java_relay_sink WHERE consumer = '" + type + "'") == 30, 20_000);
            relay.stop();
            t.join(10_000);
            assertOnceInOrder(type, 3, 10);
            assertEquals(Db.behindPooler() ? 1 : 0, probe.lines.size(), String.valueOf(probe.lines));
        }
    }

    @Test
    void aFailureHoldsBackItsAggregateOnly() throws Exception {
        String type = Db.unique("java-fail");
        enqueue(type, 2, 4);          // agg-0: seq 0, 1; agg-1: seq 0, 1
        List<String> delivered = java.util.Collections.synchronizedList(new ArrayList<>());
        Relay relay = new Relay(idem, e -> {
            if (!e.aggregateType().equals(type)) {
                return;
            }
            if (e.aggregateId().equals("agg-0")) {
                throw new IllegalStateException("broker down");
            }
            delivered.add(e.aggregateId() + "/" + Json.parse(e.payload()).get("seq").asInt());
        }).poll(Duration.ofMillis(200));
        Connection c = idem.dataSource().getConnection();
        try {
            c.setAutoCommit(true);
            relay.runOnce(c);
        } finally {
            c.close();
        }
        assertEquals(List.of("agg-1/0", "agg-1/1"), delivered);
        assertEquals(1L, count("SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_type = '" + type
            + "' AND last_error = 'broker down'"));
        assertEquals(2L, count("SELECT count(*) FROM idempotency.outbox_events WHERE aggregate_type = '" + type
            + "' AND aggregate_id = 'agg-0' AND published_at IS NULL"));
        assertTrue(relay.failed() >= 1);
    }

}
