#!/usr/bin/env bash
# The demo: a real local control plane with mcp-operator running against it, and an agent whose
# tools it narrows.
#
#   e2e/demo.sh [DIR]          build what is needed, start the control plane, run the operator,
#                              start the example MCP servers, apply examples/, wait, print
#                              `kubectl get mcp -A` and the resulting status, then run an agent
#                              through its sidecar: it lists its tools, calls a granted one, is
#                              refused one, calls one that needs approval (its client says yes),
#                              and sees its tools narrow when the demo changes the example
#                              tenant policy; then stop everything
#   e2e/demo.sh --keep [DIR]   the same, but leave it all running and print how to reach it
#   e2e/demo.sh down [DIR]     stop a kept demo (and its node): nothing of it is left
#
# Where it runs, said at the start:
#   real pods   when this machine can run the e2e node (`e2e/node.sh check`: root, the node's
#               Debian packages): a kubelet node, the Helm chart installed with `helm install
#               --wait` from an image of the release binary (`e2e/image.sh operator`), the
#               example servers on the node's address, and the agent in a pod labelled for
#               injection (the official TypeScript SDK client, `e2e/image.sh node`) beside the
#               sidecar the operator's webhook injected
#   local       otherwise (or with MCP_DEMO_LOCAL=1): the controller and the sidecar as local
#               processes, the grants laid out as the kubelet would mount them, the example
#               servers on 127.0.0.1, the agent the official Python SDK client
#
# DIR defaults to ${MCP_OPERATOR_CACHE:-~/.cache/mcp-operator}/demo. Needs: cargo (or
# MCP_OPERATOR_BIN=path/to/mcp-operator: run locally, or packed into the image), and what
# e2e/cluster.sh needs (and e2e/node.sh, for real pods).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CLUSTER="$HERE/cluster.sh"
NODE="$HERE/node.sh"
STORY="$HERE/demo_story.py"

SAY_TAG=demo
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

# What the agent does, in both modes (tests/fixtures/ts_client.mjs and sdk_client.py take the
# same steps). The wait_list_changed step prints {"listening":true} once it listens: then the
# demo changes the policy.
AGENT_STEPS='[{"op":"list"},{"op":"call","name":"files__read_file","arguments":{"path":"/demo.txt"}},{"op":"call","name":"files__write_file","arguments":{"path":"/demo.txt","content":"x"}},{"op":"call","name":"admin__put_object","arguments":{"key":"demo","body":"x"}},{"op":"wait_list_changed","timeout":60,"trigger":true},{"op":"call","name":"admin__put_object","arguments":{"key":"demo","body":"y"}}]'
AGENT_ANSWERS='["accept"]'
# The example policy's change: files-admin (the admin tier, rule 1) capped at read.
POLICY_PATCH='[{"op":"add","path":"/spec/rules/1/maxAccess","value":"read"}]'
AGENT=research-assistant
RELEASE=mcp-operator

# demo_fixtures DIR HOST: the example MCP servers (tests/fixtures/sdk_server.py, the official
# Python SDK) on HOST:18080 (files) and HOST:18081 (files-admin, bearer token demo-token), both
# started at once, recorded in DIR/demo.pids; returns once each printed its READY line, dies
# loudly otherwise.
demo_fixtures() {
  local dir="$1" host="$2" name
  "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_SDK_SERVER" --host "$host" --port 18080 \
    >"$dir/logs/files.log" 2>&1 </dev/null &
  echo "files $!" >>"$dir/demo.pids"
  FIXTURE_PIDS+=("$!")
  "$MCP_FIXTURES_PYTHON" "$MCP_FIXTURES_SDK_SERVER" --host "$host" --port 18081 --bearer demo-token \
    >"$dir/logs/files-admin.log" 2>&1 </dev/null &
  echo "files-admin $!" >>"$dir/demo.pids"
  FIXTURE_PIDS+=("$!")
  local deadline=$((SECONDS + FIXTURE_READY_SECONDS))
  for name in files files-admin; do
    until grep -q '^READY ' "$dir/logs/$name.log" 2>/dev/null; do
      if ((SECONDS >= deadline)) || ! grep -q "^$name " "$dir/demo.pids" ||
        ! kill -0 "$(awk -v n="$name" '$1 == n { print $2 }' "$dir/demo.pids")" 2>/dev/null; then
        tail -20 "$dir/logs/$name.log" >&2
        die "the example server $name did not start (log: $dir/logs/$name.log; is port $([[ $name == files ]] && echo 18080 || echo 18081) taken?)"
      fi
      sleep 0.1
    done
    say "$name: $(awk '/^READY /{print $2; exit}' "$dir/logs/$name.log")"
  done
}

# choose_mode: MODE=pods when the node can run here, else MODE=local; WHY says why.
choose_mode() {
  if [[ -n ${MCP_DEMO_LOCAL:-} ]]; then
    MODE=local WHY="MCP_DEMO_LOCAL is set"
  elif WHY="$("$NODE" check 2>&1)"; then
    MODE=pods
  else
    MODE=local
  fi
}

demo_up() {
  local dir="$1"
  choose_mode
  if [[ $MODE == pods ]]; then
    say "in real pods ($WHY): a kubelet node, the Helm chart, an agent pod with the injected sidecar"
  else
    say "with the operator and the sidecar as local processes, not in pods (e2e/node.sh check: $WHY)"
  fi
  "$CLUSTER" build >/dev/null
  eval "$("$ROOT/tests/fixtures/install.sh")"
  local op="${MCP_OPERATOR_BIN:-}"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [[ $MODE == pods ]]; then
    "$NODE" build >/dev/null
    bash "$HERE/helm.sh" build >/dev/null
    mkdir -p "$dir/images"
    if [[ -n $op ]]; then
      say "packing $op into the operator image"
    else
      say "building the operator image from the release binary (cargo build --release: minutes the first time, seconds after)"
    fi
    OPERATOR_IMAGE="$(bash "$HERE/image.sh" operator "$dir/images/operator.tar" ${op:+"$op"})"
    AGENT_IMAGE="$(bash "$HERE/image.sh" node "$dir/images/node.tar")"
  elif [[ -z $op ]]; then
    say "building mcp-operator"
    (cd "$ROOT" && cargo build --quiet --bin mcp-operator)
    op="$ROOT/target/debug/mcp-operator"
  fi

  "$CLUSTER" up "$dir"
  # Whatever fails from here on: stop what was started.
  DEMO_DIR="$dir"
  trap 'rc=$?; if ((rc != 0)); then say "failed; stopping what was started$([[ $MODE == pods ]] && echo " (MCP_DEMO_LOCAL=1 runs the demo without the node)")"; for p in ${FIXTURE_PIDS[@]+"${FIXTURE_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done; demo_down "$DEMO_DIR"; fi' EXIT
  set -a; . "$dir/env"; set +a
  k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

  # Where the example servers listen and the McpServers point: loopback for a local operator;
  # the node's bridge address for pods (in a pod, 127.0.0.1 is the pod itself, and the
  # operator in a cluster refuses loopback).
  local host=127.0.0.1
  if [[ $MODE == pods ]]; then
    operator_in_pods "$dir"
    host="$E2E_NODE_IP"
  else
    operator_local "$dir" "$op"
  fi

  say "starting the example MCP servers (the official Python SDK) on $host:18080 and :18081"
  demo_fixtures "$dir" "$host"

  if [[ $host == 127.0.0.1 ]]; then
    say "applying examples/"
    k apply -R -f "$ROOT/examples"
  else
    say "applying examples/ (the local servers' URLs moved from 127.0.0.1 to the node's address $host)"
    local f
    for f in "$ROOT"/examples/*.yaml; do
      sed "s#http://127\.0\.0\.1:\(1808[0-9]\)/#http://$host:\1/#" "$f" | k apply -f -
    done
  fi

  say "waiting for every McpServer to report Ready (True or False)"
  local deadline=$((SECONDS + 90)) pending
  while :; do
    pending=$(k get mcpservers -A -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '=$' || true)
    ((pending == 0)) && break
    ((SECONDS < deadline)) || { say "$pending McpServer(s) still without a Ready condition after 90s"; break; }
    sleep 1
  done

  echo
  echo "\$ kubectl get mcp -A"
  k get mcp -A
  echo
  echo "\$ kubectl get mcpservers -A   (the Ready condition's message)"
  k get mcpservers -A -o custom-columns='NAMESPACE:.metadata.namespace,NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,REASON:.status.conditions[?(@.type=="Ready")].reason,MESSAGE:.status.conditions[?(@.type=="Ready")].message'
  echo
  echo "\$ kubectl get mcpserver files -n mcp-demo -o jsonpath='{.status.catalog.tools[*].name}'"
  k get mcpserver files -n mcp-demo -o jsonpath='{.status.catalog.tools[*].name}{"\n"}'
  echo
  echo "\$ kubectl describe mcpserver files-admin -n mcp-demo   (conditions and events)"
  k describe mcpserver files-admin -n mcp-demo | sed -n '/^  Conditions:/,$p'
  echo
  echo "\$ kubectl get configmap $AGENT-mcp-grants -n mcp-demo -o jsonpath='{.data.grants\.json}'   (the published grants, summed up)"
  if wait_grants; then
    k get configmap "$AGENT-mcp-grants" -n mcp-demo -o jsonpath='{.data.grants\.json}' | python3 "$STORY" grants
    if [[ $MODE == pods ]]; then
      agent_in_pod "$dir"
    else
      agent_through_local_sidecar "$dir" "$op"
    fi
  else
    echo "(not published after 60s: no agent to run; see $dir/logs)"
  fi

  trap - EXIT
  say "the story took ${SECONDS}s from the start"
  if ((KEEP)); then
    cat >&2 <<MSG

The demo keeps running$([[ $MODE == pods ]] && echo " (in real pods on the node $E2E_NODE_IP)"). Reach the cluster with:

  export KUBECONFIG=$KUBECONFIG PATH=$dir/bin:\$PATH
  kubectl get mcp -A
  kubectl get pods -A
$(if [[ $MODE == pods ]]; then
  echo "  kubectl logs -n $RELEASE deploy/$RELEASE"
  echo "  kubectl logs -n mcp-demo $AGENT -c mcp-sidecar"
else
  echo "  tail -f $dir/logs/mcp-operator.log $dir/logs/sidecar.log"
fi)

The example policy demo-tenants keeps its change (files-admin capped at read).
Stop it with: $0 down $dir
MSG
  else
    say "stopping everything (run with --keep to leave it running)"
    demo_down "$dir" >/dev/null 2>&1
  fi
}

# operator_local DIR BIN: the CRDs from the binary, the controller as a local process.
operator_local() {
  local dir="$1" op="$2" metrics
  say "installing the CRDs"
  "$op" crds | k apply -f -
  k wait --for=condition=Established crd --all --timeout=60s >/dev/null
  metrics="$("$CLUSTER" free-ports 1)"
  say "starting the controller (metrics on 127.0.0.1:$metrics, log: $dir/logs/mcp-operator.log)"
  KUBECONFIG="$KUBECONFIG" "$op" controller --allow-loopback --metrics-addr "127.0.0.1:$metrics" \
    >>"$dir/logs/mcp-operator.log" 2>&1 </dev/null &
  echo "mcp-operator $!" >>"$dir/demo.pids"
}

# operator_in_pods DIR: the node, the images in its containerd, and the chart installed on it
# as users install it (its CRDs, two replicas, leader election, the injection webhook).
operator_in_pods() {
  local dir="$1" started=$SECONDS
  say "starting the node (kubelet, kube-scheduler, containerd, runc)"
  "$NODE" up "$dir"
  # KEY=value lines, not shell: CTR and CRICTL are command lines.
  E2E_NODE_IP="$(sed -n 's/^E2E_NODE_IP=//p' "$dir/node/env")"
  E2E_NODE_NAME="$(sed -n 's/^E2E_NODE_NAME=//p' "$dir/node/env")"
  say "the node $E2E_NODE_NAME is Ready $((SECONDS - started))s after start"
  "$NODE" import "$dir" "$dir/images/operator.tar" "$dir/images/node.tar" >/dev/null
  rm -rf "$dir/images"
  local installed=$SECONDS
  echo
  echo "\$ helm install $RELEASE charts/mcp-operator --namespace $RELEASE --create-namespace --wait --set image.repository=${OPERATOR_IMAGE%:*} --set image.tag=${OPERATOR_IMAGE##*:} --set image.pullPolicy=Never"
  KUBECONFIG="$KUBECONFIG" bash "$HERE/helm.sh" install "$RELEASE" "$ROOT/charts/mcp-operator" \
    --namespace "$RELEASE" --create-namespace --wait --timeout 3m \
    --set "image.repository=${OPERATOR_IMAGE%:*}" --set "image.tag=${OPERATOR_IMAGE##*:}" \
    --set image.pullPolicy=Never | sed -n '/^NAME:/,/^REVISION:/p'
  say "installed and Ready in $((SECONDS - installed))s"
  echo
  echo "\$ kubectl get pods -n $RELEASE"
  k get pods -n "$RELEASE" -o wide
  # The webhook answers once its replicas have put their CA into the webhook configuration.
  local deadline=$((SECONDS + 60))
  until [[ -n $(k get mutatingwebhookconfiguration "$RELEASE" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || die "the injection webhook has no caBundle after 60s (kubectl logs -n $RELEASE deploy/$RELEASE)"
    sleep 0.5
  done
}

wait_grants() {
  local deadline=$((SECONDS + 60))
  until k get configmap "$AGENT-mcp-grants" -n mcp-demo >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

say_agent_plan() {
  echo "  It lists its tools, calls files__read_file (granted), files__write_file (not granted),"
  echo "  admin__put_object (needs approval: its client is asked and says yes), then waits for"
  echo "  list_changed while the demo caps files-admin at read in the example policy, and calls"
  echo "  admin__put_object again."
}

# change_policy: the example tenant policy's change, shown as the command a person would run.
change_policy() {
  echo
  echo "\$ kubectl patch mcptenantpolicy demo-tenants --type=json -p '$POLICY_PATCH'   (files-admin: read only)"
  k patch mcptenantpolicy demo-tenants --type=json -p "$POLICY_PATCH"
}

# agent_in_pod DIR: a pod labelled for injection; the webhook adds the sidecar; the agent in it
# is the official TypeScript SDK client from the node image, pointed at $(MCP_SERVER_URL).
agent_in_pod() {
  local dir="$1"
  echo
  echo "\$ kubectl apply -f -   (a pod labelled mcp-operator.dev/agent: $AGENT; its agent: the official TypeScript SDK client)"
  k apply -f - <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $AGENT
  namespace: mcp-demo
  labels:
    mcp-operator.dev/agent: $AGENT
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
    - name: agent
      image: $AGENT_IMAGE
      imagePullPolicy: Never
      args: [/opt/mcp/agent/ts_client.mjs, "\$(MCP_SERVER_URL)", '$AGENT_STEPS', '$AGENT_ANSWERS']
POD
  echo
  echo "\$ kubectl get pod $AGENT -n mcp-demo -o jsonpath=...   (what the webhook injected)"
  k get pod "$AGENT" -n mcp-demo -o jsonpath='  init containers: {.spec.initContainers[*].name} (restartPolicy {.spec.initContainers[0].restartPolicy}: a native sidecar)
  volumes: {.spec.volumes[*].name}
  the agent'"'"'s MCP_SERVER_URL: {.spec.containers[0].env[?(@.name=="MCP_SERVER_URL")].value}
'
  echo
  echo "The agent, in the pod, through its sidecar:"
  say_agent_plan
  local deadline=$((SECONDS + 120)) log=""
  until grep -q '"listening":true' <<<"$log"; do
    if ((SECONDS >= deadline)); then
      k describe pod "$AGENT" -n mcp-demo | tail -20 >&2
      die "the agent pod did not get to its wait for list_changed within 120s (kubectl logs -n mcp-demo $AGENT -c agent)"
    fi
    sleep 0.5
    log="$(k logs -n mcp-demo "$AGENT" -c agent 2>/dev/null || true)"
  done
  change_policy
  local phase="" changed=$SECONDS
  deadline=$((SECONDS + 120))
  until [[ $phase == Succeeded || $phase == Failed ]]; do
    ((SECONDS < deadline)) || die "the agent pod has not finished 120s after the policy changed"
    sleep 0.5
    phase="$(k get pod "$AGENT" -n mcp-demo -o jsonpath='{.status.phase}')"
  done
  log="$(k logs -n mcp-demo "$AGENT" -c agent)"
  printf '%s\n' "$log" >"$dir/logs/agent.log"
  echo
  echo "What the agent saw (its raw output: $dir/logs/agent.log):"
  if [[ $phase != Succeeded ]]; then
    printf '%s\n' "$log" | tail -20
    die "the agent pod failed"
  fi
  python3 "$STORY" agent "$AGENT_STEPS" <<<"$log"
  echo "  (the policy reached the running pod in under $((SECONDS - changed + 1))s: the operator republished the grants"
  echo "  ConfigMap, the kubelet updated the pod's volume, the sidecar narrowed and told the agent)"
  echo
  echo "\$ kubectl logs -n mcp-demo $AGENT -c mcp-sidecar   (its audit lines: one per call)"
  k logs -n mcp-demo "$AGENT" -c mcp-sidecar | python3 "$STORY" audit
}

# agent_through_local_sidecar DIR BIN: the agent's side without a node. Lays the grants
# ConfigMap and the Secret it names out as the kubelet mounts them (a timestamped directory
# behind a `..data` symlink, swapped when the ConfigMap changes, as the kubelet does), runs
# `mcp-operator sidecar` on them, and lets an agent built on the official Python SDK client go
# through the same steps as the pod's.
agent_through_local_sidecar() {
  local dir="$1" op="$2" grants="$1/agent/grants" creds="$1/agent/credentials" port mport
  rm -rf "$dir/agent"
  mkdir -p "$creds/secrets/files-admin-token"
  mount_grants "$grants" 0
  k get secret files-admin-token -n mcp-demo -o jsonpath='{.data.token}' | base64 -d \
    >"$creds/secrets/files-admin-token/token"
  read -r port mport <<<"$("$CLUSTER" free-ports 2)"
  say "starting the agent's sidecar on http://127.0.0.1:$port/mcp (log: $dir/logs/sidecar.log)"
  # Run by hand, without --grants-verify-keys: it obeys the grants unsigned and says so in its
  # log (the injected sidecar, in pods, is given the operator's public keys and obeys only
  # signed grants).
  "$op" sidecar --grants-file "$grants/grants.json" --credentials-dir "$creds" \
    --listen "127.0.0.1:$port" --metrics-addr "127.0.0.1:$mport" --agent "$AGENT" \
    --allow-loopback --log-format json >>"$dir/logs/sidecar.log" 2>&1 </dev/null &
  echo "sidecar $!" >>"$dir/demo.pids"
  local deadline=$((SECONDS + 30))
  until curl -sf "http://127.0.0.1:$mport/readyz" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "the sidecar is not ready after 30s: $(curl -s "http://127.0.0.1:$mport/readyz")"
    sleep 0.2
  done
  echo
  echo "An agent (the official Python SDK client) through the sidecar at http://127.0.0.1:$port/mcp:"
  say_agent_plan
  "$MCP_FIXTURES_PYTHON" "$ROOT/tests/fixtures/sdk_client.py" "http://127.0.0.1:$port/mcp" auto \
    "$AGENT_STEPS" "$AGENT_ANSWERS" >"$dir/logs/agent.log" 2>&1 </dev/null &
  local agent=$!
  echo "agent $agent" >>"$dir/demo.pids"
  deadline=$((SECONDS + 60))
  until grep -q '"listening": *true' "$dir/logs/agent.log"; do
    kill -0 "$agent" 2>/dev/null || { tail -20 "$dir/logs/agent.log" >&2; die "the agent exited early"; }
    ((SECONDS < deadline)) || die "the agent did not get to its wait for list_changed within 60s"
    sleep 0.2
  done
  local before
  before="$(k get configmap "$AGENT-mcp-grants" -n mcp-demo -o jsonpath='{.metadata.resourceVersion}')"
  change_policy
  # The kubelet's part: the new ConfigMap content, swapped in behind ..data.
  deadline=$((SECONDS + 60))
  while [[ $(k get configmap "$AGENT-mcp-grants" -n mcp-demo -o jsonpath='{.metadata.resourceVersion}') == "$before" ]]; do
    ((SECONDS < deadline)) || die "the operator did not republish the grants within 60s of the policy change"
    sleep 0.5
  done
  mount_grants "$grants" 1
  echo "(the republished grants ConfigMap laid out behind ..data, as the kubelet updates a pod's volume)"
  wait "$agent" || { tail -20 "$dir/logs/agent.log" >&2; die "the agent failed"; }
  echo
  echo "What the agent saw (its raw output: $dir/logs/agent.log):"
  python3 "$STORY" agent "$AGENT_STEPS" <"$dir/logs/agent.log"
  echo
  echo "The sidecar's audit lines ($dir/logs/sidecar.log):"
  python3 "$STORY" audit <"$dir/logs/sidecar.log"
}

# mount_grants DIR N: the grants ConfigMap's content in DIR/..N, then ..data pointed at it
# atomically (a rename), as the kubelet updates a ConfigMap volume.
mount_grants() {
  local grants="$1" n="$2"
  mkdir -p "$grants/..$n"
  k get configmap "$AGENT-mcp-grants" -n mcp-demo -o jsonpath='{.data.grants\.json}' \
    >"$grants/..$n/grants.json"
  ln -sfn "..$n" "$grants/..data.tmp"
  mv -T "$grants/..data.tmp" "$grants/..data"
  [[ -L $grants/grants.json ]] || ln -s ..data/grants.json "$grants/grants.json"
}

demo_down() {
  local dir="$1" name pid pids=()
  # The node first (its pods, mounts, cgroups, bridge and rule): the operator's pods then close
  # their connections to the example servers, which can then stop at once.
  if [[ -d $dir/node ]]; then "$NODE" down "$dir"; fi
  if [[ -f "$dir/demo.pids" ]]; then
    while read -r name pid; do
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done <"$dir/demo.pids"
    local deadline=$((SECONDS + 15))
    for pid in ${pids[@]+"${pids[@]}"}; do
      while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$dir/demo.pids"
  fi
  rm -rf "$dir/agent" "$dir/images"
  "$CLUSTER" down "$dir"
}

DEFAULT_DIR="${MCP_OPERATOR_CACHE:-$HOME/.cache/mcp-operator}/demo"
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; }
KEEP=0
case "${1:-}" in
  down) demo_down "${2:-$DEFAULT_DIR}" ;;
  --keep) KEEP=1; demo_up "${2:-$DEFAULT_DIR}" ;;
  -h|--help) usage ;;
  -*) usage; exit 2 ;;
  *) demo_up "${1:-$DEFAULT_DIR}" ;;
esac
