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
