#!/usr/bin/env bash
# A single-node Kubernetes on this machine, for pgfleet's end-to-end tests, inside a network
# namespace of its own (no traffic leaves it; the host's network, routes and iptables are not
# touched):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy (built
#   by tests/e2e/build.sh from the k8s.io/kubernetes module), CoreDNS (kube-dns Service), and
#   containerd, runc and the CNI bridge plugin from Debian. Images are imported into containerd
#   from archives (no registry): a pause image built here is the sandbox image.
#
#   tests/e2e/cluster.sh up            # starts it (about 30 s once built); prints the env to use
#   tests/e2e/cluster.sh down          # stops every process it started, by PID, and cleans up
#   tests/e2e/cluster.sh exec CMD...   # runs CMD in the cluster's network namespace, KUBECONFIG set
#   tests/e2e/cluster.sh import FILE   # imports an image archive (podman save) into containerd
#
# The node is the network namespace "pgfleet-e2e" with the address $NODE_IP on a veth;
# pods get 10.244.0.0/24 on the bridge cni0; Services 10.96.0.0/16 (kube-dns at 10.96.0.10).
# Processes run with the host's mount namespace (nsenter --net only): kubelet and containerd
# must see each other's mounts.
#
# The kubelet sets six kernel tunables it insists on (vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1, ...); they are not per namespace, so `up` records the old values and
# `down` puts them back.
#
# Environment: PGFLEET_E2E_STATE (default /var/tmp/pgfleet-e2e), PGFLEET_E2E_CACHE (build.sh's).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=${PGFLEET_E2E_STATE:-/var/tmp/pgfleet-e2e}
NETNS=pgfleet-e2e
NODE_IP=10.201.0.2
NODE_NAME=pgfleet-e2e-node
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids
SOCK=$STATE/containerd/containerd.sock
KUBECONFIG_ADMIN=$STATE/admin.kubeconfig
SANDBOX_IMAGE=registry.k8s.io/pause:3.10

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
in_ns() { nsenter --net="/run/netns/$NETNS" "$@"; }

# ----------------------------------------------------------------------------------------------
# Processes: each one started here has a PID file; `down` ends exactly those.

start_daemon() { # NAME CMD...
  local name=$1; shift
  # nsenter and setsid exec (neither forks here), so $! is the daemon itself. Through a shell
  # function it would be a subshell's PID, and `down` would miss the daemon.
  nsenter --net="/run/netns/$NETNS" setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

# wait_for DESCRIPTION SECONDS CMD...: bounded poll until CMD succeeds.
wait_for() {
  local what=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then die "timed out after ${limit}s waiting for $what (logs: $LOGS)"; fi
    sleep 0.5
  done
}

stop_daemon() { # NAME
  local file="$PIDS/$1.pid" pid
  [[ -e "$file" ]] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

kubectl_admin() { in_ns "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# ----------------------------------------------------------------------------------------------
# Certificates: one CA; a serving certificate for the API server; a client certificate per
# component (its user and group are what RBAC and the Node authorizer see).

issue_cert() { # NAME CN ORG [SANS]
  local name=$1 cn=$2 org=$3 sans=${4:-}
  local subj="/CN=$cn"
  [[ -n "$org" ]] && subj="/O=$org$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" \
    -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$sans" ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
}

write_kubeconfig() { # FILE CERT-NAME
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
EOF
}

make_pki() {
  mkdir -p "$PKI"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=pgfleet-e2e-ca" \
    -days 30 -out "$PKI/ca.crt" 2>/dev/null
  issue_cert apiserver kube-apiserver "" \
    "IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue_cert kubelet-serving "$NODE_NAME" "" "IP:$NODE_IP,DNS:$NODE_NAME"
  issue_cert admin admin system:masters
  issue_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  issue_cert controller-manager system:kube-controller-manager ""
  issue_cert scheduler system:kube-scheduler ""
  issue_cert kube-proxy system:kube-proxy ""
  issue_cert kubelet "system:node:$NODE_NAME" system:nodes
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  for c in admin controller-manager scheduler kube-proxy kubelet; do
    write_kubeconfig "$STATE/$c.kubeconfig" "$c"
  done
}

# ----------------------------------------------------------------------------------------------
# The network namespace (the node) and the kernel tunables.

KERNEL_TUNABLES=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
                 kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

make_netns() {
  ip netns add "$NETNS"
  in_ns ip link set lo up
  # The node's interface: a veth pair with both ends in the namespace (no dummy module here);
  # what is routed out of it goes nowhere.
  in_ns ip link add node0 type veth peer name node0-end
  in_ns ip link set node0-end up
  in_ns ip addr add "$NODE_IP/24" dev node0
  in_ns ip link set node0 up
  # Service addresses need a route before kube-proxy's DNAT rewrites them.
  in_ns ip route add default dev node0
  in_ns sysctl -qw net.ipv4.ip_forward=1
  # Pod -> Service -> pod on the same bridge: the reply must pass iptables to be un-NATed.
  modprobe br_netfilter 2>/dev/null || true
  in_ns sysctl -qw net.bridge.bridge-nf-call-iptables=1 ||
    die "net.bridge.bridge-nf-call-iptables is missing in the namespace (br_netfilter)"
}

save_kernel_tunables() {
  [[ -e "$STATE/kernel-tunables" ]] && return 0
  for t in "${KERNEL_TUNABLES[@]}"; do echo "$t=$(sysctl -n "$t")"; done >"$STATE/kernel-tunables"
}

restore_kernel_tunables() {
  [[ -e "$STATE/kernel-tunables" ]] || return 0
  while IFS= read -r line; do sysctl -qw "$line" || log "could not restore $line"; done \
    <"$STATE/kernel-tunables"
  rm -f "$STATE/kernel-tunables"
}

# ----------------------------------------------------------------------------------------------
# Configuration files.

write_configs() {
  mkdir -p "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/containerd"
  cat >"$STATE/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "pgfleet-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  # The sandbox drops CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj below containerd's
  # own: cap it there, as rootless containerd does (runc-clamp-oom does it for pause containers).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$HERE/runc-clamp-oom"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
  # Pods resolve through kube-dns; the node itself has no upstream resolver here.
  echo "nameserver $DNS_SERVICE_IP" >"$STATE/resolv.conf"
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
clusterDNS: [$DNS_SERVICE_IP]
clusterDomain: cluster.local
failSwapOn: false
failCgroupV1: false
resolvConf: $STATE/resolv.conf
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 60
EOF
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, min: 0}
EOF
  cat >"$STATE/Corefile" <<EOF
.:53 {
    errors
    health 127.0.0.1:8181
    ready 127.0.0.1:8182
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG_ADMIN
        pods insecure
    }
    cache 5
    loadbalance
}
EOF
}

# ----------------------------------------------------------------------------------------------

up() {
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespace, containerd, kubelet)"
  if ip netns list | grep -qw "$NETNS"; then die "already up (tests/e2e/cluster.sh down first)"; fi
  BIN=$("$HERE/build.sh" | tail -1)
  for cmd in containerd runc ctr iptables conntrack openssl; do
    command -v "$cmd" >/dev/null || die "$cmd is missing: apt-get install containerd runc iptables conntrack"
  done
  [[ -x /usr/lib/cni/bridge ]] || die "the CNI plugins are missing: apt-get install containernetworking-plugins"
  rm -rf "$STATE"
  mkdir -p "$STATE" "$LOGS" "$PIDS"
  echo "$BIN" >"$STATE/bin"
  # The pods' network namespaces are containerd's cni-*: `down` removes those that are new.
  ip netns list | awk '{print $1}' >"$STATE/netns-before"
  save_kernel_tunables
  make_netns
  make_pki
  write_configs

  log "starting etcd"
  start_daemon etcd "$BIN/etcd" --data-dir "$STATE/etcd" --name e2e \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster e2e=http://127.0.0.1:2380 --unsafe-no-fsync
  wait_for etcd 60 in_ns curl -sf http://127.0.0.1:2379/health

  log "starting kube-apiserver"
  start_daemon kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-preferred-address-types=InternalIP \
    --profiling=false
  wait_for kube-apiserver 120 kubectl_admin get --raw /readyz

  log "starting kube-controller-manager, kube-scheduler, containerd"
  start_daemon kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$STATE/controller-manager.kubeconfig" --leader-elect=false \
    --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --root-ca-file="$PKI/ca.crt" \
    --service-account-private-key-file="$PKI/sa.key" --use-service-account-credentials=true \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR"
  start_daemon kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1
  start_daemon containerd containerd --config "$STATE/containerd/config.toml"
  wait_for containerd 60 ctr --address "$SOCK" version

  log "importing the pause image"
  local pause_dir="$STATE/pause-image"
  "$HERE/oci-image.sh" "$BIN/pause" /pause "$SANDBOX_IMAGE" "$pause_dir.tar"
  import "$pause_dir.tar"

  log "starting kubelet, kube-proxy, CoreDNS"
  start_daemon kubelet "$BIN/kubelet" --config="$STATE/kubelet.yaml" \
    --kubeconfig="$STATE/kubelet.kubeconfig" --root-dir="$STATE/kubelet" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --cert-dir="$PKI/kubelet-certs"
  start_daemon kube-proxy "$BIN/kube-proxy" --config="$STATE/kube-proxy.yaml"
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_SERVICE_IP
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns}
addressType: IPv4
endpoints:
- addresses: [$NODE_IP]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
EOF
  start_daemon coredns "$BIN/coredns" -conf "$STATE/Corefile" -dns.port 53
  wait_for "node $NODE_NAME Ready" 180 \
    kubectl_admin wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
  wait_for CoreDNS 60 in_ns curl -sf http://127.0.0.1:8182/ready
  wait_for "the default ServiceAccount" 60 kubectl_admin get serviceaccount default
  log "up: $(kubectl_admin version 2>/dev/null | tr '\n' ' ')"
  env_lines
}

env_lines() {
  echo "KUBECONFIG=$KUBECONFIG_ADMIN"
  echo "E2E_NETNS=$NETNS"
  echo "E2E_NODE_IP=$NODE_IP"
  echo "E2E_BIN=$(cat "$STATE/bin")"
}

import() { # ARCHIVE
  in_ns ctr --address "$SOCK" -n k8s.io images import --all-platforms "$1" >/dev/null
}

down() {
  [[ -d "$STATE" ]] || { log "not up"; return 0; }
  # The kubelet first, so that it does not restart what is stopped next; then every container
  # (their shims outlive containerd otherwise), then the daemons.
  stop_daemon kubelet
  if [[ -e "$PIDS/containerd.pid" ]] && kill -0 "$(cat "$PIDS/containerd.pid")" 2>/dev/null; then
    local ctr=(in_ns ctr --address "$SOCK" -n k8s.io)
    for task in $("${ctr[@]}" tasks list -q 2>/dev/null); do
      "${ctr[@]}" tasks kill -s KILL "$task" >/dev/null 2>&1 || true
    done
    for _ in $(seq 50); do
      [[ -z $("${ctr[@]}" tasks list -q 2>/dev/null | head -1) ]] && break
      for task in $("${ctr[@]}" tasks list -q 2>/dev/null); do
        "${ctr[@]}" tasks delete "$task" >/dev/null 2>&1 || true
      done
      sleep 0.2
    done
  fi
  for d in coredns kube-proxy kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do
    stop_daemon "$d"
  done
  # Extra processes a test started in the namespace (PostgreSQL, Prometheus) recorded their PIDs.
  for f in "$PIDS"/*.pid; do [[ -e "$f" ]] && stop_daemon "$(basename "$f" .pid)"; done
  # Mounts under the state directory (kubelet volumes, container root filesystems, the
  # kubelet's own shared bind mount), deepest first; then the pods' network namespaces.
  awk -v s="$STATE" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r |
    while IFS= read -r m; do umount -l "$m" 2>/dev/null || true; done
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do
    grep -qxF "$ns" "$STATE/netns-before" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
  done
  ip netns del "$NETNS" 2>/dev/null || true
  # The kubelet's cgroups (its pods are gone).
  for ctl in /sys/fs/cgroup/*/; do
    [[ -d "$ctl/kubepods" ]] && find "$ctl/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  restore_kernel_tunables
  rm -rf "$STATE"
  log "down"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  env) env_lines ;;
  exec) shift; BIN=$(cat "$STATE/bin"); KUBECONFIG=$KUBECONFIG_ADMIN PATH="$BIN:$PATH" in_ns "$@" ;;
  import) shift; import "$1" ;;
  *) echo "usage: $0 up|down|env|exec CMD...|import ARCHIVE" >&2; exit 2 ;;
esac
