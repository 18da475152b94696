// test/relay.test.cjs: OutboxRelay: woken by NOTIFY, publishes in order per
// aggregate, retries a failed event after the extension's backoff without
// letting later events of its aggregate overtake it, and on stop() hands the
// unpublished part of its batch back. Where notifications do not reach its
// listener (a transaction pooler) it says so once and polls; listenUrl
// gives it a connection where they do.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { Pool } = require('pg');
const { pool, fresh, sleep, POOLED, DIRECT_URL } = require('./helpers.cjs');
const { OutboxRelay, IdempotencyClient, relayPollingLine } = require('../dist/cjs/index.js');

const api = new IdempotencyClient(pool);
after(() => pool.end());

async function until(cond, ms = 10000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('timed out');
    await sleep(20);
  }
}

const enqueue = (agg, n) => api.enqueueEvents(Array.from({ length: n }, (_, i) => (
  { aggregateType: 'relay-test', aggregateId: agg, eventType: 'e', payload: { i } })));

test('publishes what is enqueued, in order; a failure is retried after the backoff, and holds its aggregate back', async () => {
  const seen = [];
  let failOnce = true;
  const aggA = fresh('a'); const aggB = fresh('b');
  const relay = new OutboxRelay({
    pool, batch: 10, pollMs: 200, lease: 1000, // b1 stays leased behind b0 until this runs out
    publish: async (e) => {
      if (e.aggregateId === aggB && e.payload.i === 0 && failOnce) { failOnce = false; throw new Error('broker down'); }
      if (e.aggregateId !== aggA && e.aggregateId !== aggB) return; // other tests' events
      seen.push(`${e.aggregateId === aggA ? 'a' : 'b'}${e.payload.i}`);
    },
  });
  await relay.start();
  await enqueue(aggA, 3);
  await enqueue(aggB, 2);
  try {
    await until(() => seen.length === 5, 20000);
  } finally {
    await relay.stop();
  }
  assert.deepEqual(seen.filter((s) => s[0] === 'a'), ['a0', 'a1', 'a2']);
  assert.deepEqual(seen.filter((s) => s[0] === 'b'), ['b0', 'b1']);
  assert.equal(relay.failed, 1);
  const { rows } = await pool.query(
    "SELECT count(*)::int AS n FROM idempotency.outbox_events WHERE aggregate_id IN ($1, $2) AND published_at IS NOT NULL", [aggA, aggB]);
  assert.equal(rows[0].n, 5);
});

test('stop() during a batch hands the rest of it back, and closes its listener', async () => {
  const agg = fresh('stop');
  let relay;
  const seen = [];
  relay = new OutboxRelay({
    pool, batch: 10,
    publish: async (e) => { if (e.aggregateId !== agg) return; seen.push(e.payload.i); if (e.payload.i === 1) void relay.stop(); await sleep(10); },
  });
  await relay.start();
  await enqueue(agg, 5);
  try {
    await until(() => seen.length >= 2);
  } finally {
    await relay.stop();
  }
  assert.deepEqual(seen, [0, 1]);
  const { rows } = await pool.query(
    `SELECT (payload->>'i')::int AS i, published_at IS NOT NULL AS published, locked_until IS NULL OR locked_until <= now() AS free, last_error
       FROM idempotency.outbox_events WHERE aggregate_id = $1 ORDER BY id`, [agg]);
  assert.deepEqual(rows.map((r) => [r.i, r.published]), [[0, true], [1, true], [2, false], [3, false], [4, false]]);
  for (const r of rows.slice(2)) {
    assert.equal(r.free, true);
    assert.equal(r.last_error, 'relay stopped before publishing');
  }
  assert.equal(relay.handedBack, 3);
  const listeners = await pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = 'LISTEN idempotency_outbox' AND state = 'idle'");
  assert.equal(listeners.rows[0].n, 0);
});

test('SIGTERM with handleSignals stops the relay', async () => {
  const relay = new OutboxRelay({ pool, handleSignals: true, publish: async () => {} });
  await relay.start();
  const stopped = new Promise((r) => { const orig = relay.stop.bind(relay); relay.stop = () => orig().then(r); });
  process.emit('SIGTERM');
  await stopped;
  assert.equal(process.listenerCount('SIGTERM'), 0);
});

for (const listen of ['own', 'listenUrl']) {
  test(`woken by NOTIFY (listening on ${listen === 'own' ? 'a client of the pool' : 'listenUrl'}), well before the poll`,
    { skip: listen === 'own' && POOLED && 'notifications do not reach a client of a transaction pooler' }, async () => {
      const agg = fresh('woken');
      const seen = [];
      const lines = [];
      const relay = new OutboxRelay({
        pool, pollMs: 30000, listenUrl: listen === 'own' ? undefined : DIRECT_URL, log: (l) => lines.push(l),
        publish: async (e) => { if (e.aggregateId === agg) seen.push(e.payload.i); },
      });
      await relay.start();
      try {
        assert.equal(relay.listening, true);
        await sleep(100); // idle: only a notification wakes it
        const started = Date.now();
        await enqueue(agg, 2);
        await until(() => seen.length === 2, 5000);
        assert.ok(Date.now() - started < 5000);
      } finally {
        await relay.stop();
      }
      assert.deepEqual(seen, [0, 1]);
      assert.deepEqual(lines, []);
    });
}

test('where notifications do not arrive: one line in the log, every event once and in order per aggregate, at the poll', async () => {
  // Through a transaction pooler the probe never arrives. On a direct
  // connection the same is seen with the probe dropped; there the
  // listener's connection is also cut, and the relay, listening again,
  // does not say it again.
  const relayPool = new Pool({ max: 3, application_name: 'relay-polling-test' });
  relayPool.on('error', () => {}); // its idle clients, cut below
  let probes = 0;
  const quiet = {
    connect: () => relayPool.connect(),
    query: (text, values) => {
      if (/pg_notify/.test(text)) { probes++; if (!POOLED) return Promise.resolve({ rows: [] }); }
      return relayPool.query(text, values);
    },
  };
  const aggs = [fresh('p0'), fresh('p1'), fresh('p2')];
  const seen = [];
  const lines = [];
  const errors = [];
  const relay = new OutboxRelay({
    pool: quiet, pollMs: 300, log: (l) => lines.push(l), onError: (e) => errors.push(e),
    publish: async (e) => { if (aggs.includes(e.aggregateId)) seen.push([aggs.indexOf(e.aggregateId), e.payload.n]); },
  });
  await relay.start();
  try {
    assert.equal(relay.listening, false);
    assert.deepEqual(lines, [relayPollingLine(300)]);
    for (let n = 0; n < 4; n++) { // four transactions, each an event of each aggregate
      await api.enqueueEvents(aggs.map((a) => ({ aggregateType: 'relay-test', aggregateId: a, eventType: 'e', payload: { n } })));
    }
    await until(() => seen.length === 12, 15000);
    if (!POOLED) {
      await pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'relay-polling-test'");
      await until(() => probes === 2, 15000);
      await api.enqueueEvents(aggs.map((a) => ({ aggregateType: 'relay-test', aggregateId: a, eventType: 'e', payload: { n: 4 } })));
      await until(() => seen.length === 15, 15000);
    }
    await sleep(600); // nothing more comes
  } finally {
    await relay.stop();
    await relayPool.end();
  }
  const last = POOLED ? 3 : 4;
  for (let a = 0; a < 3; a++) {
    assert.deepEqual(seen.filter(([x]) => x === a).map(([, n]) => n), Array.from({ length: last + 1 }, (_, n) => n));
  }
  assert.equal(seen.length, 3 * (last + 1)); // each once
  assert.deepEqual(lines, [relayPollingLine(300)]);
});
