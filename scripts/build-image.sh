#!/usr/bin/env bash
# Builds the pgfleet image (the repo's Dockerfile) with podman on a machine without Docker and
# without an image registry (as root): the Debian 12 base images the Dockerfile names are made
# here with debootstrap from the Debian mirror apt uses, then imported and tagged as
# debian:12 and debian:12-slim. Nothing is pulled.
#
#   scripts/build-image.sh                          # builds the programs in the image (about 5 min)
#   scripts/build-image.sh --prebuilt build-test    # takes the programs of a build tree instead
#   IMAGE=localhost/pgfleet:dev scripts/build-image.sh
#
# What this sandbox needs of podman (../shared/CONTAINERS.md): runc (crun refuses cgroup v1
# hybrid), RLIMIT_NPROC and RLIMIT_NOFILE no higher than the hard limits the sandbox allows, and the
# host's network. Prints the image's name and size at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/pgfleet:dev}
BASE=localhost/debian:12
prebuilt=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prebuilt)
      prebuilt=$2
      shift 2
      ;;
    *)
      echo "build-image.sh: unknown argument $1 (usage: [--prebuilt BUILD_DIR])" >&2
      exit 2
      ;;
  esac
done

need=()
for tool in podman buildah runc debootstrap; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
if [[ ${#need[@]} -gt 0 ]]; then
  [[ $(id -u) -eq 0 ]] || {
    echo "build-image.sh: needs ${need[*]} (apt-get install as root)" >&2
    exit 1
  }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    podman buildah runc debootstrap >/dev/null
fi

# The limits podman may set inside the sandbox (higher ones fail with EPERM).
PODMAN_RUN_FLAGS=(--runtime runc --ulimit nproc=32768:32768 --ulimit nofile=16384:16384
                  --network host)

# The Debian mirror apt installs from (deb822 sources first, then sources.list).
debian_mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/debian.sources | awk '{print $2}' |
        grep -v security | head -1)
  if [[ -z $uri ]]; then
    uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
          awk '$3 == "bookworm" {print $2}' | head -1)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

if ! podman image exists "$BASE"; then
  rootfs=$(mktemp -d /tmp/pgfleet-debian-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  mirror=$(debian_mirror)
  echo "== debootstrap bookworm from $mirror"
  start=$SECONDS
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/tmp/pgfleet-debootstrap.log 2>&1 || {
    tail -20 /tmp/pgfleet-debootstrap.log >&2
    exit 1
  }
  # What a container image's base has, and a source list with the security updates.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import - "$BASE" >/dev/null
  echo "== base image $BASE in $((SECONDS - start)) s"
  rm -rf "$rootfs"
  trap - EXIT
fi
# The names the Dockerfile uses, without a registry to pull them from.
podman tag "$BASE" docker.io/library/debian:12 docker.io/library/debian:12-slim

build_args=()
mkdir -p .image-bin
find .image-bin -mindepth 1 ! -name .keep -delete
if [[ -n $prebuilt ]]; then
  for name in pgfleet pgfleet-controller; do
    [[ -x "$prebuilt/cmd/$name/$name" ]] || {
      echo "build-image.sh: $prebuilt/cmd/$name/$name not found (build it first)" >&2
      exit 1
    }
    install -m 0755 "$prebuilt/cmd/$name/$name" .image-bin/
  done
  build_args+=(--build-arg BINARIES=prebuilt)
fi

echo "== podman build $IMAGE${prebuilt:+ (programs from $prebuilt)}"
start=$SECONDS
podman build "${PODMAN_RUN_FLAGS[@]}" "${build_args[@]}" -t "$IMAGE" . >/tmp/pgfleet-image-build.log 2>&1 || {
  tail -40 /tmp/pgfleet-image-build.log >&2
  exit 1
}
find .image-bin -mindepth 1 ! -name .keep -delete
echo "== built $IMAGE in $((SECONDS - start)) s: $(podman image inspect --format '{{.Size}}' "$IMAGE" |
  awk '{printf "%.0f MB", $1 / 1e6}')"
