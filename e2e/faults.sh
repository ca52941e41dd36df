#!/usr/bin/env bash
# The faults a platform engineer worries about, on a control plane of its own (it pauses the
# apiserver and etcd, so it never shares one with other tests): two controller replicas with
# leader election, 30 AgentSpecs under one McpTenantPolicy that keeps changing, and
#
#   1. the leader SIGKILLed mid-change, three times;
#   2. the leader SIGSTOPped past its lease, a change made meanwhile, then SIGCONTed;
#   3. kube-apiserver paused for 15 s mid-change;
#   4. etcd paused for 15 s mid-change;
#   5. both replicas killed and restarted during a burst of changes;
#   6. kube-apiserver killed and started again (every watch starts over);
#   7. 200 McpServers of which 30 % are hostile (hanging, streaming events forever, answering
#      over the byte cap), a change made meanwhile;
#   8. a maximal AgentSpec (two entries of 256 long wildcard patterns in allow and in deny, over
#      servers of 1,500 tools with 120-character names) beside the ordinary ones, a change made
#      meanwhile.
#
# After each, every AgentSpec's grants must converge to what the policy says (the time is
# printed, not asserted); in 7 every McpServer's status must say what its server does (healthy:
# Ready with its tools; hostile: the reason), in 8 the maximal AgentSpec must be published too. Throughout, a sampler checks that no grants ConfigMap is ever deleted or
# emptied. At the end the apiserver's audit log proves that no replica wrote outside its own
# term: the latest successful Lease write before each of its writes was its own, and no grants
# ConfigMap was ever deleted.
#
#   bash e2e/faults.sh            (MCP_OPERATOR_BIN picks the binary; default: a debug build)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}"
NS=faults
AGENTS=30
LEASE_SECONDS=4

say() { printf '[faults %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

bash tests/fixtures/install.sh >/dev/null
# shellcheck disable=SC1091
. tests/fixtures/installed.env
bash e2e/cluster.sh build >/dev/null
if [[ -z ${MCP_OPERATOR_BIN:-} ]]; then
  cargo build --quiet
  MCP_OPERATOR_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/mcp-operator
fi
BIN=$MCP_OPERATOR_BIN

DIR=$(mktemp -d "${TMPDIR:-/tmp}/mcp-faults.XXXXXX")
PIDS=()
declare -A REPLICA
cleanup() {
  local rc=$?
  [[ -n ${RESTARTED_APISERVER:-} ]] && kill -KILL "$RESTARTED_APISERVER" 2>/dev/null
  for p in "${PIDS[@]}" "${REPLICA[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  [[ -f $DIR/cluster/pids ]] && awk '{print $2}' "$DIR/cluster/pids" | xargs -r kill -CONT 2>/dev/null || true
  wait 2>/dev/null || true
  if ((rc != 0)); then
    KEEP_LOGS=1 bash e2e/cluster.sh down "$DIR/cluster" >/dev/null 2>&1 || true
    for f in "$DIR"/replica-*.log; do [[ -f $f ]] && { say "last lines of $f:"; tail -n 15 "$f" >&2; }; done
    say "logs kept in $DIR"
  else
    bash e2e/cluster.sh down "$DIR/cluster" >/dev/null 2>&1 || true
    rm -rf "$DIR"
  fi
  exit "$rc"
}
trap cleanup EXIT

# The audit log records every write with the user agent, which names the replica.
cat >"$DIR/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: None
EOF
say "starting a control plane of its own, with an audit log"
E2E_APISERVER_ARGS="--audit-policy-file=$DIR/audit-policy.yaml --audit-log-path=$DIR/audit.log --audit-log-maxsize=0" \
  E2E_OWNER_PID=$$ bash e2e/cluster.sh up "$DIR/cluster" >/dev/null
set -a; . "$DIR/cluster/env"; set +a
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
component_pid() { awk -v n="$1" '$1 == n {print $2}' "$DIR/cluster/pids"; }

"$BIN" crds | k apply -f - >/dev/null
k wait --for=condition=Established crd --all --timeout=60s >/dev/null
k create namespace "$NS" >/dev/null
k label namespace "$NS" mcp-operator.dev/tenant=faults >/dev/null

# fixture NAME PROGRAM ARGS...: starts a fixture server and sets FIXTURE_URL from its READY line.
fixture() {
  local name=$1; shift
  "$@" >"$DIR/$name.out" 2>"$DIR/$name.err" &
  PIDS+=($!)
  for _ in $(seq 200); do grep -q READY "$DIR/$name.out" && break; sleep 0.1; done
  FIXTURE_URL=$(awk '/READY/{print $2}' "$DIR/$name.out")
  [[ -n $FIXTURE_URL ]] || die "the $name fixture never printed READY: $(tail -n 5 "$DIR/$name.err")"
}
fixture sdk "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_SDK_SERVER"
URL=$FIXTURE_URL
fixture hostile "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_HOSTILE_SERVER" --port 0
HOSTILE=$FIXTURE_URL

# --- the objects: one server, one policy whose ceiling flips, 30 AgentSpecs
k -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: mcp-operator.dev/v1alpha1
kind: McpServer
metadata: {name: files}
spec: {url: "$URL"}
EOF
CEILING=read
set_ceiling() {
  CEILING=$1
  k apply -f - >/dev/null <<EOF
apiVersion: mcp-operator.dev/v1alpha1
kind: McpTenantPolicy
metadata: {name: faults-bound}
spec:
  namespaceSelector: {matchLabels: {mcp-operator.dev/tenant: faults}}
  rules:
    - servers: {names: [files]}
      maxAccess: $1
    - servers: {names: [wide-1, wide-2]}
      maxAccess: destructive
EOF
}
flip() { if [[ $CEILING == read ]]; then set_ceiling destructive; else set_ceiling read; fi; }
set_ceiling read
for i in $(seq -w 0 $((AGENTS - 1))); do
  printf 'apiVersion: mcp-operator.dev/v1alpha1\nkind: AgentSpec\nmetadata: {name: agent-%s}\nspec: {servers: [{name: files}], approval: none}\n---\n' "$i"
done | k -n "$NS" apply -f - >/dev/null

# --- the replicas
start_replica() {
  local id=$1 port
  port=$(bash e2e/cluster.sh free-ports 1)
  "$BIN" controller --allow-loopback --watch-namespace "$NS" --lease-namespace "$NS" \
    --identity "$id" --max-failure-backoff 4s --metrics-addr "127.0.0.1:$port" \
    --lease-duration "${LEASE_SECONDS}s" --log-format json >>"$DIR/$id.log" 2>&1 &
  REPLICA[$id]=$!
}
holder() { k -n "$NS" get lease mcp-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
start_replica replica-a
start_replica replica-b

# The tool count a grants document must have under the current ceiling, from the server's own
# catalogue (its status), so the check does not hard-code the fixture. Right after the replicas
# start the catalogue may not be read yet: waits for it (at most 60 s).
expected_tools() {
  local started=$SECONDS
  until k -n "$NS" get mcpserver files -o json | CEILING=$CEILING python3 -c '
import json, os, sys
order = {"read": 0, "write": 1, "destructive": 2}
tools = json.load(sys.stdin).get("status", {}).get("catalog", {}).get("tools")
if tools is None:
    sys.exit("the McpServer files has no catalogue in its status yet")
print(sum(1 for t in tools if order[t["access"]] <= order[os.environ["CEILING"]]))' 2>"$DIR/expected.err"; do
    ((SECONDS - started < 60)) || die "$(cat "$DIR/expected.err") after 60 s"
    sleep 0.25
  done
}

# converged: every ordinary AgentSpec (agent-NN) has a grants ConfigMap listing exactly the expected tools, and its
# status says so for its current generation.
converged() {
  local want=$1
  k -n "$NS" get configmaps,agentspecs -o json | WANT=$want AGENTS=$AGENTS python3 -c '
import json, os, sys
items = json.load(sys.stdin)["items"]
want, agents = int(os.environ["WANT"]), int(os.environ["AGENTS"])
cms = {c["metadata"]["name"]: c for c in items if c["kind"] == "ConfigMap" and c["metadata"]["name"].endswith("-mcp-grants")}
specs = [a for a in items if a["kind"] == "AgentSpec" and a["metadata"]["name"].startswith("agent-")]
bad = []
for a in specs:
    name = a["metadata"]["name"]
    cm = cms.get(name + "-mcp-grants")
    if cm is None:
        bad.append(name + ": no grants ConfigMap"); continue
    doc = json.loads(cm["data"]["grants.json"])
    got = sum(len(s.get("tools", [])) for s in doc["servers"])
    if got != want:
        bad.append(f"{name}: {got} tools granted, want {want}")
    st = a.get("status", {})
    granted, seen = st.get("grantedTools"), st.get("observedGeneration")
    if seen != a["metadata"]["generation"] or granted != want:
        bad.append(f"{name}: status says {granted} tools for generation {seen}")
if len(specs) != agents:
    bad.append(f"{len(specs)} AgentSpecs")
if bad:
    print("; ".join(bad[:3]), file=sys.stderr); sys.exit(1)'
}

# since T0: seconds since T0 (from `date +%s.%N`), one decimal.
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# await_convergence WHAT: waits (at most 120 s) for every grants document to follow the policy;
# prints the time.
await_convergence() {
  local what=$1 started=$SECONDS want
  want=$(expected_tools)
  local t0; t0=$(date +%s.%N)
  until converged "$want" 2>"$DIR/converge.err"; do
    ((SECONDS - started < 120)) || die "$what: grants did not converge within 120 s: $(cat "$DIR/converge.err")"
    sleep 0.25
  done
  printf '| %s | %s s | %s |\n' "$what" "$(since "$t0")" "$want" >>"$DIR/figures.md"
  say "$what: converged ($want tools per agent)"
}

# await_holder_other_than ID: waits for another replica to hold the Lease; prints the takeover.
await_takeover() {
  local from=$1 what=$2 t0 h
  t0=$(date +%s.%N)
  for _ in $(seq 600); do
    h=$(holder)
    if [[ -n $h && $h != "$from" ]]; then
      printf '| %s: takeover by %s | %s s | |\n' "$what" "$h" "$(since "$t0")" >>"$DIR/figures.md"
      echo "$h"; return
    fi
    sleep 0.1
  done
  die "$what: nobody took the Lease over from $from within 60 s"
}

# The sampler: a grants ConfigMap whose document is gone or lists no server is a fault. Deletions
# are checked in the audit log at the end (by anyone, the garbage collector included): a list
# read while the apiserver or etcd recovers can come back short, so a missing object is noted
# here, not judged.
sampler() {
  while :; do
    k -n "$NS" get configmaps -o json --request-timeout=5s 2>/dev/null | python3 -c '
import json, sys, time
cms = [c for c in json.load(sys.stdin)["items"] if c["metadata"]["name"].endswith("-mcp-grants")]
bad = [c["metadata"]["name"] for c in cms if not json.loads(c.get("data", {}).get("grants.json", "{}")).get("servers")]
stamp = time.strftime("%H:%M:%S")
if bad:
    print(f"{stamp} emptied: {bad}", file=open(sys.argv[2], "a"))
if len(cms) < int(sys.argv[1]):
    print(f"{stamp} a list showed {len(cms)} grants ConfigMaps", file=open(sys.argv[3], "a"))' \
      "$AGENTS" "$DIR/sampler.violations" "$DIR/sampler.notes" 2>/dev/null || true
    sleep 0.5
  done
}

printf '| step | time | tools per agent |\n|---|---:|---:|\n' >"$DIR/figures.md"
say "waiting for the first grants"
await_convergence "first grants for $AGENTS AgentSpecs"
sampler &
SAMPLER=$!
PIDS+=("$SAMPLER")

say "1. the leader killed mid-change, three times"
for round in 1 2 3; do
  leader=$(holder)
  [[ -n $leader ]] || die "nobody holds the Lease"
  flip
  kill -KILL "${REPLICA[$leader]}"
  await_takeover "$leader" "leader SIGKILLed ($round)" >/dev/null
  await_convergence "after SIGKILL of the leader ($round)"
  start_replica "$leader"
done

say "2. the leader paused past its lease, a change meanwhile, then resumed"
leader=$(holder)
kill -STOP "${REPLICA[$leader]}"
flip
await_takeover "$leader" "leader SIGSTOPped" >/dev/null
await_convergence "leader paused, standby took over"
kill -CONT "${REPLICA[$leader]}"
sleep $((LEASE_SECONDS + 1))
await_convergence "paused leader resumed"

say "3. kube-apiserver paused for 15 s mid-change"
flip
kill -STOP "$(component_pid kube-apiserver)"
sleep 15
kill -CONT "$(component_pid kube-apiserver)"
await_convergence "after 15 s of a paused apiserver"

say "4. etcd paused for 15 s mid-change"
flip
kill -STOP "$(component_pid etcd)"
sleep 15
kill -CONT "$(component_pid etcd)"
await_convergence "after 15 s of a paused etcd"

say "5. both replicas restarted during a burst of changes"
for _ in 1 2 3 4 5; do flip; sleep 0.2; done
for id in replica-a replica-b; do kill -KILL "${REPLICA[$id]}"; done
flip
start_replica replica-a
start_replica replica-b
await_convergence "both replicas restarted during a burst"

say "6. kube-apiserver restarted: every watch must start over (410 Expired)"
api_pid=$(component_pid kube-apiserver | tail -n 1)
mapfile -d '' -t api_argv <"/proc/$api_pid/cmdline"
kill -KILL "$api_pid"
sleep 3
"${api_argv[@]}" >>"$DIR/cluster/logs/kube-apiserver.log" 2>&1 </dev/null &
# Ours to stop (cleanup waits for every child; SIGKILL, its graceful shutdown takes a minute),
# and cluster.sh's to know about.
RESTARTED_APISERVER=$!
echo "kube-apiserver $!" >>"$DIR/cluster/pids"
for _ in $(seq 300); do k get --raw /readyz >/dev/null 2>&1 && break; sleep 0.2; done
k get --raw /readyz >/dev/null 2>&1 || die "the restarted kube-apiserver never became ready"
flip
await_convergence "after an apiserver restart (from readyz)"

say "7. 200 McpServers, 30 % of them hostile, a change made meanwhile"
FLEET=200
# Every tenth server from 1 to 3 is hostile: 20 hang, 20 stream events forever, 20 answer over
# the 4 MiB cap; the other 140 serve five tools each.
fleet_url() {
  case $(($1 % 10)) in
    1) echo "$HOSTILE/hang/mcp" ;;
    2) echo "$HOSTILE/sse-endless/mcp" ;;
    3) echo "$HOSTILE/huge/mcp" ;;
    *) echo "$HOSTILE/bulk/mcp?tools=5&pages=1" ;;
  esac
}
for i in $(seq -w 1 $FLEET); do
  printf 'apiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: fleet-%s, labels: {fleet: "yes"}}\nspec: {url: "%s"}\n---\n' "$i" "$(fleet_url $((10#$i)))"
done | k -n "$NS" apply -f - >/dev/null
t_fleet=$(date +%s.%N)
flip
await_convergence "beside 200 McpServers, 60 of them hostile"
# fleet_converged PART: every fleet McpServer of PART (healthy, or all) says, for its current
# generation, what its server does.
fleet_converged() {
  k -n "$NS" get mcpservers -l fleet=yes -o json | PART=$1 FLEET=$FLEET python3 -c '
import json, os, sys
want = {"hang": ("False", "Timeout"), "sse-endless": ("False", "Timeout"), "huge": ("False", "ResponseTooLarge"), "bulk": ("True", "Ready")}
items = json.load(sys.stdin)["items"]
bad = []
for s in items:
    name, mode = s["metadata"]["name"], s["spec"]["url"].split("/")[3]
    if os.environ["PART"] == "healthy" and mode != "bulk":
        continue
    st = s.get("status", {})
    ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
    got = (ready.get("status"), ready.get("reason"))
    tools = st.get("catalog", {}).get("toolCount")
    if st.get("observedGeneration") != s["metadata"]["generation"] or got != want[mode]:
        bad.append(f"{name} ({mode}): Ready {got}, want {want[mode]}")
    elif mode == "bulk" and tools != 5:
        bad.append(f"{name}: {tools} tools, want 5")
if len(items) != int(os.environ["FLEET"]):
    bad.append(f"{len(items)} fleet McpServers")
if bad:
    print(f"{len(bad)} not yet: " + "; ".join(bad[:3]), file=sys.stderr); sys.exit(1)'
}
await_fleet() {
  local part=$1 what=$2 started=$SECONDS
  until fleet_converged "$part" 2>"$DIR/fleet.err"; do
    ((SECONDS - started < 150)) || die "$what: McpServer statuses did not converge within 150 s: $(cat "$DIR/fleet.err")"
    sleep 1
  done
  printf '| %s | %s s | |\n' "$what" "$(since "$t_fleet")" >>"$DIR/figures.md"
  say "$what"
}
await_fleet healthy "140 healthy of 200 McpServers Ready (from apply)"
await_fleet all "every one of 200 McpServers says what its server does (from apply)"
k -n "$NS" delete mcpservers -l fleet=yes --wait=false >/dev/null

say "8. a maximal AgentSpec beside the ordinary ones, a change made meanwhile"
WIDE="$HOSTILE/bulk/mcp?tools=1500&pages=5&name_bytes=120"
for w in wide-1 wide-2; do
  printf 'apiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: %s}\nspec: {url: "%s"}\n---\n' "$w" "$WIDE"
done | k -n "$NS" apply -f - >/dev/null
wide_ready() {
  [[ $(k -n "$NS" get mcpservers wide-1 wide-2 -o jsonpath='{range .items[*]}{.status.catalog.toolCount}{" "}{end}') == "1500 1500 " ]]
}
t0=$(date +%s.%N)
started=$SECONDS
until wide_ready; do ((SECONDS - started < 120)) || die "the wide servers' 1,500 tools were never read"; sleep 0.5; done
printf '| two McpServers of 1,500 tools with 120-character names read | %s s | |\n' "$(since "$t0")" >>"$DIR/figures.md"
# At the CRD's maxima: 256 patterns of 127 characters in allow and in deny for each server.
# Allow's first seven patterns take 700 tools of each (1,400 in all: a grants document of 3,000
# such tools would pass the 1 MiB a ConfigMap holds); the other 249, and every deny pattern,
# chase the letters of the tools' padding and end in a letter no name holds: the worst case
# for a backtracking matcher, and none of them matches.
python3 - "$DIR/maximal.json" <<'EOF'
import json, string, sys
def chase(k, end):
    letters = string.ascii_lowercase
    return "*" + "*".join(letters[(k + j) % 26] for j in range(62)) + "*" + end
def entry(name):
    return {"name": name, "allow": [f"bulk_00{d}*" for d in range(7)] + [chase(k, "Q") for k in range(249)],
            "deny": [chase(k, "?Z") for k in range(256)]}
spec = {"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec", "metadata": {"name": "maximal"},
        "spec": {"approval": "none", "servers": [entry("wide-1"), entry("wide-2")]}}
assert all(len(p) <= 128 for e in spec["spec"]["servers"] for p in e["allow"] + e["deny"])
open(sys.argv[1], "w").write(json.dumps(spec))
EOF
t0=$(date +%s.%N)
k -n "$NS" apply -f "$DIR/maximal.json" >/dev/null
flip
await_convergence "beside a maximal AgentSpec"
maximal_published() {
  k -n "$NS" get agentspec maximal -o json | python3 -c '
import json, sys
a = json.load(sys.stdin)
st = a.get("status", {})
granted, seen = st.get("grantedTools"), st.get("observedGeneration")
if seen != a["metadata"]["generation"] or granted != 1400:
    print(f"status says {granted} tools for generation {seen}", file=sys.stderr); sys.exit(1)'
}
started=$SECONDS
until maximal_published 2>"$DIR/maximal.err" && k -n "$NS" get configmap maximal-mcp-grants >/dev/null 2>&1; do
  ((SECONDS - started < 120)) || die "the maximal AgentSpec was not published within 120 s: $(cat "$DIR/maximal.err")"
  sleep 0.5
done
printf '| the maximal AgentSpec published (1,400 tools, from apply) | %s s | |\n' "$(since "$t0")" >>"$DIR/figures.md"
say "the maximal AgentSpec is published"

kill "$SAMPLER" 2>/dev/null || true
if [[ -s $DIR/sampler.violations ]]; then
  die "grants ConfigMaps were deleted or emptied during the faults: $(sort -u "$DIR/sampler.violations" | head -n 5)"
fi

say "checking every replica write against the Lease in the audit log"
python3 - "$DIR/audit.log" <<'EOF'
import json, re, sys
from datetime import datetime
path = sys.argv[1]
def when(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
events, deleted = [], []
for line in open(path):
    e = json.loads(line)
    if e.get("stage") != "ResponseComplete":
        continue
    ref = e.get("objectRef", {})
    if e["verb"] == "delete" and ref.get("resource") == "configmaps" and ref.get("name", "").endswith("-mcp-grants"):
        deleted.append(f"{e.get('user', {}).get('username')} deleted the grants ConfigMap {ref.get('name')}")
    m = re.match(r"mcp-operator/\S+ \((.+)\)$", e.get("userAgent", ""))
    if not m:
        continue
    code = e.get("responseStatus", {}).get("code", 0)
    if not 200 <= code < 300:
        continue
    lease = e.get("objectRef", {}).get("resource") == "leases"
    events.append((when(e["requestReceivedTimestamp"]), m.group(1), lease, e["verb"], e.get("objectRef", {})))
events.sort(key=lambda e: e[0])
last_lease = None  # (time, replica)
checked, wrong = {}, list(deleted)
for t, who, lease, verb, ref in events:
    if lease:
        last_lease = (t, who)
        continue
    checked[who] = checked.get(who, 0) + 1
    # Terms never interleave: since this replica's last Lease write, nobody else wrote the Lease.
    # (Received-time gaps are not judged: requests sent before a paused apiserver stopped are
    # received when it resumes, seconds after their lease was renewed; the fence judges send
    # time, in the replica.)
    if last_lease is None or last_lease[1] != who:
        wrong.append(f"{who} {verb} {ref.get('resource')}/{ref.get('name')} at {t:.3f}; last Lease write: {last_lease}")
print(f"writes checked per replica: {checked}; outside a valid lease or deleting grants: {len(wrong)}", file=sys.stderr)
if not checked:
    print("no replica write in the audit log: the check could not fail", file=sys.stderr); sys.exit(1)
if wrong:
    print("\n".join(wrong[:10]), file=sys.stderr); sys.exit(1)
EOF

[[ -s $DIR/sampler.notes ]] && say "short lists seen while the control plane recovered (not faults): $(wc -l <"$DIR/sampler.notes")"
say "figures"
cat "$DIR/figures.md" >&2
say "PASS"
