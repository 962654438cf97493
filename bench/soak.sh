#!/usr/bin/env bash
# Soak pgfleet with pgbench: select-only (-S), tpcb-like (the default script: UPDATEs and an
# INSERT in a transaction) and tpcb-like over the extended protocol (-M extended), each for
# DURATION seconds with CLIENTS clients, through one pgfleet in transaction pooling mode.
# Exits 1 if any run has failed transactions, errors, aborted clients, a stalled progress
# interval (0 tps), or if pgfleet died. Prints one summary line per run.
#
# Environment (all optional):
#   DURATION=30          seconds per run
#   CLIENTS=64           pgbench clients (more than POOL_SIZE, so clients queue for servers)
#   RUNS="select tpcb extended"   any of: select, tpcb, extended, prepared (tpcb-like over
#                        -M prepared: named statements through transaction pooling)
#   POOL_SIZE=20, MAX_CLIENT_CONN=10000, WORKERS=1 (`workers:` in pgfleet's config)
#   SCALE=10             pgbench scale factor
#   JOBS                 pgbench threads (default: nproc/2, at least 1)
#   PROGRESS=5           pgbench -P interval in seconds (stall detection)
#   PGFLEET_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP: see lib.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${DURATION:=30}"
: "${CLIENTS:=64}"
: "${RUNS:=select tpcb extended}"
: "${WORKERS:=1}"
: "${SCALE:=10}"
: "${PROGRESS:=5}"
DB=bench
ROLE=b_soak

check_binaries
raise_fd_limit
make_tmpdir
install_cleanup_trap
pgfleet_private_copy

echo "== soak: pgbench through pgfleet"
machine_info
jobs=${JOBS:-$(($(nproc) / 2))}
((jobs >= 1)) || jobs=1
((jobs <= CLIENTS)) || jobs=$CLIENTS
echo "settings:    runs=[$RUNS] duration=${DURATION}s clients=$CLIENTS pgbench_threads=$jobs" \
  "pool_mode=transaction pool_size=$POOL_SIZE workers=$WORKERS scale=$SCALE"
echo "postgres:    fsync=off synchronous_commit=off full_page_writes=off autovacuum=off" \
  "(benchmark-only cluster)"
echo

max_conn=$((WORKERS * POOL_SIZE + 50))
((max_conn >= 300)) || max_conn=300
pg_start "$max_conn"
pg_init_bench "$DB" "$SCALE"
pg_create_role "$ROLE"
pgfleet_start pgfleet "$WORKERS" "$DB"
port=${TARGET_PORT[pgfleet]}

failures=0
summaries=()
for run in $RUNS; do
  case "$run" in
  select) args=(-S -M simple) ;;
  tpcb) args=(-M simple) ;;
  extended) args=(-M extended) ;;
  prepared) args=(-M prepared) ;;
  *) die "unknown run '$run' (select, tpcb, extended, prepared)" ;;
  esac
  out="$BENCH_TMP/soak-$run.out"
  log "run $run: pgbench ${args[*]} -c $CLIENTS -j $jobs -T $DURATION"
  rc=0
  run_pgbench "$out" -n "${args[@]}" -c "$CLIENTS" -j "$jobs" -T "$DURATION" -P "$PROGRESS" \
    -h 127.0.0.1 -p "$port" -U "$ROLE" "$DB" || rc=$?
  tps=$(pgbench_field "$out" tps)
  processed=$(pgbench_field "$out" processed)
  failed=$(pgbench_field "$out" failed)
  aborted=$(pgbench_field "$out" aborted)
  latency=$(pgbench_field "$out" latency)
  errors=$(grep -ciE 'error|fatal' "$out" || true)
  # Progress lines: "progress: 5.0 s, 1234.5 tps, lat ...". Count intervals at 0 tps.
  stalls=$(awk '/^progress: / { n++; if ($4 + 0 == 0) z++ } END { print z + 0 }' "$out")
  min_tps=$(awk '/^progress: / { if (m == "" || $4 + 0 < m) m = $4 + 0 } END { print (m == "" ? "n/a" : m) }' "$out")
  status=ok
  if [[ $rc -ne 0 || -z "$processed" || "$processed" -eq 0 || "$failed" -ne 0 ||
    "$aborted" -ne 0 || "$errors" -ne 0 || "$stalls" -ne 0 ]]; then
    status=FAIL
    failures=$((failures + 1))
    log "run $run failed (pgbench rc=$rc); pgbench said:"
    grep -iE 'error|fatal|abort' "$out" | head -n 10 >&2 || true
  fi
  if ! kill -0 "${TARGET_PID[pgfleet]}" 2>/dev/null; then
    status=FAIL
    failures=$((failures + 1))
    log "pgfleet died during run $run; log tail:"
    tail -n 20 "${TARGET_LOGS[pgfleet]}" >&2 || true
  fi
  line=$(printf '%-8s %-4s tps=%-9s transactions=%-9s failed=%s aborted=%s errors=%s latency_ms=%s min_interval_tps=%s stalled_intervals=%s rc=%s' \
    "$run" "$status" "$(printf '%.0f' "${tps:-0}")" "${processed:-0}" "$failed" "$aborted" \
    "$errors" "${latency:-n/a}" "$min_tps" "$stalls" "$rc")
  summaries+=("$line")
  echo "$line"
  if ! kill -0 "${TARGET_PID[pgfleet]}" 2>/dev/null; then
    break
  fi
done

echo
echo "== soak summary (${DURATION}s per run, $CLIENTS clients, $(nproc) cores)"
printf '%s\n' "${summaries[@]}"
echo "server connections held by pgfleet after the runs: $(pg_server_conns "$ROLE") (pool_size $POOL_SIZE)"
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
logf=${TARGET_LOGS[pgfleet]}
bad=$(grep -cE 'level=(error|warn)' "$logf" || true)
echo "pgfleet log: $(wc -l <"$logf") lines, $bad at level error/warn"
if [[ "$bad" != 0 ]]; then
  grep -E 'level=(error|warn)' "$logf" | head -n 10 | sed 's/^/  /'
fi
if ((failures > 0)); then
  echo "FAILED: $failures problem(s); logs kept in $BENCH_TMP"
  exit 1
fi
echo "PASSED"
