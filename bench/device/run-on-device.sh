#!/usr/bin/env bash
# Fleet benchmarks on a bare x86-64 Linux machine (no PostgreSQL, no PgBouncer, no network),
# from the bundle that bench/device/make-bundle.sh builds (.device-bundle/pgfleet-device.tar.xz).
#
#   OUT=/path/to/results bench/device/run-on-device.sh            # the device run (~7 min)
#   OUT=/tmp/devtest-out QUICK=1 bench/device/run-on-device.sh    # tiny durations, a few minutes
#   OUT=... SETUP_ONLY=1 bench/device/run-on-device.sh            # unpack and checks only
#
# It unpacks the bundle into DEV_ROOT (a folder it owns), writes wrappers that run the bundled
# programs with the bundle's libraries (LD_LIBRARY_PATH is set for them only, never for the
# machine's own tools), uses the bundled setpriv/ps/openssl only where the machine's own are
# missing or broken, picks an unprivileged BENCH_USER when run as root (PostgreSQL and PgBouncer
# refuse root), raises the descriptor limit, starts PostgreSQL once as a preflight (initdb, the
# benchmarks' settings, a parallel query; if that fails it tries mmap, then System V shared
# memory, and keeps what works in PG_EXTRA_ARGS), then runs, each part bounded by `timeout`:
#   A  bench/pgbench_compare.sh  TARGETS="pgbouncer:1 pgfleet:1 pgbouncer:16 pgfleet:16 pgfleet:4"
#      at 8 32 64 128 256 clients (ratios pair pgfleet:1/pgbouncer:1 and pgfleet:16/pgbouncer:16;
#      pgfleet 1/4/16 shows the scaling, PgBouncer 16/1 the published fleet's 3.9x)
#   B  bench/pod_pool_compare.sh (workers 4 vs 1 on one pod pool, then the hand-off latency)
#   C  bench/pgbench_compare.sh with RATE (pgbench -R): PgBouncer x1 and pgfleet 1/4/16 workers
#      serving the same transactions per second, so CPU per transaction compares at the same load
#      (issue 18: N workers within 10% of 1 worker's CPU per transaction)
# A failure or timeout of one part never skips the others. Results in OUT (at most 7 files):
#   summary.txt   machine, bundle, exact commands and environment, each part's report tables
#   setup.log     unpacking, tool and user checks, library check on this machine
#   a-fleet.log   a-fleet.tsv (raw figures per run)   b-podpool.log   c-rate.log
#   logs.tar.gz   the benchmarks' own temporary folders: pooler/PostgreSQL logs, configs, pgbench
#                 outputs (no data directories, no per-transaction latency logs)
#
# Knobs (environment): QUICK=1; TOTAL_BUDGET (540 s: part A gets what parts B and C leave);
# A_LIMIT (270) A_TARGETS A_CLIENTS ("8 32 64 128 256") A_DURATION (5) A_WARMUP (2) A_ROUNDS (1) A_SCALE (10)
# A_POOL_SIZE (20); B_LIMIT (150) B_CLIENTS ("16 64") B_DURATION (8) B_WARMUP (2) B_SCALE (10)
# B_HANDOFF_SAMPLES (200) B_BURST_SAMPLES (100) B_TLS_SAMPLES (60) B_TLS (auto); C_LIMIT (70)
# C_TARGETS C_CLIENTS (64) C_RATE (40000) C_DURATION (5); JOBS (pgbench threads, default
# nproc/2); PARTS ("A B C"); PG_EXTRA_ARGS (appended to the postmaster's command
# line, e.g. "-c dynamic_shared_memory_type=mmap"; given, the preflight uses only it); BUNDLE;
# DEV_ROOT (/tmp/pgfleet-device);
# BENCH_USER (an existing account to use instead of creating pgfbench).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${OUT:?set OUT to the folder for the results}"
: "${QUICK:=0}"
: "${SETUP_ONLY:=0}"
: "${BUNDLE:=$REPO/.device-bundle/pgfleet-device.tar.xz}"
: "${DEV_ROOT:=/tmp/pgfleet-device}"
: "${BENCH_USER_NAME:=pgfbench}"
PG_EXTRA_ARGS_GIVEN=${PG_EXTRA_ARGS+given}
: "${PG_EXTRA_ARGS:=}"
: "${PARTS:=A B C}"
: "${TOTAL_BUDGET:=540}"
START=$SECONDS
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
SETUP_LOG=$OUT/setup.log
: >"$SUMMARY"
: >"$SETUP_LOG"

note() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" | tee -a "$SETUP_LOG"; }
summ() { printf '%s\n' "$@" >>"$SUMMARY"; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------------------------
# Machine

machine() {
  local model
  model=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
  echo "date:        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "uname -a:    $(uname -a)"
  echo "os:          $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")"
  echo "cpu:         ${model:-?}; nproc $(nproc), online $(getconf _NPROCESSORS_ONLN)"
  echo "memory:      $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "cgroup cpu:  $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo n/a)"
  echo "user:        $(id)"
  echo "fd limits:   soft $(ulimit -Sn) hard $(ulimit -Hn), fs.nr_open $(cat /proc/sys/fs/nr_open 2>/dev/null || echo ?)"
  echo "somaxconn:   $(cat /proc/sys/net/core/somaxconn 2>/dev/null || echo ?)"
  echo "/dev/shm:    $(awk '$2 == "/dev/shm" {print $3, $4}' /proc/mounts 2>/dev/null | head -n 1)"
  echo "python3:     $(python3 --version 2>&1)"
  local t tools=""
  for t in ps ss setpriv useradd openssl xz zstd perf strace git; do
    if have "$t"; then tools+=" $t"; else tools+=" !$t"; fi
  done
  echo "tools:      $tools  (! = missing)"
  echo "kernel log:  $(dmesg 2>/dev/null | head -n 2 | tr '\n' ' ' | cut -c1-200)"
}

# ---------------------------------------------------------------------------------------------
# Bundle

R=""
WRAP=""
FALLBACK=""
unpack() {
  [[ -f "$BUNDLE" ]] || {
    note "ERROR: no bundle at $BUNDLE (make it with bench/device/make-bundle.sh)"
    return 1
  }
  if [[ -e "$DEV_ROOT" ]]; then
    [[ -f "$DEV_ROOT/.pgfleet-device-root" ]] || {
      note "ERROR: $DEV_ROOT exists and was not made by this script; set DEV_ROOT"
      return 1
    }
    rm -rf "$DEV_ROOT"
  fi
  mkdir -p "$DEV_ROOT" && touch "$DEV_ROOT/.pgfleet-device-root" || return 1
  note "unpacking $BUNDLE ($(($(stat -c %s "$BUNDLE") / 1048576)) MiB) into $DEV_ROOT"
  if [[ -f "$(dirname "$BUNDLE")/SHA256SUMS" ]]; then
    if (cd "$(dirname "$BUNDLE")" && sha256sum -c --quiet SHA256SUMS) >>"$SETUP_LOG" 2>&1; then
      note "bundle checksum ok"
    else
      note "WARNING: the bundle's checksum does not match SHA256SUMS"
    fi
  fi
  if ! { have xz && tar -C "$DEV_ROOT" -xJf "$BUNDLE" 2>>"$SETUP_LOG"; }; then
    note "no working xz: unpacking with python3's tarfile"
    rm -rf "${DEV_ROOT:?}/pgfleet-device"
    python3 - "$BUNDLE" "$DEV_ROOT" <<'EOF' || return 1
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    try:
        t.extractall(sys.argv[2], filter="tar")
    except TypeError:
        t.extractall(sys.argv[2])
EOF
  fi
  R=$DEV_ROOT/pgfleet-device
  [[ -x "$R/pgfleet/pgfleet" ]] || {
    note "ERROR: the bundle has no pgfleet/pgfleet"
    return 1
  }
  # The unprivileged user runs PostgreSQL and PgBouncer from here and writes under tmp/.
  chmod 755 "$DEV_ROOT"
  chmod -R a+rX "$R"
  mkdir -p "$DEV_ROOT/tmp" "$DEV_ROOT/wrap/pgbin" "$DEV_ROOT/fallback"
  chmod 755 "$DEV_ROOT/tmp" "$DEV_ROOT/wrap" "$DEV_ROOT/wrap/pgbin" "$DEV_ROOT/fallback"
  WRAP=$DEV_ROOT/wrap
  FALLBACK=$DEV_ROOT/fallback
  note "bundle: $(head -n 2 "$R/BUILDINFO" | tr '\n' ' ')"
}

# mkwrap FILE TARGET [postgres]: a script that runs TARGET with the bundle's libraries. exec keeps
# the PID (the benchmarks track what they start by PID). The postmaster's wrapper appends
# PG_EXTRA_ARGS when it is started as `postgres -D ...` (never for initdb's own runs).
mkwrap() {
  local file=$1 target=$2 kind=${3:-}
  {
    echo '#!/bin/sh'
    echo "# pgfleet device bundle: run $target with the bundle's libraries"
    echo "LD_LIBRARY_PATH='$R/lib'; export LD_LIBRARY_PATH"
    if [[ "$kind" == openssl ]]; then
      echo "[ -n \"\${OPENSSL_CONF:-}\" ] || [ -f /usr/lib/ssl/openssl.cnf ] || { OPENSSL_CONF='$R/etc/openssl.cnf'; export OPENSSL_CONF; }"
    fi
    if [[ "$kind" == postgres ]]; then
      echo 'if [ "${1:-}" = "-D" ] && [ -n "${PG_EXTRA_ARGS:-}" ]; then set -f; exec '"'$target'"' "$@" $PG_EXTRA_ARGS; fi'
    fi
    echo "exec '$target' \"\$@\""
  } >"$file"
  chmod 755 "$file"
}

make_wrappers() {
  local pgbin=$R/usr/lib/postgresql/15/bin p
  for p in postgres initdb pgbench psql pg_isready pg_ctl pg_controldata; do
    mkwrap "$WRAP/pgbin/$p" "$pgbin/$p" "$([[ $p == postgres ]] && echo postgres)"
  done
  mkwrap "$WRAP/pgbouncer" "$R/usr/sbin/pgbouncer"
  mkwrap "$WRAP/pgfleet" "$R/pgfleet/pgfleet"
  mkwrap "$WRAP/setpriv" "$R/tools/setpriv"
  mkwrap "$WRAP/ps" "$R/tools/ps"
  mkwrap "$WRAP/openssl" "$R/tools/openssl" openssl
}

# A stand-in for `ps -e -o pid=,ppid=`, the one form bench/lib.sh uses, from /proc.
write_ps_shim() {
  cat >"$FALLBACK/ps" <<'EOF'
#!/usr/bin/env bash
# pgfleet device bundle: `ps -e -o pid=,ppid=` from /proc (bench/lib.sh's descendants)
[[ "$*" == "-e -o pid=,ppid=" ]] || { echo "ps shim: only -e -o pid=,ppid=" >&2; exit 1; }
for d in /proc/[0-9]*; do
  read -r line <"$d/stat" 2>/dev/null || continue
  rest=${line##*) }
  read -r _ ppid _ <<<"$rest"
  echo "${d#/proc/} $ppid"
done
EOF
  chmod 755 "$FALLBACK/ps"
}

ps_works() { # PS
  "$1" -e -o pid=,ppid= 2>/dev/null | awk -v p=$$ '$1 == p { f = 1 } END { exit !f }'
}

# The machine's ps, setpriv and openssl where they work; else the bundle's, linked into FALLBACK,
# which goes last on PATH (first only when the machine has a ps that does not work).
choose_tools() {
  local sys_path=$PATH sys ps_first=0
  sys=$(PATH=$sys_path command -v ps 2>/dev/null || true)
  if [[ -n "$sys" ]] && ps_works "$sys"; then
    note "ps: the machine's ($sys)"
  else
    [[ -z "$sys" ]] || ps_first=1
    if ps_works "$WRAP/ps"; then
      ln -sf "$WRAP/ps" "$FALLBACK/ps"
      note "ps: the bundle's (procps; the machine's is ${sys:-missing}${sys:+ and does not work})"
    else
      write_ps_shim
      ps_works "$FALLBACK/ps" || note "WARNING: no working ps, even the /proc shim fails"
      note "ps: /proc shim (neither the machine's nor the bundle's ps works)"
    fi
  fi
  sys=$(PATH=$sys_path command -v setpriv 2>/dev/null || true)
  if [[ -n "$sys" ]] && "$sys" --version >/dev/null 2>&1; then
    note "setpriv: the machine's ($sys)"
  else
    ln -sf "$WRAP/setpriv" "$FALLBACK/setpriv"
    note "setpriv: the bundle's ($("$WRAP/setpriv" --version 2>&1 | head -n 1))"
  fi
  sys=$(PATH=$sys_path command -v openssl 2>/dev/null || true)
  if [[ -n "$sys" ]] && "$sys" version >/dev/null 2>&1; then
    note "openssl: the machine's ($sys)"
  else
    ln -sf "$WRAP/openssl" "$FALLBACK/openssl"
    note "openssl: the bundle's ($("$WRAP/openssl" version 2>&1))"
  fi
  if ((ps_first)); then export PATH="$FALLBACK:$sys_path"; else export PATH="$sys_path:$FALLBACK"; fi
  if have ss && ss -Hltn >/dev/null 2>&1; then
    note "ss: works (port checks use it)"
  else
    note "ss: missing or failing: bench/lib.sh checks ports by connecting to them"
  fi
}

# Every library of the bundled programs resolves inside the bundle (or to this machine's glibc).
check_libs() {
  if ! have ldd; then
    note "no ldd: library check skipped (the smoke tests below still run every program)"
    return 0
  fi
  local f bad=0 n=0 line
  while IFS= read -r f; do
    n=$((n + 1))
    while IFS= read -r line; do
      note "  ldd ${f#"$R"/}: $line"
      bad=1
    done < <(env -i LD_LIBRARY_PATH="$R/lib" ldd "$f" 2>&1 | grep -E 'not found|version .* not found' || true)
  done < <(find "$R/usr/lib/postgresql/15/bin" "$R/usr/lib/postgresql/15/lib" "$R/usr/sbin" \
    "$R/pgfleet" "$R/tools" -type f \( -perm -u+x -o -name '*.so' \))
  if ((bad)); then
    note "WARNING: some bundled libraries do not resolve here (see above)"
  else
    note "libraries: all resolve for $n bundled programs and modules"
  fi
}

smoke() {
  local ok=1
  "$WRAP/pgbin/postgres" --version >>"$SETUP_LOG" 2>&1 || ok=0
  "$WRAP/pgbin/pgbench" --version >>"$SETUP_LOG" 2>&1 || ok=0
  "$WRAP/pgbin/psql" --version >>"$SETUP_LOG" 2>&1 || ok=0
  "$WRAP/pgbouncer" --version >>"$SETUP_LOG" 2>&1 || ok=0
  "$WRAP/pgfleet" --version >>"$SETUP_LOG" 2>&1 || ok=0
  if ((ok)); then note "smoke: postgres, pgbench, psql, pgbouncer, pgfleet --version all run"; else
    note "ERROR: a bundled program does not run (see setup.log)"
    return 1
  fi
}

# ---------------------------------------------------------------------------------------------
# Unprivileged user (only when root): BENCH_USER if given and present; else pgfbench, made with
# useradd, or written into /etc/passwd and /etc/group; else uid/gid 65534.

user_ok() { # USER: can run the bundled postgres and write a folder chowned to it
  local u=$1 d="$DEV_ROOT/tmp/usercheck"
  rm -rf "$d" && mkdir -p "$d" && chown "$u:$(id -g "$u")" "$d" 2>>"$SETUP_LOG" || return 1
  setpriv --reuid="$u" --regid="$u" --init-groups -- "$WRAP/pgbin/postgres" --version \
    >>"$SETUP_LOG" 2>&1 || return 1
  setpriv --reuid="$u" --regid="$u" --init-groups -- touch "$d/x" 2>>"$SETUP_LOG" || return 1
  [[ "$(setpriv --reuid="$u" --regid="$u" --init-groups -- id -u 2>/dev/null)" != 0 ]] || return 1
  rm -rf "$d"
}

choose_user() {
  if [[ $EUID -ne 0 ]]; then
    note "not root: PostgreSQL and PgBouncer run as $(id -un)"
    BENCH_USER=$(id -un)
    return 0
  fi
  if [[ -n "${BENCH_USER:-}" ]] && id "$BENCH_USER" >/dev/null 2>&1 && user_ok "$BENCH_USER"; then
    note "BENCH_USER=$BENCH_USER (given)"
    return 0
  fi
  local u=$BENCH_USER_NAME
  if ! id "$u" >/dev/null 2>&1 && have useradd; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$u" >>"$SETUP_LOG" 2>&1 || note "useradd $u failed"
  fi
  if ! id "$u" >/dev/null 2>&1 && [[ -w /etc/passwd && -w /etc/group ]]; then
    local n=7654
    while grep -q "^[^:]*:[^:]*:$n:" /etc/passwd /etc/group; do n=$((n + 1)); done
    echo "$u:x:$n:$n:pgfleet bench:/nonexistent:/bin/false" >>/etc/passwd
    echo "$u:x:$n:" >>/etc/group
    note "added $u (uid/gid $n) to /etc/passwd and /etc/group (no useradd)"
  fi
  if id "$u" >/dev/null 2>&1 && user_ok "$u"; then
    BENCH_USER=$u
  elif user_ok 65534; then
    BENCH_USER=65534
  else
    note "ERROR: no unprivileged user can run the bundle (see setup.log)"
    return 1
  fi
  note "BENCH_USER=$BENCH_USER ($(id "$BENCH_USER" 2>&1))"
}

# preflight_pg: initdb and start PostgreSQL once as BENCH_USER, with the settings the benchmarks
# use (TCP on loopback, max_connections 1200, shared_buffers 256MB), and run a query and a parallel
# query (dynamic shared memory). Without PG_EXTRA_ARGS given, the first of these that works is
# kept for the benchmarks: none; mmap dynamic shared memory and no huge pages; System V shared
# memory for both.
preflight_one() { # EXTRA -> 0 when PostgreSQL starts and answers
  local extra=$1 d="$DEV_ROOT/tmp/preflight" port pid i ok=1 q
  port=$((20000 + RANDOM % 10000))
  (export PG_EXTRA_ARGS="$extra" && as_bench_user "$PG_BINDIR/postgres" -D "$d/data" -c port="$port" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories="$d" -c max_connections=1200 \
    -c shared_buffers=256MB -c fsync=off -c logging_collector=off) >"$d/postgres.log" 2>&1 &
  pid=$!
  for ((i = 0; i < 200; i++)); do
    "$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  q="SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0;
     SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
     CREATE TEMP TABLE t AS SELECT g FROM generate_series(1, 100000) g;
     SELECT count(*) FROM t; SELECT count(*) FROM pg_class"
  "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres \
    -d postgres -c "SELECT 1" >>"$SETUP_LOG" 2>&1 || ok=0
  "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres \
    -d postgres -c "$q" >>"$SETUP_LOG" 2>&1 || ok=0
  kill -INT "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if ((!ok)); then
    note "  PostgreSQL with [${extra:-defaults}] failed; its log:"
    sed 's/^/    /' "$d/postgres.log" | tail -n 15 | tee -a "$SETUP_LOG"
  fi
  ((ok))
}

as_bench_user() {
  if [[ $EUID -eq 0 ]]; then
    exec setpriv --reuid="$BENCH_USER" --regid="$BENCH_USER" --init-groups -- "$@"
  else
    exec "$@"
  fi
}

preflight_pg() {
  local d="$DEV_ROOT/tmp/preflight" extra t0=$SECONDS
  rm -rf "$d" && mkdir -p "$d"
  [[ $EUID -ne 0 ]] || chown "$BENCH_USER:$(id -g "$BENCH_USER")" "$d"
  if ! (cd "$d" && as_bench_user "$PG_BINDIR/initdb" -D "$d/data" -U postgres --auth=trust \
    -E UTF8 --locale=C --no-sync) >"$d/initdb.log" 2>&1; then
    note "ERROR: initdb fails here; its log:"
    tail -n 20 "$d/initdb.log" | sed 's/^/    /' | tee -a "$SETUP_LOG"
    return 1
  fi
  note "preflight: initdb ok ($(grep -E '^dynamic_shared_memory_type' "$d/data/postgresql.conf" | cut -d'#' -f1 | tr -s ' \t' ' ' | sed 's/ $//'))"
  if [[ -n "${PG_EXTRA_ARGS_GIVEN:-}" ]]; then
    preflight_one "$PG_EXTRA_ARGS" || { note "ERROR: PostgreSQL fails with PG_EXTRA_ARGS='$PG_EXTRA_ARGS'"; return 1; }
  else
    for extra in "" "-c dynamic_shared_memory_type=mmap -c huge_pages=off" \
      "-c dynamic_shared_memory_type=sysv -c shared_memory_type=sysv -c huge_pages=off"; do
      if preflight_one "$extra"; then
        PG_EXTRA_ARGS=$extra
        break
      fi
      extra=FAILED
    done
    [[ "$extra" != FAILED ]] || { note "ERROR: PostgreSQL does not start here with any settings tried"; return 1; }
  fi
  note "preflight: PostgreSQL starts and answers over TCP (parallel query too) with PG_EXTRA_ARGS='$PG_EXTRA_ARGS' ($((SECONDS - t0))s)"
  rm -rf "$d"
}

raise_limits() {
  local n
  for n in 1048576 524288 262144 131072 65536; do
    ulimit -Hn "$n" 2>/dev/null && break
  done
  ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true
  note "fd limits now: soft $(ulimit -Sn) hard $(ulimit -Hn)"
}

# ---------------------------------------------------------------------------------------------
# Parts

# run_part ID LABEL LIMIT LOG -- VAR=VALUE... SCRIPT: the script under `timeout`, its output in
# LOG (and on stdout); then its report lines (those not starting with a [HH:MM:SS] log stamp)
# into the summary.
PART_RC=()
run_part() {
  local id=$1 label=$2 limit=$3 log=$4 rc t0 secs
  shift 5
  summ "" "==================== part $id: $label" \
    "command: timeout -k 20 $limit env $(printf '%q ' "$@")"
  note "part $id ($label): up to ${limit}s, log $log"
  t0=$SECONDS
  timeout -k 20 "$limit" env "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  secs=$((SECONDS - t0))
  PART_RC+=("$id=$rc")
  local what=ok
  case $rc in
  0) ;;
  124 | 137) what="TIMED OUT after ${limit}s (killed)" ;;
  *) what="FAILED" ;;
  esac
  summ "result: rc=$rc $what, ${secs}s"
  summ "--- report"
  grep -vE '^\[[0-9]{2}:[0-9]{2}:[0-9]{2}\]' "$log" | head -n 150 >>"$SUMMARY"
  if ((rc != 0)); then
    summ "--- per-run lines and the last log lines (rc=$rc)"
    grep -E 'tps=|ERROR|error|is gone|failed|FATAL' "$log" | head -n 60 >>"$SUMMARY"
    tail -n 15 "$log" >>"$SUMMARY"
  fi
  note "part $id: rc=$rc ($what), ${secs}s"
}

collect_logs() {
  local list=$DEV_ROOT/loglist
  [[ -d "$TMPDIR" ]] || return 0
  (cd "$TMPDIR" && find . -path '*/pg/data' -prune -o -type f \( -name '*.log' -o -name '*.out' \
    -o -name '*.yaml' -o -name '*.ini' -o -name '*.times' \) -size -4M -print) >"$list"
  tar -C "$TMPDIR" -czf "$OUT/logs.tar.gz" -T "$list" 2>>"$SETUP_LOG" || true
  if [[ -f "$OUT/logs.tar.gz" ]] && (($(stat -c %s "$OUT/logs.tar.gz") > 15 * 1048576)); then
    grep -E '\.log$' "$list" >"$list.small"
    tar -C "$TMPDIR" -czf "$OUT/logs.tar.gz" -T "$list.small" 2>>"$SETUP_LOG" || true
  fi
  note "logs: $OUT/logs.tar.gz ($(wc -l <"$list") files, $(($(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0) / 1024)) KiB)"
}

# ---------------------------------------------------------------------------------------------
# Main

note "pgfleet device benchmark: OUT=$OUT QUICK=$QUICK PARTS=[$PARTS] DEV_ROOT=$DEV_ROOT"
machine | tee -a "$SETUP_LOG"
summ "pgfleet device benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')" "" "== machine"
machine >>"$SUMMARY"

setup_ok=1
unpack || setup_ok=0
if ((setup_ok)); then
  make_wrappers
  choose_tools
  check_libs
  smoke || setup_ok=0
fi
if ((setup_ok)); then
  choose_user || setup_ok=0
fi
raise_limits
if ((setup_ok)); then
  PG_BINDIR=$WRAP/pgbin preflight_pg || setup_ok=0
fi

NPROC=$(nproc)
: "${JOBS:=$((NPROC / 2 > 0 ? NPROC / 2 : 1))}"
export PGFLEET_BIN=$WRAP/pgfleet PGBOUNCER_BIN=$WRAP/pgbouncer PG_BINDIR=$WRAP/pgbin
export BENCH_USER="${BENCH_USER:-}" TMPDIR=$DEV_ROOT/tmp SYSCALLS=off KEEP_TMP=1 PG_EXTRA_ARGS
export PYTHON=python3

summ "" "== bundle"
[[ -f "${R:-/nonexistent}/BUILDINFO" ]] && cat "$R/BUILDINFO" >>"$SUMMARY"
summ "" "== environment for every part" \
  "PGFLEET_BIN=$PGFLEET_BIN (wrapper of $R/pgfleet/pgfleet; the sha256 in the parts' headers is the wrapper's, the binary's is under == bundle)" \
  "PGBOUNCER_BIN=$PGBOUNCER_BIN PG_BINDIR=$PG_BINDIR (wrappers: LD_LIBRARY_PATH=$R/lib)" \
  "BENCH_USER=$BENCH_USER TMPDIR=$TMPDIR SYSCALLS=off KEEP_TMP=1 JOBS=$JOBS" \
  "PG_EXTRA_ARGS='$PG_EXTRA_ARGS' fd limit $(ulimit -Sn)" \
  "PATH=$PATH"
grep -E '^\[.*\] (ps|setpriv|openssl|ss|libraries|BENCH_USER|added|WARNING)' "$SETUP_LOG" |
  sed 's/^\[[^]]*\] /setup: /' >>"$SUMMARY"

if ((!setup_ok)); then
  summ "" "SETUP FAILED: no benchmark ran; see setup.log"
  note "setup failed; no benchmark ran"
elif [[ "$SETUP_ONLY" == 1 ]]; then
  summ "" "SETUP_ONLY=1: no benchmark ran"
else
  if [[ "$QUICK" == 1 ]]; then
    : "${A_CLIENTS:=4 8}" "${A_DURATION:=2}" "${A_WARMUP:=1}" "${A_SCALE:=1}"
    : "${B_CLIENTS:=4 8}" "${B_DURATION:=2}" "${B_WARMUP:=1}" "${B_SCALE:=1}"
    : "${B_HANDOFF_SAMPLES:=30}" "${B_BURST_SAMPLES:=20}" "${B_TLS_SAMPLES:=20}"
    : "${C_CLIENTS:=8}" "${C_DURATION:=2}" "${C_RATE:=500}"
  fi
  # Issue 18's run: PgBouncer x1 and x16 (so_reuseport) and pgfleet with 16 workers (1 and 4 for
  # the scaling curve) at 8 to 256 clients; 25 runs of 5 s fit part A's limit.
  : "${A_LIMIT:=270}" "${A_CLIENTS:=8 32 64 128 256}" "${A_DURATION:=5}" "${A_WARMUP:=2}"
  : "${A_ROUNDS:=1}" "${A_SCALE:=10}" "${A_POOL_SIZE:=20}"
  : "${A_TARGETS:=pgbouncer:1 pgfleet:1 pgbouncer:16 pgfleet:16 pgfleet:4}"
  : "${B_LIMIT:=150}" "${B_CLIENTS:=16 64}" "${B_DURATION:=8}" "${B_WARMUP:=2}" "${B_SCALE:=10}"
  : "${B_HANDOFF_SAMPLES:=200}" "${B_BURST_SAMPLES:=100}" "${B_TLS_SAMPLES:=60}" "${B_TLS:=auto}"
  # Same load: a rate one PgBouncer process serves on a 16-core machine (it peaks near 87k).
  : "${C_LIMIT:=70}" "${C_CLIENTS:=64}" "${C_DURATION:=5}" "${C_RATE:=40000}"
  : "${C_TARGETS:=pgbouncer:1 pgfleet:1 pgfleet:4 pgfleet:16}"

  # Part A gets what is left of TOTAL_BUDGET after setup and the limits of parts B and C (each
  # plus its kill grace).
  if [[ " $PARTS " == *" A "* ]]; then
    left=$((TOTAL_BUDGET - (SECONDS - START) - 20))
    [[ " $PARTS " != *" B "* ]] || left=$((left - B_LIMIT - 20))
    [[ " $PARTS " != *" C "* ]] || left=$((left - C_LIMIT - 20))
    a_limit=$((A_LIMIT < left ? A_LIMIT : left))
    ((a_limit >= 30)) || a_limit=30
    run_part A "fleet scaling, pgbench -S: pgbouncer 1/16, pgfleet 1/4/16" "$a_limit" \
      "$OUT/a-fleet.log" -- TARGETS="$A_TARGETS" CLIENTS="$A_CLIENTS" DURATION="$A_DURATION" \
      WARMUP="$A_WARMUP" ROUNDS="$A_ROUNDS" SCALE="$A_SCALE" POOL_SIZE="$A_POOL_SIZE" \
      JOBS="$JOBS" SYSCALLS=off RESULTS_TSV="$OUT/a-fleet.tsv" \
      bash "$REPO/bench/pgbench_compare.sh"
  fi
  if [[ " $PARTS " == *" B "* ]]; then
    left=$((TOTAL_BUDGET - (SECONDS - START) - 20))
    b_limit=$((B_LIMIT < left ? B_LIMIT : left))
    ((b_limit >= 30)) || b_limit=30
    run_part B "one pool per pod: workers 4 vs 1, hand-off latency" "$b_limit" \
      "$OUT/b-podpool.log" -- CLIENTS="$B_CLIENTS" DURATION="$B_DURATION" WARMUP="$B_WARMUP" \
      SCALE="$B_SCALE" HANDOFF_SAMPLES="$B_HANDOFF_SAMPLES" BURST_SAMPLES="$B_BURST_SAMPLES" \
      TLS_SAMPLES="$B_TLS_SAMPLES" TLS="$B_TLS" JOBS="$JOBS" \
      bash "$REPO/bench/pod_pool_compare.sh"
  fi
  if [[ " $PARTS " == *" C "* ]]; then
    left=$((TOTAL_BUDGET - (SECONDS - START) - 20))
    c_limit=$((C_LIMIT < left ? C_LIMIT : left))
    ((c_limit >= 30)) || c_limit=30
    run_part C "same load (pgbench -R $C_RATE): pgbouncer 1, pgfleet 1/4/16" "$c_limit" \
      "$OUT/c-rate.log" -- TARGETS="$C_TARGETS" CLIENTS="$C_CLIENTS" DURATION="$C_DURATION" \
      RATE="$C_RATE" WARMUP=1 ROUNDS=1 SCALE="$A_SCALE" POOL_SIZE="$A_POOL_SIZE" JOBS="$JOBS" \
      SYSCALLS=off bash "$REPO/bench/pgbench_compare.sh"
  fi
  collect_logs
fi

summ "" "== done: parts ${PART_RC[*]:-none}, setup_ok=$setup_ok, total $((SECONDS - START))s"
note "done in $((SECONDS - START))s; summary follows"
echo
echo "################################ summary.txt"
cat "$SUMMARY"
rc=0
((setup_ok)) || rc=1
for p in "${PART_RC[@]}"; do [[ "${p#*=}" == 0 ]] || rc=1; done
exit "$rc"
