#!/usr/bin/env bash
# The MCP example's own checks, with real processes and both official SDK
# clients, straight against the example upstream (no gate yet: this proves
# the upstream and the clients that the gateway's tests then put toolgate
# between):
#
#   examples/mcp/run.sh
#
# 1. the shop's MCP server over Streamable HTTP, on a database of its own;
# 2. the Python client (protocol 2026-07-28, and 2025-11-25 with --mode
#    legacy) walks an order: read, refund with an operation key, the same
#    refund again (answered from the stored result), a stale version
#    (refused), the status tool (applied / fenced);
# 3. the Node client (SDK 1.32: 2025-11-25) lists and calls;
# 4. twelve parallel refunds with one operation key: one refund written;
# 5. the same walk over stdio;
# 6. the conformance suite against the shop (conformance/run-upstream.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/install.sh"
py="$here/.venv/bin/python"
work=$(mktemp -d /tmp/toolgate-mcp-example.XXXXXX)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "mcp example: $*" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
db="$work/shop.sqlite"
"$py" "$here/shop_mcp.py" --db "$db" serve-http --port "$port" 2>"$work/shop.log" &
pid=$!
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null && break
  sleep 0.1
done
url="http://127.0.0.1:$port/mcp"

echo "== Python client, protocol 2026-07-28"
"$py" "$here/client.py" "$url" walk 1001 | tee "$work/walk.jsonl" | cut -c1-160
grep -q '"protocol_version": "2026-07-28"' "$work/walk.jsonl" || fail "the Python client did not use 2026-07-28"

echo "== Python client, protocol 2025-11-25 (--mode legacy)"
"$py" "$here/client.py" --mode legacy "$url" walk 1002 | tee "$work/legacy.jsonl" | cut -c1-160
grep -q '"protocol_version": "2025-11-25"' "$work/legacy.jsonl" || fail "--mode legacy did not use 2025-11-25"

echo "== Node client (SDK 1.32)"
node "$here/node/client.mjs" "$url" list > "$work/node-list.jsonl"
grep -q '"protocol_version":"2025-11-25"' "$work/node-list.jsonl" || fail "the Node client did not use 2025-11-25"
for t in get_order refund_order refund_status; do
  grep -q "\"name\":\"$t\"" "$work/node-list.jsonl" || fail "the Node client did not list $t"
done
node "$here/node/client.mjs" "$url" call get_order '{"order_id": 1005}' | tee "$work/node-call.jsonl" | cut -c1-160
grep -q '"structuredContent":{"order_id":1005' "$work/node-call.jsonl" || fail "the Node client's get_order"

echo "== twelve parallel refunds with one operation key"
args='{"order_id": 1004, "expected_version": 1, "amount_minor": 700, "reason": "late"}'
for i in $(seq 1 12); do
  "$py" "$here/client.py" "$url" call refund_order "$args" --meta '{"io.toolgate/operation-key": "parallel-1004"}' \
    > "$work/parallel-$i.jsonl" &
done
wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
"$py" - "$db" "$work" <<'EOF'
import glob, json, sqlite3, sys
db, work = sys.argv[1], sys.argv[2]
texts = set()
for f in glob.glob(f"{work}/parallel-*.jsonl"):
    lines = [json.loads(l) for l in open(f)]
    result = lines[-1]["result"]
    assert not result.get("isError"), result
    texts.add(result["content"][0]["text"])
conn = sqlite3.connect(db)
refunds = conn.execute("SELECT count(*) FROM refunds WHERE order_id = 1004").fetchone()[0]
calls = conn.execute("SELECT count(*) FROM tool_calls WHERE operation_key = 'parallel-1004'").fetchone()[0]
print(f"12 calls reached the tool ({calls}), {refunds} refund written, {len(texts)} distinct answer(s)")
assert calls == 12 and refunds == 1 and len(texts) == 1
EOF

echo "== Python client over stdio"
"$py" "$here/client.py" stdio --command "$py $here/shop_mcp.py --db $work/stdio.sqlite serve-stdio" walk 1006 \
  2>"$work/stdio.log" | cut -c1-160

echo "== conformance suite against the shop"
bash "$here/conformance/run-upstream.sh" | tail -n 3
echo "mcp example: all checks passed"
