#!/usr/bin/env bash
# promtool, built from the Prometheus Go module (no release tarball), for checking and
# unit-testing the chart's PrometheusRule (tests/it/chart_alerts.rs).
#
#   e2e/promtool.sh build     build (or reuse) promtool; prints its path
#   e2e/promtool.sh path      print the cached path (whether or not it is built)
#   e2e/promtool.sh paths     print every cache entry it uses (KEY=path)
#   e2e/promtool.sh ARGS...   run promtool with ARGS (builds it first if needed)
#
# Environment:
#   MCP_OPERATOR_CACHE   cache root (default ~/.cache/mcp-operator); promtool goes to
#                        $MCP_OPERATOR_CACHE/bin/promtool-<version>
#   PROMTOOL_VERSION     the github.com/prometheus/prometheus version (default below)
#   E2E_BUILD_NICE       niceness of the Go build (default 10)
#
# `go install MODULE@VERSION` builds with Prometheus' own go.mod and go.sum, checked against
# the Go checksum database: the version pins every dependency.
set -euo pipefail

PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
PROMTOOL_BIN="$CACHE/bin/promtool-$PROMTOOL_VERSION"

log() { printf '[promtool %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

build() {
  [[ -x "$PROMTOOL_BIN" ]] && return 0
  command -v go >/dev/null || die "go is not installed (needed once, to build promtool)"
  mkdir -p "$CACHE/bin"
  # Tests call this in parallel: one builds, the others wait for it.
  exec 9>"$CACHE/bin/.promtool-$PROMTOOL_VERSION.lock"
  flock 9
  [[ -x "$PROMTOOL_BIN" ]] && return 0
  local tmp start=$SECONDS
  tmp="$(mktemp -d "$CACHE/bin/.promtool-build.XXXXXX")"
  log "building promtool $PROMTOOL_VERSION (cold: several minutes on 2 cores)"
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS="-buildvcs=false" GO111MODULE=on \
    nice -n "${E2E_BUILD_NICE:-10}" \
    go install -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" \
    || { rm -rf "$tmp"; die "go install github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION failed"; }
  mv -f "$tmp/promtool" "$PROMTOOL_BIN"
  rm -rf "$tmp"
  log "built $(basename "$PROMTOOL_BIN") in $((SECONDS - start))s"
}

case "${1:-}" in
  build) build; echo "$PROMTOOL_BIN" ;;
  path) echo "$PROMTOOL_BIN" ;;
  # Every cache entry it uses (KEY=path): scripts/cache.sh keeps what some script names.
  paths) echo "PROMTOOL=$PROMTOOL_BIN"; echo "PROMTOOL_LOCK=$CACHE/bin/.promtool-$PROMTOOL_VERSION.lock" ;;
  "") sed -n '2,16p' "$0" >&2; exit 2 ;;
  # The build lock (fd 9) is closed first: promtool runs in parallel.
  *) build; exec 9>&-; exec "$PROMTOOL_BIN" "$@" ;;
esac
