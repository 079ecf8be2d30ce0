#!/usr/bin/env bash
# Runs every ```sh block of docs/quickstart.md, in order, as one script in
# an empty directory: what a newcomer types, checked by CI.
#
#   scripts/quickstart.sh [path/to/toolgate]
#
# The blocks run as written, with two changes: the ports 8080 and 9100 are
# replaced by free ones (another server may hold them), and `toolgate` is
# the binary given. APP_DB_URL (default: the tests' PostgreSQL database)
# names the database whose `subscriptions` table the quickstart creates.
# Every process the blocks start is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
toolgate=$(realpath "${1:-$root/target/debug/toolgate}")
export APP_DB_URL=${APP_DB_URL:-${TOOLGATE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
gate_port=$(free_port)
receiver_port=$(free_port)

work=$(mktemp -d /tmp/toolgate-quickstart.XXXXXX)
mkdir -p "$work/bin"
ln -s "$toolgate" "$work/bin/toolgate"

# The blocks, in order; a block is ```sh … ``` at the start of a line.
awk '/^```sh$/ {on=1; next} /^```$/ {on=0; print ""; next} on {print}' \
  "$root/docs/quickstart.md" \
  | sed -e "s/127\.0\.0\.1:8080/127.0.0.1:$gate_port/g" \
        -e "s/127\.0\.0\.1:9100/127.0.0.1:$receiver_port/g" \
        -e "s/--receiver-port 9100/--receiver-port $receiver_port/g" \
  > "$work/quickstart-blocks.sh"
blocks=$(grep -c '^```sh$' "$root/docs/quickstart.md")
echo "quickstart: $blocks blocks from docs/quickstart.md, run in $work"

cat > "$work/run.sh" <<'EOF'
# As a newcomer's shell runs them: stop at the first failing command, but
# a pipeline is judged by its last command (no pipefail), as the blocks'
# `… | grep` checks expect.
set -eu -o xtrace
# Background jobs the blocks start are stopped however the script ends.
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT
source ./quickstart-blocks.sh
EOF

status=0
(cd "$work" && PATH="$work/bin:$PATH" bash run.sh) > "$work/output.log" 2>&1 || status=$?
if ((status != 0)); then
  tail -n 60 "$work/output.log" >&2
  for f in receiver.log toolgate.log; do
    [[ -f "$work/$f" ]] && { echo "--- $f (tail)" >&2; tail -n 30 "$work/$f" >&2; }
  done
  echo "quickstart: 0 passed, 1 failed (a block exited $status)"
  exit 1
fi
rm -rf "$work"
echo "quickstart: every block ran"
echo "1 passed, 0 failed"
