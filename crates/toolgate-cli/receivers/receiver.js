#!/usr/bin/env node
// The webhook receiver of `__TOOL__`, written by `toolgate init`.
//
// toolgate decides which proposed calls of `__TOOL__` become writes; this
// process performs them on the application's own database and answers as
// toolgate's webhook contract says (docs/deploy.md, "Receivers"):
//
//   POST /webhook           a signed permit -> the write, once, with its
//                           version as the precondition
//   GET  /status            ?idempotency_key=K -> was it applied? (fences K)
//   GET  /version/<id>      the resource's current version (the http state
//                           source, when toolgate.toml uses it)
//
// Node's standard library for HTTP and HMAC, node-postgres (`pg`) or
// `mysql2` for the database, picked from the URL's scheme.
//
// Every request must carry `Toolgate-Signature: t=<unix s>,v2=<hex>`, the
// HMAC-SHA256 under the shared secret of "<t>\n<METHOD>\n<target>\n<body>",
// with t within five minutes; anything else is answered 401 and nothing is
// read or written.
//
// Exactly once: each write first inserts its Idempotency-Key into
// `toolgate_receipts` (a unique key), then updates the row only where its
// version is still the permit's `precondition_version`, then records its
// result beside the key, all in one transaction. A second delivery of the
// key finds the result and answers it again; a key the status URL fenced
// first (a receipt without a result) is refused with 410, nothing written.
//
//   __DB_ENV__=postgres://... node receiver.js [PORT]      (default __PORT__)
//   the secret: the file named by TOOLGATE_WEBHOOK_SECRET_FILE, default
//   webhook.secret beside this file (a trailing newline is ignored)
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const TOOL = '__TOOL__';
const TABLE = '__TABLE__';
const ID_COLUMN = '__ID_COLUMN__';
const VERSION_COLUMN = '__VERSION_COLUMN__';
// The scope field holding the row's id.
const RESOURCE_FIELD = '__RESOURCE_FIELD__';
const DB_URL = process.env.__DB_ENV__ || '';
const SECRET_FILE = process.env.TOOLGATE_WEBHOOK_SECRET_FILE
  || path.join(__dirname, 'webhook.secret');
const MAX_SKEW_S = 300;
const MAX_BODY = 64 * 1024;

const SECRET = fs.readFileSync(SECRET_FILE).toString('latin1').replace(/[\r\n]+$/, '');
if (SECRET.length < 16) {
  console.error(`receiver.js: the secret in ${SECRET_FILE} is shorter than 16 bytes`);
  process.exit(2);
}

// One small interface over both drivers: `tx(fn)` runs fn(q) in a
// transaction on one connection, q(sql, params) taking `?` placeholders.
let db;
if (/^postgres(ql)?:\/\//.test(DB_URL)) {
  const { Pool } = require('pg');
  const pool = new Pool({ connectionString: DB_URL, max: 8 });
  const numbered = (sql) => { let n = 0; return sql.replace(/\?/g, () => `$${++n}`); };
  db = {
    isDuplicate: (e) => e && e.code === '23505',
    receiptsDdl: 'CREATE TABLE IF NOT EXISTS toolgate_receipts ('
      + ' idempotency_key VARCHAR(80) PRIMARY KEY, result TEXT,'
      + ' created_at TIMESTAMPTZ NOT NULL DEFAULT now())',
    fence: 'INSERT INTO toolgate_receipts (idempotency_key) VALUES (?)'
      + ' ON CONFLICT (idempotency_key) DO NOTHING',
    async connection() {
      const client = await pool.connect();
      return {
        async q(sql, params = []) {
          const r = await client.query(numbered(sql), params);
          return { rows: r.rows.map((row) => Object.values(row)), count: r.rowCount };
        },
        release: () => client.release(),
      };
    },
  };
} else if (/^(mysql|mariadb):\/\//.test(DB_URL)) {
  const mysql = require('mysql2/promise');
  const pool = mysql.createPool({ uri: DB_URL.replace(/^mariadb:/, 'mysql:'), connectionLimit: 8 });
  db = {
    isDuplicate: (e) => e && e.errno === 1062,
    receiptsDdl: 'CREATE TABLE IF NOT EXISTS toolgate_receipts ('
      + ' idempotency_key VARCHAR(80) PRIMARY KEY, result TEXT,'
      + ' created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB',
    fence: 'INSERT INTO toolgate_receipts (idempotency_key) VALUES (?)'
      + ' ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key',
    async connection() {
      const conn = await pool.getConnection();
      return {
        async q(sql, params = []) {
          const [r] = await conn.query({ sql, values: params, rowsAsArray: true });
          return Array.isArray(r) ? { rows: r, count: r.length } : { rows: [], count: r.affectedRows };
        },
        release: () => conn.release(),
      };
    },
  };
} else {
  console.error('receiver.js: set __DB_ENV__ to a postgres:// or mysql:// URL');
  process.exit(2);
}

async function tx(fn) {
  const c = await db.connection();
  try {
    await c.q('BEGIN');
    return await fn(c.q, c);
  } catch (e) {
    await c.q('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}

function signatureOk(header, method, target, body) {
  const parts = {};
  for (const part of String(header || '').split(',')) {
    const i = part.indexOf('=');
    if (i > 0) parts[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  const t = parts.t || '';
  const mac = (parts.v2 || '').toLowerCase();
  if (!/^[0-9]{1,20}$/.test(t) || !/^[0-9a-f]{64}$/.test(mac)) return false;
  if (Math.abs(Date.now() / 1000 - Number(t)) > MAX_SKEW_S) return false;
  const expected = crypto.createHmac('sha256', Buffer.from(SECRET, 'latin1'))
    .update(Buffer.concat([Buffer.from(`${t}\n${method}\n${target}\n`), body]))
    .digest();
  return crypto.timingSafeEqual(expected, Buffer.from(mac, 'hex'));
}

// The permit's version as the column compares it.
const asVersion = (text) => (/^-?[0-9]{1,15}$/.test(text) ? Number(text) : text);

// Your write goes here: what `__TOOL__` changes besides the version, in the
// same transaction (`permit.arguments` holds the model's validated
// arguments). Return what the result should record.
async function applyWrite(q, permit, rowId) {
  return {};
}

const versionSql = `SELECT ${VERSION_COLUMN} FROM ${TABLE} WHERE ${ID_COLUMN} = ?`;

async function execute(permit, key) {
  const rowId = permit.scope[RESOURCE_FIELD];
  const version = asVersion(String(permit.precondition_version));
  const c = await db.connection();
  try {
    await c.q('BEGIN');
    try {
      await c.q('INSERT INTO toolgate_receipts (idempotency_key) VALUES (?)', [key]);
    } catch (e) {
      if (!db.isDuplicate(e)) throw e;
      await c.q('ROLLBACK');
      const { rows } = await c.q('SELECT result FROM toolgate_receipts WHERE idempotency_key = ?', [key]);
      if (rows.length && rows[0][0] !== null) {
        // Delivered before: the same answer, nothing written twice.
        return [200, JSON.parse(rows[0][0])];
      }
      // The status URL fenced this key first: it must never apply.
      return [410, { error: 'fenced' }];
    }
    const updated = await c.q(
      `UPDATE ${TABLE} SET ${VERSION_COLUMN} = ${VERSION_COLUMN} + 1`
        + ` WHERE ${ID_COLUMN} = ? AND ${VERSION_COLUMN} = ?`,
      [rowId, version],
    );
    if (updated.count !== 1) {
      await c.q('ROLLBACK');
      const { rows } = await c.q(versionSql, [rowId]);
      return [409, { current_version: rows.length ? String(rows[0][0]) : null }];
    }
    const result = {
      tool: TOOL,
      [RESOURCE_FIELD]: rowId,
      version_before: String(version),
      idempotency_key: key,
      ...(await applyWrite(c.q, permit, rowId)),
    };
    await c.q('UPDATE toolgate_receipts SET result = ? WHERE idempotency_key = ?',
      [JSON.stringify(result), key]);
    if (Date.now() > Number(permit.lease_expires_at)) {
      // Past the permit's lease toolgate may already have asked the status
      // URL and been told "not applied": never commit then.
      await c.q('ROLLBACK');
      return [410, { error: 'lease_expired' }];
    }
    await c.q('COMMIT');
    return [201, result];
  } catch (e) {
    await c.q('ROLLBACK').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}

// The status answer for `key`, fencing it when nothing was applied.
async function fence(key) {
  const rows = await tx(async (q) => {
    await q(db.fence, [key]);
    const r = await q('SELECT result FROM toolgate_receipts WHERE idempotency_key = ?', [key]);
    await q('COMMIT');
    return r.rows;
  });
  if (rows.length && rows[0][0] !== null) return { applied: true, result: JSON.parse(rows[0][0]) };
  return { applied: false };
}

async function currentVersion(rowId) {
  const rows = await tx(async (q) => {
    const r = await q(versionSql, [rowId]);
    await q('COMMIT');
    return r.rows;
  });
  return rows.length ? rows[0][0] : null;
}

function answer(res, status, doc) {
  const body = JSON.stringify(doc);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

async function handle(req, body, res) {
  // req.url is the request target exactly as sent on the request line.
  if (!signatureOk(req.headers['toolgate-signature'], req.method, req.url, body)) {
    return answer(res, 401, { error: 'bad_signature' });
  }
  const url = new URL(req.url, 'http://receiver');
  if (req.method === 'GET' && url.pathname === '/status') {
    const key = url.searchParams.get('idempotency_key') || '';
    if (!key || key.length > 80) return answer(res, 400, { error: 'idempotency_key is required' });
    return answer(res, 200, await fence(key));
  }
  if (req.method === 'GET' && url.pathname.startsWith('/version/')) {
    const version = await currentVersion(decodeURIComponent(url.pathname.slice('/version/'.length)));
    if (version === null) return answer(res, 404, { error: 'no such resource' });
    return answer(res, 200, { version: String(version) });
  }
  if (req.method === 'POST' && url.pathname === '/webhook') {
    let permit;
    try {
      permit = JSON.parse(body.toString('utf8'));
      if (typeof permit.idempotency_key !== 'string' || permit.scope[RESOURCE_FIELD] === undefined
          || !Number.isFinite(Number(permit.lease_expires_at))) throw new Error('shape');
    } catch (e) {
      return answer(res, 400, { error: 'not a toolgate permit' });
    }
    const key = permit.idempotency_key;
    if (req.headers['idempotency-key'] !== key || key.length > 80) {
      return answer(res, 400, { error: "Idempotency-Key must be the permit's" });
    }
    if (permit.tool !== TOOL) return answer(res, 400, { error: `this receiver performs ${TOOL} only` });
    const [status, doc] = await execute(permit, key);
    return answer(res, status, doc);
  }
  return answer(res, 404, { error: 'no such endpoint' });
}

async function main() {
  const port = Number(process.argv[2] || process.env.RECEIVER_PORT || '__PORT__');
  await tx(async (q) => { await q(db.receiptsDdl); await q('COMMIT'); });
  const server = http.createServer((req, res) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY) { answer(res, 413, { error: 'body too large' }); req.destroy(); return; }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > MAX_BODY) return;
      handle(req, Buffer.concat(chunks), res).catch((e) => {
        console.error(`receiver: ${e.stack || e}`);
        if (!res.headersSent) answer(res, 500, { error: 'internal' });
      });
    });
  });
  server.listen(port, '127.0.0.1', () => console.error(`receiver: ${TOOL} on http://127.0.0.1:${port}`));
}

main().catch((e) => { console.error(e); process.exit(1); });
