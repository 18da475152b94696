package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.pgidempotency.http.IdempotencyFilter;
import org.pgidempotency.http.Policy;

/**
 * test/conformance/http.json, doc/clients.md's behaviour table as cases
 * every package runs (its "grammar" says what a step asks), against the
 * filter in embedded Tomcat: FilterTest's app at /payments, the caller in
 * X-User, a retention of a day. test/conformance/http_check.py runs the same
 * cases against the README's quick start over real HTTP.
 */
class ConformanceTest {
    static Web web;
    static final HttpClient CLIENT = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
    static final Pattern REPEAT = Pattern.compile("\\{k\\*(\\d+)\\}");

    @BeforeAll
    static void start() throws Exception {
        Idempotency idem = new Idempotency(Db.dataSource());
        web = new Web().context("", new FilterTest.App(), IdempotencyFilter.builder(idem)
            .scope(r -> r.getHeader("X-User")).policy(Policy.defaults().withTtl(Duration.ofDays(1))).build()).start();
    }

    @AfterAll
    static void stop() throws Exception {
        web.close();
    }

    /** The fixture of the checkout, or of IDEM_TOP when the suite runs from elsewhere. */
    static JsonNode fixture() throws Exception {
        String top = System.getenv("IDEM_TOP");
        Path p = top != null ? Path.of(top, "test", "conformance", "http.json") : Path.of("..", "..", "test", "conformance", "http.json");
        return Json.parse(Files.readString(p));
    }

    static HttpResponse<String> send(JsonNode request, String fresh) throws Exception {
        String method = request.path("method").asText("POST");
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + web.port() + "/payments"))
            .timeout(Duration.ofSeconds(30)).header("Content-Type", "application/json");
        if (request.hasNonNull("key")) {
            Matcher m = REPEAT.matcher(request.get("key").asText().replace("{key}", fresh));
            StringBuilder key = new StringBuilder();
            while (m.find()) {
                m.appendReplacement(key, "k".repeat(Integer.parseInt(m.group(1))));
            }
            m.appendTail(key);
            b.header("Idempotency-Key", key.toString());
        }
        if (!request.has("user") || !request.get("user").isNull()) {
            b.header("X-User", request.path("user").asText("alice"));
        }
        String body = request.has("body_text") ? request.get("body_text").asText()
            : request.has("body") ? request.get("body").toString() : "{}";
        b.method(method, "GET".equals(method) ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        return CLIENT.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    static String header(HttpResponse<String> r, String name) {
        return r.headers().firstValue(name).orElse(null);
    }

    static void check(HttpResponse<String> r, JsonNode expect, List<HttpResponse<String>> earlier, String where) {
        String got = where + ": got " + r.statusCode() + " " + r.headers().map() + " " + r.body();
        if (expect.has("status")) {
            assertEquals(expect.get("status").asInt(), r.statusCode(), got);
        }
        boolean problem = String.valueOf(header(r, "Content-Type")).startsWith("application/problem+json");
        if (expect.has("problem")) {
            assertEquals(expect.get("problem").asBoolean(), problem, got);
        }
        if (expect.path("problem").asBoolean()) {
            JsonNode p = Json.parse(r.body());
            assertTrue("about:blank".equals(p.path("type").asText()) && p.path("status").asInt() == r.statusCode()
                && !p.path("title").asText().isEmpty() && p.has("detail"), got);
        }
        if (expect.has("paid")) {
            assertEquals(expect.get("paid").asInt(), Json.parse(r.body()).path("paid").asInt(-1), got);
        }
        expect.path("headers").fields().forEachRemaining(h ->
            assertEquals(h.getValue().isNull() ? null : h.getValue().asText(), header(r, h.getKey()), h.getKey() + "; " + got));
        if (expect.has("same_body_as")) {
            assertEquals(earlier.get(expect.get("same_body_as").asInt()).body(), r.body(), got);
        }
        if (expect.has("same_headers_as")) {
            HttpResponse<String> step = earlier.get(expect.get("same_headers_as").get(0).asInt());
            for (JsonNode name : expect.get("same_headers_as").get(1)) {
                assertEquals(header(step, name.asText()), header(r, name.asText()), name.asText() + "; " + got);
            }
        }
        if (expect.has("expires")) {
            String name = expect.get("expires").get(0).asText();
            String value = header(r, name);
            assertTrue(value != null, name + "; " + got);
            long ahead = Duration.between(Instant.now(), FilterTest.httpDate(value)).toSeconds();
            assertTrue(Math.abs(ahead - expect.get("expires").get(1).asLong()) <= 10, name + "; " + got);
        }
    }

    static void concurrently(JsonNode c, String fresh) throws Exception {
        JsonNode step = c.get("steps").get(0);
        int n = c.get("concurrent").get("n").asInt();
        boolean distinct = c.get("concurrent").get("distinct").asBoolean();
        ExecutorService pool = Executors.newFixedThreadPool(n);
        CyclicBarrier barrier = new CyclicBarrier(n);
        List<HttpResponse<String>> answers = new ArrayList<>();
        try {
            List<Future<HttpResponse<String>>> futures = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String key = distinct ? fresh + "-" + i : fresh;
                futures.add(pool.submit(() -> {
                    barrier.await();
                    return send(step.get("request"), key);
                }));
            }
            for (Future<HttpResponse<String>> f : futures) {
                answers.add(f.get());
            }
        } finally {
            pool.shutdown();
        }
        if (distinct) {
            for (HttpResponse<String> a : answers) {
                check(a, step.get("expect"), List.of(), "a copy");
            }
            return;
        }
        List<HttpResponse<String>> ran = answers.stream()
            .filter(a -> a.statusCode() != 409 && header(a, "Idempotent-Replayed") == null).toList();
        assertEquals(1, ran.size(), "one run of " + n + " duplicates: " + answers.stream().map(HttpResponse::statusCode).toList());
        check(ran.get(0), step.get("expect"), List.of(), "the run");
        for (HttpResponse<String> a : answers) {
            if (a == ran.get(0)) {
                continue;
            }
            if (a.statusCode() == 409) {
                FilterTest.assertProblem(a, 409);
                assertTrue(Integer.parseInt(header(a, "Retry-After")) >= 1, "Retry-After");
            } else {
                assertEquals("true", header(a, "Idempotent-Replayed"), a.body());
                assertEquals(ran.get(0).body(), a.body());
            }
        }
    }

    @TestFactory
    Stream<DynamicTest> httpJson() throws Exception {
        JsonNode cases = fixture().get("cases");
        List<DynamicTest> tests = new ArrayList<>();
        for (int i = 0; i < cases.size(); i++) {
            JsonNode c = cases.get(i);
            String fresh = Db.unique("conformance-" + i);
            tests.add(DynamicTest.dynamicTest("case " + i + ", " + c.get("row").asText(), () -> {
                if (c.has("concurrent")) {
                    concurrently(c, fresh);
                    return;
                }
                List<HttpResponse<String>> earlier = new ArrayList<>();
                for (JsonNode step : c.get("steps")) {
                    HttpResponse<String> r = send(step.get("request"), fresh);
                    check(r, step.get("expect"), earlier, "step " + earlier.size());
                    earlier.add(r);
                }
            }));
        }
        if (tests.isEmpty()) {
            fail("http.json has no cases");
        }
        return tests.stream();
    }
}
