#!/usr/bin/env bash
# The official conformance suite against toolgate's /mcp: the example
# deployment (examples/mcp/gateway/) in front of the example shop, reached
# through bearer_proxy.py (the suite sends no credentials; the proxy adds
# agent-ana's example key), with this directory's baseline of scenarios
# that do not apply to a gateway.
#
#   examples/mcp/conformance/run-gateway.sh target/debug/toolgate [SUITE OPTIONS]
#
# Options after the binary go to `conformance server` (e.g. --verbose,
# --scenario NAME).
# Needs examples/mcp/install.sh to have run.
set -euo pipefail
toolgate=$(realpath "${1:?usage: run-gateway.sh PATH_TO_TOOLGATE [SUITE OPTIONS]}")
shift
here=$(cd "$(dirname "$0")" && pwd)
mcp=$(dirname "$here")
py="$mcp/.venv/bin/python"
work=$(mktemp -d /tmp/toolgate-mcp-gateway-conformance.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 300); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; exit 1
}

shop_port=$(free_port)
gate_port=$(free_port)
proxy_port=$(free_port)
"$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" serve-http --port "$shop_port" >"$work/shop.log" 2>&1 &
pids+=($!)
wait_port "$shop_port"
cp "$mcp/gateway/policy.toml" "$mcp/gateway/policy.cedar" "$work/"
sed -e "s#127.0.0.1:8080#127.0.0.1:$gate_port#g" \
    -e "s#127.0.0.1:8931#127.0.0.1:$shop_port#" \
    -e "s#sqlite://toolgate-mcp.db#sqlite://$work/toolgate.db#" \
    "$mcp/gateway/toolgate.toml" > "$work/toolgate.toml"
export SHOP_DB_URL="sqlite://$work/shop.sqlite"
"$toolgate" mcp import --upstream shop --config "$work/toolgate.toml" >/dev/null 2>"$work/import.log"
"$toolgate" serve --config "$work/toolgate.toml" >"$work/serve.out" 2>"$work/serve.log" &
pids+=($!)
wait_port "$gate_port"
"$py" "$here/bearer_proxy.py" "http://127.0.0.1:$gate_port" tg_mcp_example_agent_ana "$proxy_port" \
  >"$work/proxy.log" 2>&1 &
pids+=($!)
wait_port "$proxy_port"

cd "$mcp/node"
npx --no-install conformance server --url "http://127.0.0.1:$proxy_port/mcp" \
  --expected-failures "$here/gateway-expected-failures.yaml" -o "$work/results" "$@"
