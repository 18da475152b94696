// test/nestjs.test.cjs: IdempotencyInterceptor in a NestJS app (Express
// platform) with real HTTP on 127.0.0.1: the HTTP table of helpers.cjs
// (httpBehaviour), each route a controller of its own with its own
// interceptor; the handler's 4xx is Nest's HttpException. Decorators are
// applied by hand (plain JavaScript).
require('reflect-metadata');
const { Controller, Post, Req, Module, UseInterceptors, HttpException } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { httpBehaviour } = require('./helpers.cjs');
const { IdempotencyInterceptor } = require('../dist/cjs/index.js');

/* A controller whose one POST route runs handler(req, req.idempotency) and answers its body. */
function controller({ path, opts, handler }) {
  class Route {
    async run(req) { return (await handler(req, req.idempotency)).body; }
  }
  const d = Object.getOwnPropertyDescriptor(Route.prototype, 'run');
  const withReq = (target, key) => Req()(target, key, 0);
  Object.defineProperty(Route.prototype, 'run', Reflect.decorate([Post(path), withReq], Route.prototype, 'run', d) || d);
  Reflect.decorate([Controller(), UseInterceptors(new IdempotencyInterceptor(opts))], Route);
  return Route;
}

httpBehaviour('NestJS', {
  header: (req, name) => req.headers[name],
  rejection: () => new HttpException({ error: 'card declined' }, 402),
  storesHeaders: false,
  async listen(routes) {
    class AppModule {}
    Reflect.decorate([Module({ controllers: routes.map(controller) })], AppModule);
    const app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    return { port: app.getHttpServer().address().port, close: () => app.close() };
  },
});
