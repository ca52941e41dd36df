#!/usr/bin/env bash
# Profile: where the sidecar's instructions go per agent request, against the floor proxy's, in
# figures that do not move with the machine's load. Runs bench/sidecar.sh's tool call rows
# (BENCH_ONLY=calls, without vMCP: both eras at 1 and 64 clients, then the sidecar's own
# call_tool and approval refusal rows) with the release sidecar and the floor proxy
# (bench/floor_proxy.rs) each under valgrind's callgrind, which counts instructions exactly (CPU time per call on shared cores moves by tens
# of percent from run to run; `perf` has no hardware counters on a VM). Prints each one's
# instructions, agent requests (the HTTP requests its server side parsed) and instructions per
# request, the ratio, then the sidecar functions with the most instructions under them
# (inclusive). The callgrind files stay in OUT for callgrind_annotate
# (`--inclusive=yes`, `--tree=calling`). Asserts nothing.
#   bash bench/profile.sh
#   CALLS=2000 OUT=/tmp/profile bash bench/profile.sh
#   BENCH_BIN=/path/to/older/mcp-operator bash bench/profile.sh   # another build's sidecar
# valgrind comes from Debian (installed here when missing and run as root).
set -euo pipefail
CALLS=${CALLS:-1000}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  ((EUID == 0)) || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
[ -n "${BENCH_BIN:-}" ] || cargo build --release --quiet
cargo bench --no-run --quiet --bench sidecar_load --bench floor_proxy 2>/dev/null
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${BENCH_BIN:-$TARGET/release/mcp-operator}
LOAD=$(ls -t "$TARGET"/release/deps/sidecar_load-* | grep -v '\.d$' | head -1)
FLOOR=$(ls -t "$TARGET"/release/deps/floor_proxy-* | grep -v '\.d$' | head -1)
rm -f "$OUT"/sidecar.callgrind "$OUT"/floor.callgrind

# The sidecar under callgrind (bench/sidecar.sh also runs the binary for `probe`: not that).
cat >"$OUT/sidecar-wrapper.sh" <<EOF
#!/usr/bin/env bash
case " \$* " in
  *" sidecar "*) exec valgrind --tool=callgrind --callgrind-out-file="$OUT/sidecar.callgrind" "$BIN" "\$@" ;;
esac
exec "$BIN" "\$@"
EOF
cat >"$OUT/floor-wrapper.sh" <<EOF
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file="$OUT/floor.callgrind" "$FLOOR" "\$@"
EOF
chmod +x "$OUT/sidecar-wrapper.sh" "$OUT/floor-wrapper.sh"
BENCH_ONLY=calls BENCH_PEER=none BENCH_BIN="$OUT/sidecar-wrapper.sh" BENCH_FLOOR="$OUT/floor-wrapper.sh" \
  BENCH_LOAD="$LOAD" CALLS="$CALLS" ROUNDS=1 bash bench/sidecar.sh >"$OUT/bench.txt" 2>&1
# callgrind writes its file when the process exits: bench/sidecar.sh has stopped both.
for _ in $(seq 100); do [[ -s $OUT/sidecar.callgrind && -s $OUT/floor.callgrind ]] && break; sleep 0.1; done

# "instructions requests" of one callgrind file.
figures() {
  local total requests
  total=$(callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
  requests=$(callgrind_annotate --tree=calling "$1" 2>/dev/null |
    awk '/>   .*<hyper::proto::h1::role::Server as hyper::proto::h1::Http1Transaction>::parse / {
           match($0, /\(([0-9,]+)x\)/); n = substr($0, RSTART + 1, RLENGTH - 3); gsub(",", "", n); sum += n }
         END { print sum + 0 }')
  echo "$total $requests"
}
read -r s_total s_requests < <(figures "$OUT/sidecar.callgrind")
read -r f_total f_requests < <(figures "$OUT/floor.callgrind")
if ((s_requests == 0 || f_requests == 0)); then
  echo "no requests were profiled; bench/sidecar.sh said:" >&2
  tail -20 "$OUT/bench.txt" >&2
  exit 1
fi
python3 - "$s_total" "$s_requests" "$f_total" "$f_requests" <<'PY'
import sys
s_total, s_req, f_total, f_req = map(int, sys.argv[1:])
s, f = s_total / max(s_req, 1), f_total / max(f_req, 1)
print(f"sidecar: {s_total:,} instructions over {s_req:,} agent requests: {s:,.0f} per request")
print(f"floor:   {f_total:,} instructions over {f_req:,} requests: {f:,.0f} per request")
print(f"the sidecar: {s / max(f, 1):.1f}x the floor per request")
PY
echo
echo "the sidecar's functions with the most instructions under them (inclusive):"
callgrind_annotate --inclusive=yes "$OUT/sidecar.callgrind" 2>/dev/null |
  grep -E 'mcp_operator::(sidecar|mcp)::|reqwest::async_impl::client::Client::execute_request|serde_json::de::from_trait' |
  head -30 | sed -E 's/ \[[^]]*\]$//'
echo
echo "callgrind files: $OUT/sidecar.callgrind $OUT/floor.callgrind (callgrind_annotate --tree=calling FILE)"
