package org.pgidempotency;

import java.time.Instant;

/**
 * When a key is forgotten and when its stored answer goes, rounded up to
 * the second (doc/clients.md, "Expiry headers"). responseExpiresAt is null
 * when the answer lives as long as the key, or is gone already.
 */
public record KeyExpiry(Instant expiresAt, Instant responseExpiresAt) {
}
