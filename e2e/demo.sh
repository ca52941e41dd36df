#!/usr/bin/env bash
# The demo: a real local control plane with mcp-operator running against it.
#
#   e2e/demo.sh [DIR]          build what is needed, start the control plane, install the CRDs,
#                              start the example MCP servers and the controller, apply examples/,
#                              wait, print `kubectl get mcp -A` and the resulting status, run
#                              an agent through the sidecar on the published grants, then
#                              stop everything
#   e2e/demo.sh --keep [DIR]   the same, but leave it all running and print how to reach it
#   e2e/demo.sh down [DIR]     stop a kept demo
#
# DIR defaults to ${MCP_OPERATOR_CACHE:-~/.cache/mcp-operator}/demo. Needs: cargo (or
# MCP_OPERATOR_BIN=path/to/mcp-operator), and what e2e/cluster.sh needs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CLUSTER="$HERE/cluster.sh"

SAY_TAG=demo
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

# demo_fixture NAME DIR PORT ARGS...: an sdk_server.py on 127.0.0.1:PORT in the background
# (recorded in DIR/demo.pids); returns once it printed its READY line, dies loudly otherwise.
demo_fixture() {
  local name="$1" dir="$2" port="$3" url; shift 3
  start_fixture url "$dir/logs/$name.log" \
    "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_SDK_SERVER" --port "$port" "$@" </dev/null
  echo "$name ${FIXTURE_PIDS[-1]}" >>"$dir/demo.pids"
  say "$name: $url"
}

demo_up() {
  local dir="$1"
  "$CLUSTER" build >/dev/null
  "$CLUSTER" up "$dir"
  dir="$(cd "$dir" && pwd)"
  # Whatever fails from here on: stop what was started.
  trap 'rc=$?; if ((rc != 0)); then say "failed; stopping what was started"; for p in ${FIXTURE_PIDS[@]+"${FIXTURE_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done; demo_down "$dir"; fi' EXIT
  set -a; . "$dir/env"; set +a
  k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

  local op="${MCP_OPERATOR_BIN:-}"
  if [[ -z $op ]]; then
    say "building mcp-operator"
    (cd "$ROOT" && cargo build --quiet --bin mcp-operator)
    op="$ROOT/target/debug/mcp-operator"
  fi

  say "installing the CRDs"
  "$op" crds | k apply -f -
  k wait --for=condition=Established crd --all --timeout=60s >/dev/null

  # The examples' local McpServers: the official-SDK fixture server on the
  # fixed ports examples/ names (18080 open, 18081 with a bearer token).
  if [[ -x "$ROOT/tests/fixtures/install.sh" ]]; then
    say "starting the example MCP servers on 127.0.0.1:18080 and :18081"
    eval "$("$ROOT/tests/fixtures/install.sh")"
    demo_fixture files "$dir" 18080
    demo_fixture files-admin "$dir" 18081 --bearer demo-token
  fi

  local metrics
  metrics="$("$CLUSTER" free-ports 1)"
  say "starting the controller (metrics on 127.0.0.1:$metrics, log: $dir/logs/mcp-operator.log)"
  KUBECONFIG="$KUBECONFIG" "$op" controller --allow-loopback --metrics-addr "127.0.0.1:$metrics" \
    >>"$dir/logs/mcp-operator.log" 2>&1 </dev/null &
  echo "mcp-operator $!" >>"$dir/demo.pids"

  if [[ -d "$ROOT/examples" ]]; then
    say "applying examples/"
    k apply -R -f "$ROOT/examples"
  fi

  say "waiting for every McpServer to report Ready (True or False)"
  local deadline=$((SECONDS + 90)) pending
  while :; do
    pending=$(k get mcpservers -A -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '=$' || true)
    ((pending == 0)) && break
    ((SECONDS < deadline)) || { say "$pending McpServer(s) still without a Ready condition after 90s"; break; }
    sleep 1
  done

  echo
  echo "\$ kubectl get mcp -A"
  k get mcp -A
  echo
  echo "\$ kubectl get mcpservers -A   (the Ready condition's message)"
  k get mcpservers -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,REASON:.status.conditions[?(@.type=="Ready")].reason,MESSAGE:.status.conditions[?(@.type=="Ready")].message'
  echo
  echo "\$ kubectl get mcpserver files -n mcp-demo -o jsonpath='{.status.catalog.tools[*].name}'"
  k get mcpserver files -n mcp-demo -o jsonpath='{.status.catalog.tools[*].name}{"\n"}'
  echo
  echo "\$ kubectl describe mcpserver files-admin -n mcp-demo   (conditions and events)"
  k describe mcpserver files-admin -n mcp-demo | sed -n '/^  Conditions:/,$p'
  if k get agentspecs -n mcp-demo >/dev/null 2>&1; then
    echo
    echo "\$ kubectl get configmap research-assistant-mcp-grants -n mcp-demo -o jsonpath='{.data.grants\.json}'"
    k get configmap research-assistant-mcp-grants -n mcp-demo -o jsonpath='{.data.grants\.json}{"\n"}' 2>/dev/null || echo "(not published)"
    agent_through_sidecar "$dir" "$op"
  fi

  trap - EXIT
  if ((KEEP)); then
    cat >&2 <<MSG

The demo keeps running. Reach the cluster with:

  export KUBECONFIG=$KUBECONFIG PATH=$dir/bin:\$PATH
  kubectl get mcp -A
  kubectl --kubeconfig $KUBECONFIG get crd
  tail -f $dir/logs/mcp-operator.log

Stop it with: $0 down $dir
MSG
  else
    say "stopping everything (run with --keep to leave it running)"
    demo_down "$dir" >/dev/null 2>&1
  fi
}

# agent_through_sidecar DIR BIN: the agent's side. Lays the grants ConfigMap and the Secret it
# names out as the kubelet mounts them (a timestamped directory behind a `..data` symlink), runs
# `mcp-operator sidecar` on them, and lets an agent built on the official Python SDK client list
# its tools through the sidecar, call a granted one, and try one that is not granted.
agent_through_sidecar() {
  local dir="$1" op="$2" grants="$1/agent/grants" creds="$1/agent/credentials" port mport
  [[ -n ${MCP_FIXTURES_PYTHON:-} ]] || return 0
  local published=$((SECONDS + 30))
  until k get configmap research-assistant-mcp-grants -n mcp-demo >/dev/null 2>&1; do
    ((SECONDS < published)) || { say "no grants published after 30s: no agent to run"; return 0; }
    sleep 0.5
  done
  rm -rf "$dir/agent"
  mkdir -p "$grants/..demo" "$creds/secrets/files-admin-token"
  k get configmap research-assistant-mcp-grants -n mcp-demo -o jsonpath='{.data.grants\.json}' \
    >"$grants/..demo/grants.json"
  ln -s ..demo "$grants/..data"
  ln -s ..data/grants.json "$grants/grants.json"
  k get secret files-admin-token -n mcp-demo -o jsonpath='{.data.token}' | base64 -d \
    >"$creds/secrets/files-admin-token/token"
  read -r port mport <<<"$("$CLUSTER" free-ports 2)"
  say "starting the agent's sidecar on http://127.0.0.1:$port/mcp (log: $dir/logs/sidecar.log)"
  "$op" sidecar --grants-file "$grants/grants.json" --credentials-dir "$creds" \
    --listen "127.0.0.1:$port" --metrics-addr "127.0.0.1:$mport" --agent research-assistant \
    --allow-loopback >>"$dir/logs/sidecar.log" 2>&1 </dev/null &
  echo "sidecar $!" >>"$dir/demo.pids"
  local deadline=$((SECONDS + 30))
  until curl -sf "http://127.0.0.1:$mport/readyz" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      say "the sidecar is not ready after 30s: $(curl -s "http://127.0.0.1:$mport/readyz")"
      return 0
    fi
    sleep 0.2
  done
  echo
  echo "\$ an agent (official Python SDK client) through the sidecar: list, call files__read_file, call files__write_file (not granted), call admin__put_object (needs approval: the agent's client is asked, and its person says yes)"
  "$MCP_FIXTURES_PYTHON" "$ROOT/tests/fixtures/sdk_client.py" "http://127.0.0.1:$port/mcp" auto \
    '[{"op": "list"},
      {"op": "call", "name": "files__read_file", "arguments": {"path": "/demo.txt"}},
      {"op": "call", "name": "files__write_file", "arguments": {"path": "/demo.txt", "content": "x"}},
      {"op": "call", "name": "admin__put_object", "arguments": {"key": "demo", "body": "x"}}]' '["accept"]' |
    "$MCP_FIXTURES_PYTHON" -c '
import json, sys
out = json.loads(sys.stdin.read())
listed, granted, refused, approved = out["steps"]
print("tools the agent sees:", " ".join(listed["names"]))
print("files__read_file  ->", "error" if granted.get("isError") else "ok", "|", (granted.get("text") or "")[:100])
print("files__write_file ->", json.dumps(refused)[:200])
for asked in out["elicitations"]:
    print("the agent was asked:", asked["message"].splitlines()[0][:160])
print("admin__put_object ->", "error" if approved.get("isError") else "ok (approved)", "|", (approved.get("text") or "")[:100])'
  echo "(the sidecar's audit lines: grep audit $dir/logs/sidecar.log)"
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
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; }
KEEP=0
case "${1:-}" in
  down) demo_down "${2:-$DEFAULT_DIR}" ;;
  --keep) KEEP=1; demo_up "${2:-$DEFAULT_DIR}" ;;
  -h|--help) usage ;;
  -*) usage; exit 2 ;;
  *) demo_up "${1:-$DEFAULT_DIR}" ;;
esac
