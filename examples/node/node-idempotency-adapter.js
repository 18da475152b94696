'use strict';
/*
 * node-idempotency-adapter.js: a storage adapter for @node-idempotency/core
 * (interface StorageAdapter of @node-idempotency/storage) on the idempotency
 * extension, so that the library's Express, Fastify and NestJS plugins keep
 * their keys in PostgreSQL with the extension's leases and fencing.
 *
 *   setIfNotExists(key, val, {ttl})  claim(); claimed or resumed: true, and
 *                                    val is kept as the key's recovery point
 *   set(key, val, {ttl})             complete() with val as the stored answer
 *                                    (claims the key first if this adapter
 *                                    does not hold it)
 *   get(key)                         lookup(): the completed answer, or the
 *                                    in-progress value, or undefined
 *   clearExpiredEntries()            purge_expired_batch()
 *
 * ttl is in milliseconds, as the library gives it.  An in-progress value is
 * kept as a recovery point and so is limited to 255 characters (the core
 * library writes about 100); completed values are bounded by
 * idempotency.max_response_bytes.  Keys over 255 characters are replaced by
 * their SHA-256.  A holder that crashed stops blocking its key after the
 * lease (opts.leaseMs, default 30 s, at most the ttl): setIfNotExists then
 * returns true again, which an in-memory or Redis store can't offer.  set()
 * never overwrites another holder's completed answer: the extension's
 * answers are final until they expire, so it throws instead.
 */
const crypto = require('crypto');

class PostgresExtensionStorageAdapter {
  /* opts: pool (a pg Pool), scope (default ''), leaseMs (default 30000). */
  constructor({ pool, scope = '', leaseMs = 30000 }) {
    this.pool = pool;
    this.scope = scope;
    this.leaseMs = leaseMs;
    this.fences = new Map();	/* keys this adapter holds -> fence */
  }

  async connect() {
    await this.pool.query('SELECT 1 FROM pg_extension WHERE extname = \'idempotency\'')
      .then(({ rowCount }) => { if (!rowCount) throw new Error('CREATE EXTENSION idempotency first'); });
  }

  async disconnect() {
    await this.pool.end();
  }

  /* The extension's key: the library's key, or its SHA-256 when too long. */
  static keyOf(key) {
    return [...key].length <= 255 ? key : crypto.createHash('sha256').update(key).digest('hex');
  }

  /* The lease for a ttl in milliseconds: leaseMs, at most the ttl. */
  leaseFor(ttl) {
    return `${ttl ? Math.min(this.leaseMs, ttl) : this.leaseMs} milliseconds`;
  }

  /* claim(key) with ttl and lease from the library's milliseconds. */
  async claim(client, key, ttl) {
    const { rows } = await client.query(
      `SELECT outcome, fence::text AS fence
         FROM idempotency.claim($1, NULL, $2, $3::interval, $4::interval)`,
      [key, this.scope, ttl ? `${ttl} milliseconds` : null, this.leaseFor(ttl)]);
    return rows[0];
  }

  async setIfNotExists(key, val, { ttl } = {}) {
    key = PostgresExtensionStorageAdapter.keyOf(key);
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const c = await this.claim(client, key, ttl);
      const won = c.outcome === 'claimed' || c.outcome === 'resumed';
      if (won) {
        await client.query('SELECT idempotency.checkpoint($1, $2, $3, $4::interval, $5)',
          [key, c.fence, val, this.leaseFor(ttl), this.scope]);
      }
      await client.query('COMMIT');
      if (won) this.fences.set(key, c.fence);
      return won;
    } catch (e) {
      await client.query('ROLLBACK').catch(() => {});
      throw e;
    } finally {
      client.release();
    }
  }

  async set(key, val, { ttl } = {}) {
    key = PostgresExtensionStorageAdapter.keyOf(key);
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      let fence = this.fences.get(key);
      if (fence === undefined) {
        const c = await this.claim(client, key, ttl);
        if (c.outcome !== 'claimed' && c.outcome !== 'resumed') {
          throw new Error(`idempotency key "${key}" is held or answered elsewhere (${c.outcome})`);
        }
        fence = c.fence;
      }
      await client.query('SELECT idempotency.complete($1, $2, to_jsonb($3::text), 200, $4)',
        [key, fence, val, this.scope]);
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK').catch(() => {});
      throw e;
    } finally {
      this.fences.delete(key);
      client.release();
    }
  }

  async get(key) {
    key = PostgresExtensionStorageAdapter.keyOf(key);
    const { rows } = await this.pool.query(
      `SELECT CASE WHEN k.status = 'processing' THEN k.recovery_point
                   ELSE k.response_body #>> '{}' END AS val
         FROM idempotency.lookup($1, $2) AS k
        WHERE k.idempotency_key IS NOT NULL`, [key, this.scope]);
    return rows.length ? rows[0].val : undefined;
  }

  /* Deletes expired keys (one batch); the extension's purge_expired does all. */
  async clearExpiredEntries() {
    await this.pool.query('SELECT * FROM idempotency.purge_expired_batch()');
  }
}

module.exports = { PostgresExtensionStorageAdapter };
