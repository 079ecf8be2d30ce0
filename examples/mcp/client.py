#!/usr/bin/env python3
"""An MCP client on the official Python SDK (`mcp` 2.x), for any MCP URL.

It speaks to toolgate's `/mcp` or straight to an MCP server: the same calls, so
a run against each shows what the gate adds. The caller's API key goes in an
`Authorization: Bearer` header; the SDK takes headers only through an httpx2
client, so the script builds one.

  client.py URL [--token T] [--mode auto|legacy|2026-07-28] [--url-elicitation] list
  client.py URL ... call TOOL '{"order_id": 1001}' [--meta '{"k": "v"}']
  client.py URL ... resources | templates | read URI | prompts | prompt NAME '{"arg": "v"}'
  client.py URL ... walk ORDER_ID            read, refund, repeat, reconcile
  client.py stdio --command 'python3 shop_mcp.py --db x serve-stdio' list   (a stdio server)

`--token` defaults to $MCP_TOKEN. `--mode auto` (the SDK's default) probes
`server/discover` and uses protocol 2026-07-28 where the server offers it,
else the 2025-11-25 `initialize` handshake; `legacy` forces the handshake.
`list` asks the server every time (the SDK caches tools/list unless told
not to). Every answer is printed as one JSON line: the protocol version, and
the result as the SDK received it (`isError`, `content`, `structuredContent`,
`_meta`). A JSON-RPC error prints `{"error": {"code": ..., "message": ...}}`
(and its `data`, if any) and the exit status is 1. `--url-elicitation`
declares the client capability `elicitation: {form: {}, url: {}}` (the SDK
declares it for a client with an elicitation callback): a server may then
answer with URLElicitationRequiredError (-32042) naming a page to open, and
the callback declines any elicitation/create, since this script has no user.
"""

import argparse
import asyncio
import json
import os
import shlex
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult

OPERATION_KEY_META = "io.toolgate/operation-key"


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def out(doc):
    print(json.dumps(doc, sort_keys=True), flush=True)


async def decline(context, params):
    return ElicitResult(action="decline")


def connect(url, token, mode, command=None, url_elicitation=False):
    extra = {"elicitation_callback": decline} if url_elicitation else {}
    if url == "stdio":
        argv = shlex.split(command or "")
        if not argv:
            raise SystemExit("stdio needs --command")
        return Client(StdioServerParameters(command=argv[0], args=argv[1:]), mode=mode, **extra), None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    return Client(streamable_http_client(url, http_client=http), mode=mode, **extra), http


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def walk(client, order_id):
    """Against the shop directly: read, refund with a key, repeat (deduplicated), ask its status."""
    order = await client.call_tool("get_order", {"order_id": order_id})
    out({"step": "get_order", "result": dump(order)})
    version = order.structured_content["version"]
    args = {"order_id": order_id, "expected_version": version, "amount_minor": 500, "reason": "damaged"}
    key = f"walk-{order_id}-{version}"
    first = await client.call_tool("refund_order", args, meta={OPERATION_KEY_META: key})
    out({"step": "refund_order", "result": dump(first)})
    again = await client.call_tool("refund_order", args, meta={OPERATION_KEY_META: key})
    out({"step": "refund_order again, same key", "result": dump(again)})
    if first.is_error or again.is_error or text_of(first) != text_of(again):
        raise SystemExit("a repeated delivery with the same key must answer the stored result")
    stale = await client.call_tool("refund_order", args)
    out({"step": "refund_order without a key, stale version", "result": dump(stale)})
    if not stale.is_error:
        raise SystemExit("a refund at a stale version must fail its precondition")
    status = await client.call_tool("refund_status", {"operation_key": key})
    out({"step": "refund_status", "result": dump(status)})
    if json.loads(text_of(status)).get("applied") is not True:
        raise SystemExit("refund_status must find the applied refund")
    unknown = await client.call_tool("refund_status", {"operation_key": key + "-never"})
    out({"step": "refund_status of a key never sent (fences it)", "result": dump(unknown)})
    late = await client.call_tool("refund_order", {**args, "expected_version": version + 1},
                                  meta={OPERATION_KEY_META: key + "-never"})
    out({"step": "refund_order with the fenced key", "result": dump(late)})
    if not late.is_error:
        raise SystemExit("a write of a fenced key must fail")


def first_leaf(group):
    """The first exception inside a (nested) exception group."""
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


async def run(args):
    token = args.token if args.token is not None else os.environ.get("MCP_TOKEN", "")
    client, http = connect(args.url, token, args.mode, args.server_command, args.url_elicitation)
    failure = None
    try:
        async with client:
            out({"protocol_version": client.session.protocol_version})
            if args.command == "list":
                listed = await client.list_tools(cache_mode="refresh")
                out({"tools": [dump(t) for t in listed.tools]})
            elif args.command == "resources":
                listed = await client.list_resources(cache_mode="refresh")
                out({"resources": [dump(r) for r in listed.resources]})
            elif args.command == "templates":
                listed = await client.list_resource_templates(cache_mode="refresh")
                out({"resourceTemplates": [dump(r) for r in listed.resource_templates]})
            elif args.command == "read":
                out({"result": dump(await client.read_resource(args.uri, cache_mode="refresh"))})
            elif args.command == "prompts":
                listed = await client.list_prompts(cache_mode="refresh")
                out({"prompts": [dump(p) for p in listed.prompts]})
            elif args.command == "prompt":
                arguments = json.loads(args.arguments) if args.arguments else None
                out({"result": dump(await client.get_prompt(args.name, arguments))})
            elif args.command == "call":
                arguments = json.loads(args.arguments)
                meta = json.loads(args.meta) if args.meta else None
                result = await client.call_tool(args.tool, arguments, meta=meta)
                out({"result": dump(result)})
            else:
                await walk(client, args.order_id)
    # The SDK raises a JSON-RPC error from inside its task group, wrapped in
    # an exception group.
    except* MCPError as group:
        failure = first_leaf(group)
    finally:
        if http is not None:
            await http.aclose()
    if failure is not None:
        error = {"code": failure.error.code, "message": failure.error.message}
        if failure.error.data is not None:
            error["data"] = failure.error.data
        out({"error": error})
        return 1
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8080/mcp, or `stdio`")
    p.add_argument("--command", dest="server_command", help="with `stdio`: the server's command line")
    p.add_argument("--token", help="bearer token (default: $MCP_TOKEN)")
    p.add_argument("--mode", default="auto", help="auto (default), legacy, or a protocol version")
    p.add_argument("--url-elicitation", action="store_true", help="declare URL-mode elicitation")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="tools/list, never from the cache")
    call = sub.add_parser("call", help="tools/call")
    call.add_argument("tool")
    call.add_argument("arguments", help="the arguments as a JSON object")
    call.add_argument("--meta", help="the request's _meta as a JSON object")
    sub.add_parser("resources", help="resources/list, never from the cache")
    sub.add_parser("templates", help="resources/templates/list")
    read = sub.add_parser("read", help="resources/read")
    read.add_argument("uri")
    sub.add_parser("prompts", help="prompts/list")
    prompt = sub.add_parser("prompt", help="prompts/get")
    prompt.add_argument("name")
    prompt.add_argument("arguments", nargs="?", help="the arguments as a JSON object of strings")
    w = sub.add_parser("walk", help="read, refund, repeat and reconcile one order (an upstream's own checks)")
    w.add_argument("order_id", type=int)
    args = p.parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
