#!/usr/bin/env bash
# The poolers' own work per transaction, counted in instructions: each pooler runs under
# valgrind's callgrind, which counts every user-space instruction it executes (its code, libc and
# the libraries it links; never the kernel's). Unlike CPU time, the count does not move with the
# machine's load, so a change of a few percent in the hot path shows in one run on a busy
# machine, and pgfleet's own work compares directly with PgBouncer's.
#
#   bench/instructions.sh
#   PGFLEET_BASE_BIN=/tmp/pgfleet-parent TARGETS="pgfleetbase pgfleet" bench/instructions.sh
#
# For each target and protocol: pgbench -S warms the pool up (WARMUP_TX transactions per client),
# the counters of every pooler process are zeroed (callgrind_control -z), pgbench -S runs
# TRANSACTIONS per client, the counters are dumped; the sum over the pooler's processes divided
# by the transactions is the table's Ir/tx. Then the functions with the most instructions of the
# first protocol (self cost, all processes).
#
# What it does not show: the kernel's share (most of a pooler's CPU, bench/RESULTS.md), and
# instructions are not cycles (cache misses and branch mispredictions are not counted). Under
# callgrind a pooler runs some 20-50x slower, so the load is closed-loop and light.
#
# Environment (all optional):
#   TARGETS="pgbouncer pgfleet"   pgbouncer, pgbouncer2 (PGBOUNCER2_BIN), pgfleet, pgfleetbase
#                                 (PGFLEET_BASE_BIN); pgfleet runs with workers: 1
#   PROTOCOLS="simple extended"   pgbench -M modes (prepared: PgBouncer 1.18 cannot)
#   CLIENTS=32  TRANSACTIONS=300  WARMUP_TX=20  POOL_SIZE=20  SCALE=1  TOP=25
#   PGFLEET_BIN, PGBOUNCER_BIN, PG_BINDIR, BENCH_USER, KEEP_TMP, AUTH: see lib.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${TARGETS:=pgbouncer pgfleet}"
: "${PROTOCOLS:=simple extended}"
: "${CLIENTS:=32}"
: "${TRANSACTIONS:=300}"
: "${WARMUP_TX:=20}"
: "${SCALE:=1}"
: "${TOP:=25}"
DB=bench

command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  die "needs valgrind (Debian: apt-get install valgrind)"
check_binaries
make_tmpdir
install_cleanup_trap
CG_DIR=$BENCH_TMP/callgrind
mkdir -p "$CG_DIR"
chmod 777 "$CG_DIR" # PgBouncer's callgrind runs as BENCH_USER
POOLER_WRAPPER="valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=$CG_DIR/cg.%p"

echo "== instructions: user-space instructions per transaction under callgrind"
machine_info
echo "valgrind:    $(valgrind --version)"
echo "settings:    targets=[$TARGETS] protocols=[$PROTOCOLS] clients=$CLIENTS" \
  "transactions=$TRANSACTIONS/client warmup=$WARMUP_TX/client pool_size=$POOL_SIZE scale=$SCALE" \
  "auth=$AUTH"
echo

pg_start 200
pg_init_bench "$DB" "$SCALE"

# cg_control ARGS...: callgrind_control as the user the target runs as (PgBouncer: BENCH_USER;
# vgdb cannot reach another user's process), bounded in time.
cg_control() {
  if [[ "$CG_AS_BENCH_USER" == 1 ]]; then
    timeout 60 setpriv --reuid="$BENCH_USER" --regid="$BENCH_USER" --init-groups -- \
      callgrind_control "$@"
  else
    timeout 60 callgrind_control "$@"
  fi
}

# dump_total LIST PID...: dump each process's counters now; prints the sum of the dumps'
# instruction totals and writes the dump files' names to LIST.
dump_total() {
  local list=$1 pid total=0 file before
  shift
  : >"$list"
  for pid in "$@"; do
    before=$(find "$CG_DIR" -name "cg.$pid.*" | wc -l)
    cg_control -d "$pid" >/dev/null 2>&1 || continue
    for _ in $(seq 100); do
      (($(find "$CG_DIR" -name "cg.$pid.*" | wc -l) > before)) && break
      sleep 0.1
    done
    file=$(find "$CG_DIR" -name "cg.$pid.*" -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2)
    [[ -n "$file" ]] || continue
    total=$((total + $(awk '/^totals:/ { print $2 }' "$file")))
    echo "$file" >>"$list"
  done
  echo "$total"
}

declare -A IR=()
names=()
for target in $TARGETS; do
  name=${target}_cg
  role=$name
  pg_create_role "$role"
  CG_AS_BENCH_USER=0
  [[ "$target" != pgbouncer* || "$(id -u)" != 0 ]] || CG_AS_BENCH_USER=1
  case "$target" in
  pgfleet) pgfleet_start "$name" 1 "$DB" "" "$role" ;;
  pgfleetbase)
    [[ -x "${PGFLEET_BASE_BIN:-}" ]] || die "pgfleetbase needs PGFLEET_BASE_BIN"
    saved_bin=$PGFLEET_BIN saved_copy=${PGFLEET_COPY:-}
    PGFLEET_BIN=$PGFLEET_BASE_BIN PGFLEET_COPY=0
    pgfleet_start "$name" 1 "$DB" "" "$role"
    PGFLEET_BIN=$saved_bin PGFLEET_COPY=$saved_copy
    ;;
  pgbouncer) pgbouncer_start "$name" 1 "$DB" "$role" ;;
  pgbouncer2) pgbouncer_start "$name" 1 "$DB" "$role" "${PGBOUNCER2_BIN:?pgbouncer2 needs PGBOUNCER2_BIN}" ;;
  *) die "unknown target $target" ;;
  esac
  names+=("$name")
  for protocol in $PROTOCOLS; do
    args=(-n -S -M "$protocol" -c "$CLIENTS" -j 1 -h 127.0.0.1 -p "${TARGET_PORT[$name]}" -U "$role" "$DB")
    run_pgbench "$BENCH_TMP/warmup-$name-$protocol.out" -t "$WARMUP_TX" "${args[@]}" ||
      die "warm-up through $target failed; see $BENCH_TMP/warmup-$name-$protocol.out"
    # shellcheck disable=SC2086
    pids=$(descendants ${TARGET_PIDS[$name]})
    for pid in $pids; do cg_control -z "$pid" >/dev/null 2>&1 || true; done
    out=$BENCH_TMP/run-$name-$protocol.out
    run_pgbench "$out" -t "$TRANSACTIONS" "${args[@]}" || die "pgbench through $target failed; see $out"
    # shellcheck disable=SC2086
    total=$(dump_total "$BENCH_TMP/dumps-$name-$protocol" $pids)
    n=$(pgbench_field "$out" processed)
    IR[$name|$protocol]=$((total / n))
    log "$target $protocol: $n transactions, $total instructions, $((total / n)) per transaction"
  done
done

echo
echo "== user-space instructions per transaction (callgrind Ir, all of the pooler's processes)"
printf '%-14s' target
for protocol in $PROTOCOLS; do printf ' %12s' "$protocol"; done
echo
for name in "${names[@]}"; do
  printf '%-14s' "${name%_cg}"
  for protocol in $PROTOCOLS; do printf ' %12s' "${IR[$name|$protocol]}"; done
  echo
done
if ((${#names[@]} > 1)); then
  first=${names[0]}
  for name in "${names[@]:1}"; do
    printf '%-14s' "${name%_cg}/${first%_cg}"
    for protocol in $PROTOCOLS; do
      printf ' %12s' "$(awk -v a="${IR[$name|$protocol]}" -v b="${IR[$first|$protocol]}" \
        'BEGIN { printf "%.2fx", a / b }')"
    done
    echo
  done
fi

first_protocol=${PROTOCOLS%% *}
for name in "${names[@]}"; do
  echo
  echo "== ${name%_cg}, $first_protocol: functions by instructions (self), in its busiest process"
  busiest=""
  most=-1
  while read -r file; do
    n=$(awk '/^totals:/ { print $2 }' "$file")
    ((n > most)) && most=$n busiest=$file
  done <"$BENCH_TMP/dumps-$name-$first_protocol"
  [[ -n "$busiest" ]] || continue
  callgrind_annotate --threshold=100 "$busiest" 2>/dev/null |
    awk '/file:function/ { on = 1; getline; next } on && NF' |
    grep -v -e '(below main)' -e 'libc_start' -e ' main \[' -e '0x0000' |
    sed -E 's/\(([^()]|\([^()]*\))*\)//g; s/ \[[^]]*\]$//' | awk -v top="$TOP" 'NR <= top'
done
