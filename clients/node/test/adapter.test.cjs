// test/adapter.test.cjs: PgIdempotencyStorage, the @node-idempotency/core
// storage adapter: the StorageAdapter contract, and set() on a key that is
// answered, held by another holder, or whose lease this adapter lost, which
// it leaves as it is (the library's Fastify plugin calls set() on every
// reply, replays and refusals included); set()'s ttl; and one adapter's
// second request for a key its first still holds.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { pool, fresh, sleep } = require('./helpers.cjs');
const { PgIdempotencyStorage, IdempotencyClient, AnswerGoneError } = require('../dist/cjs/index.js');

const scope = fresh('adapter');
const storage = new PgIdempotencyStorage({ pool, scope });
const other = new PgIdempotencyStorage({ pool, scope });
after(() => pool.end());

test('connect checks the extension', async () => {
  await storage.connect();
});

test('setIfNotExists: true for a new key, its value readable while in progress', async () => {
  const k = fresh('k');
  assert.equal(await storage.setIfNotExists(k, 'v1', { ttl: 60000 }), true);
  assert.equal(await storage.get(k), 'v1');
});

test('setIfNotExists: false while another holder has the key, and for an answered key', async () => {
  const k = fresh('k');
  assert.equal(await storage.setIfNotExists(k, 'mine', {}), true);
  assert.equal(await other.setIfNotExists(k, 'theirs', {}), false);
  assert.equal(await storage.get(k), 'mine');
  await storage.set(k, 'answer', {});
  assert.equal(await other.setIfNotExists(k, 'theirs', {}), false);
  assert.equal(await storage.get(k), 'answer');
});

test('get of a key whose answer is gone (extension 1.6): AnswerGoneError, status 410', async () => {
  const k = fresh('k');
  await storage.set(k, 'answer', {});
  // as if completed with a response_ttl that has passed
  await pool.query(`UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second'
                     WHERE key_hash = idempotency.key_hash($1, $2)`, [scope, k]);
  await assert.rejects(storage.get(k), (e) => e instanceof AnswerGoneError && e.status === 410 && e.statusCode === 410);
  assert.equal(await other.setIfNotExists(k, 'again', {}), false);
});

test('set then get; get of a missing key is undefined', async () => {
  const k = fresh('k');
  await storage.set(k, '{"status":200}', {});
  assert.equal(await storage.get(k), '{"status":200}');
  assert.equal(await storage.get(fresh('missing')), undefined);
});

test('set on an answered key leaves the answer alone (a replay\'s set)', async () => {
  const k = fresh('k');
  assert.equal(await storage.setIfNotExists(k, 'p', {}), true);
  await storage.set(k, 'first', {});
  await storage.set(k, 'second', {});
  await other.set(k, 'third', {});
  assert.equal(await storage.get(k), 'first');
});

test('set on a key another holder holds leaves it alone (a 409\'s set)', async () => {
  const k = fresh('k');
  assert.equal(await storage.setIfNotExists(k, 'p', {}), true);
  await other.set(k, 'intruder', {});
  assert.equal(await storage.get(k), 'p');
  await storage.set(k, 'mine', {});
  assert.equal(await storage.get(k), 'mine');
});

test('set after this adapter lost its lease leaves the new holder\'s key alone', async () => {
  const k = fresh('k');
  const short = new PgIdempotencyStorage({ pool, scope, leaseMs: 100 });
  assert.equal(await short.setIfNotExists(k, 'p1', { ttl: 60000 }), true);
  await sleep(200);
  assert.equal(await other.setIfNotExists(k, 'p2', { ttl: 60000 }), true);
  await short.set(k, 'late', {});
  assert.equal(await storage.get(k), 'p2');
  await other.set(k, 'answer', {});
  assert.equal(await storage.get(k), 'answer');
});

test('one adapter: a second request for a key its first request still holds past the lease is refused', async () => {
  // the first request is slow, not dead (its process is this one): were the
  // second to take the key over, the first's set() would find the second's
  // fence and store its late answer while the second still runs
  const k = fresh('k');
  const one = new PgIdempotencyStorage({ pool, scope, leaseMs: 100 });
  assert.equal(await one.setIfNotExists(k, 'first', { ttl: 60000 }), true);
  await sleep(200);
  assert.equal(await one.setIfNotExists(k, 'second', { ttl: 60000 }), false);
  assert.equal(await one.get(k), 'first');
  await one.set(k, 'first answer', { ttl: 60000 });
  assert.equal(await one.get(k), 'first answer');
  const row = await new IdempotencyClient(pool).lookup(k, { scope });
  assert.equal(row.attempts, 1);
  // another adapter (another process) still resumes a lapsed key, and then
  // this adapter's stale hold no longer refuses anything
  const k2 = fresh('k');
  assert.equal(await one.setIfNotExists(k2, 'p', { ttl: 60000 }), true);
  await sleep(200);
  assert.equal(await other.setIfNotExists(k2, 'q', { ttl: 60000 }), true);
  await other.set(k2, 'theirs', {});
  assert.equal(await one.setIfNotExists(k2, 'r', { ttl: 60000 }), false);
  assert.equal(await one.get(k2), 'theirs');
});

test('after its ttl a key is gone and setIfNotExists works afresh; clearExpiredEntries deletes it', async () => {
  const k = fresh('k');
  await storage.set(k, 'v', { ttl: 100 });
  await sleep(200);
  assert.equal(await storage.get(k), undefined);
  await storage.clearExpiredEntries();
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM idempotency.idempotency_keys WHERE scope = $1 AND idempotency_key = $2', [scope, k]);
  assert.equal(rows[0].n, 0);
  assert.equal(await storage.setIfNotExists(k, 'again', { ttl: 60000 }), true);
});

test('set() keeps the answer for its own ttl, counted from set() and not from the claim', async () => {
  // the library's storages (memory, Redis, its Postgres one) all expire a
  // set() value ttl after set(); the plugins pass cacheTTLMS to both calls
  const k = fresh('k');
  assert.equal(await storage.setIfNotExists(k, 'p', { ttl: 400 }), true);
  await sleep(250);
  await storage.set(k, 'answer', { ttl: 400 });
  await sleep(250); // 500 ms after the claim, 250 ms after set()
  assert.equal(await storage.get(k), 'answer');
  const shorter = fresh('k');
  assert.equal(await storage.setIfNotExists(shorter, 'p', { ttl: 60000 }), true);
  await storage.set(shorter, 'answer', { ttl: 5000 });
  const row = await new IdempotencyClient(pool).lookup(shorter, { scope });
  assert.ok(row.expiresAt.getTime() - Date.now() <= 5000, 'the claim\'s 60 s gave way to set()\'s 5 s');
  const absent = fresh('k');
  await storage.set(absent, 'direct', { ttl: 5000 });
  const direct = await new IdempotencyClient(pool).lookup(absent, { scope });
  assert.ok(direct.expiresAt.getTime() - Date.now() <= 5000);
});

test('values kept exactly; keys over 255 characters work', async () => {
  const k = 'x'.repeat(400);
  const v = '{"body":"ünïcødé \\" quotes","n":1.50}';
  await storage.set(k, v, {});
  assert.equal(await storage.get(k), v);
});

test('delete releases a key this adapter holds; a key held elsewhere stays', async () => {
  const k = fresh('k');
  assert.equal(await storage.setIfNotExists(k, 'p', {}), true);
  await other.delete(k);
  assert.equal(await storage.get(k), 'p');
  await storage.delete(k);
  assert.equal(await storage.get(k), undefined);
  assert.equal(await other.setIfNotExists(k, 'q', {}), true);
});

test('concurrent setIfNotExists: exactly one wins', async () => {
  const k = fresh('k');
  const adapters = Array.from({ length: 8 }, () => new PgIdempotencyStorage({ pool, scope }));
  const wins = await Promise.all(adapters.map((a) => a.setIfNotExists(k, 'v', {})));
  assert.equal(wins.filter(Boolean).length, 1);
});

test('a crashed holder stops blocking its key after the lease', async () => {
  const k = fresh('k');
  const crashed = new PgIdempotencyStorage({ pool, scope, leaseMs: 100 });
  assert.equal(await crashed.setIfNotExists(k, 'p', { ttl: 60000 }), true);
  assert.equal(await other.setIfNotExists(k, 'q', { ttl: 60000 }), false);
  await sleep(200);
  assert.equal(await other.setIfNotExists(k, 'q', { ttl: 60000 }), true);
  assert.equal((await new IdempotencyClient(pool).lookup(k, { scope })).attempts, 2);
});

// @node-idempotency/core on this adapter, as its plugins drive it. The
// Fastify plugin also calls onResponse for the replies it sends itself (a
// replay, a 409, a 422): those set() calls must change nothing and not throw.
const { Idempotency, IdempotencyErrorCodes } = require('@node-idempotency/core');
const core = new Idempotency(storage);
const request = (key, body = { a: 'a' }) => ({ headers: { 'idempotency-key': key }, path: '/pay', body, method: 'POST' });

test('core: caches the response and replays it; onResponse of the replay changes nothing', async () => {
  const req = request(fresh('core'));
  assert.equal(await core.onRequest(req), undefined);
  await core.onResponse(req, { body: { paid: 1 } });
  const replay = await core.onRequest(req);
  assert.deepEqual(replay, { body: { paid: 1 } });
  await core.onResponse(req, replay);
  await core.onResponse(req, { body: { paid: 2 } });
  assert.deepEqual(await core.onRequest(req), { body: { paid: 1 } });
});

test('core: a duplicate in progress is refused, and its onResponse leaves the holder alone', async () => {
  const req = request(fresh('core'));
  assert.equal(await core.onRequest(req), undefined);
  const other = new Idempotency(new PgIdempotencyStorage({ pool, scope }));
  await assert.rejects(other.onRequest(req), (e) => e.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS);
  await other.onResponse(req, { body: { error: 'in progress' } });
  await core.onResponse(req, { body: { ok: 1 } });
  assert.deepEqual(await core.onRequest(req), { body: { ok: 1 } });
});

test('core: another body with the same key is a fingerprint mismatch; its onResponse changes nothing', async () => {
  const key = fresh('core');
  assert.equal(await core.onRequest(request(key)), undefined);
  await core.onResponse(request(key), { body: { ok: 1 } });
  await assert.rejects(core.onRequest(request(key, { a: 'b' })),
    (e) => e.code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH);
  await core.onResponse(request(key, { a: 'b' }), { body: { error: 'mismatch' } });
  assert.deepEqual(await core.onRequest(request(key)), { body: { ok: 1 } });
});

test('core: 20 concurrent requests with one key: one runs, the others are refused', async () => {
  const req = request(fresh('core'));
  const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => core.onRequest(req)));
  assert.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1);
  assert.ok(outcomes.filter((o) => o.status === 'rejected').every((o) => o.reason.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS));
});
