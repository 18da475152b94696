/*
 * test/payments.test.js: the payment API over real HTTP on 127.0.0.1
 * against a real database (PG* variables): a payment, its retry, a
 * different body under the same key, a request without a key, and one
 * payments row in the end.
 */
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { Pool } = require('pg');
const { createApp } = require('../app');

test('POST /payments with an Idempotency-Key', async (t) => {
  const pool = new Pool({ max: 4 });
  const app = await createApp(pool);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  t.after(async () => {
    await new Promise((resolve) => server.close(resolve));
    await pool.end();
  });
  const base = `http://127.0.0.1:${server.address().port}`;
  const payee = `payee-${randomUUID()}`;   // this run's payments only
  const key = randomUUID();
  const pay = (body, headers = { 'idempotency-key': key }) => fetch(`${base}/payments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

  const first = await pay({ amount: 4200, currency: 'EUR', payee });
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  const paid = await first.json();
  assert.equal(paid.amount, 4200);
  assert.equal(first.headers.get('location'), `/payments/${paid.id}`);

  const retry = await pay({ amount: 4200, currency: 'EUR', payee });
  assert.equal(retry.status, 201);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await retry.json(), paid);

  const other = await pay({ amount: 9900, currency: 'EUR', payee });
  assert.equal(other.status, 422);
  assert.match(other.headers.get('content-type'), /^application\/problem\+json/);

  const noKey = await pay({ amount: 4200, currency: 'EUR', payee }, {});
  assert.equal(noKey.status, 400);

  const { rows } = await pool.query('SELECT count(*)::int AS n FROM payments WHERE payee = $1', [payee]);
  assert.equal(rows[0].n, 1, 'exactly one payments row');

  const read = await fetch(`${base}/payments/${paid.id}`);
  assert.equal(read.status, 200);
  assert.deepEqual(await read.json(), paid);
  assert.equal((await fetch(`${base}/payments/0`)).status, 404);
});
