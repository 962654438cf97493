# shellcheck shell=bash disable=SC2034  # a library: its globals are read by the scripts
# Shared functions for the pgfleet benchmarks. Source it; do not run it.
#
# Everything is self-contained: a private PostgreSQL in a temporary directory (loopback only),
# poolers on free loopback ports, and a cleanup trap that stops only the processes this script
# started, by PID. Binaries are found by path and can be overridden:
#   PGFLEET_BIN    pgfleet binary           (default: build/cmd/pgfleet/pgfleet under the repo)
#   PGBOUNCER_BIN  pgbouncer binary         (default: pgbouncer on PATH, else /usr/sbin/pgbouncer)
#   PGBOUNCER2_BIN a second, newer pgbouncer built from its release tag outside the repo (no
#                  default; targets `pgbouncer2:N` run it beside Debian's, e.g. 1.25 against 1.18)
#   PGDOG_BIN      a PgDog binary built from its source outside the repo (no default; targets
#                  `pgdog:N` run it with N worker threads: the multi-threaded peer)
#   PG_BINDIR      PostgreSQL bin directory (default: pg_config --bindir, else the newest
#                  /usr/lib/postgresql/*/bin)
#   BENCH_USER     unprivileged account that runs PostgreSQL and PgBouncer when the script runs
#                  as root (both refuse root; default: postgres)
#   KEEP_TMP=1     keep the temporary directory (logs, configs) after the run
#   PGFLEET_COPY=1 (default) run a private copy of PGFLEET_BIN: a rebuild during the run then
#                  neither changes the binary under test nor makes the supervisor start a
#                  rolling restart onto a half-linked file. 0 runs PGFLEET_BIN in place.

BENCH_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_REPO_DIR=$(cd "$BENCH_LIB_DIR/.." && pwd)

: "${PGFLEET_BIN:=$BENCH_REPO_DIR/build/cmd/pgfleet/pgfleet}"
if [[ -z "${PGBOUNCER_BIN:-}" ]]; then
  PGBOUNCER_BIN=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
fi
if [[ -z "${PG_BINDIR:-}" ]]; then
  if command -v pg_config >/dev/null 2>&1 && [[ -x "$(pg_config --bindir)/postgres" ]]; then
    PG_BINDIR=$(pg_config --bindir)
  else
    PG_BINDIR=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null |
      sort -V | tail -n 1)
  fi
fi
: "${BENCH_USER:=postgres}"
: "${KEEP_TMP:=0}"
: "${PGFLEET_COPY:=1}"
PGFLEET_ORIGIN=""

CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------------------------------------
# Logging and small helpers

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# run_as_bench_user CMD...: exec CMD as BENCH_USER when we are root, else as ourselves. Uses
# setpriv (exec, no fork), so `run_as_bench_user prog &` leaves $! = the PID of prog itself.
run_as_bench_user() {
  if [[ $EUID -eq 0 ]]; then
    exec setpriv --reuid="$BENCH_USER" --regid="$BENCH_USER" --init-groups -- "$@"
  else
    exec "$@"
  fi
}

# Owner for files that PostgreSQL / PgBouncer must write. The group is given by number, so a
# numeric BENCH_USER (65534 where no account can be added) works too.
chown_bench_user() {
  if [[ $EUID -eq 0 ]]; then
    chown -R "$BENCH_USER:$(id -g "$BENCH_USER")" "$@"
  fi
}

check_binaries() {
  [[ -x "$PG_BINDIR/postgres" ]] || die "PostgreSQL not found in PG_BINDIR=$PG_BINDIR"
  [[ -x "$PG_BINDIR/pgbench" ]] || die "pgbench not found in PG_BINDIR=$PG_BINDIR"
  if [[ $EUID -eq 0 ]]; then
    command -v setpriv >/dev/null || die "setpriv (util-linux) is needed to drop root"
    id "$BENCH_USER" >/dev/null 2>&1 || die "user BENCH_USER=$BENCH_USER does not exist"
  fi
}

# machine_info: core count, CPU model, kernel, load; printed at the top of every run.
machine_info() {
  local model
  model=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
  [[ -n "$model" ]] || model=$(uname -m)
  echo "date:        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host:        $(uname -n), $(uname -sr)"
  echo "cpu:         $model"
  echo "nproc:       $(nproc) (online: $(getconf _NPROCESSORS_ONLN))"
  echo "memory:      $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "loadavg:     $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "postgres:    $("$PG_BINDIR/postgres" --version) ($PG_BINDIR)"
  echo "pgbench:     $("$PG_BINDIR/pgbench" --version)"
  if [[ -x "$PGBOUNCER_BIN" ]]; then
    echo "pgbouncer:   $("$PGBOUNCER_BIN" --version 2>&1 | head -n 1) ($PGBOUNCER_BIN)"
  fi
  if [[ -n "${PGBOUNCER2_BIN:-}" && -x "$PGBOUNCER2_BIN" ]]; then
    echo "pgbouncer2:  $("$PGBOUNCER2_BIN" --version 2>&1 | head -n 1) ($PGBOUNCER2_BIN)"
  fi
  if [[ -n "${PGDOG_BIN:-}" && -x "$PGDOG_BIN" ]]; then
    echo "pgdog:       $("$PGDOG_BIN" --version 2>&1 | head -n 1) ($PGDOG_BIN)"
  fi
  if [[ -x "$PGFLEET_BIN" ]]; then
    echo "pgfleet:     $("$PGFLEET_BIN" --version 2>&1 | head -n 1)" \
      "(sha256 $(sha256sum "$PGFLEET_BIN" | cut -c1-12)," \
      "${PGFLEET_ORIGIN:+private copy of }${PGFLEET_ORIGIN:-$PGFLEET_BIN, built $(date -u -r "$PGFLEET_BIN" '+%Y-%m-%d %H:%M UTC')})"
  fi
  if git -C "$BENCH_REPO_DIR" rev-parse --short HEAD >/dev/null 2>&1; then
    echo "repo:        $(git -C "$BENCH_REPO_DIR" rev-parse --short HEAD)"
  fi
}

# ---------------------------------------------------------------------------------------------
# Temporary directory, started processes and cleanup

BENCH_TMP=""
# "PID:SIGNAL:STARTTIME" for every process we started; cleanup signals these and nothing else.
STARTED=()

make_tmpdir() {
  BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/pgfleet-bench.XXXXXX")
  chmod 755 "$BENCH_TMP"
}

# proc_starttime PID: field 22 of /proc/PID/stat (start time since boot, in ticks). Unlike the
# name, it does not change when the forked shell execs the program, and a reused PID has a
# different one.
proc_starttime() {
  local stat rest
  local -a f
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  read -r -a f <<<"$rest"
  echo "${f[19]}"
}

# track_pid PID SIGNAL: remember a process we started and how to stop it (TERM, INT, ...).
track_pid() {
  local pid=$1 sig=$2 start
  start=$(proc_starttime "$pid") || start="?"
  STARTED+=("$pid:$sig:$start")
}

# pid_is_ours PID STARTTIME: PID is still the process we started, alive and not a zombie.
pid_is_ours() {
  local pid=$1 start=$2 now state
  now=$(proc_starttime "$pid") || return 1
  [[ "$now" == "$start" ]] || return 1
  state=$(awk '{ sub(/.*\) /, ""); print $1 }' "/proc/$pid/stat" 2>/dev/null)
  [[ "$state" != Z ]]
}

# stop_pid PID [TIMEOUT_S]: stop one tracked process with its signal, KILL it after the timeout.
stop_pid() {
  local pid=$1 timeout=${2:-20} entry sig="" start="" i rest=()
  for entry in "${STARTED[@]}"; do
    if [[ "${entry%%:*}" == "$pid" ]]; then
      sig=${entry#*:}
      start=${sig#*:}
      sig=${sig%%:*}
    else
      rest+=("$entry")
    fi
  done
  STARTED=("${rest[@]}")
  [[ -n "$sig" ]] || return 0
  if pid_is_ours "$pid" "$start"; then
    # Its children (a pgfleet supervisor's workers) are ours too: note them with their start
    # times, so a KILL of the parent does not leave them behind.
    local kid kids=()
    for kid in $(descendants "$pid"); do
      [[ "$kid" == "$pid" ]] || kids+=("$kid:$(proc_starttime "$kid" || echo gone)")
    done
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
      pid_is_ours "$pid" "$start" || break
      sleep 0.1
    done
    if pid_is_ours "$pid" "$start"; then
      log "pid $pid did not stop on SIG$sig within ${timeout}s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    for kid in "${kids[@]}"; do
      if pid_is_ours "${kid%%:*}" "${kid#*:}"; then
        sleep 1 # orphaned workers usually notice their parent's death and exit
        if pid_is_ours "${kid%%:*}" "${kid#*:}"; then
          log "child ${kid%%:*} of $pid still running; sending KILL"
          kill -KILL "${kid%%:*}" 2>/dev/null || true
        fi
      fi
    done
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? i entry
  trap - EXIT INT TERM
  # Stop in reverse start order: poolers before PostgreSQL.
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
    entry=${STARTED[i]}
    stop_pid "${entry%%:*}" 20
  done
  if [[ -n "$BENCH_TMP" && -d "$BENCH_TMP" ]]; then
    if [[ "$KEEP_TMP" == 1 || $rc -ne 0 ]]; then
      log "logs and configs kept in $BENCH_TMP"
    else
      rm -rf "$BENCH_TMP"
    fi
  fi
  exit "$rc"
}

install_cleanup_trap() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# ---------------------------------------------------------------------------------------------
# Ports

# port_in_use PORT: something listens on 127.0.0.1:PORT (or any address).
port_in_use() {
  local port=$1 listening
  # ss missing or failing (no sock_diag, as under gVisor): try to connect instead.
  if command -v ss >/dev/null 2>&1 && listening=$(ss -Hltn "sport = :$port" 2>/dev/null); then
    [[ -n "$listening" ]]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  fi
}

# free_port: set FREE_PORT to a port below the ephemeral range that nothing listens on and that
# this run has not handed out yet. (Not a $(subshell): the set of handed-out ports must persist.)
USED_PORTS=" "
FREE_PORT=""
free_port() {
  local port i
  for ((i = 0; i < 200; i++)); do
    port=$((20000 + RANDOM % 10000))
    [[ "$USED_PORTS" == *" $port "* ]] && continue
    if ! port_in_use "$port"; then
      USED_PORTS+="$port "
      FREE_PORT=$port
      return 0
    fi
  done
  die "no free port found"
}

# wait_for_port PORT PID [TIMEOUT_S]: wait until PORT accepts TCP connections on 127.0.0.1;
# fail early if PID died.
wait_for_port() {
  local port=$1 pid=$2 timeout=${3:-30} i
  for ((i = 0; i < timeout * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "process $pid exited before port $port opened"
      return 1
    fi
    sleep 0.1
  done
  log "port $port not open after ${timeout}s"
  return 1
}

# ---------------------------------------------------------------------------------------------
# Private PostgreSQL

PG_DIR=""
PG_PORT=""
PG_PID=""

# pg_start MAX_CONNECTIONS: initdb + start a throwaway cluster on a free loopback port, unix
# socket in its own directory. fsync=off etc.: a benchmark cluster, never for data you keep.
pg_start() {
  local max_conn=${1:-300}
  PG_DIR="$BENCH_TMP/pg"
  free_port
  PG_PORT=$FREE_PORT
  mkdir -p "$PG_DIR"
  chown_bench_user "$PG_DIR"
  log "initdb in $PG_DIR"
  (cd "$PG_DIR" && run_as_bench_user "$PG_BINDIR/initdb" -D "$PG_DIR/data" -U postgres \
    --auth=trust -E UTF8 --locale=C --no-sync) >"$BENCH_TMP/initdb.log" 2>&1 ||
    die "initdb failed; see $BENCH_TMP/initdb.log"
  log "starting PostgreSQL on 127.0.0.1:$PG_PORT (max_connections=$max_conn, fsync=off)"
  (cd "$PG_DIR" && run_as_bench_user "$PG_BINDIR/postgres" -D "$PG_DIR/data" \
    -c port="$PG_PORT" -c listen_addresses=127.0.0.1 -c unix_socket_directories="$PG_DIR" \
    -c max_connections="$max_conn" -c shared_buffers=256MB \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
    -c logging_collector=off -c log_min_messages=warning -c log_line_prefix='%m [%p] ' \
    -c autovacuum=off) >"$BENCH_TMP/postgres.log" 2>&1 &
  PG_PID=$!
  track_pid "$PG_PID" INT
  local i
  for ((i = 0; i < 300; i++)); do
    "$PG_BINDIR/pg_isready" -q -h "$PG_DIR" -p "$PG_PORT" -U postgres && return 0
    kill -0 "$PG_PID" 2>/dev/null || die "PostgreSQL exited; see $BENCH_TMP/postgres.log"
    sleep 0.1
  done
  die "PostgreSQL did not become ready; see $BENCH_TMP/postgres.log"
}

# psql_direct SQL [DB]: run SQL on the private cluster over its unix socket.
psql_direct() {
  "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres \
    -d "${2:-postgres}" -c "$1"
}

# pg_init_bench DB SCALE: create DB and load pgbench tables.
pg_init_bench() {
  local db=$1 scale=$2
  psql_direct "CREATE DATABASE $db" >/dev/null || die "CREATE DATABASE $db failed"
  log "pgbench -i -s $scale $db"
  "$PG_BINDIR/pgbench" -i -q -s "$scale" -h "$PG_DIR" -p "$PG_PORT" -U postgres "$db" \
    >"$BENCH_TMP/pgbench-init.log" 2>&1 || die "pgbench -i failed; see $BENCH_TMP/pgbench-init.log"
  psql_direct "VACUUM ANALYZE" "$db" >/dev/null
}

# pg_create_role NAME: a superuser login role. Each target connects as its own role, so the
# server connections of one pooler can be counted while the others keep idle pools open.
pg_create_role() {
  psql_direct "CREATE ROLE $1 LOGIN SUPERUSER" >/dev/null || die "CREATE ROLE $1 failed"
}

# pg_server_conns ROLE: backends PostgreSQL has open for ROLE now.
pg_server_conns() {
  psql_direct "SELECT count(*) FROM pg_stat_activity WHERE usename = '$1'"
}

# ---------------------------------------------------------------------------------------------
# Poolers. Both get the same settings: pool_mode transaction, POOL_SIZE server connections per
# (database, user) pool, MAX_CLIENT_CONN clients, trust auth, connection logging off.

: "${POOL_SIZE:=20}"
: "${MAX_CLIENT_CONN:=10000}"

# Per target: TARGET_PORT[name], TARGET_PID[name] (supervisor / first process),
# TARGET_PIDS[name] (all top-level PIDs we started for it), TARGET_LOGS[name],
# TARGET_METRICS[name] (pgfleet's /metrics host:port, empty when off).
declare -A TARGET_PORT=() TARGET_PID=() TARGET_PIDS=() TARGET_LOGS=() TARGET_METRICS=()

# pgfleet_private_copy: with PGFLEET_COPY=1, copy PGFLEET_BIN into the temporary directory
# once and point PGFLEET_BIN at the copy. Call it early (right after make_tmpdir), so a rebuild
# during the setup cannot remove the binary under the run.
pgfleet_private_copy() {
  [[ -x "$PGFLEET_BIN" ]] || die "pgfleet not found at PGFLEET_BIN=$PGFLEET_BIN" \
    "(being rebuilt? build it, or point PGFLEET_BIN at a binary)"
  "$PGFLEET_BIN" --version >/dev/null 2>&1 || die "$PGFLEET_BIN --version fails"
  [[ "$PGFLEET_COPY" == 1 && "$PGFLEET_BIN" != "$BENCH_TMP/bin/"* ]] || return 0
  mkdir -p "$BENCH_TMP/bin"
  PGFLEET_ORIGIN="$PGFLEET_BIN, built $(date -u -r "$PGFLEET_BIN" '+%Y-%m-%d %H:%M UTC')"
  cp "$PGFLEET_BIN" "$BENCH_TMP/bin/pgfleet" || die "cannot copy $PGFLEET_BIN"
  log "running a private copy of $PGFLEET_BIN ($(sha256sum "$BENCH_TMP/bin/pgfleet" | cut -c1-12))"
  PGFLEET_BIN="$BENCH_TMP/bin/pgfleet"
}

# Client-side settings every pooler gets alike (issue 18's matrix):
#   AUTH=trust        trust | md5 | scram: how the poolers authenticate clients (servers stay
#                     trust); clients send BENCH_PASSWORD (exported as PGPASSWORD)
#   CLIENT_TLS=off    on: the poolers require TLS from clients (a throwaway self-signed RSA 2048
#                     certificate); pooler_client_env then gives pgbench PGSSLMODE=require
: "${AUTH:=trust}"
: "${CLIENT_TLS:=off}"
BENCH_PASSWORD=bench
export PGPASSWORD=$BENCH_PASSWORD
case "$AUTH" in
trust | md5) AUTH_NAME=$AUTH ;;
scram) AUTH_NAME=scram-sha-256 ;;
*) die "AUTH must be trust, md5 or scram" ;;
esac
[[ "$CLIENT_TLS" == on || "$CLIENT_TLS" == off ]] || die "CLIENT_TLS must be on or off"

# bench_userlist FILE USER...: a PgBouncer-format auth file with BENCH_PASSWORD for each USER.
bench_userlist() {
  local file=$1 u
  shift
  : >"$file"
  for u in "$@" postgres; do printf '"%s" "%s"\n' "$u" "$BENCH_PASSWORD" >>"$file"; done
}

# client_tls_files: BENCH_TMP/client-tls/server.{crt,key}, made once.
client_tls_files() {
  local d="$BENCH_TMP/client-tls"
  [[ -f "$d/server.key" ]] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
    -keyout "$d/server.key" -out "$d/server.crt" >"$d/openssl.log" 2>&1 ||
    die "openssl failed; see $d/openssl.log"
  chmod 0644 "$d/server.key" # PgBouncer runs as BENCH_USER and reads it
}

# pooler_client_env NAME: the environment pgbench needs for target NAME (TLS or not).
pooler_client_env() {
  if [[ "$CLIENT_TLS" == on && -n "${TARGET_PID[$1]:-}" ]]; then
    echo PGSSLMODE=require
  else
    echo PGSSLMODE=disable
  fi
}

# pgfleet_start NAME WORKERS DB [EXTRA_YAML] [USER]: one pgfleet (supervisor; WORKERS workers once the
# supervisor exists) listening on a free port, pooling DB on the private PostgreSQL with
# default_pool_size POOL_SIZE. EXTRA_YAML is appended to the config (admin users, server TLS).
# USER (with AUTH other than trust) goes into the auth file.
pgfleet_start() {
  local name=$1 workers=$2 db=$3 extra=${4:-} user=${5:-} dir port pid auth_yaml tls_yaml=""
  [[ -x "$PGFLEET_BIN" ]] || die "pgfleet not found at PGFLEET_BIN=$PGFLEET_BIN"
  pgfleet_private_copy
  dir="$BENCH_TMP/$name"
  free_port
  port=$FREE_PORT
  # /metrics on a free port (the default 9127 would collide between runs); PGFLEET_METRICS=off
  # turns the endpoint and the workers' snapshots off (bench/metrics_overhead.sh).
  local metrics_listen=""
  if [[ "${PGFLEET_METRICS:-on}" != off ]]; then
    free_port
    metrics_listen="127.0.0.1:$FREE_PORT"
  fi
  TARGET_METRICS[$name]=$metrics_listen
  mkdir -p "$dir"
  auth_yaml="{type: trust}"
  if [[ "$AUTH" != trust ]]; then
    bench_userlist "$dir/userlist.txt" $user
    auth_yaml="{type: $AUTH_NAME, file: $dir/userlist.txt}"
  fi
  if [[ "$CLIENT_TLS" == on ]]; then
    client_tls_files
    tls_yaml="tls: {client_tls_sslmode: require, client_tls_cert_file: $BENCH_TMP/client-tls/server.crt, client_tls_key_file: $BENCH_TMP/client-tls/server.key}"
  fi
  cat >"$dir/pgfleet.yaml" <<EOF
listen: {address: 127.0.0.1, port: $port, unix_socket_dir: $dir}
workers: $workers
databases:
  $db: {host: 127.0.0.1, port: $PG_PORT, dbname: $db}
pool:
  pool_mode: transaction
  default_pool_size: $POOL_SIZE
  max_client_conn: $MAX_CLIENT_CONN
${PGFLEET_POOL_EXTRA:-}
auth: $auth_yaml
$tls_yaml
log: {level: ${PGFLEET_LOG_LEVEL:-info}, log_connections: false, log_disconnections: false}
metrics: {listen: "$metrics_listen"}
$extra
EOF
  # The command-line contract (docs/architecture.md, "Configuration") is --check-config; some
  # builds only know absl's spelling --check_config.
  if ! "$PGFLEET_BIN" --check-config "$dir/pgfleet.yaml" >"$dir/check.log" 2>&1; then
    if grep -q "Unknown command line flag 'check-config'" "$dir/check.log"; then
      log "note: this pgfleet does not accept --check-config; using --check_config"
      "$PGFLEET_BIN" --check_config "$dir/pgfleet.yaml" >"$dir/check.log" 2>&1 ||
        die "pgfleet rejects its config: $(cat "$dir/check.log")"
    else
      die "pgfleet rejects its config: $(cat "$dir/check.log")"
    fi
  fi
  # shellcheck disable=SC2086  # POOLER_WRAPPER is a command line prefix (bench/instructions.sh)
  ${POOLER_WRAPPER:-} "$PGFLEET_BIN" --config "$dir/pgfleet.yaml" >"$dir/pgfleet.log" 2>&1 &
  pid=$!
  track_pid "$pid" TERM
  wait_for_port "$port" "$pid" 30 || die "pgfleet did not start; see $dir/pgfleet.log"
  TARGET_PORT[$name]=$port
  TARGET_PID[$name]=$pid
  TARGET_PIDS[$name]=$pid
  TARGET_LOGS[$name]="$dir/pgfleet.log"
  log "$name: pgfleet pid $pid on 127.0.0.1:$port (workers: $workers, default_pool_size: $POOL_SIZE)"
}

# check_alive NAME: 0 while every process of the target runs; else logs its log's tail.
check_alive() {
  local name=$1 pid
  for pid in ${TARGET_PIDS[$name]}; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name: process $pid is gone; log tail:"
      # shellcheck disable=SC2086
      tail -n 20 ${TARGET_LOGS[$name]} >&2 || true
      return 1
    fi
  done
}

# pgbench_run_ok OUT RC WHAT: 0 when the pgbench run whose output is OUT and exit status RC did
# transactions and none failed or aborted; else logs why (WHAT names the run).
pgbench_run_ok() {
  local out=$1 rc=$2 what=$3 processed failed aborted
  processed=$(pgbench_field "$out" processed)
  failed=$(pgbench_field "$out" failed)
  aborted=$(pgbench_field "$out" aborted)
  if [[ $rc -ne 0 || -z "$processed" || "$processed" -eq 0 || "$failed" -ne 0 || "$aborted" -ne 0 ]]; then
    log "run $what: pgbench rc=$rc failed=$failed aborted=$aborted"
    grep -iE 'error|abort|fatal' "$out" | head -n 5 >&2 || true
    return 1
  fi
}

# pgbouncer_start NAME PROCS DB USER [BIN]: PROCS PgBouncer processes on one port (so_reuseport=1
# when PROCS > 1), each with its own unix_socket_dir, pidfile and logfile. USER goes into the
# auth_file (trust still needs the name there). BIN defaults to PGBOUNCER_BIN.
pgbouncer_start() {
  local name=$1 procs=$2 db=$3 user=$4 bin=${5:-$PGBOUNCER_BIN} port i dir pid pids="" logs=""
  [[ -x "$bin" ]] || die "pgbouncer not found at $bin (PGBOUNCER_BIN / PGBOUNCER2_BIN)"
  free_port
  port=$FREE_PORT
  for ((i = 0; i < procs; i++)); do
    dir="$BENCH_TMP/$name/$i"
    mkdir -p "$dir"
    bench_userlist "$dir/userlist.txt" "$user"
    local tls_ini=""
    if [[ "$CLIENT_TLS" == on ]]; then
      client_tls_files
      tls_ini="client_tls_sslmode = require
client_tls_cert_file = $BENCH_TMP/client-tls/server.crt
client_tls_key_file = $BENCH_TMP/client-tls/server.key"
    fi
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$db = host=127.0.0.1 port=$PG_PORT dbname=$db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
so_reuseport = $((procs > 1 ? 1 : 0))
unix_socket_dir = $dir
pidfile = $dir/pgbouncer.pid
logfile = $dir/pgbouncer.log
auth_type = $AUTH_NAME
$tls_ini
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = $MAX_CLIENT_CONN
log_connections = 0
log_disconnections = 0
EOF
    chown_bench_user "$dir"
    # shellcheck disable=SC2086  # POOLER_WRAPPER is a command line prefix
    (cd "$dir" && run_as_bench_user ${POOLER_WRAPPER:-} "$bin" -q "$dir/pgbouncer.ini") \
      >"$dir/stdout.log" 2>&1 &
    pid=$!
    track_pid "$pid" TERM # TERM: immediate shutdown (INT would wait for clients)
    # With so_reuseport every process binds itself; wait for each before starting the next so
    # a bind failure is attributed to the right process.
    wait_for_port "$port" "$pid" 30 || die "pgbouncer $i did not start; see $dir/pgbouncer.log"
    pids+="${pids:+ }$pid"
    logs+="${logs:+ }$dir/pgbouncer.log"
  done
  TARGET_PORT[$name]=$port
  TARGET_PID[$name]=${pids%% *}
  TARGET_PIDS[$name]=$pids
  TARGET_LOGS[$name]=$logs
  log "$name: pgbouncer pid(s) $pids on 127.0.0.1:$port"
}

# pgdog_start NAME THREADS DB USER: PgDog (PGDOG_BIN) with THREADS worker threads and one pool
# for (DB, USER) of POOL_SIZE servers, transaction mode, AUTH for clients (PgDog logs in to the
# trust-auth PostgreSQL with any password), CLIENT_TLS as for the others; it has no metrics
# endpoint unless openmetrics_port is set. Its other defaults stay: prepared statements
# "extended", query parser "auto".
pgdog_start() {
  local name=$1 threads=$2 db=$3 user=$4 dir port pid tls_toml="" auth
  [[ -x "${PGDOG_BIN:-}" ]] || die "pgdog targets need PGDOG_BIN (a pgdog binary)"
  case "$AUTH" in
  trust | md5) auth=$AUTH ;;
  scram) auth=scram ;;
  esac
  dir="$BENCH_TMP/$name"
  mkdir -p "$dir"
  free_port
  port=$FREE_PORT
  if [[ "$CLIENT_TLS" == on ]]; then
    client_tls_files
    tls_toml="tls_certificate = \"$BENCH_TMP/client-tls/server.crt\"
tls_private_key = \"$BENCH_TMP/client-tls/server.key\""
  fi
  cat >"$dir/pgdog.toml" <<EOF
[general]
host = "127.0.0.1"
port = $port
workers = $threads
default_pool_size = $POOL_SIZE
min_pool_size = 0
pooler_mode = "transaction"
auth_type = "$auth"
tls_verify = "disabled"
log_connections = false
log_disconnections = false
$tls_toml

[[databases]]
name = "$db"
host = "127.0.0.1"
port = $PG_PORT
database_name = "$db"
EOF
  cat >"$dir/users.toml" <<EOF
[[users]]
name = "$user"
database = "$db"
password = "$BENCH_PASSWORD"
EOF
  chown_bench_user "$dir"
  (cd "$dir" && run_as_bench_user "$PGDOG_BIN" --config "$dir/pgdog.toml" --users "$dir/users.toml") \
    >"$dir/pgdog.log" 2>&1 &
  pid=$!
  track_pid "$pid" TERM
  wait_for_port "$port" "$pid" 30 || die "pgdog did not start; see $dir/pgdog.log"
  TARGET_PORT[$name]=$port
  TARGET_PID[$name]=$pid
  TARGET_PIDS[$name]=$pid
  TARGET_LOGS[$name]=$dir/pgdog.log
  log "$name: pgdog pid $pid ($threads threads) on 127.0.0.1:$port"
}

# direct_target NAME: PostgreSQL itself as a reference (no pooler).
direct_target() {
  local name=$1
  TARGET_PORT[$name]=$PG_PORT
  TARGET_PID[$name]=""
  TARGET_PIDS[$name]=""
  TARGET_LOGS[$name]="$BENCH_TMP/postgres.log"
}

# ---------------------------------------------------------------------------------------------
# CPU time

# descendants PID...: the PIDs given plus all their live descendants.
descendants() {
  # shellcheck disable=SC2009  # ps is the portable way to get the whole ppid table at once
  ps -e -o pid=,ppid= | awk -v roots="$*" '
    { parent[$1] = $2; pids[NR] = $1 }
    END {
      n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1
      changed = 1
      while (changed) {
        changed = 0
        for (i in pids) { p = pids[i]; if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 } }
      }
      for (p in keep) if (p != "") print p
    }' | sort -n | tr '\n' ' '
}

# proc_stat_ticks "FIELD..." PID...: the given fields of each PID's /proc/PID/stat (numbered
# from the state field as 0: 11 utime, 12 stime, 13 cutime, 14 cstime), in clock ticks, summed.
# Missing PIDs count 0.
proc_stat_ticks() {
  local fields=$1 pid total=0 stat rest i
  local -a f
  shift
  for pid in "$@"; do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    rest=${stat##*) }        # drop "pid (comm) ", comm may contain spaces
    read -r -a f <<<"$rest"  # f[0] = state (field 3), so field N is f[N-3]
    for i in $fields; do total=$((total + f[i])); done
  done
  echo "$total"
}

# proc_cpu_ticks PID...: utime+stime (all threads) plus cutime+cstime (reaped children).
proc_cpu_ticks() { proc_stat_ticks "11 12 13 14" "$@"; }

# proc_user_ticks PID...: its user-space part (utime + cutime). The kernel splits a process's
# time between user and system by tick samples, so this is exact only over a run of seconds.
proc_user_ticks() { proc_stat_ticks "11 13" "$@"; }

# proc_sleeps PID...: voluntary context switches (each a sleep that needed a wake-up) of every
# thread of each PID, summed. Exited threads and processes are not counted.
proc_sleeps() {
  local pid total=0 n
  for pid in "$@"; do
    for n in $(awk '/^voluntary_ctxt_switches/ { print $2 }' /proc/"$pid"/task/*/status 2>/dev/null); do
      total=$((total + n))
    done
  done
  echo "$total"
}

# tree_cpu_ticks PID...: CPU of the processes and all their descendants, live or reaped. A
# fleet's restarted workers are counted through their parent's cutime/cstime.
tree_cpu_ticks() {
  [[ $# -gt 0 ]] || {
    echo 0
    return
  }
  # shellcheck disable=SC2046  # word splitting of the PID list is intended
  proc_cpu_ticks $(descendants "$@")
}

# machine_busy_ticks: busy ticks of all CPUs since boot (user+nice+system+irq+softirq+steal).
machine_busy_ticks() {
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# ---------------------------------------------------------------------------------------------
# Syscall counting. SYSCALLS=auto (perf if the raw_syscalls tracepoint works, else n/a),
# perf, strace (ptrace: slows the pooler a lot, distorts CPU and TPS; only on request), off.

: "${SYSCALLS:=auto}"
SYSCALL_TOOL=""

detect_syscall_tool() {
  case "$SYSCALLS" in
  off) SYSCALL_TOOL="" ;;
  strace)
    command -v strace >/dev/null || die "SYSCALLS=strace but strace is not installed"
    SYSCALL_TOOL=strace
    ;;
  auto | perf)
    if command -v perf >/dev/null &&
      perf stat -x, -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
      SYSCALL_TOOL=perf
    elif [[ "$SYSCALLS" == perf ]]; then
      die "perf cannot count raw_syscalls:sys_enter here (install linux-perf; check" \
        "kernel.perf_event_paranoid and tracefs)"
    else
      log "perf with raw_syscalls:sys_enter unavailable: syscalls/transaction will be n/a"
      SYSCALL_TOOL=""
    fi
    ;;
  *) die "SYSCALLS must be auto, perf, strace or off" ;;
  esac
}

SYSCOUNT_PID=""
SYSCOUNT_OUT=""

# syscount_start OUTFILE PID...: start counting the syscalls of the PIDs (all their threads).
syscount_start() {
  SYSCOUNT_OUT=$1
  shift
  SYSCOUNT_PID=""
  [[ -n "$SYSCALL_TOOL" && $# -gt 0 ]] || return 0
  local pids=$*
  case "$SYSCALL_TOOL" in
  perf)
    perf stat -x, -o "$SYSCOUNT_OUT" -e raw_syscalls:sys_enter -p "${pids// /,}" \
      >/dev/null 2>&1 &
    ;;
  strace)
    local args=() p
    for p in $pids; do args+=(-p "$p"); done
    strace -c -f -o "$SYSCOUNT_OUT" "${args[@]}" >/dev/null 2>&1 &
    ;;
  esac
  SYSCOUNT_PID=$!
  # perf stat installs its own SIGINT handler (background jobs start with SIGINT ignored) and
  # prints its counts on it; strace detaches and prints its summary on SIGTERM.
  if [[ "$SYSCALL_TOOL" == perf ]]; then
    track_pid "$SYSCOUNT_PID" INT
  else
    track_pid "$SYSCOUNT_PID" TERM
  fi
  sleep 0.5 # let it attach before the load starts
}

# syscount_stop: stop the counter and print the count (or n/a).
syscount_stop() {
  if [[ -z "$SYSCOUNT_PID" ]]; then
    echo n/a
    return
  fi
  stop_pid "$SYSCOUNT_PID" 10
  SYSCOUNT_PID=""
  local n=""
  case "$SYSCALL_TOOL" in
  perf) n=$(awk -F, '$3 ~ /raw_syscalls:sys_enter/ { print $1 }' "$SYSCOUNT_OUT" 2>/dev/null) ;;
  strace) n=$(awk '$NF == "total" { print $4 }' "$SYSCOUNT_OUT" 2>/dev/null) ;;
  esac
  if [[ "$n" =~ ^[0-9]+$ ]]; then echo "$n"; else echo n/a; fi
}

# ---------------------------------------------------------------------------------------------
# pgbench

# metric_sum HOST:PORT NAME: the sum of metric NAME's samples (every worker's) on the /metrics
# endpoint at HOST:PORT now; 0 when the address is empty or does not answer.
metric_sum() {
  local host=${1%:*} port=${1#*:} sum
  [[ -n "$1" ]] || {
    echo 0
    return
  }
  exec 3<>"/dev/tcp/$host/$port" || {
    echo 0
    return
  }
  printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3
  sum=$(awk -v m="$2" 'index($0, m) == 1 && substr($0, length(m) + 1, 1) ~ /[{ ]/ { s += $NF }
    END { printf "%d\n", s }' <&3)
  exec 3>&-
  echo "$sum"
}

# warm_up CLIENTS SECONDS NAME...: a pgbench run of SECONDS at CLIENTS through each target, with
# the caller's `pgbench_args CLIENTS PORT ROLE SECONDS` and role b_NAME; dies if one fails.
warm_up() {
  local clients=$1 seconds=$2 name
  shift 2
  ((seconds > 0)) || return 0
  for name in "$@"; do
    log "warm-up $name: ${seconds}s at $clients clients"
    # shellcheck disable=SC2046
    run_pgbench "$BENCH_TMP/warmup-$name.out" \
      $(pgbench_args "$clients" "${TARGET_PORT[$name]}" "b_$name" "$seconds") ||
      die "warm-up through $name failed; see $BENCH_TMP/warmup-$name.out"
  done
}

# run_pgbench OUTFILE ARGS...: run pgbench, output to OUTFILE. Sets BENCH_TICKS to pgbench's
# own CPU (user+sys ticks, from `times` in a subshell whose only child is pgbench); returns
# pgbench's exit status.
BENCH_TICKS=0
run_pgbench() {
  local out=$1 rc
  shift
  (
    rc=0
    "$PG_BINDIR/pgbench" "$@" >"$out" 2>&1 || rc=$?
    # `times` must run in this shell (not a pipeline child, whose counters start at 0).
    times >"$out.times"
    exit $rc
  )
  rc=$?
  # Second line of `times`: children's user and system time, e.g. "0m1.230s 0m0.450s".
  BENCH_TICKS=$(awk -v tck="$CLK_TCK" 'NR == 2 {
      s = 0
      for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
      printf "%d\n", s * tck + 0.5 }' "$out.times")
  return $rc
}

# pgbench_field FILE NAME: one figure from pgbench's summary.
#   tps, processed, failed, latency, aborted (0/1)
pgbench_field() {
  local file=$1 name=$2
  case "$name" in
  tps) awk '/^tps = / { print $3; exit }' "$file" ;;
  processed) awk -F': ' '/^number of transactions actually processed/ { print $2 + 0; exit }' "$file" ;;
  failed) awk '/^number of failed transactions/ { print $5 + 0; f = 1; exit } END { if (!f) print 0 }' "$file" ;;
  latency) awk '/^latency average = / { print $4; exit }' "$file" ;;
  aborted) if grep -qiE 'aborted|run was aborted' "$file"; then echo 1; else echo 0; fi ;;
  esac
}

# raise_fd_limit: poolers with max_client_conn 10000 want that many descriptors.
raise_fd_limit() {
  local hard
  hard=$(ulimit -Hn)
  if [[ "$hard" == unlimited ]]; then hard=1048576; fi
  ulimit -n "$hard" 2>/dev/null || true
}
