#!/usr/bin/env bash
# A real kubelet node for the e2e control plane of e2e/cluster.sh: containerd + runc from
# Debian, kubelet, kube-scheduler and kube-proxy built from the same pinned Kubernetes module
# as the control plane, pods on a bridge of our own. Pods really run: Deployments, probes,
# volumes, `kubectl logs/exec`, ClusterIP Services. Needs root (cgroups, mounts, a bridge,
# netfilter rules).
#
#   e2e/node.sh build              build (or reuse) kubelet, kube-scheduler, kube-proxy, crictl
#                                  and the pause image; install containerd, runc, the CNI
#                                  plugins, iptables and nftables from Debian (once)
#   e2e/node.sh check              exit 0 when this machine can run a node, else say why
#   e2e/node.sh up CLUSTER_DIR     start a node for the control plane that
#                                  `e2e/cluster.sh up CLUSTER_DIR` started; its state lives in
#                                  CLUSTER_DIR/node; writes CLUSTER_DIR/node/env
#   e2e/node.sh import CLUSTER_DIR TARBALL...
#                                  load docker-save-format image tarballs into the node's
#                                  containerd (pods use them with imagePullPolicy Never)
#   e2e/node.sh down CLUSTER_DIR   stop it: no process, mount, cgroup, link, rule or file of
#                                  it is left (KEEP_LOGS=1 keeps CLUSTER_DIR/node/logs)
#   e2e/node.sh leftovers CLUSTER_DIR [SLOT]
#                                  print whatever of a node in CLUSTER_DIR (and of slot SLOT, or
#                                  of any slot) is still on this machine (nothing after `down`);
#                                  exit 1 if anything is
#   e2e/node.sh dropped CLUSTER_DIR
#                                  print how many packets the node's rule dropped for trying
#                                  to leave its bridge for another interface
#   e2e/node.sh paths              print the cached paths and the node's state files in the cache (KEY=path)
#
# Environment:
#   MCP_OPERATOR_CACHE   cache root (default ~/.cache/mcp-operator)
#   E2E_BUILD_NICE       niceness of the Go builds (default 10)
#   E2E_UP_TIMEOUT       seconds to wait for the node to be Ready (default 120)
#   E2E_OWNER_PID        with `up`: take the node down when this process exits
#   E2E_PROXY_MODE       kube-proxy's mode: nftables (default when the kernel has nf_tables)
#                        or iptables
#
# CLUSTER_DIR/node/env after `up`: E2E_NODE_NAME, E2E_NODE_IP (the bridge address: pods reach
# servers on the host there, never on 127.0.0.1), E2E_NODE_BRIDGE, E2E_NODE_CONTAINERD (socket),
# E2E_NODE_CTR and E2E_NODE_CRICTL (command lines for it), E2E_NODE_SERVICE_CIDR, and either
# E2E_NODE_KUBE_PROXY (its mode: ClusterIPs answer, from the host and from pods) or
# E2E_NODE_KUBE_PROXY_UNAVAILABLE (why not).
#
# What it changes on the host, all undone by `down`: a bridge mcpnodeN (10.244.N.1/24) with
# route_localnet on it; the node's rules for packets from that bridge in an nftables table of
# its own, ip mcp-operator-e2e-node-N (without nft: two iptables rules with that comment): a
# DNAT for the `kubernetes` Service (10.0.0.1:443 -> the apiserver on 127.0.0.1) and a drop of
# whatever would be forwarded from the bridge to any other interface; a cgroup root
# /mcpnodeN in every hierarchy, mounts under CLUSTER_DIR/node, the kubelet's links in
# /var/log/containers and CNI result files in /var/lib/cni/results.
#
# ClusterIP Services: kube-proxy keeps its rules in its own nftables tables (`ip kube-proxy`,
# `ip6 kube-proxy`; in iptables mode its KUBE-* chains), masquerades all ClusterIP traffic
# and serves NodePorts on the bridge address only (never on localhost); it changes no
# conntrack sysctl. The node adds a route for the Service CIDR to its bridge (host processes
# reach ClusterIPs there) and turns forwarding on for its bridge alone (a pod reaching a
# ClusterIP is forwarded back onto the bridge; the drop above keeps it there); the global
# net.ipv4.ip_forward stays as it is. Pods reach each other, Services, the host's bridge
# address and the apiserver, nothing beyond. kube-proxy's tables are machine-wide, so one node
# on this machine at a time runs it (a lock in the cache); a second node starts without it
# and says so in E2E_NODE_KUBE_PROXY_UNAVAILABLE.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
BIN="$CACHE/bin"
GOMOD="$HERE/build/kubernetes/go.mod"

SAY_TAG=node
# say, die, start, pid_of, alive, wait_for, terminate, go_build (processes under PROCS_DIR).
# shellcheck source=scripts/lib.sh
. "$HERE/../scripts/lib.sh"

# The version is the one e2e/cluster.sh reads: the control plane's, from the same go.mod.
K8S_VERSION="$(awk '!/=>/ { for (i = 1; i < NF; i++) if ($i == "k8s.io/kubernetes" && $(i+1) ~ /^v/) { print $(i+1); exit } }' "$GOMOD")"
[[ -n $K8S_VERSION ]] || die "cannot read the k8s.io/kubernetes version from $GOMOD"
CRICTL_VERSION=v1.37.0
KUBELET_BIN="$BIN/kubelet-$K8S_VERSION"
SCHEDULER_BIN="$BIN/kube-scheduler-$K8S_VERSION"
PROXY_BIN="$BIN/kube-proxy-$K8S_VERSION"
CRICTL_BIN="$BIN/crictl-$CRICTL_VERSION"
# The pause image: compiled from the module's own build/pause/linux/pause.c, tagged as
# containerd's sandbox_image so it is never pulled.
PAUSE_TAR="$BIN/pause-image-$K8S_VERSION.tar"
DEBIAN_PACKAGES=(containerd runc containernetworking-plugins iptables nftables)
APT_STAMP="$CACHE/node-apt-packages"
CNI_BIN_DIR=/usr/lib/cni

SERVICE_IP=10.0.0.1
# Held by the one kube-proxy on this machine while it runs (its tables are machine-wide); the
# file names the node holding it.
PROXY_LOCK="$CACHE/node-kube-proxy.lock"

# ---------------------------------------------------------------- build

# build_kubernetes PACKAGE OUTPUT: as e2e/cluster.sh builds the control plane (same module, same
# version stamping), so the kubelet reports the apiserver's version.
build_kubernetes() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld=() p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=("-X $p.gitVersion=$K8S_VERSION" "-X $p.gitMajor=1" "-X $p.gitMinor=$minor" "-X $p.gitTreeState=clean")
  done
  go_build "$HERE/build/kubernetes" "$1" "$2" "${ld[@]}"
}

build_crictl() {
  [[ -x $CRICTL_BIN ]] && return 0
  command -v go >/dev/null || die "go is not installed (needed once, to build crictl)"
  local tmp start=$SECONDS
  tmp="$(mktemp -d "$BIN/.crictl-build.XXXXXX")"
  say "building crictl $CRICTL_VERSION"
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS="-buildvcs=false" nice -n "${E2E_BUILD_NICE:-10}" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
    || { rm -rf "$tmp"; die "go install sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION failed"; }
  mv -f "$tmp/crictl" "$CRICTL_BIN"
  rm -rf "$tmp"
  say "built crictl in $((SECONDS - start))s"
}

pause_tag() {
  local makefile="$1"
  awk '$1 == "TAG" && $2 == "?=" { print $3; exit }' "$makefile"
}

build_pause() {
  [[ -f $PAUSE_TAR ]] && return 0
  command -v gcc >/dev/null || die "gcc is required (once, to compile the pause container)"
  local src
  src="$(cd "$HERE/build/kubernetes" && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null)" || true
  if [[ -z $src || ! -f $src/build/pause/linux/pause.c ]]; then
    (cd "$HERE/build/kubernetes" && go mod download k8s.io/kubernetes) || die "cannot download k8s.io/kubernetes"
    src="$(cd "$HERE/build/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  fi
  local tag; tag="$(pause_tag "$src/build/pause/Makefile")"
  [[ -n $tag ]] || die "cannot read the pause version from $src/build/pause/Makefile"
  local work; work="$(mktemp -d)"
  gcc -Os -static -DVERSION="v$tag" -o "$work/pause" "$src/build/pause/linux/pause.c" \
    || { rm -rf "$work"; die "compiling pause.c failed (is libc6-dev installed?)"; }
  strip "$work/pause" 2>/dev/null || true
  python3 "$HERE/image.py" --out "$work/pause.tar" --tag "registry.k8s.io/pause:$tag" \
    --user 65535:65535 --entrypoint '["/pause"]' --file "$work/pause:/pause:0755" >/dev/null \
    || { rm -rf "$work"; die "packing the pause image failed"; }
  mkdir -p "$BIN"
  mv -f "$work/pause.tar" "$PAUSE_TAR"
  rm -rf "$work"
  say "built the pause image registry.k8s.io/pause:$tag"
}

pause_image_name() {
  python3 -c 'import json,sys,tarfile; t=tarfile.open(sys.argv[1]); print(json.load(t.extractfile("manifest.json"))[0]["RepoTags"][0])' "$PAUSE_TAR"
}

# The Debian packages, installed once; the stamp names them so a change of the list installs again.
install_packages() {
  local want="${DEBIAN_PACKAGES[*]}"
  if [[ -f $APT_STAMP && "$(cat "$APT_STAMP")" == "$want" ]] && have_packages; then return 0; fi
  if ! have_packages; then
    ((EUID == 0)) || die "containerd, runc, the CNI plugins, iptables or nftables are missing, and installing them needs root: apt-get install ${DEBIAN_PACKAGES[*]}"
    command -v apt-get >/dev/null || die "no apt-get: install ${DEBIAN_PACKAGES[*]} yourself"
    say "installing ${DEBIAN_PACKAGES[*]} from Debian"
    local start=$SECONDS
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${DEBIAN_PACKAGES[@]}" >/dev/null \
      || die "apt-get install ${DEBIAN_PACKAGES[*]} failed"
    say "installed them in $((SECONDS - start))s"
  fi
  have_packages || die "installed ${DEBIAN_PACKAGES[*]} but containerd, runc, iptables, nft or $CNI_BIN_DIR/bridge is still missing"
  mkdir -p "$CACHE"
  echo "$want" >"$APT_STAMP"
}

have_packages() {
  command -v containerd >/dev/null && command -v containerd-shim-runc-v2 >/dev/null \
    && command -v runc >/dev/null && command -v ctr >/dev/null && command -v iptables >/dev/null \
    && command -v nft >/dev/null \
    && [[ -x $CNI_BIN_DIR/bridge && -x $CNI_BIN_DIR/host-local && -x $CNI_BIN_DIR/loopback ]]
}

cmd_build() {
  # Tests may call this in parallel: one builds, the others wait for it.
  mkdir -p "$BIN"
  exec 7>"$BIN/.node-build.lock"
  flock 7
  install_packages
  build_kubernetes k8s.io/kubernetes/cmd/kubelet "$KUBELET_BIN"
  build_kubernetes k8s.io/kubernetes/cmd/kube-scheduler "$SCHEDULER_BIN"
  build_kubernetes k8s.io/kubernetes/cmd/kube-proxy "$PROXY_BIN"
  build_crictl
  build_pause
  cmd_paths
}

cmd_paths() {
  echo "KUBELET=$KUBELET_BIN"
  echo "KUBE_SCHEDULER=$SCHEDULER_BIN"
  echo "KUBE_PROXY=$PROXY_BIN"
  echo "CRICTL=$CRICTL_BIN"
  echo "PAUSE_IMAGE=$PAUSE_TAR"
  # State the node keeps in the cache (scripts/cache.sh keeps what some script names).
  echo "APT_STAMP=$APT_STAMP"
  echo "PROXY_LOCK=$PROXY_LOCK"
  echo "SLOTS_LOCK=$CACHE/node-slots.lock"
  echo "BUILD_LOCK=$BIN/.node-build.lock"
}

# ---------------------------------------------------------------- check

# why_not: empty when this machine can run a node, else the reason.
why_not() {
  if ((EUID != 0)); then
    echo "the node needs root (cgroups, mounts, a bridge and a NAT rule); this runs as uid $EUID"
    return
  fi
  [[ -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]] || { echo "no cgroup file system at /sys/fs/cgroup"; return; }
  [[ -e /proc/sys/net/ipv4/conf/all/route_localnet ]] || { echo "no IPv4 networking (/proc/sys/net/ipv4)"; return; }
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || { echo "the kernel has no overlay file system"; return; }
}

cmd_check() {
  local reason; reason="$(why_not)"
  if [[ -n $reason ]]; then echo "cannot run a node here: $reason"; return 1; fi
  echo "this machine can run a node"
}

# ---------------------------------------------------------------- pki

# node_cert NAME SUBJECT: a client certificate signed by the cluster's CA (CLUSTER_DIR/pki).
node_cert() {
  local name="$1" subj="$2" pki="$NODE/pki" cpki="$CLUSTER_DIR/pki"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$name.key" 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$cpki/ca.crt" -CAkey "$cpki/ca.key" -CAcreateserial \
    -CAserial "$pki/ca.srl" -days 30 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

node_kubeconfig() {
  kubeconfig_file "$1" "$E2E_APISERVER_URL" "$CLUSTER_DIR/pki/ca.crt" "$NODE/pki/$2.crt" "$NODE/pki/$2.key" "$2"
}

# ---------------------------------------------------------------- processes

free_port() { bash "$HERE/cluster.sh" free-ports "$1"; }

# ---------------------------------------------------------------- layout

set_dirs() {
  [[ -d $1 ]] || die "$1 does not exist: start a control plane first (e2e/cluster.sh up $1)"
  CLUSTER_DIR="$(cd "$1" && pwd)"
  NODE="$CLUSTER_DIR/node"
  PROCS_DIR=$NODE
}

# The node's slot N (bridge mcpnodeN, 10.244.N.0/24, cgroup root /mcpnodeN): recorded at `up`.
load_slot() {
  SLOT="$(cat "$NODE/slot" 2>/dev/null || true)"
  [[ $SLOT =~ ^[0-9]+$ ]] || { SLOT=""; return 1; }
  BRIDGE="mcpnode$SLOT"
  NODE_IP="10.244.$SLOT.1"
  CGROUP_ROOT="/mcpnode$SLOT"
  RULE_COMMENT="mcp-operator-e2e-node-$SLOT"
}

# claim_slot: the lowest N whose bridge does not exist, taken under a lock (two `up`s at once).
claim_slot() {
  mkdir -p "$CACHE"
  exec 8>"$CACHE/node-slots.lock"
  flock 8
  local n
  for n in $(seq 0 49); do
    if ! ip link show "mcpnode$n" >/dev/null 2>&1 && [[ ! -d /sys/fs/cgroup/memory/mcpnode$n ]]; then
      echo "$n" >"$NODE/slot"
      load_slot
      ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
      exec 8>&-
      return 0
    fi
  done
  die "no free node slot (bridges mcpnode0..49 all exist)"
}

cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d="${d%/}"
    [[ -f $d/cgroup.procs ]] && echo "$d"
  done
  if [[ -f /sys/fs/cgroup/cgroup.procs ]]; then echo /sys/fs/cgroup; fi
}

make_cgroup_root() {
  local h
  for h in $(cgroup_hierarchies); do
    mkdir -p "$h$CGROUP_ROOT"
    # cgroup v1 cpuset: a new group has no CPUs or memory nodes until given its parent's.
    if [[ -f $h/cpuset.cpus && -f $h$CGROUP_ROOT/cpuset.cpus ]]; then
      cat "$h/cpuset.cpus" >"$h$CGROUP_ROOT/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

# Processes still in the node's cgroups: containers whose shim died before it could stop them
# (they would outlive everything else). Killed, then waited for.
kill_cgroup_procs() {
  local h pids=() p
  for h in $(cgroup_hierarchies); do
    [[ -d $h$CGROUP_ROOT ]] || continue
    while read -r p; do pids+=("$p"); done < <(find "$h$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  ((${#pids[@]} > 0)) || return 0
  say "killing ${#pids[@]} processes left in the node's cgroups"
  kill -KILL "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  done
}

remove_cgroup_root() {
  local h d
  for h in $(cgroup_hierarchies); do
    [[ -d $h$CGROUP_ROOT ]] || continue
    # Deepest first; a group still holding a process cannot go (reported by `leftovers`).
    while read -r d; do
      rmdir "$d" 2>/dev/null || true
    done < <(find "$h$CGROUP_ROOT" -depth -type d 2>/dev/null)
  done
}

# ---------------------------------------------------------------- host rules

# The node's own netfilter rules, both for packets arriving on its bridge:
#  - the `kubernetes` Service: the apiserver listens on 127.0.0.1 only; pods reach it as
#    10.0.0.1:443 through a DNAT (to 127.0.0.1, so route_localnet is on for the bridge);
#  - forwarding stays on the bridge: whatever would leave on any other interface is dropped.
#    A base chain of its own (mangle's FORWARD in iptables), so no ACCEPT in kube-proxy's
#    chains can let a packet past it.
# With nft they are one table, ip mcp-operator-e2e-node-N, that `down` deletes whole; without
# it, two iptables rules with that comment.
rules_use_nft() { command -v nft >/dev/null && nft list tables >/dev/null 2>&1; }

add_node_rules() {
  if rules_use_nft; then
    nft -f - <<EOF
table ip $RULE_COMMENT {
  comment "e2e/node.sh: node $NODE_IP of $CLUSTER_DIR"
  chain kubernetes-service {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "$BRIDGE" ip daddr $SERVICE_IP tcp dport 443 dnat to 127.0.0.1:$APISERVER_PORT
  }
  chain bridge-only {
    type filter hook forward priority filter - 10; policy accept;
    iifname "$BRIDGE" oifname != "$BRIDGE" counter drop
  }
}
EOF
  else
    iptables -w -t nat -A PREROUTING -i "$BRIDGE" -d "$SERVICE_IP/32" -p tcp --dport 443 \
      -m comment --comment "$RULE_COMMENT" -j DNAT --to-destination "127.0.0.1:$APISERVER_PORT" \
      && iptables -w -t mangle -A FORWARD -i "$BRIDGE" ! -o "$BRIDGE" \
        -m comment --comment "$RULE_COMMENT" -j DROP
  fi
}

# dropped_packets: how many packets the bridge-only rule has dropped (`dropped` prints it).
dropped_packets() {
  local n
  if command -v nft >/dev/null && nft list table ip "$RULE_COMMENT" >/dev/null 2>&1; then
    n="$(nft list chain ip "$RULE_COMMENT" bridge-only | awk '/ drop/ { for (i = 1; i < NF; i++) if ($i == "packets") print $(i+1) }')"
  else
    n="$(iptables -w -t mangle -L FORWARD -v -x -n | awk -v c="$RULE_COMMENT" 'index($0, "/* " c " */") { print $1 }')"
  fi
  [[ -n $n ]] || die "the node in $CLUSTER_DIR has no bridge-only rule"
  echo "$n"
}

remove_node_rules() {
  [[ -n ${RULE_COMMENT:-} ]] || return 0
  if command -v nft >/dev/null && nft list table ip "$RULE_COMMENT" >/dev/null 2>&1; then
    nft delete table ip "$RULE_COMMENT" || say "cannot delete nftables table ip $RULE_COMMENT"
  fi
  local table rule
  for table in nat mangle; do
    rule="$(iptables -w -t "$table" -S 2>/dev/null | grep -F -- "--comment $RULE_COMMENT " | head -n 1 || true)"
    while [[ -n $rule ]]; do
      # The rule as `iptables -S` lists it, with no quoting in it: word splitting is exact.
      # shellcheck disable=SC2086
      iptables -w -t "$table" -D ${rule#-A } || break
      rule="$(iptables -w -t "$table" -S 2>/dev/null | grep -F -- "--comment $RULE_COMMENT " | head -n 1 || true)"
    done
  done
}

# ---------------------------------------------------------------- Services (kube-proxy)

# proxy_mode: nftables when this kernel and nft hold tables (kube-proxy's rules are then all
# in its own tables, which `down` deletes whole), else iptables.
proxy_mode() {
  if [[ -n ${E2E_PROXY_MODE:-} ]]; then
    [[ $E2E_PROXY_MODE == nftables || $E2E_PROXY_MODE == iptables ]] \
      || die "E2E_PROXY_MODE must be nftables or iptables, not '$E2E_PROXY_MODE'"
    echo "$E2E_PROXY_MODE"
  elif command -v nft >/dev/null && nft list tables >/dev/null 2>&1; then
    echo nftables
  else
    echo iptables
  fi
}

write_proxy_config() {
  local mode="$1"
  cat >"$NODE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $NODE/kube-proxy.kubeconfig
hostnameOverride: $NODE_IP
mode: $mode
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
clusterCIDR: 10.244.$SLOT.0/24
# NodePorts on the bridge address only: never on localhost, never on the host's interfaces.
nodePortAddresses: [$NODE_IP/32]
# Every ClusterIP connection leaves with the bridge address as its source, so a pod's reply to
# another pod comes back through the host, which undoes the DNAT (no br_netfilter needed).
nftables:
  masqueradeAll: true
iptables:
  masqueradeAll: true
  localhostNodePorts: false
# Root here lacks CAP_SYS_RESOURCE.
oomScoreAdj: 0
# Zero: leave the host's conntrack table size and timeouts as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
EOF
}

proxy_healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" >/dev/null; }

# start_proxy: kube-proxy for this node, if no other node on this machine runs one. It holds
# the lock (fd 9, inherited) as long as it runs. Sets PROXY_MODE or PROXY_UNAVAILABLE.
start_proxy() {
  PROXY_MODE="" PROXY_UNAVAILABLE=""
  mkdir -p "$CACHE"
  exec 9>>"$PROXY_LOCK"
  if ! flock -n 9; then
    exec 9>&-
    PROXY_UNAVAILABLE="another node on this machine runs kube-proxy ($(cat "$PROXY_LOCK" 2>/dev/null || echo unknown)); its rules are machine-wide, so this node has no ClusterIP Services"
    say "$PROXY_UNAVAILABLE"
    return 0
  fi
  echo "node $NODE_IP of $CLUSTER_DIR" >"$PROXY_LOCK"
  local mode; mode="$(proxy_mode)"
  # In iptables mode over iptables-nft, kube-proxy's first rule in a table creates that table;
  # `down` removes those it created, once empty.
  if rules_use_nft; then nft list tables >"$NODE/nft-tables-before"; fi
  # Recorded before kube-proxy writes anything: `down` cleans up after it by this.
  echo "$mode" >"$NODE/kube-proxy-mode"
  read -r PROXY_HEALTHZ_PORT PROXY_METRICS_PORT <<<"$(free_port 2)"
  write_proxy_config "$mode"
  node_cert kube-proxy "/CN=system:kube-proxy"
  node_kubeconfig "$NODE/kube-proxy.kubeconfig" kube-proxy
  # The node's rules (add_node_rules) drop what would leave the bridge; the route and
  # forwarding go with the bridge.
  ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP" \
    || { exec 9>&-; say "cannot route $SERVICE_CIDR to $BRIDGE"; return 1; }
  sysctl -qw "net.ipv4.conf.$BRIDGE.forwarding=1"
  local started; started="$(date +%s%N)"
  start kube-proxy "$PROXY_BIN" --config="$NODE/kube-proxy.yaml" --v=1
  exec 9>&-
  wait_for kube-proxy "kube-proxy /healthz" proxy_healthy || return
  PROXY_MODE="$mode"
  say "kube-proxy ($mode) healthy $((($(date +%s%N) - started) / 1000000)) ms after its start"
}

# remove_proxy_rules: kube-proxy's own tables or chains, when it ran for this node and no other
# kube-proxy on this machine runs now (taking the lock makes sure none starts meanwhile).
remove_proxy_rules() {
  [[ -f $NODE/kube-proxy-mode ]] || return 0
  mkdir -p "$CACHE" "$NODE/logs"
  exec 9>>"$PROXY_LOCK"
  if flock -w 10 9; then
    # Removes kube-proxy's nftables tables and iptables chains of every mode, and nothing else.
    "$PROXY_BIN" --cleanup >>"$NODE/logs/kube-proxy-cleanup.log" 2>&1 \
      || say "kube-proxy --cleanup failed (see $NODE/logs/kube-proxy-cleanup.log)"
    # --cleanup leaves KUBE-FIREWALL (it takes it for the kubelet's; ours adds none).
    if [[ "$(cat "$NODE/kube-proxy-mode")" == iptables ]]; then remove_kube_firewall; fi
    remove_new_empty_tables
    : >"$PROXY_LOCK"
  else
    say "another kube-proxy holds $PROXY_LOCK; leaving the kube-proxy tables to it"
  fi
  exec 9>&-
  rm -f "$NODE/kube-proxy-mode"
}

remove_kube_firewall() {
  local t hook
  for t in iptables ip6tables; do
    command -v "$t" >/dev/null || continue
    "$t" -w -t filter -S KUBE-FIREWALL >/dev/null 2>&1 || continue
    for hook in INPUT OUTPUT FORWARD; do
      while "$t" -w -t filter -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    "$t" -w -t filter -F KUBE-FIREWALL && "$t" -w -t filter -X KUBE-FIREWALL \
      || say "cannot remove $t KUBE-FIREWALL"
  done
}

# The nftables tables that appeared while kube-proxy ran (iptables-nft makes one per iptables
# table it first writes to) and hold no rule now.
remove_new_empty_tables() {
  [[ -f $NODE/nft-tables-before ]] && rules_use_nft || return 0
  local family name rules
  while read -r _ family name; do
    grep -qxF "table $family $name" "$NODE/nft-tables-before" && continue
    rules="$(nft -j list table "$family" "$name" 2>/dev/null \
      | python3 -c 'import json, sys; print(sum("rule" in o for o in json.load(sys.stdin)["nftables"]))' 2>/dev/null || echo x)"
    if [[ $rules == 0 ]]; then nft delete table "$family" "$name" || say "cannot delete table $family $name"; fi
  done < <(nft list tables)
  rm -f "$NODE/nft-tables-before"
}

# proxy_leftovers: kube-proxy's tables and chains on this machine while no kube-proxy runs.
proxy_leftovers() {
  [[ -f $PROXY_LOCK ]] || return 0
  flock -n "$PROXY_LOCK" true || return 0
  local family t
  if command -v nft >/dev/null; then
    for family in ip ip6; do
      nft list table "$family" kube-proxy >/dev/null 2>&1 && echo "nftables table $family kube-proxy"
    done
  fi
  for t in iptables ip6tables; do
    command -v "$t" >/dev/null || continue
    "$t" -w -t nat -S 2>/dev/null | grep -q -- '-N KUBE-' && echo "$t nat KUBE-* chains"
    "$t" -w -t filter -S 2>/dev/null | grep -q -- '-N KUBE-' && echo "$t filter KUBE-* chains"
  done
  return 0
}

# ---------------------------------------------------------------- up

write_configs() {
  local c="$NODE/containerd" pause; pause="$(pause_image_name)"
  mkdir -p "$c/root" "$c/state" "$NODE/cni/net.d" "$NODE/cni/ipam"
  cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
# Plugins that write outside root/state (opt: /opt/containerd) or are not needed.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$NODE/containerd.sock"
[ttrpc]
  address = "$NODE/containerd.sock.ttrpc"
[debug]
  address = "$NODE/containerd-debug.sock"
[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # Root here lacks CAP_SYS_RESOURCE: runc must not lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  # Pod network namespaces are mounted under state, so down finds and removes them.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # cgroup v1 and no systemd: the kubelet drives cgroupfs.
        SystemdCgroup = false
        # runc's state with the node's, not in /run/containerd/runc.
        Root = "$c/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$NODE/cni/net.d"
    max_conf_num = 1
EOF
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$NODE/containerd.sock" "$NODE/containerd.sock" >"$NODE/crictl.yaml"
  # The bridge exists with the node IP already: isGateway stays false, so the plugin neither
  # readdresses it nor turns on IP forwarding; ipMasq false adds no rule. The pods' default
  # route points at the node IP, where the DNAT rule catches the kubernetes Service.
  cat >"$NODE/cni/net.d/10-mcpnode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$BRIDGE",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE/cni/ipam",
        "ranges": [[{"subnet": "10.244.$SLOT.0/24", "rangeStart": "10.244.$SLOT.10", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
  # Anonymous requests refused; the apiserver authenticates with its kubelet client certificate
  # (signed by the cluster CA), everything else through TokenReview/SubjectAccessReview.
  cat >"$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Kubelets since 1.35 refuse cgroup v1 unless told; this machine has only v1 hierarchies.
failCgroupV1: false
cgroupDriver: cgroupfs
# Own cgroup root: a second kubelet on this machine must not see our pods as orphans.
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix://$NODE/containerd.sock
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
# Root here lacks CAP_SYS_RESOURCE: the kubelet cannot lower its own OOM score.
oomScoreAdj: 0
# Never add chains to the host's iptables.
makeIPTablesUtilChains: false
# ConfigMap and Secret volumes follow changes within this (plus jitter).
syncFrequency: 10s
# The images were imported, nothing can be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
failSwapOn: false
podLogsDir: $NODE/pod-logs
volumePluginDir: $NODE/volume-plugins
serializeImagePulls: false
registerNode: true
rotateCertificates: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $CLUSTER_DIR/pki/ca.crt
authorization:
  mode: Webhook
EOF
}

node_ready() {
  [[ "$("$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" get node "$NODE_IP" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
kubelet_healthy() { [[ "$(curl -fsS --max-time 5 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz")" == ok ]]; }
containerd_up() { ctr_ version; }
scheduler_healthy() { [[ "$(curl -ksS --max-time 5 "https://127.0.0.1:$SCHEDULER_PORT/healthz")" == ok ]]; }
ctr_() { ctr --address "$NODE/containerd.sock" -n k8s.io "$@"; }
crictl_() { "$CRICTL_BIN" --config "$NODE/crictl.yaml" "$@"; }

start_node() {
  read -r KUBELET_PORT KUBELET_HEALTHZ_PORT SCHEDULER_PORT <<<"$(free_port 3)"
  write_configs
  start containerd containerd --config "$NODE/containerd/config.toml" --log-level warn
  wait_for containerd "containerd" containerd_up || return
  ctr_ images import --all-platforms "$PAUSE_TAR" >/dev/null || { say "importing the pause image failed"; return 1; }

  node_cert kube-scheduler "/CN=system:kube-scheduler"
  node_kubeconfig "$NODE/kube-scheduler.kubeconfig" kube-scheduler
  start kube-scheduler "$SCHEDULER_BIN" \
    --kubeconfig="$NODE/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$NODE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$NODE/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
    --cert-dir="$NODE/scheduler-serving" \
    --leader-elect=false --profiling=false --v=1
  wait_for kube-scheduler "kube-scheduler /healthz" scheduler_healthy || return

  # The node is named after its IP: the apiserver dials the node's name for logs and exec,
  # and there is no DNS for it.
  node_cert kubelet "/O=system:nodes/CN=system:node:$NODE_IP"
  node_kubeconfig "$NODE/kubelet.kubeconfig" kubelet
  start kubelet "$KUBELET_BIN" \
    --config="$NODE/kubelet.yaml" \
    --kubeconfig="$NODE/kubelet.kubeconfig" \
    --root-dir="$NODE/kubelet" \
    --cert-dir="$NODE/kubelet-pki" \
    --hostname-override="$NODE_IP" \
    --node-ip="$NODE_IP" \
    --v=1
  wait_for kubelet "the kubelet /healthz" kubelet_healthy || return
  wait_for kubelet "node $NODE_IP Ready" node_ready || return
  start_proxy
}

cmd_up() {
  set_dirs "$1"
  local reason; reason="$(why_not)"
  [[ -z $reason ]] || die "cannot start a node: $reason"
  [[ -f $CLUSTER_DIR/env && -f $CLUSTER_DIR/pki/ca.key ]] || die "no control plane in $CLUSTER_DIR (run e2e/cluster.sh up $CLUSTER_DIR first)"
  if [[ -f $NODE/pids ]]; then
    local name pid
    while read -r name pid; do
      kill -0 "$pid" 2>/dev/null && die "a node is already running in $NODE ($name, pid $pid); run: $0 down $CLUSTER_DIR"
    done <"$NODE/pids"
  fi
  if [[ -e $NODE ]]; then cmd_down "$CLUSTER_DIR" >/dev/null 2>&1 || true; fi
  [[ -x $KUBELET_BIN && -x $SCHEDULER_BIN && -x $PROXY_BIN && -x $CRICTL_BIN && -f $PAUSE_TAR ]] && have_packages || cmd_build >/dev/null
  local start_s=$SECONDS
  # The control plane's addresses (not exported: the node's processes get none of the admin's).
  # shellcheck disable=SC1091
  . "$CLUSTER_DIR/env"
  APISERVER_PORT="${E2E_APISERVER_URL##*:}"
  SERVICE_CIDR="${E2E_SERVICE_CIDR:-10.0.0.0/24}"
  mkdir -p "$NODE/logs" "$NODE/pki"
  chmod 700 "$NODE/pki"

  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'log "node did not come up (logs in $NODE/logs)"; KEEP_LOGS=1 cmd_down "$CLUSTER_DIR" >/dev/null 2>&1' EXIT
  claim_slot
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # The kubernetes Service's DNAT to 127.0.0.1 needs route_localnet on the bridge.
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  add_node_rules || die "cannot add the node's netfilter rules (the kubernetes Service, bridge-only forwarding)"
  make_cgroup_root
  start_node || exit 1
  {
    echo "E2E_NODE_NAME=$NODE_IP"
    echo "E2E_NODE_IP=$NODE_IP"
    echo "E2E_NODE_BRIDGE=$BRIDGE"
    echo "E2E_NODE_CONTAINERD=$NODE/containerd.sock"
    echo "E2E_NODE_CTR=ctr --address $NODE/containerd.sock -n k8s.io"
    echo "E2E_NODE_CRICTL=$CRICTL_BIN --config $NODE/crictl.yaml"
    echo "E2E_NODE_SERVICE_CIDR=$SERVICE_CIDR"
    if [[ -n $PROXY_MODE ]]; then
      echo "E2E_NODE_KUBE_PROXY=$PROXY_MODE"
    else
      echo "E2E_NODE_KUBE_PROXY_UNAVAILABLE=$PROXY_UNAVAILABLE"
    fi
  } >"$NODE/env"
  if [[ -n ${E2E_OWNER_PID:-} ]]; then start_watchdog "$E2E_OWNER_PID"; fi
  trap - EXIT INT TERM
  say "node $NODE_IP Ready in $((SECONDS - start_s))s (bridge $BRIDGE, Kubernetes $K8S_VERSION, containerd $(containerd --version | awk '{print $3}'), kube-proxy: ${PROXY_MODE:-none})"
}

start_watchdog() {
  local owner="$1"
  kill -0 "$owner" 2>/dev/null || die "E2E_OWNER_PID=$owner is not a running process"
  (
    while kill -0 "$owner" 2>/dev/null && [[ -f $NODE/pids ]]; do sleep 1; done
    if [[ -f $NODE/pids ]]; then
      say "owner process $owner is gone; taking the node in $NODE down"
      KEEP_LOGS=1 NODE_WATCHDOG=1 bash "$HERE/node.sh" down "$CLUSTER_DIR"
    fi
  ) >>"$NODE/logs/watchdog.log" 2>&1 </dev/null &
  echo $! >"$NODE/watchdog.pid"
}

# ---------------------------------------------------------------- import

cmd_import() {
  set_dirs "$1"; shift
  [[ -S $NODE/containerd.sock ]] || die "no node running in $CLUSTER_DIR"
  local t
  for t in "$@"; do
    [[ -f $t ]] || die "no image tarball at $t"
    ctr_ images import --all-platforms "$t" >/dev/null || die "importing $t failed"
  done
}

# ---------------------------------------------------------------- down

cmd_down() {
  set_dirs "$1"
  [[ -d $NODE ]] || { say "no node in $CLUSTER_DIR; nothing to stop"; return 0; }
  if [[ -z ${NODE_WATCHDOG:-} ]]; then
    local w; w="$(cat "$NODE/watchdog.pid" 2>/dev/null || true)"
    if [[ -n $w ]] && kill -0 "$w" 2>/dev/null; then kill -TERM "$w" 2>/dev/null || true; fi
  fi
  rm -f "$NODE/watchdog.pid"
  local start_s=$SECONDS
  load_slot || true
  # The Node object goes too: a node brought up again for this control plane may take another
  # slot (another name), and the scheduler would keep binding pods to the dead one.
  if [[ -n ${SLOT:-} && -x $CLUSTER_DIR/bin/kubectl && -f $CLUSTER_DIR/kubeconfig ]]; then
    timeout 15 "$CLUSTER_DIR/bin/kubectl" --kubeconfig "$CLUSTER_DIR/kubeconfig" delete node "$NODE_IP" \
      --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  # The kubelet, the scheduler and kube-proxy first, so nothing restarts what is removed next.
  terminate $(pid_of kubelet) $(pid_of kube-scheduler) $(pid_of kube-proxy)
  # Pod sandboxes through CRI (CNI DEL for each pod), then whatever task is left: the shims
  # outlive containerd.
  if [[ -S $NODE/containerd.sock ]] && alive containerd; then
    timeout 60 "$CRICTL_BIN" --config "$NODE/crictl.yaml" --timeout 20s rmp -fa >/dev/null 2>&1 || true
    local c
    for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
    for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$c" >/dev/null 2>&1 || true; done
    for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$c" >/dev/null 2>&1 || true; done
  fi
  terminate $(pid_of containerd)
  # Shims of this containerd that are somehow still there (they name its socket).
  terminate $(node_processes)
  rm -f "$NODE/pids"
  # Mounts under the node's directory: rootfs overlays, volumes, netns files; deepest first.
  local m
  for m in $(node_mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
  if [[ -n ${SLOT:-} ]]; then
    kill_cgroup_procs
    remove_cgroup_root
    # With the bridge go its forwarding and route_localnet settings and the Service route;
    # the rules only after it.
    ip link del "$BRIDGE" 2>/dev/null || true
    remove_node_rules
  fi
  remove_proxy_rules
  local f
  for f in /var/log/containers/*.log; do
    [[ -L $f && "$(readlink "$f")" == "$NODE/"* ]] && rm -f "$f"
  done
  rmdir /var/log/containers 2>/dev/null || true
  [[ -n ${BRIDGE:-} ]] && rm -f /var/lib/cni/results/"$BRIDGE"-* 2>/dev/null
  rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
  # containerd 1.6 puts its shims' sockets in /run/containerd/s whatever its state dir; each
  # shim removes its own, the directories go when empty (another containerd keeps them).
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  # The kubelet opens its device-plugin socket here whatever --root-dir says.
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null || true
  if [[ -n ${KEEP_LOGS:-} ]]; then
    find "$NODE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} + 2>/dev/null || true
  else
    rm -rf "$NODE"
  fi
  say "node in $NODE down in $((SECONDS - start_s))s"
}

node_mounts() { awk -v p="$NODE/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo; }

# Processes whose command line names the node's directory (containerd, its shims, kubelet).
node_processes() {
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "$NODE/" && echo "${p#/proc/}"
  done
  return 0
}

# ---------------------------------------------------------------- leftovers

cmd_leftovers() {
  CLUSTER_DIR="$(cd "$1" 2>/dev/null && pwd || echo "$1")"
  NODE="$CLUSTER_DIR/node"
  PROCS_DIR=$NODE
  local found=0 slot="${2:-}"
  say_left() { echo "left: $*"; found=1; }
  local p
  for p in $(node_processes); do say_left "process $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"; done
  for p in $(node_mounts); do say_left "mount $p"; done
  [[ -e $NODE ]] && say_left "directory $NODE"
  # Slots are named in the directory that `down` removed: look for every slot's traces.
  local h n rules
  # Listed once: fifty slots of nft and iptables calls are slow.
  rules="$(nft list tables 2>/dev/null | sed 's/^/nftables /'; iptables -w -t nat -S 2>/dev/null; iptables -w -t mangle -S 2>/dev/null)"
  for n in $(seq 0 49); do
    [[ -n $slot && $n != "$slot" ]] && continue
    ip link show "mcpnode$n" >/dev/null 2>&1 && say_left "link mcpnode$n"
    for h in $(cgroup_hierarchies); do [[ -d $h/mcpnode$n ]] && say_left "cgroup $h/mcpnode$n"; done
    while read -r p; do [[ -n $p ]] && say_left "rule of node $n: $p"; done \
      < <(grep -E -- "^nftables table ip mcp-operator-e2e-node-$n\$|--comment mcp-operator-e2e-node-$n " <<<"$rules" || true)
    ls /var/lib/cni/results/mcpnode"$n"-* >/dev/null 2>&1 && say_left "CNI results /var/lib/cni/results/mcpnode$n-*"
  done
  for p in /var/log/containers/*.log; do
    [[ -L $p && "$(readlink "$p")" == "$NODE/"* ]] && say_left "log link $p"
  done
  [[ -e /var/lib/kubelet/device-plugins/kubelet.sock ]] && say_left "/var/lib/kubelet/device-plugins/kubelet.sock"
  while read -r p; do [[ -n $p ]] && say_left "$p"; done < <(proxy_leftovers)
  ((found == 0))
}

# ---------------------------------------------------------------- main

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

# Sourced (by a test harness), it only defines the functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  case "${1:-}" in
    build) cmd_build ;;
    paths) cmd_paths ;;
    check) cmd_check ;;
    up) [[ $# -eq 2 ]] || usage; cmd_up "$2" ;;
    import) [[ $# -ge 3 ]] || usage; shift; cmd_import "$@" ;;
    dropped) [[ $# -eq 2 ]] || usage; set_dirs "$2"; load_slot || die "no node in $CLUSTER_DIR"; dropped_packets ;;
    down) [[ $# -eq 2 ]] || usage; cmd_down "$2" ;;
    leftovers) [[ $# -eq 2 || $# -eq 3 ]] || usage; cmd_leftovers "$2" "${3:-}" ;;
    *) usage ;;
  esac
fi
