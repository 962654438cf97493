#!/usr/bin/env bash
# Installs everything, builds pgfleet, starts a private PostgreSQL and pgfleet in front of it on
# 127.0.0.1:6432, and initialises a pgbench database, so you can at once run
#   psql -h 127.0.0.1 -p 6432 -U postgres app
#   pgbench -h 127.0.0.1 -p 6432 -U postgres -c 16 -T 10 app
#   psql -h 127.0.0.1 -p 6432 -U postgres pgfleet    (the admin console: SHOW POOLS;)
# `scripts/quickstart.sh stop` stops both. Run as root on Debian 12 (PostgreSQL itself runs as the
# unprivileged postgres account).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=${PGFLEET_QUICKSTART_DIR:-/tmp/pgfleet-quickstart}
PG_PORT=${PG_PORT:-5433}
PGFLEET_PORT=${PGFLEET_PORT:-6432}

pg_bindir() {
  for v in 17 16 15; do
    [[ -x /usr/lib/postgresql/$v/bin/postgres ]] && { echo "/usr/lib/postgresql/$v/bin"; return; }
  done
  echo "no PostgreSQL server binaries found" >&2
  exit 1
}

as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop() {
  if [[ -f $STATE/pgfleet.pid ]]; then
    kill "$(cat "$STATE/pgfleet.pid")" 2>/dev/null || true
    rm -f "$STATE/pgfleet.pid"
  fi
  if [[ -f $STATE/data/postmaster.pid ]]; then
    as_postgres "$(pg_bindir)/pg_ctl" -D "$STATE/data" -m fast -w stop >/dev/null || true
  fi
  echo "stopped"
}

if [[ "${1:-}" == stop ]]; then
  stop
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then scripts/install-deps.sh; fi
BUILD_DIR=build scripts/build.sh >/dev/null
BIN=$PWD/build/cmd/pgfleet/pgfleet
BINDIR=$(pg_bindir)

stop >/dev/null 2>&1 || true
mkdir -p "$STATE"
[[ $(id -u) -eq 0 ]] && chown postgres: "$STATE"
if [[ ! -d $STATE/data ]]; then
  as_postgres "$BINDIR/initdb" -D "$STATE/data" -U postgres --auth=trust >/dev/null
fi
as_postgres "$BINDIR/pg_ctl" -D "$STATE/data" -l "$STATE/postgres.log" -w \
  -o "-p $PG_PORT -k $STATE -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
as_postgres "$BINDIR/psql" -h "$STATE" -p "$PG_PORT" -U postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname='app'" | grep -q 1 ||
  as_postgres "$BINDIR/createdb" -h "$STATE" -p "$PG_PORT" -U postgres app
as_postgres "$BINDIR/pgbench" -i -q -s 1 -h "$STATE" -p "$PG_PORT" -U postgres app >/dev/null 2>&1

cat > "$STATE/pgfleet.yaml" <<YAML
listen: {address: 127.0.0.1, port: $PGFLEET_PORT}
databases:
  "*": {host: 127.0.0.1, port: $PG_PORT}
pool:
  pool_mode: transaction
  default_pool_size: 20
auth:
  type: trust
admin: {users: [postgres]}   # the quickstart user may open the admin console (database pgfleet)
YAML
"$BIN" --check-config "$STATE/pgfleet.yaml" >/dev/null
nohup "$BIN" --config "$STATE/pgfleet.yaml" >"$STATE/pgfleet.log" 2>&1 &
echo $! >"$STATE/pgfleet.pid"
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PGFLEET_PORT") 2>/dev/null && break
  sleep 0.1
done

cat <<MSG
pgfleet is listening on 127.0.0.1:$PGFLEET_PORT in front of PostgreSQL on 127.0.0.1:$PG_PORT.
  psql -h 127.0.0.1 -p $PGFLEET_PORT -U postgres app
  pgbench -h 127.0.0.1 -p $PGFLEET_PORT -U postgres -c 16 -j 2 -T 10 app
Admin console (try SHOW POOLS;):
  psql -h 127.0.0.1 -p $PGFLEET_PORT -U postgres pgfleet
Logs: $STATE/pgfleet.log  Config: $STATE/pgfleet.yaml
Stop: scripts/quickstart.sh stop
MSG
