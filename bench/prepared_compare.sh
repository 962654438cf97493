#!/usr/bin/env bash
# pgbench -M prepared (protocol-level named prepared statements) through pgfleet, through
# PgBouncer and straight to PostgreSQL, in one run, all in transaction pooling mode with the
# same pool size. pgbench prepares each statement once per connection and then only sends
# Bind/Execute by name, so through a transaction-mode pooler the statement must follow the
# client to whichever server runs its next transaction. pgfleet does that (max_prepared_statements,
# default 200); PgBouncer 1.18 (Debian 12) cannot, and its errors are recorded, not hidden.
# Prints TPS, transactions, aborted clients, pooler CPU per transaction and every distinct error
# message per target; exits 1 if pgfleet or direct had any error or aborted client.
#
# Environment (all optional):
#   CLIENTS="20 64"      pgbench client counts; pgbench threads (-j) = clients, see below
#   DURATION=10          seconds per pgbench run
#   SCRIPTS="select-only tpcb-like"   pgbench builtin scripts (-b)
#   TARGETS="direct pgbouncer pgfleet"
#   POOL_SIZE=10         default_pool_size of both poolers (fewer servers than clients)
#   WORKERS=1            `workers:` in pgfleet's config
#   SCALE=10             pgbench scale factor
#   PGFLEET_BIN, PGBOUNCER_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP: see lib.sh
#
# -j equals -c: pgbench prepares synchronously per thread, so a thread blocked in one client's
# PQprepare while that client queues for a server stalls the thread's other clients, which may
# hold servers mid-transaction: with fewer threads than clients and fewer servers than clients,
# pgbench deadlocks itself (not a pooler bug; see RESULTS.md, soak.sh's prepared run).
set -euo pipefail

: "${POOL_SIZE:=10}"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLIENTS:=20 64}"
: "${DURATION:=10}"
: "${SCRIPTS:=select-only tpcb-like}"
: "${TARGETS:=direct pgbouncer pgfleet}"
: "${WORKERS:=1}"
: "${SCALE:=10}"
DB=bench

check_binaries
raise_fd_limit
make_tmpdir
install_cleanup_trap
if [[ " $TARGETS " == *" pgfleet "* ]]; then
  pgfleet_private_copy
fi

echo "== prepared_compare: pgbench -M prepared through pgfleet vs PgBouncer vs direct"
machine_info
echo "settings:    clients=[$CLIENTS] (pgbench -j = clients) duration=${DURATION}s" \
  "scripts=[$SCRIPTS] targets=[$TARGETS] pool_mode=transaction pool_size=$POOL_SIZE" \
  "pgfleet_workers=$WORKERS max_prepared_statements=200 (pgfleet default) scale=$SCALE"
echo "postgres:    fsync=off synchronous_commit=off full_page_writes=off autovacuum=off" \
  "(benchmark-only cluster)"
echo

max_clients=0
for c in $CLIENTS; do ((c > max_clients)) && max_clients=$c; done
max_conn=$((2 * WORKERS * POOL_SIZE + max_clients + 20))
((max_conn >= 300)) || max_conn=300
pg_start "$max_conn"
pg_init_bench "$DB" "$SCALE"
declare -A ROLE=() LABEL=()
for name in $TARGETS; do
  ROLE[$name]=b_$name
  pg_create_role "${ROLE[$name]}"
  case "$name" in
  direct)
    direct_target direct
    LABEL[direct]="postgres direct"
    ;;
  pgbouncer)
    pgbouncer_start pgbouncer 1 "$DB" "${ROLE[pgbouncer]}"
    LABEL[pgbouncer]="pgbouncer $("$PGBOUNCER_BIN" --version 2>&1 | awk 'NR == 1 { print $2 }')"
    ;;
  pgfleet)
    pgfleet_start pgfleet "$WORKERS" "$DB"
    LABEL[pgfleet]="pgfleet w$WORKERS"
    ;;
  *) die "bad target '$name' (direct, pgbouncer, pgfleet)" ;;
  esac
done

failures=0
rows=()
error_report=()
for script in $SCRIPTS; do
  for c in $CLIENTS; do
    for name in $TARGETS; do
      out="$BENCH_TMP/run-$name-$script-c$c.out"
      pids=""
      # shellcheck disable=SC2086  # a list of PIDs
      [[ -z "${TARGET_PIDS[$name]}" ]] || pids=$(descendants ${TARGET_PIDS[$name]})
      # shellcheck disable=SC2086
      p0=$(proc_cpu_ticks $pids)
      log "${LABEL[$name]}: -b $script -M prepared, $c clients for ${DURATION}s"
      rc=0
      run_pgbench "$out" -n -M prepared -b "$script" -c "$c" -j "$c" -T "$DURATION" \
        -h 127.0.0.1 -p "${TARGET_PORT[$name]}" -U "${ROLE[$name]}" "$DB" || rc=$?
      # shellcheck disable=SC2086
      p1=$(proc_cpu_ticks $pids)
      tps=$(pgbench_field "$out" tps)
      processed=$(pgbench_field "$out" processed)
      aborted=$(grep -c 'aborted in command' "$out" || true)
      nerr=$(grep -c 'ERROR: ' "$out" || true)
      if [[ "$name" == direct ]]; then
        cpu=n/a
      else
        cpu=$(awk -v t="$((p1 - p0))" -v n="${processed:-0}" -v h="$CLK_TCK" \
          'BEGIN { if (n > 0) printf "%.1f", t / h * 1e6 / n; else print "n/a" }')
      fi
      rows+=("$(printf '%-18s %-12s %7s %9s %12s %8s %7s %12s %4s' "${LABEL[$name]}" "$script" \
        "$c" "$(printf '%.0f' "${tps:-0}")" "${processed:-0}" "$aborted" "$nerr" "$cpu" "$rc")")
      if ((nerr > 0 || aborted > 0)); then
        error_report+=("${LABEL[$name]} -b $script -c $c:")
        while IFS= read -r line; do error_report+=("  $line"); done < <(
          sed -n 's/.*ERROR:  *//p' "$out" | sed 's/"P[0-9]*_[0-9]*"/"P<n>_<m>"/' |
            sort | uniq -c | sort -rn | head -n 5)
        [[ "$name" == pgbouncer ]] || failures=$((failures + 1))
      elif [[ $rc -ne 0 || -z "$processed" || "$processed" -eq 0 ]]; then
        error_report+=("${LABEL[$name]} -b $script -c $c: pgbench rc=$rc, no transactions")
        failures=$((failures + 1))
      fi
      for pid in ${TARGET_PIDS[$name]}; do
        kill -0 "$pid" 2>/dev/null || {
          error_report+=("${LABEL[$name]}: process $pid died")
          failures=$((failures + 1))
        }
      done
    done
  done
done

echo
echo "== results (pgbench -M prepared -j = clients, ${DURATION}s per run, $(nproc) cores)"
printf '%-18s %-12s %7s %9s %12s %8s %7s %12s %4s\n' target script clients TPS transactions \
  aborted errors pooler_us/tx rc
printf '%s\n' "${rows[@]}"
echo "(aborted: pgbench clients that stopped on an error; errors: ERROR lines in pgbench's"
echo " output; pooler_us/tx: the pooler's CPU (all processes) per processed transaction;"
echo " rc: pgbench's exit status, 2 when clients aborted)"
echo
echo "== errors (distinct messages, pgbench's statement names folded to P<n>_<m>)"
if ((${#error_report[@]} == 0)); then
  echo "none"
else
  printf '%s\n' "${error_report[@]}"
fi
if [[ " $TARGETS " == *" pgfleet "* ]]; then
  errs=$(grep -cE 'level=(warning|error)' "${TARGET_LOGS[pgfleet]}" || true)
  echo
  echo "pgfleet log: $errs warning/error line(s)"
  grep -E 'level=(warning|error)' "${TARGET_LOGS[pgfleet]}" | head -n 10 | sed 's/^/  /' || true
fi
echo
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
if ((failures > 0)); then
  echo "FAILED: $failures run(s) through pgfleet or direct had errors (logs kept in $BENCH_TMP)"
  exit 1
fi
