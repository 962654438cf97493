#!/usr/bin/env bash
# Runs every test of pgfleet on a Debian 12 machine: installs what it needs (as root), builds with
# warnings as errors, then runs unit tests, integration tests against a real PostgreSQL that the
# harness starts itself, each libFuzzer target for a bounded time, the pgbench soak through pgfleet,
# and the Helm/manifest checks.
#
#   scripts/test.sh            # everything
#   SKIP_INSTALL=1 scripts/test.sh
#   FUZZ_SECONDS=60 scripts/test.sh   # longer fuzzing (default 20 s per target); SKIP_FUZZ=1 skips
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    scripts/install-deps.sh
  else
    echo "test.sh: not root, skipping dependency installation" >&2
  fi
fi

BUILD_DIR=${BUILD_DIR:-build-test}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGFLEET_WERROR=ON \
  -DPGFLEET_BUILD_TESTS=ON
ninja -C "$BUILD_DIR"
PGFLEET_BIN="$PWD/$BUILD_DIR/cmd/pgfleet/pgfleet"
export PGFLEET_BIN

failed=0
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 || failed=1

# Real drivers (psycopg 3, asyncpg, psycopg2, pgjdbc) through pgfleet in transaction mode, with
# server-side prepared statements. Debian's python3: the drivers and pytest are Debian packages.
timeout -k 30 300 /usr/bin/python3 -m pytest -q tests/drivers || failed=1

# libFuzzer targets (clang, ASan+UBSan) over their seed corpora; a crash fails the run.
# FUZZ_SECONDS per target (6 targets); SKIP_FUZZ=1 skips them.
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} tests/fuzz/run.sh || failed=1
fi

if [[ -x bench/soak.sh ]]; then
  DURATION=${SOAK_DURATION:-30} bench/soak.sh || failed=1
fi
if [[ -x tests/helm/run.sh ]]; then
  tests/helm/run.sh || failed=1
fi

if [[ $failed -ne 0 ]]; then
  echo "test.sh: FAILED" >&2
  exit 1
fi
echo "test.sh: all test suites passed"
