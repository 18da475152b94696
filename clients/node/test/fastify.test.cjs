// test/fastify.test.cjs: idempotentFastify with real HTTP on 127.0.0.1: the
// HTTP table of helpers.cjs (httpBehaviour), through Fastify's request and
// reply.
const Fastify = require('fastify');
const { httpBehaviour } = require('./helpers.cjs');
const { idempotentFastify } = require('../dist/cjs/index.js');

httpBehaviour('Fastify', {
  header: (req, name) => req.headers[name],
  async listen(routes) {
    const app = Fastify();
    for (const r of routes) app.post(r.path, idempotentFastify(r.opts)(r.handler));
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { port: app.server.address().port, close: () => app.close() };
  },
});
