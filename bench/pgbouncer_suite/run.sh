#!/usr/bin/env bash
# PgBouncer 1.25's own test suite run against pgfleet (issue 35, item 6): the yardstick of "a
# drop-in for PgBouncer users". The suite (bench/pgbouncer_suite/pgbouncer_test, unmodified) starts
# TEST_DIR/../pgbouncer with its ini; here that is bench/pgbouncer_suite/pgbouncer, which starts
# pgfleet on the ini. Each test is in scope or not (scope.txt, with the reason); the summary
# counts both and fails when an in-scope test fails.
#
#   PGFLEET_BIN=build-rel/cmd/pgfleet/pgfleet bench/pgbouncer_suite/run.sh [pytest args]
#
# Runs as the postgres OS user (the suite runs initdb). Not part of scripts/test.sh: it takes
# longer than CI allows; results go in bench/pgbouncer_suite/RESULTS.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PGFLEET_BIN="$(realpath "${PGFLEET_BIN:-$ROOT/build-rel/cmd/pgfleet/pgfleet}")"
PG_BINDIR="${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}"
VENV="${VENV:-/var/tmp/pgbouncer-suite-venv}"  # readable by RUN_AS
JOBS="${JOBS:-2}"
RUN_AS="${RUN_AS:-postgres}"

[[ -x "$PGFLEET_BIN" ]] || { echo "run.sh: no pgfleet binary at $PGFLEET_BIN" >&2; exit 2; }
requirements="$ROOT/bench/pgbouncer_suite/requirements.txt"
stamp="$(sha256sum "$requirements" | cut -c1-16)"
if [[ "$(cat "$VENV/.requirements" 2>/dev/null)" != "$stamp" ]]; then
  # Debian's python: RUN_AS must be able to run it (not a python under /root).
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  echo "$stamp" >"$VENV/.requirements"
fi

work="$(mktemp -d /tmp/pgbouncer-suite.XXXXXX)"
cp -r "$ROOT/bench/pgbouncer_suite/pgbouncer_test" "$work/test"
cp "$ROOT/bench/pgbouncer_suite/pgbouncer" "$work/pgbouncer"
cp "$ROOT/bench/pgbouncer_suite/pytest.ini" "$work/pytest.ini"
cp "$PGFLEET_BIN" "$work/pgfleet"
# The suite reads PgBouncer's longest password (1.25's) from its source tree.
mkdir "$work/include"
echo "#define MAX_PASSWORD 2048" >"$work/include/bouncer.h"
# ... and what the build supports from its config.mak: TLS, and not LDAP (pgfleet has none yet).
printf 'tls_support = yes\nldap_support = no\n' >"$work/config.mak"
chmod -R a+rX "$VENV"
chown -R "$RUN_AS" "$work"
echo "run.sh: $work (pgfleet $("$work/pgfleet" --version), PostgreSQL from $PG_BINDIR)"
set +e
(cd "$work/test" && runuser -u "$RUN_AS" -- env PATH="$PG_BINDIR:$PATH" PGFLEET_BIN="$work/pgfleet" \
  HOME="$work" "$VENV/bin/python" -m pytest -n "$JOBS" -q -rN --junitxml="$work/results.xml" \
  . "$@") >"$work/pytest.log" 2>&1
set -e
# Poolers the suite started as daemons (-d) and left behind: this run's binary, by PID.
for pid in $(pgrep -f "^$work/pgfleet " || true); do kill "$pid" 2>/dev/null || true; done
tail -5 "$work/pytest.log"
"$VENV/bin/python" "$ROOT/bench/pgbouncer_suite/summary.py" "$work/results.xml" \
  "$ROOT/bench/pgbouncer_suite/scope.txt"
