#!/usr/bin/env bash
# Runs examples/php/client.php against a live `toolgate serve --demo` and
# stops the server with SIGTERM. Exit 0 only if the client saw permitted →
# completed → replayed and the server shut down cleanly.
# Usage: examples/php/run.sh [path/to/toolgate]   (default: target/debug/toolgate)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-target/debug/toolgate}"
out="$(mktemp)"
"$bin" serve --demo --listen 127.0.0.1:0 --log-level warn >"$out" &
server=$!
trap 'kill -TERM $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q '^listening on ' "$out" && break
  kill -0 "$server" 2>/dev/null || { cat "$out"; echo "toolgate serve exited" >&2; exit 1; }
  sleep 0.1
done
url="$(sed -n 's/^listening on //p' "$out")"
key="$(awk '$1 == "demo" && $2 == "key" && $3 == "agent-php" {print $4}' "$out")"
[ -n "$url" ] && [ -n "$key" ] || { cat "$out"; echo "no address or agent-php key" >&2; exit 1; }
TOOLGATE_URL="$url" TOOLGATE_KEY="$key" php examples/php/client.php
kill -TERM "$server"
trap - EXIT
wait "$server"
