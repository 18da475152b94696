/*
 * node-idempotency.ts: a storage adapter for @node-idempotency/core (its
 * StorageAdapter interface) on the extension, so its Express, Fastify and
 * NestJS plugins keep their keys with the extension's leases and fences.
 *
 *   setIfNotExists(key, val, {ttl})  claim(): claimed or resumed gives true,
 *                                    val is kept as the recovery point; false
 *                                    while a request of this adapter holds
 *                                    the key, even past its lease
 *   set(key, val, {ttl})             complete() with val when this adapter
 *                                    holds the key, or claims an absent one
 *                                    and completes it; the answer is kept
 *                                    ttl from set() (as the library's memory
 *                                    and Redis storages do); a key answered, held
 *                                    by another holder, or whose lease this
 *                                    adapter lost is left as it is (the
 *                                    library's plugins call set() on every
 *                                    reply, replays and refusals included)
 *   get(key)                         the answer, the in-progress value, or
 *                                    undefined; AnswerGoneError (410) when
 *                                    the answer is gone (extension 1.6: kept
 *                                    for response_ttl only), since the
 *                                    library would run the request again
 *   delete(key)                      release() when this adapter holds it
 *   clearExpiredEntries()            purge_expired_batch()
 *
 * ttl is in milliseconds. In-progress values are recovery points, so at
 * most 255 characters (the library writes about 100); keys over 255
 * characters are replaced by their SHA-256.
 */
import { createHash } from 'crypto';
import type { Pool } from 'pg';
import { IdempotencyClient, Fence, isAnswerGone } from './client';
import { AnswerGoneError, isLeaseLost } from './errors';
import { withTransaction } from './tx';

export interface NodeIdempotencyStorageOptions {
  pool: Pool;
  scope?: string;
  /** A holder's lease in ms (default 30000, at most the ttl). */
  leaseMs?: number;
}

export class PgIdempotencyStorage {
  private readonly pool: Pool;
  private readonly scope: string;
  private readonly leaseMs: number;
  private readonly fences = new Map<string, Fence>();

  constructor(opts: NodeIdempotencyStorageOptions) {
    this.pool = opts.pool;
    this.scope = opts.scope ?? '';
    this.leaseMs = opts.leaseMs ?? 30000;
  }

  /** Checks the extension's version (ExtensionVersionError when too old). */
  async connect(): Promise<void> {
    await new IdempotencyClient(this.pool).checkVersion();
  }

  async disconnect(): Promise<void> {
    /* the pool belongs to the caller */
  }

  static keyOf(key: string): string {
    return [...key].length <= 255 ? key : createHash('sha256').update(key).digest('hex');
  }

  private lease(ttl?: number): number {
    return ttl ? Math.min(this.leaseMs, ttl) : this.leaseMs;
  }

  async setIfNotExists(key: string, val: string, { ttl }: { ttl?: number } = {}): Promise<boolean> {
    key = PgIdempotencyStorage.keyOf(key);
    const mine = this.fences.get(key);
    const fence = await withTransaction(this.pool, async (c) => {
      const api = new IdempotencyClient(c);
      if (mine !== undefined) {
        /* a request of this adapter still holds the key (its lease may have
           run out, its process has not): taking the key over would hand its
           fence to whichever set() came first, as set() cannot tell its
           callers apart; so it is in progress, as with the memory storage */
        const row = await api.lookup(key, { scope: this.scope });
        if (row?.status === 'processing' && row.fence === mine) return null;
      }
      const r = await api.claim(key, { scope: this.scope, ttl: ttl || null, lease: this.lease(ttl) });
      if (r.outcome !== 'claimed' && r.outcome !== 'resumed') return null;
      await api.checkpoint(key, r.fence as Fence, val, { lease: this.lease(ttl), scope: this.scope });
      return r.fence;
    });
    if (fence === null) return false;
    this.fences.set(key, fence);
    return true;
  }

  async set(key: string, val: string, { ttl }: { ttl?: number } = {}): Promise<void> {
    key = PgIdempotencyStorage.keyOf(key);
    const held = this.fences.get(key);
    this.fences.delete(key);
    const opts = { scope: this.scope, ttl: ttl || null };
    try {
      if (held !== undefined) {
        /* one statement, no transaction around it: the plugins send the reply
           without awaiting set(), so the sooner the answer commits the fewer
           retries find the key still in progress */
        await new IdempotencyClient(this.pool).complete(key, held, val, opts);
        return;
      }
      await withTransaction(this.pool, async (c) => {
        const api = new IdempotencyClient(c);
        const r = await api.claim(key, { scope: this.scope, ttl: ttl || null, lease: this.lease(ttl) });
        if (r.outcome !== 'claimed' && r.outcome !== 'resumed') return; /* answered or held elsewhere */
        await api.complete(key, r.fence as Fence, val, opts);
      });
    } catch (e) {
      if (!isLeaseLost(e)) throw e; /* another holder took the key over: its answer stands */
    }
  }

  async get(key: string): Promise<string | undefined> {
    key = PgIdempotencyStorage.keyOf(key);
    const row = await new IdempotencyClient(this.pool).lookup(key, { scope: this.scope });
    if (!row) return undefined;
    if (row.status === 'processing') return row.recoveryPoint ?? undefined;
    if (isAnswerGone(row)) throw new AnswerGoneError(row.idempotencyKey, row.responseCode);
    return typeof row.responseBody === 'string' ? row.responseBody : JSON.stringify(row.responseBody);
  }

  async delete(key: string): Promise<void> {
    key = PgIdempotencyStorage.keyOf(key);
    const fence = this.fences.get(key);
    if (fence === undefined) return;
    this.fences.delete(key);
    try {
      await new IdempotencyClient(this.pool).release(key, fence, { scope: this.scope });
    } catch (e) {
      if (!isLeaseLost(e)) throw e;
    }
  }

  async clearExpiredEntries(): Promise<void> {
    await this.pool.query('SELECT * FROM idempotency.purge_expired_batch()');
  }
}
