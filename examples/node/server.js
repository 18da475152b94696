'use strict';
/*
 * server.js: a small payments API using the idempotency middleware.
 *
 *   PGHOST=... PGDATABASE=... node server.js     listens on 127.0.0.1, a free port,
 *                                                 and prints {"port": N}
 *
 * The auth layer turns "Authorization: Bearer <token>" into req.user; the
 * middleware scopes keys by req.user.id.  POST /payments has two side
 * effects (charge, then receipt) in phases, so a retry after a crash between
 * them resumes after the charge.  CRASH_AFTER=charged makes the process die
 * right after that checkpoint (used by the tests to simulate a crash).
 */
const express = require('express');
const { Pool } = require('pg');
const { idempotent, HttpError } = require('./idempotency-middleware');

const TOKENS = { 'token-alice': 'alice', 'token-bob': 'bob' };

/* Demo tables: side effects and orders. */
async function setup(pool) {
  await pool.query(`CREATE TABLE IF NOT EXISTS demo_side_effects (
      id bigserial PRIMARY KEY, scope text, key text, effect text, at timestamptz DEFAULT now())`);
  await pool.query(`CREATE TABLE IF NOT EXISTS demo_orders (
      id bigserial PRIMARY KEY, owner text, item text)`);
}

/* Auth layer: only this sets req.user, from a credential the server checks. */
function auth(req, res, next) {
  const m = /^Bearer (\S+)$/.exec(req.get('Authorization') || '');
  const user = m && TOKENS[m[1]];
  if (!user) return res.status(401).json({ error: 'unauthenticated' });
  req.user = { id: user };
  next();
}

/*
 * createApp(pool, opts): opts.ttl / opts.lease for the keys, opts.delayMs to
 * slow the charge down, opts.crashAfter to die after a checkpoint.
 */
function createApp(pool, opts = {}) {
  const app = express();
  app.use(express.json());
  app.use(auth);
  const keyOpts = { ttl: opts.ttl, lease: opts.lease };
  const effect = (ctx, what) => ctx.db.query(
    'INSERT INTO demo_side_effects(scope, key, effect) VALUES ($1, $2, $3)', [ctx.scope, ctx.key, what]);

  app.post('/payments', idempotent(pool, async (req, ctx) => {
    const amount = req.body && req.body.amount;
    if (!Number.isInteger(amount) || amount <= 0) throw new HttpError(400, 'amount must be a positive integer');
    await ctx.phase('charged', async () => {
      if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
      await effect(ctx, 'charge');
    });
    if (opts.crashAfter === 'charged') process.exit(3);	/* simulated crash between the side effects */
    await ctx.phase('receipt_sent', () => effect(ctx, 'receipt'));
    return { status: 201, body: { paid: amount, attempts: ctx.attempts } };
  }, keyOpts));

  /* Fails with 503 on the first attempt: the retry runs it again. */
  app.post('/flaky', idempotent(pool, async (req, ctx) => {
    await effect(ctx, `flaky attempt ${ctx.attempts}`);
    if (ctx.attempts === 1) throw new HttpError(503, 'upstream unavailable');
    return { status: 200, body: { ok: true, attempts: ctx.attempts } };
  }, keyOpts));

  /* One transaction: the order row and the stored answer commit together. */
  app.post('/orders', idempotent(pool, async (req, ctx) => {
    const { rows } = await ctx.db.query(
      'INSERT INTO demo_orders(owner, item) VALUES ($1, $2) RETURNING id::int', [ctx.scope, req.body.item]);
    return { status: 201, body: { order: rows[0].id, item: req.body.item } };
  }, { ...keyOpts, mode: 'transaction' }));

  return app;
}

if (require.main === module) {
  const pool = new Pool();
  setup(pool).then(() => {
    const app = createApp(pool, {
      ttl: process.env.IDEM_TTL, lease: process.env.IDEM_LEASE, crashAfter: process.env.CRASH_AFTER,
    });
    const server = app.listen(0, '127.0.0.1', () => {
      console.log(JSON.stringify({ port: server.address().port }));
    });
  });
}

module.exports = { createApp, setup };
