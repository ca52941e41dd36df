#!/usr/bin/env bash
# Benchmark: `mcp-operator probe` (release build) against large catalogues served by the bulk mode
# of our fixture server. Prints wall time and peak RSS per case; asserts nothing about time.
#   bash bench/probe.sh            # runs each case 3 times
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}

bash tests/fixtures/install.sh >/dev/null
# shellcheck disable=SC1091
. tests/fixtures/installed.env
cargo build --release --quiet
bin=target/release/mcp-operator
if [ -n "${CARGO_TARGET_DIR:-}" ]; then bin="$CARGO_TARGET_DIR/release/mcp-operator"; fi

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
log=$(mktemp)
trap 'for p in ${FIXTURE_PIDS[@]+"${FIXTURE_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done; rm -f "$log"' EXIT
start_fixture base "$log" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_HOSTILE_SERVER" --port 0

case_run() { # name url extra-args...
  local name=$1 url=$2; shift 2
  for i in $(seq "$runs"); do
    local out
    out=$( { /usr/bin/time -f 'TIME %e %M' "$bin" probe --allow-loopback --connect-timeout "${TIMEOUT:-60s}" "$@" "$url" >/tmp/probe-bench.json; } 2>&1 || true)
    read -r _ secs kib <<<"$(grep '^TIME' <<<"$out")"
    python3 - "$name" "$i" "$secs" "$kib" /tmp/probe-bench.json <<'PY'
import json, sys
name, i, secs, kib, path = sys.argv[1:]
doc = json.load(open(path))
cat = doc.get("catalog", {})
schema = sum(t["schemaBytes"] for t in cat.get("tools", []))
print(f"{name:<34} run {i}: {float(secs):6.2f} s wall, peak RSS {int(kib)/1024:7.1f} MiB, "
      f"tools {cat.get('toolCount')}, pages {cat.get('pagesRead')}, schema bytes {schema}, "
      f"reason {doc.get('reason', '-')}")
PY
  done
}

# 351 tools carrying about 2 MB of schemas in one page (needs a cap above 2 MB: the default 4 MiB).
case_run "351 tools, ~2 MB schemas, 1 page" "$base/bulk/mcp?tools=351&pages=1&schema_bytes=2000000"
# The same over 4 pages.
case_run "351 tools, ~2 MB schemas, 4 pages" "$base/bulk/mcp?tools=351&pages=4&schema_bytes=2000000"
# 10,000 tools over 100 pages (the default page cap).
case_run "10,000 tools, 100 pages" "$base/bulk/mcp?tools=10000&pages=100"
# Hostile: an 8 MiB body refused at the 4 MiB cap (memory stays bounded), and a never-ending SSE reply.
case_run "8 MiB body, 4 MiB cap" "$base/huge-chunked/mcp"
TIMEOUT=2s case_run "endless SSE reply, 2s deadline" "$base/sse-endless/mcp"
