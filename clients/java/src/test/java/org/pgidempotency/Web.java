package org.pgidempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServlet;
import java.io.File;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.time.Duration;
import org.apache.catalina.Context;
import org.apache.catalina.connector.Connector;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;

/** Embedded Tomcat on 127.0.0.1 (an ephemeral port), and an HTTP client for it. */
public final class Web implements AutoCloseable {
    private final Tomcat tomcat = new Tomcat();
    private final Connector connector;
    private final File base;
    private final HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    public Web() throws Exception {
        base = Files.createTempDirectory("idem-tomcat").toFile();
        tomcat.setBaseDir(base.getPath());
        connector = new Connector();
        connector.setPort(0);
        connector.setProperty("address", "127.0.0.1");
        tomcat.getService().addConnector(connector);
        tomcat.setConnector(connector);
    }

    /** A context at path with servlet at /* behind filter (null: none). */
    public Web context(String path, HttpServlet servlet, Filter filter) {
        Context ctx = tomcat.addContext(path, null);
        ctx.setIgnoreAnnotations(true);
        Tomcat.addServlet(ctx, "app", servlet);
        ctx.addServletMappingDecoded("/*", "app");
        if (filter != null) {
            FilterDef def = new FilterDef();
            def.setFilterName("idempotency");
            def.setFilter(filter);
            ctx.addFilterDef(def);
            FilterMap map = new FilterMap();
            map.setFilterName("idempotency");
            map.addURLPattern("/*");
            ctx.addFilterMap(map);
        }
        return this;
    }

    public Web start() throws Exception {
        tomcat.start();
        return this;
    }

    public int port() {
        return connector.getLocalPort();
    }

    /** POST path with a JSON body and headers (name, value, ...). */
    public HttpResponse<String> post(String path, String json, String... headers) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port() + path))
            .timeout(Duration.ofSeconds(30))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(json));
        for (int i = 0; i < headers.length; i += 2) {
            b.header(headers[i], headers[i + 1]);
        }
        return client.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    public HttpResponse<String> get(String path) throws Exception {
        return client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port() + path)).GET().build(),
            HttpResponse.BodyHandlers.ofString());
    }

    @Override
    public void close() throws Exception {
        tomcat.stop();
        tomcat.destroy();
        try (var files = Files.walk(base.toPath())) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }
}
