#!/usr/bin/env node
/*
 * relay.js: the outbox relay, pg-idempotency's OutboxRelay publishing each
 * event to the consumer (consumer.js) over HTTP. The relay LISTENs, so a
 * commit wakes it; it claims batches under a lease token and marks each
 * event published once the consumer took it. SIGTERM (or SIGINT) stops it
 * after the event in hand and hands the rest of the batch's lease back.
 *
 * Settings (connection: the PG* variables):
 *   CONSUMER_URL            where events go   (http://127.0.0.1:3001/events)
 *   RELAY_NAME              name in the log   (relay-<pid>)
 *   RELAY_BATCH             events per claim  (100)
 *   RELAY_LEASE             lease per claim   (30 seconds)
 *   RELAY_POLL_MS           poll this often without notifications (5000)
 *   RELAY_LISTEN_URL        where to LISTEN when the PG* variables name a
 *                           transaction pooler: a direct or session-mode
 *                           connection string (default: the pool's)
 *   RELAY_PUBLISH_DELAY_MS  pretend a publish takes this long (0)
 */
'use strict';

const { Pool } = require('pg');
const { OutboxRelay } = require('pg-idempotency');

const env = (name, fallback) => process.env[name] || fallback;
const url = env('CONSUMER_URL', 'http://127.0.0.1:3001/events');
const name = env('RELAY_NAME', `relay-${process.pid}`);
const delayMs = Number(env('RELAY_PUBLISH_DELAY_MS', '0'));
const log = (line) => process.stdout.write(`${name}: ${line}\n`);

async function publish(event) {
  log(`publishing ${event.id} (${event.aggregateId}, lease token ${event.leaseToken})`);
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: event.id, aggregateId: event.aggregateId, type: event.eventType, payload: event.payload }),
  });
  if (!res.ok) throw new Error(`consumer answered ${res.status}`);   // mark_failed: retried later
}

async function main() {
  const pool = new Pool({ application_name: name, max: 3 });
  const relay = new OutboxRelay({
    pool, publish,
    batch: Number(env('RELAY_BATCH', '100')),
    lease: env('RELAY_LEASE', '30 seconds'),
    pollMs: Number(env('RELAY_POLL_MS', '5000')),
    onError: (err) => log(`error: ${err.message}`),
    listenUrl: process.env.RELAY_LISTEN_URL || undefined,
    log,
  });
  await relay.start();
  log('started');
  const stop = async () => {
    await relay.stop();
    log(`stopped: published ${relay.published}, handed back ${relay.handedBack}`);
    await pool.end();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((err) => {
  log(`fatal: ${err.stack}`);
  process.exit(1);
});
