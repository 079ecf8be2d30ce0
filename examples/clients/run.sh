#!/usr/bin/env bash
# Runs the example clients (Python, Node, PHP) against a live
# `toolgate serve --demo`, one fresh server per client.
#
# Usage: examples/clients/run.sh PATH/TO/toolgate
#
# Each client uses the client-executed demo key (agent-php) on ticket T-300:
# permitted -> local write -> completion -> replayed, then a 422, a 409 and a
# 403 decision and a problem+json request error. The operation key is the
# same for every client (customer, ticket, version), so a second client on
# the same server would be answered `replayed` at once: each client gets its
# own server and database instead. Exits non-zero if a server does not start
# or stop cleanly or if any client fails; the server is always stopped.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH/TO/toolgate" >&2
  exit 2
fi
bin="$(cd "$(dirname "$1")" 2>/dev/null && pwd)/$(basename "$1")"
[ -x "$bin" ] || { echo "$1: not an executable" >&2; exit 2; }
cd "$(dirname "$0")/../.."

work="$(mktemp -d)"
server=""
stop_server() {
  [ -n "$server" ] || return 0
  local pid="$server" status=0
  server=""
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || status=$?
  return "$status"
}
cleanup() {
  stop_server || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a demo server on a free loopback port with its own database, and
# sets url and key (the agent-php key) from what it prints.
start_server() {
  local name="$1"
  RUST_LOG=warn "$bin" serve --demo --listen 127.0.0.1:0 --db "sqlite://$work/$name.sqlite" \
    >"$work/$name.out" 2>"$work/$name.log" &
  server=$!
  for _ in $(seq 1 600); do
    grep -qs '^listening on ' "$work/$name.out" && break
    if ! kill -0 "$server" 2>/dev/null; then
      server=""
      cat "$work/$name.out" "$work/$name.log" >&2
      echo "toolgate serve exited before listening" >&2
      return 1
    fi
    sleep 0.1
  done
  url="$(sed -n 's/^listening on //p' "$work/$name.out")"
  key="$(awk '$1 == "demo" && $2 == "key" && $3 == "agent-php" {print $4}' "$work/$name.out")"
  if [ -z "$url" ] || [ -z "$key" ]; then
    cat "$work/$name.out" "$work/$name.log" >&2
    echo "no address or agent-php key in the demo's output" >&2
    return 1
  fi
}

clients=(
  "python|python3|examples/clients/python/toolgate_client.py"
  "node|node|examples/clients/node/toolgate_client.mjs"
  "php|php|examples/clients/php/toolgate_client.php"
)
passed=0
failed=0
for entry in "${clients[@]}"; do
  IFS='|' read -r name interpreter program <<<"$entry"
  printf '\n-- %s client (%s)\n' "$name" "$program"
  if ! command -v "$interpreter" >/dev/null; then
    echo "$interpreter is not installed" >&2
    failed=$((failed + 1))
    continue
  fi
  start_server "$name"
  ok=1
  TOOLGATE_URL="$url" TOOLGATE_KEY="$key" "$interpreter" "$program" || ok=0
  # SIGTERM is a graceful stop: exit status 0, no claim left half-written.
  if ! stop_server; then
    echo "toolgate serve did not stop cleanly" >&2
    ok=0
  fi
  if [ "$ok" = 1 ]; then
    passed=$((passed + 1))
  else
    echo "-- server log ($name):" >&2
    tail -n 20 "$work/$name.log" >&2
    failed=$((failed + 1))
  fi
done

echo
echo "clients: $passed passed, $failed failed"
[ "$failed" = 0 ]
