# Shared by the scripts of e2e/ and bench/ (sourced, not run): one way to talk, to fail, to wait
# and to start a fixture server.
#   say MESSAGE...                 one timestamped line on stderr, tagged with $SAY_TAG
#   die MESSAGE...                 say "error: ..." and exit 1
#   eventually SECONDS WHAT CMD... run CMD until it succeeds; after SECONDS, die naming WHAT
#                                  (and print the tail of $EVENTUALLY_LOG, when set, first)
#   start_fixture VAR LOG CMD...   start a fixture server in the background, wait for its
#                                  "READY <url>" line and set VAR to the URL; die when the fixture
#                                  exits or never says READY. Its pid is appended to the array
#                                  FIXTURE_PIDS (the caller stops them). Not for $(...): a
#                                  subshell would lose the pid.
SAY_TAG=${SAY_TAG:-$(basename "${0:-script}" .sh)}
FIXTURE_PIDS=(${FIXTURE_PIDS[@]+"${FIXTURE_PIDS[@]}"})
FIXTURE_READY_SECONDS=${FIXTURE_READY_SECONDS:-30}

say() { printf '[%s %s] %s\n' "$SAY_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }

eventually() {
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@"; do
    if (( $(date +%s) >= deadline )); then
      if [[ -n ${EVENTUALLY_LOG:-} && -f $EVENTUALLY_LOG ]]; then
        say "last lines of $EVENTUALLY_LOG:"
        tail -20 "$EVENTUALLY_LOG" >&2
      fi
      die "gave up after ${limit}s waiting for $what"
    fi
    sleep 0.5
  done
}

start_fixture() {
  local var=$1 log=$2; shift 2
  "$@" >"$log" 2>&1 &
  local pid=$!
  FIXTURE_PIDS+=("$pid")
  local deadline=$(( $(date +%s) + FIXTURE_READY_SECONDS ))
  until grep -q '^READY ' "$log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$log" >&2
      die "fixture '$*' exited before it said READY (log: $log)"
    fi
    if (( $(date +%s) >= deadline )); then
      tail -20 "$log" >&2
      die "fixture '$*' did not say READY within ${FIXTURE_READY_SECONDS}s (log: $log)"
    fi
    sleep 0.1
  done
  local ready_url
  ready_url=$(awk '/^READY /{print $2; exit}' "$log")
  [[ -n $ready_url ]] || die "fixture '$*' said READY without a URL (log: $log)"
  printf -v "$var" '%s' "$ready_url"
}
