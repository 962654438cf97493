#!/usr/bin/env bash
# Runs every test of pgfleet on a Debian 12 machine: installs what it needs (as root), checks the
# layering (scripts/check-layering.py: no include of a library that the target does not link),
# builds with g++ and warnings as errors (build-test: unit tests, then real drivers, the pgbench
# soak and the Helm/manifest checks against that pgfleet), builds again with clang, ASan and UBSan
# (build-asan: unit tests, and integration tests against a real PostgreSQL that the harness starts
# itself), and runs each libFuzzer target of that build for a bounded time. The server matrix
# (scripts/test-server-matrix.sh) runs a smoke subset of the integration tests against
# PostgreSQL 16, 17 and 18 too, and tests/drivers/test_libpq18.py runs libpq 18 (protocol 3.2,
# direct TLS) through pgfleet; scripts/install-test-servers.sh installs both toolchains.
#
#   scripts/test.sh            # everything
#   SKIP_INSTALL=1 scripts/test.sh
#   FUZZ_SECONDS=60 scripts/test.sh   # longer fuzzing (default 6 s per target); SKIP_FUZZ=1 skips
#   SOAK_DURATION=30 scripts/test.sh  # longer soak runs (default 10 s each)
#   SKIP_SANITIZE=1 scripts/test.sh   # no sanitizer build: the integration tests run in build-test
#   SKIP_IMAGE=1 scripts/test.sh      # no image build and run (tests/image/run.sh)
# Each step prints the seconds since the start ("test.sh: [N s] step"): CI's budget is 25 minutes
# on 2 cores, builds included.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    scripts/install-deps.sh
  else
    echo "test.sh: not root, skipping dependency installation" >&2
  fi
  # PostgreSQL 16-18 (npm) and the psycopg 3.3 + libpq 18 venv; skips what is there already.
  scripts/install-test-servers.sh
fi

failed=0
step() { echo "test.sh: [$SECONDS s] $*"; }

# Layering, before any build (seconds): every #include of a repo header must be of a library that
# the including target links, and scripts/layering-rules.txt's forbidden links must be absent
# (scripts/check-layering.py reads CMake's own target graph). The check's own test runs first: it
# plants violations in small trees and expects each one caught.
step "layering"
/usr/bin/python3 tests/layering/check_layering_test.py || failed=1
/usr/bin/python3 scripts/check-layering.py || failed=1
# The code's shape (scripts/check-structure.py): no include cycle between units in pooler/,
# peering/ and cmd/, no .cc over 650 lines, no folder over 5,000 lines; its test plants each.
/usr/bin/python3 tests/layering/check_structure_test.py || failed=1
/usr/bin/python3 scripts/check-structure.py || failed=1

# The tests (unit and integration) build and run once, in the sanitized clang build below (also
# warnings as errors); this g++ build makes the release binaries that the drivers, the soak and the
# Helm checks run. With SKIP_SANITIZE=1 the tests build and run here instead.
BUILD_DIR=${BUILD_DIR:-build-test}
if [[ "${SKIP_SANITIZE:-0}" == 1 ]]; then build_tests=ON; else build_tests=OFF; fi
# Line tables only (-g1): backtraces keep file and line, and the build takes about a tenth less CPU
# than with full debug information.
step "g++ build ($BUILD_DIR)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPGFLEET_WERROR=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DPGFLEET_BUILD_TESTS="$build_tests"
ninja -C "$BUILD_DIR"
PGFLEET_BIN="$PWD/$BUILD_DIR/cmd/pgfleet/pgfleet"
export PGFLEET_BIN

if [[ "$build_tests" == ON ]]; then
  ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 || failed=1
fi

# Real drivers (psycopg 3, asyncpg, psycopg2, pgjdbc) through pgfleet in transaction mode, with
# server-side prepared statements. Debian's python3: the drivers and pytest are Debian packages.
step "drivers"
timeout -k 30 300 /usr/bin/python3 -m pytest -q tests/drivers \
  --ignore=tests/drivers/test_libpq18.py || failed=1
# libpq 18 (protocol 3.2, 32-byte cancel keys, sslnegotiation=direct) through pgfleet, and
# straight to PostgreSQL 18 and 16, with the venv of scripts/install-test-servers.sh.
step "libpq 18"
libpq18_python=$(scripts/install-test-servers.sh --print | sed -n 's/^LIBPQ18_PYTHON=//p')
if [[ -x "$libpq18_python" ]]; then
  timeout -k 30 300 "$libpq18_python" -m pytest -q tests/drivers/test_libpq18.py || failed=1
else
  echo "test.sh: no libpq 18 venv at $libpq18_python (run scripts/install-test-servers.sh)" >&2
  failed=1
fi

# Everything again under ASan (with LeakSanitizer) and UBSan, clang, in build-asan: unit and
# integration tests; any sanitizer report in a test, or in a pgfleet it started, fails it.
step "sanitizers (build, unit and integration tests)"
if [[ "${SKIP_SANITIZE:-0}" != 1 ]]; then
  scripts/test-sanitizers.sh || failed=1
fi

# The server matrix: the integration tests' smoke subset against PostgreSQL 16, 17 and 18 (the
# whole suite ran against Debian's 15 above), with the binaries of whichever build ran them.
step "server matrix"
if [[ "${SKIP_SANITIZE:-0}" == 1 ]]; then
  scripts/test-server-matrix.sh "$BUILD_DIR" || failed=1
else
  scripts/test-server-matrix.sh "${SANITIZE_BUILD_DIR:-build-asan}" || failed=1
fi

# libFuzzer targets (clang, ASan+UBSan, from build-asan) over their seed corpora; a crash fails
# the run. FUZZ_SECONDS per target (every target of tests/fuzz/run.sh); SKIP_FUZZ=1 skips them.
step "fuzzers"
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-6} tests/fuzz/run.sh || failed=1
fi

step "soak"
if [[ -x bench/soak.sh ]]; then
  DURATION=${SOAK_DURATION:-10} bench/soak.sh || failed=1
fi
step "helm"
if [[ -x tests/helm/run.sh ]]; then
  tests/helm/run.sh || failed=1
fi
# The image (Dockerfile, podman from a Debian base made here) with the programs this run built and
# tested, run against a PostgreSQL of its own: about a minute (tests/image/run.sh). SKIP_IMAGE=1
# skips it; scripts/build-image.sh alone builds the programs inside the image too.
step "image"
if [[ "${SKIP_IMAGE:-0}" != 1 ]]; then
  PREBUILT="$BUILD_DIR" tests/image/run.sh || failed=1
fi

step "done"
if [[ $failed -ne 0 ]]; then
  # A CI log keeps its start and its end: repeat the failed gtest cases (with their first line of
  # failure) here, at the end, where they are seen.
  for log in "$BUILD_DIR" "${SANITIZE_BUILD_DIR:-build-asan}"; do
    log="$log/Testing/Temporary/LastTest.log"
    [[ -f "$log" ]] && grep -h -B3 -E '^\[  FAILED  \] [A-Za-z]' "$log" | tail -40 >&2 || true
  done
  echo "test.sh: FAILED" >&2
  exit 1
fi
echo "test.sh: all test suites passed"
