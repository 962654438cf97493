#!/usr/bin/env bash
# Makes a one-file image (a static program as its entrypoint, nothing else) and saves it as an
# archive that `ctr images import` reads: the cluster's pause image, built here instead of pulled.
#   tests/e2e/oci-image.sh PROGRAM PATH-IN-IMAGE IMAGE-NAME ARCHIVE
set -euo pipefail
program=$1 path=$2 name=$3 archive=$4
container=$(buildah from scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
buildah copy --quiet "$container" "$program" "$path" >/dev/null
buildah config --entrypoint "[\"$path\"]" --user 65535:65535 "$container"
buildah commit --quiet "$container" "$name" >/dev/null
rm -f "$archive"
podman save --quiet --format docker-archive -o "$archive" "$name"
