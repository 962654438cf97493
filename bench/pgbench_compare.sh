#!/usr/bin/env bash
# pgbench -S through pgfleet and through PgBouncer (same pool settings), and straight to
# PostgreSQL as a reference, in one run, interleaved per client count. Prints TPS, the pooler's
# CPU per transaction and its syscalls per transaction, and pgfleet/PgBouncer ratios.
#
# Environment (all optional):
#   CLIENTS="32 128"     pgbench client counts
#   DURATION=15          seconds per measured pgbench run
#   ROUNDS=1             repeat the whole set; ratios use all rounds (sum CPU / sum transactions)
#   WARMUP=2             seconds of pgbench per target before measuring (fills the pools)
#   WORKERS=1            `workers:` in pgfleet's config
#   PGBOUNCER_PROCS=1    PgBouncer processes sharing the port with so_reuseport=1
#   TARGETS              default "direct pgbouncer:$PGBOUNCER_PROCS pgfleet:$WORKERS"; tokens are
#                        direct, pgbouncer:N (N processes), pgbouncer2:N (PGBOUNCER2_BIN, a
#                        newer PgBouncer built from its tag), pgdog:N (PGDOG_BIN, N worker
#                        threads), pgfleet:N (N workers),
#                        pgfleetpass:N (pgfleet with session_state: pass, i.e. no statement
#                        classification: what session-state tracking costs), pgfleetbase:N
#                        (PGFLEET_BASE_BIN, another build of pgfleet: a change's effect side by
#                        side, e.g. the parent commit's release build); the i-th pgfleet
#                        token is compared with the i-th pgbouncer, pgbouncer2, pgfleetpass and
#                        pgfleetbase tokens. Fleet run:
#                        TARGETS="direct pgbouncer:1 pgfleet:1 pgbouncer:16 pgfleet:16"
#   POOL_SIZE=20         default_pool_size (pgfleet and each PgBouncer process)
#   MAX_CLIENT_CONN=10000
#   SCALE=10             pgbench scale factor
#   JOBS                 pgbench threads (default: nproc/2, at least 1, at most clients)
#   PROTOCOL=simple      pgbench -M mode
#   RATE                 pgbench -R: every target serves the same transactions per second (all
#                        clients together), so CPU per transaction compares at the same load
#                        instead of at each target's saturation (warm-up runs are rate-limited too)
#   SYSCALLS=auto        auto | perf | strace | off (see lib.sh)
#   SYSCALL_PASS=separate  separate: count syscalls in an extra DURATION run per pooler and
#                        client count, so tracing never inflates the CPU figures; same: count
#                        during the CPU runs (shorter, but CPU/tx includes tracing overhead)
#   AUTH=trust           trust | md5 | scram: client authentication at every pooler (lib.sh)
#   CLIENT_TLS=off       on: every pooler requires TLS from clients; pgbench uses sslmode=require
#   PGFLEET_METRICS=on   off: pgfleet without its /metrics endpoint (lib.sh)
#   PROFILE=off          on: one more DURATION run per pooler and client count under `perf record`
#                        (the pooler's processes only; TPS/CPU come from the untraced runs), then
#                        where its CPU went: share of samples per binary/kernel and top symbols
#   PROFILE_TOP=25       symbols listed per profile
#   PROFILE_ARGS         more `perf record` options, e.g. "-g" for call graphs (with KEEP_TMP=1)
#   PGFLEET_BIN, PGBOUNCER_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP: see lib.sh
#   RESULTS_TSV          also write the raw per-run figures to this file
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLIENTS:=32 128}"
: "${DURATION:=15}"
: "${ROUNDS:=1}"
: "${WARMUP:=2}"
: "${WORKERS:=1}"
: "${PGBOUNCER_PROCS:=1}"
: "${TARGETS:=direct pgbouncer:$PGBOUNCER_PROCS pgfleet:$WORKERS}"
: "${SCALE:=10}"
: "${PROTOCOL:=simple}"
: "${RESULTS_TSV:=}"
: "${SYSCALL_PASS:=separate}"
[[ "$SYSCALL_PASS" == separate || "$SYSCALL_PASS" == same ]] ||
  die "SYSCALL_PASS must be separate or same"
DB=bench

check_binaries
detect_syscall_tool
raise_fd_limit
make_tmpdir
install_cleanup_trap
if [[ " $TARGETS " == *" pgfleet"* ]]; then
  pgfleet_private_copy
fi
if [[ " $TARGETS " == *" pgfleetbase:"* ]]; then
  [[ -x "${PGFLEET_BASE_BIN:-}" ]] || die "pgfleetbase targets need PGFLEET_BASE_BIN (a pgfleet binary)"
  mkdir -p "$BENCH_TMP/bin"
  cp "$PGFLEET_BASE_BIN" "$BENCH_TMP/bin/pgfleet-base" || die "cannot copy $PGFLEET_BASE_BIN"
  log "pgfleet base: private copy of $PGFLEET_BASE_BIN ($(sha256sum "$PGFLEET_BASE_BIN" | cut -c1-12))"
fi

echo "== pgbench_compare: pgbench -S through pgfleet vs PgBouncer vs direct"
machine_info
max_clients=0
for c in $CLIENTS; do ((c > max_clients)) && max_clients=$c; done
default_jobs=$(($(nproc) / 2))
((default_jobs >= 1)) || default_jobs=1
echo "settings:    clients=[$CLIENTS] duration=${DURATION}s rounds=$ROUNDS warmup=${WARMUP}s" \
  "targets=[$TARGETS] pool_mode=transaction pool_size=$POOL_SIZE" \
  "max_client_conn=$MAX_CLIENT_CONN scale=$SCALE protocol=$PROTOCOL rate=${RATE:-none}" \
  "pgbench_threads=${JOBS:-$default_jobs} syscalls=${SYSCALL_TOOL:-n/a}" \
  "syscall_pass=$SYSCALL_PASS auth=$AUTH client_tls=$CLIENT_TLS" \
  "pgfleet_metrics=${PGFLEET_METRICS:-on} profile=${PROFILE:-off}"
echo "postgres:    fsync=off synchronous_commit=off full_page_writes=off autovacuum=off" \
  "(benchmark-only cluster)"
echo

# Parse targets: name, label, kind, count.
names=()
declare -A LABEL=() KIND=() COUNT=() ROLE=()
pool_conns=0
for t in $TARGETS; do
  kind=${t%%:*}
  n=${t#*:}
  [[ "$t" == *:* ]] || n=1
  [[ "$n" =~ ^[0-9]+$ && $n -ge 1 ]] || die "bad target '$t'"
  case "$kind" in
  direct) name=direct label="postgres direct" ;;
  pgbouncer) name=pgbouncer_$n label="pgbouncer x$n" pool_conns=$((pool_conns + n * POOL_SIZE)) ;;
  pgbouncer2)
    [[ -n "${PGBOUNCER2_BIN:-}" ]] || die "target '$t' needs PGBOUNCER2_BIN"
    name=pgbouncer2_$n pool_conns=$((pool_conns + n * POOL_SIZE))
    label="pgbouncer-$("$PGBOUNCER2_BIN" --version 2>/dev/null | awk 'NR == 1 { print $2 }') x$n"
    ;;
  pgfleet) name=pgfleet_$n label="pgfleet w$n" pool_conns=$((pool_conns + n * POOL_SIZE)) ;;
  pgfleetpass)
    name=pgfleetpass_$n label="pgfleet w$n pass" pool_conns=$((pool_conns + n * POOL_SIZE))
    ;;
  pgdog) name=pgdog_$n label="pgdog t$n" pool_conns=$((pool_conns + POOL_SIZE)) ;;
  pgfleetbase)
    name=pgfleetbase_$n label="pgfleet base w$n" pool_conns=$((pool_conns + n * POOL_SIZE))
    ;;
  *) die "bad target '$t' (direct, pgbouncer:N, pgbouncer2:N, pgdog:N, pgfleet:N, pgfleetpass:N, pgfleetbase:N)" ;;
  esac
  [[ -z "${KIND[$name]:-}" ]] || die "target '$t' given twice"
  names+=("$name")
  LABEL[$name]=$label
  KIND[$name]=$kind
  COUNT[$name]=$n
  ROLE[$name]=b_$name
done

# Every pooler keeps its pool open while the others run; direct needs max(CLIENTS) on top.
max_conn=$((pool_conns + max_clients + 20))
((max_conn >= 300)) || max_conn=300
pg_start "$max_conn"
pg_init_bench "$DB" "$SCALE"
for name in "${names[@]}"; do
  pg_create_role "${ROLE[$name]}"
  case "${KIND[$name]}" in
  direct) direct_target "$name" ;;
  pgbouncer) pgbouncer_start "$name" "${COUNT[$name]}" "$DB" "${ROLE[$name]}" ;;
  pgbouncer2) pgbouncer_start "$name" "${COUNT[$name]}" "$DB" "${ROLE[$name]}" "$PGBOUNCER2_BIN" ;;
  pgdog) pgdog_start "$name" "${COUNT[$name]}" "$DB" "${ROLE[$name]}" ;;
  pgfleet) pgfleet_start "$name" "${COUNT[$name]}" "$DB" "" "${ROLE[$name]}" ;;
  pgfleetpass)
    PGFLEET_POOL_EXTRA="  session_state: pass" \
      pgfleet_start "$name" "${COUNT[$name]}" "$DB" "" "${ROLE[$name]}"
    ;;
  pgfleetbase)
    PGFLEET_BIN="$BENCH_TMP/bin/pgfleet-base" \
      pgfleet_start "$name" "${COUNT[$name]}" "$DB" "" "${ROLE[$name]}"
    ;;
  esac
done

pgbench_args() { # CLIENTS PORT ROLE SECONDS
  local c=$1 jobs=${JOBS:-$default_jobs}
  ((jobs <= c)) || jobs=$c
  echo "-n -S -M $PROTOCOL -c $c -j $jobs -T $4 ${RATE:+-R $RATE} -h 127.0.0.1 -p $2 -U $3 $DB"
}

# pooler_pids NAME: every PID of a pooler target right now (fleet workers included).
pooler_pids() {
  local pids=${TARGET_PIDS[$1]}
  [[ -n "$pids" ]] || return 0
  # shellcheck disable=SC2086
  descendants $pids
}

# env_run_pgbench NAME OUT ARGS...: run_pgbench with target NAME's client environment (TLS).
env_run_pgbench() {
  local name=$1 rc=0
  shift
  local -x "$(pooler_client_env "$name")"
  run_pgbench "$@" || rc=$?
  return $rc
}

failures=0
if ((WARMUP > 0)); then
  for name in "${names[@]}"; do
    log "warm-up ${LABEL[$name]}: ${WARMUP}s at $max_clients clients"
    # shellcheck disable=SC2046
    env_run_pgbench "$name" "$BENCH_TMP/warmup-$name.out" \
      $(pgbench_args "$max_clients" "${TARGET_PORT[$name]}" "${ROLE[$name]}" "$WARMUP") ||
      {
        log "warm-up through ${LABEL[$name]} failed:"
        tail -n 5 "$BENCH_TMP/warmup-$name.out" >&2
        failures=$((failures + 1))
      }
  done
fi

# R[key] with key "name|clients|round|field".
declare -A R=()
[[ -z "$RESULTS_TSV" ]] ||
  printf 'pass\tround\ttarget\tclients\ttps\ttransactions\tfailed\tpooler_ticks\tsyscalls\tserver_conns\tpg_ticks\tbench_ticks\tmachine_busy_ticks\telapsed_s\tclk_tck\tpooler_user_ticks\n' >"$RESULTS_TSV"

# measure NAME CLIENTS ROUND PASS: one pgbench run. PASS "cpu": TPS and CPU, no tracing;
# "sys": syscall count only (perf attached); "both": one run for all figures.
measure() {
  local name=$1 c=$2 r=$3 pass=$4 out pids p0 p1 u0 u1 w0 w1 h0=0 h1=0 g0 g1 m0 m1 t0 t1 sc=n/a rc=0 srv="-" secs
  out="$BENCH_TMP/run-$name-c$c-r$r-$pass.out"
  pids=$(pooler_pids "$name")
  if [[ "$pass" != cpu ]]; then
    # shellcheck disable=SC2086
    syscount_start "$out.syscalls" $pids
  fi
  # shellcheck disable=SC2086
  p0=$(proc_cpu_ticks $pids)
  # shellcheck disable=SC2086
  u0=$(proc_user_ticks $pids)
  # shellcheck disable=SC2086
  w0=$(proc_sleeps $pids)
  [[ -z "${TARGET_METRICS[$name]:-}" ]] ||
    h0=$(metric_sum "${TARGET_METRICS[$name]}" pgfleet_server_handoffs_total)
  g0=$(tree_cpu_ticks "$PG_PID")
  m0=$(machine_busy_ticks)
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  env_run_pgbench "$name" "$out" \
    $(pgbench_args "$c" "${TARGET_PORT[$name]}" "${ROLE[$name]}" "$DURATION") || rc=$?
  t1=$(date +%s.%N)
  sleep 0.2 # let the postmaster reap direct backends so their CPU lands in its cutime
  m1=$(machine_busy_ticks)
  g1=$(tree_cpu_ticks "$PG_PID")
  # Re-read the PID set: a worker restarted during the run is counted via its parent.
  # shellcheck disable=SC2046
  p1=$(proc_cpu_ticks $(pooler_pids "$name"))
  # shellcheck disable=SC2046
  u1=$(proc_user_ticks $(pooler_pids "$name"))
  # shellcheck disable=SC2086
  w1=$(proc_sleeps $pids)
  [[ -z "${TARGET_METRICS[$name]:-}" ]] ||
    h1=$(metric_sum "${TARGET_METRICS[$name]}" pgfleet_server_handoffs_total)
  [[ "$pass" == cpu ]] || sc=$(syscount_stop)
  [[ "${KIND[$name]}" == direct ]] || srv=$(pg_server_conns "${ROLE[$name]}")
  local tps processed failed
  tps=$(pgbench_field "$out" tps)
  processed=$(pgbench_field "$out" processed)
  failed=$(pgbench_field "$out" failed)
  pgbench_run_ok "$out" "$rc" "${LABEL[$name]} clients=$c round=$r pass=$pass" ||
    failures=$((failures + 1))
  check_alive "$name" || failures=$((failures + 1))
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  local k="$name|$c|$r"
  if [[ "$pass" != sys ]]; then
    R[$k|tps]=${tps:-0}
    R[$k|n]=${processed:-0}
    R[$k|pooler]=$((p1 - p0))
    R[$k|user]=$((u1 - u0))
    R[$k|sleeps]=$((w1 - w0))
    R[$k|srv]=$srv
    R[$k|pg]=$((g1 - g0))
    R[$k|bench]=$BENCH_TICKS
    R[$k|busy]=$((m1 - m0))
    R[$k|secs]=$secs
  fi
  if [[ "$pass" != cpu ]]; then
    R[$k|sys]=$sc
    R[$k|sysn]=${processed:-0}
  fi
  if [[ -n "$RESULTS_TSV" ]]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pass" "$r" \
      "${LABEL[$name]}" "$c" "${tps:-0}" "${processed:-0}" "$failed" "$((p1 - p0))" "$sc" "$srv" \
      "$((g1 - g0))" "$BENCH_TICKS" "$((m1 - m0))" "$secs" "$CLK_TCK" "$((u1 - u0))" >>"$RESULTS_TSV"
  fi
  log "  ${LABEL[$name]} clients=$c pass=$pass: tps=${tps:-?} transactions=${processed:-?}" \
    "pooler_cpu=$(((p1 - p0) * 1000 / CLK_TCK))ms syscalls=$sc sleeps=$((w1 - w0))" \
    "server_handoffs=$((h1 - h0))"
}

# profile_run NAME CLIENTS: one pgbench run with `perf record` on the pooler's processes; the
# reports land in $BENCH_TMP/perf-NAME-cCLIENTS.{dso,sym} for the report below.
profile_run() {
  local name=$1 c=$2 pids data rec
  data="$BENCH_TMP/perf-$name-c$c"
  pids=$(echo $(pooler_pids "$name"))
  [[ -n "$pids" ]] || return 0
  # shellcheck disable=SC2086
  perf record -q -F "${PROFILE_HZ:-1999}" ${PROFILE_ARGS:-} -o "$data.data" -p "${pids// /,}" >"$data.log" 2>&1 &
  rec=$!
  track_pid "$rec" INT
  sleep 0.5 # let it attach before the load starts
  # shellcheck disable=SC2046
  env_run_pgbench "$name" "$data.pgbench" \
    $(pgbench_args "$c" "${TARGET_PORT[$name]}" "${ROLE[$name]}" "$DURATION") ||
    log "profile run through ${LABEL[$name]} failed; see $data.pgbench"
  stop_pid "$rec" 30
  perf report -i "$data.data" --stdio --no-children -g none --sort dso --percent-limit 1 2>/dev/null |
    grep -v -e '^#' -e '^$' | head -n 8 >"$data.dso"
  perf report -i "$data.data" --stdio --no-children -g none --sort dso,sym --percent-limit 0.5 \
    2>/dev/null | grep -v -e '^#' -e '^$' | head -n "${PROFILE_TOP:-25}" >"$data.sym"
  # KEEP_TMP=1 keeps the recording for a closer look (perf report -i ... --dsos pgfleet).
  [[ "${KEEP_TMP:-0}" == 1 ]] || rm -f "$data.data"
}

# With SYSCALL_PASS=separate (default) the perf tracepoint never runs during the runs that give
# TPS and CPU: counting raw_syscalls makes every traced syscall take the slow path, which adds
# pooler CPU in proportion to its syscall count. Syscalls come from an extra run per pooler.
if [[ -z "$SYSCALL_TOOL" ]]; then
  SYSCALL_PASS=none
fi
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CLIENTS; do
    # Rotate the order each round so no target always runs first after a client-count change.
    n=${#names[@]}
    for ((i = 0; i < n; i++)); do
      name=${names[$(((i + r - 1) % n))]}
      pass=cpu
      [[ "$SYSCALL_PASS" != same ]] || pass=both
      log "round $r/$ROUNDS: ${LABEL[$name]} clients=$c for ${DURATION}s ($pass)"
      measure "$name" "$c" "$r" "$pass"
    done
    if [[ "$SYSCALL_PASS" == separate ]]; then
      for ((i = 0; i < n; i++)); do
        name=${names[$(((i + r - 1) % n))]}
        [[ "${KIND[$name]}" != direct ]] || continue
        log "round $r/$ROUNDS: ${LABEL[$name]} clients=$c for ${DURATION}s (syscall count)"
        measure "$name" "$c" "$r" sys
      done
    fi
    if [[ "${PROFILE:-off}" == on && $r == 1 ]]; then
      for name in "${names[@]}"; do
        [[ "${KIND[$name]}" != direct ]] || continue
        log "profile: ${LABEL[$name]} clients=$c for ${DURATION}s (perf record)"
        profile_run "$name" "$c"
      done
    fi
  done
done

# ---------------------------------------------------------------------------------------------
# Report. µs/tx = ticks / CLK_TCK * 1e6 / transactions. "other cores": CPU the machine spent on
# anything but the pooler, PostgreSQL and pgbench during the run, in cores (noise from others).
us_per_tx() { awk -v t="$1" -v n="$2" -v h="$CLK_TCK" 'BEGIN { if (n > 0) printf "%.1f", t / h * 1e6 / n; else print "n/a" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
per_tx() { awk -v s="$1" -v n="$2" 'BEGIN { if (s ~ /^[0-9]+$/ && n > 0) printf "%.2f", s / n; else print "n/a" }'; }

echo
echo "== results (pgbench -S -M $PROTOCOL, ${DURATION}s per run, $(nproc) cores)"
fmt='%-20s %7s %5s %10s %10s %8s %10s %9s %5s %9s %9s %7s\n'
# shellcheck disable=SC2059
printf "$fmt" target clients round TPS pooler_us/tx user_us syscalls/tx sleeps/tx srv pg_us/tx \
  bench_us/tx other
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CLIENTS; do
    for name in "${names[@]}"; do
      k="$name|$c|$r"
      n=${R[$k|n]}
      if [[ "${KIND[$name]}" == direct ]]; then
        pooler=n/a
        user=n/a
        sleeps=n/a
      else
        pooler=$(us_per_tx "${R[$k|pooler]}" "$n")
        user=$(us_per_tx "${R[$k|user]}" "$n")
        sleeps=$(per_tx "${R[$k|sleeps]}" "$n")
      fi
      other=$(awk -v b="${R[$k|busy]}" -v p="${R[$k|pooler]}" -v g="${R[$k|pg]}" \
        -v q="${R[$k|bench]}" -v s="${R[$k|secs]}" -v h="$CLK_TCK" \
        'BEGIN { o = (b - p - g - q) / h / s; if (o < 0) o = 0; printf "%.2f", o }')
      # shellcheck disable=SC2059
      printf "$fmt" "${LABEL[$name]}" "$c" "$r" "$(printf '%.0f' "${R[$k|tps]}")" "$pooler" \
        "$user" "$(per_tx "${R[$k|sys]:-n/a}" "${R[$k|sysn]:-0}")" "$sleeps" \
        "${R[$k|srv]}" "$(us_per_tx "${R[$k|pg]}" "$n")" \
        "$(us_per_tx "${R[$k|bench]}" "$n")" "$other"
    done
  done
done
echo "(pooler_us/tx: pooler CPU (utime+stime, all threads and workers) per transaction;"
echo " user_us: its user-space part (utime; the kernel splits by tick samples);"
echo " syscalls/tx: raw_syscalls:sys_enter of the pooler's processes per transaction"
echo " (SYSCALL_PASS=$SYSCALL_PASS: separate = counted in an extra run, TPS/CPU come from untraced runs);"
echo " sleeps/tx: the pooler's voluntary context switches per transaction (each a sleep in"
echo " epoll_wait, or a lock, and a wake-up: most of a pooler's kernel time goes there);"
echo " srv: server connections the target's role holds after the run; pg/bench_us/tx: CPU of"
echo " PostgreSQL and pgbench per transaction; other: cores busy with anything else on the machine)"

# Ratios: i-th pgfleet target vs i-th pgbouncer target (and vs the i-th pgbouncer2 and
# pgfleetpass targets), summed over rounds.
fleets=()
bouncers=()
bouncers2=()
dogs=()
passes=()
bases=()
for name in "${names[@]}"; do
  case "${KIND[$name]}" in
  pgfleet) fleets+=("$name") ;;
  pgbouncer) bouncers+=("$name") ;;
  pgbouncer2) bouncers2+=("$name") ;;
  pgdog) dogs+=("$name") ;;
  pgfleetpass) passes+=("$name") ;;
  pgfleetbase) bases+=("$name") ;;
  esac
done
fmt2='%-36s %7s %9s %12s %10s %12s %14s\n'
print_pair() { # NAME_A NAME_B: one row per client count, a / b
  local pf=$1 pb=$2 c who name r cpu_pf cpu_pb sys_r
  for c in $CLIENTS; do
    declare -A S=()
    for who in pf pb; do
      name=${!who}
      S[$who|tps]=0 S[$who|n]=0 S[$who|cpu]=0 S[$who|user]=0 S[$who|sys]=0 S[$who|sysn]=0 S[$who|sysok]=1
      for ((r = 1; r <= ROUNDS; r++)); do
        k="$name|$c|$r"
        S[$who|tps]=$(awk -v a="${S[$who|tps]}" -v b="${R[$k|tps]}" 'BEGIN { print a + b }')
        S[$who|n]=$((${S[$who|n]} + ${R[$k|n]}))
        S[$who|cpu]=$((${S[$who|cpu]} + ${R[$k|pooler]}))
        S[$who|user]=$((${S[$who|user]} + ${R[$k|user]}))
        if [[ "${R[$k|sys]:-}" =~ ^[0-9]+$ ]]; then
          S[$who|sys]=$((${S[$who|sys]} + ${R[$k|sys]}))
          S[$who|sysn]=$((${S[$who|sysn]} + ${R[$k|sysn]}))
        else
          S[$who|sysok]=0
        fi
      done
    done
    cpu_pf=$(us_per_tx "${S[pf|cpu]}" "${S[pf|n]}")
    cpu_pb=$(us_per_tx "${S[pb|cpu]}" "${S[pb|n]}")
    if [[ "${S[pf|sysok]}" == 1 && "${S[pb|sysok]}" == 1 ]]; then
      sys_r=$(ratio "$(per_tx "${S[pf|sys]}" "${S[pf|sysn]}")" \
        "$(per_tx "${S[pb|sys]}" "${S[pb|sysn]}")")
    else
      sys_r=n/a
    fi
    # shellcheck disable=SC2059
    printf "$fmt2" "${LABEL[$pf]} / ${LABEL[$pb]}" "$c" "$(ratio "${S[pf|tps]}" "${S[pb|tps]}")" \
      "$(ratio "$cpu_pf" "$cpu_pb")" \
      "$(ratio "$(us_per_tx "${S[pf|user]}" "${S[pf|n]}")" "$(us_per_tx "${S[pb|user]}" "${S[pb|n]}")")" \
      "$sys_r" "$cpu_pf / $cpu_pb"
    unset S
  done
}
pairs=${#fleets[@]}
((${#bouncers[@]} < pairs)) && pairs=${#bouncers[@]}
pairs2=${#fleets[@]}
((${#bouncers2[@]} < pairs2)) && pairs2=${#bouncers2[@]}
if ((pairs > 0 || pairs2 > 0)); then
  echo
  echo "== ratios pgfleet / pgbouncer (all rounds; < 1 is better for CPU and syscalls)"
  # shellcheck disable=SC2059
  printf "$fmt2" pair clients TPS pooler_us/tx user_us/tx syscalls/tx "us/tx (f / b)"
  for ((i = 0; i < pairs; i++)); do print_pair "${fleets[$i]}" "${bouncers[$i]}"; done
  for ((i = 0; i < pairs2; i++)); do print_pair "${fleets[$i]}" "${bouncers2[$i]}"; done
fi
if ((${#fleets[@]} > 1)); then
  echo
  echo "== ratios pgfleet / the first pgfleet target (workers: what more processes cost; with"
  echo "   RATE, at the same load)"
  # shellcheck disable=SC2059
  printf "$fmt2" pair clients TPS pooler_us/tx user_us/tx syscalls/tx "us/tx (n / 1st)"
  for ((i = 1; i < ${#fleets[@]}; i++)); do print_pair "${fleets[$i]}" "${fleets[0]}"; done
fi
pairs=${#fleets[@]}
((${#passes[@]} < pairs)) && pairs=${#passes[@]}
if ((pairs > 0)); then
  echo
  echo "== ratios pgfleet / pgfleet with session_state: pass (what session tracking costs)"
  # shellcheck disable=SC2059
  printf "$fmt2" pair clients TPS pooler_us/tx user_us/tx syscalls/tx "us/tx (t / p)"
  for ((i = 0; i < pairs; i++)); do print_pair "${fleets[$i]}" "${passes[$i]}"; done
fi
pairs=${#fleets[@]}
((${#dogs[@]} < pairs)) && pairs=${#dogs[@]}
if ((pairs > 0)); then
  echo
  echo "== ratios pgfleet / pgdog (i-th pgfleet target against the i-th pgdog target)"
  # shellcheck disable=SC2059
  printf "$fmt2" pair clients TPS pooler_us/tx user_us/tx syscalls/tx "us/tx (f / d)"
  for ((i = 0; i < pairs; i++)); do print_pair "${fleets[$i]}" "${dogs[$i]}"; done
fi
pairs=${#fleets[@]}
((${#bases[@]} < pairs)) && pairs=${#bases[@]}
if ((pairs > 0)); then
  echo
  echo "== ratios pgfleet / pgfleet base ($PGFLEET_BASE_BIN): the change's effect"
  # shellcheck disable=SC2059
  printf "$fmt2" pair clients TPS pooler_us/tx user_us/tx syscalls/tx "us/tx (new / base)"
  for ((i = 0; i < pairs; i++)); do print_pair "${fleets[$i]}" "${bases[$i]}"; done
fi

echo
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
for name in "${names[@]}"; do
  [[ "${KIND[$name]}" == pgfleet* ]] || continue
  # shellcheck disable=SC2086
  errs=$(grep -ciE 'level=(error|warn)|fatal|panic' ${TARGET_LOGS[$name]} || true)
  if [[ "$errs" != 0 ]]; then
    echo "${LABEL[$name]} log: $errs error/warning line(s), first ones:"
    # shellcheck disable=SC2086
    grep -iE 'level=(error|warn)|fatal|panic' ${TARGET_LOGS[$name]} | head -n 10 | sed 's/^/  /'
  fi
done

if [[ "${PROFILE:-off}" == on ]]; then
  echo
  echo "== profiles (perf record -F ${PROFILE_HZ:-1999} on the pooler's processes, round 1; % of samples)"
  for c in $CLIENTS; do
    for name in "${names[@]}"; do
      [[ "${KIND[$name]}" != direct ]] || continue
      echo "-- ${LABEL[$name]}, $c clients: by binary"
      cat "$BENCH_TMP/perf-$name-c$c.dso" 2>/dev/null || echo "(no profile)"
      echo "-- ${LABEL[$name]}, $c clients: top symbols"
      cat "$BENCH_TMP/perf-$name-c$c.sym" 2>/dev/null || echo "(no profile)"
    done
  done
fi
if ((failures > 0)); then
  echo "FAILED: $failures run(s) had errors (logs kept in $BENCH_TMP)"
  exit 1
fi
