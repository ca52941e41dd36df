#!/usr/bin/env bash
# Benchmark: the sidecar's added per-call latency, side by side with the peer data plane,
# ToolHive's vMCP (`thv vmcp serve`, v0.45.0, built from the Go module proxy into the cache).
# One upstream (the hostile fixture's `ok` legacy mode and its `modern` mode, stdlib asyncio,
# answering tools/call at once), called directly, through a release `mcp-operator sidecar` and
# through vMCP (static backends, anonymous, prefix naming like ours, a tool filter of the granted
# tools), in both eras, by one agent
# with 1 and with 64 concurrent tasks (bench/sidecar_load.rs: reqwest, TCP_NODELAY, keep-alive).
# Prints p50/p95/p99 latency and throughput per row, the latency each adds over the direct call,
# and both proxies' RSS idle and after the load. Asserts nothing about time.
# Not quite the same job: the sidecar checks every call against the agent's grants and the
# granted definition digest; vMCP's filter only hides tools from tools/list (a hidden tool stays
# callable).
#   bash bench/sidecar.sh
#   CALLS=20000 bash bench/sidecar.sh
set -euo pipefail
CALLS=${CALLS:-5000}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
eval "$(bash tests/fixtures/install.sh --python-only)"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
THV_VERSION=v0.45.0
THV="$CACHE/thv/$THV_VERSION/bin/thv"
if [[ ! -x $THV ]]; then
  echo "building ToolHive's thv $THV_VERSION from the Go module proxy (once, ~8 min)" >&2
  GOBIN="$(dirname "$THV")" go install "github.com/stacklok/toolhive/cmd/thv@$THV_VERSION"
fi
cargo build --release --quiet
cargo bench --no-run --quiet --bench sidecar_load 2>/dev/null
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-operator
LOAD=$(ls -t "${CARGO_TARGET_DIR:-$ROOT/target}"/release/deps/sidecar_load-* | grep -v '\.d$' | head -1)
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT

"$MCP_FIXTURES_PYTHON" tests/fixtures/hostile_server.py --port 0 >"$DIR/hostile.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do grep -q READY "$DIR/hostile.out" && break; sleep 0.1; done
BASE=$(awk '/READY/{print $2}' "$DIR/hostile.out")

# grants.json for both upstreams, with the digests the controller would publish.
mkdir -p "$DIR/grants" "$DIR/creds"
"$BIN" probe --allow-loopback "$BASE/ok/mcp" >"$DIR/legacy.json"
"$BIN" probe --allow-loopback "$BASE/modern/mcp" >"$DIR/modern.json"
python3 - "$DIR" "$BASE" <<'PY'
import json, sys
d, base = sys.argv[1], sys.argv[2]
servers = []
for name, mode in (("legacy", "ok"), ("modern", "modern")):
    probe = json.load(open(f"{d}/{name}.json"))
    tools = sorted(({"qualifiedName": f"{name}__{t['name']}", "name": t["name"], "access": t["access"],
                     "idempotent": t["idempotent"], "requiresApproval": False, "definitionDigest": t["definitionDigest"]}
                    for t in probe["catalog"]["tools"]), key=lambda t: t["qualifiedName"])
    servers.append({"name": name, "prefix": name, "optional": False, "available": True, "deferred": False,
                    "endpoint": {"url": f"{base}/{mode}/mcp", "transport": "streamable-http", "era": probe["era"],
                                 "connectTimeoutMs": 5000, "callTimeoutMs": 30000, "retry": 0},
                    "tools": tools})
json.dump({"schemaVersion": "mcp-operator.dev/grants/v1", "servers": servers}, open(f"{d}/grants/grants.json", "w"))
# vMCP's tool filter: the same granted tools, per backend.
with open(f"{d}/vmcp-tools.yaml", "w") as f:
    for s in servers:
        f.write("    - {workload: %s, filter: %s}\n" % (s["name"], json.dumps([t["name"] for t in s["tools"]])))
PY
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" sidecar --grants-file "$DIR/grants/grants.json" --credentials-dir "$DIR/creds" \
  --listen "127.0.0.1:$PORT" --allow-loopback 2>"$DIR/sidecar.log" &
SIDECAR=$!
PIDS+=($SIDECAR)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done

# vMCP over the same two upstreams, tools named like ours (legacy__alpha, modern__alpha).
VPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$DIR/vmcp.yaml" <<EOF
name: bench
groupRef: bench
backends:
  - {name: legacy, url: "$BASE/ok/mcp", transport: streamable-http}
  - {name: modern, url: "$BASE/modern/mcp", transport: streamable-http}
incomingAuth: {type: anonymous}
outgoingAuth: {source: inline}
aggregation:
  conflictResolution: prefix
  conflictResolutionConfig: {prefixFormat: "{workload}__"}
  tools:
$(cat "$DIR/vmcp-tools.yaml")
EOF
"$THV" vmcp serve --config "$DIR/vmcp.yaml" --host 127.0.0.1 --port "$VPORT" >"$DIR/vmcp.log" 2>&1 &
VMCP=$!
PIDS+=($VMCP)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$VPORT/health" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$VPORT/health" >/dev/null || { echo "vMCP did not start:" >&2; tail -20 "$DIR/vmcp.log" >&2; exit 1; }

rss() { awk '/VmRSS/{printf "%.1f MB", $2/1024}' "/proc/$1/status"; }
IDLE_RSS=$(rss $SIDECAR)
IDLE_VMCP_RSS=$(rss $VMCP)

row() { # era path tool concurrency
  "$LOAD" "$1" "$2" "$3" "$4" "$CALLS" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %.0f %.0f %.0f" % (r["p50_us"], r["p95_us"], r["p99_us"], r["calls_per_s"]))'
}
printf '%-7s %-4s %-13s %8s %8s %8s %9s\n' era conc path p50_us p95_us p99_us calls/s
for era in legacy modern; do
  mode=$([ "$era" = legacy ] && echo ok || echo modern)
  for c in 1 64; do
    read -r d50 d95 d99 dtp < <(row "$BASE/$mode/mcp" "$era" alpha "$c")
    read -r s50 s95 s99 stp < <(row "http://127.0.0.1:$PORT/mcp" "$era" "${era}__alpha" "$c")
    read -r v50 v95 v99 vtp < <(row "http://127.0.0.1:$VPORT/mcp" "$era" "${era}__alpha" "$c")
    printf '%-7s %-4s %-13s %8s %8s %8s %9s\n' "$era" "$c" direct "$d50" "$d95" "$d99" "$dtp"
    printf '%-7s %-4s %-13s %8s %8s %8s %9s\n' "$era" "$c" sidecar "$s50" "$s95" "$s99" "$stp"
    printf '%-7s %-4s %-13s %8s %8s %8s %9s\n' "$era" "$c" vmcp "$v50" "$v95" "$v99" "$vtp"
    printf '%-7s %-4s %-13s %8s %8s %8s %8s%%\n' "$era" "$c" sidecar-added "$((s50 - d50))" "$((s95 - d95))" "$((s99 - d99))" "$((100 * stp / dtp))"
    printf '%-7s %-4s %-13s %8s %8s %8s %8s%%\n' "$era" "$c" vmcp-added "$((v50 - d50))" "$((v95 - d95))" "$((v99 - d99))" "$((100 * vtp / dtp))"
  done
done
echo "sidecar RSS: idle $IDLE_RSS, after load $(rss $SIDECAR)"
echo "vMCP $THV_VERSION RSS: idle $IDLE_VMCP_RSS, after load $(rss $VMCP)"
