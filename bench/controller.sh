#!/usr/bin/env bash
# Benchmark: the McpServer controller (release build) on a real local control plane against real
# local MCP servers. For each size N (default "100 1000"): apply N McpServers, time until all are
# Ready, count writes per server from the controller's own metrics, then watch an idle window and
# report its writes (the expectation is zero). Prints figures; asserts nothing about time.
# With HOSTILE=P (a multiple of 10, at most 80), P % of the servers are hostile — hanging,
# streaming events forever, answering 20 MB, in turn — and the figure is how long the healthy
# ones take to be Ready beside them (issue 9: hostile servers must not starve healthy ones).
#   bash bench/controller.sh            # sizes 100 and 1000
#   SIZES="100" IDLE=60 bash bench/controller.sh
#   SIZES="100 1000" HOSTILE=30 IDLE=0 bash bench/controller.sh
set -euo pipefail
SIZES=${SIZES:-"100 1000"}
IDLE=${IDLE:-60}
HOSTILE=${HOSTILE:-0}
(( HOSTILE % 10 == 0 && HOSTILE <= 80 )) || { echo "HOSTILE must be a multiple of 10, at most 80" >&2; exit 2; }
LIMIT=${LIMIT:-900}   # longest wait for a size's McpServers to become Ready, in seconds
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# Four official-SDK servers (modern era, they push tools/list_changed, so each McpServer on them
# also holds a subscription) and the hostile fixture's bulk mode (legacy era, 50 tools, 2 pages).
SDK=()
for i in 1 2 3 4; do
  start_fixture url "$DIR/sdk$i.out" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_SDK_SERVER" --port 0 --tools 20 --page-size 10
  SDK+=("$url")
done
start_fixture url "$DIR/bulk.out" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_HOSTILE_SERVER" --port 0
BULK="$url/bulk/mcp?tools=50&pages=2"
HOSTILE_URLS=("$url/hang/mcp" "$url/sse-endless/mcp" "$url/huge/mcp")

start_controller

writes() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^mcp_operator_writes_total/{s+=$2} END{print s+0}'; }
ready_count() { k get mcps -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true; }
all_ready() { [ "$(ready_count "$1")" -ge "$2" ]; }
versions() { k get mcps,configmaps -n "$1" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}' | sort; }

for N in $SIZES; do
  NS="bench-$N"
  k create namespace "$NS" >/dev/null
  {
    for i in $(seq 1 "$N"); do
      if (( i % 10 == 0 )); then url=${SDK[$(( (i / 10) % 4 ))]}
      elif (( i % 10 <= HOSTILE / 10 )); then url=${HOSTILE_URLS[$(( i % 3 ))]}
      else url=$BULK; fi
      printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: s%05d, namespace: %s}\nspec: {url: "%s"}\n' "$i" "$NS" "$url"
    done
  } >"$DIR/servers-$N.yaml"
  w0=$(writes)
  t0=$(date +%s.%N)
  k apply -f "$DIR/servers-$N.yaml" >/dev/null
  t_applied=$(date +%s.%N)
  healthy=$(( N - N * HOSTILE / 100 ))
  eventually "$LIMIT" "$healthy McpServers in $NS to be Ready" all_ready "$NS" "$healthy"
  t1=$(date +%s.%N)
  w1=$(writes)
  sleep 5   # let the last writes land before the idle window starts
  before=$(versions "$NS"); wi0=$(writes)
  sleep "$IDLE"
  after=$(versions "$NS"); wi1=$(writes)
  changed=$(diff <(echo "$before") <(echo "$after") | grep -c '^>' || true)
  rss=$(awk '/VmHWM/{print $2/1024}' "/proc/$CTL/status")
  (( HOSTILE > 0 )) && printf '%5d McpServers, %d of them hostile: the %d healthy ones Ready %.1f s after apply\n' \
    "$N" "$(( N - healthy ))" "$healthy" "$(echo "$t1 - $t0" | bc)"
  printf '%5d McpServers: all healthy Ready %.1f s after apply (kubectl apply took %.1f s); %.2f writes per server; idle %ss: %d writes, %d resourceVersions changed; controller peak RSS %.0f MiB\n' \
    "$N" "$(echo "$t1 - $t0" | bc)" "$(echo "$t_applied - $t0" | bc)" "$(echo "($w1 - $w0) / $N" | bc -l)" \
    "$IDLE" "$(( wi1 - wi0 ))" "$changed" "$rss"
done
echo "open subscriptions: $(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^mcp_operator_subscriptions_open /{print $2}')"
