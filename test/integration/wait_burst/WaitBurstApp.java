package org.pgidempotency;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import org.apache.catalina.Context;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.startup.Tomcat;
import org.pgidempotency.http.IdempotencyFilter;
import org.pgidempotency.http.Policy;

/**
 * test/integration/wait_burst/WaitBurstApp.java: the Java package's burst
 * app for check.py, compiled with the test sources. POST /wait-burst/n: the
 * filter with wait on a pool of n connections (BoundedDataSource: 2, 4,
 * 10), scoped by X-User; the handler sleeps 0.35 s and records its run on
 * the same pool (PGIDEM_SERVER_CONNECTIONS: the pooler's pool, the policy's
 * serverConnections). Registered through the Servlet API, as the README's quick
 * start does (Tomcat's own registration reads annotations whose API Debian
 * does not ship).
 */
public final class WaitBurstApp {
    public static void main(String[] args) throws Exception {
        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(java.nio.file.Files.createTempDirectory("idem-wait-burst").toString());
        Connector http = new Connector();
        http.setProperty("address", "127.0.0.1");
        http.setPort(0);
        tomcat.setConnector(http);
        Context ctx = tomcat.addContext("", null);
        ctx.setIgnoreAnnotations(true);
        int servers = Integer.parseInt(Db.env("PGIDEM_SERVER_CONNECTIONS", "0"));
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
            IdempotencyFilter filter = IdempotencyFilter.builder(pool)
                .scope(req -> req.getHeader("X-User"))
                .policy(Policy.defaults().withWait(Duration.ofSeconds(5)).withServerConnections(servers))
                .build();
            String path = "/wait-burst/" + size;
            ctx.addServletContainerInitializer((classes, servletContext) -> {
                servletContext.addServlet("pay" + size, pay).addMapping(path);
                servletContext.addFilter("idempotency" + size, filter).addMappingForUrlPatterns(null, false, path);
            }, null);
        }
        tomcat.start();
        System.out.println("listening on 127.0.0.1:" + http.getLocalPort());
    }
}
