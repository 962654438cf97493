#!/usr/bin/env bash
# Release build of pgfleet's programs: every target named after a folder of cmd/ (pgfleet, and
# pgfleet-controller or other tools once they exist). The Dockerfile's build stage runs exactly
# this, after scripts/install-deps.sh, so what CI runs is what the image ships.
#
#   scripts/build.sh                 # into build/
#   BUILD_DIR=/tmp/b scripts/build.sh -DPGFLEET_WERROR=ON
#
# Extra arguments go to cmake. The programs end up in $BUILD_DIR/cmd/<name>/<name>.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DPGFLEET_BUILD_TESTS=OFF "$@"

# The targets this checkout has: a cmd/<name> folder whose target CMake generated.
available=$(ninja -C "$BUILD_DIR" -t targets all | sed -n 's/^\([^:/]*\): phony$/\1/p')
targets=()
for dir in cmd/*/; do
  name=$(basename "$dir")
  if grep -qx -- "$name" <<<"$available"; then
    targets+=("$name")
  else
    echo "build.sh: cmd/$name has no CMake target yet; skipped" >&2
  fi
done
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "build.sh: no program targets found under cmd/" >&2
  exit 1
fi
ninja -C "$BUILD_DIR" ${JOBS:+-j "$JOBS"} "${targets[@]}"
for name in "${targets[@]}"; do
  echo "built $BUILD_DIR/cmd/$name/$name"
done
