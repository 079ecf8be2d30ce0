#!/usr/bin/env python3
"""End to end: the shop's backend (this script, as a client) asks toolgate to
gate refunds its model proposes, and checks each decision against the shop's
own tables. Run by run.sh with a live `toolgate serve --config` and shop.py.

Each scenario prints one line; any unexpected answer exits 1.
"""

import json
import os
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
    # Past the lease (2 s), reconciliation asks the shop's status URL.
    time.sleep(2.5)
    s, _, d = call("POST", "/v1/claims/%s/reconcile" % key_1004, OPERATOR_KEY)
    expect("reconciled through the status URL", (s, d.get("status")), (200, "reconciled_applied"))
    s, _, d = propose(1004, 1, 4000)
    expect("  the retry replays the shop's result", (s, d["outcome"]), (200, "replayed"))
    expect("  and the shop still has one refund", refunds(1004), 1)

    print("refunds e2e: %d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
