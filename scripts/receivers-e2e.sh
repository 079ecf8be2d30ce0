#!/usr/bin/env bash
# Every receiver `toolgate init` writes (Python, PHP, Node), end to end on
# PostgreSQL and on MariaDB, with real processes: init from flags in an
# empty directory, the one-line schema edit of docs/quickstart.md,
# `config check` (which must refuse a DATE column in an entity query), the
# receiver, `toolgate serve`, and scripts/receivers_e2e.py as the
# application's backend: executed, replayed, conflict, state_changed,
# forbidden, bad signatures refused, fencing, and a receiver killed after
# committing, reconciled through its status URL.
#
#   scripts/receivers-e2e.sh [path/to/toolgate] [python|php|node ...]
#
# Databases: RECEIVERS_PG_URL and RECEIVERS_MYSQL_URL (default: the tests'
# TOOLGATE_TEST_POSTGRES_URL and TOOLGATE_TEST_MYSQL_URL). Each run drops
# and creates the tables `subscriptions` and `toolgate_receipts` there.
# Needs php-cli with pdo_pgsql and pdo_mysql; the Python (psycopg, PyMySQL)
# and Node (pg, mysql2) drivers are installed under target/receiver-deps,
# never globally. Everything started is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
toolgate=$(realpath "${1:-$root/target/debug/toolgate}")
shift || true
langs=("$@")
((${#langs[@]})) || langs=(python php node)
pg_url=${RECEIVERS_PG_URL:-${TOOLGATE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}}
my_url=${RECEIVERS_MYSQL_URL:-${TOOLGATE_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}}

deps="$root/target/receiver-deps"
if ! PYTHONPATH="$deps/python" python3 -c 'import psycopg, pymysql' 2>/dev/null; then
  echo "installing psycopg and PyMySQL into $deps/python"
  python3 -m pip install --quiet --target "$deps/python" 'psycopg[binary]>=3.1,<4' 'pymysql>=1.1,<2'
fi
if [[ ! -d "$deps/node/node_modules/pg" || ! -d "$deps/node/node_modules/mysql2" ]]; then
  echo "installing pg and mysql2 into $deps/node"
  mkdir -p "$deps/node"
  npm install --silent --no-audit --no-fund --prefix "$deps/node" 'pg@^8' 'mysql2@^3'
fi
export PYTHONPATH="$deps/python" NODE_PATH="$deps/node/node_modules"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_sql() { # backend url sql
  if [[ $1 == postgres ]]; then
    psql -q -v ON_ERROR_STOP=1 "$2" -c "$3" >/dev/null
  else
    local rest=${2#mysql://} userhost user hostport db
    userhost=${rest%%/*}; db=${rest#*/}; db=${db%%\?*}
    user=${userhost%@*}; hostport=${userhost#*@}
    mariadb --protocol=tcp -h "${hostport%:*}" -P "${hostport##*:}" -u "${user%%:*}" \
      $([[ $user == *:* ]] && echo "-p${user#*:}") "$db" -e "$3"
  fi
}

schema() { # backend url
  local bool=BOOLEAN
  run_sql "$1" "$2" "DROP TABLE IF EXISTS toolgate_receipts"
  run_sql "$1" "$2" "DROP TABLE IF EXISTS subscriptions"
  run_sql "$1" "$2" "CREATE TABLE subscriptions (id INTEGER PRIMARY KEY, team VARCHAR(32) NOT NULL,
    active $bool NOT NULL, ends_on DATE, version INTEGER NOT NULL DEFAULT 1)"
  run_sql "$1" "$2" "INSERT INTO subscriptions (id, team, active, ends_on) VALUES
    (1, 'eu', TRUE, '2027-01-31'), (2, 'eu', TRUE, NULL), (3, 'eu', TRUE, NULL), (4, 'us', TRUE, NULL)"
}

work_root=$(mktemp -d /tmp/toolgate-receivers.XXXXXX)
trap 'rm -rf "$work_root"' EXIT
failed=0
for backend in postgres mysql; do
  url=$pg_url
  [[ $backend == mysql ]] && url=$my_url
  # PostgreSQL reads the version with a `sql` source, MariaDB through the
  # receiver's signed GET: both state sources in each language.
  state=sql
  [[ $backend == mysql ]] && state=http
  for lang in "${langs[@]}"; do
    echo "== $lang receiver on $backend (state: $state)"
    schema "$backend" "$url"
    dir="$work_root/$lang-$backend"
    rport=$(free_port); gport=$(free_port)
    export APP_DB_URL=$url RECEIVER_PORT=$rport
    "$toolgate" init --tool extend_subscription --capability subscription:extend \
      --scope subscription_id:integer --table subscriptions --receiver "$lang" \
      --state "$state" --receiver-port "$rport" --listen "127.0.0.1:$gport" --dir "$dir" \
      > "$dir.init.log" || { cat "$dir.init.log"; failed=1; continue; }
    # The quickstart's one-line schema edit: what the model may choose.
    sed -i 's|"note": {"type": "string", "maxLength": 200}|"days": {"type": "integer", "minimum": 1, "maximum": 90}|' \
      "$dir/policy.toml"
    grep -q '"days"' "$dir/policy.toml"
    # This run's short lease and webhook wait, so that reconciliation is
    # reached in seconds.
    sed -i -e 's/^lease_ms = .*/lease_ms = 10000/' -e 's/timeout_ms = 5000/timeout_ms = 2000/' \
      "$dir/toolgate.toml"
    "$toolgate" config check "$dir/toolgate.toml" >/dev/null
    # An entity query reading the DATE column is refused by config check,
    # naming the tool, the entity type and the column.
    sed 's/SELECT id, team FROM subscriptions/SELECT id, team, ends_on FROM subscriptions/' \
      "$dir/toolgate.toml" > "$dir/date.toml"
    if "$toolgate" config check "$dir/date.toml" > /dev/null 2> "$dir/date.err"; then
      echo "FAIL config check accepted a DATE column"; failed=1
    elif grep -q 'tools\[extend_subscription\].entities\[Subscription\].query: entity type `Subscription`: column `ends_on` has SQL type DATE' "$dir/date.err"; then
      echo "ok   config check refuses the DATE column: $(cat "$dir/date.err")"
    else
      echo "FAIL config check's message: $(cat "$dir/date.err")"; failed=1
    fi
    case $lang in
      python) cmd=(python3 receiver.py "$rport") ;;
      php) cmd=(env PHP_CLI_SERVER_WORKERS=4 php -S "127.0.0.1:$rport" receiver.php) ;;
      node) cmd=(node receiver.js "$rport") ;;
    esac
    RECEIVER_LANG=$lang TOOLGATE_BIN="$toolgate" python3 "$root/scripts/receivers_e2e.py" "$dir" "$backend" "${cmd[@]}" \
      || failed=1
  done
done
exit $failed
