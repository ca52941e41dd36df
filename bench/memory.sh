#!/usr/bin/env bash
# Benchmark: the controller's memory (issue 9, item 10; issue 24). Two parts, each with a fresh
# controller (release build) whose peak RSS (VmHWM, from /proc) is printed:
#   fleet: SERVERS McpServers (default 1000; 0 skips the part) on bench/controller.sh's fixtures
#     (one in ten on an official-SDK server that pushes tools/list_changed, the rest on a
#     50-tool, 2-page listing), applied before the controller starts: how long after its start
#     all are Ready, its peak RSS then, its RSS once idle (IDLE seconds later, default 10) and
#     its CPU seconds until then (and per server).
#   big: N McpServers (default 20; 0 skips the part) with spec.discovery.maxResponseBytes at its
#     64 MiB maximum, all on the hostile fixture's bulk mode answering one page of about SIZE
#     bytes (default 60 MB), applied at once. For each --response-budget in BUDGETS (bytes;
#     default: the controller's default, then 1099511627776 = effectively none): how many went
#     Ready, how long that took, the peak RSS and the budget's own high-water mark.
# CONTROLLER_ARGS adds flags to every controller. Prints figures; asserts nothing.
#   bash bench/memory.sh
#   SERVERS=300 N=0 bash bench/memory.sh
#   SERVERS=0 N=20 SIZE=60000000 BUDGETS="134217728 1099511627776" BENCH_PROFILE=debug bash bench/memory.sh
set -euo pipefail
SERVERS=${SERVERS:-1000}
IDLE=${IDLE:-10}
N=${N:-20}
SIZE=${SIZE:-60000000}
BUDGETS=${BUDGETS:-"134217728 1099511627776"}
LIMIT=${LIMIT:-900}
EXTRA_ARGS=${CONTROLLER_ARGS:-}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

ready_count() { k get mcps -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true; }
all_ready() { [ "$(ready_count "$1")" -ge "$2" ]; }
metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
rss_mib() { awk '/VmRSS/{printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

start_fleet_fixtures
if (( SERVERS > 0 )); then
  NS=fleet
  k create namespace "$NS" >/dev/null
  fleet_yaml "$SERVERS" 0 "$NS" >"$DIR/fleet.yaml"
  k apply -f "$DIR/fleet.yaml" >/dev/null
  t0=$(date +%s.%N)
  CONTROLLER_ARGS="--watch-namespace=$NS $EXTRA_ARGS" start_controller
  eventually "$LIMIT" "$SERVERS McpServers in $NS to be Ready" all_ready "$NS" "$SERVERS"
  t1=$(date +%s.%N)
  peak=$(peak_rss_mib "$CTL"); cpu=$(cpu_seconds "$CTL")
  sleep "$IDLE"
  printf '%d McpServers, controller started after them: all Ready %.1f s after its start; controller peak RSS %s MiB (VmHWM; goal: at most 100 MB = 95 MiB), %s MiB %s s later; CPU %.1f s (%.1f ms per server); threads %s\n' \
    "$SERVERS" "$(echo "$t1 - $t0" | bc)" "$peak" "$(rss_mib "$CTL")" "$IDLE" "$cpu" "$(echo "$cpu * 1000 / $SERVERS" | bc -l)" \
    "$(awk '/Threads/{print $2}' "/proc/$CTL/status")"
  stop_controller
  k delete namespace "$NS" --wait=false >/dev/null
fi

(( N > 0 )) || exit 0
BIG="${BULK%%\?*}?tools=20&pages=1&schema_bytes=$SIZE"
# Render the page once before the clock starts (the fixture caches it).
curl -s -o /dev/null -X POST -H 'content-type: application/json' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}' "$BIG"

run=0
for BUDGET in $BUDGETS; do
  run=$((run + 1))
  NS="memory-$run"
  k create namespace "$NS" >/dev/null
  CONTROLLER_ARGS="--response-budget=$BUDGET --watch-namespace=$NS $EXTRA_ARGS" start_controller
  {
    for i in $(seq 1 "$N"); do
      printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: big%03d, namespace: %s}\nspec: {url: "%s", discovery: {maxResponseBytes: 67108864}, timeouts: {connect: 2m}}\n' "$i" "$NS" "$BIG"
    done
  } >"$DIR/servers-$run.yaml"
  t0=$(date +%s.%N)
  k apply -f "$DIR/servers-$run.yaml" >/dev/null
  eventually "$LIMIT" "$N McpServers in $NS to be Ready" all_ready "$NS" "$N"
  t1=$(date +%s.%N)
  rss=$(peak_rss_mib "$CTL")
  high=$(metric mcp_operator_response_budget_high_water_bytes)
  printf '%d McpServers answering %d bytes, --response-budget=%d: all Ready %.1f s after apply; controller peak RSS %s MiB; budget high water %.0f MiB\n' \
    "$N" "$SIZE" "$BUDGET" "$(echo "$t1 - $t0" | bc)" "$rss" "$(echo "${high:-0} / 1048576" | bc -l)"
  stop_controller
  k delete namespace "$NS" --wait=false >/dev/null
done
