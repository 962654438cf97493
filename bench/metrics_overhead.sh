#!/usr/bin/env bash
# What collecting metrics costs: pgbench -S through two identical pgfleets in one run, one with
# metrics on (workers publish their stats snapshot every 500 ms, the supervisor serves /metrics,
# and a scraper fetches /metrics every SCRAPE_INTERVAL seconds, like Prometheus) and one with
# `metrics: {listen: ""}` (no snapshots, no endpoint). Runs are interleaved, alternating which
# goes first, so drift on the machine hits both. Prints TPS and pooler CPU per transaction for
# each, and the overhead (issue 5's target: under 2% of throughput).
#
# Environment (all optional):
#   CLIENTS=32           pgbench clients
#   DURATION=15          seconds per measured run
#   ROUNDS=3             measured runs per target (the overhead uses the sums over all rounds)
#   WARMUP=2             seconds of pgbench per target before measuring
#   WORKERS=2            `workers:` of both pgfleets
#   SCRAPE_INTERVAL=1    seconds between scrapes of the metrics-on pgfleet (0 = no scraper)
#   POOL_SIZE=20, MAX_CLIENT_CONN=10000, SCALE=10, JOBS (pgbench threads, default nproc/2)
#   PGFLEET_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP: see lib.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLIENTS:=32}"
: "${DURATION:=15}"
: "${ROUNDS:=3}"
: "${WARMUP:=2}"
: "${WORKERS:=2}"
: "${SCRAPE_INTERVAL:=1}"
: "${SCALE:=10}"
DB=bench

[[ -x "$PG_BINDIR/postgres" && -x "$PG_BINDIR/pgbench" ]] ||
  die "PostgreSQL server binaries and pgbench not found in PG_BINDIR=$PG_BINDIR"
raise_fd_limit
make_tmpdir
install_cleanup_trap
pgfleet_private_copy

jobs=${JOBS:-$(($(nproc) / 2))}
((jobs >= 1)) || jobs=1
((jobs <= CLIENTS)) || jobs=$CLIENTS
echo "== metrics_overhead: pgbench -S through pgfleet with metrics on vs off"
machine_info
echo "settings:    clients=$CLIENTS duration=${DURATION}s rounds=$ROUNDS warmup=${WARMUP}s" \
  "workers=$WORKERS scrape_interval=${SCRAPE_INTERVAL}s pool_size=$POOL_SIZE scale=$SCALE" \
  "pgbench_threads=$jobs"
echo

pg_start $((2 * POOL_SIZE + CLIENTS + 50))
pg_init_bench "$DB" "$SCALE"
for name in on off; do
  pg_create_role "role_$name"
  PGFLEET_METRICS=$name pgfleet_start "$name" "$WORKERS" "$DB"
done
[[ -n "${TARGET_METRICS[on]}" && -z "${TARGET_METRICS[off]}" ]] ||
  die "expected metrics on one pgfleet only"

pgbench_args() { # NAME SECONDS
  echo "-n -S -c $CLIENTS -j $jobs -T $2 -h 127.0.0.1 -p ${TARGET_PORT[$1]} -U role_$1 $DB"
}

# scraper HOST:PORT: GET /metrics every SCRAPE_INTERVAL seconds until killed.
scraper() {
  local host=${1%:*} port=${1#*:}
  while :; do
    if exec 3<>"/dev/tcp/$host/$port"; then
      printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3
      cat <&3 >/dev/null
      exec 3>&-
    fi
    sleep "$SCRAPE_INTERVAL"
  done
}

for name in on off; do
  # shellcheck disable=SC2046
  run_pgbench "$BENCH_TMP/warmup-$name.out" $(pgbench_args "$name" "$WARMUP") ||
    die "warm-up through pgfleet ($name) failed; see $BENCH_TMP/warmup-$name.out"
done

declare -A TX=() TICKS=() TPS=()
failures=0
SUP_TICKS=0
measure() { # NAME ROUND
  local name=$1 r=$2 out pids p0 p1 s0 scraper_pid="" rc=0
  out="$BENCH_TMP/run-$name-r$r.out"
  pids=$(descendants "${TARGET_PID[$name]}")
  if [[ "$name" == on && "$SCRAPE_INTERVAL" != 0 ]]; then
    scraper "${TARGET_METRICS[on]}" &
    scraper_pid=$!
    track_pid "$scraper_pid" TERM
  fi
  # shellcheck disable=SC2086
  p0=$(proc_cpu_ticks $pids)
  s0=$(proc_cpu_ticks "${TARGET_PID[on]}")  # the supervisor alone: the exporter's share
  # shellcheck disable=SC2046
  run_pgbench "$out" $(pgbench_args "$name" "$DURATION") || rc=$?
  # shellcheck disable=SC2046
  p1=$(proc_cpu_ticks $(descendants "${TARGET_PID[$name]}"))
  [[ -z "$scraper_pid" ]] || stop_pid "$scraper_pid" 2
  local processed failed aborted tps
  processed=$(pgbench_field "$out" processed)
  failed=$(pgbench_field "$out" failed)
  aborted=$(pgbench_field "$out" aborted)
  tps=$(pgbench_field "$out" tps)
  if [[ $rc -ne 0 || -z "$processed" || "$processed" -eq 0 || "$failed" -ne 0 || "$aborted" -ne 0 ]]; then
    log "run $name round $r: pgbench rc=$rc failed=$failed aborted=$aborted"
    failures=$((failures + 1))
  fi
  TX[$name]=$((${TX[$name]:-0} + ${processed:-0}))
  TICKS[$name]=$((${TICKS[$name]:-0} + p1 - p0))
  TPS[$name|$r]=${tps:-0}
  if [[ "$name" == on ]]; then
    SUP_TICKS=$((SUP_TICKS + $(proc_cpu_ticks "${TARGET_PID[on]}") - s0))
  fi
  printf '  round %d  metrics %-3s  tps %10.1f  transactions %9d  pooler CPU %6.1f us/tx\n' \
    "$r" "$name" "${tps:-0}" "${processed:-0}" \
    "$(awk -v t=$((p1 - p0)) -v n="${processed:-1}" -v h="$CLK_TCK" 'BEGIN { print t / h * 1e6 / (n ? n : 1) }')"
}

for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order="on off"; else order="off on"; fi
  for name in $order; do measure "$name" "$r"; done
done

# Per round, on/off from adjacent runs: drift on a shared machine cancels out of the median.
ratios=$(for ((r = 1; r <= ROUNDS; r++)); do
  awk -v a="${TPS[on|$r]}" -v b="${TPS[off|$r]}" 'BEGIN { if (b > 0) print a / b }'
done | sort -g)
median=$(awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }' <<<"$ratios")

echo
awk -v on="${TX[on]}" -v off="${TX[off]}" -v ton="${TICKS[on]}" -v toff="${TICKS[off]}" \
  -v h="$CLK_TCK" -v d="$DURATION" -v r="$ROUNDS" 'BEGIN {
    tps_on = on / (d * r); tps_off = off / (d * r)
    printf "metrics on:  %10.1f tps  %6.1f us CPU/tx\n", tps_on, ton / h * 1e6 / on
    printf "metrics off: %10.1f tps  %6.1f us CPU/tx\n", tps_off, toff / h * 1e6 / off
    printf "throughput overhead of metrics: %.2f%% (target: under 2%%)\n", (tps_off - tps_on) / tps_off * 100
    printf "CPU overhead of metrics:        %.2f%% per transaction\n", ((ton / on) / (toff / off) - 1) * 100
  }'
awk -v m="$median" -v sup="$SUP_TICKS" -v h="$CLK_TCK" -v on="${TX[on]}" 'BEGIN {
    printf "median per-round throughput overhead: %.2f%% (rounds are paired, so drift cancels)\n", (1 - m) * 100
    printf "supervisor (exporter, scrapes) CPU:   %.3f us per transaction\n", sup / h * 1e6 / on
  }'
((failures == 0)) || die "$failures run(s) failed; logs in $BENCH_TMP"
