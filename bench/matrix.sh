#!/usr/bin/env bash
# pgfleet against PgBouncer in the configurations users run (issue 18): one
# bench/pgbench_compare.sh run per row, each row changing one setting from the base row, and a
# table of the pgfleet/PgBouncer ratios with issue 18's goals checked (CPU per transaction at
# most 0.8x PgBouncer's at 128 clients and 0.9x at 32; TPS at least PgBouncer's at 128).
#
#   bench/matrix.sh                       # every row, 32 and 128 clients, 8 s per run
#   ROWS="base md5 tls" bench/matrix.sh   # some rows
#
# Rows (base: trust auth, metrics on, no client TLS, pgbench -j 1, -M simple):
#   base md5 scram tls metrics_off j2 extended reporter, and prepared (-M prepared: not in the
#   default set, because Debian's PgBouncer 1.18 has no prepared statements in transaction mode;
#   bench/prepared_compare.sh covers it)
# "reporter" is the configuration issue 18 was filed with: md5, metrics on, pgbench -j 2,
# scale 5. Environment: ROWS, CLIENTS ("32 128"), DURATION (8), ROUNDS (1), WARMUP (2),
# WORKERS (1, pgfleet workers; PgBouncer runs as many processes), SCALE (10), POOL_SIZE (20),
# PGFLEET_BIN, PGBOUNCER_BIN, PG_BINDIR as in lib.sh. With PGBOUNCER2_BIN (a newer PgBouncer
# built from its release tag outside the repo) and PGDOG_BIN (PgDog built from source outside
# the repo; PGDOG_THREADS worker threads, default WORKERS) each row runs them too, and the table
# gets a row per client count against each. Each row's full report is kept in MATRIX_DIR (default: a
# temporary directory, printed at the end).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${ROWS:=base md5 scram tls metrics_off j2 extended reporter}"
: "${CLIENTS:=32 128}"
: "${DURATION:=8}"
: "${ROUNDS:=1}"
: "${WARMUP:=2}"
: "${WORKERS:=1}"
: "${SCALE:=10}"
: "${MATRIX_DIR:=$(mktemp -d /tmp/pgfleet-matrix.XXXXXX)}"
mkdir -p "$MATRIX_DIR"

# row_env ROW: the settings that make ROW (one per line, NAME=VALUE).
row_env() {
  local base=(AUTH=trust CLIENT_TLS=off PGFLEET_METRICS=on JOBS=1 PROTOCOL=simple SCALE="$SCALE")
  case "$1" in
  base) printf '%s\n' "${base[@]}" ;;
  md5) printf '%s\n' "${base[@]}" AUTH=md5 ;;
  scram) printf '%s\n' "${base[@]}" AUTH=scram ;;
  tls) printf '%s\n' "${base[@]}" CLIENT_TLS=on ;;
  metrics_off) printf '%s\n' "${base[@]}" PGFLEET_METRICS=off ;;
  j2) printf '%s\n' "${base[@]}" JOBS=2 ;;
  extended) printf '%s\n' "${base[@]}" PROTOCOL=extended ;;
  prepared) printf '%s\n' "${base[@]}" PROTOCOL=prepared ;;
  reporter) printf '%s\n' "${base[@]}" AUTH=md5 JOBS=2 SCALE=5 ;;
  *) return 1 ;;
  esac
}

for row in $ROWS; do
  row_env "$row" >/dev/null || {
    echo "matrix.sh: unknown row '$row'" >&2
    exit 2
  }
done

echo "== matrix: pgfleet w$WORKERS vs pgbouncer x$WORKERS, pgbench -S, clients [$CLIENTS]," \
  "${DURATION}s per run, $ROUNDS round(s), $(nproc) cores"
echo "started $(date -u '+%Y-%m-%d %H:%M UTC'), repo $(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null)"
failed_rows=()
targets="pgbouncer:$WORKERS"
[[ -z "${PGBOUNCER2_BIN:-}" ]] || targets+=" pgbouncer2:$WORKERS"
[[ -z "${PGDOG_BIN:-}" ]] || targets+=" pgdog:${PGDOG_THREADS:-$WORKERS}"
targets+=" pgfleet:$WORKERS"
for row in $ROWS; do
  mapfile -t settings < <(row_env "$row")
  echo "[$(date -u +%H:%M:%S)] row $row: ${settings[*]}" >&2
  env "${settings[@]}" CLIENTS="$CLIENTS" DURATION="$DURATION" ROUNDS="$ROUNDS" WARMUP="$WARMUP" \
    SYSCALLS=off TARGETS="$targets" \
    bash "$HERE/pgbench_compare.sh" >"$MATRIX_DIR/$row.log" 2>&1 || failed_rows+=("$row")
done

echo
fmt='%-26s %7s %9s %13s %16s %s\n'
# shellcheck disable=SC2059
printf "$fmt" row clients TPS pooler_us/tx "us/tx (f / b)" goal
for row in $ROWS; do
  # Ratio lines of pgbench_compare.sh: "pgfleet wN / pgbouncer xN  CLIENTS  TPSx  CPUx  SYSx  F / B"
  awk -v row="$row" -v fmt="$fmt" '
    /^== ratios pgfleet/ { on = 1; next }
    on && /^pgfleet w[0-9]+ \/ (pgbouncer(-[0-9.]+)? x|pgdog t)[0-9]+/ {
      c = $6; tps = $7; cpu = $8; f = $10; b = $12
      peer = ($4 == "pgbouncer") ? "" : " vs " $4
      t = tps; sub(/x$/, "", t); u = cpu; sub(/x$/, "", u)
      limit = (c >= 128) ? 0.8 : 0.9
      goal = (u + 0 <= limit) ? "cpu ok" : sprintf("cpu > %.1fx", limit)
      if (c >= 128) goal = goal ((t + 0 >= 1.0) ? ", tps ok" : ", tps < 1x")
      printf fmt, row peer, c, tps, cpu, f " / " b, goal
      seen = 1
    }
    END { if (!seen) printf fmt, row, "-", "n/a", "n/a", "-", "no result (see log)" }
  ' "$MATRIX_DIR/$row.log"
done
echo "(ratios pgfleet / PgBouncer, all rounds summed; goals from issue 18: pooler CPU per"
echo " transaction <= 0.8x at 128 clients and <= 0.9x at 32, TPS >= 1x at 128)"
echo "reports: $MATRIX_DIR"
if ((${#failed_rows[@]} > 0)); then
  echo "FAILED rows: ${failed_rows[*]}"
  exit 1
fi
