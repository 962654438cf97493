#!/usr/bin/env bash
# Builds everything with clang, AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer
# in build-asan (the same build directory serves tests/fuzz/run.sh: the libFuzzer targets come out
# of this build too) and runs the whole ctest suite there: unit tests and the integration tests,
# whose harness launches this build's pgfleet and pgfleet-controller. The first report aborts the
# process that hit it; the harness fails the test whose pgfleet (supervisor or worker) or
# controller logged one, or whose command output holds one.
#
#   scripts/test-sanitizers.sh                 # what scripts/test.sh runs
#   scripts/test-sanitizers.sh -R integration  # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."

SANITIZE_BUILD_DIR=${SANITIZE_BUILD_DIR:-build-asan}
SANITIZE_CXX=${SANITIZE_CXX:-clang++}
if ! command -v "$SANITIZE_CXX" >/dev/null; then
  echo "test-sanitizers.sh: $SANITIZE_CXX not found (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi

# tests/fuzz/run.sh configures the same directory with the same options.
cmake -S . -B "$SANITIZE_BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER="$SANITIZE_CXX" \
  -DPGFLEET_SANITIZE=ON -DPGFLEET_FUZZ=ON -DPGFLEET_BUILD_TESTS=ON -DPGFLEET_WERROR=ON >/dev/null
ninja -C "$SANITIZE_BUILD_DIR" ${SANITIZE_JOBS:+-j "$SANITIZE_JOBS"}

# ASAN_OPTIONS and UBSAN_OPTIONS (shared with scripts/test-server-matrix.sh).
source scripts/sanitizer-env.sh
export PGFLEET_BIN="$PWD/$SANITIZE_BUILD_DIR/cmd/pgfleet/pgfleet"
export PGFLEET_CONTROLLER_BIN="$PWD/$SANITIZE_BUILD_DIR/cmd/pgfleet-controller/pgfleet-controller"
# Unit tests two at a time; the integration test is RUN_SERIAL (tests/integration/CMakeLists.txt).
ctest --test-dir "$SANITIZE_BUILD_DIR" --output-on-failure --timeout 900 -j 2 "$@"
