package org.pgidempotency.http;

/** The Idempotency-Key rules that hold whatever the database's settings (doc/clients.md). */
public final class KeyRules {
    /** The most characters idempotency.max_key_length allows (1-400). */
    public static final int KEY_MAX_CHARS = 400;

    private KeyRules() {
    }

    /**
     * Why key cannot be an Idempotency-Key, or null: empty, over 400
     * characters (counted as code points), or with a control character
     * (U+0000-U+001F, U+007F).
     */
    public static String problem(String key) {
        if (key == null || key.isEmpty()) {
            return "The key is empty.";
        }
        int n = key.codePointCount(0, key.length());
        if (n > KEY_MAX_CHARS) {
            return "The key has " + n + " characters; at most " + KEY_MAX_CHARS + " are allowed.";
        }
        for (int i = 0; i < key.length(); i++) {
            char ch = key.charAt(i);
            if (ch < ' ' || ch == 0x7f) {
                return "The key contains control characters.";
            }
        }
        return null;
    }
}
