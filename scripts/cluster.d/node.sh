# The test cluster's real node (sourced by scripts/cluster): containerd, runc and the CNI
# plugins from Debian's packages, the kubelet built with the rest of Kubernetes, pod
# networking on a local bridge, and CoreDNS on the bridge's address for Service names.
# See docs/cluster.md ("The real node") for what it is and is not.
#
# Pods live in network namespaces on the bridge $BRIDGE ($BRIDGE_IP/24). kube-proxy (iptables
# mode) turns ClusterIP Services into DNAT rules on this host, so a pod's packet to a Service
# is routed back onto the bridge: the host forwards, but only from the bridge to the bridge
# (the chain CRUCIBLE-FORWARD drops the rest). Nothing routes off the machine: nothing is
# forwarded to another interface, nothing masquerades out, and CoreDNS answers the cluster's
# names only (no upstream). The bridge's address is also where pods find servers on the host
# (the API server, the S3 server, the Crucible API in tests): the host's own address on their
# only link.

REAL_NODE="${CRUCIBLE_REAL_NODE:-1}"     # 0: kwok nodes only
REAL_NODE_NAME=crucible-node-0
BRIDGE=crucible0
BRIDGE_IP="${CRUCIBLE_NODE_BRIDGE_IP:-10.88.0.1}"
POD_SUBNET="${BRIDGE_IP%.*}.0/24"
KUBELET_PORT="${CRUCIBLE_KUBELET_PORT:-10250}"
KUBELET_HEALTHZ_PORT="${CRUCIBLE_KUBELET_HEALTHZ_PORT:-10248}"
COREDNS_READY_PORT="${CRUCIBLE_COREDNS_READY_PORT:-16253}"
KUBE_PROXY_HEALTHZ_PORT="${CRUCIBLE_KUBE_PROXY_HEALTHZ_PORT:-10256}"
KUBE_PROXY_METRICS_PORT="${CRUCIBLE_KUBE_PROXY_METRICS_PORT:-10249}"
REAL_NODE_LABEL=crucible.dev/real-node
# Localhost seccomp profile (below the kubelet's seccomp directory) for pods that run agent tools.
TOOL_SECCOMP_PROFILE=crucible/tool-sandbox.json
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables mmdebstrap umoci)
CNI_BIN=/usr/lib/cni
# containerd's content and snapshots outlive the cluster (images are gigabytes; importing
# them again on every `up` would cost minutes); its runtime state does not.
CONTAINERD_ROOT="${CRUCIBLE_CACHE:-$HOME/.cache/crucible}/node/containerd"
NODE_DIR="$STATE/node"
CONTAINERD_SOCK="$NODE_DIR/containerd/containerd.sock"

node_components() { (( REAL_NODE )) && echo containerd kubelet coredns kube-proxy; true; }

node_packages() {
  local missing=() p
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  (( ${#missing[@]} == 0 )) && return 0
  [[ $(id -u) -eq 0 ]] || die "the real node needs root (and ${missing[*]} from apt)"
  log "installing ${missing[*]} from Debian"
  local made_policy=0 attempt
  # No distribution service is started by postinst: the node runs its own containerd.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made_policy=1
  fi
  for attempt in 1 2 3; do
    if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q >&2 \
       && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
            --no-install-recommends "${missing[@]}" >&2; then
      break
    fi
    (( attempt < 3 )) || { (( made_policy )) && rm -f /usr/sbin/policy-rc.d; die "apt-get install ${missing[*]} failed 3 times"; }
    log "apt failed (attempt $attempt/3); retrying in $((attempt * 10))s"; sleep $((attempt * 10))
  done
  (( made_policy )) && rm -f /usr/sbin/policy-rc.d
  return 0
}

node_pki() {  # the kubelet's identity (client and serving) and CoreDNS's, from the cluster CA
  issue_cert kubelet "/O=system:nodes/CN=system:node:$REAL_NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth,serverAuth
subjectAltName=DNS:$REAL_NODE_NAME,IP:$BRIDGE_IP" \
    && issue_cert coredns "/CN=crucible:coredns" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth" \
    && issue_cert kube-proxy "/CN=system:kube-proxy" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth" \
    || die "generating the real node's certificates failed"
  write_kubeconfig "$NODE_DIR/kubelet.kubeconfig" kubelet "system:node:$REAL_NODE_NAME"
  write_kubeconfig "$NODE_DIR/coredns.kubeconfig" coredns crucible:coredns
  # system:kube-proxy is bound to the built-in ClusterRole system:node-proxier.
  write_kubeconfig "$NODE_DIR/kube-proxy.kubeconfig" kube-proxy system:kube-proxy
}

node_network() {  # the bridge, with the host's address on it, before anything binds to it
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge \
    || die "cannot create bridge $BRIDGE (needs root and the bridge driver)"
  # Not `| grep -q`: under pipefail, grep quitting at the first match can SIGPIPE `ip` and
  # read as "no address", and adding it again fails ("Address already assigned").
  local addresses
  addresses="$(ip -4 addr show dev "$BRIDGE")"
  [[ "$addresses" == *"inet $BRIDGE_IP/"* ]] || ip addr add "$BRIDGE_IP/24" dev "$BRIDGE" \
    || die "cannot put $BRIDGE_IP on bridge $BRIDGE"
  ip link set "$BRIDGE" up
  # Service traffic between pods crosses the bridge: let iptables see it (kube-proxy).
  [[ -w /proc/sys/net/bridge/bridge-nf-call-iptables ]] && echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
  mkdir -p "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam"
  cat > "$NODE_DIR/cni/net.d/10-crucible.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "crucible",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$BRIDGE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

# node_route: let the host forward from the bridge back onto the bridge (a pod's packet to
# a ClusterIP, after kube-proxy's DNAT, goes to another pod) and nowhere else.
node_route() {
  echo 1 > /proc/sys/net/ipv4/ip_forward || die "cannot enable net.ipv4.ip_forward (kube-proxy needs it)"
  iptables -w -N CRUCIBLE-FORWARD 2>/dev/null || iptables -w -F CRUCIBLE-FORWARD
  iptables -w -A CRUCIBLE-FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  iptables -w -A CRUCIBLE-FORWARD -i "$BRIDGE" -j DROP
  iptables -w -A CRUCIBLE-FORWARD -o "$BRIDGE" -j DROP
  iptables -w -C FORWARD -j CRUCIBLE-FORWARD 2>/dev/null || iptables -w -I FORWARD 1 -j CRUCIBLE-FORWARD \
    || die "installing the CRUCIBLE-FORWARD chain failed"
}

# node_unroute: remove kube-proxy's rules and ours (after kube-proxy has stopped).
node_unroute() {
  (( REAL_NODE )) || return 0
  local bin; bin="$(cat "$STATE/bin-dir" 2>/dev/null)" || true
  [[ -x "$bin/kube-proxy" ]] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  iptables -w -D FORWARD -j CRUCIBLE-FORWARD 2>/dev/null || true
  iptables -w -F CRUCIBLE-FORWARD 2>/dev/null && iptables -w -X CRUCIBLE-FORWARD 2>/dev/null || true
}

node_start_kube_proxy() {
  cat > "$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $NODE_DIR/kube-proxy.kubeconfig}
hostnameOverride: $REAL_NODE_NAME
mode: iptables
clusterCIDR: $POD_SUBNET
healthzBindAddress: 127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$KUBE_PROXY_METRICS_PORT
# NodePorts on the bridge's address only; none on 127.0.0.1 (that would need route_localnet).
nodePortAddresses: [$BRIDGE_IP/32]
iptables: {localhostNodePorts: false, syncPeriod: 30s, minSyncPeriod: 1s}
# Leave the host's conntrack table size as it is.
conntrack: {maxPerCore: 0}
EOF
  start kube-proxy --config="$NODE_DIR/kube-proxy.yaml" --v=1
  wait_for kube-proxy
}

node_start_containerd() {
  local pause="$1"
  mkdir -p "$NODE_DIR/containerd/state" "$CONTAINERD_ROOT"
  cat > "$NODE_DIR/containerd/config.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$NODE_DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$NODE_DIR/containerd/containerd.sock.ttrpc"
[debug]
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  enable_selinux = false
  # This machine's root lacks CAP_SYS_RESOURCE, so no process may lower its OOM score (the
  # sandbox asks for -998): keep every container's no lower than containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$NODE_DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
EOF
  start_path containerd /usr/bin/containerd --config "$NODE_DIR/containerd/config.toml"
  wait_for containerd
}

node_start_kubelet() {
  mkdir -p "$NODE_DIR/kubelet"
  # The profile of workload pods that run agent tools, where the kubelet looks for Localhost
  # profiles (<root-dir>/seccomp); the test stack's operator names it (docs/agents.md).
  mkdir -p "$NODE_DIR/kubelet/seccomp/crucible"
  "$(cat "$STATE/bin-dir")/crucible-seccomp-profile" > "$NODE_DIR/kubelet/seccomp/$TOOL_SECCOMP_PROFILE" \
    || die "writing the tool sandbox's seccomp profile failed"
  # Pods get the cluster's search domains and CoreDNS only: no host resolver behind it.
  printf 'nameserver %s\n' "$BRIDGE_IP" > "$NODE_DIR/resolv.conf"
  cat > "$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $BRIDGE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $STATE/pki/kubelet.crt
tlsPrivateKeyFile: $STATE/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# This machine has a cgroup v1 hierarchy and no systemd: the cgroupfs driver, and v1 allowed
# (Kubernetes 1.35+ refuses v1 unless told otherwise).
cgroupDriver: cgroupfs
failCgroupV1: false
clusterDomain: cluster.local
clusterDNS: [$BRIDGE_IP]
resolvConf: $NODE_DIR/resolv.conf
registerWithTaints:
- {key: $REAL_NODE_LABEL, value: "true", effect: NoSchedule}
maxPods: 32
serializeImagePulls: false
# Images are imported, not pulled: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
failSwapOn: false
nodeStatusReportFrequency: 10s
EOF
  start kubelet --config="$NODE_DIR/kubelet.yaml" --kubeconfig="$NODE_DIR/kubelet.kubeconfig" \
    --root-dir="$NODE_DIR/kubelet" --hostname-override="$REAL_NODE_NAME" --node-ip="$BRIDGE_IP" \
    --node-labels="$REAL_NODE_LABEL=true,type=real" --v=1
  wait_for kubelet
}

node_start_coredns() {
  # Read-only access to what the kubernetes plugin serves, for CoreDNS's own identity.
  kc apply -f - >/dev/null <<EOF || die "creating CoreDNS's RBAC failed"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "crucible:coredns"}
rules:
- {apiGroups: [""], resources: [services, pods, namespaces, endpoints], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "crucible:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "crucible:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "crucible:coredns"}
EOF
  cat > "$NODE_DIR/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $BRIDGE_IP
    errors
    ready 127.0.0.1:$COREDNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $NODE_DIR/coredns.kubeconfig crucible-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
.:53 {
    bind $BRIDGE_IP
    # Nothing upstream: other names are refused, quickly.
    template ANY ANY {
        rcode REFUSED
    }
}
EOF
  start coredns -conf "$NODE_DIR/Corefile"
  wait_for coredns
}

# node_up PAUSE_IMAGE: start the real node and wait until it is Ready.
node_up() {
  (( REAL_NODE )) || return 0
  local pause="$1"
  node_packages
  mkdir -p "$NODE_DIR"
  node_pki
  node_network
  node_start_containerd "$pause"
  "$ROOT/scripts/images" load pause >/dev/null || die "loading the pause image into containerd failed"
  node_start_coredns
  node_start_kubelet
  node_route
  node_start_kube_proxy
  log "waiting for the real node $REAL_NODE_NAME to be Ready"
  local deadline=$((SECONDS + START_TIMEOUT))
  until [[ "$(kc get node "$REAL_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; do
    (( SECONDS < deadline )) || { tail -n 30 "$STATE/logs/kubelet.log" >&2; die "the real node never became Ready; see $STATE/logs/kubelet.log"; }
    sleep 0.5
  done
  # Pods that ask for GPUs can bind here and run their CPU code: the node advertises
  # sixteen, as an extended resource (there is no GPU and no device plugin behind it), so a
  # two-pod run of 8 GPUs a pod (examples/kubernetes/multi-node-sft.yaml) fits.
  kc patch node "$REAL_NODE_NAME" --subresource=status --type=json \
    -p '[{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"16"}]' >/dev/null \
    || die "advertising nvidia.com/gpu on $REAL_NODE_NAME failed"
  log "real node $REAL_NODE_NAME is Ready (pods on $POD_SUBNET, DNS at $BRIDGE_IP)"
}

# node_down: stop every pod's containers, then the node's processes are stopped by
# stop_all; unmount what the kubelet and containerd left under the state folder.
node_clean() {
  if [[ -S "$CONTAINERD_SOCK" ]] && alive containerd; then
    local ctr=(ctr --address "$CONTAINERD_SOCK" --namespace k8s.io) id
    for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    sleep 0.5
    for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true; done
    for id in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 || true; done
  fi
}

node_unmount() {
  local m
  # deepest first; /proc/self/mounts escapes spaces as \040
  for m in $(awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  for m in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do ip netns delete "$m" 2>/dev/null || true; done
}

node_status() {
  (( REAL_NODE )) || return 0
  printf '%-24s %s\n' "real node" "$(kc get node "$REAL_NODE_NAME" --no-headers 2>/dev/null | awk '{print $1 " " $2}' || echo 'not registered')"
}
