#!/usr/bin/env bash
# Benchmark: the McpServer controller (release build) on a real local control plane against real
# local MCP servers. For each size N (default "100 1000"), two runs (RUNS, default "start apply"):
#   start: N McpServers applied with no controller running, then the controller started (watching
#     only their namespace): the time until all are Ready, the CPU seconds the controller, the
#     MCP fixtures, the apiserver and etcd spent on it (from /proc), the controller's writes per
#     server and peak RSS (VmHWM); the controller is then stopped and the floor runs: the same
#     writes, of the same size (each server's status, each ConfigMap it wrote), sent by
#     bench/floor.py from as many clients as the controller's --concurrency (32) into a copy of
#     the namespace; both printed side by side with their ratio.
#   apply: with a controller running, apply N McpServers, time until all are Ready, count writes
#     per server from the controller's own metrics, then watch an idle window and report its
#     writes (the expectation is zero).
# Prints figures; asserts nothing about time.
# With HOSTILE=P (a multiple of 10, at most 80), each size runs twice against the same
# controller: first with every server healthy, then with P % of them hostile — hanging,
# streaming events forever, answering 20 MB, in turn — and the figures are how long the healthy
# ones take to be Ready in each, and their ratio (issue 9: hostile servers must not starve
# healthy ones; the goal is a ratio of at most 2). The clean run comes first, so the hostile
# servers' retries cannot slow it down.
#   bash bench/controller.sh            # sizes 100 and 1000
#   SIZES="100" IDLE=60 bash bench/controller.sh
#   SIZES="100 1000" HOSTILE=30 IDLE=0 bash bench/controller.sh
#   SIZES=1000 RUNS=start bash bench/controller.sh
set -euo pipefail
SIZES=${SIZES:-"100 1000"}
RUNS=${RUNS:-"start apply"}
CLIENTS=32   # the controller's default --concurrency
IDLE=${IDLE:-60}
HOSTILE=${HOSTILE:-0}
(( HOSTILE % 10 == 0 && HOSTILE <= 80 )) || { echo "HOSTILE must be a multiple of 10, at most 80" >&2; exit 2; }
LIMIT=${LIMIT:-900}   # longest wait for a size's McpServers to become Ready, in seconds
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

start_fleet_fixtures

writes() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^mcp_operator_writes_total/{s+=$2} END{print s+0}'; }
ready_count() { k get mcps -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true; }
all_ready() { [ "$(ready_count "$1")" -ge "$2" ]; }
versions() { k get mcps,configmaps -n "$1" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}' | sort; }

# One size: N McpServers in a fresh namespace, P % of them hostile; prints its figures and
# leaves the healthy ones' Ready time in $READY_SECONDS.
run_size() {
  local N=$1 P=$2 NS="bench-$1-$2"
  k create namespace "$NS" >/dev/null
  fleet_yaml "$N" "$P" "$NS" >"$DIR/servers-$NS.yaml"
  w0=$(writes)
  t0=$(date +%s.%N)
  k apply -f "$DIR/servers-$NS.yaml" >/dev/null
  t_applied=$(date +%s.%N)
  healthy=$(( N - N * P / 100 ))
  eventually "$LIMIT" "$healthy McpServers in $NS to be Ready" all_ready "$NS" "$healthy"
  t1=$(date +%s.%N)
  w1=$(writes)
  READY_SECONDS=$(echo "$t1 - $t0" | bc)
  AFTER_APPLY=$(echo "$t1 - $t_applied" | bc)
  sleep 5   # let the last writes land before the idle window starts
  before=$(versions "$NS"); wi0=$(writes)
  sleep "$IDLE"
  after=$(versions "$NS"); wi1=$(writes)
  changed=$(diff <(echo "$before") <(echo "$after") | grep -c '^>' || true)
  rss=$(peak_rss_mib "$CTL")
  (( P > 0 )) && printf '%5d McpServers, %d of them hostile: the %d healthy ones Ready %.1f s after apply\n' \
    "$N" "$(( N - healthy ))" "$healthy" "$READY_SECONDS"
  printf '%5d McpServers: all healthy Ready %.1f s after apply (kubectl apply took %.1f s); %.2f writes per server; idle %ss: %d writes, %d resourceVersions changed; controller peak RSS %.0f MiB\n' \
    "$N" "$READY_SECONDS" "$(echo "$t_applied - $t0" | bc)" "$(echo "($w1 - $w0) / $N" | bc -l)" \
    "$IDLE" "$(( wi1 - wi0 ))" "$changed" "$rss"
  return 0
}

# One size, the controller started after the McpServers exist, then the floor of its writes.
start_run() {
  local N=$1 NS="start-$1" FNS="floor-$1"
  k create namespace "$NS" >/dev/null
  fleet_yaml "$N" 0 "$NS" >"$DIR/servers-$NS.yaml"
  k apply -f "$DIR/servers-$NS.yaml" >/dev/null
  local f0 a0 e0 t0 t1
  f0=$(cpu_seconds "${FIXTURE_PIDS[@]}"); a0=$(cpu_seconds "$APISERVER_PID"); e0=$(cpu_seconds "$ETCD_PID")
  t0=$(date +%s.%N)
  CONTROLLER_ARGS="--watch-namespace=$NS" start_controller
  eventually "$LIMIT" "$N McpServers in $NS to be Ready" all_ready "$NS" "$N"
  t1=$(date +%s.%N)
  local ready ctl fix api etcd w rss
  ready=$(echo "$t1 - $t0" | bc)
  ctl=$(cpu_seconds "$CTL"); fix=$(echo "$(cpu_seconds "${FIXTURE_PIDS[@]}") - $f0" | bc)
  api=$(echo "$(cpu_seconds "$APISERVER_PID") - $a0" | bc); etcd=$(echo "$(cpu_seconds "$ETCD_PID") - $e0" | bc)
  w=$(writes); rss=$(peak_rss_mib "$CTL")
  sleep 2   # the last writes land
  jq -s '{items: (map(.items) | add)}' \
    <(k get mcps -n "$NS" -o json) \
    <(k get configmaps -n "$NS" -l app.kubernetes.io/managed-by=mcp-operator -o json) >"$DIR/written-$NS.json"
  stop_controller
  printf '%5d McpServers, controller started after them: all Ready %.1f s after its start; %.2f writes per server; CPU: controller %.1f s (%.1f ms per server), MCP fixtures %.1f s, apiserver %.1f s, etcd %.1f s; controller peak RSS %s MiB\n' \
    "$N" "$ready" "$(echo "$w / $N" | bc -l)" "$ctl" "$(echo "$ctl * 1000 / $N" | bc -l)" "$fix" "$api" "$etcd" "$rss"
  k create namespace "$FNS" >/dev/null
  sed "s/namespace: $NS}/namespace: $FNS}/" "$DIR/servers-$NS.yaml" | k apply -f - >/dev/null
  floor copy "$CLIENTS" "$DIR/written-$NS.json" "$FNS"
  printf '%5d McpServers: Ready after the controller started in %.1f s against a floor of %.1f s for the same %d writes: %.1f x the floor (goal: at most 5 x)\n' \
    "$N" "$ready" "$FLOOR_SECONDS" "$(jq '.items | length' "$DIR/written-$NS.json")" "$(echo "$ready / $FLOOR_SECONDS" | bc -l)"
}

probes() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

for N in $SIZES; do
  case " $RUNS " in *" start "*) start_run "$N" ;; esac
done
case " $RUNS " in *" apply "*) ;; *) exit 0 ;; esac
start_controller
for N in $SIZES; do
  if (( HOSTILE == 0 )); then run_size "$N" 0; continue; fi
  run_size "$N" 0
  clean=$READY_SECONDS clean_after=$AFTER_APPLY
  run_size "$N" "$HOSTILE"
  hostile=$READY_SECONDS hostile_after=$AFTER_APPLY
  printf '%5d McpServers: healthy ones Ready in %.1f s with %d %% hostile, %.1f s without: %.2f x (goal: at most 2 x); after kubectl apply returned: %.1f s and %.1f s; probes running now %s, waiting %s; Timeout probes so far %s\n' \
    "$N" "$hostile" "$HOSTILE" "$clean" "$(echo "$hostile / $clean" | bc -l)" "$hostile_after" "$clean_after" \
    "$(probes mcp_operator_probes_running)" "$(probes mcp_operator_probes_waiting)" \
    "$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^mcp_operator_probes_total\{reason="Timeout"\}/{print $2}')"
done
echo "open subscriptions: $(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^mcp_operator_subscriptions_open /{print $2}')"
