#!/usr/bin/env bash
# Benchmark: the controller's memory at the documented maxima (issue 9, item 10). N McpServers
# (default 20) with spec.discovery.maxResponseBytes at its 64 MiB maximum, all on the hostile
# fixture's bulk mode answering one page of about SIZE bytes (default 60 MB), applied at once.
# For each --response-budget in BUDGETS (bytes; default: the controller's default, then
# 1099511627776 = effectively none) a fresh controller reads them all; the script prints how
# many went Ready, how long that took, the controller's peak RSS (VmHWM) and the budget's own
# high-water mark. Prints figures; asserts nothing.
#   bash bench/memory.sh
#   N=20 SIZE=60000000 BUDGETS="134217728 1099511627776" BENCH_PROFILE=debug bash bench/memory.sh
set -euo pipefail
N=${N:-20}
SIZE=${SIZE:-60000000}
BUDGETS=${BUDGETS:-"134217728 1099511627776"}
LIMIT=${LIMIT:-600}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

start_fixture url "$DIR/bulk.out" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_HOSTILE_SERVER" --port 0
BIG="$url/bulk/mcp?tools=20&pages=1&schema_bytes=$SIZE"
# Render the page once before the clock starts (the fixture caches it).
curl -s -o /dev/null -X POST -H 'content-type: application/json' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}' "$BIG"

ready_count() { k get mcps -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true; }
all_ready() { [ "$(ready_count "$1")" -ge "$2" ]; }
metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

run=0
for BUDGET in $BUDGETS; do
  run=$((run + 1))
  NS="memory-$run"
  k create namespace "$NS" >/dev/null
  CONTROLLER_ARGS="--response-budget=$BUDGET --watch-namespace=$NS" start_controller
  {
    for i in $(seq 1 "$N"); do
      printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: big%03d, namespace: %s}\nspec: {url: "%s", discovery: {maxResponseBytes: 67108864}, timeouts: {connect: 2m}}\n' "$i" "$NS" "$BIG"
    done
  } >"$DIR/servers-$run.yaml"
  t0=$(date +%s.%N)
  k apply -f "$DIR/servers-$run.yaml" >/dev/null
  eventually "$LIMIT" "$N McpServers in $NS to be Ready" all_ready "$NS" "$N"
  t1=$(date +%s.%N)
  rss=$(awk '/VmHWM/{print $2/1024}' "/proc/$CTL/status")
  high=$(metric mcp_operator_response_budget_high_water_bytes)
  printf '%d McpServers answering %d bytes, --response-budget=%d: all Ready %.1f s after apply; controller peak RSS %.0f MiB; budget high water %.0f MiB\n' \
    "$N" "$SIZE" "$BUDGET" "$(echo "$t1 - $t0" | bc)" "$rss" "$(echo "${high:-0} / 1048576" | bc -l)"
  kill "$CTL"; wait "$CTL" 2>/dev/null || true
  k delete namespace "$NS" --wait=false >/dev/null
done
