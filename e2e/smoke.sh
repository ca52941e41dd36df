#!/usr/bin/env bash
# Smoke test of the e2e control plane (e2e/cluster.sh): it comes up, the API
# answers, kube-controller-manager really runs (garbage collector, namespace
# controller), RBAC is enforced, and `down` leaves no process behind.
#
#   e2e/smoke.sh            (set KEEP_CLUSTER_DIR=1 to keep the logs on success)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER="$HERE/cluster.sh"

say() { printf '[smoke %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

# eventually SECONDS WHAT CMD...: retry CMD until it succeeds.
eventually() {
  local limit="$1" what="$2"; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for: $what"
    sleep 0.25
  done
}

"$CLUSTER" build >/dev/null

DIR="$(mktemp -d "${TMPDIR:-/tmp}/mcp-operator-smoke.XXXXXX")"
PIDS=()
finish() {
  local rc=$?
  # Remember the pids before `down` forgets them, to prove they are all gone.
  if [[ -f "$DIR/pids" ]]; then mapfile -t PIDS < <(awk '{print $2}' "$DIR/pids"); fi
  if ((rc != 0)); then
    say "logs kept in $DIR/logs"
    KEEP_LOGS=1 "$CLUSTER" down "$DIR" || true
  elif [[ -n ${KEEP_CLUSTER_DIR:-} ]]; then
    KEEP_LOGS=1 "$CLUSTER" down "$DIR" || rc=1
  else
    "$CLUSTER" down "$DIR" || rc=1
  fi
  local p
  for p in "${PIDS[@]}"; do
    if kill -0 "$p" 2>/dev/null; then say "FAIL: process $p survived down"; rc=1; fi
  done
  ((rc == 0)) && say "PASS"
  exit "$rc"
}
trap finish EXIT

t0=$SECONDS
E2E_OWNER_PID=$$ "$CLUSTER" up "$DIR"
say "up took $((SECONDS - t0))s"
set -a; . "$DIR/env"; set +a
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

# --- the API answers, with the built-in namespaces.
ns="$(k get ns -o name)"
for want in default kube-system kube-public kube-node-lease; do
  grep -qx "namespace/$want" <<<"$ns" || fail "namespace $want missing; got: $ns"
done
k version -o json | grep -q "\"gitVersion\": \"$E2E_K8S_VERSION\"" || fail "server version is not $E2E_K8S_VERSION"
say "API answers: $(tr '\n' ' ' <<<"$ns")"

# --- garbage collector: deleting an owner deletes its dependent.
k create namespace smoke >/dev/null
k -n smoke create configmap owner --from-literal=role=owner >/dev/null
uid="$(k -n smoke get configmap owner -o jsonpath='{.metadata.uid}')"
k -n smoke apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: owner
    uid: $uid
data:
  role: dependent
EOF
k -n smoke get configmap dependent >/dev/null || fail "dependent ConfigMap not created"
k -n smoke delete configmap owner --wait=true >/dev/null
dependent_gone() { ! k -n smoke get configmap dependent >/dev/null 2>&1; }
t0=$SECONDS
eventually 60 "the garbage collector to delete the dependent ConfigMap" dependent_gone
say "garbage collector deleted the dependent in $((SECONDS - t0))s"

# --- RBAC is enforced: a ServiceAccount may do only what it is bound to.
k -n smoke create serviceaccount reader >/dev/null
as=(--as=system:serviceaccount:smoke:reader)
[[ "$(k auth can-i list configmaps -n smoke "${as[@]}" 2>/dev/null || true)" == no ]] \
  || fail "an unbound ServiceAccount may list configmaps"
k -n smoke create role cm-reader --verb=get,list,watch --resource=configmaps >/dev/null
k -n smoke create rolebinding reader --role=cm-reader --serviceaccount=smoke:reader >/dev/null
can_list() { [[ "$(k auth can-i list configmaps -n smoke "${as[@]}")" == yes ]]; }
eventually 10 "RBAC to allow the bound ServiceAccount" can_list
[[ "$(k auth can-i create configmaps -n smoke "${as[@]}" 2>/dev/null || true)" == no ]] \
  || fail "a read-only ServiceAccount may create configmaps"
[[ "$(k auth can-i list configmaps -n default "${as[@]}" 2>/dev/null || true)" == no ]] \
  || fail "a namespaced Role leaks into another namespace"
# A real request, not only a review: impersonated, forbidden, then allowed.
k -n smoke get secrets "${as[@]}" >/dev/null 2>&1 && fail "reader may list secrets"
k -n smoke get configmaps "${as[@]}" >/dev/null || fail "reader may not list configmaps"
say "RBAC enforced"

# --- namespace controller: deleting a namespace empties and removes it.
k delete namespace smoke --wait=false >/dev/null
ns_gone() { ! k get namespace smoke >/dev/null 2>&1; }
t0=$SECONDS
eventually 90 "the namespace controller to remove namespace smoke" ns_gone
say "namespace controller removed namespace smoke in $((SECONDS - t0))s"
