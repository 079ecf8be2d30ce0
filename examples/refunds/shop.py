#!/usr/bin/env python3
"""The shop's side of the refunds example: the webhook toolgate calls.

Python's standard library for HTTP (http.server) and psycopg for the shop's
PostgreSQL. It is what a shop writes to put toolgate in front of its own
`refund_order` tool; nothing in it is Rust. Endpoints:

  POST /refund    toolgate's signed permit -> apply one refund, or say why not
  GET  /status    ?operation_key=HEX -> was that refund applied? (reconciliation)

Every request must carry a valid `Toolgate-Signature` (HMAC-SHA256 with the
shared secret over "<t>.<body>", t within five minutes), or it is refused.

The refund is written with the permit's version as its precondition
(`WHERE id = %s AND version = %s`): toolgate's own version check is a filter,
this UPDATE is the lock. The `Idempotency-Key` (toolgate's operation key) is
unique in `shop.refunds`: a refund delivered twice is applied once and
answered twice with the same result.

Usage: SHOP_DB_URL=postgres://... SHOP_WEBHOOK_SECRET=... python3 shop.py PORT
For the end-to-end test only: SHOP_CRASH_AFTER_COMMIT_ORDER=1004 makes the
process die right after committing a refund of that order, before answering
(a crash toolgate must settle by reconciliation, never by sending again).
"""

import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import psycopg

SECRET = os.environ.get("SHOP_WEBHOOK_SECRET", "").encode()
DB_URL = os.environ.get("SHOP_DB_URL", "")
CRASH_ORDER = os.environ.get("SHOP_CRASH_AFTER_COMMIT_ORDER")
MAX_BODY = 64 * 1024
MAX_SKEW_S = 300


def signature_ok(header, body):
    """Checks `t=<unix seconds>,v1=<hex>` against our own HMAC of the body."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(time.time() - t) > MAX_SKEW_S:
        return False
    expected = hmac.new(SECRET, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))


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

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return None
        return self.rfile.read(length)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path != "/status":
            return self.answer(404, {"error": "no such endpoint"})
        if not signature_ok(self.headers.get("Toolgate-Signature", ""), b""):
            return self.answer(401, {"error": "bad signature"})
        key = parse_qs(url.query).get("operation_key", [""])[0]
        with psycopg.connect(DB_URL) as db:
            row = db.execute(
                "SELECT result FROM shop.refunds WHERE idempotency_key = %s", (key,)
            ).fetchone()
        if row is None:
            return self.answer(200, {"applied": False})
        return self.answer(200, {"applied": True, "result": json.loads(row[0])})

    def do_POST(self):
        if urlparse(self.path).path != "/refund":
            return self.answer(404, {"error": "no such endpoint"})
        body = self.read_body()
        if body is None:
            return self.answer(413, {"error": "body too large"})
        if not signature_ok(self.headers.get("Toolgate-Signature", ""), body):
            return self.answer(401, {"error": "bad signature"})
        key = self.headers.get("Idempotency-Key", "")
        permit = json.loads(body)
        if not key or key != permit.get("operation_key"):
            return self.answer(400, {"error": "Idempotency-Key must be the operation key"})
        order_id = int(permit["scope"]["order_id"])
        version = int(permit["precondition_version"])
        amount = int(permit["arguments"]["amount_minor"])
        reason = permit["arguments"]["reason"]
        with psycopg.connect(DB_URL) as db:
            with db.transaction():
                done = db.execute(
                    "SELECT result FROM shop.refunds WHERE idempotency_key = %s", (key,)
                ).fetchone()
                if done is not None:
                    # Delivered before: the same answer, no second refund.
                    return self.answer(200, json.loads(done[0]))
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
                    return self.answer(
                        409, {"current_version": current[0] if current else None}
                    )
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
        if CRASH_ORDER is not None and str(order_id) == CRASH_ORDER:
            # The refund is committed; the answer never leaves.
            sys.stderr.write("shop: crashing after committing the refund of %s\n" % order_id)
            os._exit(3)
        return self.answer(201, result)


def main():
    if not SECRET or not DB_URL:
        sys.exit("shop.py: set SHOP_WEBHOOK_SECRET and SHOP_DB_URL")
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9100
    server = ThreadingHTTPServer(("127.0.0.1", port), Shop)
    sys.stderr.write("shop: listening on http://127.0.0.1:%d\n" % port)
    server.serve_forever()


if __name__ == "__main__":
    main()
