#!/usr/bin/env bash
# The cache's guard: a test may read from the cache only what a script of this checkout puts
# there. Every script that writes into the cache says which entries it uses (its `paths` verb);
# `set-aside` moves everything else out of the way before the tests run, so a file that only an
# old checkout wrote (as tests/fixtures/fixtures.env once was) cannot stand in for an install step.
# The build caches themselves (the Kubernetes binaries, helm, promtool, the fixtures' venv and
# node_modules) are named by their scripts and stay: only what nobody names moves.
#
#   scripts/cache.sh claimed      print the entries this checkout's scripts name (absolute paths)
#   scripts/cache.sh set-aside    move every other entry under the cache to
#                                 $CACHE/.set-aside/<time>/ (nothing is deleted), saying what moved
#
# Entries changed in the last hour are left where they are: another checkout's build may be
# writing them right now (a stale file is an old one). Set-aside copies older than 7 days go.
#
# Environment: MCP_OPERATOR_CACHE (default ~/.cache/mcp-operator).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"

claimed() {
  {
    bash "$ROOT/e2e/cluster.sh" paths
    bash "$ROOT/e2e/node.sh" paths
    bash "$ROOT/e2e/helm.sh" paths
    bash "$ROOT/e2e/promtool.sh" paths
    bash "$ROOT/tests/fixtures/otelcol.sh" paths
    bash "$ROOT/tests/fixtures/install.sh" --paths
  } | sed 's/^[A-Z_]*=//'
  # Not read by any test, kept for their owners: the demo's state (e2e/demo.sh, which may be
  # running with --keep) and the benchmark's peer build (bench/sidecar.sh).
  echo "$CACHE/demo"
  echo "$CACHE/thv"
  echo "$CACHE/.set-aside"
}

set_aside() {
  [[ -d $CACHE ]] || return 0
  local list
  list="$(mktemp)"
  claimed >"$list"
  python3 - "$CACHE" "$list" <<'PY'
import os, shutil, sys, time
cache, listed = sys.argv[1], sys.argv[2]
claimed = {os.path.normpath(l.strip()) for l in open(listed) if l.strip()}
# A directory on the way to a claimed entry is walked into; a claimed entry is kept whole.
parents = set()
for path in claimed:
    p = os.path.dirname(path)
    while p.startswith(cache) and p not in parents:
        parents.add(p)
        p = os.path.dirname(p)
now = time.time()
stamp = time.strftime("%Y%m%dT%H%M%S")
aside = os.path.join(cache, ".set-aside")
moved = []

def recent(path):
    # The newest change anywhere below path: a build writing into it now keeps it.
    newest = os.lstat(path).st_mtime
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
                except FileNotFoundError:
                    pass
    return now - newest < 3600

def walk(directory):
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if path in claimed:
            continue
        if path in parents and os.path.isdir(path) and not os.path.islink(path):
            walk(path)
            continue
        if recent(path):
            continue
        target = os.path.join(aside, stamp, os.path.relpath(path, cache))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(path, target)
        moved.append(os.path.relpath(path, cache))

walk(cache)
if os.path.isdir(aside):
    for old in os.listdir(aside):
        path = os.path.join(aside, old)
        if now - os.lstat(path).st_mtime > 7 * 86400:
            shutil.rmtree(path, ignore_errors=True)
for rel in moved:
    print(f"set aside {rel}: no script of this checkout names it (now in .set-aside/{stamp}/)")
PY
  rm -f "$list"
}

case "${1:-}" in
  claimed) claimed ;;
  set-aside) set_aside ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
