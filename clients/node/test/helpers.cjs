// test/helpers.cjs: the pool of the tests (PG* variables), small helpers,
// and httpBehaviour(): the HTTP table of README.md as one set of routes and
// tests, run against each framework binding (express, fastify and nestjs
// .test.cjs give it a way to mount the routes and read a header).
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Pool } = require('pg');

const pool = new Pool({ max: 10 });
let n = 0;
/** A key no other test uses. */
const fresh = (prefix) => `${prefix}-${process.pid}-${Date.now()}-${++n}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** POST with a JSON body; the answer's status, headers and body (JSON when it parses). */
async function post(base, path, body, headers = {}) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  let parsed = text;
  try { parsed = text ? JSON.parse(text) : null; } catch { /* not JSON: the text */ }
  return { status: r.status, headers: r.headers, body: parsed };
}

function isProblem(r, status) {
  assert.equal(r.status, status);
  assert.match(r.headers.get('content-type'), /^application\/problem\+json/);
  assert.equal(r.body.status, status);
  assert.equal(typeof r.body.title, 'string');
}

/**
 * The routes of the table: { path, opts, handler(req, ctx) }. Every handler
 * answers 201 (a NestJS POST's status); fw.header(req, name) reads a
 * request header, fw.rejection() is the framework's 4xx error.
 */
function routes(fw, state) {
  const { HttpError } = require('../dist/cjs/index.js');
  const count = (name) => { state.runs[name] = (state.runs[name] || 0) + 1; return state.runs[name]; };
  const tenant = { pool, scope: (req) => fw.header(req, 'x-tenant') ?? '' };
  const ok = (body, headers) => ({ status: 201, headers, body });
  return [
    { path: '/pay', opts: tenant, handler: async (req) => ok({ run: count('pay'), amount: req.body.amount }, { Location: `/pay/${state.runs.pay}` }) },
    { path: '/other', opts: tenant, handler: async () => ok({ other: count('other') }) },
    { path: '/slow', opts: tenant, handler: async () => { await state.gate; return ok({ slow: count('slow') }); } },
    { path: '/reject', opts: tenant, handler: async () => { count('reject'); throw fw.rejection ? fw.rejection() : new HttpError(402, 'declined', { error: 'card declined' }); } },
    { path: '/crash', opts: tenant, handler: async () => { if (count('crash') === 1) throw new Error('db down'); return ok({ ok: state.runs.crash }); } },
    { path: '/optional', opts: { pool, required: false }, handler: async () => ok({ optional: count('optional') }) },
    { path: '/authed', opts: { pool, scope: (req) => fw.header(req, 'x-user') ?? null }, handler: async () => ok({}) },
    { path: '/loose', opts: { pool, fingerprint: (i) => ({ path: i.path, amount: i.body.amount }) }, handler: async () => ok({ loose: count('loose') }) },
    { path: '/kept', opts: { pool, retention: '1 hour' }, handler: async () => ok({}) },
    { path: '/brief', opts: { pool, responseTtl: '300 milliseconds' }, handler: async () => ok({ brief: count('brief') }) },
    { path: '/misconfigured', opts: { pool, retention: '1 second', lease: '1 minute' }, handler: async () => ok({}) },
    {
      path: '/tx', opts: { pool, transaction: true }, handler: async (req, ctx) => {
        await ctx.db.query('INSERT INTO node_http_orders VALUES ($1, $2)', [ctx.key, req.body.amount ?? 0]);
        if (fw.header(req, 'x-fail')) throw new Error('after the insert');
        await state.gate;
        return ok({ stored: ctx.key });
      },
    },
    { path: '/broken', opts: { pool: new Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 500 }) }, handler: async () => ok({}) },
  ];
}

/**
 * httpBehaviour(name, fw): the table's tests on one framework.
 * fw.listen(routes) mounts the routes on 127.0.0.1 and resolves to
 * { port, close() }; fw.storesHeaders false: the binding answers without
 * the handler's headers (NestJS).
 */
function httpBehaviour(name, fw) {
  const state = { runs: {}, gate: null };
  let server; let base;
  const call = (path, body, headers) => post(base, path, body, headers);
  const hold = () => { let open; state.gate = new Promise((r) => { open = r; }); return () => { open(); state.gate = null; }; };

  before(async () => {
    await pool.query('CREATE TABLE IF NOT EXISTS node_http_orders (key text PRIMARY KEY, amount int)');
    server = await fw.listen(routes(fw, state));
    base = `http://127.0.0.1:${server.port}`;
  });
  after(async () => {
    await server.close();
    await pool.end();
  });

  test(`${name}: missing key where required: 400 problem+json, nothing runs`, async () => {
    isProblem(await call('/pay', { amount: 1 }), 400);
    assert.equal(state.runs.pay, undefined);
  });

  test(`${name}: an empty key, one over 400 characters or over max_key_length, one with a control character: 400`, async () => {
    for (const key of ['', 'k'.repeat(401), 'k'.repeat(300), 'a\tb']) {
      isProblem(await call('/pay', { amount: 1 }, { 'idempotency-key': key }), 400);
    }
    assert.equal(state.runs.pay, undefined);
  });

  test(`${name}: options the server refuses (retention under the lease) are no 400`, async () => {
    assert.equal((await call('/misconfigured', {}, { 'idempotency-key': fresh('mis') })).status, 500);
  });

  test(`${name}: completed: the stored status, headers and body, Idempotent-Replayed: true`, async () => {
    const h = { 'idempotency-key': fresh('pay') };
    const a = await call('/pay', { amount: 5 }, h);
    assert.deepEqual([a.status, a.headers.get('idempotent-replayed')], [201, null]);
    const b = await call('/pay', { amount: 5 }, h);
    assert.deepEqual([b.status, b.body, b.headers.get('idempotent-replayed')], [201, a.body, 'true']);
    assert.match(b.headers.get('content-type'), /^application\/json/);
    if (fw.storesHeaders !== false) assert.equal(b.headers.get('location'), a.headers.get('location'));
    assert.equal(state.runs.pay, 1);
  });

  test(`${name}: the same key with another body or another path: 422`, async () => {
    const h = { 'idempotency-key': fresh('mm') };
    await call('/pay', { amount: 5 }, h);
    isProblem(await call('/pay', { amount: 6 }, h), 422);
    isProblem(await call('/other', { amount: 5 }, h), 422);
    assert.equal(state.runs.other, undefined);
  });

  test(`${name}: in flight: 409 with Retry-After; afterwards the answer`, async () => {
    const open = hold();
    const h = { 'idempotency-key': fresh('slow') };
    const first = call('/slow', {}, h);
    await sleep(200);
    const second = await call('/slow', {}, h);
    isProblem(second, 409);
    assert.ok(Number(second.headers.get('retry-after')) >= 1);
    open();
    assert.equal((await first).status, 201);
    assert.equal((await call('/slow', {}, h)).headers.get('idempotent-replayed'), 'true');
    assert.equal(state.runs.slow, 1);
  });

  test(`${name}: a handler's 4xx is the final answer and is replayed`, async () => {
    const h = { 'idempotency-key': fresh('rej') };
    const a = await call('/reject', {}, h);
    assert.deepEqual([a.status, a.body], [402, { error: 'card declined' }]);
    const b = await call('/reject', {}, h);
    assert.deepEqual([b.status, b.body, b.headers.get('idempotent-replayed')], [402, { error: 'card declined' }, 'true']);
    assert.equal(state.runs.reject, 1);
  });

  test(`${name}: a handler that throws: 500 problem+json, and a retry runs again`, async () => {
    const h = { 'idempotency-key': fresh('crash') };
    isProblem(await call('/crash', {}, h), 500);
    const b = await call('/crash', {}, h);
    assert.deepEqual([b.status, b.body], [201, { ok: 2 }]);
  });

  test(`${name}: scope: the same key of two tenants is two keys; a null scope is 401`, async () => {
    const key = fresh('tenant');
    const a = await call('/pay', { amount: 7 }, { 'idempotency-key': key, 'x-tenant': 'a' });
    const b = await call('/pay', { amount: 8 }, { 'idempotency-key': key, 'x-tenant': 'b' });
    assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, null]);
    isProblem(await call('/authed', {}, { 'idempotency-key': key }), 401);
  });

  test(`${name}: optional key: no key runs without bookkeeping`, async () => {
    assert.deepEqual((await call('/optional', {})).body, { optional: 1 });
    assert.deepEqual((await call('/optional', {})).body, { optional: 2 });
  });

  test(`${name}: a configured fingerprint: fields outside it do not make a mismatch`, async () => {
    const h = { 'idempotency-key': fresh('loose') };
    await call('/loose', { amount: 1, note: 'a' }, h);
    assert.equal((await call('/loose', { amount: 1, note: 'b' }, h)).headers.get('idempotent-replayed'), 'true');
    isProblem(await call('/loose', { amount: 2 }, h), 422);
  });

  test(`${name}: retention: the answer is kept for the configured time`, async () => {
    const key = fresh('kept');
    await call('/kept', {}, { 'idempotency-key': key });
    const { rows } = await pool.query(
      "SELECT expires_at - updated_at AS kept FROM idempotency.idempotency_keys WHERE key_hash = idempotency.key_hash('', $1)", [key]);
    assert.equal(rows[0].kept.hours, 1);
  });

  test(`${name}: responseTtl: the answer is replayed for that long, then 410 problem+json; nothing runs again`, async () => {
    const h = { 'idempotency-key': fresh('brief') };
    assert.equal((await call('/brief', {}, h)).status, 201);
    assert.equal((await call('/brief', {}, h)).headers.get('idempotent-replayed'), 'true');
    await sleep(400);
    isProblem(await call('/brief', {}, h), 410);
    isProblem(await call('/brief', { other: 1 }, h), 422);
    assert.equal(state.runs.brief, 1);
  });

  test(`${name}: one-transaction mode: the handler's rows and the answer commit together`, async () => {
    const ok = fresh('tx'); const bad = fresh('tx');
    assert.deepEqual((await call('/tx', { amount: 3 }, { 'idempotency-key': ok })).body, { stored: ok });
    isProblem(await call('/tx', { amount: 4 }, { 'idempotency-key': bad, 'x-fail': '1' }), 500);
    const { rows } = await pool.query('SELECT key FROM node_http_orders WHERE key = ANY($1)', [[ok, bad]]);
    assert.deepEqual(rows.map((r) => r.key), [ok]);
    // the failed attempt is retryable: the same key runs again
    assert.equal((await call('/tx', { amount: 4 }, { 'idempotency-key': bad })).status, 201);
  });

  test(`${name}: one-transaction mode: a concurrent duplicate waits and gets the replay`, async () => {
    const open = hold();
    const h = { 'idempotency-key': fresh('txc') };
    const first = call('/tx', { amount: 9 }, h);
    await sleep(200);
    const second = call('/tx', { amount: 9 }, h);
    await sleep(200);
    open();
    const [a, b] = await Promise.all([first, second]);
    assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, 'true']);
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM node_http_orders WHERE key = $1', [h['idempotency-key']]);
    assert.equal(rows[0].n, 1);
  });

  test(`${name}: the store unreachable: 503 problem+json with Retry-After`, async () => {
    const r = await call('/broken', {}, { 'idempotency-key': fresh('broken') });
    isProblem(r, 503);
    assert.equal(r.headers.get('retry-after'), '1');
  });
}

module.exports = { pool, fresh, sleep, httpBehaviour };
