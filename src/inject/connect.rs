//! The pure part of `/validate/pods-connect`: `kubectl exec`, `kubectl attach` and `kubectl cp`
//! (CONNECT on `pods/exec` and `pods/attach`) into a container that holds an McpServer's
//! credential, refused. Admission keeps every other container of the cluster from mounting or
//! reading such a Secret ([`super::secret_mounts`]) and the agent's containers from the
//! sidecar's volumes ([`super::validate`]); the containers that may hold one — the injected
//! sidecar, and the server container of the operator's own stdio Deployment — would otherwise
//! hand it to anyone allowed to exec into a pod of the namespace, who then calls the server
//! around the sidecar (or runs the image's `mcp-operator probe --bearer-token-file`).
//!
//! ```text
//!  exec/attach options ── container ("" ─► the pod's only container, as the apiserver picks it)
//!     │
//!     ├─ mcp-sidecar of a labelled pod ─────────────────────────► refused (credentials, grants,
//!     │                                                           and the state it trusts)
//!     ├─ uses a Secret an McpServer of the namespace names ─────► refused, naming the Secret
//!     │    (env, envFrom, a mounted volume, or an ephemeral
//!     │     container targeting such a container)
//!     └─ anything else ─────────────────────────────────────────► admitted
//! ```
//!
//! Port-forwarding is not judged: it reaches the sidecar's `/mcp`, which enforces the grants,
//! or a stdio server's bridge, which asks for its token.

use k8s_openapi::api::core::v1::Pod;

use super::secret_mounts::{self, Place, Protected};
use super::{AGENT_LABEL, Refusal, SIDECAR_CONTAINER};

/// The container an exec or attach reaches: the one named, or — when none is named — the pod's
/// only (regular) container, as the apiserver picks it. `None`: the apiserver refuses the
/// request itself (no container named in a pod of several).
pub fn target<'p>(pod: &'p Pod, named: Option<&'p str>) -> Option<&'p str> {
    match named.filter(|n| !n.is_empty()) {
        Some(name) => Some(name),
        None => match pod.spec.as_ref().map(|s| s.containers.as_slice()) {
            Some([only]) => Some(only.name.as_str()),
            _ => None,
        },
    }
}

/// Every Secret `container` of `pod` holds: in its environment, in a volume it mounts, or
/// through the container an ephemeral one targets. The webhook lists the namespace's
/// McpServers only when there is one.
pub fn held_secrets(pod: &Pod, container: &str) -> Vec<String> {
    secret_mounts::uses(pod)
        .into_iter()
        .filter(|u| match &u.place {
            Place::Env { container: c, .. }
            | Place::EnvFrom { container: c, .. }
            | Place::Mount { container: c, .. }
            | Place::Target { container: c, .. } => c == container,
            Place::Volume { .. } | Place::ImagePull => false,
        })
        .map(|u| u.secret)
        .collect()
}

/// Whether `pod` carries the injection label (any value: an empty one is refused at creation).
fn labelled(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(AGENT_LABEL))
}

/// How a refusal names the request: "exec into", "attach to".
fn action(subresource: &str) -> &'static str {
    match subresource {
        "attach" => "attach to",
        _ => "exec into",
    }
}

/// The decision for an exec or attach (`subresource`) into `container` of `pod`.
pub fn on_connect(
    pod: &Pod,
    subresource: &str,
    container: &str,
    protected: &Protected,
) -> Result<(), Refusal> {
    let is_sidecar = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == SIDECAR_CONTAINER));
    if container == SIDECAR_CONTAINER && is_sidecar && labelled(pod) {
        return Err(Refusal::ConnectSidecar {
            action: action(subresource),
        });
    }
    let held = held_secrets(pod, container)
        .into_iter()
        .find(|secret| !protected.servers_of(secret).is_empty());
    match held {
        Some(secret) => Err(Refusal::ConnectCredential {
            action: action(subresource),
            container: container.to_owned(),
            servers: protected
                .servers_of(&secret)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            secret,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::inject::secret_mounts::ProtectedServer;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    fn protected(server: &str, secrets: &[&str], stdio: bool) -> Protected {
        Protected {
            servers: vec![ProtectedServer {
                name: server.into(),
                uid: "u1".into(),
                stdio,
                secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            }],
        }
    }

    fn agent_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "a", "labels": {AGENT_LABEL: "files"}},
            "spec": {
                "initContainers": [{
                    "name": SIDECAR_CONTAINER, "image": "mcp-operator:dev", "restartPolicy": "Always",
                    "volumeMounts": [{"name": "mcp-credentials", "mountPath": "/var/run/mcp-credentials"}]
                }],
                "containers": [{"name": "agent", "image": "agent:1"}],
                "volumes": [{"name": "mcp-credentials", "projected": {"sources": [
                    {"secret": {"name": "tok-a", "items": [{"key": "token", "path": "secrets/tok-a/token"}]}}
                ]}}]
            }
        }))
    }

    fn stdio_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "s-mcp-abc", "labels": {"app.kubernetes.io/component": "stdio-mcp-server"}},
            "spec": {
                "initContainers": [{"name": "bridge", "image": "mcp-operator:dev"}],
                "containers": [{
                    "name": "server", "image": "node:22-slim",
                    "env": [{"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api-key", "key": "k"}}}],
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run/mcp-operator/token"}]
                }],
                "volumes": [{"name": "token", "secret": {"secretName": "s-mcp-token"}}]
            }
        }))
    }

    #[test]
    fn the_sidecar_of_a_labelled_pod_is_refused_even_without_credentials() {
        let refused = on_connect(
            &agent_pod(),
            "exec",
            SIDECAR_CONTAINER,
            &Protected::default(),
        )
        .expect_err("refused");
        let message = refused.to_string();
        assert!(
            message.contains("exec into the mcp-sidecar container"),
            "{message}"
        );
        assert!(message.contains("kubectl logs"), "{message}");
    }

    #[test]
    fn the_agent_container_of_a_labelled_pod_is_admitted() {
        let p = protected("files", &["tok-a"], false);
        assert_eq!(on_connect(&agent_pod(), "exec", "agent", &p), Ok(()));
        assert_eq!(on_connect(&agent_pod(), "attach", "agent", &p), Ok(()));
    }

    #[test]
    fn a_container_named_like_the_sidecar_in_an_unlabelled_pod_is_judged_by_its_secrets_only() {
        let mut p = agent_pod();
        p.metadata.labels = None;
        assert_eq!(
            on_connect(&p, "exec", SIDECAR_CONTAINER, &Protected::default()),
            Ok(())
        );
        // It mounts tok-a, which an McpServer names: refused for that.
        let refused = on_connect(
            &p,
            "exec",
            SIDECAR_CONTAINER,
            &protected("files", &["tok-a"], false),
        )
        .expect_err("refused");
        assert!(matches!(refused, Refusal::ConnectCredential { .. }));
    }

    #[test]
    fn the_server_container_of_a_stdio_pod_is_refused_for_its_env_and_for_its_token() {
        let refused = on_connect(
            &stdio_pod(),
            "exec",
            "server",
            &protected("s", &["api-key"], true),
        )
        .expect_err("env");
        let message = refused.to_string();
        assert!(message.contains("\"api-key\""), "{message}");
        assert!(message.contains("McpServer \"s\""), "{message}");
        let refused = on_connect(
            &stdio_pod(),
            "attach",
            "server",
            &protected("s", &["s-mcp-token"], true),
        )
        .expect_err("token");
        assert!(
            refused
                .to_string()
                .contains("attach to the container \"server\"")
        );
    }

    #[test]
    fn a_secret_no_mcp_server_names_is_no_reason_to_refuse() {
        assert_eq!(
            on_connect(
                &stdio_pod(),
                "exec",
                "server",
                &protected("other", &["unrelated"], false)
            ),
            Ok(())
        );
    }

    #[test]
    fn an_ephemeral_container_targeting_a_holder_holds_it_too() {
        let mut p = stdio_pod();
        p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![
            serde_json::from_value(json!({
                "name": "debugger", "image": "busybox", "targetContainerName": "server"
            }))
            .unwrap(),
        ]);
        let refused = on_connect(
            &p,
            "attach",
            "debugger",
            &protected("s", &["api-key"], true),
        )
        .expect_err("refused");
        assert!(matches!(refused, Refusal::ConnectCredential { .. }));
    }

    #[test]
    fn no_container_named_reaches_the_only_container() {
        let p = stdio_pod();
        assert_eq!(target(&p, None), Some("server"));
        assert_eq!(target(&p, Some("")), Some("server"));
        assert_eq!(target(&p, Some("bridge")), Some("bridge"));
        // The sidecar is an init container: never the default of a one-container agent pod.
        assert_eq!(target(&agent_pod(), None), Some("agent"));
        let mut two = agent_pod();
        two.spec
            .as_mut()
            .unwrap()
            .containers
            .push(serde_json::from_value(json!({"name": "b", "image": "b"})).unwrap());
        assert_eq!(target(&two, None), None);
    }

    #[test]
    fn the_refusals_never_name_a_secret_no_mcp_server_names() {
        let mut p = stdio_pod();
        p.spec.as_mut().unwrap().containers[0]
            .env
            .as_mut()
            .unwrap()
            .insert(
                0,
                serde_json::from_value(json!({"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "private-db", "key": "k"}}}))
                    .unwrap(),
            );
        let message = on_connect(&p, "exec", "server", &protected("s", &["api-key"], true))
            .expect_err("refused")
            .to_string();
        assert!(!message.contains("private-db"), "{message}");
    }
}
