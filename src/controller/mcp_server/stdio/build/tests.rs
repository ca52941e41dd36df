use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::api::mcp_server::McpServerSpec;

fn stdio(value: Value) -> Stdio {
    let spec: McpServerSpec = serde_json::from_value(json!({ "stdio": value })).unwrap();
    spec.stdio.unwrap()
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "mcp-operator.dev/v1alpha1".into(),
        kind: "McpServer".into(),
        name: "memory".into(),
        uid: "uid-1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn inputs(stdio: &Stdio) -> Inputs<'_> {
    Inputs {
        server: "memory",
        namespace: "tools",
        owner: owner(),
        stdio,
        bridge_image: "mcp-operator.local/mcp-operator:abc",
        operator_namespace: Some("mcp-system"),
    }
}

fn memory() -> Stdio {
    stdio(json!({
        "image": "node:22-slim",
        "command": ["npx", "-y", "@modelcontextprotocol/server-memory"],
        "args": ["--token=$(TOKEN)"],
        "env": [
            {"name": "LOG_LEVEL", "value": "debug"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "memory-credentials", "key": "token"}}},
        ],
        "resources": {"limits": {"memory": "256Mi", "cpu": 1}},
        "replicas": 2,
        "perSession": true,
    }))
}

#[test]
fn the_deployment_runs_the_command_behind_the_bridge_copied_in_from_the_operator_image() {
    let stdio = memory();
    let d = serde_json::to_value(deployment(&inputs(&stdio))).unwrap();
    assert_eq!(d["metadata"]["name"], "memory-mcp");
    assert_eq!(d["metadata"]["namespace"], "tools");
    assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(d["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        d["metadata"]["labels"]["mcp-operator.dev/mcpserver"],
        "memory"
    );
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "mcp-operator"
    );
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/component": "stdio-mcp-server", "mcp-operator.dev/mcpserver": "memory"})
    );
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["mcp-operator.dev/mcpserver"],
        "memory"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
    let init = &pod["initContainers"][0];
    assert_eq!(init["image"], "mcp-operator.local/mcp-operator:abc");
    assert_eq!(
        init["command"],
        Value::Null,
        "the image's entrypoint is the binary"
    );
    assert_eq!(
        init["args"],
        json!(["copy-self", "/mcp-operator-bridge/mcp-operator"])
    );
    assert_eq!(init["volumeMounts"][0]["mountPath"], "/mcp-operator-bridge");
    let server = &pod["containers"][0];
    assert_eq!(server["image"], "node:22-slim");
    assert_eq!(
        server["command"],
        json!(["/mcp-operator-bridge/mcp-operator"])
    );
    assert_eq!(
        server["args"],
        json!([
            "bridge",
            "--listen",
            "0.0.0.0:8000",
            "--per-session",
            "--bearer-token-file=/var/run/mcp-operator/token/token",
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-memory",
            "--token=$(TOKEN)"
        ])
    );
    assert_eq!(
        server["env"],
        json!([
            {"name": "LOG_LEVEL", "value": "debug"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "memory-credentials", "key": "token"}}},
            {"name": "HOME", "value": "/tmp"},
        ])
    );
    assert_eq!(
        server["ports"][0],
        json!({"name": "mcp", "containerPort": 8000, "protocol": "TCP"})
    );
    assert_eq!(server["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(server["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(
        server["resources"],
        json!({"limits": {"cpu": "1", "memory": "256Mi"}})
    );
    assert_eq!(server["volumeMounts"][0]["readOnly"], true);
    assert_eq!(pod["volumes"][0], json!({"name": "bridge", "emptyDir": {}}));
    // The token the bridge requires, from the operator's Secret, mounted read-only.
    assert_eq!(
        server["volumeMounts"][1],
        json!({"name": "token", "mountPath": "/var/run/mcp-operator/token", "readOnly": true})
    );
    assert_eq!(
        pod["volumes"][1],
        json!({"name": "token", "secret": {"secretName": "memory-mcp-token", "defaultMode": 0o444, "optional": false}})
    );
}

#[test]
fn the_pods_meet_the_restricted_pod_security_level_unless_the_spec_asks_for_root() {
    // What `restricted` checks: non-root, no escalation, every capability dropped,
    // RuntimeDefault seccomp (at pod level), on every container.
    let stdio = memory();
    let pod = deployment(&inputs(&stdio))
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let sc = pod.security_context.clone().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        (sc.run_as_user, sc.run_as_group),
        (Some(65532), Some(65532))
    );
    assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let c_sc = c.security_context.clone().unwrap();
        assert_eq!(c_sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(
            c_sc.capabilities.unwrap().drop.unwrap(),
            ["ALL"],
            "{}",
            c.name
        );
        assert_ne!(c_sc.run_as_non_root, Some(false), "{}", c.name);
        assert_ne!(c_sc.privileged, Some(true), "{}", c.name);
    }

    let root = stdio_with_user(json!({"runAsUser": 0}));
    let sc = deployment(&inputs(&root))
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .security_context
        .unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_non_root), (Some(0), Some(false)));
    let other = stdio_with_user(json!({"runAsUser": 1000, "runAsGroup": 2000}));
    let sc = deployment(&inputs(&other))
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .security_context
        .unwrap();
    assert_eq!(
        (sc.run_as_user, sc.run_as_group, sc.run_as_non_root),
        (Some(1000), Some(2000), Some(true))
    );
}

fn stdio_with_user(security: Value) -> Stdio {
    stdio(json!({"image": "i", "command": ["mcp-server-time"], "securityContext": security}))
}

#[test]
fn home_is_the_writable_tmp_unless_the_spec_sets_it() {
    let plain = stdio(json!({"image": "i", "command": ["npx", "-y", "x"]}));
    let pod = deployment(&inputs(&plain))
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let env = pod.containers[0].env.clone().unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "HOME" && e.value.as_deref() == Some("/tmp"))
    );
    assert!(
        pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/tmp")
    );
    let own =
        stdio(json!({"image": "i", "command": ["x"], "env": [{"name": "HOME", "value": "/data"}]}));
    let env = deployment(&inputs(&own))
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap();
    assert_eq!(env.iter().filter(|e| e.name == "HOME").count(), 1);
    assert!(
        env.iter()
            .any(|e| e.name == "HOME" && e.value.as_deref() == Some("/data"))
    );
}

#[test]
fn the_token_secret_and_the_network_policy_belong_to_the_server() {
    let stdio = memory();
    let inputs = inputs(&stdio);
    let secret = serde_json::to_value(token_secret(&inputs, "t0ken")).unwrap();
    assert_eq!(secret["metadata"]["name"], "memory-mcp-token");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(secret["stringData"], json!({"token": "t0ken"}));

    let policy = serde_json::to_value(network_policy(&inputs)).unwrap();
    assert_eq!(policy["metadata"]["name"], "memory-mcp");
    assert_eq!(policy["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        json!({"app.kubernetes.io/component": "stdio-mcp-server", "mcp-operator.dev/mcpserver": "memory"})
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        policy["spec"]["ingress"],
        json!([{
            "from": [
                {"podSelector": {"matchExpressions": [{"key": "mcp-operator.dev/agent", "operator": "Exists"}]}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mcp-system"}}},
            ],
            "ports": [{"port": 8000, "protocol": "TCP"}],
        }])
    );
}

#[test]
fn without_per_session_one_process_serves_everyone() {
    let stdio = stdio(json!({"image": "i", "command": ["mcp-server-time"]}));
    let spec = deployment(&inputs(&stdio)).spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    let pod = spec.template.spec.unwrap();
    let server = &pod.containers[0];
    assert_eq!(
        server.args.as_deref().unwrap(),
        [
            "bridge",
            "--listen",
            "0.0.0.0:8000",
            "--bearer-token-file=/var/run/mcp-operator/token/token",
            "--",
            "mcp-server-time"
        ]
    );
    assert!(server.resources.is_none());
    assert_eq!(server.env.as_ref().map(Vec::len), Some(1), "only HOME");
}

#[test]
fn the_service_fronts_the_pods_on_the_bridge_port_with_session_affinity() {
    let stdio = memory();
    let s = serde_json::to_value(service(&inputs(&stdio))).unwrap();
    assert_eq!(s["metadata"]["name"], "memory-mcp");
    assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["sessionAffinity"], "ClientIP");
    assert_eq!(
        s["spec"]["selector"],
        json!({"app.kubernetes.io/component": "stdio-mcp-server", "mcp-operator.dev/mcpserver": "memory"})
    );
    assert_eq!(
        s["spec"]["ports"][0],
        json!({"name": "mcp", "port": 8000, "targetPort": "mcp", "protocol": "TCP"})
    );
    assert_eq!(url("10.0.0.42"), "http://10.0.0.42:8000/mcp");
    assert_eq!(url("fd00::2a"), "http://[fd00::2a]:8000/mcp");
}

#[test]
fn the_digest_follows_every_change_of_spec_stdio_and_only_that() {
    let base = memory();
    let d = |stdio: &Stdio| {
        digest_of(&deployment(&inputs(stdio)).metadata)
            .unwrap()
            .to_string()
    };
    assert_eq!(d(&base), d(&memory()));
    let mut changes = vec![];
    let mut image = base.clone();
    image.image = "node:24-slim".into();
    changes.push(image);
    let mut per_session = base.clone();
    per_session.per_session = false;
    changes.push(per_session);
    let mut replicas = base.clone();
    replicas.replicas = 3;
    changes.push(replicas);
    let mut env = base.clone();
    env.env[0].value = Some("info".into());
    changes.push(env);
    let mut args = base.clone();
    args.args.push("--more".into());
    changes.push(args);
    for changed in &changes {
        assert_ne!(d(&base), d(changed));
    }
    let mut other_image = inputs(&base);
    other_image.bridge_image = "mcp-operator.local/mcp-operator:def";
    assert_ne!(
        digest_of(&deployment(&other_image).metadata).unwrap(),
        d(&base)
    );
}

#[test]
fn ownership_is_the_controller_reference() {
    let mine = owner();
    assert!(controlled_by(Some(std::slice::from_ref(&mine)), "uid-1"));
    assert!(!controlled_by(Some(std::slice::from_ref(&mine)), "uid-2"));
    assert!(!controlled_by(None, "uid-1"));
    let mut not_controller = mine.clone();
    not_controller.controller = None;
    assert!(!controlled_by(
        Some(std::slice::from_ref(&not_controller)),
        "uid-1"
    ));
    assert_eq!(owner_name(&[mine]), Some("memory"));
    assert_eq!(owner_name(&[not_controller]), None);
}

fn deployment_with(status: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "memory-mcp"},
        "spec": {"replicas": 1, "selector": {}, "template": {}},
        "status": status,
    }))
    .unwrap()
}

fn pod_with(status: Value, node: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "memory-mcp-7d9-abcde"},
        "spec": {"containers": [], "nodeName": node},
        "status": status,
    }))
    .unwrap()
}

#[test]
fn an_available_deployment_serves() {
    let d = deployment_with(json!({
        "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}],
    }));
    assert_eq!(assess(&d, &[]), Ok(()));
}

#[test]
fn without_a_node_the_message_says_zero_of_one_and_why() {
    let d = deployment_with(json!({
        "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}],
    }));
    let pending = pod_with(json!({"phase": "Pending"}), None);
    let e = assess(&d, &[pending]).unwrap_err();
    assert_eq!(e.reason, "WorkloadNotReady");
    assert!(
        e.message
            .starts_with("Deployment memory-mcp has 0 of 1 pods available."),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("not scheduled to a node yet"),
        "{}",
        e.message
    );
    let none = assess(&d, &[]).unwrap_err();
    assert!(
        none.message.contains("No pod exists yet."),
        "{}",
        none.message
    );
    let unschedulable = pod_with(
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient memory."}]}),
        None,
    );
    let e = assess(&d, &[unschedulable]).unwrap_err();
    assert!(
        e.message
            .contains("cannot be scheduled: 0/1 nodes are available: 1 Insufficient memory."),
        "{}",
        e.message
    );
}

#[test]
fn image_pull_and_crash_loop_are_named_with_the_container_message() {
    let d = deployment_with(json!({"replicas": 1, "unavailableReplicas": 1}));
    let pull = pod_with(
        json!({"phase": "Pending", "containerStatuses": [{"name": "server", "ready": false, "restartCount": 0, "image": "nope:1", "imageID": "",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope:1\""}}}]}),
        Some("node-1"),
    );
    let e = assess(&d, &[pull]).unwrap_err();
    assert!(
        e.message.contains(
            "Pod memory-mcp-7d9-abcde: container server is waiting: ImagePullBackOff: Back-off pulling image \"nope:1\"."
        ),
        "{}",
        e.message
    );
    let crash = pod_with(
        json!({"phase": "Running", "containerStatuses": [{"name": "server", "ready": false, "restartCount": 4, "image": "i", "imageID": "",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=server"}},
            "lastState": {"terminated": {"exitCode": 127, "reason": "Error"}}}]}),
        Some("node-1"),
    );
    let e = assess(&d, &[crash]).unwrap_err();
    assert!(
        e.message.contains("container server is waiting: CrashLoopBackOff: back-off 40s restarting failed container=server (last exit code 127, Error)."),
        "{}",
        e.message
    );
    let bridge = pod_with(
        json!({"phase": "Pending", "initContainerStatuses": [{"name": "bridge", "ready": false, "restartCount": 0, "image": "op", "imageID": "",
            "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}),
        Some("node-1"),
    );
    let e = assess(&d, &[bridge]).unwrap_err();
    assert!(
        e.message
            .contains("init container bridge (the bridge) is waiting: ErrImagePull: not found."),
        "{}",
        e.message
    );
    let starting = pod_with(
        json!({"phase": "Pending", "containerStatuses": [{"name": "server", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        Some("node-1"),
    );
    let e = assess(&d, &[starting]).unwrap_err();
    assert!(
        e.message.contains("Its pods are starting."),
        "{}",
        e.message
    );
}

proptest! {
    /// Whatever the pods say, the message is bounded: at most three pods named, each quote cut.
    #[test]
    fn messages_are_bounded(n in 0usize..20, text in ".{0,2000}") {
        let d = deployment_with(json!({}));
        let pods: Vec<Pod> = (0..n)
            .map(|_| pod_with(
                json!({"phase": "Pending", "containerStatuses": [{"name": "server", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                    "state": {"waiting": {"reason": "ErrImagePull", "message": text.clone()}}}]}),
                Some("n"),
            ))
            .collect();
        let e = assess(&d, &pods).unwrap_err();
        prop_assert!(e.message.chars().count() < 1400, "{}", e.message.len());
        prop_assert!(!e.message.contains('\n'));
    }
}
