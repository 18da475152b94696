/*
 * app.js: a payment API on pg-idempotency. POST /payments needs an
 * Idempotency-Key; in the one-transaction mode the payments row and the
 * stored answer commit together, so a retry gets the first answer back
 * and never pays twice. GET /payments/:id reads a payment.
 * Connection: the usual PG* variables. `node app.js` listens on
 * 127.0.0.1:$PORT (3000).
 */
'use strict';

const express = require('express');
const { Pool } = require('pg');
const { idempotentExpress, HttpError } = require('pg-idempotency');

const SCHEMA = `CREATE TABLE IF NOT EXISTS payments (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  amount integer NOT NULL CHECK (amount > 0),
  currency text NOT NULL,
  payee text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now())`;

async function createApp(pool) {
  await pool.query(SCHEMA);
  const idempotent = idempotentExpress({ pool, transaction: true, retention: '1 day' });
  const app = express();
  app.use(express.json());

  app.post('/payments', idempotent(async (req, ctx) => {
    const { amount, currency, payee } = req.body ?? {};
    if (!Number.isInteger(amount) || amount <= 0 || typeof currency !== 'string' || typeof payee !== 'string') {
      throw new HttpError(400, 'amount (a positive integer), currency and payee are required');
    }
    const { rows } = await ctx.db.query(
      'INSERT INTO payments (amount, currency, payee) VALUES ($1, $2, $3) RETURNING id::text, amount, currency, payee',
      [amount, currency, payee]);
    return { status: 201, headers: { location: `/payments/${rows[0].id}` }, body: rows[0] };
  }));

  app.get('/payments/:id', async (req, res) => {
    if (!/^[0-9]{1,18}$/.test(req.params.id)) return res.status(404).json({ error: 'no such payment' });
    const { rows } = await pool.query(
      'SELECT id::text, amount, currency, payee FROM payments WHERE id = $1', [req.params.id]);
    if (rows.length === 0) return res.status(404).json({ error: 'no such payment' });
    res.json(rows[0]);
  });
  return app;
}

module.exports = { createApp };

if (require.main === module) {
  const pool = new Pool();
  createApp(pool).then((app) => {
    const port = Number(process.env.PORT || 3000);
    app.listen(port, '127.0.0.1', () => console.log(`payments API on http://127.0.0.1:${port}`));
  }, (err) => {
    console.error(err);
    process.exit(1);
  });
}
