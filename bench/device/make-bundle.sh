#!/usr/bin/env bash
# Build the self-contained benchmark bundle for a bare x86-64 Linux machine (no PostgreSQL, no
# PgBouncer, no network): .device-bundle/pgfleet-device.tar.xz in the repository root (ignored
# through .git/info/exclude). bench/device/run-on-device.sh unpacks it and runs the benchmarks.
#
# The bundle holds, under pgfleet-device/:
#   usr/lib/postgresql/15/{bin,lib}, usr/share/postgresql/15   PostgreSQL server, psql, pgbench
#       (same relative layout as Debian, so PostgreSQL's relocatable share/lib lookup works;
#       llvmjit.so and the JIT bitcode are left out: JIT is never used by pgbench -S)
#   usr/sbin/pgbouncer     PgBouncer
#   pgfleet/pgfleet        the Release pgfleet (build-rel), rebuilt first
#   tools/                 setpriv, ps, openssl: used on the device only where its own are missing
#   etc/openssl.cnf        for the bundled openssl when the device has no /usr/lib/ssl/openssl.cnf
#   lib/                   every shared library of all of the above except glibc's own pieces
#                          (the device's glibc is newer); run through wrappers that set
#                          LD_LIBRARY_PATH for the bundled programs only
#   BUILDINFO              commit, uncommitted files, build time, versions, checksums
#
#   bench/device/make-bundle.sh            # rebuild build-rel (under the shared build lock), bundle
#   SKIP_BUILD=1 BUILD_NOTE="..." bench/device/make-bundle.sh   # bundle the binary as it is
#
# Needs (build host, Debian 12): postgresql-15, pgbouncer, procps, util-linux, openssl, xz-utils.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${PG_VERSION:=15}"
: "${PGFLEET_BUILD_DIR:=$REPO/build-rel}"
: "${PGBOUNCER_SRC:=/usr/sbin/pgbouncer}"
: "${SKIP_BUILD:=0}"
: "${XZ_LEVEL:=-9}"
OUT_DIR=$REPO/.device-bundle
BUNDLE=$OUT_DIR/pgfleet-device.tar.xz
PG_LIB=/usr/lib/postgresql/$PG_VERSION
PG_SHARE=/usr/share/postgresql/$PG_VERSION

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

[[ -x "$PG_LIB/bin/postgres" && -d "$PG_SHARE" ]] || die "PostgreSQL $PG_VERSION not in $PG_LIB"
[[ -x "$PGBOUNCER_SRC" ]] || die "pgbouncer not at $PGBOUNCER_SRC"
command -v xz >/dev/null || die "xz is needed"

# Keep the bundle out of git (the device tool carries it as an ignored path).
git_dir=$(git -C "$REPO" rev-parse --git-dir)
[[ "$git_dir" == /* ]] || git_dir=$REPO/$git_dir
mkdir -p "$git_dir/info"
touch "$git_dir/info/exclude"
grep -qxF '/.device-bundle/' "$git_dir/info/exclude" || echo '/.device-bundle/' >>"$git_dir/info/exclude"

# Source files that go into the binary: everything but tests, docs, benchmarks and deployment.
SRC_PATHSPEC=(. ':!tests' ':!docs' ':!bench' ':!helm' ':!deploy' ':!scripts' ':!*.md')
src_dirty() { git -C "$REPO" status --porcelain --untracked-files=no -- "${SRC_PATHSPEC[@]}"; }

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/pgfleet-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
PGFLEET_SRC=$PGFLEET_BUILD_DIR/cmd/pgfleet/pgfleet
PGFLEET_COPY=$STAGE/pgfleet.bin
BUILD_STATE=""
if [[ "$SKIP_BUILD" != 1 ]]; then
  # Others may edit the tree while this builds. Wait (up to WAIT_CLEAN_S) until the source matches
  # HEAD, build under the shared lock, and inside the same lock check with a dry run that nothing
  # changed during the build (else the objects would mix two versions of a header), then copy the
  # binary. Up to three tries.
  : "${WAIT_CLEAN_S:=900}"
  for ((try = 1; try <= 3; try++)); do
    for ((w = 0; w < WAIT_CLEAN_S; w += 10)); do
      [[ -z "$(src_dirty)" ]] && break
      ((w % 60 == 0)) && log "source differs from HEAD ($(src_dirty | wc -l) files); waiting for a clean tree"
      sleep 10
    done
    before=$(git -C "$REPO" rev-parse HEAD)
    dirty_before=$(src_dirty | awk '{print $2}' | tr '\n' ' ')
    log "building $PGFLEET_BUILD_DIR at $before${dirty_before:+ + uncommitted $dirty_before} (lock /tmp/pgfleet-build.lock)"
    rm -f "$PGFLEET_COPY"
    # shellcheck disable=SC2016
    flock /tmp/pgfleet-build.lock bash -c '
      cmake --build "$1" -j2 >&2 || exit 1
      if [[ -f "$1/build.ninja" ]]; then
        n=$(ninja -C "$1" -n pgfleet 2>/dev/null | grep -c "^\[") || true
        [[ "$n" == 0 ]] || { echo "the tree changed during the build ($n steps pending)" >&2; exit 2; }
      fi
      cp -pL "$2" "$3"' _ "$PGFLEET_BUILD_DIR" "$PGFLEET_SRC" "$PGFLEET_COPY" && rc=0 || rc=$?
    after=$(git -C "$REPO" rev-parse HEAD)
    dirty_after=$(src_dirty | awk '{print $2}' | tr '\n' ' ')
    if ((rc == 1)); then die "the build failed"; fi
    if ((rc == 0)) && [[ "$before" == "$after" && "$dirty_before" == "$dirty_after" ]]; then
      BUILD_STATE="built at $after${dirty_after:+ plus uncommitted changes to: $dirty_after}"
      break
    fi
    log "try $try: the tree changed during the build; building again"
  done
  [[ -n "$BUILD_STATE" ]] || die "no consistent build after 3 tries (the tree keeps changing)"
else
  cp -pL "$PGFLEET_SRC" "$PGFLEET_COPY"
  BUILD_STATE="build skipped (SKIP_BUILD=1): the binary in $PGFLEET_BUILD_DIR as it was"
fi
[[ -x "$PGFLEET_COPY" ]] || die "no pgfleet at $PGFLEET_SRC"

R=$STAGE/pgfleet-device
mkdir -p "$R"/{lib,tools,etc,pgfleet,usr/sbin,usr/lib/postgresql,usr/share/postgresql}

log "copying PostgreSQL $PG_VERSION, pgbouncer, pgfleet, tools"
cp -a "$PG_LIB" "$R/usr/lib/postgresql/"
rm -rf "$R$PG_LIB/lib/bitcode" "$R$PG_LIB"/lib/llvmjit*
cp -a "$PG_SHARE" "$R/usr/share/postgresql/"
cp -L "$PGBOUNCER_SRC" "$R/usr/sbin/pgbouncer"
# The copy taken right after the build: a rebuild since cannot change what is bundled.
cp "$PGFLEET_COPY" "$R/pgfleet/pgfleet"
for t in setpriv ps openssl; do
  p=$(command -v "$t") || die "$t not found on the build host"
  cp -L "$p" "$R/tools/$t"
done
[[ -f /usr/lib/ssl/openssl.cnf ]] && cp -L /usr/lib/ssl/openssl.cnf "$R/etc/openssl.cnf"

# glibc's own libraries: never bundled, the device's glibc is used.
is_glibc() {
  case "$1" in
  ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | \
    librt.so.* | libutil.so.* | libresolv.so.* | libanl.so.* | libBrokenLocale.so.* | \
    libnss_*.so.* | libthread_db.so.* | libc_malloc_debug.so.* | linux-vdso.so.* | linux-gate.so.*)
    return 0
    ;;
  esac
  return 1
}

# Every ELF file of the bundle (programs and PostgreSQL's modules).
elf_files() {
  find "$R" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) -print0 |
    while IFS= read -r -d '' f; do
      [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] && printf '%s\n' "$f"
    done
}

log "collecting shared libraries"
declare -A LIBS=()
while IFS= read -r f; do
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" && "$path" == /* ]] || continue
    is_glibc "$name" && continue
    LIBS[$name]=$path
  done < <(ldd "$f" 2>/dev/null || true)
done < <(elf_files)
for name in "${!LIBS[@]}"; do
  cp -L "${LIBS[$name]}" "$R/lib/$name"
done
chmod -R u+w,a+rX "$R"

# Verify: with only the bundle's lib directory on the path, every library of every ELF file
# resolves inside the bundle, or is a piece of glibc.
log "verifying: ldd of every ELF with LD_LIBRARY_PATH=<bundle>/lib only"
bad=0
nelf=0
while IFS= read -r f; do
  nelf=$((nelf + 1))
  while read -r name arrow path _; do
    if [[ "$arrow" == "=>" && "$path" == "not" ]]; then
      log "  ${f#"$R"/}: $name not found"
      bad=1
    elif [[ "$arrow" == "=>" && "$path" == /* && "$path" != "$R/lib/"* ]] && ! is_glibc "$name"; then
      log "  ${f#"$R"/}: $name resolves outside the bundle ($path)"
      bad=1
    fi
  done < <(env -i LD_LIBRARY_PATH="$R/lib" ldd "$f" 2>&1 || true)
done < <(elf_files)
((bad == 0)) || die "some libraries do not resolve inside the bundle"
log "  $nelf ELF files, ${#LIBS[@]} libraries, all resolve inside the bundle or to glibc"

# Smoke test of the bundled programs with the bundle's libraries only.
L="$R/lib"
env -i LD_LIBRARY_PATH="$L" "$R$PG_LIB/bin/postgres" --version >/dev/null || die "bundled postgres fails"
env -i LD_LIBRARY_PATH="$L" "$R/usr/sbin/pgbouncer" --version >/dev/null || die "bundled pgbouncer fails"
env -i LD_LIBRARY_PATH="$L" "$R/pgfleet/pgfleet" --version >/dev/null || die "bundled pgfleet fails"

{
  echo "bundle built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -n) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "repo commit:  $(git -C "$REPO" rev-parse HEAD) ($(git -C "$REPO" log -1 --format=%s | cut -c1-100))"
  echo "pgfleet build: $BUILD_STATE"
  [[ -z "${BUILD_NOTE:-}" ]] || echo "note:         $BUILD_NOTE"
  echo "pgfleet:      $("$R/pgfleet/pgfleet" --version 2>&1 | head -n 1), sha256 $(sha256sum "$R/pgfleet/pgfleet" | cut -c1-16), linked $(date -u -r "$PGFLEET_COPY" '+%Y-%m-%d %H:%M UTC') in $PGFLEET_SRC"
  echo "postgres:     $(LD_LIBRARY_PATH=$L "$R$PG_LIB/bin/postgres" --version)"
  echo "pgbouncer:    $(LD_LIBRARY_PATH=$L "$R/usr/sbin/pgbouncer" --version 2>&1 | head -n 1)"
  echo "tools:        $(LD_LIBRARY_PATH=$L "$R/tools/openssl" version), $(LD_LIBRARY_PATH=$L "$R/tools/ps" --version 2>&1 | head -n 1), $(LD_LIBRARY_PATH=$L "$R/tools/setpriv" --version 2>&1 | head -n 1)"
  echo "libraries:    ${#LIBS[@]} in lib/ (glibc excluded)"
} >"$R/BUILDINFO"
cat "$R/BUILDINFO" >&2

mkdir -p "$OUT_DIR"
log "compressing (xz $XZ_LEVEL, one thread)"
tar -C "$STAGE" --owner=0 --group=0 -cf - pgfleet-device | xz "$XZ_LEVEL" -T1 >"$BUNDLE.tmp"
mv "$BUNDLE.tmp" "$BUNDLE"
cp "$R/BUILDINFO" "$OUT_DIR/BUILDINFO"
(cd "$OUT_DIR" && sha256sum pgfleet-device.tar.xz >SHA256SUMS)
size=$(stat -c %s "$BUNDLE")
log "bundle: $BUNDLE ($((size / 1024 / 1024)) MiB, uncompressed $(du -sm "$R" | cut -f1) MiB)"
((size < 48 * 1024 * 1024)) || log "WARNING: bundle over 48 MiB; the device carry limit is 64 MiB in all"
