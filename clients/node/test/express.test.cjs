// test/express.test.cjs: idempotentExpress with real HTTP on 127.0.0.1:
// the HTTP table of helpers.cjs (httpBehaviour).
const express = require('express');
const { httpBehaviour } = require('./helpers.cjs');
const { idempotentExpress } = require('../dist/cjs/index.js');

httpBehaviour('Express', {
  header: (req, name) => req.get(name),
  async listen(routes) {
    const app = express();
    app.use(express.json());
    for (const r of routes) app.post(r.path, idempotentExpress(r.opts)(r.handler));
    // what the binding passes on (next(err)): a plain 500
    app.use((err, req, res, next) => res.status(500).json({ error: err.code ?? 'internal' }));
    const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
    return { port: server.address().port, close: () => new Promise((r) => server.close(r)) };
  },
});
