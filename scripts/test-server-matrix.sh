#!/usr/bin/env bash
# The server matrix: a smoke subset of the integration tests (SMOKE below: logins with SCRAM, md5
# and auth_query, simple and extended queries, pipelines, COPY, cancels, prepared statements,
# tracked parameters, TLS to the server) against each of PostgreSQL 16, 17 and 18, the npm server
# packages that scripts/install-test-servers.sh installs. The whole integration suite runs
# against Debian's PostgreSQL 15 in ctest (scripts/test-sanitizers.sh, or build-test with
# SKIP_SANITIZE=1). Each major runs the integration binary once, with PG_BINDIR set to that
# major and PG_EXPECT_MAJOR making the harness refuse any other server; the line printed per
# major names the server's version(). Any major that fails, or is missing, fails the script.
#
#   scripts/test-server-matrix.sh                  # build-asan's binaries (what scripts/test.sh runs)
#   scripts/test-server-matrix.sh build-test       # another build directory
#   MATRIX_MAJORS="18" scripts/test-server-matrix.sh
#   MATRIX_FILTER='CancelTest.*' scripts/test-server-matrix.sh   # another --gtest_filter
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${1:-build-asan}
MAJORS=${MATRIX_MAJORS:-16 17 18}
SMOKE="AuthTest.*:CancelTest.*:CopyTest.*:PipelineTest.*:PreparedTest.*"
SMOKE+=":PoolingTest.TransactionModeSharesOneServerBetweenClients"
SMOKE+=":PoolingTest.TransactionModeKeepsServerForWholeTransaction"
SMOKE+=":PoolingTest.SessionModeKeepsSessionStateAndResetsOnRelease"
SMOKE+=":PoolingTest.ParametersAreReappliedWhenServerChanges"
SMOKE+=":PoolingTest.UnknownDatabaseGetsInvalidCatalogName"
SMOKE+=":ServerTlsTest.*"
# pgbench -M prepared for 30 s: the same code paths as the other PreparedTest cases, slowly.
SMOKE+=":-PreparedTest.PgbenchPreparedModeRunsWithoutErrors"
FILTER=${MATRIX_FILTER:-$SMOKE}

tests=$BUILD/tests/integration/pgfleet_integration_tests
if [[ ! -x "$tests" ]]; then
  echo "test-server-matrix.sh: $tests not built" >&2
  exit 1
fi
export PGFLEET_BIN="$PWD/$BUILD/cmd/pgfleet/pgfleet"
export PGFLEET_CONTROLLER_BIN="$PWD/$BUILD/cmd/pgfleet-controller/pgfleet-controller"
if grep -q '^PGFLEET_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  source scripts/sanitizer-env.sh
fi

declare -A bindir
while IFS='=' read -r key value; do
  [[ "$key" =~ ^PG([0-9]+)_BINDIR$ ]] && bindir[${BASH_REMATCH[1]}]=$value
done < <(scripts/install-test-servers.sh --print)

failed=0
for major in $MAJORS; do
  dir=${bindir[$major]:-}
  if [[ -z "$dir" || ! -x "$dir/postgres" ]]; then
    echo "server matrix: PostgreSQL $major: MISSING (${dir:-no path}): run scripts/install-test-servers.sh" >&2
    failed=1
    continue
  fi
  log=$BUILD/server-matrix-pg$major.log
  start=$SECONDS
  if PG_BINDIR=$dir PG_EXPECT_MAJOR=$major timeout -k 30 600 "$tests" --gtest_filter="$FILTER" \
    >"$log" 2>&1; then
    status=passed
  else
    status=FAILED
    failed=1
    cat "$log"
  fi
  version=$(sed -n 's/^test harness: \(PostgreSQL [^ ]*\) .*/\1/p' "$log" | head -n 1)
  summary=$(grep -E '^\[  (PASSED|FAILED)  \]' "$log" | head -n 1 || true)
  echo "server matrix: PostgreSQL $major (${version:-version unknown}, $dir): $status" \
    "in $((SECONDS - start)) s ${summary:+-- $summary}"
done
exit $failed
