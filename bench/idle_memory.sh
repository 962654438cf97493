#!/usr/bin/env bash
# Memory per idle client connection, pgfleet vs PgBouncer (same pool settings), in one run.
# For each pooler: the RSS and PSS of all its processes (pgfleet: supervisor + workers) with no
# client, after WARM_CLIENTS clients (first-use costs: pools, server connections, caches), and
# after CLIENTS more clients that completed the login (startup, authentication, ReadyForQuery)
# and then stay idle. Bytes per idle client = (after - warm) / CLIENTS. Then every client is
# checked to be still connected and unanswered, and the extrapolation to 100,000 idle clients
# is compared with issue 8's target (under 512 MiB RSS per pod).
#
# Environment (all optional):
#   CLIENTS=10000        idle clients per pooler (PgBouncer holds them all in one process, so
#                        the fd limit, `ulimit -n`, must exceed CLIENTS + WARM_CLIENTS + 200)
#   WARM_CLIENTS=100     clients opened before the baseline and kept open
#   WORKERS=2            `workers:` in pgfleet's config
#   TARGETS="pgfleet pgbouncer"   which poolers, measured one after the other (pgfleet first)
#   SOURCES=16           client source addresses 127.0.0.2 .. 127.0.0.(SOURCES+1)
#   CONCURRENCY=128      logins in flight per client process (15,000 connections per process)
#   SETTLE=2             seconds to wait after the logins before sampling memory
#   TIMEOUT=600          seconds all logins of one pooler may take
#   POOL_SIZE=20, MAX_CLIENT_CONN (default CLIENTS + WARM_CLIENTS + 100): see lib.sh
#   PGFLEET_BIN, PGBOUNCER_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP: see lib.sh
#   PYTHON               python3 for the client (default /usr/bin/python3, else python3)
set -euo pipefail

: "${CLIENTS:=10000}"
: "${WARM_CLIENTS:=100}"
: "${MAX_CLIENT_CONN:=$((CLIENTS + WARM_CLIENTS + 100))}"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${WORKERS:=2}"
: "${TARGETS:=pgfleet pgbouncer}"
: "${SOURCES:=16}"
: "${CONCURRENCY:=128}"
: "${SETTLE:=2}"
: "${TIMEOUT:=600}"
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=/usr/bin/python3
  [[ -x "$PYTHON" ]] || PYTHON=python3
fi
TARGET_100K=100000
TARGET_MIB=512
DB=bench

[[ "$CLIENTS" =~ ^[0-9]+$ && $CLIENTS -ge 1 ]] || die "CLIENTS must be a positive number"
[[ "$WARM_CLIENTS" =~ ^[0-9]+$ && $WARM_CLIENTS -ge 1 ]] || die "WARM_CLIENTS must be >= 1"
for t in $TARGETS; do
  [[ "$t" == pgfleet || "$t" == pgbouncer ]] || die "bad target '$t' (pgfleet, pgbouncer)"
done
"$PYTHON" -c 'import asyncio' 2>/dev/null || die "no usable python3 ($PYTHON)"

check_binaries
raise_fd_limit
# The client processes hold at most 15,000 sockets each; a PgBouncer holds every client itself,
# a pgfleet worker its share (the kernel spreads connections evenly over the workers; 25 % slack).
fd_limit=$(ulimit -n)
fd_need=$((CLIENTS + WARM_CLIENTS + 200))
[[ " $TARGETS " == *" pgbouncer "* ]] ||
  fd_need=$(((CLIENTS + WARM_CLIENTS) * 5 / (4 * WORKERS) + 200))
((fd_limit >= fd_need)) ||
  die "ulimit -n is $fd_limit (hard $(ulimit -Hn)); CLIENTS=$CLIENTS needs $fd_need." \
    "Lower CLIENTS or raise the hard limit (e.g. LimitNOFILE, /etc/security/limits.conf)"
((fd_limit >= 15200)) || die "ulimit -n is $fd_limit; the client processes need 15,200"
((MAX_CLIENT_CONN >= CLIENTS + WARM_CLIENTS)) ||
  die "MAX_CLIENT_CONN=$MAX_CLIENT_CONN is below CLIENTS + WARM_CLIENTS"
make_tmpdir
install_cleanup_trap
if [[ " $TARGETS " == *" pgfleet "* ]]; then
  pgfleet_private_copy
fi

echo "== idle_memory: memory per idle client connection (logged in, then idle)"
machine_info
echo "settings:    clients=$CLIENTS warm_clients=$WARM_CLIENTS targets=[$TARGETS]" \
  "pgfleet_workers=$WORKERS pool_mode=transaction pool_size=$POOL_SIZE" \
  "max_client_conn=$MAX_CLIENT_CONN auth=trust sources=$SOURCES ulimit_n=$fd_limit"
echo

pg_start 100
psql_direct "CREATE DATABASE $DB" >/dev/null || die "CREATE DATABASE $DB failed"

# ---------------------------------------------------------------------------------------------
# Memory of a set of processes, in kB.

# proc_mem_kb FIELD PID...: VmRSS (from status) or Pss (from smaps_rollup), summed.
proc_mem_kb() {
  local field=$1 pid v total=0 file
  shift
  for pid in "$@"; do
    if [[ "$field" == Pss ]]; then file=/proc/$pid/smaps_rollup; else file=/proc/$pid/status; fi
    v=$(awk -v f="$field:" '$1 == f { print $2; exit }' "$file" 2>/dev/null) || v=0
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

# ---------------------------------------------------------------------------------------------
# Idle client processes (bench/idle_clients.py); each prints READY, then CHECK per SIGUSR1.

CLIENT_PID=""
CLIENT_OUT=""
CLIENT_ESTABLISHED=0
CLIENT_LINE=""

# clients_open LABEL PORT USER COUNT: start COUNT idle clients, wait (bounded) until every
# login has finished. Sets CLIENT_PID, CLIENT_OUT, CLIENT_ESTABLISHED, CLIENT_LINE.
clients_open() {
  local label=$1 port=$2 user=$3 count=$4 i
  CLIENT_OUT="$BENCH_TMP/clients-$label.out"
  "$PYTHON" "$BENCH_LIB_DIR/idle_clients.py" --port "$port" --user "$user" --dbname "$DB" \
    --clients "$count" --sources "$SOURCES" --concurrency "$CONCURRENCY" \
    --timeout "$TIMEOUT" --hold $((TIMEOUT * 4)) >"$CLIENT_OUT" 2>"$CLIENT_OUT.err" &
  CLIENT_PID=$!
  track_pid "$CLIENT_PID" TERM
  for ((i = 0; i < (TIMEOUT + 30) * 10; i++)); do
    grep -qE '^(READY|ERROR)' "$CLIENT_OUT" && break
    kill -0 "$CLIENT_PID" 2>/dev/null || break
    sleep 0.1
  done
  CLIENT_LINE=$(grep -E '^(READY|ERROR)' "$CLIENT_OUT" | head -n 1 || true)
  [[ "$CLIENT_LINE" == READY* ]] ||
    die "$label: clients did not finish logging in: ${CLIENT_LINE:-no answer}" \
      "$(tail -n 5 "$CLIENT_OUT.err")"
  CLIENT_ESTABLISHED=$(sed -E 's/.*established=([0-9]+).*/\1/' <<<"$CLIENT_LINE")
}

# clients_check PID OUT: ask the client process whether all its connections are still open and
# silent; prints "alive dead".
clients_check() {
  local pid=$1 out=$2 before i
  before=$(grep -c '^CHECK' "$out" || true)
  kill -USR1 "$pid"
  for ((i = 0; i < 600; i++)); do
    (($(grep -c '^CHECK' "$out" || true) > before)) && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep '^CHECK' "$out" | tail -n 1 | sed -E 's/.*alive=([0-9]+) dead=([0-9]+).*/\1 \2/'
}

# ---------------------------------------------------------------------------------------------

declare -A RES=()
failures=0

# measure NAME LABEL USER: the three samples of one pooler, clients checked and closed after.
measure() {
  local name=$1 label=$2 user=$3 port=${TARGET_PORT[$1]} pids pids_after
  # shellcheck disable=SC2086
  pids=$(descendants ${TARGET_PIDS[$name]})
  local nprocs
  nprocs=$(wc -w <<<"$pids")
  sleep "$SETTLE"
  # shellcheck disable=SC2086
  local rss0 pss0 rss1 pss1 rss2 pss2
  # shellcheck disable=SC2086
  rss0=$(proc_mem_kb VmRSS $pids) pss0=$(proc_mem_kb Pss $pids)

  log "$label: $WARM_CLIENTS warm-up clients"
  clients_open "$name-warm" "$port" "$user" "$WARM_CLIENTS"
  local warm_pid=$CLIENT_PID warm_out=$CLIENT_OUT
  ((CLIENT_ESTABLISHED == WARM_CLIENTS)) || die "$label: warm-up: $CLIENT_LINE"
  sleep "$SETTLE"
  # shellcheck disable=SC2086
  rss1=$(proc_mem_kb VmRSS $pids) pss1=$(proc_mem_kb Pss $pids)

  log "$label: $CLIENTS idle clients"
  clients_open "$name-main" "$port" "$user" "$CLIENTS"
  local main_pid=$CLIENT_PID main_out=$CLIENT_OUT main_line=$CLIENT_LINE
  local established=$CLIENT_ESTABLISHED
  log "$label: $main_line"
  if ((established != CLIENTS)); then
    log "$label: only $established of $CLIENTS clients logged in"
    failures=$((failures + 1))
  fi
  sleep "$SETTLE"
  # shellcheck disable=SC2086
  rss2=$(proc_mem_kb VmRSS $pids) pss2=$(proc_mem_kb Pss $pids)
  local srv
  srv=$(pg_server_conns "$user")

  # Per process, for the record (pgfleet: how the kernel spread the clients over workers).
  local pid
  for pid in $pids; do
    log "$label: pid $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-60):" \
      "VmRSS $(proc_mem_kb VmRSS "$pid") kB, Pss $(proc_mem_kb Pss "$pid") kB," \
      "fds $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)"
  done

  local alive_w dead_w alive_m dead_m
  read -r alive_w dead_w <<<"$(clients_check "$warm_pid" "$warm_out")"
  read -r alive_m dead_m <<<"$(clients_check "$main_pid" "$main_out")"
  if [[ "${alive_w:-0}" -ne $WARM_CLIENTS || "${alive_m:-0}" -ne $established ]]; then
    log "$label: after sampling, alive=$((${alive_w:-0} + ${alive_m:-0}))" \
      "dead=$((${dead_w:-0} + ${dead_m:-0})) of $((WARM_CLIENTS + established)) clients"
    failures=$((failures + 1))
  fi
  # shellcheck disable=SC2086
  pids_after=$(descendants ${TARGET_PIDS[$name]})
  if [[ "$pids_after" != "$pids" ]]; then
    log "$label: processes changed during the run: [$pids] -> [$pids_after]"
    failures=$((failures + 1))
  fi
  stop_pid "$main_pid" 30
  stop_pid "$warm_pid" 30

  RES[$name|label]=$label
  RES[$name|procs]=$nprocs
  RES[$name|n]=$established
  RES[$name|srv]=$srv
  RES[$name|login_s]=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$main_line")
  RES[$name|rss0]=$rss0 RES[$name|rss1]=$rss1 RES[$name|rss2]=$rss2
  RES[$name|pss0]=$pss0 RES[$name|pss1]=$pss1 RES[$name|pss2]=$pss2
}

names=()
for t in $TARGETS; do
  case "$t" in
  pgfleet)
    pg_create_role idle_pgfleet
    pgfleet_start pgfleet "$WORKERS" "$DB"
    names+=(pgfleet)
    ;;
  pgbouncer)
    pg_create_role idle_pgbouncer
    pgbouncer_start pgbouncer 1 "$DB" idle_pgbouncer
    names+=(pgbouncer)
    ;;
  esac
done
for name in "${names[@]}"; do
  case "$name" in
  pgfleet) measure pgfleet "pgfleet w$WORKERS" idle_pgfleet ;;
  pgbouncer) measure pgbouncer "pgbouncer x1" idle_pgbouncer ;;
  esac
done

# ---------------------------------------------------------------------------------------------
# Report

mib() { awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }
per_client() { # AFTER_KB BEFORE_KB N -> bytes
  awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { if (n > 0) printf "%.0f", (a - b) * 1024 / n; else print "n/a" }'
}

echo
printf '%-14s %5s %8s %7s %10s %10s %10s %13s %13s %8s\n' target procs clients srv_conn \
  "base MiB" "warm MiB" "idle MiB" "RSS B/client" "PSS B/client" "login s"
for name in "${names[@]}"; do
  RES[$name|b_rss]=$(per_client "${RES[$name|rss2]}" "${RES[$name|rss1]}" "${RES[$name|n]}")
  RES[$name|b_pss]=$(per_client "${RES[$name|pss2]}" "${RES[$name|pss1]}" "${RES[$name|n]}")
  printf '%-14s %5s %8s %7s %10s %10s %10s %13s %13s %8s\n' "${RES[$name|label]}" \
    "${RES[$name|procs]}" "${RES[$name|n]}" "${RES[$name|srv]}" "$(mib "${RES[$name|rss0]}")" \
    "$(mib "${RES[$name|rss1]}")" "$(mib "${RES[$name|rss2]}")" "${RES[$name|b_rss]}" \
    "${RES[$name|b_pss]}" "${RES[$name|login_s]}"
done
echo "RSS: VmRSS summed over the pooler's processes (shared pages counted in each); PSS:"
echo "smaps_rollup Pss summed (shared pages split between the processes, close to what the pod's"
echo "memory cgroup charges). MiB: RSS with no client, with $WARM_CLIENTS, with $WARM_CLIENTS + $CLIENTS."
echo "B/client = (idle - warm) / clients. Kernel socket memory is not included."
echo
for name in "${names[@]}"; do
  # 100,000 clients: the memory with the warm-up clients plus 100,000 x the measured slope.
  for kind in rss pss; do
    RES[$name|x100k_$kind]=$(awk -v w="${RES[$name|${kind}1]}" -v b="${RES[$name|b_$kind]}" \
      -v n="$TARGET_100K" 'BEGIN { printf "%.1f", (w * 1024 + b * n) / 1048576 }')
  done
  verdict=$(awk -v m="${RES[$name|x100k_rss]}" -v t="$TARGET_MIB" \
    'BEGIN { print (m < t) ? "under" : "OVER" }')
  printf '%-14s %s idle clients extrapolated: %s MiB RSS (%s the %s MiB target), %s MiB PSS\n' \
    "${RES[$name|label]}" "$TARGET_100K" "${RES[$name|x100k_rss]}" "$verdict" "$TARGET_MIB" \
    "${RES[$name|x100k_pss]}"
done
if [[ -n "${RES[pgfleet|b_rss]:-}" && -n "${RES[pgbouncer|b_rss]:-}" ]]; then
  awk -v f="${RES[pgfleet|b_rss]}" -v b="${RES[pgbouncer|b_rss]}" 'BEGIN {
    if (b > 0) printf "pgfleet/pgbouncer bytes per idle client (RSS): %.2f\n", f / b }'
fi

if ((failures > 0)); then
  log "$failures problem(s): see above"
  exit 1
fi
