#!/usr/bin/env bash
# The official conformance suite against the example upstream (the shop's
# MCP server over Streamable HTTP), with this directory's baseline of
# scenarios that do not apply to it.
#
#   examples/mcp/conformance/run-upstream.sh
#
# Needs examples/mcp/install.sh to have run. Starts the shop on a free
# loopback port with a database of its own, and stops it on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mcp=$(dirname "$here")
work=$(mktemp -d /tmp/toolgate-mcp-conformance.XXXXXX)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$mcp/.venv/bin/python" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" serve-http --port "$port" \
  2>"$work/shop.log" &
pid=$!
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null && break
  sleep 0.1
done

cd "$mcp/node"
npx --no-install conformance server --url "http://127.0.0.1:$port/mcp" \
  --expected-failures "$here/upstream-expected-failures.yaml" -o "$work/results"
