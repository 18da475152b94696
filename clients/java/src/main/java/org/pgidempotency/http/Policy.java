package org.pgidempotency.http;

import java.time.Duration;
import java.util.List;
import java.util.Set;

/**
 * What the filter and the interceptor do with a key; every field has a
 * default (doc/clients.md, the settings table).
 *
 * @param ttl         retention: how long a key and its answer are kept (null: idempotency.default_ttl)
 * @param responseTtl (1.6) how long the answer is replayed, then 410 (null: not sent)
 * @param lease       the holder's lease (null: idempotency.lease_timeout)
 * @param holderWait        (1.6) how long a duplicate of a request in flight waits for its holder (null: not sent; 409 at once)
 * @param oneTransaction the handler's writes on the filter's connection commit with the answer
 * @param storedHeaders  the response headers kept for replays
 * @param keyExpiresHeader    name of the key's expiry header (null leaves it out)
 * @param replayExpiresHeader name of the answer's expiry header (null leaves it out)
 * @param serverConnections   behind a transaction pooler, the server connections it lends this service (its
 *                            pool for the database and user), which claims sleeping with wait keep: at most this
 *                            minus one sleep at once, as the pool's size bounds them without a pooler (0: the
 *                            pool's size alone)
 */
public record Policy(Duration ttl, Duration responseTtl, Duration lease, Duration holderWait, boolean oneTransaction,
                     List<String> storedHeaders, String keyExpiresHeader, String replayExpiresHeader,
                     int serverConnections) {

    public static final List<String> DEFAULT_STORED_HEADERS = List.of("content-type", "location");

    /** The defaults. */
    public static Policy defaults() {
        return new Policy(null, null, null, null, false, DEFAULT_STORED_HEADERS,
            "Idempotency-Key-Expires", "Idempotency-Replay-Expires", 0);
    }

    public Policy withTtl(Duration d) {
        return new Policy(d, responseTtl, lease, holderWait, oneTransaction, storedHeaders,
            keyExpiresHeader, replayExpiresHeader, serverConnections);
    }

    public Policy withResponseTtl(Duration d) {
        return new Policy(ttl, d, lease, holderWait, oneTransaction, storedHeaders,
            keyExpiresHeader, replayExpiresHeader, serverConnections);
    }

    public Policy withLease(Duration d) {
        return new Policy(ttl, responseTtl, d, holderWait, oneTransaction, storedHeaders,
            keyExpiresHeader, replayExpiresHeader, serverConnections);
    }

    public Policy withWait(Duration d) {
        return new Policy(ttl, responseTtl, lease, d, oneTransaction, storedHeaders,
            keyExpiresHeader, replayExpiresHeader, serverConnections);
    }

    public Policy withOneTransaction(boolean on) {
        return new Policy(ttl, responseTtl, lease, holderWait, on, storedHeaders,
            keyExpiresHeader, replayExpiresHeader, serverConnections);
    }

    public Policy withStoredHeaders(List<String> names) {
        return new Policy(ttl, responseTtl, lease, holderWait, oneTransaction, List.copyOf(names),
            keyExpiresHeader, replayExpiresHeader, serverConnections);
    }

    public Policy withExpiryHeaders(String keyExpires, String replayExpires) {
        return new Policy(ttl, responseTtl, lease, holderWait, oneTransaction, storedHeaders,
            keyExpires, replayExpires, serverConnections);
    }

    public Policy withServerConnections(int n) {
        return new Policy(ttl, responseTtl, lease, holderWait, oneTransaction, storedHeaders,
            keyExpiresHeader, replayExpiresHeader, n);
    }

    /** The methods that take a key by default. */
    public static final Set<String> DEFAULT_METHODS = Set.of("POST", "PATCH");
}
