# Sourced by tests/helm/run.sh and tests/e2e/run.sh: installs Go-built tools once per version
# into $TOOLS/bin (a stamp file remembers the version) and puts that directory on PATH.

TOOLS=${PGFLEET_TOOLS:-/var/tmp/pgfleet-tools}
HELM_VERSION=v3.21.4
HELM_K8S_MINOR=36  # Kubernetes minor of helm's client-go (v0.36.x): its default kubeVersion

mkdir -p "$TOOLS/bin"
export PATH="$TOOLS/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin:$PATH"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOBIN="$TOOLS/bin"

log() { printf '%s\n' "$*" >&2; }
die() { log "${0##*/}: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools

# install NAME VERSION GO-INSTALL-ARGS...: go install once per version (a stamp file remembers).
install_go_tool() {
  local name=$1 version=$2; shift 2
  local stamp="$TOOLS/bin/.$name-$version"
  if [[ -x "$TOOLS/bin/$name" && -e "$stamp" ]]; then return; fi
  command -v go >/dev/null || die "go is needed to install $name"
  log "installing $name $version (go install, niced)"
  nice go install "$@" || die "could not install $name $version"
  rm -f "$TOOLS/bin/.$name-"*
  touch "$stamp"
}

# helm's Makefile sets its version and default Kubernetes version by -ldflags; go install alone
# leaves them at v3.x / 1.20, and 1.20 fails the chart's kubeVersion. Mirror the Makefile.
install_go_tool helm "$HELM_VERSION" -ldflags "-w -s \
  -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
