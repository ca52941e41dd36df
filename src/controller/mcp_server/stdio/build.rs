//! The workload of a stdio McpServer, as data: the Deployment and Service the reconciler applies
//! for `spec.stdio`, and what their state says about whether the server can be reached. Pure:
//! only api and Kubernetes types, so every rule here is unit-tested; the kube calls are in
//! [`super::workload`].
//!
//! ```text
//! Pod  init "bridge"  (the operator's image)  mcp-operator copy-self /mcp-operator-bridge/mcp-operator
//!      "server"       (spec.stdio.image)      /mcp-operator-bridge/mcp-operator bridge --listen 0.0.0.0:8000
//!                                               [--per-session] -- <command> <args>
//!                     readiness /readyz, liveness /healthz; env, resources from spec.stdio
//!                     --bearer-token-file /var/run/mcp-operator/token/token: answers only
//!                     requests that carry the token (the sidecars and the controller)
//!                     non-root (65532 unless spec.stdio.securityContext says otherwise), no
//!                     capabilities, RuntimeDefault seccomp, no privilege escalation: admitted
//!                     where Pod Security enforces `restricted`; HOME=/tmp on an emptyDir
//! Service <name>-mcp  ClusterIP, port 8000 → the pods; status.url = http://<clusterIP>:8000/mcp
//! Secret <name>-mcp-token   the token, made once by the operator (deleting it issues a new one)
//! NetworkPolicy <name>-mcp  ingress to 8000 only from the namespace's agent-labelled pods and
//!                     the operator's namespace, where the cluster's network enforces it
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, ContainerStatus, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, Pod, PodSecurityContext, PodSpec, PodStatus, PodTemplateSpec,
    Probe, ResourceRequirements, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource,
    SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::mcp_server::{STDIO_TOKEN_KEY, Stdio, StdioEnv, stdio_token_secret_name};
use crate::controller::shared;

/// The port the bridge listens on in the pod, and the Service's port.
pub const PORT: i32 = 8000;
/// Where the server container mounts the token Secret.
pub const TOKEN_DIR: &str = "/var/run/mcp-operator/token";
/// The user and group the server runs as unless spec.stdio.securityContext says otherwise
/// (distroless's `nonroot`).
pub const DEFAULT_USER: i64 = 65532;
/// The label that opts an agent pod into the sidecar (the NetworkPolicy admits those pods).
const AGENT_LABEL: &str = "mcp-operator.dev/agent";
/// Where the init container puts the operator's binary, in an emptyDir both containers mount.
pub const BRIDGE_DIR: &str = "/mcp-operator-bridge";
/// The annotation holding the digest of what the operator last applied: an object that carries
/// the digest of the desired one is not written again.
pub const DIGEST_ANNOTATION: &str = "mcp-operator.dev/workload-digest";
/// Labels every workload object carries; the controller watches Deployments by them.
pub const MANAGED_BY: (&str, &str) = (shared::MANAGED_BY_LABEL, shared::MANAGED_BY);
pub const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "stdio-mcp-server");
/// The label naming the McpServer (also on its catalogue ConfigMap).
pub const SERVER_LABEL: &str = "mcp-operator.dev/mcpserver";
/// The label selector of every workload object, for the watch.
pub const WATCH_SELECTOR: &str =
    "app.kubernetes.io/managed-by=mcp-operator,app.kubernetes.io/component=stdio-mcp-server";

/// Name of the Deployment and of the Service of the McpServer `server` (the CRD keeps a stdio
/// server's name short enough for it to be a Service name).
pub fn name(server: &str) -> String {
    format!("{server}-mcp")
}

/// The URL of the server behind a Service with this ClusterIP. The ClusterIP, not the Service's
/// DNS name: the Service is the operator's own, and neither the controller nor the sidecars then
/// need cluster DNS to reach it.
pub fn url(cluster_ip: &str) -> String {
    if cluster_ip.contains(':') {
        format!("http://[{cluster_ip}]:{PORT}/mcp")
    } else {
        format!("http://{cluster_ip}:{PORT}/mcp")
    }
}

/// The pods' labels, and the Deployment's and Service's selector.
pub fn selector(server: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (COMPONENT.0.to_string(), COMPONENT.1.to_string()),
        (SERVER_LABEL.to_string(), server.to_string()),
    ])
}

/// Labels of the Deployment, the Service and the pods.
pub fn labels(server: &str) -> BTreeMap<String, String> {
    let mut labels = selector(server);
    labels.insert(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string());
    labels
}

/// The McpServer a workload object belongs to: its controller owner reference, when that is an
/// McpServer.
pub fn owner_name(owners: &[OwnerReference]) -> Option<&str> {
    owners
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "McpServer")
        .map(|o| o.name.as_str())
}

/// Whether an object is controlled by the McpServer with this uid (an object of the same name
/// that is not is someone else's, and is left alone).
pub fn controlled_by(owners: Option<&[OwnerReference]>, uid: &str) -> bool {
    owners
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// What the workload of one McpServer is built from.
pub struct Inputs<'a> {
    pub server: &'a str,
    pub namespace: &'a str,
    pub owner: OwnerReference,
    pub stdio: &'a Stdio,
    /// The operator's own image, which holds the bridge (`--bridge-image`).
    pub bridge_image: &'a str,
    /// The operator's namespace: its pods (the controller's probes) may reach the server.
    pub operator_namespace: Option<&'a str>,
}

fn meta(inputs: &Inputs<'_>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name(inputs.server)),
        namespace: Some(inputs.namespace.to_string()),
        labels: Some(labels(inputs.server)),
        owner_references: Some(vec![inputs.owner.clone()]),
        ..Default::default()
    }
}

/// The Deployment: `replicas` pods running the server behind the bridge. Any change of
/// spec.stdio changes the pod template, and so rolls the pods.
pub fn deployment(inputs: &Inputs<'_>) -> Deployment {
    let mut deployment = Deployment {
        metadata: meta(inputs),
        spec: Some(DeploymentSpec {
            replicas: Some(inputs.stdio.replicas as i32),
            selector: LabelSelector {
                match_labels: Some(selector(inputs.server)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(inputs.server)),
                    ..Default::default()
                }),
                spec: Some(pod(inputs)),
            },
            ..Default::default()
        }),
        status: None,
    };
    let digest = digest(&deployment);
    deployment.metadata.annotations =
        Some(BTreeMap::from([(DIGEST_ANNOTATION.to_string(), digest)]));
    deployment
}

/// The Service in front of the pods. Session affinity keeps each client (a sidecar, the
/// controller) on one pod: a legacy MCP session lives in one bridge, and with perSession so
/// does the server process holding its state.
pub fn service(inputs: &Inputs<'_>) -> Service {
    let mut service = Service {
        metadata: meta(inputs),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector(inputs.server)),
            ports: Some(vec![ServicePort {
                name: Some("mcp".into()),
                port: PORT,
                target_port: Some(IntOrString::String("mcp".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            session_affinity: Some("ClientIP".into()),
            ..Default::default()
        }),
        status: None,
    };
    let digest = digest(&service);
    service.metadata.annotations = Some(BTreeMap::from([(DIGEST_ANNOTATION.to_string(), digest)]));
    service
}

/// The Secret holding the server's token, with a fresh one. Created once, never rewritten:
/// the token changes only when someone deletes the Secret (the next reconcile makes another).
pub fn token_secret(inputs: &Inputs<'_>, token: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(stdio_token_secret_name(inputs.server)),
            ..meta(inputs)
        },
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([(
            STDIO_TOKEN_KEY.to_string(),
            token.to_string(),
        )])),
        ..Default::default()
    }
}

/// Ingress to the bridge only from the namespace's agent pods (their sidecars) and the
/// operator's pods, for clusters whose network enforces NetworkPolicies. The token is what
/// holds everywhere; this keeps everyone else from even connecting.
pub fn network_policy(inputs: &Inputs<'_>) -> NetworkPolicy {
    let mut from = vec![NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: AGENT_LABEL.into(),
                operator: "Exists".into(),
                values: None,
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }];
    if let Some(namespace) = inputs.operator_namespace {
        from.push(NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    namespace.to_string(),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let mut policy = NetworkPolicy {
        metadata: meta(inputs),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector(inputs.server)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(from),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(PORT)),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
            }]),
            ..Default::default()
        }),
    };
    let digest = digest(&policy);
    policy.metadata.annotations = Some(BTreeMap::from([(DIGEST_ANNOTATION.to_string(), digest)]));
    policy
}

/// The digest of an object as built (before the digest annotation is added).
fn digest<T: serde::Serialize>(object: &T) -> String {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(object).expect("a Kubernetes object serialises");
    hex::encode(Sha256::digest(json))
}

/// The digest annotation an object carries.
pub fn digest_of(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(DIGEST_ANNOTATION)
        .map(String::as_str)
}

/// The stdio server's pod: the bridge copied in by an init container, the server's image run
/// under the bridge, both "restricted", with the token and a writable /tmp mounted.
fn pod(inputs: &Inputs<'_>) -> PodSpec {
    let stdio = inputs.stdio;
    let security = stdio.security_context.clone().unwrap_or_default();
    let user = security.run_as_user.unwrap_or(DEFAULT_USER);
    PodSpec {
        // The server has no business with the Kubernetes API.
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            run_as_non_root: Some(security.run_as_non_root.unwrap_or(user != 0)),
            run_as_user: Some(user),
            run_as_group: Some(security.run_as_group.unwrap_or(user)),
            ..Default::default()
        }),
        init_containers: Some(vec![bridge_container(inputs.bridge_image)]),
        containers: vec![server_container(stdio)],
        volumes: Some(pod_volumes(inputs.server)),
        ..Default::default()
    }
}

/// Where the bridge binary sits in both containers.
fn bridge_binary() -> String {
    format!("{BRIDGE_DIR}/mcp-operator")
}

fn bridge_mount() -> VolumeMount {
    VolumeMount {
        name: "bridge".into(),
        mount_path: BRIDGE_DIR.into(),
        ..Default::default()
    }
}

/// Pod Security "restricted": no escalation, no capabilities, non-root, RuntimeDefault.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The init container that copies the operator's binary into the pod, to run as the bridge.
fn bridge_container(bridge_image: &str) -> Container {
    Container {
        name: "bridge".into(),
        image: Some(bridge_image.into()),
        // The image's own entrypoint is the binary, wherever the image keeps it.
        args: Some(vec!["copy-self".into(), bridge_binary()]),
        volume_mounts: Some(vec![bridge_mount()]),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted()
        }),
        ..Default::default()
    }
}

/// `mcp-operator bridge --listen … [--per-session] --bearer-token-file … -- <command> <args>`.
fn bridge_args(stdio: &Stdio) -> Vec<String> {
    let mut args = vec![
        "bridge".to_string(),
        "--listen".to_string(),
        format!("0.0.0.0:{PORT}"),
    ];
    if stdio.per_session {
        args.push("--per-session".into());
    }
    args.push(format!("--bearer-token-file={TOKEN_DIR}/{STDIO_TOKEN_KEY}"));
    args.push("--".into());
    args.extend(stdio.command.iter().cloned());
    args.extend(stdio.args.iter().cloned());
    args
}

/// The server's container: its image, run under the bridge, with the user's env and resources.
fn server_container(stdio: &Stdio) -> Container {
    let probe = |path: &str, period: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("mcp".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(3),
        ..Default::default()
    };
    let mut env: Vec<EnvVar> = stdio.env.iter().map(env_var).collect();
    // A user the image may not know has no writable home: npx and friends cache under it.
    if !env.iter().any(|e| e.name == "HOME") {
        env.push(EnvVar {
            name: "HOME".into(),
            value: Some("/tmp".into()),
            value_from: None,
        });
    }
    Container {
        name: "server".into(),
        image: Some(stdio.image.clone()),
        image_pull_policy: stdio.image_pull_policy.clone(),
        command: Some(vec![bridge_binary()]),
        args: Some(bridge_args(stdio)),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("mcp".into()),
            container_port: PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(probe("/readyz", 5)),
        liveness_probe: Some(probe("/healthz", 10)),
        resources: stdio.resources.as_ref().map(|r| ResourceRequirements {
            requests: (!r.requests.is_empty()).then(|| r.requests.clone()),
            limits: (!r.limits.is_empty()).then(|| r.limits.clone()),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                read_only: Some(true),
                ..bridge_mount()
            },
            VolumeMount {
                name: "token".into(),
                mount_path: TOKEN_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "tmp".into(),
                mount_path: "/tmp".into(),
                ..Default::default()
            },
        ]),
        security_context: Some(restricted()),
        ..Default::default()
    }
}

/// The bridge's empty dir, the token Secret (readable by whichever user the server runs as)
/// and /tmp.
fn pod_volumes(server: &str) -> Vec<Volume> {
    vec![
        Volume {
            name: "bridge".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        Volume {
            name: "token".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(stdio_token_secret_name(server)),
                items: None,
                // Readable by the server's user, whoever that is.
                default_mode: Some(0o444),
                optional: Some(false),
            }),
            ..Default::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ]
}

fn env_var(env: &StdioEnv) -> EnvVar {
    EnvVar {
        name: env.name.clone(),
        value: env.value.clone(),
        value_from: env.value_from.as_ref().map(|from| EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: from.secret_key_ref.name.clone(),
                key: from.secret_key_ref.key.clone(),
                optional: None,
            }),
            ..Default::default()
        }),
    }
}

/// Why a workload does not serve yet: a condition reason and a message a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    pub reason: &'static str,
    pub message: String,
}

/// The reason of a workload that does not serve yet.
pub const WORKLOAD_NOT_READY: &str = "WorkloadNotReady";

/// Most pods whose trouble a message names.
const PODS_NAMED: usize = 3;
/// Longest piece of a container's own message quoted.
const QUOTE_MAX: usize = 300;

/// Whether the Deployment serves: Available (at least the pods it needs are ready). Otherwise
/// what keeps it from serving, from its conditions and its pods' states: unschedulable, an image
/// that cannot be pulled, a server that keeps exiting, a missing Secret.
pub fn assess(deployment: &Deployment, pods: &[Pod]) -> Result<(), NotReady> {
    let name = deployment.metadata.name.as_deref().unwrap_or_default();
    let wanted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let available = status.available_replicas.unwrap_or(0);
    let conditions = status.conditions.unwrap_or_default();
    let condition = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
    if condition("Available").is_some_and(|c| c.status == "True") && available > 0 {
        return Ok(());
    }
    let mut message = format!("Deployment {name} has {available} of {wanted} pods available.");
    if let Some(failure) = condition("ReplicaFailure").filter(|c| c.status == "True") {
        message.push_str(&format!(
            " {}",
            quote(failure.message.as_deref().unwrap_or("ReplicaFailure"))
        ));
    }
    let troubles: Vec<String> = pods.iter().filter_map(pod_trouble).collect();
    for trouble in troubles.iter().take(PODS_NAMED) {
        message.push(' ');
        message.push_str(trouble);
    }
    if troubles.len() > PODS_NAMED {
        message.push_str(&format!(
            " ({} more pods alike.)",
            troubles.len() - PODS_NAMED
        ));
    }
    if troubles.is_empty() {
        message.push_str(if pods.is_empty() {
            " No pod exists yet."
        } else {
            " Its pods are starting."
        });
    }
    message.push_str(&format!(
        " See kubectl describe deployment {name} and its pods' logs."
    ));
    Err(NotReady {
        reason: WORKLOAD_NOT_READY,
        message,
    })
}

/// What keeps one pod from serving, in a sentence; None when it is just starting.
fn pod_trouble(pod: &Pod) -> Option<String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref()?;
    if let Some(trouble) = scheduling_trouble(name, pod, status) {
        return Some(trouble);
    }
    let mut containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .map(|c| (c, true))
        .chain(
            status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| (c, false)),
        );
    containers.find_map(|(container, init)| container_trouble(name, container, init))
}

/// A pod no node takes, or that no scheduler has placed yet.
fn scheduling_trouble(name: &str, pod: &Pod, status: &PodStatus) -> Option<String> {
    if let Some(unscheduled) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        return Some(format!(
            "Pod {name} cannot be scheduled: {}",
            quote(unscheduled.message.as_deref().unwrap_or("no node fits"))
        ));
    }
    let on_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some();
    (!on_node && status.phase.as_deref() == Some("Pending")).then(|| {
        format!(
            "Pod {name} is not scheduled to a node yet (is a scheduler running, and a node Ready?)."
        )
    })
}

/// A container (`init`: the bridge's) waiting on something other than its start, exited with
/// an error, or restarting without getting ready.
fn container_trouble(name: &str, container: &ContainerStatus, init: bool) -> Option<String> {
    let what = if init {
        format!("init container {} (the bridge)", container.name)
    } else {
        format!("container {}", container.name)
    };
    let state = container.state.as_ref();
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        if matches!(reason, "ContainerCreating" | "PodInitializing" | "") {
            return None;
        }
        let mut text = format!("Pod {name}: {what} is waiting: {reason}");
        if let Some(message) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
            text.push_str(&format!(": {}", quote(message)));
        }
        if reason == "CrashLoopBackOff"
            && let Some(last) = container
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
        {
            text.push_str(&format!(
                " (last exit code {}{})",
                last.exit_code,
                last.reason
                    .as_deref()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default()
            ));
        }
        if !text.ends_with('.') {
            text.push('.');
        }
        return Some(text);
    }
    if let Some(terminated) = state.and_then(|s| s.terminated.as_ref())
        && terminated.exit_code != 0
    {
        return Some(format!(
            "Pod {name}: {what} exited with code {}{}.",
            terminated.exit_code,
            terminated
                .message
                .as_deref()
                .map(|m| format!(": {}", quote(m)))
                .unwrap_or_default()
        ));
    }
    (!init && !container.ready && container.restart_count > 0).then(|| {
        format!(
            "Pod {name}: {what} restarted {} times and is not ready.",
            container.restart_count
        )
    })
}

/// A piece of someone else's message, on one line and bounded.
fn quote(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= QUOTE_MAX {
        return one_line;
    }
    let cut: String = one_line.chars().take(QUOTE_MAX).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests;
