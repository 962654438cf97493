#!/usr/bin/env bash
# Builds pgfleet's libFuzzer targets with clang (ASan + UBSan) in the sanitizer build directory,
# build-asan (scripts/test-sanitizers.sh configures it the same way and builds the whole suite
# there), and runs each for a bounded time over its committed seed corpus (corpus/<target>/).
# Exits non-zero when any target finds a crash, leak, timeout or sanitizer report; the input that
# did it is kept under $FUZZ_BUILD_DIR/artifacts/ and the tail of the log is printed.
#
#   tests/fuzz/run.sh                          # every target, 60 s each
#   FUZZ_SECONDS=15 tests/fuzz/run.sh          # what scripts/test.sh runs
#   tests/fuzz/run.sh startup_fuzz config_fuzz # some targets
#
# New inputs the fuzzer finds go to $FUZZ_BUILD_DIR/work/<target>/, never into the repo; copy the
# interesting ones (small files) into corpus/<target>/ by hand.
set -euo pipefail
cd "$(dirname "$0")/../.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-asan}
FUZZ_CXX=${FUZZ_CXX:-clang++}
ALL_TARGETS=(startup_fuzz frontend_decoder_fuzz backend_decoder_fuzz config_fuzz scram_fuzz
  auth_files_fuzz relay_fuzz handoff_fuzz classifier_fuzz)
if [[ $# -gt 0 ]]; then targets=("$@"); else targets=("${ALL_TARGETS[@]}"); fi

if ! command -v "$FUZZ_CXX" >/dev/null; then
  echo "fuzz/run.sh: $FUZZ_CXX not found (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi

# The same options as scripts/test-sanitizers.sh, so neither rebuilds what the other built.
cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER="$FUZZ_CXX" -DPGFLEET_SANITIZE=ON \
  -DPGFLEET_FUZZ=ON -DPGFLEET_BUILD_TESTS=ON -DPGFLEET_WERROR=ON >/dev/null
ninja -C "$FUZZ_BUILD_DIR" ${FUZZ_JOBS:+-j "$FUZZ_JOBS"} "${targets[@]}"

mkdir -p "$FUZZ_BUILD_DIR/artifacts"
failed=()
for target in "${targets[@]}"; do
  work="$FUZZ_BUILD_DIR/work/$target"
  log="$FUZZ_BUILD_DIR/work/$target.log"
  mkdir -p "$work"
  args=(-max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -max_len=16384
    -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD_DIR/artifacts/$target-")
  if [[ -f "tests/fuzz/$target.dict" ]]; then args+=(-dict="tests/fuzz/$target.dict"); fi
  echo "fuzz/run.sh: $target for ${FUZZ_SECONDS}s"
  if "$FUZZ_BUILD_DIR/tests/fuzz/$target" "${args[@]}" "$work" "tests/fuzz/corpus/$target" \
    >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" | tr '\n' ' ' || true
    echo
  else
    echo "fuzz/run.sh: $target FAILED; last lines of $log:" >&2
    tail -n 60 "$log" >&2
    failed+=("$target")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz/run.sh: FAILED: ${failed[*]} (inputs in $FUZZ_BUILD_DIR/artifacts/)" >&2
  exit 1
fi
echo "fuzz/run.sh: ${#targets[@]} targets ran ${FUZZ_SECONDS}s each without a finding"
