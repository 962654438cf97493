#!/usr/bin/env bash
# Even client balance (listen.balance_clients), measured in one run: pgbench -S through two
# pgfleet pods of WORKERS workers and the same pod pool, one with the balance on (the default) and
# one with it off (the kernel's SO_REUSEPORT hash alone spreads clients), interleaved: TPS, pooler
# CPU per transaction, the clients per worker (from `ss`, the fewest and the most), and the
# connections passed to a sibling (pgfleet_clients_balanced_total). Then the ratios on / off.
#
# On a many-core pod each worker has a core of its own, and the worker with the most clients is
# the first to run out of it. A 2-core VM cannot show that: its workers share the cores with
# PostgreSQL and pgbench. So by default (CPU_CAP=0.1) every worker runs in a cgroup of its own
# capped at that much of a core (cgroup v1 `cpu` or v2 `cpu.max`, as root), which makes each
# worker's own CPU the limit, as a core is on the big machine. CPU_CAP=off runs without caps.
#
#   bench/client_balance.sh
#   ROUNDS=3 CLIENTS="16 64" CPU_CAP=0.1 bench/client_balance.sh
#
# Settings (environment):
#   CLIENTS="16 64"  pgbench client counts          DURATION=10  seconds per measured run
#   ROUNDS=2         repeat the pair per count      WARMUP=2     seconds of load per target first
#   WORKERS=4        workers in each pod            POOL_SIZE=8  default_pool_size of the pod
#   SCALE=10         pgbench scale                  JOBS=1       pgbench threads
#   CPU_CAP=0.1      each worker's CPU limit in cores (off: none)
#   PGFLEET_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP: see lib.sh
set -euo pipefail
: "${POOL_SIZE:=8}"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLIENTS:=16 64}"
: "${DURATION:=10}"
: "${ROUNDS:=2}"
: "${WARMUP:=2}"
: "${WORKERS:=4}"
: "${SCALE:=10}"
: "${JOBS:=1}"
: "${CPU_CAP:=0.1}"
DB=bench

for v in DURATION ROUNDS WARMUP WORKERS JOBS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a whole number"
done
((DURATION >= 1 && DURATION <= 600)) || die "DURATION must be 1..600"
((ROUNDS >= 1 && ROUNDS <= 10)) || die "ROUNDS must be 1..10"
((WORKERS >= 2 && WORKERS <= 64)) || die "WORKERS must be 2..64"
for c in $CLIENTS; do
  [[ "$c" =~ ^[0-9]+$ ]] && ((c >= 1 && c <= 1000)) || die "CLIENTS: 1..1000 each"
done
[[ "$CPU_CAP" == off || "$CPU_CAP" =~ ^[0-9]*\.?[0-9]+$ ]] || die "CPU_CAP: cores (0.1) or off"
command -v ss >/dev/null || die "ss not found (Debian: iproute2)"

# ---------------------------------------------------------------------------------------------
# One cgroup per worker, capped at CPU_CAP of a core. Only groups this script made are touched,
# and each is removed (its processes moved back to the root group first) on exit.

CGROUP_KIND=""
CGROUP_DIRS=()
CPU_PERIOD_US=10000

cgroup_detect() {
  [[ "$CPU_CAP" == off ]] && return 0
  if [[ -w /sys/fs/cgroup/cpu/cgroup.procs && -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
    CGROUP_KIND=v1
  elif [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] &&
    grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    CGROUP_KIND=v2
    # The cpu controller must be on for the root's children (a no-op when it is).
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  else
    die "CPU_CAP=$CPU_CAP needs a writable cgroup cpu controller (run as root), or CPU_CAP=off"
  fi
}

# cgroup_cap PID NAME: moves PID into a new group NAME capped at CPU_CAP.
cgroup_cap() {
  local pid=$1 name=$2 quota dir
  quota=$(awk -v c="$CPU_CAP" -v p="$CPU_PERIOD_US" 'BEGIN { printf "%d", c * p }')
  ((quota >= 1000)) || die "CPU_CAP=$CPU_CAP is below the kernel's 1 ms minimum quota"
  if [[ "$CGROUP_KIND" == v1 ]]; then
    dir=/sys/fs/cgroup/cpu/$name
    mkdir "$dir"
    CGROUP_DIRS+=("$dir")
    echo "$CPU_PERIOD_US" >"$dir/cpu.cfs_period_us"
    echo "$quota" >"$dir/cpu.cfs_quota_us"
  else
    dir=/sys/fs/cgroup/$name
    mkdir "$dir"
    CGROUP_DIRS+=("$dir")
    echo "$quota $CPU_PERIOD_US" >"$dir/cpu.max"
  fi
  echo "$pid" >"$dir/cgroup.procs"
}

cgroups_remove() {
  local dir root pid
  for dir in "${CGROUP_DIRS[@]}"; do
    [[ -d "$dir" ]] || continue
    root=$(dirname "$dir")
    while read -r pid; do
      echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true
    done <"$dir/cgroup.procs"
    rmdir "$dir" 2>/dev/null || log "could not remove cgroup $dir"
  done
}

on_exit() {
  local rc=$?
  cgroups_remove
  (exit "$rc")
  cleanup
}

check_binaries
raise_fd_limit
make_tmpdir
install_cleanup_trap
trap on_exit EXIT
pgfleet_private_copy
cgroup_detect

echo "== client_balance: listen.balance_clients on vs off, pgfleet workers: $WORKERS"
machine_info
echo "settings:    clients=[$CLIENTS] duration=${DURATION}s rounds=$ROUNDS warmup=${WARMUP}s" \
  "workers=$WORKERS pool_mode=transaction default_pool_size=$POOL_SIZE (per pod) scale=$SCALE" \
  "pgbench_threads=$JOBS cpu_cap=${CPU_CAP}${CGROUP_KIND:+ per worker (cgroup $CGROUP_KIND)}"
echo

pg_start 300
pg_init_bench "$DB" "$SCALE"

names=(balance_on balance_off)
for name in "${names[@]}"; do
  pg_create_role "b_$name"
  on=true
  [[ "$name" == balance_off ]] && on=false
  pgfleet_start "$name" "$WORKERS" "$DB"
  # lib.sh writes the listen section on one line: the balance goes into it, then a reload.
  sed -i "s/^listen: {\(.*\)}$/listen: {\1, balance_clients: $on}/" \
    "$BENCH_TMP/$name/pgfleet.yaml"
  grep -q "balance_clients: $on" "$BENCH_TMP/$name/pgfleet.yaml" ||
    die "could not set balance_clients in $BENCH_TMP/$name/pgfleet.yaml"
  kill -HUP "${TARGET_PID[$name]}"
done
# Every worker up (the port answers before all are), then each in its own capped group.
for name in "${names[@]}"; do
  for ((i = 0; i < 100; i++)); do
    (($(wc -w <<<"$(descendants "${TARGET_PID[$name]}")") - 1 >= WORKERS)) && break
    sleep 0.1
  done
  n=0
  for pid in $(descendants "${TARGET_PID[$name]}"); do
    [[ "$pid" == "${TARGET_PID[$name]}" ]] && continue
    [[ -n "$CGROUP_KIND" ]] && cgroup_cap "$pid" "pgfleet-bench-$$-$name-$n"
    n=$((n + 1))
  done
  ((n >= WORKERS)) || die "$name: $n of $WORKERS workers after 10 s"
done

# spread PORT: "fewest-most" clients per worker process, from the established sockets.
spread() {
  ss -tnpH state established "( sport = :$1 )" | grep -o 'pid=[0-9]*' | sort | uniq -c |
    awk -v w="$WORKERS" '{ n[NR] = $1 } END {
      lo = (NR < w) ? 0 : n[1]; hi = 0
      for (i = 1; i <= NR; i++) { if (n[i] < lo) lo = n[i]; if (n[i] > hi) hi = n[i] }
      printf "%d-%d\n", lo, hi }'
}

pgbench_args() { # CLIENTS PORT ROLE SECONDS
  local c=$1 jobs=$JOBS
  ((jobs <= c)) || jobs=$c
  echo "-n -S -c $c -j $jobs -T $4 -h 127.0.0.1 -p $2 -U $3 $DB"
}

max_clients=0
for c in $CLIENTS; do ((c > max_clients)) && max_clients=$c; done
warm_up "$max_clients" "$WARMUP" "${names[@]}"

declare -A R=()
failures=0
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CLIENTS; do
    for ((i = 0; i < ${#names[@]}; i++)); do
      name=${names[$(((i + r - 1) % ${#names[@]}))]}
      k="$name|$c|$r"
      out="$BENCH_TMP/run-$name-c$c-r$r.out"
      log "round $r/$ROUNDS: $name clients=$c for ${DURATION}s"
      b0=$(metric_sum "${TARGET_METRICS[$name]}" pgfleet_clients_balanced_total)
      pids=$(descendants "${TARGET_PID[$name]}")
      # shellcheck disable=SC2086
      p0=$(proc_cpu_ticks $pids)
      # The spread is sampled once every client has connected (pgbench connects them first).
      (
        sleep "$(awk -v d="$DURATION" 'BEGIN { print (d > 2 ? 2 : d / 2) }')"
        spread "${TARGET_PORT[$name]}" >"$BENCH_TMP/spread-$name-$c-$r"
      ) &
      sampler=$!
      rc=0
      # shellcheck disable=SC2046
      run_pgbench "$out" $(pgbench_args "$c" "${TARGET_PORT[$name]}" "b_$name" "$DURATION") ||
        rc=$?
      wait "$sampler" || true
      # shellcheck disable=SC2046
      p1=$(proc_cpu_ticks $(descendants "${TARGET_PID[$name]}"))
      sleep 1.2 # workers publish their counters every 500 ms
      b1=$(metric_sum "${TARGET_METRICS[$name]}" pgfleet_clients_balanced_total)
      pgbench_run_ok "$out" "$rc" "$name clients=$c round=$r" || failures=$((failures + 1))
      check_alive "$name" || failures=$((failures + 1))
      R[$k|tps]=$(pgbench_field "$out" tps)
      R[$k|n]=$(pgbench_field "$out" processed)
      R[$k|cpu]=$((p1 - p0))
      R[$k|spread]=$(cat "$BENCH_TMP/spread-$name-$c-$r" 2>/dev/null || echo n/a)
      R[$k|passed]=$((b1 - b0))
      log "  $name clients=$c: tps=${R[$k|tps]:-?} spread=${R[$k|spread]} passed=$((b1 - b0))"
    done
  done
done

us_per_tx() { awk -v t="$1" -v n="$2" -v h="$CLK_TCK" 'BEGIN { if (n > 0) printf "%.1f", t / h * 1e6 / n; else print "n/a" }'; }

echo
echo "== pgbench -S through pgfleet workers: $WORKERS, default_pool_size=$POOL_SIZE per pod," \
  "${DURATION}s per run, $(nproc) cores, worker CPU cap: $CPU_CAP"
fmt='%-12s %7s %5s %9s %12s %15s %7s\n'
# shellcheck disable=SC2059
printf "$fmt" target clients round TPS pooler_us/tx clients/worker passed
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CLIENTS; do
    for name in "${names[@]}"; do
      k="$name|$c|$r"
      # shellcheck disable=SC2059
      printf "$fmt" "$name" "$c" "$r" "$(printf '%.0f' "${R[$k|tps]:-0}")" \
        "$(us_per_tx "${R[$k|cpu]}" "${R[$k|n]:-0}")" "${R[$k|spread]}" \
        "${R[$k|passed]}"
    done
  done
done
echo "(clients/worker: the fewest and the most client connections a worker held during the run;"
echo " passed: connections a worker accepted and passed to a sibling, pgfleet_clients_balanced_total)"
echo
echo "== ratios balance on / off (all rounds summed)"
printf '%7s %8s %14s\n' clients TPS pooler_us/tx
for c in $CLIENTS; do
  declare -A S=([on_tps]=0 [off_tps]=0 [on_n]=0 [off_n]=0 [on_cpu]=0 [off_cpu]=0)
  for ((r = 1; r <= ROUNDS; r++)); do
    for who in on off; do
      k="balance_$who|$c|$r"
      S[${who}_tps]=$(awk -v x="${S[${who}_tps]}" -v y="${R[$k|tps]:-0}" 'BEGIN { print x + y }')
      S[${who}_n]=$((${S[${who}_n]} + ${R[$k|n]:-0}))
      S[${who}_cpu]=$((${S[${who}_cpu]} + ${R[$k|cpu]}))
    done
  done
  printf '%7s %8s %14s\n' "$c" \
    "$(awk -v a="${S[on_tps]}" -v b="${S[off_tps]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')" \
    "$(awk -v a="$(us_per_tx "${S[on_cpu]}" "${S[on_n]}")" -v b="$(us_per_tx "${S[off_cpu]}" "${S[off_n]}")" \
      'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')"
  unset S
done
echo
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
((failures == 0)) || die "$failures run(s) failed; see the logs above"
