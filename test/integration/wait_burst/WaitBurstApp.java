package org.pgidempotency;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import org.pgidempotency.http.IdempotencyFilter;
import org.pgidempotency.http.Policy;

/**
 * test/integration/wait_burst/WaitBurstApp.java: the Java package's burst
 * app for check.py, compiled with the test sources. POST /wait-burst/n: the
 * filter with wait on a pool of n connections (BoundedDataSource: 2, 4,
 * 10), scoped by X-User; the handler sleeps 0.35 s and records its run on
 * the same pool.
 */
public final class WaitBurstApp {
    public static void main(String[] args) throws Exception {
        Web web = new Web();
        for (int size : new int[] {2, 4, 10}) {
            BoundedDataSource pool = new BoundedDataSource(Db.dataSource(), size);
            HttpServlet pay = new HttpServlet() {
                @Override
                protected void doPost(HttpServletRequest req, HttpServletResponse res) throws IOException {
                    String key = req.getHeader("Idempotency-Key");
                    try {
                        Thread.sleep(350);
                    } catch (InterruptedException e) {
                        throw new IOException(e);
                    }
                    Db.exec(pool, "INSERT INTO wait_burst_runs (key) VALUES ('" + key.replace("'", "''") + "')");
                    res.setStatus(201);
                    res.setContentType("application/json");
                    res.getWriter().write("{\"key\": \"" + key + "\", \"at\": \"" + Instant.now() + "\"}");
                }
            };
            web.context("/wait-burst/" + size, pay, IdempotencyFilter.builder(pool)
                .scope(req -> req.getHeader("X-User"))
                .policy(Policy.defaults().withWait(Duration.ofSeconds(5)))
                .build());
        }
        web.start();
        System.out.println("listening on 127.0.0.1:" + web.port());
    }
}
