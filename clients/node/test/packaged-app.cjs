// test/packaged-app.cjs: run by test/integration/node_package.sh from an
// empty project where the packed tarball was installed: an Express app on
// 127.0.0.1 (a free port) answers real HTTP requests with one key twice
// (both with Idempotency-Key-Expires a day ahead), with another body, and
// without a key; a duplicate sent while the first runs waits for it (wait)
// and gets its answer; the ESM entry loads too.
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
  const idempotent = idempotentExpress({ pool, scope: () => 'packaged-app', retention: '1 day', wait: '10 seconds' });
  let runs = 0;
  app.post('/payments', idempotent(async (req) => ({ status: 201, body: { run: ++runs, amount: req.body.amount } })));
  app.post('/slow', idempotent(async () => {
    await new Promise((r) => setTimeout(r, 1000));
    return { status: 201, body: { run: ++runs } };
  }));
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const base = `http://127.0.0.1:${server.address().port}`;
  const key = `packaged-${process.pid}-${Date.now()}`;
  const post = (body, headers = { 'idempotency-key': key }, path = '/payments') => fetch(base + path, {
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
    const expires = a.headers.get('idempotency-key-expires');
    assert.ok(Math.abs(Date.parse(expires) - (Date.now() + 86400e3)) < 10000, expires);
    assert.equal(b.headers.get('idempotency-key-expires'), expires);
    assert.equal(b.headers.get('idempotency-replay-expires'), null);
    console.log(`packaged app: 4 requests on ${base} answered as expected; keys kept until ${expires}`);
    const slow = { 'idempotency-key': `${key}-slow` };
    const first = post({}, slow, '/slow');
    await new Promise((r) => setTimeout(r, 300));
    const [x, y] = await Promise.all([first, post({}, slow, '/slow')]);
    assert.deepEqual([x.status, y.status, y.headers.get('idempotent-replayed')], [201, 201, 'true']);
    assert.deepEqual(await y.json(), await x.json());
    assert.equal(runs, 2);
    console.log('packaged app: the duplicate of a request in flight waited and got its answer');
  } finally {
    server.close();
    await pool.end();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
