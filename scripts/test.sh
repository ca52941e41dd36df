#!/usr/bin/env bash
# Runs every test of mcp-operator on a fresh machine: installs the test MCP servers (Python SDK,
# server-everything), builds the Kubernetes control plane and helm from Go modules (cached), starts one
# control plane for the whole run, then unit, integration and e2e tests, then the control-plane
# smoke test and the fault suite (on a control plane of its own). Nothing is left running afterwards.
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

say "installing the test MCP servers (cached in $CACHE)"
bash tests/fixtures/install.sh >/dev/null

say "building the control plane and helm (cached in $CACHE/bin)"
bash e2e/cluster.sh build >/dev/null
bash e2e/helm.sh build >/dev/null

CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/mcp-operator-test.XXXXXX")"
cleanup() {
  local rc=$?
  if ((rc != 0)); then
    KEEP_LOGS=1 bash e2e/cluster.sh down "$CLUSTER_DIR" >/dev/null 2>&1 || true
    say "failed; control-plane logs kept in $CLUSTER_DIR/logs"
  else
    bash e2e/cluster.sh down "$CLUSTER_DIR" >/dev/null 2>&1 || true
    rm -rf "$CLUSTER_DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT
say "starting the control plane in $CLUSTER_DIR"
E2E_OWNER_PID=$$ bash e2e/cluster.sh up "$CLUSTER_DIR" >/dev/null
export MCP_E2E_KUBECONFIG="$CLUSTER_DIR/kubeconfig"

say "cargo test (unit, integration against real MCP servers, e2e against the control plane)"
cargo test --all-targets --no-fail-fast "$@"

say "control-plane smoke test"
bash e2e/smoke.sh

say "fault suite (leader killed and paused, apiserver and etcd paused, restarts during a burst)"
bash e2e/faults.sh
