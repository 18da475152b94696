package org.pgidempotency.relay;

import org.pgidempotency.OutboxEvent;

/**
 * Sends one outbox event to the broker (a Kafka or RocketMQ producer, an
 * HTTP call, ...). Return when the broker has it; throw when it does not
 * (the event is marked failed and backed off, and the later events of its
 * aggregate wait in this batch).
 */
@FunctionalInterface
public interface Publisher {
    void publish(OutboxEvent event) throws Exception;
}
