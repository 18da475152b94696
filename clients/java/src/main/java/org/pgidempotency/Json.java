package org.pgidempotency;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * JSON values passed to the extension's jsonb arguments: any value Jackson
 * can serialize, or JSON text already written, wrapped with {@link #raw}.
 */
public final class Json {
    /** The package's ObjectMapper (Jackson's defaults). */
    public static final ObjectMapper MAPPER = new ObjectMapper();

    private Json() {
    }

    /** JSON text passed as it is. */
    public record Raw(String text) {
    }

    /** text as a JSON value, not encoded again. */
    public static Raw raw(String text) {
        return new Raw(text);
    }

    /** value as JSON text; null stays null (SQL NULL). */
    public static String encode(Object value) {
        if (value == null) {
            return null;
        }
        if (value instanceof Raw r) {
            return r.text();
        }
        try {
            return MAPPER.writeValueAsString(value);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("not serializable as JSON: " + e.getMessage(), e);
        }
    }

    /** JSON text parsed into a tree; null for null. */
    public static JsonNode parse(String text) {
        if (text == null) {
            return null;
        }
        try {
            return MAPPER.readTree(text);
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("not JSON: " + e.getMessage(), e);
        }
    }
}
