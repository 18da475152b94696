// test/powertools.test.cjs: PgPersistenceLayer under
// @aws-lambda-powertools/idempotency's makeIdempotent, with a Lambda-style
// handler: replay, in progress, payload validation, a throwing handler,
// expiry, the in-progress expiry of a registered Lambda context, and a
// result saved without a claim of this layer (a durable execution's replay).
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { pool, fresh, sleep } = require('./helpers.cjs');
const { makeIdempotent, IdempotencyConfig, IdempotencyAlreadyInProgressError, IdempotencyValidationError } = require('@aws-lambda-powertools/idempotency');
const { PgPersistenceLayer } = require('../dist/cjs/powertools.js');
const { AnswerGoneError } = require('../dist/cjs/index.js');


after(() => pool.end());
const scope = fresh('powertools');
const context = (ms = 30000) => ({ functionName: 'pay', awsRequestId: fresh('req'), getRemainingTimeInMillis: () => ms });

function lambda(body, config = {}) {
  const calls = { n: 0 };
  const handler = makeIdempotent(async (event, ctx) => { calls.n++; return body(event, ctx, calls.n); }, {
    persistenceStore: new PgPersistenceLayer({ pool, scope }),
    config: new IdempotencyConfig({ eventKeyJmesPath: 'orderId', payloadValidationJmesPath: 'amount', ...config }),
  });
  return { handler, calls };
}

test('the same event twice: the handler runs once, the second call gets its result', async () => {
  const { handler, calls } = lambda(async (e, _c, n) => ({ paid: e.amount, run: n }));
  const event = { orderId: fresh('o'), amount: 5 };
  assert.deepEqual(await handler(event, context()), { paid: 5, run: 1 });
  assert.deepEqual(await handler(event, context()), { paid: 5, run: 1 });
  assert.equal(calls.n, 1);
  const rows = await pool.query("SELECT status::text, response_body FROM idempotency.idempotency_keys WHERE scope = $1 AND status = 'completed'", [scope]);
  assert.ok(rows.rows.some((r) => r.response_body.paid === 5));
});

test('an answer that is gone (extension 1.6): an error caused by AnswerGoneError, the handler does not run', async () => {
  const { handler, calls } = lambda(async (e) => ({ gone: e.orderId }));
  const event = { orderId: fresh('o'), amount: 2 };
  await handler(event, context());
  // as if completed with a response_ttl that has passed
  await pool.query(`UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second'
                     WHERE scope = $1 AND response_body->>'gone' = $2`, [scope, event.orderId]);
  await assert.rejects(handler(event, context()), (e) => e.cause instanceof AnswerGoneError);
  assert.equal(calls.n, 1);
});

test('a call while the first runs: IdempotencyAlreadyInProgressError', async () => {
  let open; const gate = new Promise((r) => { open = r; });
  const { handler, calls } = lambda(async () => { await gate; return { ok: true }; });
  const event = { orderId: fresh('o'), amount: 1 };
  const first = handler(event, context());
  await sleep(100);
  await assert.rejects(handler(event, context()), (e) => e instanceof IdempotencyAlreadyInProgressError);
  open();
  assert.deepEqual(await first, { ok: true });
  assert.equal(calls.n, 1);
});

test('the same key with another amount: IdempotencyValidationError', async () => {
  const { handler } = lambda(async () => ({ ok: true }));
  const orderId = fresh('o');
  await handler({ orderId, amount: 1 }, context());
  await assert.rejects(handler({ orderId, amount: 2 }, context()), (e) => e instanceof IdempotencyValidationError);
});

test('a handler that throws releases the key: the next call runs', async () => {
  const { handler, calls } = lambda(async (_e, _c, n) => { if (n === 1) throw new Error('downstream'); return { run: n }; });
  const event = { orderId: fresh('o'), amount: 3 };
  await assert.rejects(handler(event, context()), /downstream/);
  assert.deepEqual(await handler(event, context()), { run: 2 });
  assert.equal(calls.n, 2);
});

test('after expiresAfterSeconds the event runs again', async () => {
  const { handler, calls } = lambda(async (_e, _c, n) => ({ run: n }), { expiresAfterSeconds: 1 });
  const event = { orderId: fresh('o'), amount: 4 };
  await handler(event, context());
  await sleep(1800); // Powertools rounds the expiry to whole seconds: up to 1.5 s from now
  assert.deepEqual(await handler(event, context()), { run: 2 });
  assert.equal(calls.n, 2);
});

test('a registered Lambda context: the lease is the remaining time; a timed-out invocation is resumed', async () => {
  let open; const gate = new Promise((r) => { open = r; });
  const { handler, calls } = lambda(async (e, _c, n) => { if (n === 1) await gate; return { run: n, order: e.orderId }; });
  const event = { orderId: fresh('o'), amount: 6 };
  const first = handler(event, context(300)); // "times out" after 300 ms
  await sleep(500);
  assert.deepEqual(await handler(event, context()), { run: 2, order: event.orderId });
  open();
  await first.catch(() => {}); // its lease was lost: its result is not stored
  assert.deepEqual(await handler(event, context()), { run: 2, order: event.orderId });
  assert.equal(calls.n, 2);
  const { rows } = await pool.query(
    "SELECT attempts FROM idempotency.idempotency_keys WHERE scope = $1 AND status = 'completed' AND response_body->>'order' = $2", [scope, event.orderId]);
  assert.deepEqual(rows, [{ attempts: 2 }]);
});

test('a durable execution\'s replay on another instance completes the record its first invocation left in progress', async () => {
  // Powertools runs a replay (durableExecutionMode 'ReplayMode') even though
  // the record exists, then saves the result: this layer holds no claim for it
  let open; const gate = new Promise((r) => { open = r; });
  const first = lambda(async () => { await gate; return { from: 'first' }; });
  const replay = lambda(async (e) => ({ from: 'replay', order: e.orderId }));
  const event = { orderId: fresh('o'), amount: 7 };
  const suspended = first.handler(event, context(60000)); // its lease is still live
  await sleep(100);
  const durable = { step: async () => {}, durableExecutionMode: 'ReplayMode', lambdaContext: context() };
  assert.deepEqual(await replay.handler(event, durable), { from: 'replay', order: event.orderId });
  open();
  await suspended.catch(() => {}); // its fence no longer holds the key
  assert.deepEqual(await first.handler(event, context()), { from: 'replay', order: event.orderId });
  assert.equal(first.calls.n, 1);
  assert.equal(replay.calls.n, 1);
});

test('a result saved without a claim: an absent key is stored, an answered one is kept', async () => {
  const layer = new PgPersistenceLayer({ pool, scope });
  layer.configure({ config: new IdempotencyConfig({ eventKeyJmesPath: 'orderId' }) });
  const event = { orderId: fresh('o') };
  await layer.saveSuccess(event, { saved: 1 });
  assert.deepEqual((await layer.getRecord(event)).responseData, { saved: 1 });
  await layer.saveSuccess(event, { saved: 2 });
  assert.deepEqual((await layer.getRecord(event)).responseData, { saved: 1 });
});
