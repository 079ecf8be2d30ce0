#!/usr/bin/env bash
# A throwaway three-node MariaDB Galera cluster on loopback, for the store's
# cluster tests (issue 17) and for trying toolgate on Galera by hand.
# `galera-cluster.sh --help` explains every command; docs/deploy.md says what
# an operator must set on a real cluster.
set -euo pipefail

usage() {
  cat <<'EOF'
galera-cluster.sh: a local three-node MariaDB Galera cluster on 127.0.0.1.

Usage:
  galera-cluster.sh start [DIR]              start the cluster (a fresh one when no node runs)
  galera-cluster.sh stop [DIR]               stop every node, each by its own PID
  galera-cluster.sh status [DIR]             each node's port, pid, cluster size and state
  galera-cluster.sh node-kill N [DIR]        kill -9 node N (1, 2 or 3)
  galera-cluster.sh node-pause N SECS [DIR]  SIGSTOP node N, wait SECS, SIGCONT it
  galera-cluster.sh node-start N [DIR]       restart a stopped or killed node N; it rejoins
                                             the running nodes by IST, or SST when IST
                                             cannot serve it
  galera-cluster.sh --help

DIR holds the nodes' data and logs (default: $TOOLGATE_GALERA_DIR, else
/tmp/toolgate-galera). Node N lives in DIR/nodeN/: my.cnf, data/, node.pid,
mariadbd.sock, error.log.

Nodes and ports (loopback only):
  node  SQL (clients)  group communication  IST   SST (rsync)
  1     4306           4567                 4568  4569
  2     4307           4577                 4578  4579
  3     4308           4587                 4588  4589
Set TOOLGATE_GALERA_SQL_PORT (default 4306) and TOOLGATE_GALERA_REPL_PORT
(default 4567) before `start` to move them: node N uses SQL_PORT+N-1 and
REPL_PORT+10(N-1), +1 for IST, +2 for SST. Later commands read the ports
from DIR, so they need not be set again.

Clients: mysql://root@127.0.0.1:4306/test (or :4307, :4308). root has no
password over TCP from 127.0.0.1, as on the single test server, and a
database `test` exists.

start
  Without a running node it (re)creates DIR/node1..3 (refusing a DIR it did
  not create), runs mariadb-install-db for each node, bootstraps node 1 with
  --wsrep-new-cluster, then joins nodes 2 and 3 (state transfer by rsync)
  and waits until every node reports wsrep_cluster_size 3 and Synced.
  With all three running it reports so and exits 0; with some running it
  starts the missing ones as `node-start` does. Each wait is bounded by
  TOOLGATE_GALERA_WAIT seconds (default 120); on failure it prints the
  node's error log tail, stops the nodes it started, and exits 1.
  Installs the Debian packages galera-4 and rsync when missing (as root,
  with apt-get).

stop
  Sends TERM to each node's own PID (read from DIR/nodeN/node.pid and
  checked to be that node's mariadbd), waits up to TOOLGATE_GALERA_WAIT
  seconds, then sends KILL. It never signals any other process: the
  machine's own MariaDB on 3306 keeps running. Exits 0 when nothing runs.

status
  One line per node. Exits 0 when all three are Synced in a cluster of 3,
  1 otherwise.

node-kill N       kill -9 node N, as a crash. The survivors stall for about
                  evs.suspect_timeout (5 s) before they go on without it.
node-pause N S    freezes node N for S seconds (the command blocks for that
                  long; run it in the background to race against it). Its
                  peers evict it after the suspect timeout; when it resumes
                  it rejoins. An interrupted pause still resumes the node.
node-start N      needs another node running in the primary component.
                  Recovers N's last committed position (mariadbd
                  --wsrep-recover) and starts it from there, so the donor
                  can send only the missing write sets (IST).

Every node runs with innodb_flush_log_at_trx_commit=1, binlog_format=ROW,
innodb_autoinc_lock_mode=2 and wsrep_sst_method=rsync. Run as root, the
nodes run as the OS user mysql (mariadbd refuses root, and the rsync SST's
daemon would drop to nobody), in node directories it owns: DIR's parents
must be open to it, as /tmp is. Otherwise they run as the calling user.
EOF
}

die() {
  printf 'galera-cluster: %s\n' "$*" >&2
  exit 1
}
log() { printf 'galera-cluster: %s\n' "$*"; }

NODES=(1 2 3)
WAIT=${TOOLGATE_GALERA_WAIT:-120}
PROVIDER=/usr/lib/galera/libgalera_smm.so
MARKER=.toolgate-galera

# --- arguments ----------------------------------------------------------
cmd=${1:-}
[[ -n $cmd ]] || {
  usage >&2
  exit 2
}
shift
case $cmd in
  -h | --help | help)
    usage
    exit 0
    ;;
  start | stop | status) ;;
  node-kill | node-start)
    node_arg=${1:-}
    [[ $node_arg =~ ^[123]$ ]] || die "$cmd needs a node number 1, 2 or 3 (got '${node_arg}')"
    shift
    ;;
  node-pause)
    node_arg=${1:-}
    secs_arg=${2:-}
    [[ $node_arg =~ ^[123]$ ]] || die "node-pause needs a node number 1, 2 or 3 (got '${node_arg}')"
    [[ $secs_arg =~ ^[0-9]+$ ]] || die "node-pause needs a whole number of seconds (got '${secs_arg}')"
    shift 2
    ;;
  *)
    usage >&2
    die "unknown command '$cmd'"
    ;;
esac
(($# <= 1)) || die "too many arguments: $*"
[[ $WAIT =~ ^[1-9][0-9]*$ ]] || die "TOOLGATE_GALERA_WAIT must be a positive number of seconds"
DIR=${1:-${TOOLGATE_GALERA_DIR:-/tmp/toolgate-galera}}
# Absolute, since each node's PID is checked against the my.cnf path it was
# started with; only `start` creates DIR.
DIR=$(realpath -m -- "$DIR")

# --- per-node paths and ports ---------------------------------------------
# The OS user the nodes run as. mariadbd refuses to run as root unless told
# to, and under root the rsync SST's daemon drops to `nobody`, which cannot
# write the joiner's datadir: so as root the nodes run as `mysql`, as a
# packaged server does, in node directories it owns.
# The script's own statements log in over the socket by unix_socket as the
# account of the same name, which mariadb-install-db creates with all
# privileges: root for root, else the calling user.
if [[ $EUID -eq 0 ]]; then
  RUN_USER=mysql
  SQL_USER=root
else
  RUN_USER=$(id -un)
  SQL_USER=$RUN_USER
fi

node_dir() { printf '%s/node%s' "$DIR" "$1"; }
cnf() { printf '%s/my.cnf' "$(node_dir "$1")"; }
pidfile() { printf '%s/node.pid' "$(node_dir "$1")"; }
sock() { printf '%s/mariadbd.sock' "$(node_dir "$1")"; }
errlog() { printf '%s/error.log' "$(node_dir "$1")"; }

# Ports of a node that exists come from its my.cnf (the environment may
# have changed since `start`); a node being created takes them from the
# environment.
sql_port() {
  if [[ -f $(cnf "$1") ]]; then
    sed -n 's/^port=//p' "$(cnf "$1")"
  else
    echo $((${TOOLGATE_GALERA_SQL_PORT:-4306} + $1 - 1))
  fi
}
repl_port() { echo $((${TOOLGATE_GALERA_REPL_PORT:-4567} + 10 * ($1 - 1))); }

# The PID of node N's mariadbd, if it runs. The pidfile is ours (written
# when we launched it); the PID counts only while /proc shows a mariadbd
# started with this node's my.cnf, so a reused PID is never signalled.
node_pid() {
  local pf pid
  pf=$(pidfile "$1")
  [[ -s $pf ]] || return 1
  pid=$(<"$pf")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "--defaults-file=$(cnf "$1")" || return 1
  echo "$pid"
}
running() { node_pid "$1" >/dev/null; }
paused() {
  local pid
  pid=$(node_pid "$1") || return 1
  # Field 3 of /proc/PID/stat is the state; T = stopped by a signal.
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == T ]]
}

# A statement on node N over its unix socket, as the OS user (a
# unix_socket login). Bounded, since a paused node accepts the connection
# and then never answers.
sql() {
  timeout 10 mariadb --no-defaults --protocol=socket -S "$(sock "$1")" -u "$SQL_USER" -N -B -e "$2" 2>/dev/null
}

# "SIZE STATE STATUS" of node N: wsrep_cluster_size,
# wsrep_local_state_comment (Synced, Donor/Desynced, Joining, Initialized
# ...) and wsrep_cluster_status (Primary or non-Primary), or nothing.
wsrep_state() {
  sql "$1" "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_local_state_comment', 'wsrep_cluster_status')" |
    awk '{v[$1]=$2} END {if (v["wsrep_cluster_size"] != "") print v["wsrep_cluster_size"], v["wsrep_local_state_comment"], v["wsrep_cluster_status"]}'
}

log_tail() {
  local n=$1
  printf '\n--- last lines of %s ---\n' "$(errlog "$n")" >&2
  tail -n 40 "$(errlog "$n")" >&2 2>/dev/null || true
  if [[ -s $(node_dir "$n")/console.log ]]; then
    printf -- '--- last lines of %s ---\n' "$(node_dir "$n")/console.log" >&2
    tail -n 15 "$(node_dir "$n")/console.log" >&2 || true
  fi
}

# The server binary: /usr/sbin is not on every user's PATH.
mariadbd_bin() { command -v mariadbd || echo /usr/sbin/mariadbd; }

port_busy() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# --- packages ---------------------------------------------------------------
# Debian's galera-4 provides the provider library; the rsync SST needs rsync.
# CI machines may lack both; this machine kind has mariadb-server 10.11.
ensure_packages() {
  local need=()
  [[ -e $PROVIDER ]] || need+=(galera-4)
  command -v rsync >/dev/null || need+=(rsync)
  [[ -x $(mariadbd_bin) ]] || need+=(mariadb-server)
  ((${#need[@]})) || return 0
  [[ $EUID -eq 0 ]] || die "missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root"
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  [[ -e $PROVIDER ]] || die "galera-4 is installed but $PROVIDER is missing"
}

# --- node configuration -------------------------------------------------------
write_cnf() {
  local n=$1 d gcomm="" m
  d=$(node_dir "$n")
  for m in "${NODES[@]}"; do
    gcomm+="${gcomm:+,}127.0.0.1:$(repl_port "$m")"
  done
  local rp sp
  rp=$(repl_port "$n")
  # Before the heredoc truncates my.cnf, which sql_port would then read.
  sp=$(sql_port "$n")
  cat >"$(cnf "$n")" <<EOF
# Node $n of the local test cluster, written by scripts/galera-cluster.sh.
[mariadbd]
user=$RUN_USER
datadir=$d/data
socket=$d/mariadbd.sock
pid-file=$d/mariadbd.pid
tmpdir=$d/tmp
log-error=$d/error.log
port=$sp
bind-address=127.0.0.1
skip-name-resolve
character-set-server=utf8mb4
collation-server=utf8mb4_general_ci
performance_schema=OFF
innodb_buffer_pool_size=64M
innodb_log_file_size=48M
# What Galera needs, and what docs/deploy.md asks of a real cluster.
default_storage_engine=InnoDB
innodb_flush_log_at_trx_commit=1
binlog_format=ROW
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=toolgate_test
wsrep_cluster_address=gcomm://$gcomm
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$rp
wsrep_node_incoming_address=127.0.0.1:$sp
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$rp;ist.recv_addr=127.0.0.1:$((rp + 1));gcache.size=64M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((rp + 2))
EOF
}

# Starts node N's mariadbd in the background with EXTRA arguments, in its
# own session (a Ctrl-C or CI's process group kill of the caller does not
# reach it), and records its PID.
launch() {
  local n=$1
  shift
  local d
  d=$(node_dir "$n")
  # --defaults-file must come first; the rest of the configuration is there.
  setsid "$(mariadbd_bin)" --defaults-file="$(cnf "$n")" "$@" </dev/null >>"$d/console.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$(pidfile "$n")"
  # setsid execs mariadbd in place when the caller is not a group leader
  # (a script never is), so $! is mariadbd itself; check, rather than
  # signal the wrong process later.
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    running "$n" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  log_tail "$n"
  die "node $n (pid $pid) did not start as a mariadbd of this cluster"
}

# Waits until node N is Synced and sees a cluster of at least SIZE nodes.
wait_synced() {
  local n=$1 size=$2 deadline=$((SECONDS + WAIT)) st=""
  while ((SECONDS < deadline)); do
    if ! running "$n"; then
      log_tail "$n"
      die "node $n exited while starting (see its error log above)"
    fi
    st=$(wsrep_state "$n" || true)
    # shellcheck disable=SC2086 # word splitting into size/state/status is wanted
    set -- $st
    if [[ ${1:-0} -ge $size && ${2:-} == Synced && ${3:-} == Primary ]]; then
      return 0
    fi
    sleep 0.5
  done
  log_tail "$n"
  die "node $n not Synced in a cluster of $size within ${WAIT} s (last: ${st:-no answer}); TOOLGATE_GALERA_WAIT raises the bound"
}

# Installs node N's system tables. Joiners get node 1's by state transfer,
# but a datadir of their own lets each node start (and be recovered) alone.
install_db() {
  local n=$1 d
  d=$(node_dir "$n")
  mkdir -p "$d/data"
  # A temporary directory per node: bootstraps running side by side in one
  # /tmp were seen to collide on their temporary tables' names.
  TMPDIR="$d/tmp" mariadb-install-db --no-defaults --datadir="$d/data" --user="$RUN_USER" \
    --auth-root-authentication-method=socket --skip-test-db --skip-name-resolve \
    >"$d/install.log" 2>&1 || {
    tail -n 30 "$d/install.log" >&2
    die "mariadb-install-db failed for node $n (log: $d/install.log)"
  }
}

# Node N's last committed position (UUID:SEQNO), recovered from its InnoDB
# logs after a crash; empty when it cannot be recovered.
recover_position() {
  local n=$1 d
  d=$(node_dir "$n")
  rm -f "$d/recover.log"
  "$(mariadbd_bin)" --defaults-file="$(cnf "$n")" --wsrep-recover --log-error="$d/recover.log" \
    </dev/null >/dev/null 2>&1 || true
  sed -n 's/.*WSREP: Recovered position: *\([0-9a-f-]*:-\{0,1\}[0-9]*\).*/\1/p' "$d/recover.log" 2>/dev/null | tail -n 1
}

# Starts node N into the running cluster and waits until it is Synced.
join_node() {
  local n=$1 peer="" m pos
  for m in "${NODES[@]}"; do
    if [[ $m != "$n" ]] && running "$m" && ! paused "$m"; then
      # shellcheck disable=SC2046 # split "SIZE STATE STATUS"
      set -- $(wsrep_state "$m" || true)
      if [[ ${3:-} == Primary ]]; then
        peer=$m
        break
      fi
    fi
  done
  [[ -n $peer ]] || die "node $n cannot rejoin: no other node is running in the primary component (stop, then start, makes a fresh cluster)"
  pos=$(recover_position "$n")
  local size=1 before
  # The cluster it must see: every node whose process runs. (The peers'
  # own wsrep_cluster_size may still count a node killed a moment ago.)
  for m in "${NODES[@]}"; do
    [[ $m == "$n" ]] || ! running "$m" || size=$((size + 1))
  done
  before=$(log_lines "$n")
  if [[ -n $pos && $pos != *:-1 ]]; then
    log "node $n: recovered position $pos; rejoining (node $peer is primary; IST if a donor's gcache still holds the gap)"
    launch "$n" --wsrep-start-position="$pos"
  else
    log "node $n: no recoverable position; rejoining by full state transfer (SST; node $peer is primary)"
    launch "$n"
  fi
  wait_synced "$n" "$size"
  log "node $n is Synced; $(transfer_kind "$n" "$before")"
}

# --- commands -------------------------------------------------------------------
started=()
cleanup_failed_start() {
  local n
  for n in "${started[@]}"; do
    stop_nodes "$n" >/dev/null 2>&1 || true
  done
}

# Lines in node N's error log so far, to look only at what a start adds.
log_lines() { if [[ -f $(errlog "$1") ]]; then wc -l <"$(errlog "$1")"; else echo 0; fi; }

# How node N got its state in the start whose log begins after line FROM.
# A joiner that needed SST also logs the IST that closes the gap after the
# snapshot, so SST is looked for first.
transfer_kind() {
  local added
  added=$(tail -n +"$(($2 + 1))" "$(errlog "$1")" 2>/dev/null || true)
  if grep -q 'SST completed on joiner' <<<"$added"; then
    echo "state by SST (rsync)"
  elif grep -q 'IST received' <<<"$added"; then
    echo "state by IST ($(grep -o 'Receiving IST: [0-9]* writesets, seqnos [0-9-]*' <<<"$added" | tail -n 1))"
  else
    echo "no state transfer was needed"
  fi
}

cmd_start() {
  ensure_packages
  local n alive=() dead=()
  for n in "${NODES[@]}"; do
    if running "$n"; then alive+=("$n"); else dead+=("$n"); fi
  done
  if ((${#dead[@]} == 0)); then
    log "already running in $DIR"
    cmd_status || true
    return 0
  fi
  # A start that fails stops what it started (the logs stay in DIR).
  trap 'rc=$?; ((rc == 0)) || cleanup_failed_start' EXIT
  if ((${#alive[@]})); then
    log "nodes ${alive[*]} already run; starting ${dead[*]}"
    for n in "${dead[@]}"; do
      started+=("$n")
      join_node "$n"
    done
    trap - EXIT
    cmd_status
    return
  fi

  # A fresh cluster. Only a DIR this script made is cleared.
  mkdir -p "$DIR"
  if [[ ! -e $DIR/$MARKER && -n $(ls -A "$DIR") ]]; then
    die "$DIR is not empty and was not made by this script; choose another DIR"
  fi
  for n in "${NODES[@]}"; do
    local p
    for p in "$(sql_port "$n")" "$(repl_port "$n")"; do
      port_busy "$p" && die "port $p on 127.0.0.1 is already in use (another cluster? TOOLGATE_GALERA_SQL_PORT / TOOLGATE_GALERA_REPL_PORT move ours)"
    done
  done
  touch "$DIR/$MARKER"
  if [[ $EUID -eq 0 ]]; then
    id "$RUN_USER" >/dev/null 2>&1 || die "user $RUN_USER does not exist (it comes with mariadb-server)"
    # DIR is the cluster's own (empty or made here): open it to the nodes'
    # user when it is closed (mktemp -d makes it 0700). Its parents are
    # not ours to change.
    runuser -u "$RUN_USER" -- test -x "$DIR" || chmod go+rx "$DIR"
    runuser -u "$RUN_USER" -- test -x "$DIR" ||
      die "$RUN_USER cannot reach $DIR (a parent directory is closed to it): choose a DIR under /tmp"
  fi
  for n in "${NODES[@]}"; do
    rm -rf "$(node_dir "$n")"
    mkdir -p "$(node_dir "$n")/tmp"
    write_cnf "$n"
    [[ $EUID -ne 0 ]] || chown -R "$RUN_USER:" "$(node_dir "$n")"
  done
  log "installing system tables for 3 nodes in $DIR"
  local pids=()
  for n in "${NODES[@]}"; do
    install_db "$n" &
    pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n" || exit 1; done

  log "bootstrapping node 1 (--wsrep-new-cluster) on port $(sql_port 1)"
  started+=(1)
  launch 1 --wsrep-new-cluster
  wait_synced 1 1
  # root over TCP from 127.0.0.1 without a password, as on the single test
  # server, and the database the test URLs name. Replicated to the joiners
  # by their state transfer.
  sql 1 "CREATE DATABASE IF NOT EXISTS test;
         CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
         GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" ||
    die "could not create the test database and root@127.0.0.1 on node 1"
  # One joiner at a time: node 1 donates to node 2, then either donates to
  # node 3 (two joiners at once would queue behind one donor anyway).
  for n in 2 3; do
    log "node $n joining (rsync SST) on port $(sql_port "$n")"
    started+=("$n")
    launch "$n"
    wait_synced "$n" "$n"
  done
  for n in "${NODES[@]}"; do wait_synced "$n" 3; done
  trap - EXIT
  log "cluster of 3 is Synced: mysql://root@127.0.0.1:$(sql_port 1)/test (also :$(sql_port 2), :$(sql_port 3))"
  cmd_status
}

# Stops the given nodes: TERM to each one's own PID, then KILL after the
# bound. A paused node gets CONT so that it can handle the TERM.
stop_nodes() {
  local n pid pids=() which=()
  for n in "$@"; do
    if pid=$(node_pid "$n"); then
      kill -TERM "$pid" 2>/dev/null || true
      kill -CONT "$pid" 2>/dev/null || true
      pids+=("$pid")
      which+=("$n")
    fi
  done
  ((${#pids[@]})) || return 0
  local deadline=$((SECONDS + WAIT)) i
  for i in "${!pids[@]}"; do
    while kill -0 "${pids[$i]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      log "node ${which[$i]} (pid ${pids[$i]}) ignored TERM for ${WAIT} s: KILL"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
      while kill -0 "${pids[$i]}" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$(pidfile "${which[$i]}")"
    log "node ${which[$i]} stopped (pid ${pids[$i]})"
  done
}

cmd_stop() {
  local n any=0
  for n in "${NODES[@]}"; do running "$n" && any=1; done
  if ((any == 0)); then
    log "no node is running in $DIR"
    return 0
  fi
  # Joiners first, node 1 last: the last node to leave is the one a
  # restart of the same data could bootstrap from.
  stop_nodes 3 2 1
}

cmd_status() {
  local n pid st ok=0
  printf '%-5s %-6s %-8s %-5s %s\n' node port pid size state
  for n in "${NODES[@]}"; do
    if [[ ! -f $(cnf "$n") ]]; then
      printf '%-5s %-6s %-8s %-5s %s\n' "$n" - - - "not created"
      ok=1
      continue
    fi
    if ! pid=$(node_pid "$n"); then
      printf '%-5s %-6s %-8s %-5s %s\n' "$n" "$(sql_port "$n")" - - "not running"
      ok=1
      continue
    fi
    if paused "$n"; then
      printf '%-5s %-6s %-8s %-5s %s\n' "$n" "$(sql_port "$n")" "$pid" - "paused (SIGSTOP)"
      ok=1
      continue
    fi
    st=$(wsrep_state "$n" || true)
    # shellcheck disable=SC2086 # split "SIZE STATE STATUS"
    set -- $st
    printf '%-5s %-6s %-8s %-5s %s\n' "$n" "$(sql_port "$n")" "$pid" "${1:--}" \
      "${2:-not answering}${3:+ ($3)}"
    [[ ${1:-} == 3 && ${2:-} == Synced && ${3:-} == Primary ]] || ok=1
  done
  return "$ok"
}

cmd_node_kill() {
  local n=$1 pid
  pid=$(node_pid "$n") || {
    log "node $n is not running"
    return 0
  }
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$(pidfile "$n")"
  log "node $n (pid $pid) killed with SIGKILL"
}

cmd_node_pause() {
  local n=$1 secs=$2 pid sleeper=""
  pid=$(node_pid "$n") || die "node $n is not running"
  # Whatever ends this command, the node must not stay frozen.
  trap 'kill -CONT "$pid" 2>/dev/null || true; [[ -z $sleeper ]] || kill "$sleeper" 2>/dev/null || true' EXIT
  trap 'exit 130' INT TERM
  kill -STOP "$pid"
  log "node $n (pid $pid) paused for $secs s"
  # In the background and waited for: a TERM to this script interrupts
  # `wait` at once, where it would wait for a foreground sleep to end.
  sleep "$secs" &
  sleeper=$!
  wait "$sleeper"
  sleeper=""
  kill -CONT "$pid"
  trap - EXIT INT TERM
  log "node $n (pid $pid) resumed"
}

cmd_node_start() {
  local n=$1
  [[ -f $(cnf "$n") ]] || die "node $n was never created in $DIR: run start first"
  if running "$n"; then
    log "node $n is already running (pid $(node_pid "$n"))"
    return 0
  fi
  ensure_packages
  trap 'rc=$?; ((rc == 0)) || cleanup_failed_start' EXIT
  started+=("$n")
  join_node "$n"
  trap - EXIT
}

case $cmd in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  node-kill) cmd_node_kill "$node_arg" ;;
  node-pause) cmd_node_pause "$node_arg" "$secs_arg" ;;
  node-start) cmd_node_start "$node_arg" ;;
esac
