package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.pgidempotency.http.IdempotencyFilter;
import org.pgidempotency.http.Policy;

/** The behaviour table of doc/clients.md over real HTTP, in embedded Tomcat 10.1. */
class FilterTest {
    static Web web;
    static Idempotency idem;
    /** Handler runs per key. */
    static final Map<String, AtomicInteger> RUNS = new ConcurrentHashMap<>();
    /** A pool of 2 connections, shared by the /burst filter and its handler. */
    static final BoundedDataSource POOL = new BoundedDataSource(Db.dataSource(), 2);

    /**
     * The app: POST answers 201 with the amount (also as "paid") and how
     * often it ran for the key; {"slow": true} or X-Sleep makes it wait.
     */
    static class App extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse res) throws IOException {
            res.setContentType("text/plain");
            res.getWriter().write("hello");
        }

        @Override
        protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
            String key = req.getHeader("Idempotency-Key");
            int run = RUNS.computeIfAbsent(key == null ? "" : key, k -> new AtomicInteger()).incrementAndGet();
            JsonNode body = Json.MAPPER.readTree(req.getInputStream());
            String sleep = body.path("slow").asBoolean() ? "300" : req.getHeader("X-Sleep");
            if (sleep != null) {
                try {
                    Thread.sleep(Long.parseLong(sleep));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            String path = req.getRequestURI();
            if (path.endsWith("/boom")) {
                throw new IllegalStateException("the handler failed");
            }
            if (path.endsWith("/flaky") && run == 1) {
                res.setStatus(503);
                res.getWriter().write("{\"error\": \"upstream\"}");
                return;
            }
            if (path.startsWith("/burst")) {
                try (java.sql.Connection own = POOL.getConnection();
                     var st = own.prepareStatement("SELECT pg_sleep(0.05)")) {
                    st.execute();
                } catch (java.sql.SQLException e) {
                    throw new IOException(e);
                }
            }
            if (path.endsWith("/lost")) {      // another holder takes the key: the store loses the lease
                var holding = (org.pgidempotency.http.Exchange.Holding) req.getAttribute(IdempotencyFilter.HOLDING);
                idem.inTransaction(c -> {
                    idem.release(c, holding.key(), holding.fence(), holding.scope());
                    return null;
                });
            }
            if (path.endsWith("/huge")) {      // over idempotency.max_response_bytes
                res.setStatus(200);
                res.setContentType("text/plain");
                res.getWriter().write("x".repeat(1_100_000));
                return;
            }
            java.sql.Connection tx = IdempotencyFilter.connection(req);
            if (tx != null) {
                try (var s = tx.prepareStatement("INSERT INTO java_http_ledger VALUES (?)")) {
                    s.setString(1, key);
                    s.executeUpdate();
                } catch (java.sql.SQLException e) {
                    throw new IOException(e);
                }
                if (req.getHeader("X-Status") != null) {
                    res.setStatus(Integer.parseInt(req.getHeader("X-Status")));
                    return;
                }
            }
            res.setStatus(201);
            res.setContentType("application/json");
            res.setHeader("Location", "/payments/" + run);
            res.addHeader("Set-Cookie", "session=secret");
            res.getWriter().write("{\"amount\": " + body.path("amount") + ", \"paid\": " + body.path("amount")
                + ",  \"run\": " + run + "}");
        }
    }

    @BeforeAll
    static void start() throws Exception {
        idem = new Idempotency(Db.dataSource());
        Db.exec(idem.dataSource(), "CREATE TABLE IF NOT EXISTS java_http_ledger (key text)");
        var byUser = IdempotencyFilter.builder(idem).scope(r -> r.getHeader("X-User"))
            .policy(Policy.defaults().withTtl(Duration.ofDays(1)));
        web = new Web()
            .context("", new App(), byUser.build())
            .context("/tx", new App(), IdempotencyFilter.builder(idem)
                .policy(Policy.defaults().withOneTransaction(true)).build())
            .context("/short", new App(), IdempotencyFilter.builder(idem)
                .policy(Policy.defaults().withTtl(Duration.ofHours(1)).withResponseTtl(Duration.ofMillis(500)))
                .build())
            .context("/wait", new App(), IdempotencyFilter.builder(idem)
                .policy(Policy.defaults().withWait(Duration.ofSeconds(10))).build())
            .context("/broken", new App(), IdempotencyFilter.builder(idem).scope(r -> {
                throw new IllegalStateException("no user: authentication did not run");
            }).build())
            .context("/burst", new App(), IdempotencyFilter.builder(POOL).build())
            .context("/optional", new App(), IdempotencyFilter.builder(idem).required(false).build())
            .start();
    }

    @AfterAll
    static void stop() throws Exception {
        web.close();
    }

    static JsonNode json(HttpResponse<String> r) {
        return Json.parse(r.body());
    }

    static void assertProblem(HttpResponse<String> r, int status) {
        assertEquals(status, r.statusCode(), r.body());
        assertEquals("application/problem+json", r.headers().firstValue("Content-Type").orElse(null));
        JsonNode p = json(r);
        assertEquals("about:blank", p.get("type").asText());
        assertEquals(status, p.get("status").asInt());
        assertTrue(p.has("title") && p.has("detail"));
    }

    static Instant httpDate(String s) {
        return ZonedDateTime.parse(s, DateTimeFormatter.ofPattern("EEE, dd MMM yyyy HH:mm:ss 'GMT'", Locale.US)
            .withZone(ZoneOffset.UTC)).toInstant();
    }

    @Test
    void unguardedMethodsAndMissingKeys() throws Exception {
        assertEquals("hello", web.get("/payments").body());
        HttpResponse<String> missing = web.post("/payments", "{}", "X-User", "alice");
        assertProblem(missing, 400);
        assertTrue(missing.headers().firstValue("Idempotency-Key-Expires").isEmpty());
        // optional keys: the request runs unguarded
        assertEquals(201, web.post("/optional/payments", "{\"amount\": 1}").statusCode());
    }

    @Test
    void badKeysAre400BeforeAnyQuery() throws Exception {
        assertProblem(web.post("/payments", "{}", "X-User", "alice", "Idempotency-Key", "x".repeat(401)), 400);
        // within 400 but over the session's idempotency.max_key_length (255): claim's 22023
        HttpResponse<String> r = web.post("/payments", "{}", "X-User", "alice", "Idempotency-Key", "y".repeat(300));
        assertProblem(r, 400);
        assertTrue(json(r).get("detail").asText().contains("max_key_length"));
        assertFalse(RUNS.containsKey("y".repeat(300)));
    }

    @Test
    void noScopeIs401AndAScopeThatThrowsIs500() throws Exception {
        assertProblem(web.post("/payments", "{}", "Idempotency-Key", Db.unique("k")), 401);
        String key = Db.unique("scope");
        HttpResponse<String> r = web.post("/broken/p", "{}", "Idempotency-Key", key);
        assertProblem(r, 500);
        assertFalse(RUNS.containsKey(key), "nothing runs");
        assertNull(idem.inTransaction(c -> idem.lookup(c, key, "")), "nothing is claimed");
    }

    @Test
    void aLostLeaseIs409AndAnAnswerTooLargeIs500() throws Exception {
        HttpResponse<String> lost = web.post("/payments/lost", "{}", "X-User", "a", "Idempotency-Key", Db.unique("lost"));
        assertProblem(lost, 409);
        assertEquals("1", lost.headers().firstValue("Retry-After").orElse(null));
        String key = Db.unique("huge");
        HttpResponse<String> huge = web.post("/payments/huge", "{}", "X-User", "a", "Idempotency-Key", key);
        assertProblem(huge, 500);
        assertTrue(json(huge).get("title").asText().contains("too large"));
        // failed retryably: the next try runs again
        web.post("/payments/huge", "{}", "X-User", "a", "Idempotency-Key", key);
        assertEquals(2, RUNS.get(key).get());
    }

    @Test
    void answerReplayMismatch() throws Exception {
        String key = Db.unique("pay");
        HttpResponse<String> first = web.post("/payments", "{\"amount\": 5}", "X-User", "alice", "Idempotency-Key", key);
        assertEquals(201, first.statusCode());
        assertTrue(first.headers().firstValue("Idempotent-Replayed").isEmpty());
        assertEquals("session=secret", first.headers().firstValue("Set-Cookie").orElse(null));
        String expires = first.headers().firstValue("Idempotency-Key-Expires").orElseThrow();
        long ahead = Duration.between(Instant.now(), httpDate(expires)).getSeconds();
        assertTrue(Math.abs(ahead - 86400) < 10, expires);
        assertTrue(first.headers().firstValue("Idempotency-Replay-Expires").isEmpty());
        // the same request, whitespace and key order aside: the stored answer, byte for byte
        HttpResponse<String> again = web.post("/payments", "{ \"amount\":5 }", "X-User", "alice", "Idempotency-Key", key);
        assertEquals(201, again.statusCode());
        assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals(first.body(), again.body());
        assertEquals("/payments/1", again.headers().firstValue("Location").orElse(null));
        assertEquals("application/json", again.headers().firstValue("Content-Type").orElse(null));
        assertTrue(again.headers().firstValue("Set-Cookie").isEmpty(), "Set-Cookie is never stored");
        assertEquals(expires, again.headers().firstValue("Idempotency-Key-Expires").orElse(null));
        assertEquals(1, RUNS.get(key).get());
        // another request under the key
        HttpResponse<String> other = web.post("/payments", "{\"amount\": 6}", "X-User", "alice", "Idempotency-Key", key);
        assertProblem(other, 422);
        assertEquals(expires, other.headers().firstValue("Idempotency-Key-Expires").orElse(null));
        // another caller's key of the same name is another key
        assertEquals(201, web.post("/payments", "{\"amount\": 5}", "X-User", "bob", "Idempotency-Key", key).statusCode());
        assertEquals(2, RUNS.get(key).get());
    }

    @Test
    void failuresRunAgain() throws Exception {
        String key = Db.unique("flaky");
        HttpResponse<String> first = web.post("/payments/flaky", "{}", "X-User", "a", "Idempotency-Key", key);
        assertEquals(503, first.statusCode());
        assertTrue(first.headers().firstValue("Idempotency-Key-Expires").isPresent());
        HttpResponse<String> second = web.post("/payments/flaky", "{}", "X-User", "a", "Idempotency-Key", key);
        assertEquals(201, second.statusCode());
        assertEquals(2, RUNS.get(key).get());
        String boom = Db.unique("boom");
        assertProblem(web.post("/payments/boom", "{}", "X-User", "a", "Idempotency-Key", boom), 500);
        assertProblem(web.post("/payments/boom", "{}", "X-User", "a", "Idempotency-Key", boom), 500);
        assertEquals(2, RUNS.get(boom).get());
    }

    @Test
    void concurrentDuplicatesRunOnce() throws Exception {
        String key = Db.unique("dup");
        int n = 6;
        CyclicBarrier barrier = new CyclicBarrier(n);
        ExecutorService pool = Executors.newFixedThreadPool(n);
        List<Future<HttpResponse<String>>> replies = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            replies.add(pool.submit(() -> {
                barrier.await();
                return web.post("/payments", "{\"amount\": 9}", "X-User", "alice", "Idempotency-Key", key,
                    "X-Sleep", "300");
            }));
        }
        int answered = 0, busy = 0, replayed = 0;
        for (Future<HttpResponse<String>> f : replies) {
            HttpResponse<String> r = f.get();
            if (r.statusCode() == 409) {
                assertProblem(r, 409);
                long retry = Long.parseLong(r.headers().firstValue("Retry-After").orElseThrow());
                assertTrue(retry >= 1, "" + retry);
                assertTrue(r.headers().firstValue("Idempotency-Key-Expires").isPresent());
                busy++;
            } else {
                assertEquals(201, r.statusCode(), r.body());
                if (r.headers().firstValue("Idempotent-Replayed").isPresent()) {
                    replayed++;
                } else {
                    answered++;
                }
            }
        }
        pool.shutdown();
        assertEquals(1, answered);
        assertEquals(n - 1, busy + replayed);
        assertEquals(1, RUNS.get(key).get(), "exactly one handler run");
    }

    @Test
    void aDuplicateWaitsForTheHolder() throws Exception {
        String key = Db.unique("wait");
        ExecutorService pool = Executors.newFixedThreadPool(2);
        Future<HttpResponse<String>> first = pool.submit(() -> web.post("/wait/p", "{\"amount\": 1}",
            "Idempotency-Key", key, "X-Sleep", "700"));
        Thread.sleep(250);
        Future<HttpResponse<String>> second = pool.submit(() -> web.post("/wait/p", "{\"amount\": 1}",
            "Idempotency-Key", key));
        // whichever claimed first ran; the other waited for it and got its answer
        assertEquals(201, first.get().statusCode());
        assertEquals(201, second.get().statusCode());
        long replays = List.of(first.get(), second.get()).stream()
            .filter(r -> r.headers().firstValue("Idempotent-Replayed").isPresent()).count();
        assertEquals(1, replays);
        assertEquals(first.get().body(), second.get().body());
        assertEquals(1, RUNS.get(key).get());
        pool.shutdown();
    }

    @Test
    void goneAfterResponseTtl() throws Exception {
        String key = Db.unique("gone");
        HttpResponse<String> first = web.post("/short/p", "{\"amount\": 1}", "Idempotency-Key", key);
        assertEquals(201, first.statusCode());
        Instant keyExpires = httpDate(first.headers().firstValue("Idempotency-Key-Expires").orElseThrow());
        Instant replayExpires = httpDate(first.headers().firstValue("Idempotency-Replay-Expires").orElseThrow());
        assertTrue(replayExpires.isBefore(keyExpires));
        Thread.sleep(Math.max(0, Duration.between(Instant.now(), replayExpires).toMillis()) + 300);
        HttpResponse<String> gone = web.post("/short/p", "{\"amount\": 1}", "Idempotency-Key", key);
        assertProblem(gone, 410);
        assertTrue(gone.headers().firstValue("Idempotency-Replay-Expires").isEmpty());
        assertTrue(gone.headers().firstValue("Idempotency-Key-Expires").isPresent());
        assertEquals(1, RUNS.get(key).get());
    }

    @Test
    void oneTransactionCommitsTheHandlersWritesWithTheKey() throws Exception {
        String ok = Db.unique("tx");
        assertEquals(201, web.post("/tx/p", "{}", "Idempotency-Key", ok).statusCode());
        assertEquals(201, web.post("/tx/p", "{}", "Idempotency-Key", ok).statusCode());
        assertEquals(1L, Db.value(idem.dataSource(), "SELECT count(*) FROM java_http_ledger WHERE key = '" + ok + "'"));
        // a 5xx rolls the handler's writes back with the claim: the next try finds no key
        String bad = Db.unique("tx");
        HttpResponse<String> failed = web.post("/tx/p", "{}", "Idempotency-Key", bad, "X-Status", "502");
        assertEquals(502, failed.statusCode());
        assertTrue(failed.headers().firstValue("Idempotency-Key-Expires").isEmpty());
        assertEquals(0L, Db.value(idem.dataSource(), "SELECT count(*) FROM java_http_ledger WHERE key = '" + bad + "'"));
        assertNull(idem.inTransaction(c -> idem.lookup(c, bad, "")));
    }

    @Test
    void aBurstOfFourTimesThePoolIsAnswered() throws Exception {
        // the filter holds no connection while the handler, which takes its
        // own from the same pool, runs: 8 concurrent requests on a pool of 2
        ExecutorService pool = Executors.newFixedThreadPool(8);
        List<Future<HttpResponse<String>>> replies = new ArrayList<>();
        String key = Db.unique("burst");
        for (int i = 0; i < 8; i++) {
            String k = key + "-" + i;
            replies.add(pool.submit(() -> web.post("/burst/p", "{\"amount\": 1}", "Idempotency-Key", k)));
        }
        for (Future<HttpResponse<String>> r : replies) {
            assertEquals(201, r.get().statusCode(), r.get().body());
        }
        pool.shutdown();
    }
}
