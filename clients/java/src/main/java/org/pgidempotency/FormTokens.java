package org.pgidempotency;

import java.time.Duration;
import java.util.UUID;

/**
 * One-time tokens for form submits (doc/reference.md, "One-time tokens"):
 * issue one when the form is rendered (a hidden field), consume it when it
 * is submitted; a second submit of the same form gets false. Consume it in
 * the transaction of the submit's writes ({@link #consume(java.sql.Connection, String, String)})
 * so that a rolled-back submit leaves the token valid.
 */
public final class FormTokens {
    private final Idempotency idem;
    private final Duration ttl;

    /** ttl: how long an issued token is valid (null: idempotency.token_ttl). */
    public FormTokens(Idempotency idem, Duration ttl) {
        this.idem = idem;
        this.ttl = ttl;
    }

    /** A new token for scope (the user or session), as text for the form's hidden field. */
    public String issue(String scope) {
        return idem.inTransaction(c -> idem.issueToken(c, scope, ttl).toString());
    }

    /** True exactly once per token; false for text that is not a token at all. */
    public boolean consume(java.sql.Connection c, String token, String scope) {
        UUID uuid;
        try {
            uuid = UUID.fromString(token == null ? "" : token);
        } catch (IllegalArgumentException e) {
            return false;
        }
        return idem.consumeToken(c, uuid, scope);
    }

    /** consume in a transaction of its own. */
    public boolean consume(String token, String scope) {
        return idem.inTransaction(c -> consume(c, token, scope));
    }
}
