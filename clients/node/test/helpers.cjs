// test/helpers.cjs: the pool of the tests (PG* variables) and small helpers.
const { Pool } = require('pg');

const pool = new Pool({ max: 10 });
let n = 0;
/** A key no other test uses. */
const fresh = (prefix) => `${prefix}-${process.pid}-${Date.now()}-${++n}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = { pool, fresh, sleep };
