// test/packaged-app.cjs: run by test/integration/node_package.sh from an
// empty project where the packed tarball was installed: an Express app on
// 127.0.0.1 (a free port) answers real HTTP requests with one key twice,
// with another body, and without a key; the ESM entry loads too.
const assert = require('node:assert/strict');
const express = require('express');
const { Pool } = require('pg');
const { idempotentExpress, IdempotencyClient } = require('pg-idempotency');

async function main() {
  const esm = await import('pg-idempotency');
  assert.equal(typeof esm.idempotentExpress, 'function');
  const pool = new Pool({ max: 4 });
  console.log('extension', await new IdempotencyClient(pool).checkVersion());
  const app = express();
  app.use(express.json());
  const idempotent = idempotentExpress({ pool, scope: () => 'packaged-app' });
  let runs = 0;
  app.post('/payments', idempotent(async (req) => ({ status: 201, body: { run: ++runs, amount: req.body.amount } })));
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const base = `http://127.0.0.1:${server.address().port}`;
  const key = `packaged-${process.pid}-${Date.now()}`;
  const post = (body, headers = { 'idempotency-key': key }) => fetch(`${base}/payments`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  try {
    const a = await post({ amount: 5 });
    assert.equal(a.status, 201);
    assert.deepEqual(await a.json(), { run: 1, amount: 5 });
    const b = await post({ amount: 5 });
    assert.equal(b.status, 201);
    assert.equal(b.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await b.json(), { run: 1, amount: 5 });
    const c = await post({ amount: 6 });
    assert.equal(c.status, 422);
    assert.match(c.headers.get('content-type'), /^application\/problem\+json/);
    assert.equal((await post({ amount: 5 }, {})).status, 400);
    assert.equal(runs, 1);
    console.log(`packaged app: 4 requests on ${base} answered as expected`);
  } finally {
    server.close();
    await pool.end();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
