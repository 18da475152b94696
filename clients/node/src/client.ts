/*
 * client.ts: a typed client for the SQL API of doc/reference.md: request
 * keys, execute, tokens, transitions, the outbox's functions and the inbox.
 * Every call is one parameterised statement on the Queryable it is given (a
 * pg Pool, or a PoolClient inside the caller's transaction); nothing is kept
 * per session, so any pool (or transaction pooler) fits. Fences and lease
 * tokens are bigints, passed as decimal strings.
 */
import type { QueryResult, QueryResultRow } from 'pg';
import { ExtensionVersionError } from './errors';

/** A pg Pool, Client or PoolClient. */
export interface Queryable {
  query<R extends QueryResultRow = any>(text: string, values?: unknown[]): Promise<QueryResult<R>>;
}

/** An interval: milliseconds, or any interval text PostgreSQL reads. */
export type Interval = number | string;
/** A fence or lease token: a bigint as a decimal string. */
export type Fence = string;
export type KeyStatus = 'processing' | 'completed' | 'failed';
/** gone (extension 1.6): the answer was kept for response_ttl only; the request is not run again. */
export type ClaimOutcome = 'claimed' | 'resumed' | 'replay' | 'gone' | 'in_progress' | 'mismatch';

export interface ClaimResult {
  outcome: ClaimOutcome;
  fence: Fence | null;
  status: KeyStatus | null;
  responseCode: number | null;
  /** replay: the stored answer; gone: null (the status and response code stay). */
  responseBody: unknown;
  recoveryPoint: string | null;
  attempts: number | null;
  /** in_progress: milliseconds left on the holder's lease. */
  retryAfterMs: number | null;
}

export interface KeyRow {
  scope: string;
  idempotencyKey: string;
  status: KeyStatus;
  fence: Fence | null;
  attempts: number;
  recoveryPoint: string | null;
  responseCode: number | null;
  responseBody: unknown;
  retryable: boolean | null;
  lockedUntil: Date | null;
  createdAt: Date;
  updatedAt: Date;
  expiresAt: Date;
  /**
   * Extension 1.6: when the stored answer goes (claims then get gone);
   * new Date(-8.64e15) once purge_expired has dropped it ('-infinity');
   * null while it lives as long as the key, and always before 1.6.
   */
  responseExpiresAt: Date | null;
}

/** keyExpiry(): the times HTTP answers advertise, whole seconds. */
export interface KeyExpiry {
  /** The key's expires_at: after it a retry runs as a new request. */
  expiresAt: Date;
  /** Extension 1.6: when a retry starts to get gone; null when the answer is kept as long as the key, or is gone. */
  responseExpiresAt: Date | null;
}

export interface OutboxEvent {
  id: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  payload: unknown;
  headers: unknown;
  attempts: number;
  leaseToken: Fence;
  takeovers: number;
}

export interface NewEvent {
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  payload: unknown;
  headers?: unknown;
}

export type TransitionOutcome = 'applied' | 'already' | 'rejected' | 'not_found';

/** The oldest extension version this package works with. */
export const MIN_EXTENSION_VERSION = '1.3';

/** An Interval as the text of a PostgreSQL interval (null stays null). */
export function interval(value: Interval | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new RangeError(`interval: ${value} is not a number of milliseconds`);
    return `${value} milliseconds`;
  }
  return value;
}

const json = (v: unknown): string | null => (v === undefined ? null : JSON.stringify(v));

/**
 * The named interval arguments of extension 1.6 (response_ttl, wait) of
 * a call whose other arguments are params: ", name => $n::interval" for
 * each one given, its value appended to params; nothing for the others,
 * so that a call without them works with a database before 1.6 too. The
 * names are this file's constants, never input.
 */
function namedIntervals(params: unknown[], named: Record<string, Interval | null | undefined>): string {
  let sql = '';
  for (const [name, value] of Object.entries(named)) {
    if (value === null || value === undefined) continue;
    params.push(interval(value));
    sql += `, ${name} => $${params.length}::interval`;
  }
  return sql;
}

/** true when row's stored answer has gone (extension 1.6: its responseExpiresAt has come). */
export function isAnswerGone(row: KeyRow, at: Date = new Date()): boolean {
  const answered = row.status === 'completed' || (row.status === 'failed' && row.retryable === false);
  return answered && row.responseExpiresAt !== null && row.responseExpiresAt.getTime() <= at.getTime();
}

/** lookup()'s row; response_expires_at is absent before 1.6. */
function keyRow(r: any): KeyRow {
  const goes = r.response_expires_at ?? null;
  return {
    scope: r.scope, idempotencyKey: r.idempotency_key, status: r.status_text, fence: r.fence_text,
    attempts: r.attempts, recoveryPoint: r.recovery_point, responseCode: r.response_code,
    responseBody: r.response_body, retryable: r.retryable, lockedUntil: r.locked_until,
    createdAt: r.created_at, updatedAt: r.updated_at, expiresAt: r.expires_at,
    // pg reads '-infinity' as -Infinity
    responseExpiresAt: goes === null ? null : typeof goes === 'number' ? new Date(goes < 0 ? -8.64e15 : 8.64e15) : goes,
  };
}

/** Compares dotted version strings: negative, 0 or positive. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map((s) => parseInt(s, 10) || 0);
  const pb = b.split('.').map((s) => parseInt(s, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

const CLAIM_COLUMNS = `outcome, fence::text AS fence, status::text AS status, response_code,
  response_body, recovery_point, attempts,
  (extract(epoch FROM retry_after) * 1000)::float8 AS retry_after_ms`;

/**
 * keyExpiry()'s statement: lookup()'s expires_at and response_expires_at,
 * rounded up to the second. The row is read through to_jsonb, with the
 * body left out first (jsonb_populate_record), so that the statement
 * works before 1.6, where the row has no response_expires_at, without
 * serialising an answer of up to idempotency.max_response_bytes.
 */
const KEY_EXPIRY = `SELECT to_timestamp(ceil(extract(epoch FROM k.expires_at))) AS expires_at,
       CASE WHEN k.answer_goes > clock_timestamp()
            THEN to_timestamp(ceil(extract(epoch FROM k.answer_goes))) END AS response_expires_at
  FROM (SELECT l.expires_at,
               (to_jsonb(jsonb_populate_record(l, '{"response_body": null}'))
                  ->> 'response_expires_at')::timestamptz AS answer_goes
          FROM idempotency.lookup($1, $2) AS l
         WHERE l.idempotency_key IS NOT NULL) AS k`;

/** A row with its snake_case columns as camelCase fields (the queries name exactly T's fields). */
function camel<T>(r: Record<string, unknown>): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) out[k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())] = v;
  return out as T;
}

function claimResult(r: any): ClaimResult {
  const c = camel<ClaimResult>(r);
  return { ...c, retryAfterMs: c.retryAfterMs === null ? null : Math.max(0, Number(c.retryAfterMs)) };
}

/**
 * IdempotencyClient(db): db is a pg Pool (each call its own transaction) or
 * a client in the caller's transaction. on(client) gives the same API on
 * another Queryable, e.g. inside a transaction.
 */
export class IdempotencyClient {
  readonly db: Queryable;
  constructor(db: Queryable) {
    this.db = db;
  }

  on(db: Queryable): IdempotencyClient {
    return new IdempotencyClient(db);
  }

  /** Runs one statement: its first row's column. */
  private async value<T>(sql: string, params: unknown[], column: string): Promise<T> {
    const { rows } = await this.db.query(sql, params);
    return rows[0][column];
  }

  /** claim_result of idempotency.<call> (a fixed call of this file, never input). */
  private async claimed(call: string, params: unknown[]): Promise<ClaimResult> {
    const { rows } = await this.db.query(`SELECT ${CLAIM_COLUMNS} FROM idempotency.${call}`, params);
    return claimResult(rows[0]);
  }

  /** Runs one statement: the column of every row. */
  private async column<T>(sql: string, params: unknown[], column: string): Promise<T[]> {
    const { rows } = await this.db.query(sql, params);
    return rows.map((r: any) => r[column]);
  }

  /**
   * The installed version: pg_extension's extversion, or for the portable
   * edition's plain script idempotency.plain_version; null when neither.
   */
  async extensionVersion(): Promise<string | null> {
    const ext = await this.db.query(
      "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'idempotency'");
    if (ext.rows.length) return ext.rows[0].extversion;
    const plain = await this.db.query(
      "SELECT pg_catalog.to_regclass('idempotency.plain_version') IS NOT NULL AS present");
    if (!plain.rows[0].present) return null;
    const v = await this.db.query('SELECT version FROM idempotency.plain_version');
    return v.rows.length ? v.rows[0].version : null;
  }

  /** Throws ExtensionVersionError unless the database's version is supported. */
  async checkVersion(required: string = MIN_EXTENSION_VERSION): Promise<string> {
    const found = await this.extensionVersion();
    if (found === null || compareVersions(found, required) < 0) {
      throw new ExtensionVersionError(found, required);
    }
    return found;
  }

  /* ---- request keys ---- */

  /**
   * wait (extension 1.6): when a holder is working on the key, wait up to
   * this long for it to finish, then answer as a claim made after it
   * (replay, gone, resumed or claimed; in_progress only when the wait ran
   * out). It needs the library in shared_preload_libraries (else 55000)
   * and READ COMMITTED (else 0A000); doc/reference.md, "Waiting for the
   * holder". Sent, by name, only when given.
   */
  async claim(key: string, opts: { request?: unknown; scope?: string; ttl?: Interval | null; lease?: Interval | null; wait?: Interval | null } = {}): Promise<ClaimResult> {
    const params = [key, json(opts.request), opts.scope ?? '', interval(opts.ttl), interval(opts.lease)];
    return this.claimed(`claim($1, $2::jsonb, $3, $4::interval, $5::interval${namedIntervals(params, { wait: opts.wait })})`, params);
  }

  /**
   * responseTtl (extension 1.6): how long the answer is replayed (default
   * idempotency.default_response_ttl, unset: as long as the key); later
   * claims get gone. Sent only when given.
   */
  async complete(key: string, fence: Fence, responseBody: unknown,
    opts: { responseCode?: number; scope?: string; ttl?: Interval | null; responseTtl?: Interval | null } = {}): Promise<void> {
    const params = [key, fence, json(responseBody) ?? 'null', opts.responseCode ?? 200, opts.scope ?? '', interval(opts.ttl)];
    await this.db.query(
      `SELECT idempotency.complete($1, $2::bigint, $3::jsonb, $4, $5, $6::interval${namedIntervals(params, { response_ttl: opts.responseTtl })})`,
      params);
  }

  /** responseTtl as for complete(), for a final failure only (a retryable one raises 22023). */
  async fail(key: string, fence: Fence,
    opts: { error?: unknown; responseCode?: number; retryable?: boolean; scope?: string; ttl?: Interval | null; responseTtl?: Interval | null } = {}): Promise<void> {
    const params = [key, fence, json(opts.error), opts.responseCode ?? 500, opts.retryable ?? true, opts.scope ?? '', interval(opts.ttl)];
    await this.db.query(
      `SELECT idempotency.fail($1, $2::bigint, $3::jsonb, $4, $5, $6, $7::interval${namedIntervals(params, { response_ttl: opts.responseTtl })})`,
      params);
  }

  async checkpoint(key: string, fence: Fence, recoveryPoint: string | null,
    opts: { lease?: Interval | null; scope?: string } = {}): Promise<void> {
    await this.db.query(
      'SELECT idempotency.checkpoint($1, $2::bigint, $3, $4::interval, $5)',
      [key, fence, recoveryPoint, interval(opts.lease), opts.scope ?? '']);
  }

  async release(key: string, fence: Fence, opts: { scope?: string } = {}): Promise<void> {
    await this.db.query('SELECT idempotency.release($1, $2::bigint, $3)', [key, fence, opts.scope ?? '']);
  }

  /** The key's row, or null when it is absent or expired. */
  async lookup(key: string, opts: { scope?: string } = {}): Promise<KeyRow | null> {
    // l.*: the columns of the installed version (response_expires_at from 1.6)
    const { rows } = await this.db.query(
      `SELECT l.*, l.status::text AS status_text, l.fence::text AS fence_text
         FROM idempotency.lookup($1, $2) AS l WHERE l.idempotency_key IS NOT NULL`,
      [key, opts.scope ?? '']);
    return rows.length ? keyRow(rows[0]) : null;
  }

  /**
   * When the key is forgotten and when its stored answer goes, for HTTP
   * headers, or null when the key is absent or expired. Both times are
   * rounded up to the whole second (an HTTP date has no fraction), so
   * that each is in force from the second it names: expiresAt, the key's
   * expires_at (after it a retry runs as a new request);
   * responseExpiresAt, its response_expires_at while that is still to
   * come (after it a retry gets gone), else null: the answer lives as long
   * as the key, is gone already, or the database is older than 1.6.
   */
  async keyExpiry(key: string, opts: { scope?: string } = {}): Promise<KeyExpiry | null> {
    const { rows } = await this.db.query(KEY_EXPIRY, [key, opts.scope ?? '']);
    return rows.length ? { expiresAt: rows[0].expires_at, responseExpiresAt: rows[0].response_expires_at } : null;
  }

  /**
   * execute(): one statement ($1..$n bound as text) run once per key;
   * responseTtl as for complete(), wait as for claim().
   */
  async execute(key: string, request: unknown, statement: string, params: Array<string | number | null> = [],
    opts: { scope?: string; ttl?: Interval | null; responseTtl?: Interval | null; wait?: Interval | null } = {}): Promise<ClaimResult> {
    const args = [key, json(request), statement, params.map((p) => (p === null ? null : String(p))), opts.scope ?? '', interval(opts.ttl)];
    return this.claimed(`execute($1, $2::jsonb, $3, $4::text[], $5, $6::interval${namedIntervals(args, { response_ttl: opts.responseTtl, wait: opts.wait })})`, args);
  }

  /* ---- one-time tokens ---- */

  async issueToken(opts: { scope?: string; ttl?: Interval | null } = {}): Promise<string> {
    return this.value('SELECT idempotency.issue_token($1, $2::interval)::text AS token',
      [opts.scope ?? '', interval(opts.ttl)], 'token');
  }

  async consumeToken(token: string, opts: { scope?: string } = {}): Promise<boolean> {
    return this.value('SELECT idempotency.consume_token($1::uuid, $2) AS ok', [token, opts.scope ?? ''], 'ok');
  }

  /* ---- state machines ---- */

  /**
   * transition(): table is a name as regclass reads it (schema-qualified,
   * quoted where needed); columns are plain names. All go as parameters.
   */
  async transition(table: string, keyColumn: string, key: string | number, stateColumn: string,
    fromState: string, toState: string, setColumns?: Record<string, unknown>): Promise<{ outcome: TransitionOutcome; currentState: string | null }> {
    const { rows } = await this.db.query(
      `SELECT outcome, current_state FROM idempotency.transition($1::regclass, $2::name, $3, $4::name, $5, $6, $7::jsonb)`,
      [table, keyColumn, String(key), stateColumn, fromState, toState, json(setColumns)]);
    return { outcome: rows[0].outcome, currentState: rows[0].current_state };
  }

  /* ---- outbox ---- */

  async enqueueEvent(e: NewEvent): Promise<string> {
    return this.value('SELECT idempotency.enqueue_event($1, $2, $3, $4::jsonb, $5::jsonb)::text AS id',
      [e.aggregateType, e.aggregateId, e.eventType, json(e.payload), json(e.headers)], 'id');
  }

  async enqueueEvents(events: NewEvent[]): Promise<string[]> {
    return this.column(
      'SELECT id::text AS id FROM idempotency.enqueue_events($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[]) AS id',
      [events.map((e) => e.aggregateType), events.map((e) => e.aggregateId), events.map((e) => e.eventType),
        events.map((e) => json(e.payload)), events.map((e) => json(e.headers))], 'id');
  }

  /** claim_events(); run it on a pool or a connection outside a transaction (READ COMMITTED). */
  async claimEvents(opts: { batch?: number; lease?: Interval } = {}): Promise<OutboxEvent[]> {
    const { rows } = await this.db.query(
      `SELECT id::text AS id, aggregate_type, aggregate_id, event_type, payload, headers, attempts,
              lease_token::text AS lease_token, takeovers
         FROM idempotency.claim_events($1, $2::interval)`,
      [opts.batch ?? 100, interval(opts.lease ?? 30000)]);
    return rows.map((r: any) => camel<OutboxEvent>(r));
  }

  async markPublished(ids: string[], leaseToken: Fence | null): Promise<number> {
    return this.value('SELECT idempotency.mark_published($1::bigint[], $2::bigint) AS n', [ids, leaseToken], 'n');
  }

  async markFailed(ids: string[], error: string, leaseToken: Fence | null): Promise<number> {
    return this.value('SELECT idempotency.mark_failed($1::bigint[], $2, $3::bigint) AS n', [ids, error, leaseToken], 'n');
  }

  async outboxQuietCommits(): Promise<number> {
    return this.value('SELECT idempotency.outbox_quiet_commits() AS n', [], 'n');
  }

  /* ---- inbox ---- */

  /** true the first time (consumer, eventId) is seen; run side effects in the same transaction. */
  async processOnce(consumer: string, eventId: string): Promise<boolean> {
    return this.value('SELECT idempotency.process_once($1, $2::text) AS first', [consumer, eventId], 'first');
  }

  /** The ids of eventIds seen for the first time, in order of first occurrence. */
  async processOnceBatch(consumer: string, eventIds: string[]): Promise<string[]> {
    return this.column('SELECT id FROM idempotency.process_once($1, $2::text[]) AS id', [consumer, eventIds], 'id');
  }
}
