// test/client.test.cjs: IdempotencyClient against the extension, call by
// call, with the outcomes and SQLSTATEs of doc/reference.md.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { Pool } = require('pg');
const { pool, fresh, sleep, expiryOf, settingsRole } = require('./helpers.cjs');
const {
  IdempotencyClient, ExtensionVersionError, compareVersions, interval, isLeaseLost, sqlState, withTransaction,
  keyProblem, KEY_MAX_CHARS, isAnswerGone, createIdempotency,
} = require('../dist/cjs/index.js');

const api = new IdempotencyClient(pool);
after(() => pool.end());

test('version: the installed one is supported; an older one is a clear error', async () => {
  const v = await api.checkVersion();
  assert.ok(compareVersions(v, '1.3') >= 0);
  await assert.rejects(api.checkVersion('99.0'), (e) => e instanceof ExtensionVersionError
    && e.found === v && /version .* pg-idempotency needs 99.0/.test(e.message));
  assert.equal(compareVersions('1.10', '1.9') > 0, true);
  assert.equal(compareVersions('1.3', '1.3.0'), 0);
});

test('version: the plain edition\'s idempotency.plain_version is read when pg_extension has none', async () => {
  // a client whose pg_extension query finds nothing and whose plain_version says 1.2
  const fake = {
    async query(text) {
      if (/pg_extension/.test(text)) return { rows: [] };
      if (/to_regclass/.test(text)) return { rows: [{ present: true }] };
      return { rows: [{ version: '1.2' }] };
    },
  };
  await assert.rejects(new IdempotencyClient(fake).checkVersion(), (e) => e.found === '1.2');
  const none = { async query(text) { return { rows: /to_regclass/.test(text) ? [{ present: false }] : [] }; } };
  await assert.rejects(new IdempotencyClient(none).checkVersion(), (e) => e.found === null && /not installed/.test(e.message));
});

test('interval: milliseconds or interval text', () => {
  assert.equal(interval(1500), '1500 milliseconds');
  assert.equal(interval('2 min'), '2 min');
  assert.equal(interval(null), null);
  assert.throws(() => interval(NaN), RangeError);
});

test('claim: claimed, in_progress, mismatch, replay after complete', async () => {
  const key = fresh('k');
  const c = await api.claim(key, { request: { a: 1 }, scope: 's', lease: 60000 });
  assert.equal(c.outcome, 'claimed');
  assert.match(c.fence, /^\d+$/);
  assert.equal(c.recoveryPoint, 'started');
  assert.equal(c.attempts, 1);
  const busy = await api.claim(key, { request: { a: 1 }, scope: 's' });
  assert.equal(busy.outcome, 'in_progress');
  assert.equal(busy.fence, null);
  assert.ok(busy.retryAfterMs > 50000 && busy.retryAfterMs <= 60000);
  assert.equal((await api.claim(key, { request: { a: 2 }, scope: 's' })).outcome, 'mismatch');
  // another scope is another key
  assert.equal((await api.claim(key, { request: { a: 2 }, scope: 't' })).outcome, 'claimed');
  await api.complete(key, c.fence, { paid: true }, { responseCode: 201, scope: 's', ttl: '7 days' });
  const r = await api.claim(key, { request: { a: 1 }, scope: 's' });
  assert.deepEqual([r.outcome, r.responseCode, r.responseBody, r.status], ['replay', 201, { paid: true }, 'completed']);
});

test('fail: retryable resumes with a larger fence; final replays the error', async () => {
  const key = fresh('f');
  const c = await api.claim(key);
  await api.fail(key, c.fence, { error: { e: 'boom' }, responseCode: 503 });
  const again = await api.claim(key);
  assert.equal(again.outcome, 'resumed');
  assert.ok(BigInt(again.fence) > BigInt(c.fence));
  assert.equal(again.attempts, 2);
  await api.fail(key, again.fence, { error: { e: 'bad' }, responseCode: 400, retryable: false });
  const r = await api.claim(key);
  assert.deepEqual([r.outcome, r.responseCode, r.responseBody], ['replay', 400, { e: 'bad' }]);
});

test('checkpoint, lookup and release; a stale fence raises 55000', async () => {
  const key = fresh('c');
  const c = await api.claim(key);
  await api.checkpoint(key, c.fence, 'charged', { lease: 5000 });
  const row = await api.lookup(key);
  assert.equal(row.status, 'processing');
  assert.equal(row.recoveryPoint, 'charged');
  assert.equal(row.idempotencyKey, key);
  await api.release(key, c.fence);
  assert.equal(await api.lookup(key), null);
  await assert.rejects(api.complete(key, c.fence, {}), (e) => isLeaseLost(e) && /idempotency lease lost/.test(e.message));
  assert.equal((await api.claim(key)).outcome, 'claimed');
});

test('an expired lease is resumed; the old holder is fenced off', async () => {
  const key = fresh('l');
  const c = await api.claim(key, { lease: 200, ttl: '1 hour' });
  await sleep(300);
  const d = await api.claim(key);
  assert.equal(d.outcome, 'resumed');
  await assert.rejects(api.complete(key, c.fence, { old: true }), (e) => sqlState(e) === '55000');
  await api.complete(key, d.fence, { new: true });
  assert.deepEqual((await api.lookup(key)).responseBody, { new: true });
});

test('keyProblem: empty, over 400 characters, control characters; none for the rest', () => {
  for (const bad of ['', 'k'.repeat(KEY_MAX_CHARS + 1), 'a\tb', 'a\nb', 'a\u0000b', 'a\u007fb']) {
    assert.equal(typeof keyProblem(bad), 'string', JSON.stringify(bad));
  }
  // characters, not UTF-16 units: 400 emoji are 800 units
  for (const good of ['k'.repeat(400), '\u{1F600}'.repeat(400), 'clé ü 42', 'a b']) assert.equal(keyProblem(good), null);
});

test('responseTtl and wait: sent by name, and only when given (the calls work before 1.6 without them)', async () => {
  const sent = [];
  const fake = { async query(text, values) { sent.push([text, values]); return { rows: [{}] }; } };
  const c = new IdempotencyClient(fake);
  await c.claim('k', { ttl: '1 day', lease: 1000 });
  await c.complete('k', '1', {}, { ttl: '1 day' });
  await c.fail('k', '1', { retryable: false });
  await c.execute('k', null, 'SELECT 1');
  for (const [text] of sent) assert.doesNotMatch(text, /response_ttl|wait/);
  sent.length = 0;
  await c.complete('k', '1', {}, { responseTtl: 60000 });
  await c.fail('k', '1', { retryable: false, responseTtl: '1 hour' });
  await c.execute('k', null, 'SELECT $1', ['a'], { responseTtl: '2 hours' });
  assert.deepEqual(sent.map(([text, values]) => [/, response_ttl => \$(\d+)::interval\)$/.exec(text)?.[1], values.at(-1)]),
    [['7', '60000 milliseconds'], ['8', '1 hour'], ['7', '2 hours']]);
  sent.length = 0;
  await c.claim('k', { wait: 2500 });
  await c.execute('k', null, 'SELECT 1', [], { wait: '3 seconds' });
  await c.execute('k', null, 'SELECT 1', [], { responseTtl: '1 hour', wait: '3 seconds' });
  assert.deepEqual(sent.map(([text, values]) => [/(, \w+ => \$\d+::interval)*\)$/.exec(text)[0], values.slice(-2)]), [
    [', wait => $6::interval)', [null, '2500 milliseconds']],
    [', wait => $7::interval)', [null, '3 seconds']],
    [', response_ttl => $7::interval, wait => $8::interval)', ['1 hour', '3 seconds']],
  ]);
});

test('gone: after responseTtl a claim gets the status and code, no body; nothing runs again', async () => {
  const key = fresh('g');
  const c = await api.claim(key, { request: { a: 1 } });
  await api.complete(key, c.fence, { paid: 1 }, { responseCode: 201, responseTtl: 300 });
  const row = await api.lookup(key);
  assert.ok(row.responseExpiresAt instanceof Date && row.responseExpiresAt < row.expiresAt);
  assert.equal(isAnswerGone(row), false);
  assert.equal((await api.claim(key, { request: { a: 1 } })).outcome, 'replay');
  await sleep(400);
  const r = await api.claim(key, { request: { a: 1 } });
  assert.deepEqual([r.outcome, r.fence, r.status, r.responseCode, r.responseBody], ['gone', null, 'completed', 201, null]);
  assert.equal(isAnswerGone(await api.lookup(key)), true);
  assert.equal((await api.claim(key, { request: { a: 2 } })).outcome, 'mismatch');
  // purge drops the answer: '-infinity', still gone
  await pool.query('SELECT * FROM idempotency.purge_expired_batch()');
  const dropped = await api.lookup(key);
  assert.deepEqual([dropped.responseBody, dropped.responseExpiresAt.getTime(), isAnswerGone(dropped)], [null, -8.64e15, true]);
  // a responseTtl not shorter than the key's life: the answer lives as long as the key
  const k2 = fresh('g');
  await api.complete(k2, (await api.claim(k2, { ttl: '1 hour' })).fence, {}, { responseTtl: '2 hours' });
  assert.equal((await api.lookup(k2)).responseExpiresAt, null);
});

test('gone: a final fail takes responseTtl, a retryable one refuses it (22023); execute takes it too', async () => {
  const key = fresh('gf');
  const c = await api.claim(key);
  await assert.rejects(api.fail(key, c.fence, { responseTtl: '1 hour' }), (e) => sqlState(e) === '22023');
  await api.fail(key, c.fence, { error: { no: 1 }, responseCode: 402, retryable: false, responseTtl: 200 });
  await sleep(300);
  assert.deepEqual(Object.values(await api.claim(key)).slice(0, 5), ['gone', null, 'failed', 402, null]);
  await pool.query('CREATE TABLE IF NOT EXISTS node_payments (id serial PRIMARY KEY, order_no text, amount int)');
  const x = fresh('gx');
  const sql = 'INSERT INTO node_payments (order_no, amount) VALUES ($1, 1) RETURNING id';
  assert.equal((await api.execute(x, null, sql, [x], { responseTtl: 200 })).outcome, 'claimed');
  await sleep(300);
  const again = await api.execute(x, null, sql, [x], { responseTtl: 200 });
  assert.deepEqual([again.outcome, again.responseBody], ['gone', null]);
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM node_payments WHERE order_no = $1', [x]);
  assert.equal(rows[0].n, 1);
});

test('claim with wait: a duplicate waits for the holder and gets its answer; a wait that runs out is in_progress', async () => {
  const key = fresh('w');
  const c = await api.claim(key, { request: { a: 1 }, lease: 30000 });
  const t0 = Date.now();
  const waiting = api.claim(key, { request: { a: 1 }, wait: '10 seconds' });
  await sleep(300);
  await api.complete(key, c.fence, { paid: 1 }, { responseCode: 201 });
  const r = await waiting;
  assert.deepEqual([r.outcome, r.responseCode, r.responseBody, r.fence], ['replay', 201, { paid: 1 }, null]);
  assert.ok(Date.now() - t0 >= 300);
  // the holder releases: the waiter claims the key
  const k2 = fresh('w');
  const held = await api.claim(k2, { lease: 30000 });
  const next = api.claim(k2, { wait: 10000 });
  await sleep(200);
  await api.release(k2, held.fence);
  const n = await next;
  assert.equal(n.outcome, 'claimed');
  assert.ok(BigInt(n.fence) > BigInt(held.fence));
  // the holder works on: in_progress when the wait runs out, with the lease's time left
  const k3 = fresh('w');
  await api.claim(k3, { lease: 30000 });
  const t1 = Date.now();
  const busy = await api.claim(k3, { wait: 300 });
  assert.ok(Date.now() - t1 >= 300);
  assert.equal(busy.outcome, 'in_progress');
  assert.ok(busy.retryAfterMs > 25000 && busy.retryAfterMs <= 30000, String(busy.retryAfterMs));
  // execute waits too
  const k4 = fresh('w');
  const h4 = await api.claim(k4, { lease: 30000 });
  const ex = api.execute(k4, null, 'SELECT 1', [], { wait: '10 seconds' });
  await sleep(200);
  await api.complete(k4, h4.fence, { done: true });
  assert.deepEqual([(await ex).outcome, (await ex).responseBody], ['replay', { done: true }]);
});

test('keyExpiry: the key\'s expires_at and the answer\'s response_expires_at, rounded up to the second', async () => {
  assert.equal(await api.keyExpiry(fresh('none')), null);
  const key = fresh('e');
  const c = await api.claim(key, { scope: 's', ttl: '2 hours' });
  const held = await api.keyExpiry(key, { scope: 's' });
  assert.deepEqual([held.expiresAt.toUTCString(), held.responseExpiresAt], [(await expiryOf(key, 's')).key, null]);
  assert.equal(held.expiresAt.getMilliseconds(), 0);
  await api.complete(key, c.fence, {}, { scope: 's', ttl: '3 hours', responseTtl: '1 hour' });
  const done = await api.keyExpiry(key, { scope: 's' });
  const want = await expiryOf(key, 's');
  assert.deepEqual([done.expiresAt.toUTCString(), done.responseExpiresAt.toUTCString()], [want.key, want.replay]);
  assert.ok(Math.abs(done.expiresAt - (Date.now() + 3 * 3600e3)) < 5000);
  assert.ok(Math.abs(done.responseExpiresAt - (Date.now() + 3600e3)) < 5000);
  assert.equal(await api.keyExpiry(key), null); // another scope
  // the answer gone: no responseExpiresAt, the key's time stays
  await pool.query("UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second' WHERE key_hash = idempotency.key_hash('s', $1)", [key]);
  const gone = await api.keyExpiry(key, { scope: 's' });
  assert.deepEqual([gone.expiresAt.toUTCString(), gone.responseExpiresAt], [want.key, null]);
});

test('extension 1.5: the calls without the 1.6 options, keyExpiry and the HTTP engine work', async () => {
  const db = `${(await pool.query('SELECT current_database() AS d')).rows[0].d}_v1_5`;
  // WITH (FORCE): a pooler keeps server connections to it after "old" ends
  await pool.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await pool.query(`CREATE DATABASE ${db}`);
  const old = new Pool({ database: db, max: 2 });
  try {
    await old.query("CREATE EXTENSION idempotency VERSION '1.5'");
    const v15 = new IdempotencyClient(old);
    assert.equal(await v15.checkVersion(), '1.5');
    const key = fresh('v15');
    const c = await v15.claim(key, { request: { a: 1 }, ttl: '1 hour' });
    await v15.complete(key, c.fence, { ok: 1 }, { ttl: '1 hour' });
    assert.equal((await v15.claim(key, { request: { a: 1 } })).outcome, 'replay');
    assert.equal((await v15.execute(fresh('v15'), null, 'SELECT 2')).outcome, 'claimed');
    const e = await v15.keyExpiry(key);
    assert.ok(Math.abs(e.expiresAt - (Date.now() + 3600e3)) < 5000);
    assert.equal(e.responseExpiresAt, null);
    // wait is 1.6's: the server has no such argument
    await assert.rejects(v15.claim(fresh('v15'), { wait: 1000 }), (err) => sqlState(err) === '42883');
    const engine = createIdempotency({ pool: old, retention: '1 hour' });
    const info = { req: {}, key: fresh('v15'), method: 'POST', path: '/p', body: {} };
    const a = await engine.handle(info, async () => ({ status: 201, body: { n: 1 } }));
    const b = await engine.handle(info, async () => ({ status: 201, body: { n: 2 } }));
    assert.deepEqual([a.status, b.status, b.body, b.headers['idempotent-replayed']], [201, 201, { n: 1 }, 'true']);
    assert.equal(b.headers['idempotency-key-expires'], a.headers['idempotency-key-expires']);
    assert.ok(Math.abs(Date.parse(a.headers['idempotency-key-expires']) - (Date.now() + 3600e3)) < 5000);
    assert.equal(a.headers['idempotency-replay-expires'], undefined);
  } finally {
    await old.end();
    await pool.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  }
});

test('HTTP engine: a claim that cannot wait (0A000 under REPEATABLE READ) is thrown, not answered 409', async () => {
  const user = await settingsRole('regress_idem_repeatable_read', { default_transaction_isolation: 'repeatable read' });
  const rr = new Pool({ max: 2, user });
  try {
    const key = fresh('rr');
    const info = { req: {}, key, method: 'POST', path: '/rr', body: {} };
    await api.claim(key, { request: { method: 'POST', path: '/rr', body: {} }, lease: 30000 });
    for (const transaction of [false, true]) {
      const engine = createIdempotency({ pool: rr, wait: '5 seconds', transaction });
      await assert.rejects(engine.handle(info, async () => ({ body: 1 })), (e) => sqlState(e) === '0A000');
    }
    // without wait the same claim answers in_progress
    const plain = await createIdempotency({ pool: rr }).handle(info, async () => ({ body: 1 }));
    assert.equal(plain.status, 409);
  } finally {
    await rr.end();
  }
});

test('HTTP engine: serverConnections bounds the sleeping claims below the pool\'s max (a transaction pooler\'s server connections)', async () => {
  // two keys in flight, a duplicate of each: with serverConnections 2 one
  // sleeps and the other is answered 409 at once; without it, both sleep
  const held = [fresh('servers'), fresh('servers')];
  const info = (key) => ({ req: {}, key, method: 'POST', path: '/s', body: {} });
  for (const key of held) await api.claim(key, { request: { method: 'POST', path: '/s', body: {} }, lease: 30000 });
  const wide = new Pool({ max: 10 });
  try {
    for (const [serverConnections, sleeping] of [[2, 1], [undefined, 2]]) {
      const engine = createIdempotency({ pool: wide, wait: '1 second', serverConnections });
      const started = Date.now();
      const took = await Promise.all(held.map((key) => engine.handle(info(key), async () => ({ body: 1 }))
        .then((a) => { assert.equal(a.status, 409); return Date.now() - started; })));
      assert.equal(took.filter((ms) => ms >= 900).length, sleeping, `${serverConnections}: ${took}`);
    }
  } finally {
    await wide.end();
  }
});

test('bad arguments raise 22023 from the server', async () => {
  await assert.rejects(api.claim(''), (e) => sqlState(e) === '22023');
  await assert.rejects(api.claim('x'.repeat(300)), (e) => sqlState(e) === '22023');
});

test('execute: runs the statement once per key, parameters bound as text', async () => {
  await pool.query('CREATE TABLE IF NOT EXISTS node_payments (id serial PRIMARY KEY, order_no text, amount int)');
  const key = fresh('x');
  const sql = 'INSERT INTO node_payments (order_no, amount) VALUES ($1, $2::int) RETURNING id';
  const evil = "o'); DROP TABLE node_payments; --";
  const a = await api.execute(key, { amount: 5 }, sql, [evil, 5]);
  assert.equal(a.outcome, 'claimed');
  assert.equal(a.status, 'completed');
  const b = await api.execute(key, { amount: 5 }, sql, [evil, 5]);
  assert.deepEqual([b.outcome, b.responseBody], ['replay', a.responseBody]);
  const { rows } = await pool.query('SELECT order_no FROM node_payments WHERE id = $1', [a.responseBody]);
  assert.equal(rows[0].order_no, evil);
});

test('tokens: consumed once, only in their scope', async () => {
  const t = await api.issueToken({ scope: 'forms', ttl: 60000 });
  assert.match(t, /^[0-9a-f-]{36}$/);
  assert.equal(await api.consumeToken(t, { scope: 'other' }), false);
  assert.equal(await api.consumeToken(t, { scope: 'forms' }), true);
  assert.equal(await api.consumeToken(t, { scope: 'forms' }), false);
});

test('transition: applied, already, rejected, not_found; names go as parameters', async () => {
  await pool.query('CREATE TABLE IF NOT EXISTS "node Orders" (id text PRIMARY KEY, state text, note text)');
  const id = fresh('o');
  await pool.query('INSERT INTO "node Orders" VALUES ($1, $2)', [id, 'PENDING']);
  const t = (from, to, set) => api.transition('"node Orders"', 'id', id, 'state', from, to, set);
  assert.deepEqual(await t('PENDING', 'PAID', { note: 'card' }), { outcome: 'applied', currentState: 'PAID' });
  assert.deepEqual(await t('PENDING', 'PAID'), { outcome: 'already', currentState: 'PAID' });
  assert.deepEqual(await t('PENDING', 'CANCELLED'), { outcome: 'rejected', currentState: 'PAID' });
  assert.equal((await api.transition('"node Orders"', 'id', 'nope', 'state', 'A', 'B')).outcome, 'not_found');
  const { rows } = await pool.query('SELECT note FROM "node Orders" WHERE id = $1', [id]);
  assert.equal(rows[0].note, 'card');
  // a table name that is not one: an error, never SQL
  await assert.rejects(api.transition('x; DROP TABLE "node Orders"', 'id', id, 'state', 'A', 'B'), (e) => /^(42P01|42601|42602|3F000)$/.test(sqlState(e)));
  await assert.rejects(api.transition('"node Orders"', 'nope', id, 'state', 'A', 'B'), (e) => sqlState(e) === '42703');
});

test('outbox: enqueue, claim with a lease token, mark_published and mark_failed', async () => {
  await pool.query('SELECT count(*) FROM idempotency.claim_events(10000, \'1 hour\')'); // earlier tests' events out of the way
  const agg = fresh('agg');
  const ids = await withTransaction(pool, async (c) => {
    const tx = api.on(c);
    const one = await tx.enqueueEvent({ aggregateType: 'order', aggregateId: agg, eventType: 'created', payload: { n: 1 } });
    const more = await tx.enqueueEvents([
      { aggregateType: 'order', aggregateId: agg, eventType: 'paid', payload: { n: 2 }, headers: { h: 1 } },
      { aggregateType: 'order', aggregateId: agg, eventType: 'shipped', payload: { n: 3 } },
    ]);
    return [one, ...more];
  });
  assert.equal(ids.length, 3);
  assert.ok(BigInt(ids[0]) < BigInt(ids[1]) && BigInt(ids[1]) < BigInt(ids[2]));
  const events = await api.claimEvents({ batch: 10, lease: 60000 });
  assert.deepEqual(events.map((e) => e.id), ids);
  assert.deepEqual(events[1].headers, { h: 1 });
  const token = events[0].leaseToken;
  assert.equal(await api.markPublished([ids[0]], String(BigInt(token) + 1000n)), 0); // another token: nothing
  assert.equal(await api.markPublished([ids[0]], token), 1);
  assert.equal(await api.markFailed([ids[1], ids[2]], 'sink down', token), 2);
  const { rows } = await pool.query('SELECT id::text, attempts, last_error, published_at IS NOT NULL AS published FROM idempotency.outbox_events WHERE id = ANY($1::bigint[]) ORDER BY id', [ids]);
  assert.deepEqual(rows.map((r) => [r.attempts, r.last_error, r.published]), [[0, null, true], [1, 'sink down', false], [1, 'sink down', false]]);
  assert.equal(typeof await api.outboxQuietCommits(), 'number');
  // backoff: not handed out again at once
  assert.equal((await api.claimEvents({ batch: 10 })).filter((e) => ids.includes(e.id)).length, 0);
});

test('inbox: process_once single and batch', async () => {
  const c = fresh('consumer');
  assert.equal(await api.processOnce(c, 'e1'), true);
  assert.equal(await api.processOnce(c, 'e1'), false);
  assert.deepEqual(await api.processOnceBatch(c, ['e2', 'e1', 'e3', 'e2']), ['e2', 'e3']);
  assert.deepEqual(await api.processOnceBatch(c, ['e3']), []);
  // a rolled-back transaction forgets its mark
  await assert.rejects(withTransaction(pool, async (cl) => {
    assert.equal(await api.on(cl).processOnce(c, 'e4'), true);
    throw new Error('side effect failed');
  }), /side effect failed/);
  assert.equal(await api.processOnce(c, 'e4'), true);
});
