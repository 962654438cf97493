#!/usr/bin/env bash
# pgbench -S spread unevenly over three "pods" (one pgfleet each, on 127.0.0.2, .3 and .4) in
# front of one PostgreSQL whose fleet-wide budget is max_db_connections=BUDGET, run twice in one
# invocation on the same data:
#   static      each pod holds BUDGET/3 server connections (the static split with three pods;
#               no controller);
#   controller  pgfleet-controller splits BUDGET by demand (issue 6, docs/architecture.md,
#               "Connection budget").
# Prints TPS per pod and in total, and the most pooler connections PostgreSQL showed
# (pg_stat_activity sampled every 100 ms), which must never exceed BUDGET.
#
#   bench/controller_split.sh
#   DURATION=20 ROUNDS=2 CLIENTS="45 3 2" BUDGET=12 bench/controller_split.sh
#
# Settings (environment):
#   DURATION   seconds of each measured pgbench run (default 15)
#   WARMUP     seconds of load before measuring: the controller grants nothing until a lease
#              has passed after its start, then shares settle (default 8)
#   ROUNDS     static/controller pairs, alternating (default 1)
#   CLIENTS    pgbench clients on pods A, B and C (default "45 3 2": 90 % on A)
#   BUDGET     max_db_connections for the fleet (default 12)
#   SCALE      pgbench scale (default 10)
#   WORKERS    workers per pod (default 1)
#   WORKLOAD   select: pgbench -S (default); sleep: -S plus SLEEP_MS of server time per
#              transaction (SELECT pg_sleep), so throughput follows the number of server
#              connections rather than CPU
#   SLEEP_MS   server time per transaction with WORKLOAD=sleep (default 2)
#   PGFLEET_CONTROLLER_BIN  (default build/cmd/pgfleet-controller/pgfleet-controller)
# and those of bench/lib.sh (PGFLEET_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP).
set -euo pipefail
# Enough server connections per pool for a pod to use the whole budget (lib.sh's default is 20).
: "${POOL_SIZE:=50}"
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

: "${DURATION:=15}"
: "${WARMUP:=8}"
: "${ROUNDS:=1}"
: "${CLIENTS:=45 3 2}"
: "${BUDGET:=12}"
: "${SCALE:=10}"
: "${WORKERS:=1}"
: "${WORKLOAD:=select}"
: "${SLEEP_MS:=2}"
: "${PGFLEET_CONTROLLER_BIN:=$BENCH_REPO_DIR/build/cmd/pgfleet-controller/pgfleet-controller}"
read -r -a CLIENT_COUNTS <<<"$CLIENTS"
PODS=(A B C)
ADDRS=(127.0.0.2 127.0.0.3 127.0.0.4)
DB=bench

check_binaries
make_tmpdir
install_cleanup_trap
pgfleet_private_copy
[[ -x "$PGFLEET_CONTROLLER_BIN" ]] || die "pgfleet-controller not found at $PGFLEET_CONTROLLER_BIN"
cp "$PGFLEET_CONTROLLER_BIN" "$BENCH_TMP/bin/pgfleet-controller"
CONTROLLER_BIN="$BENCH_TMP/bin/pgfleet-controller"
echo "bench-token-$RANDOM$RANDOM$RANDOM" >"$BENCH_TMP/token"
case $WORKLOAD in
  select) SCRIPT="-S" ;;
  sleep)
    printf '%s\n' '\set aid random(1, 100000 * :scale)' \
      'SELECT abalance FROM pgbench_accounts WHERE aid = :aid;' \
      "SELECT pg_sleep($SLEEP_MS / 1000.0);" >"$BENCH_TMP/select_sleep.sql"
    SCRIPT="-f $BENCH_TMP/select_sleep.sql"
    ;;
  *) die "WORKLOAD must be select or sleep" ;;
esac

echo "== controller_split: pgbench ($WORKLOAD) over 3 pods, demand-aware vs static split"
machine_info
echo "settings:    budget=$BUDGET clients(A B C)=[$CLIENTS] duration=${DURATION}s warmup=${WARMUP}s" \
  "workload=$WORKLOAD sleep_ms=$SLEEP_MS rounds=$ROUNDS workers/pod=$WORKERS pool_size=$POOL_SIZE scale=$SCALE" \
  "controller(lease_timeout=6s renew_interval=500ms)"

pg_start 200
pg_init_bench "$DB" "$SCALE"

CONTROLLER_PORT=""
CONTROLLER_PID=""
controller_start() {
  local dir="$BENCH_TMP/controller"
  mkdir -p "$dir"
  free_port
  CONTROLLER_PORT=$FREE_PORT
  free_port
  cat >"$dir/pgfleet.yaml" <<EOF
databases:
  $DB: {host: 127.0.0.1, port: $PG_PORT, max_db_connections: $BUDGET}
peering: {token_file: $BENCH_TMP/token}
controller:
  listen: 127.0.0.1:$CONTROLLER_PORT
  lease_timeout: 6s
  renew_interval: 500ms
metrics: {listen: "127.0.0.1:$FREE_PORT"}
EOF
  "$CONTROLLER_BIN" --config "$dir/pgfleet.yaml" >"$dir/controller.log" 2>&1 &
  CONTROLLER_PID=$!
  track_pid "$CONTROLLER_PID" TERM
  wait_for_port "$CONTROLLER_PORT" "$CONTROLLER_PID" 30 || die "controller did not start"
}

# pod_start MODE INDEX: pod PODS[INDEX] on ADDRS[INDEX]; MODE static or controller.
declare -A POD_PORT=() POD_PID=()
pod_start() {
  local mode=$1 i=$2 name=${PODS[$2]} addr=${ADDRS[$2]} dir port peering budget extra=""
  dir="$BENCH_TMP/$mode-$name"
  mkdir -p "$dir"
  free_port
  port=$FREE_PORT
  free_port
  peering=$FREE_PORT
  if [[ $mode == static ]]; then
    budget=$((BUDGET / 3 + (i < BUDGET % 3 ? 1 : 0)))
  else
    budget=$BUDGET
    extra="controller: {address: 127.0.0.1:$CONTROLLER_PORT}"
  fi
  cat >"$dir/pgfleet.yaml" <<EOF
listen: {address: $addr, port: $port}
workers: $WORKERS
databases:
  $DB: {host: 127.0.0.1, port: $PG_PORT, max_db_connections: $budget}
pool:
  pool_mode: transaction
  default_pool_size: $POOL_SIZE
  max_client_conn: 10000
auth: {type: trust}
log: {level: info, log_connections: false, log_disconnections: false}
metrics: {listen: ""}
peering: {listen: "$addr:$peering", token_file: $BENCH_TMP/token}
$extra
EOF
  "$PGFLEET_BIN" --config "$dir/pgfleet.yaml" >"$dir/pgfleet.log" 2>&1 &
  POD_PID[$name]=$!
  POD_PORT[$name]=$port
  track_pid "${POD_PID[$name]}" TERM
  local k
  for ((k = 0; k < 100; k++)); do
    (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  die "pod $name did not start; see $dir/pgfleet.log"
}

# sample_conns FILE: server connections to DB PostgreSQL shows, every 100 ms, until killed.
sample_conns() {
  while true; do
    psql_direct "SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB' AND
      backend_type = 'client backend'" \
      >>"$1" 2>/dev/null || true
    sleep 0.1
  done
}

# run_phase MODE: start the pods (and the controller), load them, measure, stop them.
declare -A RESULT=()
run_phase() {
  local mode=$1 round=$2
  local i name pids=() samples="$BENCH_TMP/$1-$2.samples" sampler
  [[ $mode == controller ]] && controller_start
  for i in 0 1 2; do pod_start "$mode" "$i"; done
  sample_conns "$samples" &
  sampler=$!
  track_pid "$sampler" TERM
  for i in 0 1 2; do
    name=${PODS[$i]}
    # shellcheck disable=SC2086  # SCRIPT is a pgbench option list
    # The clients name their pod; pgfleet sets that application_name on the server connection
    # it lends them, so pg_stat_activity tells the pods apart.
    PGAPPNAME="pod$name" "$PG_BINDIR/pgbench" -n $SCRIPT -c "${CLIENT_COUNTS[$i]}" -j 1 -T $((WARMUP + DURATION)) \
      -P 1 -h "${ADDRS[$i]}" -p "${POD_PORT[$name]}" -U postgres "$DB" \
      >"$BENCH_TMP/$mode-$round-$name.out" 2>&1 &
    pids+=($!)
  done
  # Mid-run, after the warm-up: how the connections are spread over the pods.
  sleep "$((WARMUP + DURATION / 2))"
  RESULT[$mode-$round-spread]=$(psql_direct "SELECT string_agg(application_name || '=' || n, ' '
    ORDER BY application_name) FROM (SELECT application_name, count(*) n FROM pg_stat_activity
    WHERE application_name LIKE 'pod_' GROUP BY 1) s")
  for pid in "${pids[@]}"; do wait "$pid" || true; done
  stop_pid "$sampler" 5
  RESULT[$mode-$round-max]=$(sort -n "$samples" | tail -n 1)
  local total=0 tps
  for i in 0 1 2; do
    name=${PODS[$i]}
    # pgbench's overall tps includes the warm-up: average its per-second progress reports
    # after the warm-up instead.
    tps=$(awk -v w="$WARMUP" '/^progress: / && $2 + 0 > w {sum += $4; n++}
      END {if (n) printf "%.1f", sum / n}' "$BENCH_TMP/$mode-$round-$name.out")
    [[ -n "$tps" ]] || die "pgbench on pod $name failed: $(tail -n 3 "$BENCH_TMP/$mode-$round-$name.out")"
    RESULT[$mode-$round-$name]=$tps
    total=$(awk -v a="$total" -v b="$tps" 'BEGIN {printf "%.0f", a + b}')
  done
  RESULT[$mode-$round-total]=$total
  for name in "${PODS[@]}"; do stop_pid "${POD_PID[$name]}" 20; done
  [[ $mode == controller ]] && stop_pid "$CONTROLLER_PID" 10
  log "$mode round $round: total $total tps, spread ${RESULT[$mode-$round-spread]}," \
    "max conns ${RESULT[$mode-$round-max]}"
}

for ((r = 1; r <= ROUNDS; r++)); do
  run_phase static "$r"
  run_phase controller "$r"
done

echo
printf '%-11s %5s %10s %10s %10s %10s %9s  %s\n' split round "A tps" "B tps" "C tps" total \
  "max conn" "server connections mid-run"
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in static controller; do
    printf '%-11s %5s %10.0f %10.0f %10.0f %10s %9s  %s\n' "$mode" "$r" \
      "${RESULT[$mode-$r-A]}" "${RESULT[$mode-$r-B]}" "${RESULT[$mode-$r-C]}" \
      "${RESULT[$mode-$r-total]}" "${RESULT[$mode-$r-max]}/$BUDGET" \
      "${RESULT[$mode-$r-spread]}"
  done
done
for ((r = 1; r <= ROUNDS; r++)); do
  awk -v s="${RESULT[static-$r-total]}" -v c="${RESULT[controller-$r-total]}" -v r="$r" \
    'BEGIN {printf "round %d: demand-aware / static total tps = %.2f\n", r, c / s}'
done
