// test/helpers.cjs: the pool of the tests (PG* variables), small helpers,
// and httpBehaviour(): the HTTP table of README.md as one set of routes and
// tests (test/conformance/http.json's cases among them, conformance.cjs), run against each framework binding (express, fastify and nestjs
// .test.cjs give it a way to mount the routes and read a header).
// test/pooler/node.sh runs the suites through a transaction pooler: the PG*
// variables name PgBouncer, and IDEM_DIRECT_URL the database itself (where
// a relay LISTENs, as the README's "Behind a transaction pooler" says).
// Nothing here may depend on an earlier transaction's server session:
// settings are a role's (settingsRole), never a session SET or startup
// options.
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Pool } = require('pg');
const { conformance } = require('./conformance.cjs');

const pool = new Pool({ max: 10 });
/** 4 clients, waits for one at most 8 s: the /burst route's pool (issue 45). */
const small = new Pool({ max: 4, connectionTimeoutMillis: 8000 });
/** True when the suites run through a transaction pooler. */
const POOLED = Boolean(process.env.IDEM_DIRECT_URL);
/** The database's own address (a pooler's clients LISTEN there). */
const DIRECT_URL = process.env.IDEM_DIRECT_URL
  || `postgresql://${encodeURIComponent(process.env.PGUSER || 'postgres')}@/${encodeURIComponent(process.env.PGDATABASE || '')}`
     + `?host=${encodeURIComponent(process.env.PGHOST || '')}&port=${process.env.PGPORT || 5432}`;
/** A relay's listenUrl as the README configures it. */
const LISTEN_URL = POOLED ? DIRECT_URL : undefined;
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
  return { status: r.status, headers: r.headers, body: parsed, raw: text };
}

/**
 * The expiry headers a key's row calls for, computed apart from the
 * package: its expires_at and (while still to come) response_expires_at,
 * rounded up to the second, as HTTP dates; null for a time not sent.
 */
async function expiryOf(key, scope = '') {
  const { rows } = await pool.query(
    `SELECT date_trunc('second', expires_at) AS key_s, expires_at > date_trunc('second', expires_at) AS key_frac,
            CASE WHEN response_expires_at > now() THEN date_trunc('second', response_expires_at) END AS answer_s,
            response_expires_at > date_trunc('second', response_expires_at) AS answer_frac
       FROM idempotency.idempotency_keys WHERE key_hash = idempotency.key_hash($2, $1)`, [key, scope]);
  const up = (s, frac) => (s === null ? null : new Date(s.getTime() + (frac ? 1000 : 0)).toUTCString());
  return { key: up(rows[0].key_s, rows[0].key_frac), replay: up(rows[0].answer_s, rows[0].answer_frac) };
}

/** The expiry headers an answer carries, null where absent. */
const expiryHeaders = (r, keyName = 'idempotency-key-expires') =>
  ({ key: r.headers.get(keyName), replay: r.headers.get('idempotency-replay-expires') });

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
    // the app of test/conformance/http.json: the caller in X-User, 201 {"paid": amount}
    {
      path: '/payments', opts: { pool, scope: (req) => fw.header(req, 'x-user') ?? null }, handler: async (req) => {
        if (req.body.slow) await sleep(300);
        return ok({ paid: req.body.amount }, { Location: '/payments/1' });
      },
    },
    { path: '/pay', opts: tenant, handler: async (req) => ok({ run: count('pay'), amount: req.body.amount }, { Location: `/pay/${state.runs.pay}` }) },
    { path: '/other', opts: tenant, handler: async () => ok({ other: count('other') }) },
    { path: '/slow', opts: tenant, handler: async () => { await state.gate; return ok({ slow: count('slow') }); } },
    { path: '/waiting', opts: { ...tenant, wait: '10 seconds' }, handler: async () => { await state.gate; return ok({ waited: count('waiting') }); } },
    { path: '/hasty', opts: { pool, wait: '300 milliseconds', lease: '30 seconds' }, handler: async () => { await state.gate; return ok({}); } },
    { path: '/dated', opts: { pool, retention: '2 hours', responseTtl: '1 hour' }, handler: async () => ok({ dated: count('dated') }) },
    { path: '/quiet', opts: { pool, responseTtl: '1 hour', keyExpiresHeader: null, replayExpiresHeader: null }, handler: async () => ok({}) },
    { path: '/renamed', opts: { pool, responseTtl: '1 hour', keyExpiresHeader: 'X-Key-Expires' }, handler: async () => ok({}) },
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
    // a pool of pg's quick-start size with a handler that takes its own client from it
    {
      path: '/burst', opts: { pool: small }, handler: async (req) => {
        const c = await small.connect();
        try { await c.query('SELECT pg_sleep(0.1)'); } finally { c.release(); }
        return ok({ paid: req.body.amount });
      },
    },
    // keys in an order jsonb does not keep ({"at", "paid"} after storing)
    { path: '/ordered', opts: { pool }, handler: async () => ok({ paid: 5, at: `run ${count('ordered')}`, zeta: [1, { b: 2, a: 1 }] }) },
    // no authentication middleware: req.user is undefined, the scope throws
    { path: '/unauthed', opts: { pool, scope: (req) => req.user.id }, handler: async () => ok({ unauthed: count('unauthed') }) },
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
    await small.end();
  });

  conformance(name, () => base);

  test(`${name}: missing key where required: 400 problem+json, nothing runs`, async () => {
    const r = await call('/pay', { amount: 1 });
    isProblem(r, 400);
    assert.deepEqual(expiryHeaders(r), { key: null, replay: null });
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
    // the key's expiry on both, no replay expiry (the answer lives as long as the key)
    const want = await expiryOf(h['idempotency-key']);
    assert.deepEqual([expiryHeaders(a), expiryHeaders(b)], [want, want]);
    assert.equal(want.replay, null);
    assert.match(b.headers.get('content-type'), /^application\/json/);
    if (fw.storesHeaders !== false) assert.equal(b.headers.get('location'), a.headers.get('location'));
    assert.equal(state.runs.pay, 1);
  });

  test(`${name}: the same key with another body or another path: 422`, async () => {
    const h = { 'idempotency-key': fresh('mm') };
    await call('/pay', { amount: 5 }, h);
    const r = await call('/pay', { amount: 6 }, h);
    isProblem(r, 422);
    assert.deepEqual(expiryHeaders(r), await expiryOf(h['idempotency-key']));
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
    // the key as the holder's claim left it
    assert.deepEqual(expiryHeaders(second), await expiryOf(h['idempotency-key']));
    assert.notEqual(second.headers.get('idempotency-key-expires'), null);
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
    // each answer's expiry is its own scope's key's
    assert.deepEqual([expiryHeaders(a), expiryHeaders(b)], [await expiryOf(key, 'a'), await expiryOf(key, 'b')]);
    isProblem(await call('/authed', {}, { 'idempotency-key': key }), 401);
  });

  test(`${name}: optional key: no key runs without bookkeeping`, async () => {
    const r = await call('/optional', {});
    assert.deepEqual([r.body, expiryHeaders(r)], [{ optional: 1 }, { key: null, replay: null }]);
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
    const r = await call('/kept', {}, { 'idempotency-key': key });
    const { rows } = await pool.query(
      "SELECT expires_at - updated_at AS kept FROM idempotency.idempotency_keys WHERE key_hash = idempotency.key_hash('', $1)", [key]);
    assert.equal(rows[0].kept.hours, 1);
    // Idempotency-Key-Expires: an hour from now, to the second (rounded up)
    const at = Date.parse(r.headers.get('idempotency-key-expires'));
    assert.ok(Math.abs(at - (Date.now() + 3600e3)) < 5000, r.headers.get('idempotency-key-expires'));
  });

  test(`${name}: responseTtl: the answer is replayed for that long, then 410 problem+json; nothing runs again`, async () => {
    const h = { 'idempotency-key': fresh('brief') };
    assert.equal((await call('/brief', {}, h)).status, 201);
    assert.equal((await call('/brief', {}, h)).headers.get('idempotent-replayed'), 'true');
    await sleep(400);
    const gone = await call('/brief', {}, h);
    isProblem(gone, 410);
    // the key's expiry, and no replay expiry: the answer is gone already
    assert.deepEqual(expiryHeaders(gone), await expiryOf(h['idempotency-key']));
    assert.deepEqual([typeof expiryHeaders(gone).key, expiryHeaders(gone).replay], ['string', null]);
    isProblem(await call('/brief', { other: 1 }, h), 422);
    assert.equal(state.runs.brief, 1);
  });

  test(`${name}: Idempotency-Replay-Expires: when the answer is kept for less than the key, on the answer and its replays`, async () => {
    const h = { 'idempotency-key': fresh('dated') };
    const a = await call('/dated', {}, h);
    const b = await call('/dated', {}, h);
    const want = await expiryOf(h['idempotency-key']);
    assert.deepEqual([expiryHeaders(a), expiryHeaders(b)], [want, want]);
    // retention 2 hours, responseTtl 1 hour: both from the completion
    const key = Date.parse(want.key); const replay = Date.parse(want.replay);
    assert.ok(Math.abs(key - (Date.now() + 7200e3)) < 5000 && Math.abs(replay - (Date.now() + 3600e3)) < 5000, JSON.stringify(want));
    assert.equal(b.headers.get('idempotent-replayed'), 'true');
    assert.equal(state.runs.dated, 1);
  });

  test(`${name}: the expiry headers renamed, or left out (then nothing is read)`, async () => {
    const quiet = await call('/quiet', {}, { 'idempotency-key': fresh('quiet') });
    assert.equal(quiet.status, 201);
    assert.deepEqual(expiryHeaders(quiet), { key: null, replay: null });
    const k = fresh('renamed');
    const r = await call('/renamed', {}, { 'idempotency-key': k });
    const want = await expiryOf(k);
    assert.deepEqual([expiryHeaders(r, 'x-key-expires'), r.headers.get('idempotency-key-expires')], [want, null]);
    assert.notEqual(want.replay, null);
  });

  test(`${name}: wait: a duplicate of a request in flight waits for it and gets its answer, not 409`, async () => {
    const open = hold();
    const h = { 'idempotency-key': fresh('wait') };
    const first = call('/waiting', { n: 1 }, h);
    await sleep(200);
    let settled = false;
    const second = call('/waiting', { n: 1 }, h).then((r) => { settled = true; return r; });
    await sleep(500);
    assert.equal(settled, false, 'the duplicate is answered only after the first');
    open();
    const [a, b] = await Promise.all([first, second]);
    assert.deepEqual([a.status, a.body, a.headers.get('idempotent-replayed')], [201, { waited: 1 }, null]);
    assert.deepEqual([b.status, b.body, b.headers.get('idempotent-replayed')], [201, { waited: 1 }, 'true']);
    assert.deepEqual(expiryHeaders(b), await expiryOf(h['idempotency-key']));
    assert.equal(state.runs.waiting, 1);
  });

  test(`${name}: a wait that runs out: 409 with Retry-After (the time left on the lease)`, async () => {
    const open = hold();
    const h = { 'idempotency-key': fresh('hasty') };
    const first = call('/hasty', {}, h);
    await sleep(200);
    const t0 = Date.now();
    const second = await call('/hasty', {}, h);
    const waited = Date.now() - t0;
    open();
    isProblem(second, 409);
    assert.ok(waited >= 300, `answered after ${waited} ms`);
    const retry = Number(second.headers.get('retry-after'));
    assert.ok(retry >= 29 && retry <= 30, `Retry-After: ${retry}`);
    assert.equal((await first).status, 201);
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

  test(`${name}: a burst of 4x the pool's size, handlers taking their own client from it: every request 201 (issue 45)`, async () => {
    const started = Date.now();
    const replies = await Promise.all([...Array(16).keys()].map((i) =>
      call('/burst', { amount: i }, { 'idempotency-key': fresh('burst') })));
    assert.deepEqual(replies.map((r) => r.status), Array(16).fill(201));
    assert.deepEqual(replies.map((r) => r.body.paid).sort((a, b) => a - b), [...Array(16).keys()]);
    assert.ok(Date.now() - started < 8000, `${Date.now() - started} ms`);
  });

  test(`${name}: a replay sends the bytes of the first answer (issue 45)`, async () => {
    const key = fresh('bytes');
    const first = await call('/ordered', { amount: 5 }, { 'idempotency-key': key });
    assert.equal(first.status, 201);
    assert.equal(first.raw, '{"paid":5,"at":"run 1","zeta":[1,{"b":2,"a":1}]}');
    const again = await call('/ordered', { amount: 5 }, { 'idempotency-key': key });
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(again.raw, first.raw);
    if (fw.storesHeaders !== false) assert.equal(again.headers.get('content-type'), first.headers.get('content-type'));
    assert.equal(state.runs.ordered, 1);
    const { IdempotencyClient } = require('../dist/cjs/index.js');
    const row = await new IdempotencyClient(pool).lookup(key);
    assert.equal(row.responseBody.body, first.raw);
    assert.ok(Array.isArray(row.responseBody.headers));
  });

  test(`${name}: an answer stored the way 0.1.0 did ({"headers": {...}, "body": <JSON>}) still replays`, async () => {
    const { IdempotencyClient } = require('../dist/cjs/index.js');
    const api = new IdempotencyClient(pool);
    const key = fresh('legacy');
    const c = await api.claim(key, { request: { method: 'POST', path: '/ordered', body: { amount: 7 } } });
    await api.complete(key, c.fence, { headers: { 'content-type': 'application/json', 'x-old': 'yes' }, body: { paid: 7 } }, { responseCode: 201 });
    const r = await call('/ordered', { amount: 7 }, { 'idempotency-key': key });
    assert.equal(r.status, 201);
    assert.equal(r.headers.get('idempotent-replayed'), 'true');
    assert.equal(r.raw, '{"paid":7}');
    if (fw.storesHeaders !== false) assert.equal(r.headers.get('x-old'), 'yes');
  });

  test(`${name}: a scope function that throws (no auth middleware): 500 problem+json, nothing claimed or run`, async () => {
    const key = fresh('unauthed');
    const r = await call('/unauthed', { amount: 1 }, { 'idempotency-key': key });
    isProblem(r, 500);
    assert.equal(state.runs.unauthed, undefined);
    const { IdempotencyClient } = require('../dist/cjs/index.js');
    assert.equal(await new IdempotencyClient(pool).lookup(key), null);
  });

  test(`${name}: the store unreachable: 503 problem+json with Retry-After`, async () => {
    const r = await call('/broken', {}, { 'idempotency-key': fresh('broken') });
    isProblem(r, 503);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.deepEqual(expiryHeaders(r), { key: null, replay: null });
  });
}

/**
 * A role of the extension whose sessions have the given settings (ALTER
 * ROLE ... SET: pooled or not, every session of the role has them; a
 * session SET would stay on the pooler's server connection and reach its
 * next clients, and a pooler drops or refuses startup options).
 */
async function settingsRole(name, settings) {
  await pool.query(`DO $$ BEGIN CREATE ROLE ${name} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  for (const [setting, value] of Object.entries(settings)) {
    await pool.query(`ALTER ROLE ${name} SET ${setting} = '${value}'`);
  }
  await pool.query('SELECT idempotency.grant_usage($1)', [name]);
  return name;
}

module.exports = { pool, fresh, sleep, httpBehaviour, expiryOf, settingsRole, POOLED, DIRECT_URL, LISTEN_URL };
