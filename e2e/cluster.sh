#!/usr/bin/env bash
# A real, local Kubernetes control plane for the e2e tests and the demo:
# etcd + kube-apiserver + kube-controller-manager, built from pinned Go modules
# (e2e/build/*), listening on 127.0.0.1 only, with TLS and RBAC on.
#
#   e2e/cluster.sh build          build (or reuse) etcd, kube-apiserver,
#                                 kube-controller-manager and kubectl
#   e2e/cluster.sh up DIR         start a control plane whose state lives in DIR;
#                                 writes DIR/kubeconfig and DIR/env
#   e2e/cluster.sh down DIR       stop it; removes DIR's state unless KEEP_LOGS=1
#                                 (then DIR/logs is kept)
#   e2e/cluster.sh paths          print the cached binary paths (KEY=path)
#   e2e/cluster.sh free-ports N   print N loopback TCP ports that are free now
#
# Environment:
#   MCP_OPERATOR_CACHE   cache root (default ~/.cache/mcp-operator); binaries go
#                        to $MCP_OPERATOR_CACHE/bin/<name>-<version>
#   E2E_BUILD_NICE       niceness of the Go builds (default 10)
#   E2E_UP_TIMEOUT       seconds to wait for readiness (default 120)
#   E2E_KCM_CONTROLLERS  --controllers of kube-controller-manager (default: the
#                        node-independent ones an operator needs; '*' for all)
#   E2E_OWNER_PID        with `up`: stop the control plane when this process exits
#   E2E_APISERVER_ARGS   extra kube-apiserver flags, split on spaces (e.g. an audit log)
#   KEEP_LOGS            with `down`: keep DIR/logs
#
# DIR after `up`: kubeconfig (admin: CN=admin, O=system:masters), env (KEY=VALUE
# lines: KUBECONFIG, KUBECTL, E2E_APISERVER_URL, E2E_SERVICE_CIDR, ...; `set -a; . DIR/env; set +a`),
# bin/kubectl, pki/ (ca.crt and ca.key: mint more client certificates with them),
# logs/*.log, pids.
#
# No container runtime and no kubelet: Pods never run, unless e2e/node.sh adds a
# node to it. What is real is the API (admission, validation, CRDs, CEL, RBAC,
# watches) and the controllers: garbage collector, namespace lifecycle, service
# accounts, Deployments.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
BIN="$CACHE/bin"

# The versions are the single source of truth in the go.mod files.
# mod_version GOMOD MODULE: the version MODULE is required at in GOMOD.
mod_version() {
  awk -v m="$2" '!/=>/ { for (i = 1; i < NF; i++) if ($i == m && $(i+1) ~ /^v/) { print $(i+1); exit } }' "$1"
}
k8s_version() { mod_version "$HERE/build/kubernetes/go.mod" k8s.io/kubernetes; }
etcd_version() { mod_version "$HERE/build/etcd/go.mod" go.etcd.io/etcd/server/v3; }

K8S_VERSION="$(k8s_version)"
ETCD_VERSION="$(etcd_version)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" ]] || { echo "cluster.sh: cannot read versions from e2e/build/*/go.mod" >&2; exit 1; }

ETCD_BIN="$BIN/etcd-$ETCD_VERSION"
APISERVER_BIN="$BIN/kube-apiserver-$K8S_VERSION"
KCM_BIN="$BIN/kube-controller-manager-$K8S_VERSION"
KUBECTL_BIN="$BIN/kubectl-$K8S_VERSION"

SAY_TAG=cluster
# say, die, start, pid_of, alive, wait_for, terminate, go_build (processes under PROCS_DIR).
# shellcheck source=scripts/lib.sh
. "$HERE/../scripts/lib.sh"
# A component that lost a port race makes `up` retry with other ports.
PORT_RACE_RETRY=1

# ---------------------------------------------------------------- build

cmd_build() {
  local kv="$K8S_VERSION" minor
  minor="${kv#v1.}"; minor="${minor%%.*}"
  local ld=()
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=("-X $p.gitVersion=$kv" "-X $p.gitMajor=1" "-X $p.gitMinor=$minor" "-X $p.gitTreeState=clean")
  done
  # One heavy build at a time: the machines this runs on are small.
  go_build "$HERE/build/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver "$APISERVER_BIN" "${ld[@]}"
  go_build "$HERE/build/kubernetes" k8s.io/kubernetes/cmd/kube-controller-manager "$KCM_BIN" "${ld[@]}"
  go_build "$HERE/build/kubernetes" k8s.io/kubernetes/cmd/kubectl "$KUBECTL_BIN" "${ld[@]}"
  go_build "$HERE/build/etcd" go.etcd.io/etcd/server/v3 "$ETCD_BIN"
  cmd_paths
}

cmd_paths() {
  echo "ETCD=$ETCD_BIN"
  echo "KUBE_APISERVER=$APISERVER_BIN"
  echo "KUBE_CONTROLLER_MANAGER=$KCM_BIN"
  echo "KUBECTL=$KUBECTL_BIN"
}

# ---------------------------------------------------------------- helpers

need() { for c in "$@"; do command -v "$c" >/dev/null || die "'$c' is required"; done; }

# Ports in use on this host (any state), from /proc/net/tcp{,6}.
used_ports() {
  local f sl local_addr rest
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $f ]] || continue
    while read -r sl local_addr rest; do
      [[ $sl == sl ]] && continue
      echo $((16#${local_addr##*:}))
    done <"$f"
  done
}

# free_ports N: N distinct loopback ports that nothing uses right now. The range
# is below Linux's ephemeral range, so outgoing connections cannot take them.
# A port can still be lost to a race with another process; `up` retries then.
free_ports() {
  local n="$1" used p chosen=" "
  used=" $(used_ports | sort -un | tr '\n' ' ') "
  while ((n > 0)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    [[ $used == *" $p "* || $chosen == *" $p "* ]] && continue
    chosen+="$p "; n=$((n - 1))
  done
  echo $chosen
}

# ---------------------------------------------------------------- pki

# cert NAME SUBJECT EXTENSIONS: an EC P-256 key (PKCS#8) and a certificate
# signed by the cluster CA (or by $CA).
cert() {
  local name="$1" subj="$2" ext="$3" pki="$DIR/pki"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/$name.key" 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$pki/$name.ext"
  local ca="${CA:-ca}"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

make_pki() {
  local pki="$DIR/pki"
  mkdir -p "$pki"; chmod 700 "$pki"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=mcp-operator-e2e-ca" -days 30 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$pki/ca.crt" 2>/dev/null
  local leaf="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature"
  cert apiserver "/CN=kube-apiserver" "$leaf
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=admin" "$leaf
extendedKeyUsage=clientAuth"
  cert kube-controller-manager "/CN=system:kube-controller-manager" "$leaf
extendedKeyUsage=clientAuth"
  # How the apiserver authenticates to kubelets (e2e/node.sh): logs, exec, port-forward.
  cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$leaf
extendedKeyUsage=clientAuth"
  # Front proxy (requestheader) CA and client: how an aggregating proxy
  # authenticates to the apiserver; also what delegated authentication of the
  # controller-manager expects to find in kube-system/extension-apiserver-authentication.
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/front-proxy-ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/front-proxy-ca.key" -subj "/CN=mcp-operator-e2e-front-proxy-ca" -days 30 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$pki/front-proxy-ca.crt" 2>/dev/null
  CA=front-proxy-ca cert front-proxy-client "/CN=front-proxy-client" "$leaf
extendedKeyUsage=clientAuth"
  # Service-account token signing pair.
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

# kubeconfig FILE USER: a kubeconfig with the CA and the client cert embedded.
kubeconfig() {
  kubeconfig_file "$1" "https://127.0.0.1:$APISERVER_PORT" "$DIR/pki/ca.crt" "$DIR/pki/$2.crt" "$DIR/pki/$2.key" "$2"
}

# ---------------------------------------------------------------- processes

curl_admin() {
  curl -fsS --max-time 5 --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" "$@"
}
etcd_healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() { [[ "$(curl_admin "https://127.0.0.1:$APISERVER_PORT/readyz")" == ok ]]; }
kcm_healthy() { [[ "$(curl -ksS --max-time 5 "https://127.0.0.1:$KCM_PORT/healthz")" == ok ]]; }
default_sa_exists() { curl_admin "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default"; }

# stop_all: stop every recorded process: the clients of etcd together, then etcd
# (an apiserver that loses etcd first hangs in retries until it is killed).
stop_all() {
  [[ -f "$DIR/pids" ]] || return 0
  local name pid clients=() store=()
  while read -r name pid; do
    if [[ $name == etcd ]]; then store+=("$pid"); else clients+=("$pid"); fi
  done <"$DIR/pids"
  terminate "${clients[@]}"
  terminate "${store[@]}"
  rm -f "$DIR/pids"
}

# ---------------------------------------------------------------- up / down

SERVICE_CIDR=10.0.0.0/24
# The apiserver reaches webhook and aggregated Services at their endpoints' pod IPs
# (--enable-aggregator-routing), which the host reaches on the node's bridge: no kube-proxy is
# needed for them (e2e/node.sh runs one for everything else). The node reads the Service CIDR
# from DIR/env (E2E_SERVICE_CIDR).
# The controllers that do something without nodes and matter to an operator:
# ownerReference garbage collection, namespace deletion, service accounts and
# their tokens, kube-root-ca.crt, aggregated ClusterRoles (admin/edit/view),
# Deployments -> ReplicaSets (their Pods stay Pending: there is no kubelet).
# With a node (e2e/node.sh): node lifecycle (lifts the not-ready taint), pod GC, taint
# eviction and EndpointSlices for the Services in front of pods.
# Starting all of them ('*') costs ~6 s more; set E2E_KCM_CONTROLLERS='*' for that.
KCM_CONTROLLERS=garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,deployment-controller,replicaset-controller,node-lifecycle-controller,pod-garbage-collector-controller,taint-eviction-controller,endpointslice-controller
SERVICE_IP=10.0.0.1

set_dir() {
  [[ $1 != *[[:space:]]* ]] || die "DIR must not contain whitespace: '$1'"
  mkdir -p "$1"
  DIR="$(cd "$1" && pwd)"
  PROCS_DIR=$DIR
}

start_components() {
  read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT <<<"$(free_ports 4)"
  local pki="$DIR/pki"
  # Kubeconfigs name the apiserver port, so they are written per attempt.
  kubeconfig "$DIR/kubeconfig" admin
  kubeconfig "$DIR/kube-controller-manager.kubeconfig" kube-controller-manager

  start etcd "$ETCD_BIN" \
    --name=e2e \
    --data-dir="$DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state=new \
    --unsafe-no-fsync \
    --snapshot-count=10000 \
    --quota-backend-bytes=$((1024 * 1024 * 1024)) \
    --log-level=warn
  wait_for etcd "etcd health" etcd_healthy || return

  start kube-apiserver "$APISERVER_BIN" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$pki" \
    --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" \
    --proxy-client-key-file="$pki/front-proxy-client.key" \
    --kubelet-client-certificate="$pki/kubelet-client.crt" \
    --kubelet-client-key="$pki/kubelet-client.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=OwnerReferencesPermissionEnforcement \
    --anonymous-auth=false \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --endpoint-reconciler-type=none \
    --enable-aggregator-routing=true \
    --profiling=false \
    --v=1 \
    ${E2E_APISERVER_ARGS:-}
  wait_for kube-apiserver "kube-apiserver /readyz" apiserver_ready || return

  start kube-controller-manager "$KCM_BIN" \
    --kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --cert-dir="$DIR/kcm-serving" \
    --controllers="${E2E_KCM_CONTROLLERS:-$KCM_CONTROLLERS}" \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --leader-elect=false \
    --profiling=false \
    --v=1
  wait_for kube-controller-manager "kube-controller-manager /healthz" kcm_healthy || return
  # The serviceaccount controller creating `default` proves the controllers run.
  wait_for kube-controller-manager "the default ServiceAccount" default_sa_exists || return
}

cmd_up() {
  need openssl curl base64
  set_dir "$1"
  local start_s=$SECONDS
  if [[ -f "$DIR/pids" ]]; then
    local name pid
    while read -r name pid; do
      kill -0 "$pid" 2>/dev/null && die "a control plane is already running in $DIR ($name, pid $pid); run: $0 down $DIR"
    done <"$DIR/pids"
    rm -f "$DIR/pids"
  fi
  if [[ -n ${E2E_OWNER_PID:-} ]] && ! kill -0 "$E2E_OWNER_PID" 2>/dev/null; then
    die "E2E_OWNER_PID=$E2E_OWNER_PID is not a running process"
  fi
  [[ -x $ETCD_BIN && -x $APISERVER_BIN && -x $KCM_BIN && -x $KUBECTL_BIN ]] || cmd_build >/dev/null

  rm -rf "$DIR/etcd" "$DIR/pki" "$DIR/kcm-serving" "$DIR/env" "$DIR/kubeconfig" "$DIR/bin" "$DIR/logs"
  mkdir -p "$DIR/logs" "$DIR/bin"
  make_pki

  local attempt rc
  # An interrupted `up` stops what it started (through the EXIT trap).
  trap 'exit 130' INT
  trap 'exit 143' TERM
  for attempt in 1 2 3; do
    rc=0
    trap 'stop_all' EXIT
    start_components || rc=$?
    ((rc == 0)) && break
    stop_all
    trap - EXIT
    ((rc == 75)) || die "control plane did not come up (logs in $DIR/logs)"
    say "lost a port to another process; retrying"
    rm -rf "$DIR/etcd"
  done
  ((rc == 0)) || die "control plane did not come up after 3 attempts (logs in $DIR/logs)"

  ln -sf "$KUBECTL_BIN" "$DIR/bin/kubectl"
  cat >"$DIR/env" <<EOF
KUBECONFIG=$DIR/kubeconfig
KUBECTL=$KUBECTL_BIN
E2E_CLUSTER_DIR=$DIR
E2E_APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
E2E_SERVICE_CIDR=$SERVICE_CIDR
E2E_ETCD_URL=http://127.0.0.1:$ETCD_PORT
E2E_K8S_VERSION=$K8S_VERSION
E2E_ETCD_VERSION=$ETCD_VERSION
EOF
  if [[ -n ${E2E_OWNER_PID:-} ]]; then start_watchdog "$E2E_OWNER_PID"; fi
  trap - EXIT INT TERM
  say "control plane up in $((SECONDS - start_s))s: apiserver https://127.0.0.1:$APISERVER_PORT (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION)"
  say "use it with: set -a; . $DIR/env; set +a   (or: kubectl --kubeconfig $DIR/kubeconfig)"
}

# start_watchdog OWNER: stop the control plane when process OWNER exits, so a
# test run that dies without `down` leaves nothing behind.
start_watchdog() {
  local owner="$1"
  kill -0 "$owner" 2>/dev/null || die "E2E_OWNER_PID=$owner is not a running process"
  (
    while kill -0 "$owner" 2>/dev/null && [[ -f "$DIR/pids" ]]; do sleep 1; done
    if [[ -f "$DIR/pids" ]]; then
      say "owner process $owner is gone; stopping the control plane in $DIR"
      stop_all
    fi
    rm -f "$DIR/watchdog.pid"
  ) >>"$DIR/logs/watchdog.log" 2>&1 </dev/null &
  echo $! >"$DIR/watchdog.pid"
}

stop_watchdog() {
  local p
  p="$(cat "$DIR/watchdog.pid" 2>/dev/null || true)"
  if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$DIR/watchdog.pid"
}

cmd_down() {
  [[ -d $1 ]] || { say "$1 does not exist; nothing to stop"; return 0; }
  set_dir "$1"
  stop_watchdog
  stop_all
  rm -rf "$DIR/etcd" "$DIR/pki" "$DIR/kcm-serving" "$DIR/bin" "$DIR/env" \
    "$DIR/kubeconfig" "$DIR/kube-controller-manager.kubeconfig"
  if [[ -z ${KEEP_LOGS:-} ]]; then
    rm -rf "$DIR/logs"
    rmdir "$DIR" 2>/dev/null || true
  fi
  say "control plane in $DIR stopped"
}

# ---------------------------------------------------------------- main

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

main() {
  local sub="${1:-}"; shift || true
  case "$sub" in
    build) cmd_build ;;
    paths) cmd_paths ;;
    free-ports) [[ $# -eq 1 && $1 =~ ^[1-9][0-9]*$ ]] || usage; free_ports "$1" ;;
    up) [[ $# -eq 1 ]] || usage; cmd_up "$1" ;;
    down) [[ $# -eq 1 ]] || usage; cmd_down "$1" ;;
    *) usage ;;
  esac
}

main "$@"
