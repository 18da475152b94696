#!/usr/bin/env node
/*
 * consumer.js: the relay's consumer, an HTTP endpoint (POST /events) that
 * applies each event exactly once although delivery is at least once: in
 * one transaction, processOnce (the inbox) and, the first time only, the
 * side effect, a row in applied_events. Answers {"applied": true|false}.
 * Listens on 127.0.0.1:$CONSUMER_PORT (3001; 0 picks a free port) and
 * prints "listening on URL"; SIGTERM prints "applied N, duplicates M".
 */
'use strict';

const http = require('node:http');
const { Pool } = require('pg');
const { IdempotencyClient, withTransaction } = require('pg-idempotency');

const CONSUMER = 'example-consumer';
const pool = new Pool({ application_name: CONSUMER });
let applied = 0;
let duplicates = 0;

async function apply(event) {
  return withTransaction(pool, async (tx) => {
    if (!(await new IdempotencyClient(tx).processOnce(CONSUMER, String(event.id)))) return false;
    await tx.query('INSERT INTO applied_events (aggregate_id, event_id, payload) VALUES ($1, $2, $3)',
      [event.aggregateId, event.id, event.payload]);
    return true;
  });
}

const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (chunk) => { body += chunk; });
  req.on('end', async () => {
    try {
      if (req.method !== 'POST' || req.url !== '/events') throw Object.assign(new Error('not found'), { status: 404 });
      const first = await apply(JSON.parse(body));
      if (first) applied++; else duplicates++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ applied: first }));
    } catch (err) {
      res.writeHead(err.status || 500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: err.message }));
    }
  });
});

async function main() {
  await pool.query(`CREATE TABLE IF NOT EXISTS applied_events (
    n bigserial PRIMARY KEY, aggregate_id text, event_id bigint, payload jsonb)`);
  server.listen(Number(process.env.CONSUMER_PORT ?? 3001), '127.0.0.1', () => {
    process.stdout.write(`listening on http://127.0.0.1:${server.address().port}/events\n`);
  });
  process.once('SIGTERM', () => server.close(async () => {
    await pool.end();
    process.stdout.write(`applied ${applied}, duplicates ${duplicates}\n`);
  }));
}

main().catch((err) => {
  process.stderr.write(`consumer: ${err.stack}\n`);
  process.exit(1);
});
