#!/usr/bin/env node
/*
 * relay.js: an outbox relay for the idempotency extension.
 *
 * It LISTENs on channel idempotency_outbox, claims a batch with
 * idempotency.claim_events(), publishes each event to a sink (here: one
 * JSON line per event appended to a file, made durable with fdatasync),
 * then marks the batch published.  Delivery is at least once: a relay that
 * dies mid-batch leaves its events leased; when the lease runs out, any
 * relay (or this one, restarted) claims them again, in order per aggregate.
 *
 * Settings, from the environment (connection: the usual PG* variables):
 *   RELAY_SINK              file to append events to      (events.jsonl)
 *   RELAY_BATCH             events per claim               (100)
 *   RELAY_LEASE             lease per claim                (30 seconds)
 *   RELAY_POLL_MS           wait for a notification at most this long,
 *                           then poll (expired leases, retries)  (1000)
 *   RELAY_SECOND_LOOK_MS    after an empty claim, look again this much
 *                           later, and again while quiet commits are in
 *                           flight, before waiting: twice the producers'
 *                           idempotency.outbox_notify_interval, whose
 *                           commits within it do not notify  (20)
 *   RELAY_NAME              name in the sink and the log   (relay-<pid>)
 *   RELAY_PUBLISH_DELAY_MS  pretend each publish takes this long (0)
 *   RELAY_EXIT_WHEN_IDLE_MS exit after finding nothing for this long;
 *                           0 runs forever                 (0)
 */
'use strict';

const fs = require('fs');
const { Client } = require('pg');

function setting(name, fallback) {
  const value = process.env[name];
  return value === undefined || value === '' ? fallback : value;
}

const config = {
  sink: setting('RELAY_SINK', 'events.jsonl'),
  batch: parseInt(setting('RELAY_BATCH', '100'), 10),
  lease: setting('RELAY_LEASE', '30 seconds'),
  pollMs: parseInt(setting('RELAY_POLL_MS', '1000'), 10),
  secondLookMs: parseInt(setting('RELAY_SECOND_LOOK_MS', '20'), 10),
  name: setting('RELAY_NAME', `relay-${process.pid}`),
  publishDelayMs: parseInt(setting('RELAY_PUBLISH_DELAY_MS', '0'), 10),
  exitWhenIdleMs: parseInt(setting('RELAY_EXIT_WHEN_IDLE_MS', '0'), 10),
};

function log(message) {
  process.stderr.write(`${new Date().toISOString()} ${config.name}: ${message}\n`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/* The sink: one JSON line per event, appended with a single write. */
class FileSink {
  constructor(path) {
    this.fd = fs.openSync(path, 'a');
  }

  async publish(event) {
    if (config.publishDelayMs > 0) await sleep(config.publishDelayMs);
    const line = JSON.stringify({
      id: event.id,
      aggregate_type: event.aggregate_type,
      aggregate_id: event.aggregate_id,
      event_type: event.event_type,
      payload: event.payload,
      headers: event.headers,
      relay: config.name,
    });
    fs.writeSync(this.fd, line + '\n');
  }

  /* Everything published so far survives a crash from here on. */
  flush() {
    fs.fdatasyncSync(this.fd);
  }
}

/* Wakes the main loop on a notification, a signal or a timeout. */
class Waker {
  constructor() {
    this.pending = false;
    this.resolve = null;
  }

  wake() {
    this.pending = true;
    if (this.resolve) this.resolve();
  }

  /* Called before each claim: notifications after this point count. */
  reset() {
    this.pending = false;
  }

  wait(ms) {
    if (this.pending) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.resolve = () => {
        clearTimeout(timer);
        resolve();
      };
    }).finally(() => {
      this.resolve = null;
    });
  }
}

/*
 * Publish one claimed batch, in order.  After a failure the later events of
 * that aggregate are not published: they stay leased until their lease runs
 * out, so that they never overtake the failed one.  The marks carry the
 * batch's lease token: a mark of an event that another relay took over
 * changes nothing, and one of an event this relay took over needs it.
 */
async function publishBatch(client, sink, events) {
  const published = [];
  const failed = [];
  const stopped = new Set();
  let lastError = null;

  for (const event of events) {
    const aggregate = JSON.stringify([event.aggregate_type, event.aggregate_id]);
    if (stopped.has(aggregate)) continue;
    try {
      await sink.publish(event);
      published.push(event.id);
    } catch (err) {
      failed.push(event.id);
      stopped.add(aggregate);
      lastError = String(err && err.message ? err.message : err);
    }
  }
  sink.flush();
  const token = events[0].lease_token;
  if (published.length > 0)
    await client.query('SELECT idempotency.mark_published($1::bigint[], $2::bigint)', [published, token]);
  if (failed.length > 0)
    await client.query('SELECT idempotency.mark_failed($1::bigint[], $2, $3::bigint)', [failed, lastError, token]);
  return { published: published.length, failed: failed.length };
}

async function main() {
  const client = new Client({ application_name: config.name });
  const sink = new FileSink(config.sink);
  const waker = new Waker();
  let stopping = false;

  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => {
      stopping = true;
      waker.wake();
    });
  }

  await client.connect();
  client.on('notification', () => waker.wake());
  await client.query('LISTEN idempotency_outbox');
  log(`started (batch ${config.batch}, lease ${config.lease})`);

  /*
   * The rule of doc/reference.md ("Waking relays"): claim until a claim
   * returns nothing; then look again RELAY_SECOND_LOOK_MS later, and again
   * while quiet commits (of producers that notified less than an interval
   * ago) were in flight before the look; then wait for a notification.
   */
  let idleSince = Date.now();
  let looking = false;
  while (!stopping) {
    waker.reset();
    let quiet = 0;
    if (looking) {
      const { rows } = await client.query('SELECT idempotency.outbox_quiet_commits() AS n');
      quiet = rows[0].n;
    }
    /* Its own short transaction: claim_events wants READ COMMITTED. */
    const { rows } = await client.query(
      'SELECT id, aggregate_type, aggregate_id, event_type, payload, headers, lease_token' +
        ' FROM idempotency.claim_events($1, $2::interval)',
      [config.batch, config.lease]
    );
    if (rows.length === 0) {
      if (config.exitWhenIdleMs > 0 && Date.now() - idleSince >= config.exitWhenIdleMs) break;
      const lookAgain = !looking || quiet > 0;
      await waker.wait(lookAgain ? config.secondLookMs : config.pollMs);
      /* after a notification, claim until empty again before looking */
      looking = lookAgain && !waker.pending;
      continue;
    }
    looking = false;
    log(`batch start ${rows.length} events, ids ${rows[0].id}..${rows[rows.length - 1].id}`);
    const result = await publishBatch(client, sink, rows);
    log(`batch done ${result.published} published, ${result.failed} failed`);
    idleSince = Date.now();
  }
  await client.end();
  log('stopped');
}

main().catch((err) => {
  log(`fatal: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
