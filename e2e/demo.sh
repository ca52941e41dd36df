#!/usr/bin/env bash
# The demo: a real local control plane with mcp-operator running against it.
#
#   e2e/demo.sh up [DIR]     start the control plane, install the CRDs, start the
#                            controller, apply examples/; prints how to look around
#   e2e/demo.sh down [DIR]   stop everything the demo started
#
# DIR defaults to ${MCP_OPERATOR_CACHE:-~/.cache/mcp-operator}/demo. Needs: cargo, and what e2e/cluster.sh needs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CLUSTER="$HERE/cluster.sh"

say() { printf '[demo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

demo_up() {
  local dir="$1"
  "$CLUSTER" build >/dev/null
  "$CLUSTER" up "$dir"
  dir="$(cd "$dir" && pwd)"
  set -a; . "$dir/env"; set +a
  k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

  say "building mcp-operator"
  (cd "$ROOT" && cargo build --quiet --bin mcp-operator)
  local op="$ROOT/target/debug/mcp-operator"

  say "installing the CRDs"
  "$op" crds | k apply -f -
  k wait --for=condition=Established crd --all --timeout=60s >/dev/null

  say "starting the controller (log: $dir/logs/mcp-operator.log)"
  KUBECONFIG="$KUBECONFIG" "$op" controller >>"$dir/logs/mcp-operator.log" 2>&1 </dev/null &
  echo "mcp-operator $!" >>"$dir/demo.pids"

  if [[ -d "$ROOT/examples" ]]; then
    say "applying examples/"
    k apply -R -f "$ROOT/examples"
  fi

  cat >&2 <<EOF

The demo is running. Look around with:

  export KUBECONFIG=$KUBECONFIG PATH=$dir/bin:\$PATH
  kubectl get mcpservers,agentspecs -A
  kubectl get mcptenantpolicies
  tail -f $dir/logs/mcp-operator.log

Stop it with: $0 down $dir
EOF
}

demo_down() {
  local dir="$1" name pid
  if [[ -f "$dir/demo.pids" ]]; then
    while read -r name pid; do
      kill -TERM "$pid" 2>/dev/null || true
      local deadline=$((SECONDS + 15))
      while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    done <"$dir/demo.pids"
    rm -f "$dir/demo.pids"
  fi
  "$CLUSTER" down "$dir"
}

DEFAULT_DIR="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}/demo"
case "${1:-}" in
  up) demo_up "${2:-$DEFAULT_DIR}" ;;
  down) demo_down "${2:-$DEFAULT_DIR}" ;;
  *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
