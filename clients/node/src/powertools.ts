/*
 * powertools.ts (import from 'pg-idempotency/powertools'): PgPersistenceLayer,
 * a persistence layer for @aws-lambda-powertools/idempotency (a subclass of
 * its BasePersistenceLayer, used through makeIdempotent or the decorator).
 *
 *   _putRecord (INPROGRESS)  claim() with the record's expiry as ttl and its
 *                            in-progress expiry (or, without a Lambda context,
 *                            the expiry) as lease; the payload hash is kept
 *                            as the recovery point. A key answered or held
 *                            elsewhere: IdempotencyItemAlreadyExistsError with
 *                            the stored record, which Powertools turns into a
 *                            replay, IdempotencyAlreadyInProgressError or
 *                            IdempotencyValidationError; a key whose answer
 *                            is gone (extension 1.6): AnswerGoneError, which
 *                            Powertools throws as the cause of its
 *                            IdempotencyPersistenceLayerError (the handler
 *                            does not run again)
 *   _getRecord               lookup(): processing is INPROGRESS (in-progress
 *                            expiry: the lease's end), completed COMPLETED,
 *                            AnswerGoneError when its answer is gone
 *   _updateRecord            complete() with the fence of this layer's claim;
 *                            without one (a durable execution's replay, which
 *                            Powertools runs over an existing record): claim
 *                            and complete an absent or lapsed key, complete an
 *                            in-progress one with its current fence, leave an
 *                            answered one as it is
 *   _deleteRecord            release() (the handler threw: the next call runs)
 *
 * Keys over 255 characters are replaced by their SHA-256. Loading this
 * module needs @aws-lambda-powertools/idempotency (2.x) installed.
 */
import { createHash } from 'crypto';
import type { Pool } from 'pg';
import { IdempotencyClient, Fence, isAnswerGone } from './client';
import { AnswerGoneError, isLeaseLost } from './errors';
import { withTransaction } from './tx';

/* eslint-disable @typescript-eslint/no-var-requires */
const { BasePersistenceLayer, IdempotencyRecord } = require('@aws-lambda-powertools/idempotency/persistence');
const { IdempotencyItemAlreadyExistsError, IdempotencyItemNotFoundError, IdempotencyRecordStatus } = require('@aws-lambda-powertools/idempotency');

export interface PgPersistenceLayerOptions {
  pool: Pool;
  scope?: string;
}

const keyOf = (key: string): string => ([...key].length <= 255 ? key : createHash('sha256').update(key).digest('hex'));

export class PgPersistenceLayer extends (BasePersistenceLayer as { new(): any }) {
  private readonly pgPool: Pool;
  private readonly pgScope: string;
  private readonly pgFences = new Map<string, Fence>();

  constructor(opts: PgPersistenceLayerOptions) {
    super();
    this.pgPool = opts.pool;
    this.pgScope = opts.scope ?? '';
  }

  async _putRecord(record: any): Promise<void> {
    if (record.getStatus() !== IdempotencyRecordStatus.INPROGRESS) {
      throw new Error('PgPersistenceLayer: only INPROGRESS records are put');
    }
    const key = keyOf(record.idempotencyKey);
    const now = Date.now();
    const ttl = Math.max(1000, record.expiryTimestamp * 1000 - now);
    const lease = record.inProgressExpiryTimestamp ? Math.min(ttl, Math.max(1, record.inProgressExpiryTimestamp - now)) : ttl;
    const fence = await withTransaction(this.pgPool, async (c) => {
      const api = new IdempotencyClient(c);
      const r = await api.claim(key, { scope: this.pgScope, ttl, lease });
      if (r.outcome === 'gone') throw new AnswerGoneError(key, r.responseCode);
      if (r.outcome !== 'claimed' && r.outcome !== 'resumed') return null;
      if (record.payloadHash) await api.checkpoint(key, r.fence as Fence, record.payloadHash, { lease, scope: this.pgScope });
      return r.fence;
    });
    if (fence === null) {
      const existing = await this._getRecord(record.idempotencyKey);
      throw new IdempotencyItemAlreadyExistsError(`Failed to put record for already existing idempotency key: ${record.idempotencyKey}`, existing);
    }
    this.pgFences.set(key, fence);
  }

  async _getRecord(idempotencyKey: string): Promise<any> {
    const row = await new IdempotencyClient(this.pgPool).lookup(keyOf(idempotencyKey), { scope: this.pgScope });
    if (!row || row.status === 'failed') throw new IdempotencyItemNotFoundError('Item does not exist in persistence store');
    if (isAnswerGone(row)) throw new AnswerGoneError(row.idempotencyKey, row.responseCode);
    return new IdempotencyRecord({
      idempotencyKey,
      status: row.status === 'processing' ? IdempotencyRecordStatus.INPROGRESS : IdempotencyRecordStatus.COMPLETED,
      expiryTimestamp: Math.floor(row.expiresAt.getTime() / 1000),
      inProgressExpiryTimestamp: row.lockedUntil ? row.lockedUntil.getTime() : undefined,
      responseData: row.status === 'completed' ? row.responseBody ?? undefined : undefined,
      payloadHash: row.recoveryPoint && row.recoveryPoint !== 'started' ? row.recoveryPoint : undefined,
    });
  }

  async _updateRecord(record: any): Promise<void> {
    const key = keyOf(record.idempotencyKey);
    const held = this.pgFences.get(key);
    this.pgFences.delete(key);
    const ttl = Math.max(1000, record.expiryTimestamp * 1000 - Date.now());
    const opts = { scope: this.pgScope, ttl };
    if (held !== undefined) {
      await new IdempotencyClient(this.pgPool).complete(key, held, record.responseData ?? null, opts);
      return;
    }
    /* No claim of this layer's: Powertools saves a result without one when a
       durable execution replays (isReplay) over the record its earlier
       invocation left, possibly on another instance. Absent or lapsed: claim
       and complete; in progress: the replay takes the record over with its
       current fence (a newer claim still wins: 55000); answered: it stands. */
    await withTransaction(this.pgPool, async (c) => {
      const api = new IdempotencyClient(c);
      const r = await api.claim(key, { scope: this.pgScope, ttl, lease: ttl });
      let fence = r.fence;
      if (r.outcome === 'in_progress') fence = (await api.lookup(key, { scope: this.pgScope }))?.fence ?? null;
      if (fence === null) return;
      await api.complete(key, fence, record.responseData ?? null, opts);
    });
  }

  async _deleteRecord(record: any): Promise<void> {
    const key = keyOf(record.idempotencyKey);
    const fence = this.pgFences.get(key);
    if (fence === undefined) return;
    this.pgFences.delete(key);
    try {
      await new IdempotencyClient(this.pgPool).release(key, fence, { scope: this.pgScope });
    } catch (e) {
      if (!isLeaseLost(e)) throw e;
    }
  }
}
