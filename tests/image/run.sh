#!/usr/bin/env bash
# The pgfleet image, run as a user would run it (issue 32, item 1): podman runs the image that
# scripts/build-image.sh built against a PostgreSQL started here (initdb in a temp dir, loopback
# only), with the host's network as the sandbox allows (../shared/CONTAINERS.md).
#
#   tests/image/run.sh                       # builds the image first (scripts/build-image.sh)
#   PREBUILT=build-test tests/image/run.sh   # ... from that build tree's programs (CI)
#   IMAGE=localhost/pgfleet:dev SKIP_BUILD=1 tests/image/run.sh
#
# Checks, each a line "ok"/"FAILED", then "N passed, M failed":
#   - pgfleet serves from the image as uid 65532 (every process); /healthz and /readyz answer;
#   - psql, pgbench (no failed transaction) and the admin console through it;
#   - SIGTERM drains: a transaction in flight commits, the container exits 0;
#   - the same image runs pgfleet-controller, and a pgfleet container registers with it.
# Every container and process it starts is removed by name or PID at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-localhost/pgfleet:dev}
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  scripts/build-image.sh ${PREBUILT:+--prebuilt "$PREBUILT"} || exit 1
fi

PG_BINDIR=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
WORK=$(mktemp -d /tmp/pgfleet-image-test.XXXXXX)
chmod 755 "$WORK"
TAG="pgfleet-image-test-$$"
PODMAN_RUN=(podman run --runtime runc --ulimit nproc=32768:32768 --ulimit nofile=16384:16384
            --network host)
passed=0
failed=0
pg_pid=""

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if "$@" >"$WORK/check.log" 2>&1; then
    echo "ok      $name"
    passed=$((passed + 1))
  else
    echo "FAILED  $name"
    sed 's/^/        /' "$WORK/check.log" | tail -20
    failed=$((failed + 1))
  fi
}
# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds, at most SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}
cleanup() {
  for name in "$TAG-pgfleet" "$TAG-drain" "$TAG-controller" "$TAG-pod"; do
    podman rm -f -t 2 "$name" >/dev/null 2>&1
  done
  if [[ -n $pg_pid ]]; then
    kill "$pg_pid" 2>/dev/null
    wait_for 20 bash -c "! kill -0 $pg_pid"
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# PostgreSQL, as the unprivileged user its initdb needs.
PG_PORT=$(free_port)
id pgfleettest >/dev/null 2>&1 || useradd --system --no-create-home pgfleettest
install -d -o pgfleettest "$WORK/pg"
su pgfleettest -s /bin/sh -c "$PG_BINDIR/initdb -D $WORK/pg/data -U postgres -A trust" \
  >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log"; exit 1; }
su pgfleettest -s /bin/sh -c "exec $PG_BINDIR/postgres -D $WORK/pg/data -p $PG_PORT \
  -c listen_addresses=127.0.0.1 -c unix_socket_directories=$WORK/pg -c fsync=off" \
  >"$WORK/pg.log" 2>&1 &
pg_pid=$!
wait_for 30 psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -Atc "SELECT 1" || {
  cat "$WORK/pg.log"
  exit 1
}
psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE app" >/dev/null

PORT=$(free_port)
METRICS=$(free_port)
mkdir -p "$WORK/etc"
cat >"$WORK/etc/pgfleet.yaml" <<EOF
workers: 2
listen: {address: 127.0.0.1, port: $PORT}
databases:
  app: {host: 127.0.0.1, port: $PG_PORT}
pool: {pool_mode: transaction, default_pool_size: 8}
admin: {users: [postgres]}
metrics: {listen: 127.0.0.1:$METRICS}
EOF
chmod -R a+rX "$WORK/etc"

"${PODMAN_RUN[@]}" -d --name "$TAG-pgfleet" -v "$WORK/etc:/etc/pgfleet:ro" "$IMAGE" >/dev/null
http_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$1$2"; }
check "the container becomes ready (/readyz)" wait_for 60 http_ok "$METRICS" /readyz
check "/healthz answers" http_ok "$METRICS" /healthz
runs_as_65532() {  # the container's processes (supervisor, workers, lease) and their real uids
  local pid uids
  pid=$(podman inspect --format '{{.State.Pid}}' "$TAG-pgfleet") || return 1
  uids=$(for p in $pid $(pgrep -P "$pid"); do awk '/^Uid:/ {print $2}' "/proc/$p/status"; done |
         sort -u)
  echo "uids: $uids"
  [[ $uids == 65532 ]]
}
check "every pgfleet process runs as uid 65532" runs_as_65532
check "psql through pgfleet" bash -c \
  "[[ \$(psql -h 127.0.0.1 -p $PORT -U postgres -d app -Atc 'SELECT 42') == 42 ]]"
pgbench_through() {
  pgbench -h 127.0.0.1 -p "$PG_PORT" -U postgres -i -s 1 -q app >/dev/null 2>&1 || return 1
  pgbench -h 127.0.0.1 -p "$PORT" -U postgres -n -c 8 -j 2 -T 5 app >"$WORK/pgbench.log" 2>&1 ||
    { cat "$WORK/pgbench.log"; return 1; }
  cat "$WORK/pgbench.log"
  grep -Eq "number of failed transactions: 0 |^number of transactions actually processed: [1-9]" \
    "$WORK/pgbench.log" &&
    ! grep -Eq "number of failed transactions: [1-9]" "$WORK/pgbench.log"
}
check "pgbench through pgfleet, no failed transaction" pgbench_through
check "the admin console (SHOW POOLS)" bash -c \
  "psql -h 127.0.0.1 -p $PORT -U postgres -d pgfleet -Atc 'SHOW POOLS' | grep -q '^app|'"
check "/metrics counts the transactions" bash -c \
  "curl -fsS http://127.0.0.1:$METRICS/metrics | grep -q '^pgfleet_'"

# SIGTERM drains: a transaction in flight when the signal comes commits, then the container exits 0.
drain() {
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d app -qc \
    "CREATE TABLE IF NOT EXISTS drained (n int)" || return 1
  psql -h 127.0.0.1 -p "$PORT" -U postgres -d app -v ON_ERROR_STOP=1 -qc \
    "BEGIN; SELECT pg_sleep(2); INSERT INTO drained VALUES (1); COMMIT" >"$WORK/drain.log" 2>&1 &
  local client=$!
  wait_for 10 bash -c "[[ \$(psql -h 127.0.0.1 -p $PG_PORT -U postgres -Atc \
    \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2); INSERT%' \
      AND pid <> pg_backend_pid()\") -ge 1 ]]" || { echo "the transaction never started"; return 1; }
  podman kill --signal TERM "$TAG-pgfleet" >/dev/null || return 1
  wait "$client" || { cat "$WORK/drain.log"; return 1; }
  [[ $(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d app -Atc "SELECT count(*) FROM drained") == 1 ]] ||
    return 1
  local code
  code=$(timeout 40 podman wait "$TAG-pgfleet") || return 1
  echo "exit code $code"
  [[ $code == 0 ]]
}
check "SIGTERM lets the transaction in flight commit, then the container exits 0" drain

# The controller from the same image, and a pod that registers with it.
CONTROLLER=$(free_port)
CONTROLLER_METRICS=$(free_port)
POD_PORT=$(free_port)
POD_METRICS=$(free_port)
PEERING=$(free_port)
echo "image-test-token" >"$WORK/etc/token"
cat >"$WORK/etc/controller.yaml" <<EOF
databases:
  app: {host: 127.0.0.1, port: $PG_PORT, max_db_connections: 6}
controller: {listen: 127.0.0.1:$CONTROLLER}
peering: {token_file: /etc/pgfleet/token}
metrics: {listen: 127.0.0.1:$CONTROLLER_METRICS}
EOF
cat >"$WORK/etc/pod.yaml" <<EOF
workers: 2
listen: {address: 127.0.0.1, port: $POD_PORT}
databases:
  app: {host: 127.0.0.1, port: $PG_PORT, max_db_connections: 6}
pool: {pool_mode: transaction, default_pool_size: 8}
metrics: {listen: 127.0.0.1:$POD_METRICS}
peering: {listen: 127.0.0.1:$PEERING, token_file: /etc/pgfleet/token}
controller: {address: 127.0.0.1:$CONTROLLER}
EOF
chmod -R a+rX "$WORK/etc"
"${PODMAN_RUN[@]}" -d --name "$TAG-controller" -v "$WORK/etc:/etc/pgfleet:ro" \
  --entrypoint pgfleet-controller "$IMAGE" --config /etc/pgfleet/controller.yaml >/dev/null
check "pgfleet-controller runs from the image (/metrics answers)" \
  wait_for 30 http_ok "$CONTROLLER_METRICS" /metrics
"${PODMAN_RUN[@]}" -d --name "$TAG-pod" -v "$WORK/etc:/etc/pgfleet:ro" "$IMAGE" \
  --config /etc/pgfleet/pod.yaml >/dev/null
registered() { podman logs "$TAG-pod" 2>&1 | grep -q "event=controller_registered"; }
check "a pgfleet container registers with the controller" wait_for 30 registered
serves_app() { [[ $(psql -h 127.0.0.1 -p "$POD_PORT" -U postgres -d app -Atc 'SELECT 7') == 7 ]]; }
check "... and serves through its share" serves_app

if ((failed > 0)); then
  for name in "$TAG-pgfleet" "$TAG-controller" "$TAG-pod"; do
    echo "--- podman logs $name (last 30 lines)"
    podman logs "$name" 2>&1 | tail -30
  done
fi
echo
echo "image: $passed passed, $failed failed"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
