use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;

/// The namespace: a remote server `github` (bearer tok-gh, header hdr-gh), a stdio server
/// `mem` (its token mem-mcp-token, env Secret mem-env).
fn protected() -> Protected {
    Protected {
        servers: vec![
            ProtectedServer {
                name: "github".into(),
                uid: "uid-gh".into(),
                stdio: false,
                secrets: ["tok-gh".into(), "hdr-gh".into()].into(),
            },
            ProtectedServer {
                name: "mem".into(),
                uid: "uid-mem".into(),
                stdio: true,
                secrets: ["mem-mcp-token".into(), "mem-env".into()].into(),
            },
        ],
    }
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).expect("a pod")
}

fn judge(p: &Pod) -> Result<(), Refusal> {
    let uses = new_protected_uses(p, None, &protected(), true);
    decide(p, &uses, &protected(), Workload::default())
}

fn refused_secret(result: Result<(), Refusal>) -> String {
    match result {
        Err(Refusal::ProtectedSecret { secret, .. }) => secret,
        other => panic!("expected a ProtectedSecret refusal, got {other:?}"),
    }
}

fn with_container(container: Value, volumes: Value) -> Pod {
    pod(json!({
        "metadata": {"name": "p", "namespace": "t"},
        "spec": {"containers": [container], "volumes": volumes}
    }))
}

#[test]
fn a_secret_volume_of_a_credential_is_refused_with_what_to_do() {
    let p = with_container(
        json!({"name": "app", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/s"}]}),
        json!([{"name": "v", "secret": {"secretName": "tok-gh"}}]),
    );
    let refusal = judge(&p).unwrap_err();
    let message = refusal.to_string();
    assert!(message.contains("\"tok-gh\""), "{message}");
    assert!(message.contains("McpServer \"github\""), "{message}");
    assert!(
        message.contains("only the injected MCP sidecar may mount it"),
        "{message}"
    );
    assert!(message.contains("mcp-operator.dev/agent="), "{message}");
}

#[test]
fn an_unmounted_secret_volume_is_refused_too() {
    // The volume alone is the use: a later ephemeral container could mount it.
    let p = with_container(
        json!({"name": "app", "image": "x"}),
        json!([{"name": "v", "secret": {"secretName": "hdr-gh"}}]),
    );
    assert_eq!(refused_secret(judge(&p)), "hdr-gh");
}

#[test]
fn a_projected_secret_source_is_refused() {
    let p = with_container(
        json!({"name": "app", "image": "x"}),
        json!([{"name": "v", "projected": {"sources": [
            {"configMap": {"name": "cm"}},
            {"secret": {"name": "mem-mcp-token"}}
        ]}}]),
    );
    let message = judge(&p).unwrap_err().to_string();
    assert!(message.contains("McpServer \"mem\""), "{message}");
}

#[test]
fn env_secret_key_ref_is_refused() {
    let p = with_container(
        json!({"name": "app", "image": "x", "env": [
            {"name": "PLAIN", "value": "1"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok-gh", "key": "token"}}}
        ]}),
        json!([]),
    );
    let message = judge(&p).unwrap_err().to_string();
    assert!(message.contains("environment variable TOKEN"), "{message}");
}

#[test]
fn env_from_secret_ref_is_refused() {
    let p = with_container(
        json!({"name": "app", "image": "x", "envFrom": [{"secretRef": {"name": "mem-env"}}]}),
        json!([]),
    );
    assert_eq!(refused_secret(judge(&p)), "mem-env");
}

#[test]
fn init_containers_image_pull_secrets_and_plugin_refs_are_refused() {
    let init = pod(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app"}], "initContainers": [{"name": "i",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "tok-gh", "key": "k"}}}]}]}
    }));
    assert_eq!(refused_secret(judge(&init)), "tok-gh");
    let pull = pod(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app"}], "imagePullSecrets": [{"name": "tok-gh"}]}
    }));
    assert_eq!(refused_secret(judge(&pull)), "tok-gh");
    let csi = with_container(
        json!({"name": "app"}),
        json!([{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "hdr-gh"}}}]),
    );
    assert_eq!(refused_secret(judge(&csi)), "hdr-gh");
}

#[test]
fn a_secret_no_mcp_server_names_is_admitted_and_never_named() {
    let p = with_container(
        json!({"name": "app", "image": "x",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "k"}}}],
            "envFrom": [{"secretRef": {"name": "app-config"}}],
            "volumeMounts": [{"name": "v", "mountPath": "/s"}]}),
        json!([{"name": "v", "secret": {"secretName": "tls-cert"}}]),
    );
    assert_eq!(judge(&p), Ok(()));
    // With a protected one beside them, the refusal names only the protected one.
    let mixed = with_container(
        json!({"name": "app", "image": "x",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "k"}}},
                    {"name": "G", "valueFrom": {"secretKeyRef": {"name": "tok-gh", "key": "k"}}}]}),
        json!([]),
    );
    let message = judge(&mixed).unwrap_err().to_string();
    assert!(!message.contains("db-password"), "{message}");
    assert_eq!(
        judge(&with_container(json!({"name": "a"}), json!([]))),
        Ok(())
    );
}

fn labelled_injected(extra_mount_in_app: bool) -> Pod {
    let mut app = json!({"name": "app", "image": "agent"});
    if extra_mount_in_app {
        app["volumeMounts"] = json!([{"name": "mcp-credentials", "mountPath": "/c"}]);
    }
    pod(json!({
        "metadata": {"name": "p", "labels": {"mcp-operator.dev/agent": "bot"}},
        "spec": {
            "initContainers": [{"name": "mcp-sidecar", "image": "op",
                "volumeMounts": [{"name": "mcp-credentials", "mountPath": "/var/run/mcp-operator/credentials"}]}],
            "containers": [app],
            "volumes": [{"name": "mcp-credentials", "projected": {"sources": [
                {"secret": {"name": "tok-gh", "items": [{"key": "token", "path": "secrets/tok-gh/token"}]}},
                {"secret": {"name": "mem-mcp-token"}}
            ]}}]
        }
    }))
}

#[test]
fn the_injected_sidecars_credentials_volume_is_admitted() {
    assert_eq!(judge(&labelled_injected(false)), Ok(()));
}

#[test]
fn a_sidecar_the_webhook_did_not_find_to_be_the_operators_gets_no_exception() {
    // A labelled pod with a look-alike mcp-sidecar (in a namespace /validate/pods does not
    // select, say): its volume is a use like any other.
    let p = labelled_injected(false);
    let uses = new_protected_uses(&p, None, &protected(), false);
    assert!(decide(&p, &uses, &protected(), Workload::default()).is_err());
}

#[test]
fn another_container_mounting_the_sidecars_volume_is_refused() {
    let message = judge(&labelled_injected(true)).unwrap_err().to_string();
    assert!(message.contains("the container \"app\""), "{message}");
}

#[test]
fn the_sidecar_volume_name_without_the_label_is_refused() {
    // An unlabelled pod gets no sidecar: a volume named like the sidecar's is just a volume.
    let mut p = labelled_injected(false);
    p.metadata.labels = None;
    assert_eq!(refused_secret(judge(&p)), "mem-mcp-token");
    // A labelled pod whose container named mcp-sidecar is a regular container is refused too.
    let mut q = labelled_injected(false);
    let spec = q.spec.as_mut().unwrap();
    let mut sidecar = spec.init_containers.take().unwrap().remove(0);
    sidecar.name = "mcp-sidecar".into();
    spec.containers.push(sidecar);
    assert!(judge(&q).is_err());
}

#[test]
fn the_labelled_pod_may_not_use_a_credential_elsewhere() {
    let mut p = labelled_injected(false);
    let spec = p.spec.as_mut().unwrap();
    spec.containers[0].env = Some(vec![
        serde_json::from_value(
            json!({"name": "T", "valueFrom": {"secretKeyRef": {"name": "tok-gh", "key": "token"}}}),
        )
        .unwrap(),
    ]);
    assert_eq!(refused_secret(judge(&p)), "tok-gh");
}

/// The stdio server `mem`'s Deployment, its ReplicaSet and a pod of it, as the controllers
/// make them.
fn stdio_chain() -> (Pod, ReplicaSet, Deployment) {
    let spec = json!({
        "containers": [{"name": "server", "image": "node:22",
            "command": ["/bridge/mcp-operator"], "args": ["bridge"],
            "env": [{"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "mem-env", "key": "k"}}}],
            "volumeMounts": [{"name": "token", "mountPath": "/token", "readOnly": true}]}],
        "volumes": [{"name": "token", "secret": {"secretName": "mem-mcp-token", "defaultMode": 292}}]
    });
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "mem-mcp", "namespace": "t", "uid": "uid-dep", "ownerReferences": [
            {"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer", "name": "mem",
             "uid": "uid-mem", "controller": true}]},
        "spec": {"selector": {}, "template": {"spec": spec}}
    }))
    .unwrap();
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "mem-mcp-5d9f", "namespace": "t", "uid": "uid-rs", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "mem-mcp",
             "uid": "uid-dep", "controller": true}]},
        "spec": {"selector": {}, "template": {"spec": spec}}
    }))
    .unwrap();
    let p = pod(json!({
        "metadata": {"generateName": "mem-mcp-5d9f-", "namespace": "t", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "mem-mcp-5d9f",
             "uid": "uid-rs", "controller": true}]},
        "spec": spec
    }));
    (p, rs, deployment)
}

fn judge_stdio(p: &Pod, rs: &ReplicaSet, d: &Deployment) -> Result<(), Refusal> {
    let uses = new_protected_uses(p, None, &protected(), true);
    let workload = Workload {
        replica_set: Some(rs),
        deployment: Some(d),
    };
    decide(p, &uses, &protected(), workload)
}

#[test]
fn the_stdio_servers_own_pod_is_admitted() {
    let (p, rs, d) = stdio_chain();
    assert_eq!(controlling_replica_set(&p), Some("mem-mcp-5d9f"));
    assert_eq!(controlling_deployment(&rs), Some("mem-mcp"));
    assert_eq!(judge_stdio(&p, &rs, &d), Ok(()));
    // Without the chain read (the webhook found no such ReplicaSet), the same pod is refused.
    assert!(judge(&p).is_err());
}

#[test]
fn forged_labels_on_a_pod_without_owners_are_refused() {
    let (mut p, rs, d) = stdio_chain();
    p.metadata.owner_references = None;
    p.metadata.labels = Some(
        [
            (
                "app.kubernetes.io/managed-by".to_string(),
                "mcp-operator".to_string(),
            ),
            (
                "app.kubernetes.io/component".to_string(),
                "stdio-mcp-server".to_string(),
            ),
            ("mcp-operator.dev/mcpserver".to_string(), "mem".to_string()),
        ]
        .into(),
    );
    assert!(judge_stdio(&p, &rs, &d).is_err());
}

#[test]
fn forged_owner_references_are_refused() {
    // A pod naming the ReplicaSet with another uid.
    let (mut p, rs, d) = stdio_chain();
    p.metadata.owner_references.as_mut().unwrap()[0].uid = "guessed".into();
    assert!(judge_stdio(&p, &rs, &d).is_err());
    // A ReplicaSet of the tenant's own Deployment named like the operator's, not controlled
    // by the McpServer (uid differs).
    let (p, rs, mut d) = stdio_chain();
    d.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-other".into();
    assert!(judge_stdio(&p, &rs, &d).is_err());
    // A Deployment the McpServer controls under another name is not the operator's.
    let (p, mut rs, mut d) = stdio_chain();
    d.metadata.name = Some("other".into());
    rs.metadata.owner_references.as_mut().unwrap()[0].name = "other".into();
    assert!(judge_stdio(&p, &rs, &d).is_err());
    // A remote McpServer has no workload: a chain ending at github proves nothing.
    let (p, rs, mut d) = stdio_chain();
    let owner = &mut d.metadata.owner_references.as_mut().unwrap()[0];
    owner.name = "github".into();
    owner.uid = "uid-gh".into();
    d.metadata.name = Some("github-mcp".into());
    assert!(judge_stdio(&p, &rs, &d).is_err());
    // Not the controller: an owner reference without controller: true is no ownership.
    let (mut p, rs, d) = stdio_chain();
    p.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    assert!(judge_stdio(&p, &rs, &d).is_err());
}

#[test]
fn a_pod_naming_the_real_owners_but_running_other_code_is_refused() {
    // The uids are readable; what runs with the Secrets must be the template's.
    let (mut p, rs, d) = stdio_chain();
    p.spec.as_mut().unwrap().containers[0].image = Some("attacker/reader".into());
    assert!(judge_stdio(&p, &rs, &d).is_err());
    let (mut p, rs, d) = stdio_chain();
    p.spec.as_mut().unwrap().share_process_namespace = Some(true);
    assert!(judge_stdio(&p, &rs, &d).is_err());
    let (mut p, rs, d) = stdio_chain();
    let spec = p.spec.as_mut().unwrap();
    let mut reader = spec.containers[0].clone();
    reader.name = "reader".into();
    spec.containers.push(reader);
    assert!(judge_stdio(&p, &rs, &d).is_err());
}

#[test]
fn the_stdio_pod_may_use_only_its_servers_secrets() {
    let (mut p, mut rs, d) = stdio_chain();
    let extra = json!({"name": "G", "valueFrom": {"secretKeyRef": {"name": "tok-gh", "key": "k"}}});
    for spec in [
        p.spec.as_mut().unwrap(),
        rs.spec
            .as_mut()
            .unwrap()
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap(),
    ] {
        spec.containers[0]
            .env
            .as_mut()
            .unwrap()
            .push(serde_json::from_value(extra.clone()).unwrap());
    }
    let message = judge_stdio(&p, &rs, &d).unwrap_err().to_string();
    assert!(message.contains("\"tok-gh\""), "{message}");
    assert!(message.contains("McpServer \"github\""), "{message}");
}

fn with_ephemeral(mut p: Pod, container: Value) -> Pod {
    p.spec.as_mut().unwrap().ephemeral_containers =
        Some(vec![serde_json::from_value(container).unwrap()]);
    p
}

#[test]
fn update_judges_only_what_the_update_adds() {
    // A pod created before an McpServer named its Secret stays updatable.
    let old = with_container(
        json!({"name": "app", "envFrom": [{"secretRef": {"name": "tok-gh"}}]}),
        json!([{"name": "v", "secret": {"secretName": "hdr-gh"}}]),
    );
    let mut new = old.clone();
    new.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
    assert!(new_protected_uses(&new, Some(&old), &protected(), true).is_empty());
    // An ephemeral container that mounts the Secret's volume is a new use.
    let debug = with_ephemeral(
        old.clone(),
        json!({"name": "dbg", "image": "busybox", "volumeMounts": [{"name": "v", "mountPath": "/s"}]}),
    );
    let uses = new_protected_uses(&debug, Some(&old), &protected(), true);
    let message = decide(&debug, &uses, &protected(), Workload::default())
        .unwrap_err()
        .to_string();
    assert!(message.contains("ephemeral container \"dbg\""), "{message}");
    // So is one with the Secret in its environment, and one targeting a container using it.
    let env = with_ephemeral(
        old.clone(),
        json!({"name": "dbg", "envFrom": [{"secretRef": {"name": "mem-env"}}]}),
    );
    assert_eq!(
        new_protected_uses(&env, Some(&old), &protected(), true)[0].secret,
        "mem-env"
    );
    let target = with_ephemeral(
        old.clone(),
        json!({"name": "dbg", "image": "busybox", "targetContainerName": "app"}),
    );
    let uses = new_protected_uses(&target, Some(&old), &protected(), true);
    assert!(
        uses.iter()
            .any(|u| matches!(&u.place, Place::Target { .. })),
        "{uses:?}"
    );
    // An ephemeral container using nothing protected is admitted.
    let plain = with_ephemeral(old.clone(), json!({"name": "dbg", "image": "busybox"}));
    assert!(new_protected_uses(&plain, Some(&old), &protected(), true).is_empty());
}

#[test]
fn an_ephemeral_container_in_the_stdio_pod_is_refused() {
    let (p, rs, d) = stdio_chain();
    let debug = with_ephemeral(
        p.clone(),
        json!({"name": "dbg", "image": "busybox", "targetContainerName": "server"}),
    );
    let uses = new_protected_uses(&debug, Some(&p), &protected(), true);
    let workload = Workload {
        replica_set: Some(&rs),
        deployment: Some(&d),
    };
    assert!(decide(&debug, &uses, &protected(), workload).is_err());
}
