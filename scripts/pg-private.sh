#!/usr/bin/env bash
# A private PostgreSQL instance for fault tests that restart the server
# (crates/toolgate-cli/tests/faults_pg_restart.rs): its own data directory
# and port, so restarting it never touches the machine's shared PostgreSQL
# on 5432 that other tests use at the same time.
#
#   scripts/pg-private.sh start   DIR PORT   initdb DIR (if empty), start on 127.0.0.1:PORT
#   scripts/pg-private.sh restart DIR PORT   pg_ctl restart -m immediate (a crash and recovery)
#   scripts/pg-private.sh stop    DIR PORT   pg_ctl stop -m immediate
#   scripts/pg-private.sh check              exit 0 when the binaries are here, else say why
#
# Trust authentication for the `postgres` user on loopback only. PostgreSQL
# refuses to run as root: as root the binaries run as the `postgres` user,
# and DIR is handed to it.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
port=${3:-}

bindir=""
for d in /usr/lib/postgresql/*/bin; do
  if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then bindir=$d; fi
done
if [[ -z "$bindir" ]] && command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
  bindir=$(dirname "$(command -v initdb)")
fi

as_owner() {
  if [[ $(id -u) == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

missing() {
  if [[ -z "$bindir" ]]; then
    echo "no initdb/pg_ctl under /usr/lib/postgresql/*/bin or on PATH"
  elif [[ $(id -u) == 0 ]] && ! id postgres >/dev/null 2>&1; then
    echo "running as root and there is no postgres user to run the server as"
  elif [[ $(id -u) == 0 ]] && ! command -v runuser >/dev/null; then
    echo "running as root and runuser is missing"
  fi
}

case "$cmd" in
  check)
    why=$(missing)
    if [[ -n "$why" ]]; then echo "$why" >&2; exit 1; fi
    echo "$bindir"
    ;;
  start)
    [[ -n "$dir" && -n "$port" ]] || { echo "usage: $0 start DIR PORT" >&2; exit 2; }
    why=$(missing)
    if [[ -n "$why" ]]; then echo "$why" >&2; exit 1; fi
    mkdir -p "$dir"
    if [[ $(id -u) == 0 ]]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    if [[ ! -f "$dir/data/PG_VERSION" ]]; then
      as_owner "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust \
        --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    # The socket goes into DIR, not /var/run/postgresql, which the shared
    # server owns.
    as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null ||
      { tail -n 30 "$dir/server.log" >&2; exit 1; }
    ;;
  restart)
    [[ -n "$dir" && -n "$port" ]] || { echo "usage: $0 restart DIR PORT" >&2; exit 2; }
    # -m immediate: no checkpoint, every backend killed, crash recovery at
    # start; what was committed must come back from the WAL.
    as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -m immediate \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1" restart >/dev/null ||
      { tail -n 30 "$dir/server.log" >&2; exit 1; }
    ;;
  stop)
    [[ -n "$dir" ]] || { echo "usage: $0 stop DIR [PORT]" >&2; exit 2; }
    if [[ -f "$dir/data/postmaster.pid" ]]; then
      as_owner "$bindir/pg_ctl" -D "$dir/data" -w -t 60 -m immediate stop >/dev/null || true
    fi
    ;;
  *)
    echo "usage: $0 start|restart|stop DIR PORT, or $0 check" >&2
    exit 2
    ;;
esac
