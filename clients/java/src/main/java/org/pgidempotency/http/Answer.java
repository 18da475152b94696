package org.pgidempotency.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.pgidempotency.Json;

/**
 * An HTTP answer: status, headers (name, value pairs in order) and body;
 * with the stored shape of doc/clients.md ("The stored answer") and the
 * problem+json answers (RFC 9457) of the behaviour table.
 */
public record Answer(int status, List<Map.Entry<String, String>> headers, byte[] body) {

    public Answer {
        headers = new ArrayList<>(headers);
    }

    /** The first value of header name (case-insensitive), or null. */
    public String header(String name) {
        for (Map.Entry<String, String> h : headers) {
            if (h.getKey().equalsIgnoreCase(name)) {
                return h.getValue();
            }
        }
        return null;
    }

    /** This answer with more headers. */
    public Answer with(List<Map.Entry<String, String>> more) {
        List<Map.Entry<String, String>> all = new ArrayList<>(headers);
        all.addAll(more);
        return new Answer(status, all, body);
    }

    /** An application/problem+json answer: {"type": "about:blank", "title", "status", "detail"}. */
    public static Answer problem(int status, String title, String detail, List<Map.Entry<String, String>> extra) {
        ObjectNode doc = Json.MAPPER.createObjectNode();
        doc.put("type", "about:blank").put("title", title).put("status", status).put("detail", detail);
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        headers.add(Map.entry("Content-Type", "application/problem+json"));
        headers.addAll(extra);
        return new Answer(status, headers, Json.encode(doc).getBytes(StandardCharsets.UTF_8));
    }

    public static Answer problem(int status, String title, String detail) {
        return problem(status, title, detail, List.of());
    }

    /**
     * The jsonb kept for a replay: {"headers": [[name, value], ...], "body":
     * text}, the headers named in keep only, body_base64 instead of body
     * when the body is not UTF-8.
     */
    public ObjectNode stored(Collection<String> keep) {
        ObjectNode doc = Json.MAPPER.createObjectNode();
        var list = doc.putArray("headers");
        for (Map.Entry<String, String> h : headers) {
            if (keep.stream().anyMatch(k -> k.equalsIgnoreCase(h.getKey()))) {
                list.addArray().add(h.getKey().toLowerCase(Locale.ROOT)).add(h.getValue());
            }
        }
        try {
            doc.put("body", StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(body)).toString());
        } catch (CharacterCodingException e) {
            doc.put("body_base64", Base64.getEncoder().encodeToString(body));
        }
        return doc;
    }

    /**
     * The answer replayed from a stored value (responseBody: jsonb text), with
     * Idempotent-Replayed: true. A value without "headers" (stored by another
     * client) is sent as JSON; the Node package's first shape
     * ({"headers": {...}, "body": value}) as the body's JSON text.
     */
    public static Answer replayed(int code, String responseBody) {
        JsonNode doc = Json.parse(responseBody);
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        byte[] body;
        if (doc == null || !doc.isObject() || !doc.has("headers")) {
            headers.add(Map.entry("Content-Type", "application/json"));
            body = (responseBody == null ? "null" : Json.encode(doc)).getBytes(StandardCharsets.UTF_8);
        } else if (doc.get("headers").isObject()) {
            doc.get("headers").fields().forEachRemaining(f -> headers.add(Map.entry(f.getKey(), f.getValue().asText())));
            JsonNode b = doc.get("body");
            body = (b == null ? "null" : Json.encode(b)).getBytes(StandardCharsets.UTF_8);
        } else {
            for (JsonNode h : doc.get("headers")) {
                headers.add(Map.entry(h.get(0).asText(), h.get(1).asText()));
            }
            body = doc.has("body") ? doc.get("body").asText().getBytes(StandardCharsets.UTF_8)
                : Base64.getDecoder().decode(doc.path("body_base64").asText(""));
        }
        headers.add(Map.entry("Idempotent-Replayed", "true"));
        return new Answer(code, headers, body);
    }
}
