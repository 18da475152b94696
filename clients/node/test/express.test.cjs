// test/express.test.cjs: idempotentExpress with real HTTP on 127.0.0.1:
// every row of the HTTP table in README.md, scopes, fingerprints, retention
// and the one-transaction mode.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const { Pool } = require('pg');
const { pool, fresh } = require('./helpers.cjs');
const { idempotentExpress, HttpError } = require('../dist/cjs/index.js');

let server; let base;
const runs = {};
const count = (name) => { runs[name] = (runs[name] || 0) + 1; return runs[name]; };
let gate = null; // a promise the slow route waits for

before(async () => {
  await pool.query('CREATE TABLE IF NOT EXISTS node_http_orders (key text PRIMARY KEY, amount int)');
  const app = express();
  app.use(express.json());
  const idem = idempotentExpress({ pool, scope: (req) => req.get('x-tenant') ?? '' });
  app.post('/pay', idem(async (req) => ({ status: 201, headers: { Location: `/pay/${count('pay')}` }, body: { run: runs.pay, amount: req.body.amount } })));
  app.post('/other', idem(async () => ({ body: { other: count('other') } })));
  app.post('/slow', idem(async () => { await gate; return { body: { slow: count('slow') } }; }));
  app.post('/reject', idem(async () => { count('reject'); throw new HttpError(402, 'declined', { error: 'card declined' }); }));
  app.post('/crash', idem(async () => { if (count('crash') === 1) throw new Error('db down'); return { body: { ok: runs.crash } }; }));
  app.post('/optional', idempotentExpress({ pool, required: false })(async () => ({ body: { optional: count('optional') } })));
  app.post('/authed', idempotentExpress({ pool, scope: (req) => req.get('x-user') ?? null })(async () => ({ body: {} })));
  app.post('/loose', idempotentExpress({ pool, fingerprint: (i) => ({ path: i.path, amount: i.body.amount }) })(
    async () => ({ body: { loose: count('loose') } })));
  app.post('/kept', idempotentExpress({ pool, retention: '1 hour' })(async () => ({ body: {} })));
  const tx = idempotentExpress({ pool, transaction: true });
  app.post('/tx', tx(async (req, ctx) => {
    await ctx.db.query('INSERT INTO node_http_orders VALUES ($1, $2)', [ctx.key, req.body.amount]);
    if (req.get('x-fail')) throw new Error('after the insert');
    await gate;
    return { status: 201, body: { stored: ctx.key } };
  }));
  app.post('/broken', idempotentExpress({ pool: new Pool({ host: '127.0.0.1', port: 1, connectionTimeoutMillis: 500 }) })(async () => ({ body: {} })));
  server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  base = `http://127.0.0.1:${server.address().port}`;
});

after(async () => {
  server.close();
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
  assert.equal(typeof r.body.title, 'string');
};

test('missing key where required: 400 problem+json, nothing runs', async () => {
  isProblem(await post('/pay', { amount: 1 }), 400);
  assert.equal(runs.pay, undefined);
});

test('an invalid key (too long): 400', async () => {
  isProblem(await post('/pay', { amount: 1 }, { 'idempotency-key': 'k'.repeat(300) }), 400);
});

test('completed: the stored status, headers and body, Idempotent-Replayed: true', async () => {
  const h = { 'idempotency-key': fresh('pay') };
  const a = await post('/pay', { amount: 5 }, h);
  assert.equal(a.status, 201);
  assert.equal(a.headers.get('idempotent-replayed'), null);
  const b = await post('/pay', { amount: 5 }, h);
  assert.deepEqual([b.status, b.body, b.headers.get('location')], [201, a.body, a.headers.get('location')]);
  assert.equal(b.headers.get('idempotent-replayed'), 'true');
  assert.match(b.headers.get('content-type'), /^application\/json/);
  assert.equal(runs.pay, 1);
});

test('the same key with another body or another path: 422', async () => {
  const h = { 'idempotency-key': fresh('mm') };
  await post('/pay', { amount: 5 }, h);
  isProblem(await post('/pay', { amount: 6 }, h), 422);
  isProblem(await post('/other', { amount: 5 }, h), 422);
  assert.equal(runs.other, undefined);
});

test('in flight: 409 with Retry-After; afterwards the answer', async () => {
  let open; gate = new Promise((r) => { open = r; });
  const h = { 'idempotency-key': fresh('slow') };
  const first = post('/slow', {}, h);
  await new Promise((r) => setTimeout(r, 200));
  const second = await post('/slow', {}, h);
  isProblem(second, 409);
  assert.ok(Number(second.headers.get('retry-after')) >= 1);
  open();
  assert.equal((await first).status, 200);
  const third = await post('/slow', {}, h);
  assert.equal(third.headers.get('idempotent-replayed'), 'true');
  assert.equal(runs.slow, 1);
  gate = null;
});

test('a handler\'s 4xx is the final answer and is replayed', async () => {
  const h = { 'idempotency-key': fresh('rej') };
  const a = await post('/reject', {}, h);
  assert.deepEqual([a.status, a.body], [402, { error: 'card declined' }]);
  const b = await post('/reject', {}, h);
  assert.deepEqual([b.status, b.body, b.headers.get('idempotent-replayed')], [402, { error: 'card declined' }, 'true']);
  assert.equal(runs.reject, 1);
});

test('a handler that throws: 500 problem+json, and a retry runs again', async () => {
  const h = { 'idempotency-key': fresh('crash') };
  isProblem(await post('/crash', {}, h), 500);
  const b = await post('/crash', {}, h);
  assert.deepEqual([b.status, b.body], [200, { ok: 2 }]);
});

test('scope: the same key of two tenants is two keys; a null scope is 401', async () => {
  const key = fresh('tenant');
  const a = await post('/pay', { amount: 7 }, { 'idempotency-key': key, 'x-tenant': 'a' });
  const b = await post('/pay', { amount: 8 }, { 'idempotency-key': key, 'x-tenant': 'b' });
  assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, null]);
  isProblem(await post('/authed', {}, { 'idempotency-key': key }), 401);
});

test('optional key: no key runs without bookkeeping', async () => {
  assert.deepEqual((await post('/optional', {})).body, { optional: 1 });
  assert.deepEqual((await post('/optional', {})).body, { optional: 2 });
});

test('a configured fingerprint: fields outside it do not make a mismatch', async () => {
  const h = { 'idempotency-key': fresh('loose') };
  await post('/loose', { amount: 1, note: 'a' }, h);
  const b = await post('/loose', { amount: 1, note: 'b' }, h);
  assert.equal(b.headers.get('idempotent-replayed'), 'true');
  isProblem(await post('/loose', { amount: 2 }, h), 422);
});

test('retention: the answer is kept for the configured time', async () => {
  const key = fresh('kept');
  await post('/kept', {}, { 'idempotency-key': key });
  const { rows } = await pool.query(
    "SELECT expires_at - updated_at AS kept FROM idempotency.idempotency_keys WHERE key_hash = idempotency.key_hash('', $1)", [key]);
  assert.equal(rows[0].kept.hours, 1);
});

test('one-transaction mode: the handler\'s rows and the answer commit together', async () => {
  const ok = fresh('tx');
  assert.equal((await post('/tx', { amount: 3 }, { 'idempotency-key': ok })).status, 201);
  const bad = fresh('tx');
  isProblem(await post('/tx', { amount: 4 }, { 'idempotency-key': bad, 'x-fail': '1' }), 500);
  const { rows } = await pool.query('SELECT key FROM node_http_orders WHERE key = ANY($1) ORDER BY key', [[ok, bad]]);
  assert.deepEqual(rows.map((r) => r.key), [ok]);
  // the failed attempt is retryable: the same key runs again
  assert.equal((await post('/tx', { amount: 4 }, { 'idempotency-key': bad })).status, 201);
});

test('one-transaction mode: a concurrent duplicate waits and gets the replay', async () => {
  let open; gate = new Promise((r) => { open = r; });
  const h = { 'idempotency-key': fresh('txc') };
  const first = post('/tx', { amount: 9 }, h);
  await new Promise((r) => setTimeout(r, 200));
  const second = post('/tx', { amount: 9 }, h);
  await new Promise((r) => setTimeout(r, 200));
  open();
  const [a, b] = await Promise.all([first, second]);
  assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, 'true']);
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM node_http_orders WHERE key = $1', [h['idempotency-key']]);
  assert.equal(rows[0].n, 1);
  gate = null;
});

test('the store unreachable: 503 problem+json with Retry-After', async () => {
  const r = await post('/broken', {}, { 'idempotency-key': fresh('broken') });
  isProblem(r, 503);
  assert.equal(r.headers.get('retry-after'), '1');
});
