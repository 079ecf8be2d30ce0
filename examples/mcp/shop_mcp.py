#!/usr/bin/env python3
"""An online shop's MCP server: the upstream the MCP example puts toolgate in front of.

Written with the official Python SDK (`mcp` 2.x, `MCPServer`), Python's standard
library for its database (SQLite), and nothing of toolgate. It is what a team
already runs before it adds a gate. Tools:

  get_order(order_id)                         -> the order, with its `version`
  refund_order(order_id, expected_version,
               amount_minor, reason)          -> refunds part of an order (a write)
  refund_status(operation_key)                -> was that refund applied? (reconciliation)

The write follows the optimistic-concurrency convention the gateway relies on:
the read tool returns the order's `version`, the write takes it back as
`expected_version` and applies it as a precondition
(`UPDATE ... WHERE id = ? AND version = ?`) in the same transaction as the
refund. A stale version is a tool error naming the current version.

Deduplication: when a call carries `_meta` `io.toolgate/operation-key` (toolgate
puts it there), the key is unique in `operation_keys`: a second delivery of the
same refund answers with the stored result and writes nothing. `refund_status`
answers "applied" with the stored result, or else FENCES the key (inserts a
fence row for it) and answers "not applied": a late write of that key then
finds the fence and fails, so "not applied" stays true forever.

Every call of `refund_order` that reaches the tool, whatever its outcome, is
counted in `tool_calls` in its own transaction, so a test can assert "one
upstream execution" by reading the database.

Usage:
  shop_mcp.py --db shop.sqlite init                     create and seed the database
  shop_mcp.py --db shop.sqlite serve-http --port 8931   Streamable HTTP at /mcp
  shop_mcp.py --db shop.sqlite serve-stdio              stdio
  shop_mcp.py --db shop.sqlite count                    print refund_order calls and refunds

`--hold-ms N --hold-order ID` (tests only) makes a refund of order ID wait N ms
inside its transaction before committing, so a test can kill a caller mid-call.
`--max-refund N` (tests only; default 20000) changes refund_order's published
schema, as an upstream's new release would; `--max-refund-file PATH` reads N
from PATH again on every tools/list, so the schema changes while it serves.
`serve-http --log-bearer FILE` (tests only) appends one JSON line per tools/call
to FILE saying what its Authorization header carried: {"tool": …, "bearer":
null} without one, else the bearer's sha256 and, for a JWT, its claims read
UNVERIFIED (sub, aud, act, scope, client_id, exp): what a test needs to see
which token reached the shop. The shop authorises nothing with it.
"""

import argparse
import base64
import hashlib
import json
import sqlite3
import sys
import time
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from typing_extensions import TypedDict

OPERATION_KEY_META = "io.toolgate/operation-key"

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id             INTEGER PRIMARY KEY,
    customer_id    INTEGER NOT NULL,
    team           TEXT    NOT NULL,
    total_minor    INTEGER NOT NULL,
    refunded_minor INTEGER NOT NULL DEFAULT 0,
    -- Moved by every change to the order: the precondition of each refund.
    version        INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS refunds (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id      INTEGER NOT NULL REFERENCES orders (id),
    amount_minor  INTEGER NOT NULL,
    reason        TEXT    NOT NULL,
    operation_key TEXT,
    created_at    REAL    NOT NULL
);
-- One row per operation key toolgate sent: the refund's result (kind
-- 'write'), or the fence `refund_status` left (kind 'fence').
CREATE TABLE IF NOT EXISTS operation_keys (
    key    TEXT PRIMARY KEY,
    kind   TEXT NOT NULL CHECK (kind IN ('write', 'fence')),
    result TEXT
);
-- The shop's support agents and their team: toolgate's Cedar policy reads
-- them live (an agent refunds only orders of its own team).
CREATE TABLE IF NOT EXISTS agents (
    id   TEXT PRIMARY KEY,
    team TEXT NOT NULL
);
-- Every call of refund_order that reached the tool, whatever it answered.
CREATE TABLE IF NOT EXISTS tool_calls (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tool          TEXT NOT NULL,
    operation_key TEXT,
    at            REAL NOT NULL
);
"""

SEED = [
    # id, customer, team, total
    (1001, 501, "eu", 12000),
    (1002, 501, "eu", 4000),
    (1003, 502, "us", 9000),
    (1004, 502, "eu", 15000),
    (1005, 501, "eu", 8000),
    (1006, 502, "eu", 3000),
]

AGENTS = [("agent-ana", "eu"), ("agent-bo", "us")]


def connect(path):
    # Autocommit mode: every transaction below is an explicit BEGIN IMMEDIATE,
    # which takes SQLite's write lock up front, so two refunds of one order
    # serialise instead of both reading the old version.
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def init(path):
    conn = connect(path)
    conn.executescript(SCHEMA)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT OR IGNORE INTO orders (id, customer_id, team, total_minor) VALUES (?, ?, ?, ?)",
        SEED,
    )
    conn.executemany("INSERT OR IGNORE INTO agents (id, team) VALUES (?, ?)", AGENTS)
    conn.execute("COMMIT")
    conn.close()


class Order(TypedDict):
    order_id: int
    customer_id: int
    team: str
    total_minor: int
    refunded_minor: int
    version: int


def read_max_refund(path, default):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return default


def build(db_path, hold_order=None, hold_ms=0, max_refund=20000, max_refund_file=None):
    server = MCPServer("shop")

    @server.tool()
    def get_order(order_id: Annotated[int, Field(ge=1, description="The order's id.")]) -> Order:
        """Read one order: its totals and its current version (pass the version to refund_order)."""
        conn = connect(db_path)
        try:
            row = conn.execute(
                "SELECT id, customer_id, team, total_minor, refunded_minor, version FROM orders WHERE id = ?",
                (order_id,),
            ).fetchone()
        finally:
            conn.close()
        if row is None:
            raise ToolError(f"order {order_id} does not exist")
        return Order(
            order_id=row[0],
            customer_id=row[1],
            team=row[2],
            total_minor=row[3],
            refunded_minor=row[4],
            version=row[5],
        )

    def register_refund(max_refund):
        def refund_order(
            order_id: Annotated[int, Field(ge=1, description="The order to refund.")],
            expected_version: Annotated[int, Field(ge=1, description="The order's version as get_order returned it.")],
            amount_minor: Annotated[int, Field(ge=1, le=max_refund, description="Refund in minor units (cents).")],
            reason: Literal["damaged", "not_delivered", "wrong_item", "late"],
            ctx: Context,
        ) -> str:
            """Refund part or all of an order, in minor currency units, if its version is still expected_version."""
            meta = ctx.request_context.meta or {}
            key = meta.get(OPERATION_KEY_META)
            if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= 96):
                raise ToolError(f"_meta {OPERATION_KEY_META} must be a string of 1 to 96 characters")
            conn = connect(db_path)
            try:
                # Counted first, in a transaction of its own: a call that fails
                # below is still a call that reached the tool.
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO tool_calls (tool, operation_key, at) VALUES ('refund_order', ?, ?)",
                    (key, time.time()),
                )
                conn.execute("COMMIT")
                return refund_once(conn, key, order_id, expected_version, amount_minor, reason, hold_order, hold_ms)
            finally:
                conn.close()

        server.add_tool(refund_order, structured_output=False)

    register_refund(max_refund)
    if max_refund_file is not None:
        # A new release of the shop, without a restart: refund_order's
        # published bound is re-read on every tools/list, and the tool is
        # registered again when it changed.
        published = {"max_refund": max_refund}
        list_tools = server.list_tools

        async def list_tools_now():
            wanted = read_max_refund(max_refund_file, max_refund)
            if wanted != published["max_refund"]:
                server.remove_tool("refund_order")
                register_refund(wanted)
                published["max_refund"] = wanted
            return await list_tools()

        server.list_tools = list_tools_now

    @server.tool(structured_output=False)
    def refund_status(
        operation_key: Annotated[str, Field(min_length=1, max_length=96, description="The io.toolgate/operation-key of the refund.")],
    ) -> str:
        """Reconciliation: was the refund with this operation key applied? A "not applied" answer is final: the key is fenced."""
        conn = connect(db_path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT kind, result FROM operation_keys WHERE key = ?", (operation_key,)).fetchone()
            if row is None:
                conn.execute("INSERT INTO operation_keys (key, kind) VALUES (?, 'fence')", (operation_key,))
                conn.execute("COMMIT")
                return json.dumps({"applied": False})
            conn.execute("COMMIT")
            if row[0] == "write":
                return json.dumps({"applied": True, "result": json.loads(row[1])})
            return json.dumps({"applied": False})
        finally:
            conn.close()

    # Pinned and passed through by the gateway with a capability only:
    # nothing here names an order, so nothing needs per-resource
    # authorisation (an order is read through get_order, which Cedar checks).
    @server.resource("shop://policies/refunds", mime_type="text/plain")
    def refund_policy() -> str:
        """The shop's refund policy."""
        return POLICIES["refunds"]

    @server.resource("shop://policies/{topic}", mime_type="text/plain")
    def policy(topic: str) -> str:
        """One of the shop's policies, by topic (refunds, shipping)."""
        if topic not in POLICIES:
            raise ValueError(f"no policy on {topic!r}")
        return POLICIES[topic]

    @server.prompt()
    def refund_note(order_id: str, tone: str = "plain") -> str:
        """A note to the customer whose order is being refunded."""
        return f"Write a {tone} note telling the customer of order {order_id} that their refund is on its way."

    return server


POLICIES = {
    "refunds": "Refunds go back to the original payment, up to the order's total, within 30 days.",
    "shipping": "Orders ship within two working days.",
}


def refund_once(conn, key, order_id, expected_version, amount_minor, reason, hold_order, hold_ms):
    """One transaction: the key's row, the precondition, the refund, the stored result."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if key is not None:
            row = conn.execute("SELECT kind, result FROM operation_keys WHERE key = ?", (key,)).fetchone()
            if row is not None:
                conn.execute("ROLLBACK")
                if row[0] == "fence":
                    raise ToolError("this operation was reconciled as not applied; it is never applied now")
                # A second delivery of a refund already made: its result, nothing written.
                return row[1]
        updated = conn.execute(
            "UPDATE orders SET refunded_minor = refunded_minor + ?, version = version + 1 "
            "WHERE id = ? AND version = ? AND refunded_minor + ? <= total_minor",
            (amount_minor, order_id, expected_version, amount_minor),
        ).rowcount
        if updated != 1:
            current = conn.execute(
                "SELECT version, total_minor - refunded_minor FROM orders WHERE id = ?", (order_id,)
            ).fetchone()
            conn.execute("ROLLBACK")
            if current is None:
                raise ToolError(f"order {order_id} does not exist")
            if current[0] != expected_version:
                raise ToolError(
                    f"order {order_id} is at version {current[0]}, not {expected_version}: read it again"
                )
            raise ToolError(f"order {order_id} has only {current[1]} left to refund")
        cur = conn.execute(
            "INSERT INTO refunds (order_id, amount_minor, reason, operation_key, created_at) VALUES (?, ?, ?, ?, ?)",
            (order_id, amount_minor, reason, key, time.time()),
        )
        version = conn.execute("SELECT version FROM orders WHERE id = ?", (order_id,)).fetchone()[0]
        result = json.dumps(
            {"refund_id": cur.lastrowid, "order_id": order_id, "amount_minor": amount_minor, "version": version}
        )
        if key is not None:
            conn.execute("INSERT INTO operation_keys (key, kind, result) VALUES (?, 'write', ?)", (key, result))
        if hold_order is not None and order_id == hold_order and hold_ms > 0:
            time.sleep(hold_ms / 1000)
        conn.execute("COMMIT")
        return result
    except ToolError:
        raise
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def jwt_claims(token):
    """A JWT's payload, UNVERIFIED (only to log what arrived), or None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def bearer_of(headers):
    """What an Authorization header carried, as the --log-bearer line says it."""
    value = headers.get("authorization") if headers is not None else None
    if value is None:
        return None
    scheme, _, credential = value.partition(" ")
    credential = credential.strip()
    seen = {"scheme": scheme, "sha256": hashlib.sha256(credential.encode()).hexdigest()}
    claims = jwt_claims(credential) if scheme.lower() == "bearer" else None
    seen["jwt"] = claims is not None
    if claims is not None:
        for name in ("sub", "aud", "act", "scope", "client_id", "iss", "exp"):
            if name in claims:
                seen[name] = claims[name]
    return seen


def log_bearers(server, path):
    """Log each tools/call's bearer to PATH, one JSON line each, before the tool runs."""
    call_tool = server.call_tool

    async def call_tool_logged(name, arguments, context=None):
        headers = context.headers if context is not None else None
        line = json.dumps({"tool": name, "at": time.time(), "bearer": bearer_of(headers)}, sort_keys=True)
        with open(path, "a") as f:
            f.write(line + "\n")
        return await call_tool(name, arguments, context)

    # MCPServer's tools/call handler calls self.call_tool(name, arguments,
    # Context): an attribute of the instance replaces it for this server.
    server.call_tool = call_tool_logged


def count(path):
    conn = connect(path)
    try:
        calls = conn.execute("SELECT count(*) FROM tool_calls WHERE tool = 'refund_order'").fetchone()[0]
        refunds = conn.execute("SELECT count(*) FROM refunds").fetchone()[0]
    finally:
        conn.close()
    print(json.dumps({"refund_order_calls": calls, "refunds": refunds}))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True, help="the SQLite database file")
    p.add_argument("--hold-order", type=int, help="(tests) hold a refund of this order before committing")
    p.add_argument("--hold-ms", type=int, default=0, help="(tests) for this many milliseconds")
    p.add_argument("--max-refund", type=int, default=20000, help="(tests) the schema's largest amount_minor")
    p.add_argument("--max-refund-file", help="(tests) a file holding it, read again on every tools/list")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create and seed the database")
    http = sub.add_parser("serve-http", help="serve Streamable HTTP at /mcp")
    http.add_argument("--host", default="127.0.0.1")
    http.add_argument("--port", type=int, default=8931)
    http.add_argument("--log-bearer", metavar="FILE", help="(tests) log each tools/call's Authorization to FILE")
    sub.add_parser("serve-stdio", help="serve on stdin/stdout")
    sub.add_parser("count", help="print how many refund_order calls and refunds the database holds")
    args = p.parse_args(argv)

    if args.command == "init":
        init(args.db)
    elif args.command == "count":
        count(args.db)
    else:
        init(args.db)
        server = build(args.db, args.hold_order, args.hold_ms, args.max_refund, args.max_refund_file)
        if args.command == "serve-stdio":
            server.run("stdio")
        else:
            if args.log_bearer:
                log_bearers(server, args.log_bearer)
            server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main(sys.argv[1:])
