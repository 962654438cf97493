#!/usr/bin/env bash
# Tests of pgfleet's Kubernetes packaging, offline (no cluster, no Docker):
#   - the Helm chart: helm lint --strict for each ci/*-values.yaml; helm template of each,
#     rendered for the oldest supported (1.29) and a current Kubernetes, validated by
#     kubeconform -strict against schemas generated from Kubernetes' own OpenAPI spec (and the
#     prometheus-operator CRDs); structural checks (probes, sidecar, rollout, selectors);
#     values.schema.json rejects bad values; every value is documented; checksums roll pods;
#   - the rendered pgfleet.yaml is accepted by `pgfleet --check-config`;
#   - the sidecar named template rendered into an app chart (tests/helm/sidecar-app);
#   - kustomize build of each deploy/k8s/* base, validated the same way;
#   - deploy/prometheus/alerts.yaml: promtool check rules and unit tests; the dashboard: byte-
#     identical in deploy/grafana and the chart, up to date with its generator, every panel query
#     parses and uses only metrics pgfleet exports;
#   - the Dockerfile: builds with scripts/install-deps.sh + scripts/build.sh, and its runtime
#     packages provide every shared library the built pgfleet links.
#
# Tools come through the Go module proxy (helm, kubeconform, kustomize, and the Kubernetes and
# prometheus-operator modules for schemas) and Debian (promtool), cached under $PGFLEET_TOOLS.
#
# Environment:
#   PGFLEET_TOOLS      tool and schema cache (default /var/tmp/pgfleet-tools)
#   PGFLEET_BIN        the pgfleet binary for --check-config (default build/cmd/pgfleet/pgfleet)
#   SKIP_CHECK_CONFIG  1 = skip the --check-config tests when the binary does not exist
#                      (without it a missing binary is a failure)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

KUBECONFORM_VERSION=v0.8.0
KUSTOMIZE_VERSION=v5.8.1
K8S_VERSIONS=(1.29.6 1.36.3)  # the chart's oldest supported Kubernetes, and a current one
PROMETHEUS_OPERATOR_VERSION=v0.85.0

PGFLEET_BIN=${PGFLEET_BIN:-build/cmd/pgfleet/pgfleet}
CHART=helm/pgfleet
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pgfleet-helm-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

source "$ROOT/tests/helm/tools.sh"
install_go_tool kubeconform "$KUBECONFORM_VERSION" \
  "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
install_go_tool kustomize "$KUSTOMIZE_VERSION" \
  "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"

if ! command -v promtool >/dev/null; then
  log "installing promtool (Debian package prometheus)"
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    (export DEBIAN_FRONTEND=noninteractive
     apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null) ||
      die "could not install the prometheus package (promtool)"
  fi
  command -v promtool >/dev/null || die "promtool is missing (apt-get install prometheus)"
fi

python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml ||
  die "python3 needs PyYAML (pip install pyyaml, or apt-get install python3-yaml)"

# go_module_dir MODULE@VERSION: download a module through the proxy, print its directory.
go_module_dir() {
  (cd "$WORK" && go mod download -json "$1") | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["Dir"]) if "Dir" in d else sys.exit(d.get("Error","no Dir"))'
}

# Schemas: Kubernetes' OpenAPI spec ships in the k8s.io/kubernetes module (api/openapi-spec);
# the prometheus-operator module carries its CRDs. k8s_schemas.py turns both into kubeconform's
# one-file-per-kind layout. The cache key includes the converter, so changing it regenerates.
CRDS_DIR=$(go_module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")/example/prometheus-operator-crd
CONVERTER_SUM=$(sha256sum tests/helm/k8s_schemas.py | cut -c1-12)
declare -A SCHEMAS
for v in "${K8S_VERSIONS[@]}"; do
  dir="$TOOLS/schemas/k8s-v$v-po-$PROMETHEUS_OPERATOR_VERSION-$CONVERTER_SUM"
  if [[ ! -e "$dir/.complete" ]]; then
    log "generating kubeconform schemas for Kubernetes $v"
    spec=$(go_module_dir "k8s.io/kubernetes@v$v")/api/openapi-spec/swagger.json
    rm -rf "$dir"
    python3 tests/helm/k8s_schemas.py --strict --out "$dir" --swagger "$spec" \
      --crd "$CRDS_DIR/monitoring.coreos.com_podmonitors.yaml" \
      --crd "$CRDS_DIR/monitoring.coreos.com_servicemonitors.yaml" \
      --crd "$CRDS_DIR/monitoring.coreos.com_prometheusrules.yaml" >&2
    touch "$dir/.complete"
  fi
  SCHEMAS[$v]=$dir
done

log "tools: $(helm version --short), kubeconform $KUBECONFORM_VERSION, kustomize $(kustomize version), $(promtool --version 2>&1 | head -1)"

# ---------------------------------------------------------------------------------------------
# Test harness: each check runs with its output captured; failures print it.

PASSED=0
FAILED=0
FAILED_NAMES=()
check() {
  local name=$1; shift
  local out="$WORK/check.log"
  if "$@" >"$out" 2>&1; then
    PASSED=$((PASSED + 1))
    printf 'ok    %s\n' "$name"
  else
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$name")
    printf 'FAIL  %s\n' "$name"
    sed 's/^/      /' "$out" | tail -n 40
  fi
}

validate() {  # validate K8S_VERSION FILE: kubeconform -strict against the generated schemas
  kubeconform -strict -summary -schema-location "${SCHEMAS[$1]}/{{.ResourceKind}}{{.KindSuffix}}.json" "$2"
}

check_config() {  # check_config RENDERED: pgfleet --check-config on each pgfleet.yaml in it
  local rendered=$1 dir
  dir=$(mktemp -d "$WORK/config.XXXXXX")
  local configs
  configs=$(python3 tests/helm/checks.py extract-config "$rendered" "$dir")
  [[ -n $configs ]] || { echo "no pgfleet.yaml in $rendered"; return 1; }
  local c
  for c in $configs; do
    echo "== $c"
    cat "$c"
    run_check_config "$c" || return 1
  done
}

# The command-line contract (docs/architecture.md, "Configuration") is
# `pgfleet --check-config FILE`. A binary whose flag library only knows
# the underscore spelling (absl: --check_config) still gets its verdict on the config, so this
# test judges the chart's output; the spelling is reported once, for the C++ side to fix.
CHECK_CONFIG_SPELLING_NOTE="$WORK/check-config-spelling"
run_check_config() {
  local err="$WORK/check-config.err" rc=0
  "$PGFLEET_BIN" --check-config "$1" 2>"$err" || rc=$?
  if [[ $rc -ne 0 ]] && grep -q "Unknown command line flag 'check-config'" "$err"; then
    echo "$PGFLEET_BIN rejects --check-config; retrying as --check_config" | tee "$CHECK_CONFIG_SPELLING_NOTE"
    rc=0
    "$PGFLEET_BIN" --check_config "$1" 2>"$err" || rc=$?
  fi
  cat "$err"
  return $rc
}

HAVE_BIN=0
if [[ -x $PGFLEET_BIN ]]; then
  HAVE_BIN=1
elif [[ ${SKIP_CHECK_CONFIG:-0} == 1 ]]; then
  log "note: $PGFLEET_BIN does not exist; --check-config tests skipped (SKIP_CHECK_CONFIG=1)"
fi
config_check() {  # config_check NAME RENDERED
  if [[ $HAVE_BIN == 1 ]]; then
    check "$1: pgfleet --check-config accepts the rendered pgfleet.yaml" check_config "$2"
  elif [[ ${SKIP_CHECK_CONFIG:-0} != 1 ]]; then
    check "$1: pgfleet --check-config accepts the rendered pgfleet.yaml" \
      sh -c "echo '$PGFLEET_BIN not found: build pgfleet or set PGFLEET_BIN (or SKIP_CHECK_CONFIG=1)'; exit 1"
  fi
}

# ---------------------------------------------------------------------------------------------
# Dashboard and alerts

check "dashboard: deploy/grafana/pgfleet.json and the chart's copy are byte-identical" \
  cmp deploy/grafana/pgfleet.json "$CHART/dashboards/pgfleet.json"
check "dashboard: up to date with deploy/grafana/generate_dashboard.py" \
  python3 deploy/grafana/generate_dashboard.py --check
check "dashboard: panel queries use only pgfleet's metrics and the templated datasource" \
  python3 tests/helm/checks.py dashboard deploy/grafana/pgfleet.json "$WORK/dashboard-rules.yaml"
check "dashboard: every panel query parses as PromQL (promtool)" \
  promtool check rules "$WORK/dashboard-rules.yaml"
check "alerts: deploy/prometheus/alerts.yaml and the chart's copy are byte-identical" \
  cmp deploy/prometheus/alerts.yaml "$CHART/alerts/alerts.yaml"
check "alerts: promtool check rules" promtool check rules deploy/prometheus/alerts.yaml
check "alerts: promtool test rules (tests/helm/alerts_test.yaml)" \
  promtool test rules tests/helm/alerts_test.yaml
check "alerts: rules use only pgfleet's metrics" \
  python3 tests/helm/checks.py alerts deploy/prometheus/alerts.yaml

# ---------------------------------------------------------------------------------------------
# The chart

check "chart: every key of values.yaml is documented" \
  python3 tests/helm/checks.py values-doc "$CHART/values.yaml"
check "chart: helm lint --strict with the default values" helm lint --strict "$CHART"

for values in "$CHART"/ci/*-values.yaml; do
  profile=$(basename "$values" -values.yaml)
  mode=${profile%%-*}
  check "chart[$profile]: helm lint --strict" helm lint --strict "$CHART" -f "$values"
  for v in "${K8S_VERSIONS[@]}"; do
    out="$WORK/chart-$profile-$v.yaml"
    check "chart[$profile]: helm template for Kubernetes $v" \
      sh -c 'helm template pgfleet-ci "$1" --namespace db --kube-version "$2" -f "$3" > "$4"' \
      _ "$CHART" "$v" "$values" "$out"
    check "chart[$profile]: kubeconform -strict, Kubernetes $v schemas" validate "$v" "$out"
  done
  out="$WORK/chart-$profile-${K8S_VERSIONS[-1]}.yaml"
  check "chart[$profile]: structure ($mode mode)" python3 tests/helm/checks.py manifests "$mode" "$out"
  config_check "chart[$profile]" "$out"
done

# Values the schema must refuse.
for bad in tests/helm/bad-values/*.yaml; do
  check "chart: values.schema.json rejects $(basename "$bad" .yaml)" \
    sh -c '! helm template x "$1" -f "$2" >/dev/null 2>"$3" && grep -q "values don.t meet the specifications" "$3" && cat "$3"' \
    _ "$CHART" "$bad" "$WORK/bad.err"
done

# Changing pgfleet.yaml or the chart's Secret changes the pod annotations that roll the pods.
base="$CHART/ci/standalone-values.yaml"
helm template r "$CHART" -f "$base" > "$WORK/roll-a.yaml"
helm template r "$CHART" -f "$base" --set config.pool.default_pool_size=21 > "$WORK/roll-b.yaml"
helm template r "$CHART" -f "$base" --set secret.userlist.new=pw > "$WORK/roll-c.yaml"
check "chart: a config change rolls the pooler pods (checksum/config)" \
  python3 tests/helm/checks.py differs "$WORK/roll-a.yaml" "$WORK/roll-b.yaml" checksum/config
check "chart: a userlist change rolls the pooler pods (checksum/secret)" \
  python3 tests/helm/checks.py differs "$WORK/roll-a.yaml" "$WORK/roll-c.yaml" checksum/secret
check "chart: terminationGracePeriodSeconds = preStop sleep + drain timeout + margin" \
  sh -c 'helm template r "$1" --set shutdown.preStopSleepSeconds=7 --set shutdown.drainTimeoutSeconds=50 --set shutdown.marginSeconds=3 --show-only templates/deployment.yaml | grep -x "      terminationGracePeriodSeconds: 60"' _ "$CHART"
helm template r "$CHART" > "$WORK/token.yaml"
check "chart: a generated peering token is the same in the Secret and its checksum" \
  python3 tests/helm/checks.py token "$WORK/token.yaml"

# The sidecar named template, included by an app chart that has pgfleet as a dependency.
app="$WORK/sidecar-app"
cp -r tests/helm/sidecar-app "$app"
mkdir -p "$app/charts"
cp -r "$CHART" "$app/charts/pgfleet"
check "sidecar app: helm lint --strict (app chart including pgfleet.sidecarContainer)" \
  helm lint --strict "$app"
for v in "${K8S_VERSIONS[@]}"; do
  out="$WORK/sidecar-app-$v.yaml"
  check "sidecar app: helm template for Kubernetes $v" \
    sh -c 'helm template shop "$1" --namespace shop --kube-version "$2" > "$3"' _ "$app" "$v" "$out"
  check "sidecar app: kubeconform -strict, Kubernetes $v schemas" validate "$v" "$out"
done
out="$WORK/sidecar-app-${K8S_VERSIONS[-1]}.yaml"
check "sidecar app: structure (native sidecar, app on 127.0.0.1:6432, fleet Service)" \
  python3 tests/helm/checks.py manifests sidecar "$out"
config_check "sidecar app" "$out"

# ---------------------------------------------------------------------------------------------
# Kustomize bases

for base in deploy/k8s/*/; do
  name=$(basename "$base")
  out="$WORK/kustomize-$name.yaml"
  check "kustomize[$name]: kustomize build" sh -c 'kustomize build "$1" > "$2"' _ "$base" "$out"
  for v in "${K8S_VERSIONS[@]}"; do
    check "kustomize[$name]: kubeconform -strict, Kubernetes $v schemas" validate "$v" "$out"
  done
  if [[ $name == standalone || $name == sidecar ]]; then
    check "kustomize[$name]: structure" python3 tests/helm/checks.py manifests "$name" "$out"
    config_check "kustomize[$name]" "$out"
  fi
done

# ---------------------------------------------------------------------------------------------
# Dockerfile and build script

check "scripts/build.sh: bash syntax" bash -n scripts/build.sh
check "Dockerfile: the build stage runs scripts/install-deps.sh and scripts/build.sh" \
  sh -c 'grep -Eq "^RUN .*scripts/install-deps.sh --build-only" Dockerfile && grep -Eq "scripts/build.sh" Dockerfile'
check "Dockerfile: Debian 12 stages, non-root USER, pgfleet entrypoint, no HEALTHCHECK" \
  sh -c 'grep -qx "FROM debian:12 AS build" Dockerfile && grep -qx "FROM debian:12-slim" Dockerfile &&
         grep -Eq "^USER [1-9][0-9]*(:[0-9]+)?$" Dockerfile && ! grep -q "^HEALTHCHECK" Dockerfile &&
         grep -qx "ENTRYPOINT \[\"pgfleet\"\]" Dockerfile &&
         grep -qx "CMD \[\"--config\", \"/etc/pgfleet/pgfleet.yaml\"\]" Dockerfile'

# The runtime stage's apt packages (with what they depend on, and what debian:12-slim has) must
# provide every shared library that each built program loads.
runtime_libs_check() {
  local pkgs base closure missing="" bin lib real pkg
  pkgs=$(sed -n '/^FROM debian:12-slim/,$p' Dockerfile |
         sed -n '/apt-get install/,/rm -rf/p' | tr ' \\' '\n\n' | grep -E '^lib|^ca-certificates$' | sort -u)
  [[ -n $pkgs ]] || { echo "no runtime packages found in the Dockerfile"; return 1; }
  echo "runtime packages: $(echo $pkgs)"
  base="libc6 libgcc-s1 libstdc++6 zlib1g"   # in debian:12-slim
  closure=$( (echo "$pkgs"; echo "$base" | tr ' ' '\n';
              apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                --no-breaks --no-replaces --no-enhances $pkgs 2>/dev/null |
              sed -En 's/^ *[|]?(Pre)?Depends: ([^ <>]+).*/\2/p; /^[a-z]/p') | sed 's/:any$//' | sort -u)
  for bin in "$@"; do
    [[ -x $bin ]] || continue
    echo "== $bin"
    for lib in $(ldd "$bin" | awk '$3 ~ /^\// {print $3}'); do
      real=$(readlink -f "$lib")
      pkg=$( (dpkg -S "$lib" || dpkg -S "$real") 2>/dev/null | head -1 | cut -d: -f1)
      [[ -n $pkg ]] || { echo "no package owns $lib"; missing+=" $lib"; continue; }
      if ! grep -qx -- "$pkg" <<<"$closure"; then
        echo "$lib comes from $pkg, which the runtime stage does not install"
        missing+=" $pkg"
      fi
    done
  done
  [[ -z $missing ]]
}
if [[ $HAVE_BIN == 1 ]]; then
  bins=("$PGFLEET_BIN")
  ctl="$(dirname "$(dirname "$PGFLEET_BIN")")/pgfleet-controller/pgfleet-controller"
  [[ -x $ctl ]] && bins+=("$ctl")
  check "Dockerfile: runtime packages provide every shared library of ${bins[*]}" \
    runtime_libs_check "${bins[@]}"
fi

# ---------------------------------------------------------------------------------------------

echo
if [[ -e $CHECK_CONFIG_SPELLING_NOTE ]]; then
  echo "WARNING: $PGFLEET_BIN does not accept --check-config (the CLI contract in docs/architecture.md);"
  echo "         the configs were checked with --check_config instead."
fi
if [[ $FAILED -gt 0 ]]; then
  echo "failed:"
  printf '  %s\n' "${FAILED_NAMES[@]}"
fi
echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
