// test/fastify.test.cjs: idempotentFastify with real HTTP on 127.0.0.1: the
// rows of the HTTP table in README.md (as test/express.test.cjs, through
// Fastify's request and reply).
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Fastify = require('fastify');
const { pool, fresh } = require('./helpers.cjs');
const { idempotentFastify, HttpError } = require('../dist/cjs/index.js');

let app; let base;
const runs = {};
const count = (name) => { runs[name] = (runs[name] || 0) + 1; return runs[name]; };
let gate = null;

before(async () => {
  await pool.query('CREATE TABLE IF NOT EXISTS node_fastify_orders (key text PRIMARY KEY)');
  app = Fastify();
  const idem = idempotentFastify({ pool, scope: (req) => req.headers['x-tenant'] ?? '' });
  app.post('/pay', idem(async (req) => ({ status: 201, headers: { Location: `/pay/${count('pay')}` }, body: { run: runs.pay, amount: req.body.amount } })));
  app.post('/other', idem(async () => ({ body: { other: count('other') } })));
  app.post('/slow', idem(async () => { await gate; return { body: { slow: count('slow') } }; }));
  app.post('/reject', idem(async () => { count('reject'); throw new HttpError(409, 'taken', { error: 'seat taken' }); }));
  app.post('/crash', idem(async () => { if (count('crash') === 1) throw new Error('boom'); return { body: { ok: runs.crash } }; }));
  app.post('/tx', idempotentFastify({ pool, transaction: true })(async (req, ctx) => {
    await ctx.db.query('INSERT INTO node_fastify_orders VALUES ($1)', [ctx.key]);
    if (req.headers['x-fail']) throw new Error('after the insert');
    return { body: { stored: ctx.key } };
  }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${app.server.address().port}`;
});

after(async () => {
  await app.close();
  await pool.end();
});

async function post(path, body, headers = {}) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : null };
}
const isProblem = (r, status) => {
  assert.equal(r.status, status);
  assert.match(r.headers.get('content-type'), /^application\/problem\+json/);
  assert.equal(r.body.status, status);
};

test('missing key: 400 problem+json', async () => {
  isProblem(await post('/pay', { amount: 1 }), 400);
  assert.equal(runs.pay, undefined);
});

test('completed: stored status, headers and body with Idempotent-Replayed: true', async () => {
  const h = { 'idempotency-key': fresh('fpay') };
  const a = await post('/pay', { amount: 5 }, h);
  const b = await post('/pay', { amount: 5 }, h);
  assert.equal(a.status, 201);
  assert.deepEqual([b.status, b.body, b.headers.get('location'), b.headers.get('idempotent-replayed')],
    [201, a.body, a.headers.get('location'), 'true']);
  assert.equal(runs.pay, 1);
});

test('another body or path with the same key: 422', async () => {
  const h = { 'idempotency-key': fresh('fmm') };
  await post('/pay', { amount: 5 }, h);
  isProblem(await post('/pay', { amount: 6 }, h), 422);
  isProblem(await post('/other', { amount: 5 }, h), 422);
});

test('in flight: 409 with Retry-After', async () => {
  let open; gate = new Promise((r) => { open = r; });
  const h = { 'idempotency-key': fresh('fslow') };
  const first = post('/slow', {}, h);
  await new Promise((r) => setTimeout(r, 200));
  const second = await post('/slow', {}, h);
  isProblem(second, 409);
  assert.ok(Number(second.headers.get('retry-after')) >= 1);
  open();
  assert.equal((await first).status, 200);
  gate = null;
});

test('a 4xx HttpError is final and replayed; a crash is 500 and runs again', async () => {
  const h = { 'idempotency-key': fresh('frej') };
  assert.deepEqual((await post('/reject', {}, h)).body, { error: 'seat taken' });
  const b = await post('/reject', {}, h);
  assert.deepEqual([b.status, b.headers.get('idempotent-replayed')], [409, 'true']);
  assert.equal(runs.reject, 1);
  const c = { 'idempotency-key': fresh('fcrash') };
  isProblem(await post('/crash', {}, c), 500);
  assert.deepEqual((await post('/crash', {}, c)).body, { ok: 2 });
});

test('scope per tenant', async () => {
  const key = fresh('ften');
  const a = await post('/pay', { amount: 1 }, { 'idempotency-key': key, 'x-tenant': 'a' });
  const b = await post('/pay', { amount: 2 }, { 'idempotency-key': key, 'x-tenant': 'b' });
  assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, null]);
});

test('one-transaction mode: a failed handler leaves no row', async () => {
  const ok = fresh('ftx'); const bad = fresh('ftx');
  assert.equal((await post('/tx', {}, { 'idempotency-key': ok })).status, 200);
  isProblem(await post('/tx', {}, { 'idempotency-key': bad, 'x-fail': '1' }), 500);
  const { rows } = await pool.query('SELECT key FROM node_fastify_orders WHERE key = ANY($1)', [[ok, bad]]);
  assert.deepEqual(rows.map((r) => r.key), [ok]);
});
