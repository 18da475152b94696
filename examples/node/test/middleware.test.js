'use strict';
/*
 * The Express middleware against a real HTTP server and the real extension
 * (PGHOST/PGPORT/PGUSER/PGDATABASE from the environment).
 */
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { Pool } = require('pg');
const { createApp, setup } = require('../server');

const pool = new Pool({ max: 20 });
const servers = [];

/* Starts app on 127.0.0.1, a free port; returns the port. */
function listen(app) {
  return new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s.address().port));
    servers.push(s);
  });
}

/* POST JSON; returns { status, headers, body }. */
async function post(port, route, { key, token = 'token-alice', body = {} } = {}) {
  const headers = { 'Content-Type': 'application/json' };
  if (key !== undefined) headers['Idempotency-Key'] = key;
  if (token) headers.Authorization = `Bearer ${token}`;
  const r = await fetch(`http://127.0.0.1:${port}${route}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : null };
}

/* How often a side effect ran for (scope, key). */
async function effects(key, effect, scope = 'alice') {
  const { rows } = await pool.query(
    'SELECT count(*)::int AS n FROM demo_side_effects WHERE scope = $1 AND key = $2 AND effect = $3',
    [scope, key, effect]);
  return rows[0].n;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let port;

before(async () => {
  await setup(pool);
  await pool.query('TRUNCATE demo_side_effects, demo_orders');
  await pool.query("DELETE FROM idempotency.idempotency_keys WHERE scope IN ('alice', 'bob')");
  port = await listen(createApp(pool, { lease: '5 seconds', delayMs: 500 }));
});

after(async () => {
  for (const s of servers) s.close();
  await pool.end();
});

test('a route that requires a key answers 400 without one', async () => {
  const r = await post(port, '/payments', { body: { amount: 5 } });
  assert.equal(r.status, 400);
  assert.equal(r.headers.get('Content-Type'), 'application/problem+json; charset=utf-8');
  assert.equal(r.body.title, 'Idempotency-Key is missing');
});

test('a key over 255 characters answers 400', async () => {
  const r = await post(port, '/payments', { key: 'k'.repeat(256), body: { amount: 5 } });
  assert.equal(r.status, 400);
});

test('the auth layer, not the client, decides the scope', async () => {
  const r = await post(port, '/payments', { key: 'no-auth', token: null, body: { amount: 5 } });
  assert.equal(r.status, 401);
});

test('20 concurrent POSTs with one key: the handler runs once, the rest get the answer or 409', async () => {
  const key = 'concurrent-1';
  const rs = await Promise.all(Array.from({ length: 20 },
    () => post(port, '/payments', { key, body: { amount: 100 } })));
  const codes = rs.map((r) => r.status);
  assert.ok(codes.every((c) => c === 201 || c === 409), `unexpected codes ${codes}`);
  const fresh = rs.filter((r) => r.status === 201 && r.headers.get('Idempotent-Replayed') !== 'true');
  assert.equal(fresh.length, 1, 'exactly one response comes from running the handler');
  for (const r of rs.filter((x) => x.status === 201)) assert.deepEqual(r.body, { paid: 100, attempts: 1 });
  for (const r of rs.filter((x) => x.status === 409)) {
    const ra = Number(r.headers.get('Retry-After'));
    assert.ok(Number.isInteger(ra) && ra >= 1 && ra <= 5, `Retry-After ${r.headers.get('Retry-After')}`);
  }
  assert.ok(codes.includes(409), 'some duplicates arrived while the first one ran');
  assert.equal(await effects(key, 'charge'), 1);
  assert.equal(await effects(key, 'receipt'), 1);

  const again = await post(port, '/payments', { key, body: { amount: 100 } });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('Idempotent-Replayed'), 'true');
  assert.deepEqual(again.body, { paid: 100, attempts: 1 });
  assert.equal(await effects(key, 'charge'), 1);
});

test('the same key with another body answers 422 and runs nothing', async () => {
  const key = 'mismatch-1';
  assert.equal((await post(port, '/payments', { key, body: { amount: 7 } })).status, 201);
  const r = await post(port, '/payments', { key, body: { amount: 8 } });
  assert.equal(r.status, 422);
  assert.equal(await effects(key, 'charge'), 1);
});

test('keys are per caller: another caller with the same key runs its own request', async () => {
  const key = 'shared-key';
  assert.equal((await post(port, '/payments', { key, body: { amount: 3 } })).status, 201);
  const bob = await post(port, '/payments', { key, token: 'token-bob', body: { amount: 3 } });
  assert.equal(bob.status, 201);
  assert.equal(bob.headers.get('Idempotent-Replayed'), null);
  assert.equal(await effects(key, 'charge', 'bob'), 1);
});

test('a thrown 5xx is retryable: the retry runs again and its answer is then replayed', async () => {
  const key = 'flaky-1';
  const first = await post(port, '/flaky', { key });
  assert.equal(first.status, 503);
  const second = await post(port, '/flaky', { key });
  assert.equal(second.status, 200);
  assert.deepEqual(second.body, { ok: true, attempts: 2 });
  const third = await post(port, '/flaky', { key });
  assert.equal(third.status, 200);
  assert.equal(third.headers.get('Idempotent-Replayed'), 'true');
  assert.equal(await effects(key, 'flaky attempt 1'), 1);
  assert.equal(await effects(key, 'flaky attempt 2'), 1);
});

test('a thrown 4xx is final: the retry replays it', async () => {
  const key = 'invalid-1';
  const first = await post(port, '/payments', { key, body: { amount: -1 } });
  assert.equal(first.status, 400);
  const again = await post(port, '/payments', { key, body: { amount: -1 } });
  assert.equal(again.status, 400);
  assert.equal(again.headers.get('Idempotent-Replayed'), 'true');
  assert.deepEqual(again.body, first.body);
});

test('transaction mode: concurrent duplicates wait and replay, one order row', async () => {
  const key = 'order-1';
  const rs = await Promise.all(Array.from({ length: 5 },
    () => post(port, '/orders', { key, body: { item: 'book' } })));
  assert.deepEqual(rs.map((r) => r.status), [201, 201, 201, 201, 201]);
  assert.equal(new Set(rs.map((r) => r.body.order)).size, 1);
  assert.equal(rs.filter((r) => r.headers.get('Idempotent-Replayed') === 'true').length, 4);
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM demo_orders WHERE item = \'book\'');
  assert.equal(rows[0].n, 1);
});

/* Runs server.js in a child process; resolves with { child, port }. */
function startServer(env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, '..', 'server.js')],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    child.stdout.once('data', (d) => resolve({ child, port: JSON.parse(d).port }));
    child.once('error', reject);
  });
}

test('a crash between two side effects: the retry resumes after the checkpoint', async () => {
  const key = 'crash-1';
  /* the second server is up before the crash, so its first try lands inside the lease */
  const { child, port: p2 } = await startServer({ IDEM_LEASE: '3 seconds' });
  const crashing = await startServer({ IDEM_LEASE: '3 seconds', CRASH_AFTER: 'charged' });
  try {
    const exited = new Promise((r) => crashing.child.once('exit', (code) => r(code)));
    await assert.rejects(post(crashing.port, '/payments', { key, body: { amount: 42 } }));
    assert.equal(await exited, 3);
    assert.equal(await effects(key, 'charge'), 1);
    assert.equal(await effects(key, 'receipt'), 0);

    const busy = await post(p2, '/payments', { key, body: { amount: 42 } });
    assert.equal(busy.status, 409, 'the crashed holder keeps its lease until it runs out');
    const wait = Number(busy.headers.get('Retry-After'));
    assert.ok(wait >= 1 && wait <= 3);
    await sleep(wait * 1000 + 200);
    const r = await post(p2, '/payments', { key, body: { amount: 42 } });
    assert.equal(r.status, 201);
    assert.deepEqual(r.body, { paid: 42, attempts: 2 });
    assert.equal(await effects(key, 'charge'), 1, 'the charge is not repeated');
    assert.equal(await effects(key, 'receipt'), 1);
  } finally {
    crashing.child.kill();
    child.kill();
  }
});

test('after its ttl a key works afresh', async () => {
  const shortPort = await listen(createApp(pool, { ttl: '2 seconds', lease: '1 second' }));
  const key = 'expiring-1';
  assert.equal((await post(shortPort, '/payments', { key, body: { amount: 1 } })).status, 201);
  assert.equal((await post(shortPort, '/payments', { key, body: { amount: 2 } })).status, 422);
  await sleep(2200);
  const r = await post(shortPort, '/payments', { key, body: { amount: 2 } });
  assert.equal(r.status, 201);
  assert.equal(r.headers.get('Idempotent-Replayed'), null);
  assert.deepEqual(r.body, { paid: 2, attempts: 1 });
  assert.equal(await effects(key, 'charge'), 2);
});
