'use strict';
/*
 * The @node-idempotency storage adapter: the contract that the library's own
 * storage adapters are tested against (its postgres adapter's e2e spec,
 * ported to node:test), then @node-idempotency/core on top of it.
 */
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Pool } = require('pg');
const { Idempotency, IdempotencyErrorCodes } = require('@node-idempotency/core');
const { PostgresExtensionStorageAdapter } = require('../node-idempotency-adapter');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pool = new Pool({ max: 20 });
const storage = new PostgresExtensionStorageAdapter({ pool, scope: 'node-idempotency-test' });

before(async () => {
  await pool.query('DELETE FROM idempotency.idempotency_keys WHERE scope = $1', ['node-idempotency-test']);
  await storage.connect();
});

after(async () => {
  await storage.disconnect();
});

describe('StorageAdapter contract', () => {
  test('setIfNotExists sets and returns true when the key does not exist', async () => {
    assert.equal(await storage.setIfNotExists('k1', 'v1', {}), true);
    assert.equal(await storage.get('k1'), 'v1');
  });

  test('setIfNotExists does not set and returns false when the key exists', async () => {
    await storage.set('k2', 'v1', {});
    assert.equal(await storage.setIfNotExists('k2', 'v2', {}), false);
    assert.equal(await storage.get('k2'), 'v1');
  });

  test('setIfNotExists returns false while another holder has the key', async () => {
    assert.equal(await storage.setIfNotExists('k2b', 'mine', {}), true);
    const other = new PostgresExtensionStorageAdapter({ pool, scope: 'node-idempotency-test' });
    assert.equal(await other.setIfNotExists('k2b', 'theirs', {}), false);
    assert.equal(await storage.get('k2b'), 'mine');
    await storage.set('k2b', 'done', {});
    assert.equal(await other.get('k2b'), 'done');
  });

  test('set then get returns the value; get of a missing key is undefined', async () => {
    assert.equal(await storage.get('k3'), undefined);
    await storage.set('k3', 'v1', {});
    assert.equal(await storage.get('k3'), 'v1');
  });

  test('after its ttl get is undefined and setIfNotExists works afresh', async () => {
    assert.equal(await storage.get('k4'), undefined);
    await storage.set('k4', 'v1', { ttl: 500 });
    assert.equal(await storage.get('k4'), 'v1');
    await sleep(1000);
    assert.equal(await storage.get('k4'), undefined);
    assert.equal(await storage.setIfNotExists('k4', 'v2', {}), true);
    assert.equal(await storage.get('k4'), 'v2');
  });

  test('clearExpiredEntries deletes expired entries', async () => {
    await storage.set('k5', 'v5', { ttl: 500 });
    assert.equal(await storage.get('k5'), 'v5');
    await sleep(1000);
    await storage.clearExpiredEntries();
    const left = await pool.query(
      'SELECT count(*)::int AS n FROM idempotency.idempotency_keys WHERE scope = $1 AND idempotency_key = $2',
      ['node-idempotency-test', 'k5']);
    assert.equal(left.rows[0].n, 0);
  });

  test('values are strings, kept exactly; keys over 255 characters work', async () => {
    const val = JSON.stringify({ status: 'COMPLETE', response: { body: 'ünïcödé "quoted"\n' } });
    const long = 'node-idempotency:POST:/pay:' + 'x'.repeat(300);
    assert.equal(await storage.setIfNotExists(long, 'in progress', {}), true);
    assert.equal(await storage.setIfNotExists(long, 'again', {}), false);
    await storage.set(long, val, {});
    assert.equal(await storage.get(long), val);
  });

  test('concurrent setIfNotExists: exactly one wins', async () => {
    const results = await Promise.all(Array.from({ length: 20 },
      (_, i) => new PostgresExtensionStorageAdapter({ pool, scope: 'node-idempotency-test' })
        .setIfNotExists('k6', `v${i}`, {})));
    assert.equal(results.filter(Boolean).length, 1);
    assert.equal(await storage.get('k6'), `v${results.indexOf(true)}`);
  });

  test('a crashed holder stops blocking its key after the lease', async () => {
    const crashed = new PostgresExtensionStorageAdapter({ pool, scope: 'node-idempotency-test', leaseMs: 500 });
    assert.equal(await crashed.setIfNotExists('k7', 'v1', {}), true);
    assert.equal(await storage.setIfNotExists('k7', 'v2', {}), false);
    await sleep(700);
    assert.equal(await storage.setIfNotExists('k7', 'v2', {}), true);
    await storage.set('k7', 'v3', {});
    /* the crashed holder's late write is refused: its fence no longer holds */
    await assert.rejects(crashed.set('k7', 'late', {}), (e) => e.code === '55000');
    assert.equal(await storage.get('k7'), 'v3');
  });
});

describe('@node-idempotency/core on this adapter', () => {
  const idempotency = new Idempotency(storage);
  const request = (key, body = { a: 'a' }) => ({
    headers: { 'idempotency-key': key }, path: '/pay', body, method: 'POST',
  });

  test('caches the response and returns it for the same key', async () => {
    const req = request('core-1');
    const res = { body: { success: 'true' } };
    assert.equal(await idempotency.onRequest(req), undefined);
    await idempotency.onResponse(req, res);
    assert.deepEqual(await idempotency.onRequest(req), res);
  });

  test('a duplicate while the first is in progress is refused', async () => {
    const req = request('core-2');
    assert.equal(await idempotency.onRequest(req), undefined);
    await assert.rejects(idempotency.onRequest(req),
      (e) => e.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS);
    await idempotency.onResponse(req, { body: { ok: 1 } });
    assert.deepEqual(await idempotency.onRequest(req), { body: { ok: 1 } });
  });

  test('the same key with another body is a fingerprint mismatch', async () => {
    const req = request('core-3');
    assert.equal(await idempotency.onRequest(req), undefined);
    await idempotency.onResponse(req, { body: { ok: 1 } });
    await assert.rejects(idempotency.onRequest(request('core-3', { a: 'b' })),
      (e) => e.code === IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH);
  });

  test('20 concurrent requests with one key: one runs, the others are refused', async () => {
    const outcomes = await Promise.allSettled(Array.from({ length: 20 },
      () => idempotency.onRequest(request('core-4'))));
    assert.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1);
    assert.ok(outcomes.filter((o) => o.status === 'rejected')
      .every((o) => o.reason.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS));
  });
});
