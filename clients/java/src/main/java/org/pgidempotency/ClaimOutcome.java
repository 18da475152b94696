package org.pgidempotency;

/** The outcome of {@code claim} and {@code execute} (doc/reference.md, "claim"). */
public enum ClaimOutcome {
    /** The key was absent: the caller holds it and runs the operation. */
    CLAIMED,
    /** The holder died or the last try failed retryably: the caller holds it again. */
    RESUMED,
    /** The request was answered: the stored answer is returned. */
    REPLAY,
    /** Answered, and the answer is no longer kept (extension 1.6): 410. */
    GONE,
    /** Another holder is working on the key: 409 with Retry-After. */
    IN_PROGRESS,
    /** The key was used for another request: 422. */
    MISMATCH;

    /** The outcome named by the SQL text ({@code claimed}, {@code in_progress}, ...). */
    public static ClaimOutcome of(String sql) {
        return valueOf(sql.toUpperCase(java.util.Locale.ROOT));
    }

    /** True for the outcomes whose caller holds the key (claimed, resumed). */
    public boolean holds() {
        return this == CLAIMED || this == RESUMED;
    }
}
