#!/usr/bin/env bash
# Builds what tests/e2e/cluster.sh runs, once, into a cache keyed by the pinned versions:
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl
#     from the k8s.io/kubernetes module (tests/e2e/kube/go.mod pins it), version-stamped as
#     Kubernetes' own build stamps them (clients and the node report v1.34.2, not v0.0.0);
#   - etcd from go.etcd.io/etcd/server/v3 (tests/e2e/etcd/go.mod);
#   - CoreDNS with the plugins the cluster uses (tests/e2e/coredns);
#   - the pause program (Kubernetes' build/pause/linux/pause.c from the same module, static);
#   - Prometheus with Kubernetes service discovery (tests/e2e/prometheus; Debian's has none).
# A cold build takes about 20 minutes on 2 cores (Go's build cache makes a rebuild seconds); the
# cache key is the hash of the go.mod/go.sum files and this script, so a version change rebuilds.
#
#   tests/e2e/build.sh           # builds what is missing, prints the binary directory last
# Environment: PGFLEET_E2E_CACHE (default /var/cache/pgfleet-e2e).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${PGFLEET_E2E_CACHE:-/var/cache/pgfleet-e2e}
KUBE_VERSION=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$HERE/kube/go.mod")
[[ -n "$KUBE_VERSION" ]] || { echo "build.sh: no k8s.io/kubernetes version in kube/go.mod" >&2; exit 1; }
KEY=$(cat "$HERE"/{kube,etcd,coredns,prometheus}/go.{mod,sum} "$HERE/coredns/main.go" "$0" | sha256sum | cut -c1-12)
BIN="$CACHE/bin-$KEY"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export PATH="$PATH:/usr/local/go/bin"
log() { printf 'build.sh: %s\n' "$*" >&2; }

if [[ -e "$BIN/.complete" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is needed (scripts/install-deps.sh installs it)"; exit 1; }
mkdir -p "$BIN"
start=$SECONDS

# Kubernetes' hack/lib/version.sh stamps these two packages; without them every binary reports
# v0.0.0-master, which kubectl and the node's status show and version skew checks read.
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
kube_programs=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
missing=()
for p in "${kube_programs[@]}"; do [[ -x "$BIN/$p" ]] || missing+=("k8s.io/kubernetes/cmd/$p"); done
if ((${#missing[@]})); then
  log "building Kubernetes $KUBE_VERSION: ${missing[*]##*/} (cold: about 15 minutes on 2 cores)"
  (cd "$HERE/kube" && nice go build -trimpath -ldflags "$ldflags" -o "$BIN/" "${missing[@]}")
fi
if [[ ! -x "$BIN/etcd" ]]; then
  log "building etcd"
  (cd "$HERE/etcd" && nice go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
fi
if [[ ! -x "$BIN/coredns" ]]; then
  log "building CoreDNS"
  (cd "$HERE/coredns" && nice go build -trimpath -ldflags "-s -w" -o "$BIN/coredns" .)
fi
if [[ ! -x "$BIN/pause" ]]; then
  pause_c=$(cd "$HERE/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  log "building pause from $pause_c"
  gcc -Os -static -DVERSION="$KUBE_VERSION" -o "$BIN/pause" "$pause_c"
  strip "$BIN/pause"
fi
if [[ ! -x "$BIN/prometheus" ]]; then
  log "building Prometheus (Kubernetes service discovery only)"
  (cd "$HERE/prometheus" && nice go build -trimpath -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags "-s -w" -o "$BIN/prometheus" github.com/prometheus/prometheus/cmd/prometheus)
fi
touch "$BIN/.complete"
log "built in $((SECONDS - start)) s"
echo "$BIN"
