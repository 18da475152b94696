package org.pgidempotency;

import java.time.OffsetDateTime;

/** A row of claim_events (doc/reference.md, "Outbox and inbox"); payload and headers are JSON text. */
public record OutboxEvent(long id, String aggregateType, String aggregateId, String eventType,
                          String payload, String headers, int attempts, long leaseToken,
                          OffsetDateTime createdAt) {
}
