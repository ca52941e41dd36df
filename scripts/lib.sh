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
# Processes a script starts and records under $PROCS_DIR (set it first; logs in
# $PROCS_DIR/logs/NAME.log, pids in $PROCS_DIR/pids), as e2e/cluster.sh and e2e/node.sh do:
#   start NAME CMD...              run CMD in the background, logging, and record its pid. It
#                                  stays in the caller's process group, so an interrupt of the
#                                  caller (Ctrl-C) reaches it too.
#   pid_of NAME, alive NAME        its recorded pid; whether it still runs
#   wait_for NAME WHAT CMD...      poll CMD until it succeeds (within $E2E_UP_TIMEOUT, default
#                                  120 s); return 1 when NAME exited or the time ran out, its
#                                  log's tail printed first, or 75 when NAME exited having lost
#                                  a port and $PORT_RACE_RETRY is set (the caller retries)
#   terminate PID...               TERM, KILL whatever still runs after 10 s, return when all
#                                  are gone
#   kubeconfig_file FILE SERVER CA CERT KEY USER
#                                  a kubeconfig (mode 600) for SERVER, the CA and the user's
#                                  client certificate and key embedded
#   go_build DIR PACKAGE OUT [LDFLAGS...]
#                                  build a Go package of the module in DIR into OUT once (kept
#                                  when OUT exists), statically, go.mod/go.sum as the pin
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

start() {
  local name="$1"; shift
  "$@" >>"$PROCS_DIR/logs/$name.log" 2>&1 </dev/null &
  echo "$name $!" >>"$PROCS_DIR/pids"
}

pid_of() { awk -v n="$1" '$1 == n {print $2}' "$PROCS_DIR/pids" 2>/dev/null; }
alive() { local p; p="$(pid_of "$1")"; [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }

wait_for() {
  local name="$1" what="$2"; shift 2
  local deadline=$((SECONDS + ${E2E_UP_TIMEOUT:-120})) log="$PROCS_DIR/logs/$name.log"
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      if [[ -n ${PORT_RACE_RETRY:-} ]] && grep -qi 'address already in use' "$log" 2>/dev/null; then
        return 75
      fi
      say "$name exited; last lines of $log:"
      tail -n 25 "$log" >&2 || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      say "timed out waiting for $what; last lines of $log:"
      tail -n 25 "$log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

terminate() {
  (($# > 0)) || return 0
  local pid left deadline=$((SECONDS + 10))
  kill -TERM "$@" 2>/dev/null || true
  while :; do
    left=()
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
    ((${#left[@]} == 0)) && return 0
    if ((SECONDS >= deadline)); then kill -KILL "${left[@]}" 2>/dev/null || true; fi
    sleep 0.1
  done
}

go_build() {
  local dir="$1" pkg="$2" out="$3"; shift 3
  [[ -x $out ]] && return 0
  command -v go >/dev/null || die "go is not installed (needed once, to build $(basename "$out"))"
  mkdir -p "$(dirname "$out")"
  say "building $(basename "$out") (a cold build takes many minutes; the Go build cache makes rebuilds fast)"
  local started=$SECONDS tmp="$out.tmp.$$"
  (
    cd "$dir"
    # -mod=readonly: the committed go.mod/go.sum are the pin; never rewrite them.
    CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
      nice -n "${E2E_BUILD_NICE:-10}" \
      go build -trimpath -ldflags "-s -w $*" -o "$tmp" "$pkg"
  ) || { rm -f "$tmp"; die "go build $pkg failed"; }
  mv -f "$tmp" "$out"
  say "built $(basename "$out") in $((SECONDS - started))s"
}

kubeconfig_file() {
  local file="$1" server="$2" ca="$3" cert="$4" key="$5" user="$6"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$ca")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$cert")
    client-key-data: $(base64 -w0 <"$key")
contexts:
- name: e2e
  context:
    cluster: e2e
    user: $user
    namespace: default
current-context: e2e
EOF
  chmod 600 "$file"
}
