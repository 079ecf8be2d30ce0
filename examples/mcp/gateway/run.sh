#!/usr/bin/env bash
# toolgate in front of the example shop's MCP server, with real processes:
#
#   examples/mcp/gateway/run.sh target/debug/toolgate
#
# 1. the shop (../shop_mcp.py) over Streamable HTTP, on a database of its own;
# 2. `toolgate mcp import` pins the shop's tools;
# 3. `toolgate serve --config toolgate.toml` serves /mcp beside the sidecar;
# 4. the Python SDK client (protocol 2026-07-28) and the Node SDK client
#    (2025-11-25, with a session) list and call through it: a refund runs
#    once, the repeat replays it, another team's agent is forbidden, a key
#    without the capability sees no tool; the read tool, a pinned resource
#    and a pinned prompt are served through the same door.
# Ends "mcp gateway: N passed, 0 failed".
set -euo pipefail
toolgate=$(realpath "${1:?usage: run.sh PATH_TO_TOOLGATE}")
here=$(cd "$(dirname "$0")" && pwd)
mcp=$(dirname "$here")
bash "$mcp/install.sh" >/dev/null
work=$(mktemp -d /tmp/toolgate-mcp-gateway.XXXXXX)
. "$here/start.sh"
url="http://127.0.0.1:$gate_port/mcp"

passed=0 failed=0
check() {
  local name=$1 pattern=$2 out=$3
  if grep -q -- "$pattern" <<<"$out"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name: expected $pattern in:"; echo "$out" | cut -c1-400
  fi
}
ana=tg_mcp_example_agent_ana
refund='{"order_id": 1001, "expected_version": 1, "amount_minor": 500, "reason": "damaged"}'

out=$("$py" "$mcp/client.py" "$url" --token "$ana" list)
check "agent-ana sees refund_order (2026-07-28)" '"name": "refund_order"' "$out"
out=$("$py" "$mcp/client.py" "$url" --token tg_mcp_example_reader list)
check "a key without refund:issue sees no tool" '"tools": \[\]' "$out"
out=$("$py" "$mcp/client.py" "$url" --token "$ana" call refund_order "$refund")
check "the refund runs" '\\"refund_id\\"' "$out"
out=$("$py" "$mcp/client.py" "$url" --token "$ana" call refund_order "$refund")
check "the repeat replays it" '"io.toolgate/outcome": "replayed"' "$out"
out=$("$py" "$mcp/client.py" "$url" --token tg_mcp_example_agent_bo call refund_order "$refund")
check "another team's agent is forbidden" '"outcome": "forbidden"' "$out"
out=$(node "$mcp/node/client.mjs" "$url" --token "$ana" list)
check "the Node SDK (2025-11-25 session) lists it" 'refund_order' "$out"
out=$("$py" "$mcp/client.py" "$url" --token "$ana" call get_order '{"order_id": 1001}')
check "the read tool get_order is served (Cedar, audited, unclaimed)" '"team": "eu"' "$out"
out=$("$py" "$mcp/client.py" "$url" --token tg_mcp_example_agent_bo call get_order '{"order_id": 1001}')
check "another team's order is not read" '"outcome": "forbidden"' "$out"
out=$("$py" "$mcp/client.py" "$url" --token "$ana" read shop://policies/shipping)
check "a pinned resource template is read through" 'ship within two working days' "$out"
out=$(node "$mcp/node/client.mjs" "$url" --token "$ana" prompt refund_note '{"order_id": "7"}')
check "the Node SDK gets a pinned prompt" 'order 7' "$out"
out=$("$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" count)
check "one refund reached the shop" '"refund_order_calls": 1, "refunds": 1' "$out"

echo "mcp gateway: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
