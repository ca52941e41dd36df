#!/usr/bin/env bash
# Benchmark: what an agent receives from the sidecar for a large catalogue, preloaded vs
# deferred (seed 002, issue 11). One SDK fixture server with 351 tools whose input schemas are
# padded to ~5.9 KB each (~2 MB in all, like a server generated from an OpenAPI description),
# probed as the controller probes it; its grants are written twice, once preloaded and once
# deferred as the controller marks it (granted schema characters over --preload-budget, default
# 100000), and served by two sidecars. A raw HTTP agent (legacy era, no SDK in between) counts
# the bytes of every answer it gets:
#   - per turn: the whole tools/list (every page), i.e. what an agent puts in every model
#     request; "definitions" is the tools array alone, "wire" the JSON-RPC bodies;
#   - deferred, per use: a list_tools page, a full discovery pass, one get_tool_info, one
#     call_tool (and the same call made directly on the preloaded sidecar).
# It also times the agent's whole tools/list (every page; median of 15 turns, the release
# binary, a Python urllib agent). Asserts nothing.
#   bash bench/deferred.sh
#   TOOLS=1000 SCHEMA_BYTES=2000 bash bench/deferred.sh
set -euo pipefail
TOOLS=${TOOLS:-351}
SCHEMA_BYTES=${SCHEMA_BYTES:-5900}
BUDGET=${BUDGET:-100000}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
eval "$(bash tests/fixtures/install.sh --python-only)"
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-operator
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT

"$MCP_FIXTURES_PYTHON" tests/fixtures/sdk_server.py --port 0 --tools "$TOOLS" --no-named-tools \
  --schema-bytes "$SCHEMA_BYTES" >"$DIR/server.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 200); do grep -q READY "$DIR/server.out" && break; sleep 0.1; done
URL=$(awk '/READY/{print $2}' "$DIR/server.out")
"$BIN" probe --allow-loopback "$URL" >"$DIR/probe.json"

# Two grants documents from the probe: the same tools, preloaded and deferred.
python3 - "$DIR" "$URL" "$BUDGET" <<'PY'
import json, os, sys
d, url, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
probe = json.load(open(f"{d}/probe.json"))
tools = probe["catalog"]["tools"]
schema = sum(t["schemaBytes"] for t in tools)
granted = sorted(({"qualifiedName": f"big__{t['name']}", "name": t["name"], "access": t["access"],
                   "idempotent": t["idempotent"], "requiresApproval": False,
                   "definitionDigest": t["definitionDigest"]} for t in tools), key=lambda t: t["qualifiedName"])
for mode, deferred in (("preloaded", False), ("deferred", True)):
    os.makedirs(f"{d}/{mode}/grants")
    os.makedirs(f"{d}/{mode}/creds")
    doc = {"schemaVersion": "mcp-operator.dev/grants/v1", "servers": [{
        "name": "big", "prefix": "big", "optional": False, "available": True, "deferred": deferred,
        "endpoint": {"url": url, "transport": "streamable-http", "era": probe["era"],
                     "connectTimeoutMs": 5000, "callTimeoutMs": 30000, "retry": 0},
        "tools": granted}]}
    json.dump(doc, open(f"{d}/{mode}/grants/grants.json", "w"))
print(f"catalogue: {len(tools)} tools, {schema:,} characters of schema; the controller's rule "
      f"(over --preload-budget {budget:,}) marks it {'deferred' if schema > budget else 'preloaded'}")
PY

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
for mode in preloaded deferred; do
  p=$(port)
  "$BIN" sidecar --grants-file "$DIR/$mode/grants/grants.json" --credentials-dir "$DIR/$mode/creds" \
    --listen "127.0.0.1:$p" --allow-loopback 2>"$DIR/$mode.log" &
  PIDS+=($!)
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$p/readyz" >/dev/null && break; sleep 0.1; done
  echo "$p" >"$DIR/$mode.port"
done

python3 - "$(cat "$DIR/preloaded.port")" "$(cat "$DIR/deferred.port")" <<'PY'
import json, statistics, sys, time, urllib.request

class Agent:
    """A legacy-era agent over plain HTTP that counts the bytes of every answer."""
    def __init__(self, port):
        self.url, self.session, self.id = f"http://127.0.0.1:{port}/mcp", None, 0
        self.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
    def rpc(self, method, params):
        self.id += 1
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.session:
            headers |= {"mcp-session-id": self.session, "mcp-protocol-version": "2025-11-25"}
        body = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}).encode()
        with urllib.request.urlopen(urllib.request.Request(self.url, body, headers)) as r:
            self.session = self.session or r.headers.get("mcp-session-id")
            raw = r.read()
        return json.loads(raw)["result"], len(raw)
    def tools(self):
        tools, wire, cursor = [], 0, None
        while True:
            result, n = self.rpc("tools/list", {"cursor": cursor} if cursor else {})
            tools += result["tools"]; wire += n
            cursor = result.get("nextCursor")
            if not cursor:
                return tools, wire
    def call(self, name, arguments):
        result, n = self.rpc("tools/call", {"name": name, "arguments": arguments})
        return result, n

pre, dfr = Agent(sys.argv[1]), Agent(sys.argv[2])
rows = []
for label, agent in (("preloaded", pre), ("deferred", dfr)):
    tools, wire = agent.tools()
    definitions = len(json.dumps(tools, separators=(",", ":")))
    times = []
    for _ in range(15):
        started = time.perf_counter()
        agent.tools()
        times.append(time.perf_counter() - started)
    rows.append((label, len(tools), definitions, wire, statistics.median(times) * 1000))
print(f"{'per turn':<10} {'tools':>6} {'definitions':>12} {'wire':>12} {'tools/list ms':>14}")
for label, n, definitions, wire, ms in rows:
    print(f"{label:<10} {n:>6} {definitions:>12,} {wire:>12,} {ms:>14.1f}")
print(f"deferred/preloaded: {rows[1][3] / rows[0][3]:.4%} of the wire bytes per turn")

print(f"\n{'deferred, per use':<42} {'bytes':>10}")
page, n = dfr.call("list_tools", {})
first = json.loads(page["content"][0]["text"])
print(f"{'list_tools, first page (%d of %d tools)' % (len(first['tools']), first['total']):<42} {n:>10,}")
pages, total, args = 0, 0, {}
while True:
    page, n = dfr.call("list_tools", args)
    body = json.loads(page["content"][0]["text"])
    pages += 1; total += n
    if "nextCursor" not in body:
        break
    args = {"cursor": body["nextCursor"]}
print(f"{'list_tools, every page (%d pages)' % pages:<42} {total:>10,}")
_, n = dfr.call("list_tools", {"query": "number 35"})
label = 'list_tools, query "number 35"'
print(f"{label:<42} {n:>10,}")
info, n = dfr.call("get_tool_info", {"server": "big", "tool": "tool_0007"})
assert not info["isError"], info
print(f"{'get_tool_info tool_0007':<42} {n:>10,}")
called, n = dfr.call("call_tool", {"server": "big", "tool": "tool_0007", "arguments": {"path": "/x"}})
assert not called["isError"], called
print(f"{'call_tool tool_0007':<42} {n:>10,}")
direct, n = pre.call("big__tool_0007", {"path": "/x"})
print(f"{'(preloaded: big__tool_0007 called directly)':<42} {n:>10,}")
PY
