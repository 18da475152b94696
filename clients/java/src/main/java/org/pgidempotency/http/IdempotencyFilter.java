package org.pgidempotency.http;

import com.fasterxml.jackson.databind.node.ObjectNode;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.pgidempotency.Idempotency;
import org.pgidempotency.Json;

/**
 * A jakarta.servlet Filter (Servlet 5/6: Tomcat 10+, Jetty 11+, Spring Boot
 * 3, Quarkus/Undertow) that answers requests with an Idempotency-Key as the
 * behaviour table of doc/clients.md says ({@link Exchange}). The handler's
 * response is buffered (so it can be stored, or replaced by a problem
 * answer), and its request body read once for the fingerprint and handed
 * on. In one-transaction mode the handler finds the filter's connection,
 * in the transaction that stores its answer, with {@link #connection}.
 * Asynchronous servlets (startAsync) are not supported.
 */
public final class IdempotencyFilter implements Filter {
    /** The request attribute holding the key's connection in one-transaction mode. */
    public static final String CONNECTION = "org.pgidempotency.connection";
    /** The request attribute holding the {@link Exchange.Holding} while the handler runs. */
    public static final String HOLDING = "org.pgidempotency.holding";

    private final Idempotency idem;
    private final Policy policy;
    private final String header;
    private final Set<String> methods;
    private final boolean required;
    private final Function<HttpServletRequest, String> scope;
    private final Fingerprint fingerprint;

    /** The request's fingerprint: any JSON value (default: method, path and body). */
    @FunctionalInterface
    public interface Fingerprint {
        Object of(HttpServletRequest request, byte[] body);
    }

    private IdempotencyFilter(Builder b) {
        this.idem = Objects.requireNonNull(b.idem, "an Idempotency (or a DataSource) is required");
        this.policy = b.policy;
        this.header = b.header;
        this.methods = b.methods.stream().map(m -> m.toUpperCase(Locale.ROOT)).collect(Collectors.toSet());
        this.required = b.required;
        this.scope = b.scope;
        this.fingerprint = b.fingerprint;
    }

    public static Builder builder(Idempotency idem) {
        return new Builder(idem);
    }

    public static Builder builder(javax.sql.DataSource dataSource) {
        return new Builder(new Idempotency(dataSource));
    }

    /** The filter's settings; every one has a default. */
    public static final class Builder {
        private final Idempotency idem;
        private Policy policy = Policy.defaults();
        private String header = "Idempotency-Key";
        private Set<String> methods = Policy.DEFAULT_METHODS;
        private boolean required = true;
        private Function<HttpServletRequest, String> scope = r -> "";
        private Fingerprint fingerprint = IdempotencyFilter::defaultFingerprint;

        private Builder(Idempotency idem) {
            this.idem = idem;
        }

        /** ttl, responseTtl, lease, wait, oneTransaction, stored and expiry headers. */
        public Builder policy(Policy p) { this.policy = p; return this; }
        /** The key's header (Idempotency-Key). */
        public Builder header(String name) { this.header = name; return this; }
        /** The methods that take a key (POST, PATCH); others pass through untouched. */
        public Builder methods(String... m) { this.methods = Set.of(m); return this; }
        /** A key is required on them (true); else a request without one runs unguarded. */
        public Builder required(boolean r) { this.required = r; return this; }
        /**
         * The key's owner (tenant or user, from authentication, never from a
         * header the client chooses freely); null answers 401. Default "".
         */
        public Builder scope(Function<HttpServletRequest, String> s) { this.scope = s; return this; }
        public Builder fingerprint(Fingerprint f) { this.fingerprint = f; return this; }
        public IdempotencyFilter build() { return new IdempotencyFilter(this); }
    }

    /** {"method", "path", "body"}: the body parsed when it is JSON (key order and spacing do not matter). */
    public static Object defaultFingerprint(HttpServletRequest request, byte[] body) {
        ObjectNode fp = Json.MAPPER.createObjectNode();
        fp.put("method", request.getMethod());
        fp.put("path", request.getRequestURI());
        String text = new String(body, StandardCharsets.UTF_8);
        String type = request.getContentType();
        if (type != null && type.contains("json")) {
            try {
                fp.set("body", body.length == 0 ? Json.MAPPER.nullNode() : Json.MAPPER.readTree(body));
                return fp;
            } catch (IOException e) {
                // not JSON after all: compared as text
            }
        }
        fp.put("body", text);
        return fp;
    }

    /** The key's connection, in one-transaction mode, for the handler's writes; null otherwise. */
    public static Connection connection(ServletRequest request) {
        return (Connection) request.getAttribute(CONNECTION);
    }

    @Override
    public void doFilter(ServletRequest sreq, ServletResponse sres, FilterChain chain)
            throws IOException, ServletException {
        if (!(sreq instanceof HttpServletRequest req) || !(sres instanceof HttpServletResponse res)
                || !methods.contains(req.getMethod().toUpperCase(Locale.ROOT))) {
            chain.doFilter(sreq, sres);
            return;
        }
        String key = req.getHeader(header);
        if (key == null || key.isEmpty()) {
            if (required) {
                send(res, Exchange.missingKey());
            } else {
                chain.doFilter(sreq, sres);
            }
            return;
        }
        String owner;
        try {
            owner = scope.apply(req);
        } catch (RuntimeException e) {
            send(res, Exchange.scopeFailed(e));
            return;
        }
        // an invalid key (400) and a null scope (401) are answered by the exchange, before any query
        byte[] body = req.getInputStream().readAllBytes();
        CachedRequest cached = new CachedRequest(req, body);
        Exchange.Result result;
        try {
            result = new Exchange(idem, policy).run(key, owner, fingerprint.of(req, body), holding -> {
                cached.setAttribute(HOLDING, holding);
                if (holding.connection() != null) {
                    cached.setAttribute(CONNECTION, holding.connection());
                }
                BufferedResponse buffered = new BufferedResponse(res);
                try {
                    chain.doFilter(cached, buffered);
                } finally {
                    cached.removeAttribute(CONNECTION);
                    cached.removeAttribute(HOLDING);
                }
                return buffered.answer();
            });
        } catch (SQLException | RuntimeException e) {
            throw new ServletException("idempotency: " + e.getMessage(), e);
        }
        send(res, result.answer());
    }

    private static void send(HttpServletResponse res, Answer answer) throws IOException {
        res.reset();
        res.setStatus(answer.status());
        for (Map.Entry<String, String> h : answer.headers()) {
            if (h.getKey().equalsIgnoreCase("Content-Type")) {
                res.setContentType(h.getValue());
            } else if (!h.getKey().equalsIgnoreCase("Content-Length")) {
                res.addHeader(h.getKey(), h.getValue());
            }
        }
        res.setContentLength(answer.body().length);
        res.getOutputStream().write(answer.body());
        res.flushBuffer();
    }

    /** The request with its body read already, served again to the handler. */
    private static final class CachedRequest extends HttpServletRequestWrapper {
        private final byte[] body;

        CachedRequest(HttpServletRequest req, byte[] body) {
            super(req);
            this.body = body;
        }

        @Override
        public ServletInputStream getInputStream() {
            ByteArrayInputStream in = new ByteArrayInputStream(body);
            return new ServletInputStream() {
                @Override public int read() { return in.read(); }
                @Override public int read(byte[] b, int off, int len) { return in.read(b, off, len); }
                @Override public boolean isFinished() { return in.available() == 0; }
                @Override public boolean isReady() { return true; }
                @Override public void setReadListener(ReadListener l) { throw new UnsupportedOperationException(); }
            };
        }

        @Override
        public BufferedReader getReader() {
            String enc = getCharacterEncoding();
            Charset cs = enc == null ? StandardCharsets.UTF_8 : Charset.forName(enc);
            return new BufferedReader(new InputStreamReader(getInputStream(), cs));
        }
    }

    /**
     * The handler's response, its body buffered; headers go to the real
     * response (not committed: nothing is flushed) and are read back.
     */
    private static final class BufferedResponse extends HttpServletResponseWrapper {
        private final HttpServletResponse res;
        private final ByteArrayOutputStream buf = new ByteArrayOutputStream();
        private PrintWriter writer;
        private int status = 200;

        BufferedResponse(HttpServletResponse res) {
            super(res);
            this.res = res;
        }

        @Override public void setStatus(int sc) { status = sc; }
        @Override public int getStatus() { return status; }
        @Override public void sendError(int sc) { status = sc; }
        @Override public void sendError(int sc, String msg) { status = sc; }
        @Override public void sendRedirect(String location) { status = 302; setHeader("Location", location); }
        @Override public void flushBuffer() { if (writer != null) { writer.flush(); } }
        @Override public boolean isCommitted() { return false; }
        @Override public void setContentLength(int len) { }
        @Override public void setContentLengthLong(long len) { }
        @Override public void resetBuffer() { buf.reset(); }
        @Override public void reset() { buf.reset(); res.reset(); status = 200; }

        @Override
        public ServletOutputStream getOutputStream() {
            return new ServletOutputStream() {
                @Override public void write(int b) { buf.write(b); }
                @Override public void write(byte[] b, int off, int len) { buf.write(b, off, len); }
                @Override public boolean isReady() { return true; }
                @Override public void setWriteListener(WriteListener l) { throw new UnsupportedOperationException(); }
            };
        }

        @Override
        public PrintWriter getWriter() {
            if (writer == null) {
                writer = new PrintWriter(new OutputStreamWriter(buf, Charset.forName(res.getCharacterEncoding())));
            }
            return writer;
        }

        Answer answer() {
            if (writer != null) {
                writer.flush();
            }
            List<Map.Entry<String, String>> headers = new ArrayList<>();
            if (res.getContentType() != null) {
                headers.add(Map.entry("Content-Type", res.getContentType()));
            }
            for (String name : res.getHeaderNames()) {
                if (name.equalsIgnoreCase("Content-Type") || name.equalsIgnoreCase("Content-Length")) {
                    continue;
                }
                for (String v : res.getHeaders(name)) {
                    headers.add(Map.entry(name, v));
                }
            }
            return new Answer(status, headers, buf.toByteArray());
        }
    }
}
