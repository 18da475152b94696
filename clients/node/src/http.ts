/*
 * http.ts: the HTTP behaviour shared by the Express and Fastify bindings
 * (the Idempotency-Key header draft, as the README's table says):
 *
 *   no key where one is required        400 problem+json
 *   key over 400 characters or with     400 problem+json, before any query
 *     control characters (keyProblem)
 *   claim raises 22023 and the key is   400 problem+json; another 22023 (a
 *     over the database's               retention shorter than the lease:
 *     idempotency.max_key_length        the options' mistake) is thrown
 *   no scope (scope function: null)     401 problem+json
 *   scope or fingerprint function       500 problem+json, nothing claimed,
 *     throws                            the handler does not run
 *   claimed / resumed                   the handler runs; its answer is stored
 *   replay                              stored status, headers and body,
 *                                       Idempotent-Replayed: true
 *   gone (extension 1.6: the answer     410 problem+json; the handler does
 *     was kept for responseTtl only)    not run again
 *   in_progress (with wait: the holder  409 problem+json, Retry-After (s)
 *     still works when it runs out)
 *   mismatch                            422 problem+json
 *   handler throws HttpError 4xx        fail(), not retryable: the answer is final
 *   handler throws anything else        fail(), retryable: 500 problem+json
 *   lease lost while storing (55000)    409 problem+json, Retry-After: 1
 *   claim raises 55000 or 0A000 (wait   thrown: the options' or the
 *     without the library preloaded,    server's mistake, not the request's
 *     or not READ COMMITTED)
 *   database unreachable or failing     503 problem+json
 *
 * Every answer decided by a claim of the key (all but the 400s, 401 and
 * 503) carries Idempotency-Key-Expires, the key's expires_at, and, while
 * the stored answer is kept for less than the key (responseTtl),
 * Idempotency-Replay-Expires, its response_expires_at: read with
 * keyExpiry() once the answer is settled, and left out when the key is
 * not there or the read fails (doc/clients.md, "Expiry headers").
 *
 * The stored response_body is {"headers": [[name, value], ...], "body":
 * "<the body as sent>"} (storedAnswer(); answers kept as {"headers": {...},
 * "body": <JSON>} by 0.1.0 replay too). In
 * transaction mode the claim, the handler's queries on ctx.db and complete
 * (or fail, after a rollback to a savepoint) commit together; otherwise the
 * claim commits first and the handler checkpoints its phases.
 */
import type { Pool, PoolClient } from 'pg';
import { IdempotencyClient, Interval, Queryable, Fence } from './client';
import { HttpError, sqlState, SqlState } from './errors';
import { withTransaction } from './tx';

export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  /** The body as a value (what a NestJS controller returned, or the parsed JSON of a replay). */
  body: unknown;
  /** The body as sent, byte for byte: what a replay sends again. */
  text: string;
}

/** What a handler returns: status (default 200), JSON body, headers to send and store. */
export interface HandlerResult {
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface HandlerContext {
  /** null when the key is optional and absent. */
  key: string | null;
  scope: string;
  fence: Fence | null;
  outcome: 'claimed' | 'resumed' | null;
  attempts: number;
  /** 'started', or the last checkpoint of an earlier attempt. */
  recoveryPoint: string;
  /** The handler's queries: in transaction mode the transaction that stores the answer. */
  db: Queryable;
  /** Records progress and extends the lease. */
  checkpoint(name: string): Promise<void>;
  /** Runs fn unless an earlier attempt got past name; then checkpoints name. */
  phase<T>(name: string, fn: () => Promise<T>): Promise<T | undefined>;
}

/** The request as the bindings see it. */
export interface RequestInfo<Req> {
  req: Req;
  key: string | undefined;
  method: string;
  path: string;
  body: unknown;
}

export interface IdempotencyOptions<Req> {
  pool: Pool;
  /** Answer 400 when the key is missing (default true); false: run without bookkeeping. */
  required?: boolean;
  /** The header's name (default Idempotency-Key). */
  header?: string;
  /** The key's scope, e.g. the tenant or user; null answers 401. Default: '' for all. */
  scope?: (req: Req) => string | null | undefined | Promise<string | null | undefined>;
  /** What must match for a replay; default {method, path, body}. */
  fingerprint?: (info: RequestInfo<Req>) => unknown;
  /** How long a key and its answer are kept (default: idempotency.default_ttl). */
  retention?: Interval;
  /**
   * Extension 1.6: how long the answer is replayed, within the retention
   * (default: idempotency.default_response_ttl, unset: as long as the key);
   * after it the key answers 410 and the handler does not run again.
   */
  responseTtl?: Interval;
  /** The holder's lease (default: idempotency.lease_timeout). */
  lease?: Interval;
  /**
   * Extension 1.6: how long a duplicate of a request in flight waits for
   * its holder to finish (then it gets the holder's answer) before it is
   * answered 409. Default: no wait. Needs the library in
   * shared_preload_libraries. A waiting request holds a pool connection:
   * at most the pool's max minus one requests wait at once (see
   * enterWait), the others are answered 409 at once.
   */
  wait?: Interval;
  /**
   * Behind a transaction pooler: the server connections it lends this
   * service (its pool for the database and user), which sleeping claims
   * keep: at most this minus one sleep at once, as the pool's max bounds
   * them without a pooler (default: the pool's max alone).
   */
  serverConnections?: number;
  /**
   * The header with the key's expiry (default Idempotency-Key-Expires);
   * null leaves it out.
   */
  keyExpiresHeader?: string | null;
  /**
   * The header with the stored answer's expiry when it is kept for less
   * than the key (default Idempotency-Replay-Expires); null leaves it out.
   * With both null no expiry is read.
   */
  replayExpiresHeader?: string | null;
  /** Run the handler's queries (ctx.db) in the transaction that stores the answer. */
  transaction?: boolean;
}

export type Handler<Req> = (req: Req, ctx: HandlerContext) => Promise<HandlerResult> | HandlerResult;

export function problem(status: number, title: string, detail: string, headers: Record<string, string> = {}): HttpAnswer {
  const body = { type: 'about:blank', title, status, detail };
  return {
    status,
    headers: { ...headers, 'content-type': 'application/problem+json' },
    body,
    text: JSON.stringify(body),
  };
}

/**
 * The jsonb a stored answer is kept as, the Python package's format:
 * {"headers": [[name, value], ...], "body": "<the body as sent>"}, so a
 * replay sends the same bytes (a jsonb body would come back with its keys
 * reordered and its spacing lost).
 */
export function storedAnswer(a: HttpAnswer): { headers: [string, string][]; body: string } {
  return { headers: Object.entries(a.headers), body: a.text };
}

/**
 * The answer a stored response_body replays: the format of storedAnswer(),
 * or the one this package kept in 0.1.0 ({"headers": {...}, "body":
 * <a JSON value>}, sent as its JSON text), or another client's jsonb (sent
 * as JSON).
 */
export function replayedAnswer(status: number, doc: unknown): HttpAnswer {
  const d = (doc ?? null) as { headers?: unknown; body?: unknown; body_base64?: unknown } | null;
  if (d !== null && typeof d === 'object' && Array.isArray(d.headers)) {
    const headers: Record<string, string> = {};
    for (const [k, v] of d.headers as [string, string][]) headers[String(k).toLowerCase()] = String(v);
    const text = typeof d.body === 'string' ? d.body
      : typeof d.body_base64 === 'string' ? Buffer.from(d.body_base64, 'base64').toString('latin1') : '';
    let body: unknown = text;
    try { body = text === '' ? null : JSON.parse(text); } catch { /* not JSON: the text */ }
    return { status, headers: { ...headers, 'idempotent-replayed': 'true' }, body, text };
  }
  if (d !== null && typeof d === 'object' && !Array.isArray(d) && 'headers' in d) {
    const body = d.body ?? null;
    return {
      status, headers: { ...((d.headers ?? {}) as Record<string, string>), 'idempotent-replayed': 'true' },
      body, text: JSON.stringify(body),
    };
  }
  return {
    status, headers: { 'content-type': 'application/json', 'idempotent-replayed': 'true' },
    body: d, text: JSON.stringify(d),
  };
}

/* An error's HTTP status and body: HttpError, or any error with getStatus() (NestJS's HttpException). */
function errorStatus(e: unknown): { status?: number; body?: unknown } {
  if (e instanceof HttpError) return { status: e.status, body: e.body ?? { error: e.message } };
  const x = e as { getStatus?: () => unknown; getResponse?: () => unknown } | null;
  if (x && typeof x.getStatus === 'function') {
    const status = x.getStatus();
    if (typeof status === 'number') return { status, body: x.getResponse?.() };
  }
  return {};
}

/** The most characters idempotency.max_key_length allows (doc/reference.md, Settings: 1-400). */
export const KEY_MAX_CHARS = 400;

/**
 * Why key cannot be an Idempotency-Key, or null: doc/reference.md's rule
 * (1 to idempotency.max_key_length characters) as far as it holds whatever
 * the setting, and HTTP's (a field value has no control characters).
 */
export function keyProblem(key: string): string | null {
  if (key === '') return 'The key is empty.';
  const chars = [...key].length;
  if (chars > KEY_MAX_CHARS) return `The key has ${chars} characters; at most ${KEY_MAX_CHARS} are allowed.`;
  if (/[\u0000-\u001f\u007f]/.test(key)) return 'The key contains control characters.';
  return null;
}

/**
 * claim's refusal: 22023 (invalid_parameter_value: the key's fault, or the
 * options'), 55000 or 0A000 (wait without the library preloaded, or in a
 * transaction that is not READ COMMITTED): none of them is a lease lost
 * or a store that fails.
 */
class ClaimRefused extends Error {
  readonly refusal: unknown;
  constructor(refusal: unknown) {
    super(`claim refused (${sqlState(refusal)})`);
    this.refusal = refusal;
  }
}
const CLAIM_REFUSALS: readonly string[] = [SqlState.invalidParameterValue, SqlState.leaseLost, SqlState.featureNotSupported];

/** true when key has more characters than the database's idempotency.max_key_length (default 255). */
async function keyTooLong(db: Queryable, key: string): Promise<boolean> {
  const { rows } = await db.query(
    "SELECT char_length($1) > coalesce(current_setting('idempotency.max_key_length', true)::int, 255) AS too_long", [key]);
  return rows[0].too_long;
}

function errorAnswer(e: unknown): { answer: HttpAnswer; retryable: boolean } {
  const { status, body } = errorStatus(e);
  if (status !== undefined && status >= 400 && status < 500) {
    const value = body ?? null;
    return { answer: { status, headers: { 'content-type': 'application/json' }, body: value, text: JSON.stringify(value) }, retryable: false };
  }
  return { answer: problem(500, 'Internal Server Error', 'The request failed; it may be retried with the same key.'), retryable: true };
}

/**
 * The claims that may sleep with wait at once, per pool. A sleeping claim
 * keeps its connection, and a holder needs one for its handler's queries
 * and for complete: were every connection of the pool asleep in claim, the
 * holder would wait until its lease ran out and a waiter took the key
 * over, running the request twice. The server lets one claim per key
 * sleep (idempotency.max_waiters_per_key); this bounds the sleepers of all
 * keys to the pool's max minus one, so a connection is always left for
 * the holders. A duplicate past the bound claims without wait: 409 with
 * Retry-After at once. The wait itself never outlasts the holder's lease:
 * the server wakes the waiter when the lease runs out. Behind a
 * transaction pooler the connections a sleeper keeps are the pooler's
 * server connections (serverConnections, when fewer).
 */
const sleepers = new WeakMap<object, number>();

function enterWait(pool: Pool, servers?: number): boolean {
  const max = Math.min((pool as unknown as { options?: { max?: number } }).options?.max ?? 10, servers ?? Infinity);
  const n = sleepers.get(pool) ?? 0;
  if (n >= max - 1) return false;
  sleepers.set(pool, n + 1);
  return true;
}

function leaveWait(pool: Pool): void {
  sleepers.set(pool, (sleepers.get(pool) ?? 1) - 1);
}

/** pg-pool's refusal to lend a connection within connectionTimeoutMillis: nothing was sent. */
function poolTimedOut(e: unknown): boolean {
  return e instanceof Error && e.message === 'timeout exceeded when trying to connect';
}

/**
 * Runs fn, the holder's complete or fail, again while the pool has no
 * connection to lend (connectionTimeoutMillis), for up to 30 s (the
 * default lease): the handler's side effect has run, and an answer not
 * stored lets a retry run it again once the lease is out.
 */
async function storing(fn: () => Promise<void>): Promise<void> {
  const until = Date.now() + 30000;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (!poolTimedOut(e) || Date.now() > until) throw e;
    }
  }
}

/** The engine behind idempotentExpress and idempotentFastify. */
export function createIdempotency<Req>(opts: IdempotencyOptions<Req>) {
  const pool = opts.pool;
  const api = new IdempotencyClient(pool);
  const required = opts.required !== false;
  const scopeOf = opts.scope ?? (() => '');
  const fingerprint = opts.fingerprint ?? ((i: RequestInfo<Req>) => ({ method: i.method, path: i.path, body: i.body ?? null }));
  const ttl = opts.retention ?? null;
  const responseTtl = opts.responseTtl ?? null;
  const lease = opts.lease ?? null;
  const wait = opts.wait ?? null;
  const headerName = (name: string | null | undefined, fallback: string) =>
    (name === undefined ? fallback : name)?.toLowerCase() ?? null;
  const keyExpiresHeader = headerName(opts.keyExpiresHeader, 'Idempotency-Key-Expires');
  const replayExpiresHeader = headerName(opts.replayExpiresHeader, 'Idempotency-Replay-Expires');

  function context(db: Queryable, key: string | null, scope: string, fence: Fence | null,
    outcome: 'claimed' | 'resumed' | null, attempts: number, recoveryPoint: string): HandlerContext {
    let skipping = recoveryPoint !== 'started';
    const ctx: HandlerContext = {
      key, scope, fence, outcome, attempts, recoveryPoint, db,
      async checkpoint(name) {
        if (key !== null && fence !== null) await api.on(db).checkpoint(key, fence, name, { lease, scope });
        ctx.recoveryPoint = name;
      },
      async phase(name, fn) {
        if (skipping) {
          if (name === recoveryPoint) skipping = false;
          return undefined;
        }
        const result = await fn();
        await ctx.checkpoint(name);
        return result;
      },
    };
    return ctx;
  }

  function answerOf(r: HandlerResult): HttpAnswer {
    const body = r.body === undefined ? null : r.body;
    return {
      status: r.status ?? 200,
      headers: { 'content-type': 'application/json', ...lower(r.headers ?? {}) },
      body,
      text: JSON.stringify(body),
    };
  }

  /** Runs the handler as the key's holder; returns the answer to send. */
  async function hold(info: RequestInfo<Req>, handler: Handler<Req>, key: string, scope: string,
    request: unknown, client: PoolClient | null): Promise<HttpAnswer> {
    const db: Queryable = client ?? pool;
    const on = api.on(db);
    let claim;
    const waiting = wait !== null && enterWait(pool, opts.serverConnections);
    try {
      claim = await on.claim(key, { request, scope, ttl, lease, wait: waiting ? wait : null });
    } catch (e) {
      throw CLAIM_REFUSALS.includes(sqlState(e) ?? '') ? new ClaimRefused(e) : e;
    } finally {
      if (waiting) leaveWait(pool);
    }
    switch (claim.outcome) {
      case 'replay':
        return replayedAnswer(claim.responseCode ?? 200, claim.responseBody);
      case 'gone':
        return problem(410, 'The answer to this Idempotency-Key is gone',
          'The request was processed and its answer is no longer kept; it does not run again. Use a new key to send it again.');
      case 'in_progress':
        return problem(409, 'A request with this Idempotency-Key is being processed',
          'Retry after the time given in Retry-After.',
          { 'retry-after': String(Math.max(1, Math.ceil((claim.retryAfterMs ?? 0) / 1000))) });
      case 'mismatch':
        return problem(422, 'Idempotency-Key reused with another request',
          'This key was used for a different request; use a new key.');
    }
    const fence = claim.fence as Fence;
    const ctx = context(db, key, scope, fence, claim.outcome as 'claimed' | 'resumed', claim.attempts ?? 1, claim.recoveryPoint ?? 'started');
    if (client) await client.query('SAVEPOINT idempotency_handler');
    let answer: HttpAnswer;
    try {
      answer = answerOf(await handler(info.req, ctx));
      await storing(() => on.complete(key, fence, storedAnswer(answer), { responseCode: answer.status, scope, ttl, responseTtl }));
      return answer;
    } catch (e) {
      if (sqlState(e) === SqlState.leaseLost) throw e;
      if (client) await client.query('ROLLBACK TO SAVEPOINT idempotency_handler');
      const { answer: failed, retryable } = errorAnswer(e);
      await storing(() => on.fail(key, fence, {
        error: storedAnswer(failed), responseCode: failed.status,
        retryable, scope, ttl: retryable ? null : ttl, responseTtl: retryable ? null : responseTtl,
      }));
      return failed;
    }
  }

  /** answer with the expiry headers of the key, as it is now; unchanged when it is absent or unreadable. */
  async function withExpiry(answer: HttpAnswer, key: string, scope: string): Promise<HttpAnswer> {
    if (keyExpiresHeader === null && replayExpiresHeader === null) return answer;
    const expiry = await api.keyExpiry(key, { scope }).catch(() => null);
    if (expiry === null) return answer;
    // toUTCString() is the IMF-fixdate of HTTP dates (RFC 9110)
    const headers = { ...answer.headers };
    if (keyExpiresHeader !== null) headers[keyExpiresHeader] = expiry.expiresAt.toUTCString();
    if (replayExpiresHeader !== null && expiry.responseExpiresAt !== null) {
      headers[replayExpiresHeader] = expiry.responseExpiresAt.toUTCString();
    }
    return { ...answer, headers };
  }

  /** The answer to one request. */
  async function handle(info: RequestInfo<Req>, handler: Handler<Req>): Promise<HttpAnswer> {
    const key = info.key;
    if (key === undefined || key === '') {
      if (required) return problem(400, 'Idempotency-Key is missing', 'This operation requires an Idempotency-Key header.');
      try {
        return answerOf(await handler(info.req, context(pool, null, '', null, null, 0, 'started')));
      } catch (e) {
        return errorAnswer(e).answer;
      }
    }
    const bad = keyProblem(key);
    if (bad !== null) return problem(400, 'Invalid Idempotency-Key', bad);
    // a scope or fingerprint function that throws (say req.user.id without an
    // authentication middleware) is the application's fault: 500
    // problem+json, nothing claimed, the handler does not run
    let scope: string | null | undefined;
    let request: unknown;
    try {
      scope = await scopeOf(info.req);
      if (scope !== null && scope !== undefined) request = fingerprint(info);
    } catch {
      return problem(500, 'Internal Server Error',
        "The request's idempotency scope or fingerprint could not be computed; nothing was done.");
    }
    if (scope === null || scope === undefined) {
      return problem(401, 'Unauthenticated', 'Idempotency keys belong to an authenticated caller.');
    }
    let answer: HttpAnswer;
    try {
      answer = opts.transaction
        ? await withTransaction(pool, (client) => hold(info, handler, key, scope, request, client))
        : await hold(info, handler, key, scope, request, null);
    } catch (e) {
      if (e instanceof ClaimRefused) {
        // after the rollback: the transaction mode's connection is back in the pool
        if (sqlState(e.refusal) === SqlState.invalidParameterValue && await keyTooLong(pool, key).catch(() => false)) {
          return problem(400, 'Invalid Idempotency-Key', 'The key is longer than idempotency.max_key_length characters.');
        }
        throw e.refusal;
      }
      if (sqlState(e) !== SqlState.leaseLost) {
        return problem(503, 'Service Unavailable', 'The idempotency store failed; retry with the same key.', { 'retry-after': '1' });
      }
      answer = problem(409, 'The lease on this Idempotency-Key was lost',
        'Another attempt holds the key now; retry to get its answer.', { 'retry-after': '1' });
    }
    return withExpiry(answer, key, scope);
  }

  return { handle, header: (opts.header ?? 'Idempotency-Key').toLowerCase() };
}

function lower(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) out[k.toLowerCase()] = String(v);
  return out;
}
