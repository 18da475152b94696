'use strict';
/*
 * idempotency-middleware.js: Express middleware for the Idempotency-Key
 * header, backed by the idempotency extension's claim / checkpoint /
 * complete / fail functions.
 *
 * HTTP mapping (IETF draft "The Idempotency-Key HTTP Header Field"):
 *   no key on a route that requires one   400
 *   claimed / resumed                     the handler runs; its answer is stored
 *   replay                                the stored status and body, Idempotent-Replayed: true
 *   in_progress                           409, Retry-After (seconds, rounded up)
 *   mismatch (same key, other request)    422
 *   handler throws                        fail(): retryable for 5xx, final for 4xx
 *
 * The scope of a key is the authenticated caller (opts.scope(req), by
 * default req.user.id set by the auth layer), never anything the client
 * sends: two callers can use the same key without seeing each other's
 * answers.  The request fingerprint covers method, path and body, so a key
 * reused on another route or with another body is a mismatch.
 */

const CLAIM_SQL = `
  SELECT outcome, fence::text AS fence, response_code, response_body,
         recovery_point, attempts,
         ceil(extract(epoch FROM retry_after))::int AS retry_after
    FROM idempotency.claim($1, $2::jsonb, $3, $4::interval, $5::interval)`;

/* An error a handler throws to answer with a given HTTP status. */
class HttpError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

/* application/problem+json answer (RFC 9457) for the middleware's own refusals. */
function problem(res, status, title, detail) {
  res.status(status).type('application/problem+json').send({ type: 'about:blank', title, status, detail });
}

/*
 * idempotent(pool, handler, opts) -> Express handler.
 *
 * handler(req, ctx) returns { status, body } (body must be JSON) or throws.
 * ctx: key, scope, fence, attempts, outcome ('claimed' | 'resumed'),
 * recoveryPoint (where to resume: 'started' or the last checkpoint),
 * checkpoint(name) (records progress and extends the lease) and
 * phase(name, fn) (runs fn unless a checkpoint at or after name is recorded,
 * then checkpoints name), and db: a client for the handler's own queries.
 *
 * opts: required (default true), scope(req) (default req.user.id), ttl and
 * lease (interval text, NULL: the extension's settings), mode: 'phased'
 * (default: claim commits, the work runs, checkpoints record phases) or
 * 'transaction' (claim, the handler's writes through ctx.db and complete
 * commit together).
 */
function idempotent(pool, handler, opts = {}) {
  const required = opts.required !== false;
  const scopeOf = opts.scope || ((req) => (req.user ? String(req.user.id) : null));
  const ttl = opts.ttl || null;
  const lease = opts.lease || null;
  const mode = opts.mode || 'phased';

  return async function idempotencyMiddleware(req, res, next) {
    const key = req.get('Idempotency-Key');
    if (!key) {
      if (!required) return runPlain(req, res, next);
      return problem(res, 400, 'Idempotency-Key is missing', 'This operation requires an Idempotency-Key header.');
    }
    const scope = scopeOf(req);
    if (scope == null) return problem(res, 401, 'Unauthenticated', 'Idempotency keys belong to an authenticated caller.');
    const request = JSON.stringify({ method: req.method, path: req.baseUrl + req.path, body: req.body ?? null });

    let client;
    try {
      client = await pool.connect();
      if (mode === 'transaction') await client.query('BEGIN');
      let claim;
      try {
        claim = (await client.query(CLAIM_SQL, [key, request, scope, ttl, lease])).rows[0];
      } catch (e) {
        if (e.code === '22023') {	/* empty or over-long key */
          if (mode === 'transaction') await client.query('ROLLBACK');
          return problem(res, 400, 'Invalid Idempotency-Key', e.message);
        }
        throw e;
      }
      switch (claim.outcome) {
      case 'replay':
        if (mode === 'transaction') await client.query('COMMIT');
        res.set('Idempotent-Replayed', 'true');
        return res.status(claim.response_code).json(claim.response_body);
      case 'in_progress':
        if (mode === 'transaction') await client.query('COMMIT');
        res.set('Retry-After', String(Math.max(1, claim.retry_after || 0)));
        return problem(res, 409, 'A request with this Idempotency-Key is being processed', 'Retry after the time given in Retry-After.');
      case 'mismatch':
        if (mode === 'transaction') await client.query('COMMIT');
        return problem(res, 422, 'Idempotency-Key reused with another request', 'This key was used for a different request; use a new key.');
      default: /* claimed, resumed */
        return await runHolder(client, req, res, key, scope, claim);
      }
    } catch (e) {
      if (client && mode === 'transaction') await client.query('ROLLBACK').catch(() => {});
      return next(e);
    } finally {
      if (client) client.release();
    }
  };

  /* Runs the handler as the key's holder and stores its answer. */
  async function runHolder(client, req, res, key, scope, claim) {
    const ctx = holderContext(client, key, scope, claim);
    let status, body;
    if (mode === 'transaction') await client.query('SAVEPOINT idempotent_work');
    try {
      ({ status = 200, body = null } = await handler(req, ctx));
      await client.query('SELECT idempotency.complete($1, $2, $3::jsonb, $4, $5)',
        [key, claim.fence, JSON.stringify(body), status, scope]);
    } catch (e) {
      if (e.code === '55000') throw e;	/* lease lost: another holder owns the key now */
      if (mode === 'transaction') await client.query('ROLLBACK TO SAVEPOINT idempotent_work');
      status = Number.isInteger(e.status) && e.status >= 400 && e.status < 600 ? e.status : 500;
      body = e.body ?? { error: status < 500 ? e.message : 'internal error' };
      /* 5xx: the next request with this key runs again (resumed); 4xx: final, replayed */
      await client.query('SELECT idempotency.fail($1, $2, $3::jsonb, $4, $5, $6)',
        [key, claim.fence, JSON.stringify(body), status, status >= 500, scope]);
    }
    if (mode === 'transaction') await client.query('COMMIT');
    return res.status(status).json(body);
  }

  /* The ctx a holder's handler gets. */
  function holderContext(client, key, scope, claim) {
    let skipping = claim.recovery_point !== 'started';
    const ctx = {
      key, scope, fence: claim.fence, attempts: claim.attempts, outcome: claim.outcome,
      recoveryPoint: claim.recovery_point, db: client,
      async checkpoint(name) {
        await client.query('SELECT idempotency.checkpoint($1, $2, $3, $4::interval, $5)',
          [key, claim.fence, name, lease, scope]);
        ctx.recoveryPoint = name;
      },
      async phase(name, fn) {
        if (skipping) {
          if (name === claim.recovery_point) skipping = false;
          return undefined;
        }
        const result = await fn();
        await ctx.checkpoint(name);
        return result;
      },
    };
    return ctx;
  }

  /* A route where the key is optional, called without one: no bookkeeping. */
  async function runPlain(req, res, next) {
    try {
      const { status = 200, body = null } = await handler(req, { key: null, db: pool,
        recoveryPoint: 'started', checkpoint: async () => {}, phase: async (name, fn) => fn() });
      res.status(status).json(body);
    } catch (e) {
      if (Number.isInteger(e.status) && e.status < 500) return res.status(e.status).json(e.body ?? { error: e.message });
      next(e);
    }
  }
}

module.exports = { idempotent, HttpError };
