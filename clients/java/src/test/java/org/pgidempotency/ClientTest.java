package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The JDBC client: every function of the contract, typed results, SQLSTATEs as exceptions. */
class ClientTest {
    static Idempotency idem;

    @BeforeAll
    static void setUp() {
        idem = new Idempotency(Db.dataSource());
    }

    @Test
    void versionIsCheckedAtStartUp() {
        // the version being built (idempotency.control's, which both editions install)
        assertEquals(Db.value(Db.dataSource(),
            "SELECT default_version FROM pg_available_extensions WHERE name = 'idempotency'"), idem.checkVersion());
        // a database without the extension: a clear exception
        var none = assertThrows(IdempotencyException.ExtensionVersionException.class,
            () -> new Idempotency(Db.dataSource("template1")).checkVersion());
        assertTrue(none.getMessage().contains("not installed"), none.getMessage());
        if (Db.edition().equals("c")) {
            // below the minimum: the C edition still installs 1.2 (1.0 and its updates)
            // from template0, and dropped WITH (FORCE): a pooler keeps server
            // connections to template1 (checked just above) and to idem_java_old
            Db.exec(idem.dataSource(), "DROP DATABASE IF EXISTS idem_java_old WITH (FORCE)",
                "CREATE DATABASE idem_java_old TEMPLATE template0");
            try {
                Db.exec(Db.dataSource("idem_java_old"), "CREATE EXTENSION idempotency VERSION '1.2'");
                var old = assertThrows(IdempotencyException.ExtensionVersionException.class,
                    () -> new Idempotency(Db.dataSource("idem_java_old")).checkVersion());
                assertTrue(old.getMessage().contains("version 1.2") && old.getMessage().contains("1.3 or later"),
                    old.getMessage());
            } finally {
                Db.exec(idem.dataSource(), "DROP DATABASE IF EXISTS idem_java_old WITH (FORCE)");
            }
        }
        assertTrue(Idempotency.compareVersions("1.10", "1.9") > 0);
        assertTrue(Idempotency.compareVersions("1.2", "1.3") < 0);
        assertEquals(0, Idempotency.compareVersions("1.3", "1.3"));
    }

    @Test
    void claimOutcomesAreAnEnum() {
        String key = Db.unique("k");
        Map<String, Object> req = Map.of("amount", 5);
        idem.inTransaction(c -> {
            ClaimResult first = idem.claim(c, key, req, "tenant-1", Duration.ofDays(1), Duration.ofSeconds(30));
            assertEquals(ClaimOutcome.CLAIMED, first.outcome());
            assertTrue(first.holds());
            assertEquals(1, first.attempts());
            assertEquals("started", first.recoveryPoint());
            return null;
        });
        ClaimResult busy = idem.inTransaction(c -> idem.claim(c, key, req, "tenant-1", null, null));
        assertEquals(ClaimOutcome.IN_PROGRESS, busy.outcome());
        assertNull(busy.fence());
        assertTrue(busy.retryAfterSeconds() >= 29 && busy.retryAfterSeconds() <= 30, "" + busy.retryAfter());
        ClaimResult other = idem.inTransaction(c -> idem.claim(c, key, Map.of("amount", 6), "tenant-1", null, null));
        assertEquals(ClaimOutcome.MISMATCH, other.outcome());
        // another scope: another key
        ClaimResult elsewhere = idem.inTransaction(c -> idem.claim(c, key, req, "tenant-2", null, null));
        assertEquals(ClaimOutcome.CLAIMED, elsewhere.outcome());
    }

    @Test
    void completeReplaysAndStaleFencesLoseTheLease() {
        String key = Db.unique("k");
        long fence = idem.inTransaction(c -> idem.claim(c, key, Map.of("a", 1), "", null, null).fence());
        idem.inTransaction(c -> {
            idem.complete(c, key, fence, Map.of("paid", 5), 201, "", Duration.ofDays(2), null);
            return null;
        });
        ClaimResult replay = idem.inTransaction(c -> idem.claim(c, key, Map.of("a", 1), "", null, null));
        assertEquals(ClaimOutcome.REPLAY, replay.outcome());
        assertEquals(201, replay.responseCode());
        assertEquals(5, Json.parse(replay.responseBody()).get("paid").asInt());
        KeyExpiry expiry = idem.inTransaction(c -> idem.keyExpiry(c, key, ""));
        long hours = Duration.between(java.time.Instant.now(), expiry.expiresAt()).toHours();
        assertTrue(hours >= 47 && hours <= 48, "" + hours);
        assertNull(expiry.responseExpiresAt());
        assertTrue(idem.inTransaction(c -> idem.lookup(c, key, "")).contains("\"status\": \"completed\""));
        // the holder's fence no longer holds a completed key: 55000
        var lost = assertThrows(IdempotencyException.LeaseLostException.class,
            () -> idem.inTransaction(c -> {
                idem.complete(c, key, fence, Map.of(), 200, "", null, null);
                return null;
            }));
        assertEquals("55000", lost.sqlState());
        assertTrue(lost.getCause() instanceof java.sql.SQLException);
    }

    @Test
    void failRetryableResumesAndCheckpointRecords() {
        String key = Db.unique("k");
        long f1 = idem.inTransaction(c -> idem.claim(c, key, null, "", null, null).fence());
        idem.inTransaction(c -> {
            idem.checkpoint(c, key, f1, "charged", Duration.ofSeconds(60), "");
            idem.fail(c, key, f1, Map.of("error", "upstream"), 503, true, "");
            return null;
        });
        ClaimResult again = idem.inTransaction(c -> idem.claim(c, key, null, "", null, null));
        assertEquals(ClaimOutcome.RESUMED, again.outcome());
        assertEquals(2, again.attempts());
        assertEquals("charged", again.recoveryPoint());
        assertTrue(again.fence() > f1);
        idem.inTransaction(c -> {
            idem.release(c, key, again.fence(), "");
            return null;
        });
        assertNull(idem.inTransaction(c -> idem.lookup(c, key, "")));
    }

    @Test
    void responseTtlEndsInGone() throws Exception {
        String key = Db.unique("k");
        long f = idem.inTransaction(c -> idem.claim(c, key, null, "", Duration.ofHours(1), null).fence());
        idem.inTransaction(c -> {
            idem.complete(c, key, f, Map.of("ok", true), 200, "", null, Duration.ofMillis(300));
            return null;
        });
        assertTrue(idem.inTransaction(c -> idem.keyExpiry(c, key, "")).responseExpiresAt() != null);
        Thread.sleep(400);
        ClaimResult gone = idem.inTransaction(c -> idem.claim(c, key, null, "", null, null));
        assertEquals(ClaimOutcome.GONE, gone.outcome());
        assertEquals(200, gone.responseCode());
        assertNull(gone.responseBody());
    }

    @Test
    void sqlStatesBecomeExceptions() {
        var empty = assertThrows(IdempotencyException.InvalidParameterException.class,
            () -> idem.inTransaction(c -> idem.claim(c, "", null, "", null, null)));
        assertEquals("22023", empty.sqlState());
        // a ttl shorter than the lease: 22023 as well
        assertThrows(IdempotencyException.InvalidParameterException.class,
            () -> idem.inTransaction(c -> idem.claim(c, Db.unique("k"), null, "", Duration.ofSeconds(1),
                Duration.ofSeconds(10))));
        // a write in a read-only transaction: 25006
        assertThrows(IdempotencyException.ReadOnlyTransactionException.class, () -> idem.inTransaction(c -> {
            c.setReadOnly(true);
            try {
                return idem.issueToken(c, "", null);
            } finally {
                c.rollback();
                c.setReadOnly(false);
            }
        }));
        String big = "x".repeat(2_000_000);
        String key = Db.unique("k");
        long f = idem.inTransaction(c -> idem.claim(c, key, null, "", null, null).fence());
        assertThrows(IdempotencyException.ResponseTooLargeException.class, () -> idem.inTransaction(c -> {
            idem.complete(c, key, f, Map.of("body", big), 200, "", null, null);
            return null;
        }));
    }

    @Test
    void executeRunsTheStatementOnce() {
        Db.exec(idem.dataSource(), "CREATE TABLE IF NOT EXISTS java_exec (n int)");
        String key = Db.unique("x");
        String stmt = "INSERT INTO java_exec VALUES ($1::int) RETURNING n";
        ClaimResult first = idem.inTransaction(c -> idem.execute(c, key, Map.of("n", 7), stmt, List.of("7"), "",
            null, null, null));
        assertEquals(ClaimOutcome.CLAIMED, first.outcome());
        assertEquals("7", first.responseBody());
        ClaimResult again = idem.inTransaction(c -> idem.execute(c, key, Map.of("n", 7), stmt, List.of("7"), "",
            null, null, null));
        assertEquals(ClaimOutcome.REPLAY, again.outcome());
        assertEquals("7", again.responseBody());
    }

    @Test
    void tokensAreConsumedOnce() {
        FormTokens tokens = new FormTokens(idem, Duration.ofMinutes(10));
        String t = tokens.issue("alice");
        assertFalse(tokens.consume(t, "bob"));
        assertTrue(tokens.consume(t, "alice"));
        assertFalse(tokens.consume(t, "alice"));
        assertFalse(tokens.consume("not-a-token", "alice"));
        // a rolled-back consume leaves the token valid
        String u = tokens.issue("alice");
        assertThrows(IllegalStateException.class, () -> idem.inTransaction(c -> {
            assertTrue(tokens.consume(c, u, "alice"));
            throw new IllegalStateException("the submit failed");
        }));
        assertTrue(tokens.consume(u, "alice"));
    }

    @Test
    void transitionsAndStateMachines() {
        Db.exec(idem.dataSource(), "CREATE TABLE IF NOT EXISTS java_orders (id text PRIMARY KEY, state text, note text)",
            "SELECT idempotency.define_state_machine('java_order', '{\"NEW\": [\"PAID\"], \"PAID\": [\"SHIPPED\"]}')",
            "SELECT idempotency.enforce_state_machine('java_orders', 'state', 'java_order')");
        String id = Db.unique("o");
        Db.exec(idem.dataSource(), "INSERT INTO java_orders VALUES ('" + id + "', 'NEW', NULL)");
        TransitionResult paid = idem.inTransaction(c -> idem.transition(c, "java_orders", "id", id, "state", "NEW",
            "PAID", Map.of("note", "card")));
        assertEquals(TransitionResult.Outcome.APPLIED, paid.outcome());
        assertEquals("PAID", paid.currentState());
        TransitionResult again = idem.inTransaction(c -> idem.transition(c, "java_orders", "id", id, "state", "NEW",
            "PAID", null));
        assertEquals(TransitionResult.Outcome.ALREADY, again.outcome());
        assertEquals(TransitionResult.Outcome.NOT_FOUND, idem.inTransaction(c -> idem.transition(c, "java_orders",
            "id", "nobody", "state", "NEW", "PAID", null)).outcome());
        // an UPDATE that breaks the machine: 23514
        assertThrows(IdempotencyException.CheckViolationException.class, () -> idem.inTransaction(c -> {
            try (var s = c.prepareStatement("UPDATE java_orders SET state = 'NEW' WHERE id = ?")) {
                s.setString(1, id);
                s.executeUpdate();
            } catch (java.sql.SQLException e) {
                throw IdempotencyException.of(e);
            }
            return null;
        }));
    }

    @Test
    void outboxAndInbox() {
        String agg = Db.unique("order");
        long id = idem.inTransaction(c -> idem.enqueueEvent(c, "java-order", agg, "created", Map.of("amount", 5),
            Map.of("trace", "t1")));
        assertTrue(id > 0);
        List<OutboxEvent> events = idem.inTransaction(c -> idem.claimEvents(c, 1000, Duration.ofSeconds(30)));
        OutboxEvent mine = events.stream().filter(e -> e.id() == id).findFirst().orElseThrow();
        assertEquals(5, Json.parse(mine.payload()).get("amount").asInt());
        assertEquals("t1", Json.parse(mine.headers()).get("trace").asText());
        long token = mine.leaseToken();
        // a wrong token does not mark
        assertEquals(0, (int) idem.inTransaction(c -> idem.markPublished(c, List.of(id), token + 1_000_000)));
        assertEquals(events.size(), (int) idem.inTransaction(c -> idem.markPublished(c,
            events.stream().map(OutboxEvent::id).toList(), token)));
        assertTrue(idem.inTransaction(c -> idem.outboxQuietCommits(c)) >= 0);

        String many = Db.unique("order");
        List<Long> batch = idem.inTransaction(c -> idem.enqueueEvents(c, List.of(
            new Idempotency.NewEvent("java-order", many, "created", Map.of("n", 1), null),
            new Idempotency.NewEvent("java-order", many, "paid", Map.of("n", 2), Map.of("h", 1)))));
        assertEquals(2, batch.size());
        assertTrue(batch.get(1) > batch.get(0));

        String consumer = Db.unique("billing");
        assertEquals(List.of("e2", "e3"), idem.inTransaction(c -> {
            assertTrue(idem.processOnce(c, consumer, "e1"));
            return idem.processOnce(c, consumer, List.of("e1", "e2", "e2", "e3"));
        }));
    }

    @Test
    void processOnceRunsTheWorkAndTheMarkInOneTransaction() {
        Db.exec(idem.dataSource(), "CREATE TABLE IF NOT EXISTS java_ledger (consumer text, event text)");
        String consumer = Db.unique("ledger");
        Idempotency.Work<Void> work = c -> {
            try (var s = c.prepareStatement("INSERT INTO java_ledger VALUES (?, 'e1')")) {
                s.setString(1, consumer);
                s.executeUpdate();
            }
            return null;
        };
        // the work fails: neither the row nor the mark stays
        assertThrows(IllegalStateException.class, () -> idem.processOnce(consumer, "e1", c -> {
            work.run(c);
            throw new IllegalStateException("boom");
        }));
        assertTrue(idem.processOnce(consumer, "e1", work));
        assertFalse(idem.processOnce(consumer, "e1", work));
        assertEquals(1L, Db.value(idem.dataSource(),
            "SELECT count(*) FROM java_ledger WHERE consumer = '" + consumer + "'"));
    }

    @Test
    void waitingForTheHolder() throws Exception {
        String key = Db.unique("w");
        long f = idem.inTransaction(c -> idem.claim(c, key, null, "", null, null).fence());
        Thread finisher = new Thread(() -> {
            try {
                Thread.sleep(300);
            } catch (InterruptedException e) {
                return;
            }
            idem.inTransaction(c -> {
                idem.complete(c, key, f, Map.of("done", 1), 200, "", null, null);
                return null;
            });
        });
        finisher.start();
        ClaimResult waited = idem.inTransaction(c -> idem.claim(c, key, null, "", null, null, Duration.ofSeconds(10)));
        finisher.join();
        assertEquals(ClaimOutcome.REPLAY, waited.outcome());
    }

    @Test
    void connectionsAreNotKeptBetweenCalls() throws Exception {
        // a claim on one connection, complete on another
        String key = Db.unique("k");
        long f;
        try (Connection a = idem.dataSource().getConnection()) {
            f = idem.claim(a, key, null, "", null, null).fence();
        }
        try (Connection b = idem.dataSource().getConnection()) {
            idem.complete(b, key, f, Map.of(), 200, "", null, null);
        }
        assertEquals(ClaimOutcome.REPLAY, idem.inTransaction(c -> idem.claim(c, key, null, "", null, null)).outcome());
    }
}
