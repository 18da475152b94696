// test/nestjs.test.cjs: IdempotencyInterceptor in a NestJS app (Express
// platform) with real HTTP on 127.0.0.1: the rows of the HTTP table in
// README.md. Decorators are applied by hand (plain JavaScript).
require('reflect-metadata');
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { Controller, Post, Body, Req, Module, UseInterceptors, HttpException } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { pool, fresh } = require('./helpers.cjs');
const { IdempotencyInterceptor } = require('../dist/cjs/index.js');

const runs = {};
const count = (name) => { runs[name] = (runs[name] || 0) + 1; return runs[name]; };
let gate = null;

function decorate(cls, method, decorators) {
  const d = Object.getOwnPropertyDescriptor(cls.prototype, method);
  Object.defineProperty(cls.prototype, method, Reflect.decorate(decorators, cls.prototype, method, d) || d);
}
const param = (dec, index) => (target, key) => dec(target, key, index);

class PayController {
  pay(body) { return { run: count('pay'), amount: body.amount }; }
  async slow() { await gate; return { slow: count('slow') }; }
  reject() { count('reject'); throw new HttpException({ error: 'card declined' }, 402); }
  crash() { if (count('crash') === 1) throw new Error('boom'); return { ok: runs.crash }; }
}
decorate(PayController, 'pay', [Post('pay'), param(Body(), 0)]);
decorate(PayController, 'slow', [Post('slow')]);
decorate(PayController, 'reject', [Post('reject')]);
decorate(PayController, 'crash', [Post('crash')]);
Reflect.decorate([Controller(), UseInterceptors(new IdempotencyInterceptor({ pool, scope: (req) => req.headers['x-tenant'] ?? '' }))], PayController);

class TxController {
  async tx(req) {
    await req.idempotency.db.query('INSERT INTO node_nest_orders VALUES ($1)', [req.idempotency.key]);
    if (req.headers['x-fail']) throw new Error('after the insert');
    return { stored: req.idempotency.key };
  }
}
decorate(TxController, 'tx', [Post('tx'), param(Req(), 0)]);
Reflect.decorate([Controller(), UseInterceptors(new IdempotencyInterceptor({ pool, transaction: true }))], TxController);

class AppModule {}
Reflect.decorate([Module({ controllers: [PayController, TxController] })], AppModule);

let app; let base;
before(async () => {
  await pool.query('CREATE TABLE IF NOT EXISTS node_nest_orders (key text PRIMARY KEY)');
  app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  base = `http://127.0.0.1:${app.getHttpServer().address().port}`;
});

after(async () => {
  await app.close();
  await pool.end();
});

async function post(path, body, headers = {}) {
  const r = await fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : null };
}
const isProblem = (r, status) => {
  assert.equal(r.status, status);
  assert.match(r.headers.get('content-type'), /^application\/problem\+json/);
  assert.equal(r.body.status, status);
};

test('missing key: 400 problem+json', async () => {
  isProblem(await post('/pay', { amount: 1 }), 400);
  assert.equal(runs.pay, undefined);
});

test('completed: the stored status and body with Idempotent-Replayed: true', async () => {
  const h = { 'idempotency-key': fresh('npay') };
  const a = await post('/pay', { amount: 5 }, h);
  assert.deepEqual([a.status, a.body, a.headers.get('idempotent-replayed')], [201, { run: 1, amount: 5 }, null]);
  const b = await post('/pay', { amount: 5 }, h);
  assert.deepEqual([b.status, b.body, b.headers.get('idempotent-replayed')], [201, a.body, 'true']);
  assert.equal(runs.pay, 1);
});

test('another body with the same key: 422; another path: 422', async () => {
  const h = { 'idempotency-key': fresh('nmm') };
  await post('/pay', { amount: 5 }, h);
  isProblem(await post('/pay', { amount: 6 }, h), 422);
  isProblem(await post('/crash', { amount: 5 }, h), 422);
});

test('in flight: 409 with Retry-After', async () => {
  let open; gate = new Promise((r) => { open = r; });
  const h = { 'idempotency-key': fresh('nslow') };
  const first = post('/slow', {}, h);
  await new Promise((r) => setTimeout(r, 200));
  const second = await post('/slow', {}, h);
  isProblem(second, 409);
  assert.ok(Number(second.headers.get('retry-after')) >= 1);
  open();
  assert.equal((await first).status, 201);
  gate = null;
});

test('an HttpException 4xx is final and replayed; a crash is 500 and runs again', async () => {
  const h = { 'idempotency-key': fresh('nrej') };
  const a = await post('/reject', {}, h);
  assert.deepEqual([a.status, a.body], [402, { error: 'card declined' }]);
  const b = await post('/reject', {}, h);
  assert.deepEqual([b.status, b.body, b.headers.get('idempotent-replayed')], [402, { error: 'card declined' }, 'true']);
  assert.equal(runs.reject, 1);
  const c = { 'idempotency-key': fresh('ncrash') };
  isProblem(await post('/crash', {}, c), 500);
  assert.deepEqual((await post('/crash', {}, c)).body, { ok: 2 });
});

test('scope per tenant', async () => {
  const key = fresh('nten');
  const a = await post('/pay', { amount: 1 }, { 'idempotency-key': key, 'x-tenant': 'a' });
  const b = await post('/pay', { amount: 2 }, { 'idempotency-key': key, 'x-tenant': 'b' });
  assert.deepEqual([a.status, b.status, b.headers.get('idempotent-replayed')], [201, 201, null]);
});

test('one-transaction mode: req.idempotency.db; a failed handler leaves no row', async () => {
  const ok = fresh('ntx'); const bad = fresh('ntx');
  assert.deepEqual((await post('/tx', {}, { 'idempotency-key': ok })).body, { stored: ok });
  isProblem(await post('/tx', {}, { 'idempotency-key': bad, 'x-fail': '1' }), 500);
  const { rows } = await pool.query('SELECT key FROM node_nest_orders WHERE key = ANY($1)', [[ok, bad]]);
  assert.deepEqual(rows.map((r) => r.key), [ok]);
});
