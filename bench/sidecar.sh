#!/usr/bin/env bash
# Benchmark: the sidecar's added per-call latency and CPU, side by side with the peer data plane,
# ToolHive's vMCP (`thv vmcp serve`, v0.45.0, built from the Go module proxy into the cache).
# One upstream (the hostile fixture's `ok` legacy mode and its `modern` mode, stdlib asyncio,
# answering tools/call at once), called directly, through a release `mcp-operator sidecar` and
# through vMCP (static backends, anonymous, prefix naming like ours, a tool filter of the granted
# tools), in both eras, by one agent with 1 and with 64 concurrent tasks (bench/sidecar_load.rs:
# reqwest, TCP_NODELAY, keep-alive), and through the floor: bench/floor_proxy.rs, a bare hyper
# proxy that checks nothing and streams each answer back untouched — what any proxy pays for the
# two loopback hops on this machine, the physical limit the sidecar is measured against. Two more rows, sidecar only (vMCP has neither): a deferred
# server's tool called through discovery's `call_tool`, and an approval-gated tool called by an
# agent that cannot be asked (refused before anything is sent). Then `resources/read` and
# `prompts/get` through the sidecar beside the same request sent directly (both eras), and the
# OAuth token cache's cost: the legacy tool called through the sidecar as an upstream behind
# `oauth2` client credentials (tests/fixtures/oauth_issuer.py issues the token; the upstream
# ignores it), its CPU per call beside the plain call's, and how many tokens the issuer issued
# over all of it (1: only the first call fetches one).
# The main rows (direct, sidecar, floor) run ROUNDS times (3), interleaved, and print the
# median of each figure (vMCP's run once). Prints p50/p95/p99 latency and throughput per row;
# each proxy's CPU time per call, from /proc/<pid>/stat (utime+stime over the row, divided by
# the calls of the row, warm-up included);
# the latency each adds over the direct call and its throughput against direct; then both
# proxies' RSS idle and after the load. Asserts nothing about time.
# Not quite the same job: the sidecar checks every call against the agent's grants and the
# granted definition digest, and audits it; vMCP's filter only hides tools from tools/list (a
# hidden tool stays callable).
#   bash bench/sidecar.sh
#   CALLS=20000 bash bench/sidecar.sh
#   BENCH_BIN=/path/to/older/mcp-operator bash bench/sidecar.sh   # another build's sidecar
#   BENCH_LOAD=target/release/deps/sidecar_load-<hash> bash bench/sidecar.sh
#   BENCH_PEER=none bash bench/sidecar.sh     # without vMCP (no thv build): its rows are left out
#   BENCH_ONLY=resources bash bench/sidecar.sh   # only the read/get and OAuth rows
#   BENCH_ONLY=calls bash bench/sidecar.sh       # only the tool call rows (bench/profile.sh)
set -euo pipefail
CALLS=${CALLS:-5000}
ROUNDS=${ROUNDS:-3}
# vMCP's open files grow with the legacy calls it serves ("socket: too many open files" once
# they passed 20,000): room for them, where the system allows.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
BENCH_PEER=${BENCH_PEER:-vmcp}
BENCH_ONLY=${BENCH_ONLY:-all}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
eval "$(bash tests/fixtures/install.sh --python-only)"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
THV_VERSION=v0.45.0
THV="$CACHE/thv/$THV_VERSION/bin/thv"
if [[ $BENCH_PEER != none && ! -x $THV ]]; then
  echo "building ToolHive's thv $THV_VERSION from the Go module proxy (once, ~8 min)" >&2
  GOBIN="$(dirname "$THV")" go install "github.com/stacklok/toolhive/cmd/thv@$THV_VERSION"
fi
[ -n "${BENCH_BIN:-}" ] || cargo build --release --quiet
# BENCH_LOAD: a load client built earlier (building it builds the binary once more with the
# dev-dependencies' features, ~10 min here).
if [ -z "${BENCH_LOAD:-}" ] || [ -z "${BENCH_FLOOR:-}" ]; then
  cargo bench --no-run --quiet --bench sidecar_load --bench floor_proxy 2>/dev/null
fi
BIN=${BENCH_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-operator}
LOAD=${BENCH_LOAD:-$(ls -t "${CARGO_TARGET_DIR:-$ROOT/target}"/release/deps/sidecar_load-* | grep -v '\.d$' | head -1)}
FLOOR=${BENCH_FLOOR:-$(ls -t "${CARGO_TARGET_DIR:-$ROOT/target}"/release/deps/floor_proxy-* | grep -v '\.d$' | head -1)}
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT

"$MCP_FIXTURES_PYTHON" tests/fixtures/hostile_server.py --port 0 >"$DIR/hostile.out" 2>/dev/null &
PIDS+=($!)
"$MCP_FIXTURES_OAUTH_PYTHON" tests/fixtures/oauth_issuer.py --client bench:bench-secret >"$DIR/issuer.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do grep -q READY "$DIR/hostile.out" && grep -q READY "$DIR/issuer.out" && break; sleep 0.1; done
BASE=$(awk '/READY/{print $2}' "$DIR/hostile.out")
ISSUER=$(awk '/READY/{print $2}' "$DIR/issuer.out")
mkdir -p "$DIR/creds/secrets/oauth"
printf bench-secret >"$DIR/creds/secrets/oauth/client-secret"

# grants.json for both upstreams, with the digests the controller would publish.
mkdir -p "$DIR/grants" "$DIR/creds"
"$BIN" probe --allow-loopback "$BASE/ok/mcp" >"$DIR/legacy.json"
"$BIN" probe --allow-loopback "$BASE/modern/mcp" >"$DIR/modern.json"
python3 - "$DIR" "$BASE" "$ISSUER" <<'PY'
import json, sys
d, base, issuer = sys.argv[1], sys.argv[2], sys.argv[3]
servers = []
# legacy, modern: plain (and their resources bench://* and prompt greet granted); deferred: the
# modern upstream behind discovery; gated: the modern upstream with every tool approval-gated;
# oauth: the legacy upstream behind oauth2 client credentials.
for name, mode, probed in (("legacy", "ok", "legacy"), ("modern", "modern", "modern"),
                           ("deferred", "modern", "modern"), ("gated", "modern", "modern"),
                           ("oauth", "ok", "legacy")):
    probe = json.load(open(f"{d}/{probed}.json"))
    tools = sorted(({"qualifiedName": f"{name}__{t['name']}", "name": t["name"], "access": t["access"],
                     "idempotent": t["idempotent"], "requiresApproval": name == "gated",
                     "definitionDigest": t["definitionDigest"]}
                    for t in probe["catalog"]["tools"]), key=lambda t: t["qualifiedName"])
    server = {"name": name, "prefix": name, "optional": False, "available": True,
              "deferred": name == "deferred",
              "endpoint": {"url": f"{base}/{mode}/mcp", "transport": "streamable-http", "era": probe["era"],
                           "connectTimeoutMs": 5000, "callTimeoutMs": 30000, "retry": 0},
              "tools": tools}
    if name in ("legacy", "modern"):
        server["resources"] = [{"allow": ["bench://*"]}]
        server["prompts"] = [{"allow": ["greet"]}]
    if name == "oauth":
        server["endpoint"]["oauth2"] = {"tokenUrl": f"{issuer}/token", "clientId": "bench",
                                        "clientSecret": {"name": "oauth", "key": "client-secret"}, "scopes": ["mcp"]}
    servers.append(server)
json.dump({"schemaVersion": "mcp-operator.dev/grants/v2", "servers": servers}, open(f"{d}/grants/grants.json", "w"))
# vMCP's tool filter: the same granted tools, per backend.
with open(f"{d}/vmcp-tools.yaml", "w") as f:
    for s in servers[:2]:
        f.write("    - {workload: %s, filter: %s}\n" % (s["name"], json.dumps([t["name"] for t in s["tools"]])))
PY
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# JSON logs, as the injection runs it (the audit line is written per call).
"$BIN" --log-format json sidecar --grants-file "$DIR/grants/grants.json" --credentials-dir "$DIR/creds" \
  --listen "127.0.0.1:$PORT" --allow-loopback 2>"$DIR/sidecar.log" &
SIDECAR=$!
PIDS+=($SIDECAR)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done

# The floor: the bare proxy in front of the same fixture (paths kept: /ok/mcp, /modern/mcp).
"$FLOOR" 127.0.0.1:0 "$BASE" >"$DIR/floor.out" 2>&1 &
FLOORPID=$!
PIDS+=($FLOORPID)
for _ in $(seq 100); do grep -q READY "$DIR/floor.out" && break; sleep 0.1; done
FPORT=$(awk '/READY/{print $2}' "$DIR/floor.out")

# vMCP over the same two upstreams, tools named like ours (legacy__alpha, modern__alpha).
VMCP=
if [[ $BENCH_PEER != none ]]; then
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
fi

rss() { awk '/VmRSS/{printf "%.1f MB", $2/1024}' "/proc/$1/status"; }
IDLE_RSS=$(rss $SIDECAR)
IDLE_VMCP_RSS=$([ -n "$VMCP" ] && rss $VMCP || echo -)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# row URL ERA TOOL CONCURRENCY [PID [EXPECT]]: "p50 p95 p99 calls/s cpu_us_per_call" (cpu: - without PID)
row() {
  local before after out
  before=$([ -n "${5:-}" ] && cpu_ticks "$5" || echo 0)
  out=$("$LOAD" "$1" "$2" "$3" "$4" "$CALLS" "${6:-ok}")
  after=$([ -n "${5:-}" ] && cpu_ticks "$5" || echo 0)
  python3 -c 'import json,sys
r = json.loads(sys.argv[1]); cpu = int(sys.argv[2]) * int(sys.argv[3]) / r["calls_made"]
print("%.0f %.0f %.0f %.0f %s" % (r["p50_us"], r["p95_us"], r["p99_us"], r["calls_per_s"], "%.0f" % cpu if sys.argv[4] else "-"))' \
    "$out" "$((after - before))" "$TICK_US" "${5:-}"
}
# The median of each column over rows of "p50 p95 p99 calls/s cpu" ("-": none).
median() {
  python3 -c 'import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
print(" ".join("-" if rows[0][i] == "-" else "%.0f" % statistics.median(float(r[i]) for r in rows) for i in range(5)))'
}
printf '%-7s %-4s %-13s %8s %8s %8s %9s %11s\n' era conc path p50_us p95_us p99_us calls/s cpu_us/call
line() { printf '%-7s %-4s %-13s %8s %8s %8s %9s %11s\n' "$@"; }
SUMMARY=()
if [[ $BENCH_ONLY == all || $BENCH_ONLY == calls ]]; then
for era in legacy modern; do
  mode=$([ "$era" = legacy ] && echo ok || echo modern)
  for c in 1 64; do
    # ROUNDS rounds, the paths interleaved in each, so drift on the shared cores falls on all of
    # them; each figure is the median over the rounds. vMCP runs in the first round only: it
    # opens a backend session per legacy call, and three rounds' worth of them timed it out.
    : >"$DIR/direct"; : >"$DIR/sidecar"; : >"$DIR/floor"; : >"$DIR/vmcp"
    for round in $(seq "$ROUNDS"); do
      row "$BASE/$mode/mcp" "$era" alpha "$c" >>"$DIR/direct"
      row "http://127.0.0.1:$PORT/mcp" "$era" "${era}__alpha" "$c" "$SIDECAR" >>"$DIR/sidecar"
      row "http://127.0.0.1:$FPORT/$mode/mcp" "$era" alpha "$c" "$FLOORPID" >>"$DIR/floor"
      if [[ -n $VMCP && $round == 1 ]]; then
        row "http://127.0.0.1:$VPORT/mcp" "$era" "${era}__alpha" "$c" "$VMCP" >>"$DIR/vmcp"
      fi
    done
    read -r d50 d95 d99 dtp _ < <(median <"$DIR/direct")
    read -r s50 s95 s99 stp scpu < <(median <"$DIR/sidecar")
    line "$era" "$c" direct "$d50" "$d95" "$d99" "$dtp" -
    line "$era" "$c" sidecar "$s50" "$s95" "$s99" "$stp" "$scpu"
    line "$era" "$c" sidecar-added "$((s50 - d50))" "$((s95 - d95))" "$((s99 - d99))" "$((100 * stp / dtp))%" ""
    read -r f50 f95 f99 ftp fcpu < <(median <"$DIR/floor")
    line "$era" "$c" floor "$f50" "$f95" "$f99" "$ftp" "$fcpu"
    line "$era" "$c" floor-added "$((f50 - d50))" "$((f95 - d95))" "$((f99 - d99))" "$((100 * ftp / dtp))%" ""
    vadded=- vcpu=- vshare=-
    if [[ -n $VMCP ]]; then
      read -r v50 v95 v99 vtp vcpu < <(median <"$DIR/vmcp")
      line "$era" "$c" vmcp "$v50" "$v95" "$v99" "$vtp" "$vcpu"
      line "$era" "$c" vmcp-added "$((v50 - d50))" "$((v95 - d95))" "$((v99 - d99))" "$((100 * vtp / dtp))%" ""
      vadded="$((v50 - d50)) µs" vshare="$((100 * vtp / dtp)) %"
      vcpu="$vcpu µs"
    fi
    # The sidecar's CPU against the floor's of the same rounds: CPU time per call moves with
    # the machine's load from run to run, this ratio much less.
    times_floor=$(python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) / max(float(sys.argv[2]), 1)))' "$scpu" "$fcpu")
    SUMMARY+=("$(printf '| %s, %s | %s µs | %s µs | %s | %s µs (%s× floor) | %s | %s %% | %s | %s µs, %s µs, %s %% |' "$era" "$c" "$d50" \
      "$((s50 - d50))" "$vadded" "$scpu" "$times_floor" "$vcpu" "$((100 * stp / dtp))" "$vshare" "$((f50 - d50))" "$fcpu" "$((100 * ftp / dtp))")")
  done
done
# Sidecar only: a deferred server's tool through call_tool, and an approval-gated tool's
# refusal (a legacy session that declared no elicitation: refused with a tool error), against
# the modern direct call.
for c in 1 64; do
  read -r d50 d95 d99 dtp _ < <(row "$BASE/modern/mcp" modern alpha "$c")
  read -r s50 s95 s99 stp scpu < <(row "http://127.0.0.1:$PORT/mcp" modern "call_tool:deferred/alpha" "$c" "$SIDECAR")
  read -r g50 g95 g99 gtp gcpu < <(row "http://127.0.0.1:$PORT/mcp" legacy gated__alpha "$c" "$SIDECAR" refused)
  line modern "$c" direct "$d50" "$d95" "$d99" "$dtp" -
  line modern "$c" call_tool "$s50" "$s95" "$s99" "$stp" "$scpu"
  line modern "$c" call_tool-added "$((s50 - d50))" "$((s95 - d95))" "$((s99 - d99))" "$((100 * stp / dtp))%" ""
  line legacy "$c" gated-refusal "$g50" "$g95" "$g99" "$gtp" "$gcpu"
  SUMMARY+=("$(printf '| call_tool (deferred), %s | %s µs | %s µs | – | %s µs | – | %s %% | – | – |' "$c" "$d50" "$((s50 - d50))" "$scpu" "$((100 * stp / dtp))")")
  SUMMARY+=("$(printf '| approval refusal, %s | – | %s µs (whole call) | – | %s µs | – | %s calls/s | – | – |' "$c" "$g50" "$gcpu" "$gtp")")
done
fi
if [[ $BENCH_ONLY != calls ]]; then
# resources/read and prompts/get, direct and through the sidecar (vMCP is not asked: the
# comparison is the sidecar's narrowing and renaming against the bare request).
for era in legacy modern; do
  mode=$([ "$era" = legacy ] && echo ok || echo modern)
  for c in 1 64; do
    for what in read get; do
      if [ "$what" = read ]; then direct_target="read:bench://doc" via="read:${era}+bench://doc"
      else direct_target="prompt:greet" via="prompt:${era}__greet"; fi
      read -r d50 d95 d99 dtp _ < <(row "$BASE/$mode/mcp" "$era" "$direct_target" "$c")
      read -r s50 s95 s99 stp scpu < <(row "http://127.0.0.1:$PORT/mcp" "$era" "$via" "$c" "$SIDECAR")
      line "$era" "$c" "$what-direct" "$d50" "$d95" "$d99" "$dtp" -
      line "$era" "$c" "$what-sidecar" "$s50" "$s95" "$s99" "$stp" "$scpu"
      line "$era" "$c" "$what-added" "$((s50 - d50))" "$((s95 - d95))" "$((s99 - d99))" "$((100 * stp / dtp))%" ""
      SUMMARY+=("$(printf '| %s %s, %s | %s µs | %s µs | – | %s µs | – | %s %% | – | – |' \
        "$([ "$what" = read ] && echo resources/read || echo prompts/get)" "$era" "$c" "$d50" "$((s50 - d50))" "$scpu" "$((100 * stp / dtp))")")
    done
  done
done
# The OAuth token cache: the same legacy tool, plain and behind oauth2, through the sidecar.
issued() { curl -sf "$ISSUER/control/issued" | python3 -c 'import json,sys; print(json.load(sys.stdin)["client_credentials"])'; }
OAUTH_CALLS=0
for c in 1 64; do
  read -r p50 p95 p99 ptp pcpu < <(row "http://127.0.0.1:$PORT/mcp" legacy legacy__alpha "$c" "$SIDECAR")
  read -r o50 o95 o99 otp ocpu < <(row "http://127.0.0.1:$PORT/mcp" legacy oauth__alpha "$c" "$SIDECAR")
  OAUTH_CALLS=$((OAUTH_CALLS + CALLS + 200))
  line legacy "$c" plain-sidecar "$p50" "$p95" "$p99" "$ptp" "$pcpu"
  line legacy "$c" oauth-sidecar "$o50" "$o95" "$o99" "$otp" "$ocpu"
  SUMMARY+=("$(printf '| oauth2 upstream, %s | %s µs (plain, through the sidecar) | %s µs more | – | %s µs (plain %s µs) | – | %s %% of plain | – | – |' \
    "$c" "$p50" "$((o50 - p50))" "$ocpu" "$pcpu" "$((100 * otp / ptp))")")
done
echo "oauth: the issuer issued $(issued) token(s) over $OAUTH_CALLS calls through the sidecar"
fi
echo
echo "| era, clients | direct p50 | sidecar added p50 | vMCP added p50 | sidecar CPU/call | vMCP CPU/call | sidecar tput vs direct | vMCP tput vs direct | floor: added p50, CPU/call, tput |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${SUMMARY[@]}"
echo "sidecar RSS: idle $IDLE_RSS, after load $(rss $SIDECAR)"
[ -z "$VMCP" ] || echo "vMCP $THV_VERSION RSS: idle $IDLE_VMCP_RSS, after load $(rss $VMCP)"
