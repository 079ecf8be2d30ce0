#!/usr/bin/env python3
"""The webhook receiver of `__TOOL__`, written by `toolgate init`.

toolgate decides which proposed calls of `__TOOL__` become writes; this
process performs them on the application's own database and answers as
toolgate's webhook contract says (docs/deploy.md, "Receivers"):

  POST /webhook           a signed permit -> the write, once, with its version
                          as the precondition
  GET  /status            ?idempotency_key=K -> was it applied? (fences K)
  GET  /version/<id>      the resource's current version (the http state
                          source, when toolgate.toml uses it)

Python's standard library for HTTP, psycopg (PostgreSQL) or PyMySQL
(MariaDB/MySQL) for the database, picked from the URL's scheme.

Every request must carry `Toolgate-Signature: t=<unix s>,v2=<hex>`, the
HMAC-SHA256 under the shared secret of "<t>\\n<METHOD>\\n<target>\\n<body>",
with t within five minutes; anything else is answered 401 and nothing is
read or written.

Exactly once: each write first inserts its Idempotency-Key into
`toolgate_receipts` (a unique key), then updates the row only where its
version is still the permit's `precondition_version`, then records its result
beside the key, all in one transaction. A second delivery of the key finds
the result and answers it again; a key the status URL fenced first
(a receipt without a result) is refused with 410, and nothing is written.

  __DB_ENV__=postgres://... python3 receiver.py [PORT]      (default __PORT__)
  the secret: the file named by TOOLGATE_WEBHOOK_SECRET_FILE, default
  webhook.secret beside this file (a trailing newline is ignored)
"""

import hashlib
import hmac
import json
import os
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

TOOL = "__TOOL__"
TABLE = "__TABLE__"
ID_COLUMN = "__ID_COLUMN__"
VERSION_COLUMN = "__VERSION_COLUMN__"
# The scope field holding the row's id.
RESOURCE_FIELD = "__RESOURCE_FIELD__"
DB_URL = os.environ.get("__DB_ENV__", "")
SECRET_FILE = os.environ.get(
    "TOOLGATE_WEBHOOK_SECRET_FILE",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "webhook.secret"),
)
MAX_SKEW_S = 300
MAX_BODY = 64 * 1024

if DB_URL.startswith(("postgres://", "postgresql://")):
    import psycopg

    def connect():
        return psycopg.connect(DB_URL)

    def is_duplicate(e):
        return isinstance(e, psycopg.errors.UniqueViolation)

    RECEIPTS_DDL = (
        "CREATE TABLE IF NOT EXISTS toolgate_receipts ("
        " idempotency_key VARCHAR(80) PRIMARY KEY,"
        " result TEXT,"
        " created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    )
    FENCE = (
        "INSERT INTO toolgate_receipts (idempotency_key) VALUES (%s)"
        " ON CONFLICT (idempotency_key) DO NOTHING"
    )
elif DB_URL.startswith(("mysql://", "mariadb://")):
    import pymysql

    def connect():
        u = urlsplit(DB_URL)
        return pymysql.connect(
            host=u.hostname or "127.0.0.1",
            port=u.port or 3306,
            user=unquote(u.username or ""),
            password=unquote(u.password or ""),
            database=unquote(u.path.lstrip("/")),
            charset="utf8mb4",
            autocommit=False,
        )

    def is_duplicate(e):
        return isinstance(e, pymysql.err.IntegrityError) and e.args and e.args[0] == 1062

    RECEIPTS_DDL = (
        "CREATE TABLE IF NOT EXISTS toolgate_receipts ("
        " idempotency_key VARCHAR(80) PRIMARY KEY,"
        " result TEXT,"
        " created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB"
    )
    FENCE = (
        "INSERT INTO toolgate_receipts (idempotency_key) VALUES (%s)"
        " ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key"
    )
else:
    sys.exit("receiver.py: set __DB_ENV__ to a postgres:// or mysql:// URL")


def read_secret():
    with open(SECRET_FILE, "rb") as f:
        secret = f.read().rstrip(b"\r\n")
    if len(secret) < 16:
        sys.exit("receiver.py: the secret in %s is shorter than 16 bytes" % SECRET_FILE)
    return secret


SECRET = read_secret()


def signature_ok(header, method, target, body):
    """Checks `t=<unix seconds>,v2=<hex>` over method, target and body."""
    parts = {}
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        parts[name] = value
    t, mac = parts.get("t", ""), parts.get("v2", "")
    if not re.fullmatch(r"[0-9]{1,20}", t) or not re.fullmatch(r"[0-9a-fA-F]{64}", mac):
        return False
    if abs(time.time() - int(t)) > MAX_SKEW_S:
        return False
    signed = ("%s\n%s\n%s\n" % (t, method, target)).encode() + body
    expected = hmac.new(SECRET, signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, mac.lower())


def as_version(text):
    """The permit's version as the column compares it: an integer column
    takes the integer, a text column the text."""
    return int(text) if re.fullmatch(r"-?[0-9]{1,18}", text) else text


def apply_write(cur, permit, row_id):
    """Your write goes here: what `__TOOL__` changes besides the version,
    in the same transaction (`permit["arguments"]` holds the model's
    validated arguments). Return what the result should record."""
    return {}


def execute(permit, key):
    """The write, exactly once: (HTTP status, answer)."""
    row_id = permit["scope"][RESOURCE_FIELD]
    version = as_version(str(permit["precondition_version"]))
    lease_expires_at = int(permit["lease_expires_at"])
    db = connect()
    try:
        cur = db.cursor()
        try:
            cur.execute(
                "INSERT INTO toolgate_receipts (idempotency_key) VALUES (%s)", (key,)
            )
        # Each driver has its own error types; only a duplicate key is expected.
        except Exception as e:
            if not is_duplicate(e):
                raise
            db.rollback()
            cur = db.cursor()
            cur.execute(
                "SELECT result FROM toolgate_receipts WHERE idempotency_key = %s", (key,)
            )
            row = cur.fetchone()
            db.commit()
            if row is not None and row[0] is not None:
                # Delivered before: the same answer, nothing written twice.
                return 200, json.loads(row[0])
            # The status URL fenced this key first: it must never apply.
            return 410, {"error": "fenced"}
        cur.execute(
            "UPDATE %s SET %s = %s + 1 WHERE %s = %%s AND %s = %%s"
            % (TABLE, VERSION_COLUMN, VERSION_COLUMN, ID_COLUMN, VERSION_COLUMN),
            (row_id, version),
        )
        if cur.rowcount != 1:
            db.rollback()
            cur = db.cursor()
            cur.execute(
                "SELECT %s FROM %s WHERE %s = %%s" % (VERSION_COLUMN, TABLE, ID_COLUMN),
                (row_id,),
            )
            current = cur.fetchone()
            db.commit()
            return 409, {"current_version": None if current is None else str(current[0])}
        result = {
            "tool": TOOL,
            RESOURCE_FIELD: row_id,
            "version_before": str(version),
            "idempotency_key": key,
        }
        result.update(apply_write(cur, permit, row_id))
        cur.execute(
            "UPDATE toolgate_receipts SET result = %s WHERE idempotency_key = %s",
            (json.dumps(result), key),
        )
        if time.time() * 1000 > lease_expires_at:
            # Past the permit's lease toolgate may already have asked the
            # status URL and been told "not applied": never commit then.
            db.rollback()
            return 410, {"error": "lease_expired"}
        db.commit()
        return 201, result
    finally:
        db.close()


def fence(key):
    """The status answer for `key`, fencing it when nothing was applied."""
    db = connect()
    try:
        cur = db.cursor()
        cur.execute(FENCE, (key,))
        cur.execute("SELECT result FROM toolgate_receipts WHERE idempotency_key = %s", (key,))
        row = cur.fetchone()
        db.commit()
    finally:
        db.close()
    if row is not None and row[0] is not None:
        return {"applied": True, "result": json.loads(row[0])}
    return {"applied": False}


def current_version(row_id):
    db = connect()
    try:
        cur = db.cursor()
        cur.execute(
            "SELECT %s FROM %s WHERE %s = %%s" % (VERSION_COLUMN, TABLE, ID_COLUMN), (row_id,)
        )
        row = cur.fetchone()
        db.commit()
    finally:
        db.close()
    return None if row is None else row[0]


class Receiver(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("receiver: " + (fmt % args) + "\n")

    def answer(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def signed(self, body):
        # self.path is the request target exactly as sent on the request line.
        return signature_ok(self.headers.get("Toolgate-Signature"), self.command, self.path, body)

    def do_GET(self):
        if not self.signed(b""):
            return self.answer(401, {"error": "bad_signature"})
        url = urlsplit(self.path)
        if url.path == "/status":
            key = parse_qs(url.query).get("idempotency_key", [""])[0]
            if not key or len(key) > 80:
                return self.answer(400, {"error": "idempotency_key is required"})
            return self.answer(200, fence(key))
        if url.path.startswith("/version/"):
            version = current_version(unquote(url.path[len("/version/"):]))
            if version is None:
                return self.answer(404, {"error": "no such resource"})
            return self.answer(200, {"version": str(version)})
        return self.answer(404, {"error": "no such endpoint"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self.answer(413, {"error": "body too large"})
        body = self.rfile.read(length)
        if not self.signed(body):
            return self.answer(401, {"error": "bad_signature"})
        if urlsplit(self.path).path != "/webhook":
            return self.answer(404, {"error": "no such endpoint"})
        try:
            permit = json.loads(body)
            key = permit["idempotency_key"]
            permit["scope"][RESOURCE_FIELD]
            int(permit["lease_expires_at"])
        except (ValueError, KeyError, TypeError):
            return self.answer(400, {"error": "not a toolgate permit"})
        if self.headers.get("Idempotency-Key") != key or len(key) > 80:
            return self.answer(400, {"error": "Idempotency-Key must be the permit's"})
        if permit.get("tool") != TOOL:
            return self.answer(400, {"error": "this receiver performs %s only" % TOOL})
        status, doc = execute(permit, key)
        return self.answer(status, doc)


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("RECEIVER_PORT", "__PORT__"))
    db = connect()
    try:
        db.cursor().execute(RECEIPTS_DDL)
        db.commit()
    finally:
        db.close()
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    sys.stderr.write("receiver: %s on http://127.0.0.1:%d\n" % (TOOL, port))
    server.serve_forever()


if __name__ == "__main__":
    main()
