#!/usr/bin/env bash
# Benchmark: the AgentSpec and McpTenantPolicy reconcilers (release build) on a real local
# control plane. 10 tenant namespaces, each with 10 McpServers (100 in all, on the hostile
# fixture's bulk mode) and 100 AgentSpecs using 3 of them (1,000 in all); 10 policies: one
# baseline selecting every tenant and one per tenant for 9 of them. Prints:
#   - time from `kubectl apply` until every AgentSpec is Ready with its grants published,
#   - time from one policy change (the baseline, so every AgentSpec's grants change) until every
#     AgentSpec shows its new grants digest,
#   - the controller's writes (status patches + ConfigMaps, from its /metrics) per AgentSpec in
#     each phase, and the writes and resourceVersion changes over an idle window (expected: 0),
#   - the CPU seconds of the controller (per AgentSpec), the MCP fixture, the apiserver and etcd
#     over the policy change (from /proc),
#   - then, the controller stopped, the floor: every AgentSpec's status and grants ConfigMap
#     written again, one character changed (same size), by bench/floor.py from as many clients
#     as the controller's --concurrency (32), and the policy change's time against it.
# Asserts nothing about time.
#   bash bench/grants.sh
#   TOOLS=200 IDLE=60 bash bench/grants.sh
set -euo pipefail
TENANTS=10          # namespaces
SERVERS=10          # McpServers per namespace
AGENTS=100          # AgentSpecs per namespace
TOOLS=${TOOLS:-50}  # tools per McpServer
IDLE=${IDLE:-30}
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

start_fixture url "$DIR/bulk.out" "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_HOSTILE_SERVER" --port 0
BULK="$url/bulk/mcp?tools=$TOOLS&pages=1"

start_controller

metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v k="$1" 'index($0, k) == 1 {s += $2} END {print s + 0}'; }
writes() { echo $(( $(metric 'mcp_operator_writes_total{kind="AgentSpec"}') + $(metric 'mcp_operator_writes_total{kind="GrantsConfigMap"}') )); }
reconciles() { metric 'mcp_operator_reconciles_total{kind="AgentSpec"'; }
ready_agents() { k get ags -A -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}/{.status.grantsDigest}{"\n"}{end}' | grep -c '^True/sha256:' || true; }
digests() { k get ags -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}={.status.grantsDigest}{"\n"}{end}' | sort; }
versions() { k get ags,configmaps,mcptenantpolicies -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}' | sort; }
now() { date +%s.%N; }
# Longest wait for any step, in seconds.
LIMIT=${LIMIT:-900}
all_ready() { [ "$(ready_agents)" -ge "$TOTAL" ]; }
changed_at_least() { [ "$(diff <(echo "$old") <(digests) | grep -c '^>' || true)" -ge "$1" ]; }
TOTAL=$(( TENANTS * AGENTS ))

baseline() { # $1: extra deny patterns of the baseline policy, as a YAML flow list
  printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpTenantPolicy\nmetadata: {name: baseline}\n'
  printf 'spec:\n  namespaceSelector: {matchLabels: {bench: grants}}\n'
  printf '  rules: [{servers: {selector: {}}, deny: %s}]\n' "$1"
}
{
  baseline '[]'
  for t in $(seq 1 $(( TENANTS - 1 ))); do
    printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpTenantPolicy\nmetadata: {name: tenant-%d}\n' "$t"
    printf 'spec:\n  namespaceSelector: {matchLabels: {tenant: t%d}}\n' "$t"
    printf '  rules: [{servers: {names: [s00, s01, s02, s03, s04]}, maxAccess: write}, {servers: {selector: {matchLabels: {tier: shared}}}, allow: ["bulk_000*"]}]\n'
  done
  for t in $(seq 0 $(( TENANTS - 1 ))); do
    printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata: {name: tenant-%d, labels: {bench: grants, tenant: t%d}}\n' "$t" "$t"
    for s in $(seq 0 $(( SERVERS - 1 ))); do
      tier=$([ "$s" -ge 5 ] && echo shared || echo own)
      printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: McpServer\nmetadata: {name: s%02d, namespace: tenant-%d, labels: {tier: %s}}\nspec: {url: "%s"}\n' "$s" "$t" "$tier" "$BULK"
    done
    for a in $(seq 0 $(( AGENTS - 1 ))); do
      printf -- '---\napiVersion: mcp-operator.dev/v1alpha1\nkind: AgentSpec\nmetadata: {name: agent-%03d, namespace: tenant-%d}\n' "$a" "$t"
      printf 'spec: {servers: [{name: s%02d}, {name: s%02d, deny: ["bulk_0001?"]}, {name: s%02d, allow: ["bulk_00*"]}]}\n' \
        $(( a % SERVERS )) $(( (a + 1) % SERVERS )) $(( (a + 3) % SERVERS ))
    done
  done
} >"$DIR/objects.yaml"

echo "$TENANTS namespaces, $(( TENANTS * SERVERS )) McpServers ($TOOLS tools each), $TOTAL AgentSpecs, $TENANTS McpTenantPolicies"
w0=$(writes); r0=$(reconciles)
t0=$(now)
k apply --server-side -f "$DIR/objects.yaml" >/dev/null
t_applied=$(now)
eventually "$LIMIT" "every AgentSpec to be Ready" all_ready
t1=$(now)
w1=$(writes); r1=$(reconciles)
printf 'apply: every AgentSpec Ready with grants %.1f s after kubectl apply started (the apply itself took %.1f s); %.2f writes and %.1f reconciles per AgentSpec\n' \
  "$(echo "$t1 - $t0" | bc)" "$(echo "$t_applied - $t0" | bc)" "$(echo "($w1 - $w0) / $TOTAL" | bc -l)" "$(echo "($r1 - $r0) / $TOTAL" | bc -l)"

sleep 5   # let stragglers land before the idle window
before=$(versions); wi0=$(writes)
sleep "$IDLE"
after=$(versions); wi1=$(writes)
changed=$(diff <(echo "$before") <(echo "$after") | grep -c '^>' || true)
printf 'idle %s s: %d writes, %d resourceVersions changed (AgentSpecs, ConfigMaps, policies)\n' "$IDLE" "$(( wi1 - wi0 ))" "$changed"

old=$(digests); w2=$(writes); r2=$(reconciles)
c2=$(cpu_seconds "$CTL"); f2=$(cpu_seconds "${FIXTURE_PIDS[@]}"); a2=$(cpu_seconds "$APISERVER_PID"); e2=$(cpu_seconds "$ETCD_PID")
t2=$(now)
baseline '["bulk_00000"]' | k apply --server-side -f - >/dev/null
eventually "$LIMIT" "every AgentSpec's grants to change" changed_at_least "$TOTAL"
t3=$(now)
c3=$(cpu_seconds "$CTL"); f3=$(cpu_seconds "${FIXTURE_PIDS[@]}"); a3=$(cpu_seconds "$APISERVER_PID"); e3=$(cpu_seconds "$ETCD_PID")
sleep 2
w3=$(writes); r3=$(reconciles)
CHANGE_SECONDS=$(echo "$t3 - $t2" | bc)
printf 'one policy change (baseline denies one more tool; every AgentSpec affected): all %d grants updated in %.1f s; %.2f writes and %.1f reconciles per AgentSpec; CPU: controller %.1f s (%.2f ms per AgentSpec), MCP fixture %.1f s, apiserver %.1f s, etcd %.1f s\n' \
  "$TOTAL" "$CHANGE_SECONDS" "$(echo "($w3 - $w2) / $TOTAL" | bc -l)" "$(echo "($r3 - $r2) / $TOTAL" | bc -l)" \
  "$(echo "$c3 - $c2" | bc)" "$(echo "($c3 - $c2) * 1000 / $TOTAL" | bc -l)" "$(echo "$f3 - $f2" | bc)" "$(echo "$a3 - $a2" | bc)" "$(echo "$e3 - $e2" | bc)"

# The agents of tenant-1 using one of s00..s04 (the servers the capped rule picks).
AFFECTED=0
for a in $(seq 0 $(( AGENTS - 1 ))); do
  if (( a % SERVERS < 5 || (a + 1) % SERVERS < 5 || (a + 3) % SERVERS < 5 )); then AFFECTED=$(( AFFECTED + 1 )); fi
done
old=$(digests); w4=$(writes)
t4=$(now)
printf -- 'apiVersion: mcp-operator.dev/v1alpha1\nkind: McpTenantPolicy\nmetadata: {name: tenant-1}\nspec:\n  namespaceSelector: {matchLabels: {tenant: t1}}\n  rules: [{servers: {names: [s00, s01, s02, s03, s04]}, maxAccess: read}, {servers: {selector: {matchLabels: {tier: shared}}}, allow: ["bulk_000*"]}]\n' \
  | k apply --server-side -f - >/dev/null
eventually "$LIMIT" "tenant-1's grants to change" changed_at_least "$AFFECTED"
t5=$(now)
sleep 2
w5=$(writes)
printf 'one tenant policy change (tenant-1 capped at read; %d AgentSpecs affected): updated in %.1f s; %d writes in all\n' \
  "$AFFECTED" "$(echo "$t5 - $t4" | bc)" "$(( w5 - w4 ))"
printf 'controller peak RSS %s MiB\n' "$(peak_rss_mib "$CTL")"

# The floor of the policy change: its writes (every AgentSpec's status, every grants ConfigMap),
# of the same size, with the controller stopped so that it neither competes nor writes back.
jq -s '{items: (map(.items) | add)}' \
  <(k get ags -A -o json) \
  <(k get configmaps -A -l mcp-operator.dev/agentspec -o json) >"$DIR/written.json"
stop_controller
floor rewrite 32 "$DIR/written.json"
printf 'one policy change over %d AgentSpecs: %.1f s against a floor of %.1f s for the same writes: %.1f x the floor (goal: at most 3 x)\n' \
  "$TOTAL" "$CHANGE_SECONDS" "$FLOOR_SECONDS" "$(echo "$CHANGE_SECONDS / $FLOOR_SECONDS" | bc -l)"
