#!/usr/bin/env bash
# The refunds example end to end, with real processes: the shop's schema in
# PostgreSQL, the shop's webhook (shop.py), `toolgate serve --config` on
# this directory's toolgate.toml, and e2e.py as the shop's backend.
#
#   examples/refunds/run.sh [path/to/toolgate]
#
# Needs PostgreSQL (SHOP_DB_URL, default the local `test` database; the
# example owns the schema `shop` there and drops it first), python3 with
# psycopg (installed with pip when missing), and free loopback ports (picked
# here). Everything started is stopped on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
toolgate=${1:-toolgate}
toolgate=$(realpath "$(command -v "$toolgate" || echo "$toolgate")")
export SHOP_DB_URL=${SHOP_DB_URL:-postgres://postgres@127.0.0.1:5432/test}
export SHOP_WEBHOOK_SECRET=${SHOP_WEBHOOK_SECRET:-refunds-example-secret-$RANDOM$RANDOM}

python3 -c 'import psycopg' 2>/dev/null || python3 -m pip install --quiet 'psycopg[binary]>=3.1'

work=$(mktemp -d /tmp/toolgate-refunds.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [[ -f "$work/shop.pid" ]] && kill "$(cat "$work/shop.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
shop_port=$(free_port)
gate_port=$(free_port)

echo "refunds: the shop's schema in $SHOP_DB_URL (schema shop)"
psql -q -v ON_ERROR_STOP=1 "$SHOP_DB_URL" -f "$here/schema.sql"

# The deployment as shipped, with this run's ports and a claim store of its own.
cp "$here/policy.toml" "$here/policy.cedar" "$work/"
sed -e "s|127.0.0.1:9100|127.0.0.1:$shop_port|g" \
    -e "s|^listen = .*|listen = \"127.0.0.1:$gate_port\"|" \
    "$here/toolgate.toml" > "$work/toolgate.toml"

# Order 1006's first attempt works longer than its lease (e2e.py, 9).
export SHOP_SLOW_ORDER=1006 SHOP_SLOW_MS=6000
start_shop() {
  # The first shop dies after committing order 1004's refund (e2e.py, 8).
  SHOP_CRASH_AFTER_COMMIT_ORDER=${1:-} python3 "$here/shop.py" "$shop_port" \
    2>>"$work/shop.log" &
  pids+=($!)
  echo $! > "$work/shop.pid"
  for _ in $(seq 1 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$shop_port),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "shop.py did not start" >&2; cat "$work/shop.log" >&2; return 1
}
start_shop 1004

"$toolgate" config check "$work/toolgate.toml"
(cd "$work" && exec "$toolgate" serve --config "$work/toolgate.toml") 2>"$work/toolgate.log" &
pids+=($!)
for _ in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$gate_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$gate_port/readyz" >/dev/null || { cat "$work/toolgate.log" >&2; exit 1; }

# e2e.py restarts the shop (without the crash) after scenario 8.
export SHOP_RESTART_CMD="bash -c 'while kill -0 \$(cat $work/shop.pid) 2>/dev/null; do sleep 0.1; done; SHOP_CRASH_AFTER_COMMIT_ORDER= nohup python3 $here/shop.py $shop_port >>$work/shop.log 2>&1 & echo \$! > $work/shop.pid; sleep 1'"
if ! TOOLGATE_URL="http://127.0.0.1:$gate_port" TOOLGATE_DB="$work/toolgate-refunds.db" \
     SHOP_LOG="$work/shop.log" python3 "$here/e2e.py"; then
  echo "--- toolgate.log (tail)" >&2; tail -n 40 "$work/toolgate.log" >&2
  echo "--- shop.log (tail)" >&2; tail -n 40 "$work/shop.log" >&2
  exit 1
fi
# The restarted shop is not a child of this shell: stop it by its pid file.
kill "$(cat "$work/shop.pid")" 2>/dev/null || true
