#!/usr/bin/env bash
# helm, built from its Go module (no download of a release tarball), for
# rendering and linting charts/mcp-operator in tests and CI.
#
#   e2e/helm.sh build     build (or reuse) helm; prints its path
#   e2e/helm.sh path      print the cached path (whether or not it is built)
#   e2e/helm.sh paths     print every cache entry it uses (KEY=path)
#   e2e/helm.sh ARGS...   run helm with ARGS (builds it first if needed)
#
# Environment:
#   MCP_OPERATOR_CACHE   cache root (default ~/.cache/mcp-operator); helm goes to
#                        $MCP_OPERATOR_CACHE/bin/helm-<version>
#   HELM_VERSION         the helm.sh/helm/v3 version to build (default below)
#   E2E_BUILD_NICE       niceness of the Go build (default 10)
#
# `go install MODULE@VERSION` builds with helm's own go.mod and go.sum, checked
# against the Go checksum database: the version pins every dependency.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
HELM_BIN="$CACHE/bin/helm-$HELM_VERSION"

log() { printf '[helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

build() {
  [[ -x "$HELM_BIN" ]] && return 0
  command -v go >/dev/null || die "go is not installed (needed once, to build helm)"
  mkdir -p "$CACHE/bin"
  # Tests call this in parallel: one builds, the others wait for it.
  if command -v flock >/dev/null; then
    exec 9>"$CACHE/bin/.helm-$HELM_VERSION.lock"
    flock 9
    [[ -x "$HELM_BIN" ]] && return 0
  fi
  local tmp start=$SECONDS major="${HELM_VERSION%%.*}"
  tmp="$(mktemp -d "$CACHE/bin/.helm-build.XXXXXX")"
  log "building helm $HELM_VERSION (cold: a few minutes on 2 cores)"
  # As helm's Makefile does: the version `helm version` reports, and the Kubernetes version
  # `helm template` and `helm lint` assume (from the client-go helm is built with; the
  # default would be 1.20).
  local gomod k8s_minor
  gomod="$(cd "$tmp" && go mod download -json "helm.sh/helm/$major@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  k8s_minor="$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2]; exit }' "$gomod")"
  [[ -n "$k8s_minor" ]] || { rm -rf "$tmp"; die "cannot read the client-go version from helm's go.mod ($gomod)"; }
  local ld="-s -w -X helm.sh/helm/$major/internal/version.version=$HELM_VERSION"
  ld+=" -X helm.sh/helm/$major/internal/version.gitTreeState=clean"
  local pkg
  for pkg in pkg/lint/rules pkg/chartutil; do
    ld+=" -X helm.sh/helm/$major/$pkg.k8sVersionMajor=1 -X helm.sh/helm/$major/$pkg.k8sVersionMinor=$k8s_minor"
  done
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS="-buildvcs=false" GO111MODULE=on \
    nice -n "${E2E_BUILD_NICE:-10}" \
    go install -trimpath -ldflags "$ld" "helm.sh/helm/$major/cmd/helm@$HELM_VERSION" \
    || { rm -rf "$tmp"; die "go install helm.sh/helm/$major/cmd/helm@$HELM_VERSION failed"; }
  mv -f "$tmp/helm" "$HELM_BIN"
  rm -rf "$tmp"
  log "built $(basename "$HELM_BIN") in $((SECONDS - start))s"
}

case "${1:-}" in
  build) build; echo "$HELM_BIN" ;;
  path) echo "$HELM_BIN" ;;
  # Every cache entry it uses (KEY=path): scripts/cache.sh keeps what some script names.
  paths) echo "HELM=$HELM_BIN"; echo "HELM_LOCK=$CACHE/bin/.helm-$HELM_VERSION.lock" ;;
  "") sed -n '2,18p' "$0" >&2; exit 2 ;;
  # The build lock (fd 9) is closed first: helm runs in parallel.
  *) build; exec 9>&-; exec "$HELM_BIN" "$@" ;;
esac
