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
work=$(mktemp -d /tmp/toolgate-mcp-gateway-conformance.XXXXXX)
. "$mcp/gateway/start.sh"
proxy_port=$(free_port)
"$py" "$here/bearer_proxy.py" "http://127.0.0.1:$gate_port" tg_mcp_example_agent_ana "$proxy_port" \
  >"$work/proxy.log" 2>&1 &
pids+=($!)
wait_port "$proxy_port"

cd "$mcp/node"
npx --no-install conformance server --url "http://127.0.0.1:$proxy_port/mcp" \
  --expected-failures "$here/gateway-expected-failures.yaml" -o "$work/results" "$@"
