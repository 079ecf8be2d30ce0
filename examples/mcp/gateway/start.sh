# Sourced by run.sh and ../conformance/run-gateway.sh, which set $toolgate
# (the binary), $mcp (examples/mcp) and $work (a scratch directory): starts
# the example shop and a gateway in front of it (`mcp import`, then `serve
# --config`) on free ports, sets $py, $shop_port and $gate_port, and kills
# every process in $pids and removes $work on exit.
py="$mcp/.venv/bin/python"
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
