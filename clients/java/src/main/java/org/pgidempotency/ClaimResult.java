package org.pgidempotency;

import java.time.Duration;

/**
 * claim_result (doc/reference.md, "claim"): fence only for the holder,
 * responseCode and responseBody (jsonb text) for a replay, retryAfter for
 * in_progress.
 */
public record ClaimResult(ClaimOutcome outcome, Long fence, String status, Integer responseCode,
                          String responseBody, String recoveryPoint, Integer attempts,
                          Duration retryAfter) {

    /** True when this caller holds the key (claimed or resumed). */
    public boolean holds() {
        return outcome.holds();
    }

    /** Retry-After in whole seconds: rounded up, at least 1. */
    public long retryAfterSeconds() {
        if (retryAfter == null) {
            return 1;
        }
        long s = retryAfter.getSeconds() + (retryAfter.getNano() > 0 ? 1 : 0);
        return Math.max(1, s);
    }
}
