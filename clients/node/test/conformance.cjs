// test/conformance.cjs: the cases of test/conformance/http.json
// (doc/clients.md's behaviour table, as every package runs it; its
// "grammar" says what a step asks) as node:test tests, against the
// fixture's app mounted at /payments by httpBehaviour (helpers.cjs).
// test/conformance/http_check.py runs the same cases against the README's
// quick start over real HTTP.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const top = process.env.IDEM_TOP || path.join(__dirname, '..', '..', '..');
const { cases } = JSON.parse(fs.readFileSync(path.join(top, 'test', 'conformance', 'http.json'), 'utf8'));

const keyOf = (template, fresh) => (template === undefined || template === null ? null
  : template.replaceAll('{key}', fresh).replace(/\{k\*(\d+)\}/g, (_, n) => 'k'.repeat(Number(n))));

async function send(base, request, fresh) {
  const method = request.method ?? 'POST';
  const headers = { 'content-type': 'application/json' };
  const key = keyOf(request.key, fresh);
  if (key !== null) headers['idempotency-key'] = key;
  const user = request.user === undefined ? 'alice' : request.user;
  if (user !== null) headers['x-user'] = user;
  let body;
  if ('body_text' in request) body = request.body_text;
  else if (method !== 'GET') body = JSON.stringify(request.body ?? {});
  const r = await fetch(`${base}/payments`, { method, headers, body });
  return { status: r.status, headers: r.headers, raw: await r.text() };
}

function check(r, expect, earlier, where) {
  const got = `${where}: got ${r.status} ${JSON.stringify(Object.fromEntries(r.headers))} ${r.raw.slice(0, 300)}`;
  if ('status' in expect) assert.equal(r.status, expect.status, got);
  const problem = /^application\/problem\+json/.test(r.headers.get('content-type') ?? '');
  if ('problem' in expect) assert.equal(problem, expect.problem, got);
  if (expect.problem) {
    const doc = JSON.parse(r.raw);
    assert.ok(doc.type === 'about:blank' && doc.status === r.status && doc.title && 'detail' in doc, got);
  }
  if ('paid' in expect) assert.equal(JSON.parse(r.raw).paid, expect.paid, got);
  for (const [name, value] of Object.entries(expect.headers ?? {})) assert.equal(r.headers.get(name), value, `${name}; ${got}`);
  if ('same_body_as' in expect) assert.equal(r.raw, earlier[expect.same_body_as].raw, got);
  if (expect.same_headers_as) {
    const [step, names] = expect.same_headers_as;
    for (const name of names) assert.equal(r.headers.get(name), earlier[step].headers.get(name), `${name}; ${got}`);
  }
  if (expect.expires) {
    const [name, seconds] = expect.expires;
    const ahead = (Date.parse(r.headers.get(name)) - Date.now()) / 1000;
    assert.ok(Math.abs(ahead - seconds) <= 10, `${name} ${seconds} s ahead; ${got}`);
  }
}

async function runCase(base, number, c) {
  const fresh = `conformance-${number}-${process.pid}-${Date.now()}`;
  if (c.concurrent) {
    const [step] = c.steps;
    const { n, distinct } = c.concurrent;
    const answers = await Promise.all(Array.from({ length: n }, (_, i) => send(base, step.request, distinct ? `${fresh}-${i}` : fresh)));
    if (distinct) {
      answers.forEach((a, i) => check(a, step.expect, [], `copy ${i}`));
      return;
    }
    const ran = answers.filter((a) => a.status !== 409 && a.headers.get('idempotent-replayed') === null);
    assert.equal(ran.length, 1, `one run of ${n} duplicates: ${answers.map((a) => a.status)}`);
    check(ran[0], step.expect, [], 'the run');
    for (const a of answers) {
      if (a === ran[0]) continue;
      if (a.status === 409) {
        check(a, { status: 409, problem: true }, [], 'a duplicate');
        assert.ok(Number(a.headers.get('retry-after')) >= 1, 'Retry-After');
      } else {
        check(a, { status: ran[0].status, headers: { 'idempotent-replayed': 'true' }, same_body_as: 0 }, ran, 'a duplicate');
      }
    }
    return;
  }
  const earlier = [];
  for (const [i, step] of c.steps.entries()) {
    const r = await send(base, step.request, fresh);
    check(r, step.expect, earlier, `step ${i}`);
    earlier.push(r);
  }
}

/** One test per case of http.json, named `${name}: …`, on the server at base(). */
function conformance(name, base) {
  cases.forEach((c, number) => test(`${name}: http.json case ${number}, ${c.row}`, () => runCase(base(), number, c)));
}

module.exports = { conformance };
