#!/usr/bin/env python3
"""End to end: the shop's backend (this script, as a client) asks toolgate to
gate refunds its model proposes, and checks each decision against the shop's
own tables. Run by run.sh with a live `toolgate serve --config` and shop.py.

Each scenario prints one line; any unexpected answer exits 1.
"""

import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psycopg

TOOLGATE = os.environ["TOOLGATE_URL"]
SHOP_KEY = os.environ.get("SHOP_KEY", "tg_refunds_example_shop_backend")
OPERATOR_KEY = os.environ.get("OPERATOR_KEY", "tg_refunds_example_operator")
DB_URL = os.environ["SHOP_DB_URL"]


def call(method, path, key, body=None):
    """One request; returns (status, media type, parsed body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(TOOLGATE + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get_content_type(), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get_content_type(), json.loads(e.read() or b"null")


def propose(order_id, version, amount, actor="agent-ana", customer_id=None, reason="damaged"):
    """The model's turn, sent as the raw text the provider returned."""
    turn = json.dumps({
        "outcome": "action",
        "reply": "I have refunded %d.%02d." % (amount // 100, amount % 100),
        "proposed_action": {
            "tool": "refund_order",
            "arguments": {"amount_minor": amount, "reason": reason},
        },
    })
    if customer_id is None:
        customer_id = customer_of(order_id)
    return call("POST", "/v1/decisions", SHOP_KEY, {
        "provider": "envelope",
        "response": turn,
        "scope": {"customer_id": customer_id, "order_id": order_id, "version_seen": version},
        "actor": actor,
    })


def db_one(sql, *args):
    with psycopg.connect(DB_URL) as db:
        return db.execute(sql, args).fetchone()


def customer_of(order_id):
    return db_one("SELECT customer_id FROM shop.orders WHERE id = %s", order_id)[0]


def refunds(order_id):
    return db_one("SELECT count(*) FROM shop.refunds WHERE order_id = %s", order_id)[0]


def claim_row(key_hex):
    """toolgate's own record of an operation, read from its claim store (the
    SQLite file this run's `serve` writes): status, resolution, attempt,
    lease end, result."""
    with sqlite3.connect("file:%s?mode=ro" % os.environ["TOOLGATE_DB"], uri=True) as db:
        return db.execute(
            "SELECT status, resolution, attempt, lease_expires_at, result"
            " FROM toolgate_claims WHERE operation_key = ?",
            (bytes.fromhex(key_hex),),
        ).fetchone()


def wait_for_log(needle, timeout_s=15):
    """Waits until the shop's log has a line containing `needle`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with open(os.environ["SHOP_LOG"]) as f:
            for line in f:
                if needle in line:
                    return line.strip()
        time.sleep(0.1)
    return None


failures = []


def expect(name, got, want):
    ok = got == want
    print("%-4s %-58s %s" % ("ok" if ok else "FAIL", name, got if ok else "got %r, want %r" % (got, want)))
    if not ok:
        failures.append(name)


def main():
    # 1. A fresh refund: the webhook applies it once.
    s, _, d = propose(1001, 1, 2500)
    expect("executed: refund 25.00 on order 1001", (s, d["outcome"]), (201, "executed"))
    expect("  the shop's table holds one refund", refunds(1001), 1)
    key_1001 = d["operation_key"]

    # 2. The same turn again, ids sent as strings: one order, one operation.
    s, _, d = propose("1001", 1, 2500, customer_id="501")
    expect("replayed: the same refund, ids as strings", (s, d["outcome"]), (200, "replayed"))
    expect("  same operation key", d["operation_key"], key_1001)
    expect("  still one refund", refunds(1001), 1)

    # 3. Another amount on the same order and version: a person decides.
    s, _, d = propose(1001, 1, 3000)
    expect("conflict: 30.00 on the same version", (s, d["outcome"]), (422, "conflict"))
    expect("  still one refund", refunds(1001), 1)

    # 4. The shop changed the order after the model read it.
    with psycopg.connect(DB_URL) as db:
        db.execute("UPDATE shop.orders SET version = version + 1 WHERE id = 1002")
    s, _, d = propose(1002, 1, 1000)
    expect("state_changed: the shop moved order 1002 first", (s, d["outcome"]), (409, "state_changed"))
    expect("  no refund", refunds(1002), 0)

    # 5. Another team's order (Cedar, over the shop's own tables).
    s, _, d = propose(1003, 1, 1000, actor="agent-ana")
    expect("forbidden: agent-ana (eu) on a us order", (s, d["outcome"]), (403, "forbidden"))
    s, _, d = propose(1002, 2, 1000, actor="agent-cal")
    expect("forbidden: a disabled agent", (s, d["outcome"]), (403, "forbidden"))
    expect("  no refund", refunds(1003) + refunds(1002), 0)

    # 6. An id that is not the shop's integer: refused, never a second key.
    s, media, d = propose("01005", 1, 1000, customer_id=501)
    code = d.get("reason") if media == "application/json" else d.get("code")
    expect("invalid_scope: order id \"01005\"", (s, code), (422, "invalid_scope"))

    # 7. Twelve parallel proposals on one order: one refund.
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(lambda _: propose(1005, 1, 1500), range(12)))
    outcomes = sorted(a[2]["outcome"] for a in answers)
    expect("12 parallel proposals: one executed", outcomes.count("executed"), 1)
    expect("  the others replayed or in flight",
           [o for o in outcomes if o not in ("executed", "replayed", "in_flight")], [])
    expect("  one refund in the shop's table", refunds(1005), 1)

    # 8. The webhook dies after committing, before answering (run.sh set
    #    SHOP_CRASH_AFTER_COMMIT_ORDER=1004): the outcome is unknown.
    s, _, d = propose(1004, 1, 4000)
    expect("needs_reconciliation: webhook died mid-request", (s, d["outcome"]), (409, "needs_reconciliation"))
    key_1004 = d["operation_key"]
    expect("  the refund was committed by the shop", refunds(1004), 1)
    restart = os.environ.get("SHOP_RESTART_CMD")
    if restart:
        subprocess.run(restart, shell=True, check=True)
    # Past the lease (4 s), reconciliation asks the shop's status URL.
    lease_end_ms = claim_row(key_1004)[3]
    time.sleep(max(0.0, lease_end_ms / 1000 + 0.2 - time.time()))
    s, _, d = call("POST", "/v1/claims/%s/reconcile" % key_1004, OPERATOR_KEY)
    expect("reconciled through the status URL", (s, d.get("status")), (200, "reconciled_applied"))
    s, _, d = propose(1004, 1, 4000)
    expect("  the retry replays the shop's result", (s, d["outcome"]), (200, "replayed"))
    expect("  and the shop still has one refund", refunds(1004), 1)

    # 9. The late-commit race. The shop's first attempt for order 1006 works
    #    6 s before it writes (run.sh set SHOP_SLOW_ORDER): toolgate's call
    #    gives up at its 2 s bound, the lease (4 s) ends, and the on-call
    #    reconciles while the shop is still working.
    s, _, d = propose(1006, 1, 1200)
    expect("needs_reconciliation: the shop outlasts the call's bound",
           (s, d["outcome"], d.get("reason")), (409, "needs_reconciliation", "executor_failed"))
    key_1006 = d["operation_key"]
    lease_end_ms = claim_row(key_1006)[3]
    time.sleep(max(0.0, lease_end_ms / 1000 + 0.2 - time.time()))
    s, _, d = call("POST", "/v1/claims/%s/reconcile" % key_1006, OPERATOR_KEY)
    expect("reconciled_not_applied: the status URL fenced attempt 1",
           (s, d.get("status")), (200, "reconciled_not_applied"))
    # The shop's slow attempt now tries to write under the fenced key.
    line = wait_for_log("refused %s: " % key_1006)
    expect("  the late commit is refused (fenced)",
           line is not None and line.endswith(": fenced"), True)
    expect("  no refund in the shop's table", refunds(1006), 0)
    row = claim_row(key_1006)
    expect("  toolgate's record agrees: attempt 1 not applied",
           row[:3], ("completed", "reconciled_not_applied", 1))

    # 10. The same proposal again: a new attempt of the same operation,
    #     authorised, read and sent again under its own key; applied once.
    s, _, d = propose(1006, 1, 1200)
    expect("executed: the same proposal runs as attempt 2", (s, d["outcome"]), (201, "executed"))
    expect("  same operation key", d["operation_key"], key_1006)
    shop_row = db_one("SELECT idempotency_key, result FROM shop.refunds WHERE order_id = %s", 1006)
    expect("  one refund, under attempt 2's key", shop_row[0], key_1006 + ".2")
    row = claim_row(key_1006)
    expect("  toolgate's record agrees: attempt 2 executed",
           row[:3], ("completed", "executed", 2))
    expect("  toolgate's result is the shop's", json.loads(row[4]), json.loads(shop_row[1]))
    s, _, d = propose(1006, 1, 1200)
    expect("  a retry replays it", (s, d["outcome"]), (200, "replayed"))
    expect("  still one refund", refunds(1006), 1)

    print("refunds e2e: %d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
