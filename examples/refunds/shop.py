#!/usr/bin/env python3
"""The shop's side of the refunds example: the webhook toolgate calls.

Python's standard library for HTTP (http.server) and psycopg for the shop's
PostgreSQL. It is what a shop writes to put toolgate in front of its own
`refund_order` tool; nothing in it is Rust. Endpoints:

  POST /refund    toolgate's signed permit -> apply one refund, or say why not
  GET  /status    ?idempotency_key=KEY -> was that refund applied? From now
                  on, refuse KEY (reconciliation)

Every request must carry a valid `Toolgate-Signature` (v2: HMAC-SHA256 with
the shared secret over "<t>\n<METHOD>\n<target>\n<body>", the target being
the path and query as sent, t within five minutes), or it is refused.

The refund is written with the permit's version as its precondition
(`WHERE id = %s AND version = %s`): toolgate's own version check is a filter,
this UPDATE is the lock.

"Not applied" is final. Each attempt of an operation has its own
`Idempotency-Key` (`<operation key>`, then `<operation key>.<n>`), and
`shop.webhook_keys` holds one row per key, written by whichever comes first:
the refund (with its result) or the status request (with none: a fence). A
refund that arrives after the status request answered `{"applied": false}`
fails on that row and is refused with 410 `{"error": "fenced"}`, so the
answer toolgate recorded can never turn false. A refund delivered twice is
applied once and answered twice with the same result. A permit past its
`lease_expires_at` is refused with 410 `{"error": "lease_expired"}`.

Usage: SHOP_DB_URL=postgres://... SHOP_WEBHOOK_SECRET=... python3 shop.py PORT
For the end-to-end test only: SHOP_CRASH_AFTER_COMMIT_ORDER=1004 makes the
process die right after committing a refund of that order, before answering
(a crash toolgate must settle by reconciliation, never by sending again);
SHOP_SLOW_ORDER=1006 with SHOP_SLOW_MS=5000 makes the first attempt of a
refund of that order wait that long before it writes (work that outlasts the
lease: the late-commit race the fence settles).
"""

import hashlib
import hmac
import json
import os
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import psycopg

SECRET = os.environ.get("SHOP_WEBHOOK_SECRET", "").encode()
DB_URL = os.environ.get("SHOP_DB_URL", "")
CRASH_ORDER = os.environ.get("SHOP_CRASH_AFTER_COMMIT_ORDER")
SLOW_ORDER = os.environ.get("SHOP_SLOW_ORDER")
SLOW_MS = int(os.environ.get("SHOP_SLOW_MS") or 0)
MAX_BODY = 64 * 1024
MAX_SKEW_S = 300
# An operation key (64 hex digits), and `.<n>` for attempt n >= 2.
KEY = re.compile(r"\A[0-9a-f]{64}(\.[1-9][0-9]{0,9})?\Z")


def signature_ok(header, method, target, body):
    """Checks `t=<unix seconds>,v2=<hex>` against our own HMAC of
    "<t>\\n<METHOD>\\n<target>\\n<body>", in constant time."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(time.time() - t) > MAX_SKEW_S:
        return False
    signed = f"{t}\n{method}\n{target}\n".encode() + body
    expected = hmac.new(SECRET, signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v2", ""))


def now_ms():
    return int(time.time() * 1000)


class Shop(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("shop: " + (fmt % args) + "\n")

    def answer(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def refuse(self, key, why):
        """This attempt's key is refused for good: nothing was written."""
        sys.stderr.write("shop: refused %s: %s\n" % (key, why))
        return self.answer(410, {"error": why})

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return None
        return self.rfile.read(length)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path != "/status":
            return self.answer(404, {"error": "no such endpoint"})
        # The target as sent on the request line: what toolgate signed.
        if not signature_ok(self.headers.get("Toolgate-Signature", ""), "GET", self.path, b""):
            return self.answer(401, {"error": "bad signature"})
        key = parse_qs(url.query).get("idempotency_key", [""])[0]
        if not KEY.match(key):
            return self.answer(400, {"error": "idempotency_key must be an operation key[.n]"})
        # One transaction: the key's row, written now as a fence if the
        # refund has not written it, then its result. Waits for a refund
        # holding the key in an open transaction, then reads its outcome.
        with psycopg.connect(DB_URL) as db:
            with db.transaction():
                db.execute(
                    "INSERT INTO shop.webhook_keys (idempotency_key) VALUES (%s)"
                    " ON CONFLICT (idempotency_key) DO NOTHING",
                    (key,),
                )
                row = db.execute(
                    "SELECT result FROM shop.webhook_keys WHERE idempotency_key = %s", (key,)
                ).fetchone()
        if row is None or row[0] is None:
            sys.stderr.write("shop: status %s: not applied, fenced\n" % key)
            return self.answer(200, {"applied": False})
        return self.answer(200, {"applied": True, "result": json.loads(row[0])})

    def do_POST(self):
        if urlparse(self.path).path != "/refund":
            return self.answer(404, {"error": "no such endpoint"})
        body = self.read_body()
        if body is None:
            return self.answer(413, {"error": "body too large"})
        if not signature_ok(self.headers.get("Toolgate-Signature", ""), "POST", self.path, body):
            return self.answer(401, {"error": "bad signature"})
        key = self.headers.get("Idempotency-Key", "")
        permit = json.loads(body)
        if not KEY.match(key) or key != permit.get("idempotency_key"):
            return self.answer(400, {"error": "Idempotency-Key must be the permit's idempotency_key"})
        order_id = int(permit["scope"]["order_id"])
        version = int(permit["precondition_version"])
        amount = int(permit["arguments"]["amount_minor"])
        reason = permit["arguments"]["reason"]
        lease_expires_at = int(permit["lease_expires_at"])
        if now_ms() >= lease_expires_at:
            return self.refuse(key, "lease_expired")
        if SLOW_ORDER is not None and str(order_id) == SLOW_ORDER and permit.get("attempt") == 1:
            # Slow work before the write (a payment provider, a lock queue):
            # by the time it is done, the lease may have ended and toolgate
            # may have asked the status URL.
            time.sleep(SLOW_MS / 1000)
        with psycopg.connect(DB_URL) as db:
            status, doc = write_refund(db, key, permit, order_id, version, amount, reason,
                                       lease_expires_at)
        if status == 410:
            return self.refuse(key, doc["error"])
        if status == 201 and CRASH_ORDER is not None and str(order_id) == CRASH_ORDER:
            # The refund is committed; the answer never leaves.
            sys.stderr.write("shop: crashing after committing the refund of %s\n" % order_id)
            os._exit(3)
        return self.answer(status, doc)


def write_refund(db, key, permit, order_id, version, amount, reason, lease_expires_at):
    """The refund under `key`, in one transaction: (HTTP status, answer)."""
    outcome = None
    with db.transaction() as tx:
        # The key's row first: the fence and the refund exclude each other
        # on it, whichever comes first (an open status request's row makes
        # this wait for its answer, and the other way round).
        fresh = db.execute(
            "INSERT INTO shop.webhook_keys (idempotency_key) VALUES (%s)"
            " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key",
            (key,),
        ).fetchone()
        if fresh is None:
            done = db.execute(
                "SELECT result FROM shop.webhook_keys WHERE idempotency_key = %s", (key,)
            ).fetchone()
            if done is not None and done[0] is not None:
                # Delivered before: the same answer, no second refund.
                return 200, json.loads(done[0])
            # A status request answered "not applied" for this key first.
            return 410, {"error": "fenced"}
        if now_ms() >= lease_expires_at:
            # Never commit past the lease; the rollback takes the key's row
            # back, and a status request then fences the key.
            outcome = (410, {"error": "lease_expired"})
            raise psycopg.Rollback(tx)
        row = db.execute(
            "UPDATE shop.orders"
            " SET refunded_minor = refunded_minor + %s, version = version + 1"
            " WHERE id = %s AND version = %s AND refunded_minor + %s <= total_minor"
            " RETURNING version",
            (amount, order_id, version, amount),
        ).fetchone()
        if row is None:
            current = db.execute(
                "SELECT version FROM shop.orders WHERE id = %s", (order_id,)
            ).fetchone()
            outcome = (409, {"current_version": current[0] if current else None})
            raise psycopg.Rollback(tx)
        result = {
            "refunded": True,
            "order_id": order_id,
            "amount_minor": amount,
            "reason": reason,
            "version_before": version,
            "version_after": row[0],
        }
        db.execute(
            "INSERT INTO shop.refunds"
            " (order_id, amount_minor, reason, agent, idempotency_key, result)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (order_id, amount, reason, permit.get("actor", ""), key, json.dumps(result)),
        )
        db.execute(
            "UPDATE shop.webhook_keys SET result = %s WHERE idempotency_key = %s",
            (json.dumps(result), key),
        )
        outcome = (201, result)
    return outcome


def main():
    if not SECRET or not DB_URL:
        sys.exit("shop.py: set SHOP_WEBHOOK_SECRET and SHOP_DB_URL")
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9100
    server = ThreadingHTTPServer(("127.0.0.1", port), Shop)
    sys.stderr.write("shop: listening on http://127.0.0.1:%d\n" % port)
    server.serve_forever()


if __name__ == "__main__":
    main()
