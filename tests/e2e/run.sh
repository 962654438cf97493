#!/usr/bin/env bash
# pgfleet on a real single-node Kubernetes, end to end (issue 32), as root on Debian 12:
#   1. installs what it needs (containerd, runc, CNI plugins, iptables, conntrack, podman,
#      buildah, debootstrap, PostgreSQL: Debian packages; helm: Go module);
#   2. builds Kubernetes, etcd, CoreDNS, pause and Prometheus (tests/e2e/build.sh; cached: the first run
#      takes about 20 minutes more on 2 cores);
#   3. builds the pgfleet image (scripts/build-image.sh) and a client image with psql/pgbench;
#   4. starts the cluster (tests/e2e/cluster.sh) and a PostgreSQL on the node;
#   5. runs tests/e2e/checks.py (helm install in standalone and sidecar mode, scaling, cancels,
#      rolling update, PodDisruptionBudget, RBAC, Prometheus); its last line says what passed;
#   6. stops everything it started (also on failure).
#
#   tests/e2e/run.sh                          # the image's programs compiled in the image
#   PREBUILT=build-test tests/e2e/run.sh      # the image takes a build tree's programs
#   KEEP=1 tests/e2e/run.sh                   # leaves the cluster up (cluster.sh down ends it)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
STATE=${PGFLEET_E2E_STATE:-/var/tmp/pgfleet-e2e}
IMAGE=${IMAGE:-localhost/pgfleet:dev}
CLIENT_IMAGE=localhost/pgfleet-e2e-client:dev
start=$SECONDS
say() { printf '== %s (%d s)\n' "$*" $((SECONDS - start)); }

[[ $(id -u) -eq 0 ]] || { echo "run.sh: needs root" >&2; exit 1; }
packages=(containerd runc containernetworking-plugins iptables conntrack podman buildah
          debootstrap postgresql postgresql-contrib python3-psycopg2 curl openssl gcc libc6-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's packages start their own services where systemd runs; none are needed here.
export PATH="$PATH:/usr/local/go/bin"
source tests/helm/tools.sh

say "building Kubernetes, etcd, CoreDNS, pause (cached)"
BIN=$(tests/e2e/build.sh | tail -1)

say "building the images"
IMAGE=$IMAGE scripts/build-image.sh ${PREBUILT:+--prebuilt "$PREBUILT"}
podman build --runtime runc --ulimit nproc=32768:32768 --ulimit nofile=16384:16384 \
  --network host -q -t "$CLIENT_IMAGE" -f tests/e2e/client.Containerfile tests/e2e >/dev/null
archives=$(mktemp -d /tmp/pgfleet-e2e-images.XXXXXX)
podman save --quiet --format docker-archive -o "$archives/pgfleet.tar" "$IMAGE"
podman save --quiet --format docker-archive -o "$archives/client.tar" "$CLIENT_IMAGE"

cleanup() {
  local rc=$?
  if [[ "${KEEP:-0}" != 1 ]]; then
    if [[ -n "${pg_data:-}" ]]; then
      runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    tests/e2e/cluster.sh down || true
  fi
  rm -rf "$archives"
  exit $rc
}
trap cleanup EXIT

say "starting the cluster"
# A cluster left up by KEEP=1 goes first.
if ip netns list | grep -qw pgfleet-e2e; then tests/e2e/cluster.sh down; fi
tests/e2e/cluster.sh up >"$archives/env"
# shellcheck disable=SC1091
source <(sed 's/^/export /' "$archives/env")
tests/e2e/cluster.sh import "$archives/pgfleet.tar"
tests/e2e/cluster.sh import "$archives/client.tar"

say "starting PostgreSQL on the node ($E2E_NODE_IP:5432)"
PG_BINDIR=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pg_data=$STATE/pg
install -d -o postgres "$pg_data"
install -o postgres /dev/null "$STATE/logs/postgres.log"
runuser -u postgres -- "$PG_BINDIR/initdb" -D "$pg_data" -U postgres -A trust >/dev/null
cat >>"$pg_data/pg_hba.conf" <<EOF
host all all 10.244.0.0/16 scram-sha-256
host all all $E2E_NODE_IP/32 scram-sha-256
EOF
cat >>"$pg_data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1,$E2E_NODE_IP'
unix_socket_directories = '$pg_data'
max_connections = 100
fsync = off
EOF
nsenter --net="/run/netns/$E2E_NETNS" runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$pg_data" \
  -l "$STATE/logs/postgres.log" -w start >/dev/null
# cluster.sh down ends it with the cluster's own processes (KEEP=1 leaves both up).
head -1 "$pg_data/postmaster.pid" >"$STATE/pids/postgres.pid"
psql_node() { tests/e2e/cluster.sh exec psql -h 127.0.0.1 -U postgres -XAtq "$@"; }
psql_node -c "CREATE ROLE app LOGIN PASSWORD 'app-e2e-password'" -c "CREATE DATABASE app OWNER app"
tests/e2e/cluster.sh exec env PGPASSWORD=app-e2e-password pgbench -h 127.0.0.1 -U app -i -q app \
  >/dev/null 2>&1

say "running the checks"
E2E_PG_PORT=5432 E2E_PGDATA=$pg_data E2E_PG_CTL=$PG_BINDIR/pg_ctl E2E_PROMETHEUS=$BIN/prometheus E2E_IMAGE=$IMAGE E2E_CLIENT_IMAGE=$CLIENT_IMAGE \
  PATH="$BIN:$TOOLS/bin:$PATH" tests/e2e/cluster.sh exec /usr/bin/python3 tests/e2e/checks.py
