/*
 * test/relay.test.js: relay.js and consumer.js as processes against a real
 * database (PG* variables): a commit wakes the idle relay long before its
 * poll; SIGTERM in the middle of a batch finishes the event in hand, hands
 * the rest back (mark_failed, one attempt) and exits 0; a new relay
 * delivers the rest, and the consumer applies each event once, in order.
 */
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { randomUUID } = require('node:crypto');
const path = require('node:path');
const { Pool } = require('pg');

const pool = new Pool({ max: 2 });
const children = new Set();
test.after(async () => {
  for (const child of children) child.kill('SIGKILL');
  await pool.end();
});

/* Starts a script of this example; its output lines collect in .lines. */
function start(script, env) {
  const child = spawn(process.execPath, [path.join(__dirname, '..', script)], {
    env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.add(child);
  child.lines = [];
  child.stdout.setEncoding('utf8').on('data', (text) => child.lines.push(...text.split('\n').filter(Boolean)));
  child.exited = new Promise((resolve) => child.on('exit', (code) => { children.delete(child); resolve(code); }));
  return child;
}

async function until(what, check, ms = 10000) {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
    const value = await check();
    if (value) return value;
  }
  assert.fail(`timed out waiting for ${what}`);
}

const one = async (sql, params = []) => (await pool.query(sql, params)).rows[0];
const enqueue = (aggregate, seqs) => pool.query(
  `SELECT count(idempotency.enqueue_event('account', $1, 'deposited', jsonb_build_object('seq', s)))
     FROM unnest($2::int[]) s`, [aggregate, seqs]);

let url;
test('the consumer listens', async () => {
  const consumer = start('consumer.js', { CONSUMER_PORT: '0' });
  const line = await until('the consumer', () => consumer.lines.find((l) => l.startsWith('listening on ')));
  url = line.slice('listening on '.length);
});

test('a commit wakes the idle relay: no waiting for the poll', async () => {
  const relay = start('relay.js', { CONSUMER_URL: url, RELAY_NAME: 'woken', RELAY_POLL_MS: '60000' });
  await until('the relay to start', () => relay.lines.includes('woken: started'));
  await new Promise((r) => setTimeout(r, 300));           // idle, waiting on LISTEN
  const aggregate = randomUUID();
  const t0 = Date.now();
  await enqueue(aggregate, [1]);
  await until('the event to be applied',
    async () => (await one('SELECT count(*)::int AS n FROM applied_events WHERE aggregate_id = $1', [aggregate])).n === 1, 3000);
  assert.ok(Date.now() - t0 < 3000);
  relay.kill('SIGTERM');
  assert.equal(await relay.exited, 0);
  assert.match(relay.lines.at(-1), /^woken: stopped: published 1, handed back 0$/);
});

test('SIGTERM mid-batch hands the lease back; the next relay delivers the rest once, in order', async () => {
  const aggregate = randomUUID();
  await enqueue(aggregate, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  const slow = start('relay.js', { CONSUMER_URL: url, RELAY_NAME: 'slow', RELAY_BATCH: '10', RELAY_PUBLISH_DELAY_MS: '300' });
  await until('the third publish', () => slow.lines.filter((l) => l.startsWith('slow: publishing')).length === 3);
  slow.kill('SIGTERM');
  assert.equal(await slow.exited, 0);
  assert.equal(slow.lines.at(-1), 'slow: stopped: published 3, handed back 7');
  // the seven are free again (no lease), with one attempt counted
  const back = await one(`SELECT count(*)::int AS n FROM idempotency.outbox_events
    WHERE aggregate_id = $1 AND published_at IS NULL AND attempts = 1
      AND last_error = 'relay stopped before publishing' AND (locked_until IS NULL OR locked_until <= now())`, [aggregate]);
  assert.equal(back.n, 7);

  const next = start('relay.js', { CONSUMER_URL: url, RELAY_NAME: 'next', RELAY_POLL_MS: '200' });
  await until('every event applied', async () =>
    (await one('SELECT count(*)::int AS n FROM applied_events WHERE aggregate_id = $1', [aggregate])).n === 10);
  next.kill('SIGTERM');
  assert.equal(await next.exited, 0);
  const { seqs } = await one(`SELECT array_agg((payload->>'seq')::int ORDER BY n) AS seqs
    FROM applied_events WHERE aggregate_id = $1`, [aggregate]);
  assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  const unpublished = await one(`SELECT count(*)::int AS n FROM idempotency.outbox_events
    WHERE aggregate_id = $1 AND published_at IS NULL`, [aggregate]);
  assert.equal(unpublished.n, 0);
});
