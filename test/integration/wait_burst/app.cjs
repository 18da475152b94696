// test/integration/wait_burst/app.cjs: the Node package's burst app for
// check.py (copied into a project where the tarball is installed).
// POST /wait-burst/<n>: idempotentExpress with wait on a pg Pool of n
// (2, 4, 10), scoped by X-User; the handler sleeps 0.35 s and records its
// run on the same pool. PGIDEM_SERVER_CONNECTIONS: a transaction pooler's
// pool, the middleware's serverConnections.
const express = require('express');
const { Pool } = require('pg');
const { idempotentExpress } = require('pg-idempotency');

const serverConnections = Number(process.env.PGIDEM_SERVER_CONNECTIONS) || undefined;
const app = express();
app.use(express.json());
for (const size of [2, 4, 10]) {
  const pool = new Pool({ max: size });
  const idempotent = idempotentExpress({
    pool, wait: '5 seconds', serverConnections, scope: (req) => req.get('x-user') ?? null,
  });
  app.post(`/wait-burst/${size}`, idempotent(async (req, ctx) => {
    await new Promise((r) => setTimeout(r, 350));
    await pool.query('INSERT INTO wait_burst_runs (key) VALUES ($1)', [ctx.key]);
    return { status: 201, body: { key: ctx.key, at: new Date().toISOString() } };
  }));
}
const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  console.log(`listening on 127.0.0.1:${server.address().port}`);
});
