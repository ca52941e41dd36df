# Shared by the bench/*.sh scripts (sourced, not run): installs the fixtures, builds the control
# plane and the release binary, starts a control plane with the CRDs in a temp dir that is
# cleaned up on exit, and offers `k` (kubectl), `start_fixture` and `start_controller`, plus
# say/die/eventually from scripts/lib.sh.
#   After sourcing: $ROOT $BIN $DIR $KUBECONFIG $KUBECTL, the arrays PIDS and FIXTURE_PIDS
#   (killed on exit).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"

bash tests/fixtures/install.sh >/dev/null
# shellcheck disable=SC1091
. tests/fixtures/installed.env
bash e2e/cluster.sh build >/dev/null
# BENCH_BIN: a binary built earlier (e.g. of another commit), instead of building one;
# BENCH_PROFILE=debug measures the debug build (memory figures hold; times do not).
BENCH_PROFILE=${BENCH_PROFILE:-release}
if [ -n "${BENCH_BIN:-}" ]; then
  BIN=$BENCH_BIN
elif [ "$BENCH_PROFILE" = debug ]; then
  cargo build --quiet
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/mcp-operator
else
  cargo build --release --quiet
  BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-operator
fi

DIR=$(mktemp -d "${TMPDIR:-/tmp}/mcp-bench.XXXXXX")
PIDS=()
bench_cleanup() {
  for p in ${PIDS[@]+"${PIDS[@]}"} ${FIXTURE_PIDS[@]+"${FIXTURE_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash e2e/cluster.sh down "$DIR/cluster" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap bench_cleanup EXIT
E2E_OWNER_PID=$$ bash e2e/cluster.sh up "$DIR/cluster" >/dev/null
set -a; . "$DIR/cluster/env"; set +a
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
"$BIN" crds | k apply -f - >/dev/null
k wait --for=condition=Established crd --all --timeout=60s >/dev/null

# start_controller: the release controller (no leader election, loopback allowed, plus
# $CONTROLLER_ARGS), ready when this
# returns (or the script dies with the controller's log tail); sets METRICS_PORT and CTL (its pid,
# killed on exit). Every later `eventually` prints the controller's log tail when it gives up.
EVENTUALLY_LOG="$DIR/controller.log"
start_controller() {
  METRICS_PORT=$(bash e2e/cluster.sh free-ports 1)
  # shellcheck disable=SC2086 # CONTROLLER_ARGS holds several flags
  "$BIN" controller --allow-loopback --leader-election=false --metrics-addr "127.0.0.1:$METRICS_PORT" \
    ${CONTROLLER_ARGS:-} >"$DIR/controller.log" 2>&1 &
  CTL=$!
  PIDS+=("$CTL")
  eventually 60 "the controller's /readyz" curl -sf "http://127.0.0.1:$METRICS_PORT/readyz" -o /dev/null
}

# cpu_seconds PID...: the user + system CPU seconds those processes have used so far (from
# /proc/PID/stat; a process gone counts 0).
CLK_TCK=$(getconf CLK_TCK)
cpu_seconds() {
  local p total=0
  for p in "$@"; do
    # Fields after the command name, which ends at the last ')': utime is the 12th, stime 13th.
    total=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk -v t="$total" -v hz="$CLK_TCK" '{print t + ($12 + $13) / hz} END {if (NR == 0) print t}')
  done
  echo "$total"
}
# The control plane's processes, for cpu_seconds.
APISERVER_PID=$(awk '$1 == "kube-apiserver" {print $2}' "$DIR/cluster/pids")
ETCD_PID=$(awk '$1 == "etcd" {print $2}' "$DIR/cluster/pids")
# peak_rss_mib PID: the process's peak resident memory (VmHWM), in MiB.
peak_rss_mib() { awk '/VmHWM/{printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
# stop_controller: stops the controller start_controller started, and waits for it.
stop_controller() { kill "$CTL" 2>/dev/null || true; wait "$CTL" 2>/dev/null || true; }
# floor MODE CLIENTS OBJECTS.json [NAMESPACE]: bench/floor.py against this control plane; prints
# its line and leaves its seconds in FLOOR_SECONDS and the apiserver's and etcd's CPU seconds
# over it in FLOOR_APISERVER_CPU and FLOOR_ETCD_CPU.
floor() {
  local a0 e0 line
  a0=$(cpu_seconds "$APISERVER_PID"); e0=$(cpu_seconds "$ETCD_PID")
  line=$("$MCP_FIXTURES_PYTHON" "$ROOT/bench/floor.py" "$1" "$DIR/cluster" "$2" "$3" ${4:+"$4"})
  FLOOR_APISERVER_CPU=$(echo "$(cpu_seconds "$APISERVER_PID") - $a0" | bc)
  FLOOR_ETCD_CPU=$(echo "$(cpu_seconds "$ETCD_PID") - $e0" | bc)
  FLOOR_SECONDS=$(echo "$line" | sed -n 's/.* clients: \([0-9.]*\) s,.*/\1/p')
  echo "floor: $line; apiserver CPU $FLOOR_APISERVER_CPU s, etcd $FLOOR_ETCD_CPU s"
}

# start_fleet_fixtures: the servers a fleet of McpServers reads (bench/controller.sh,
# bench/memory.sh): four official-SDK servers (modern era, they push tools/list_changed, so each
# McpServer on them also holds a subscription) and the hostile fixture's bulk mode (legacy era,
# 50 tools, 2 pages). Sets the array SDK, BULK, and the array HOSTILE_URLS (hanging, streaming
# events forever, answering 20 MB).
start_fleet_fixtures() {
  local i url
  SDK=()
  for i in 1 2 3 4; do
    start_fixture url "$DIR/sdk$i.out" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_SDK_SERVER" --port 0 --tools 20 --page-size 10
    SDK+=("$url")
  done
  start_fixture url "$DIR/bulk.out" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_HOSTILE_SERVER" --port 0
  BULK="$url/bulk/mcp?tools=50&pages=2"
  HOSTILE_URLS=("$url/hang/mcp" "$url/sse-endless/mcp" "$url/huge/mcp")
}
# fleet_yaml N P NS: N McpServers in NS on the fleet's fixtures, one in ten on an SDK server, P %
# of them hostile, the rest on the bulk listing.
fleet_yaml() {
  local N=$1 P=$2 NS=$3 i url
  for i in $(seq 1 "$N"); do
    if (( i % 10 == 0 )); then url=${SDK[$(( (i / 10) % 4 ))]}
    elif (( i % 10 <= P / 10 )); then url=${HOSTILE_URLS[$(( i % 3 ))]}
    else url=$BULK; fi
    printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: s%05d, namespace: %s}\nspec: {url: "%s"}\n' "$i" "$NS" "$url"
  done
}
