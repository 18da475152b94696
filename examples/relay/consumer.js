#!/usr/bin/env node
/*
 * consumer.js: applies the events of a relay's sink exactly once, with
 * idempotency.process_once() as the inbox.
 *
 * Reads the JSON lines of the sink file given as its argument (duplicates
 * included: delivery is at least once) and, for each, in one transaction:
 * process_once(consumer, event id); only when that is true, the side
 * effect -- here a row in the table named by CONSUMER_TABLE (default
 * applied_events: aggregate_id text, event_id bigint, payload jsonb).  A
 * crash between the two rolls both back, so the event is applied on the
 * next delivery.  Prints "applied N, duplicates M".
 */
'use strict';

const fs = require('fs');
const { Client } = require('pg');

async function main() {
  const file = process.argv[2];
  const consumer = process.env.CONSUMER_NAME || 'example-consumer';
  const table = process.env.CONSUMER_TABLE || 'applied_events';
  if (!file) {
    process.stderr.write('usage: consumer.js SINK_FILE\n');
    process.exit(2);
  }
  const client = new Client({ application_name: consumer });
  await client.connect();
  const insert = `INSERT INTO ${client.escapeIdentifier(table)} (aggregate_id, event_id, payload)` +
    ' VALUES ($1, $2, $3)';
  let applied = 0;
  let duplicates = 0;

  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (line.trim() === '') continue;
    const event = JSON.parse(line);
    await client.query('BEGIN');
    try {
      const { rows } = await client.query(
        'SELECT idempotency.process_once($1, $2) AS first', [consumer, String(event.id)]);
      if (rows[0].first) {
        await client.query(insert, [event.aggregate_id, event.id, event.payload]);
        applied++;
      } else {
        duplicates++;
      }
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }
  }
  await client.end();
  process.stdout.write(`applied ${applied}, duplicates ${duplicates}\n`);
}

main().catch((err) => {
  process.stderr.write(`consumer: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
