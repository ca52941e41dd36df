#!/usr/bin/env bash
# Runs every test of mcp-operator on a fresh machine: installs the test MCP servers (Python SDK,
# server-everything), builds the Kubernetes control plane, the node (kubelet, kube-scheduler,
# kube-proxy, containerd from Debian), helm and promtool (cached), starts one control plane and
# one node for the whole run, builds the operator image from the release binary, then unit,
# integration and e2e tests (tests/it/e2e_node.rs installs the chart in real pods and runs
# `helm test`), then checks the node leaves nothing behind
# and runs the control-plane smoke test and the fault suite (on a control plane of its own).
# Nothing is left running afterwards. First, whatever in the cache no script of this checkout
# names is set aside (scripts/cache.sh), so a stale file cannot stand in for an install step.
#
# The node needs root; without it the other tests still run and tests/it/e2e_node.rs fails saying why.
#
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh -- probe   # extra arguments go to `cargo test`
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
export MCP_OPERATOR_CACHE="$CACHE"
[[ "${1:-}" == "--" ]] && shift

say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# A stale file in the cache must not stand in for an install step: what no script of this
# checkout names is moved aside first (the build caches are named, and stay).
say "setting aside what no script of this checkout puts in $CACHE"
bash scripts/cache.sh set-aside >&2

say "installing the test MCP servers (cached in $CACHE)"
bash tests/fixtures/install.sh >/dev/null

say "building the control plane, the node, helm, promtool and the OTel collector (cached in $CACHE/bin)"
bash e2e/cluster.sh build >/dev/null
node_unavailable="$(bash e2e/node.sh check)" && node_unavailable="" || true
[[ -n $node_unavailable ]] || bash e2e/node.sh build >/dev/null
bash e2e/helm.sh build >/dev/null
bash e2e/promtool.sh build >/dev/null
bash tests/fixtures/otelcol.sh build >/dev/null
if [[ -z $node_unavailable ]]; then
  say "building the operator image from the release binary"
  OPERATOR_IMAGE="$(mktemp -d "${TMPDIR:-/tmp}/mcp-operator-image.XXXXXX")"
  bash e2e/image.sh operator "$OPERATOR_IMAGE/image.tar" >/dev/null
fi

CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/mcp-operator-test.XXXXXX")"
cleanup() {
  local rc=$?
  [[ -n ${OPERATOR_IMAGE:-} ]] && rm -rf "$OPERATOR_IMAGE"
  if ((rc != 0)); then
    KEEP_LOGS=1 bash e2e/node.sh down "$CLUSTER_DIR" >/dev/null 2>&1 || true
    KEEP_LOGS=1 bash e2e/cluster.sh down "$CLUSTER_DIR" >/dev/null 2>&1 || true
    say "failed; control-plane logs kept in $CLUSTER_DIR/logs"
  else
    bash e2e/node.sh down "$CLUSTER_DIR" >/dev/null 2>&1 || true
    bash e2e/cluster.sh down "$CLUSTER_DIR" >/dev/null 2>&1 || true
    rm -rf "$CLUSTER_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
say "starting the control plane in $CLUSTER_DIR"
E2E_OWNER_PID=$$ bash e2e/cluster.sh up "$CLUSTER_DIR" >/dev/null
export MCP_E2E_KUBECONFIG="$CLUSTER_DIR/kubeconfig"

if [[ -z $node_unavailable ]]; then
  say "starting the node (kubelet, containerd) for the control plane"
  if node_log="$(E2E_OWNER_PID=$$ bash e2e/node.sh up "$CLUSTER_DIR" 2>&1)"; then
    say "${node_log##*] }"
    bash e2e/node.sh import "$CLUSTER_DIR" "$OPERATOR_IMAGE/image.tar"
    export MCP_E2E_OPERATOR_IMAGE="$OPERATOR_IMAGE/image.tar"
  else
    node_unavailable="e2e/node.sh up failed: $(tail -n 15 <<<"$node_log")"
  fi
fi
if [[ -n $node_unavailable ]]; then
  export MCP_E2E_NODE_UNAVAILABLE="$node_unavailable"
  say "no node, so no real pods (tests/it/e2e_node.rs will fail): $node_unavailable"
fi

say "cargo test (unit, integration against real MCP servers, e2e against the control plane)"
cargo test --all-targets --no-fail-fast "$@"

if [[ -z $node_unavailable ]]; then
  say "the node's down leaves nothing behind"
  # Only this run's slot: a crashed run of another checkout may have left its own.
  node_slot="$(cat "$CLUSTER_DIR/node/slot")"
  bash e2e/node.sh down "$CLUSTER_DIR" >/dev/null
  bash e2e/node.sh leftovers "$CLUSTER_DIR" "$node_slot" || { say "FAIL: e2e/node.sh down left the above"; exit 1; }
fi

say "control-plane smoke test"
bash e2e/smoke.sh

say "fault suite (leader killed and paused, apiserver and etcd paused, restarts during a burst)"
bash e2e/faults.sh
