//! `/validate/secret-mounts` (ValidatingWebhookConfiguration entry
//! `secrets.pods.validate.mcp-operator.dev`): every pod that uses some Secret, labelled or
//! not (the configuration's matchConditions keep every other pod away), is judged by
//! [`crate::inject::secret_mounts`] against the Secrets the McpServers of its namespace name.
//!
//! ```text
//!  apiserver ──POST /validate/secret-mounts──► uses of a Secret the pod adds? none: admitted
//!                                               │ McpServers of the namespace (list) → Protected
//!                                               │ new uses of protected Secrets?  none: admitted
//!                                               │ labelled, its mcp-sidecar the operator's?
//!                                               │   (AgentSpec, McpServers: get) its volume is
//!                                               │   the sidecar's own (exception (a))
//!                                               │ a ReplicaSet controls the pod? get it, and the
//!                                               │   Deployment that controls it (exception (b))
//!                                               ▼
//!                                  secret_mounts::decide (pure) ──► admitted | refusal
//! ```

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::{Api, ResourceExt};

use crate::api::mcp_server::McpServer;
use crate::inject;
use crate::inject::secret_mounts::{self, Protected, ProtectedServer, Workload};

use super::{Denied, Shared};

/// The Secrets through which a pod could act as the McpServer: what the sidecars send it
/// (bearer token, headers, the oauth2 client secret and refresh token; a stdio server's
/// operator-issued token) and, for a stdio
/// server, what its own process gets in its environment. A CA bundle is left out: it is a
/// certificate anyone may read, and mounting a shared CA Secret is ordinary.
pub fn protected_server(server: &McpServer) -> ProtectedServer {
    let mut secrets = std::collections::BTreeSet::new();
    if let Some(creds) = server.credentials() {
        secrets.extend(creds.bearer_token.map(|b| b.secret_key_ref.name));
        secrets.extend(
            creds
                .headers
                .into_iter()
                .map(|h| h.value_from.secret_key_ref.name),
        );
        // Whoever holds the client secret or refresh token obtains the server's tokens.
        if let Some(o) = creds.oauth2 {
            secrets.extend(o.client_secret.map(|r| r.secret_key_ref.name));
            secrets.extend(o.refresh_token.map(|r| r.secret_key_ref.name));
        }
    }
    if let Some(stdio) = &server.spec.stdio {
        secrets.extend(
            stdio
                .env
                .iter()
                .filter_map(|e| e.value_from.as_ref())
                .map(|f| f.secret_key_ref.name.clone()),
        );
    }
    ProtectedServer {
        name: server.name_any(),
        uid: server.uid().unwrap_or_default(),
        stdio: server.spec.stdio.is_some(),
        secrets,
    }
}

/// The Secrets every McpServer of `namespace` protects, as the apiserver has them now.
pub(super) async fn protected(s: &Shared, namespace: &str) -> Result<Protected, Denied> {
    let servers: Api<McpServer> = Api::namespaced(s.client.clone(), namespace);
    let listed = tokio::time::timeout(Duration::from_secs(5), servers.list(&ListParams::default()))
        .await
        .map_err(|_| Denied::Api("listing the namespace's McpServers timed out".into()))?
        .map_err(|e| Denied::Api(format!("listing the namespace's McpServers failed: {e}")))?;
    Ok(Protected {
        servers: listed.items.iter().map(protected_server).collect(),
    })
}

/// CREATE: the pod; UPDATE (also of pods/ephemeralcontainers): what the update adds. A read
/// that fails refuses the pod with the reason (the chart's failurePolicy decides what the
/// apiserver does when the webhook cannot answer at all).
pub(super) async fn validate(
    s: &Shared,
    request: &AdmissionRequest<Pod>,
    namespace: &str,
) -> Result<(), Denied> {
    let (pod, old) = match (&request.operation, &request.object, &request.old_object) {
        (Operation::Create, Some(pod), _) => (pod, None),
        (Operation::Update, Some(pod), Some(old)) => (pod, Some(old)),
        _ => return Ok(()),
    };
    // Most pods the matchConditions let through use no Secret that is new: no read at all.
    let before = old.map(secret_mounts::uses).unwrap_or_default();
    if secret_mounts::uses(pod).is_subset(&before) {
        return Ok(());
    }
    let read = Duration::from_secs(5);
    let protected = protected(s, namespace).await?;
    let mut uses = secret_mounts::new_protected_uses(pod, old, &protected, false);
    if uses.is_empty() {
        return Ok(());
    }
    // Exception (a) only for the operator's own sidecar, compared here as /validate/pods
    // does: that entry may select other namespaces, or be down with failurePolicy Ignore.
    if old.is_none() && operator_sidecar(s, pod, namespace).await? {
        uses = secret_mounts::new_protected_uses(pod, old, &protected, true);
        if uses.is_empty() {
            return Ok(());
        }
    }
    // Exception (b) only for a pod a ReplicaSet controls, and only with what the apiserver
    // has: the owner references in the pod are the pod author's to write.
    let mut replica_set = None;
    let mut deployment = None;
    if let Some(name) = secret_mounts::controlling_replica_set(pod) {
        let sets: Api<ReplicaSet> = Api::namespaced(s.client.clone(), namespace);
        replica_set = tokio::time::timeout(read, sets.get_opt(name))
            .await
            .map_err(|_| Denied::Api(format!("reading the ReplicaSet {name:?} timed out")))?
            .map_err(|e| Denied::Api(format!("reading the ReplicaSet {name:?} failed: {e}")))?;
        if let Some(name) = replica_set
            .as_ref()
            .and_then(secret_mounts::controlling_deployment)
        {
            let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), namespace);
            deployment = tokio::time::timeout(read, deployments.get_opt(name))
                .await
                .map_err(|_| Denied::Api(format!("reading the Deployment {name:?} timed out")))?
                .map_err(|e| Denied::Api(format!("reading the Deployment {name:?} failed: {e}")))?;
        }
    }
    let workload = Workload {
        replica_set: replica_set.as_ref(),
        deployment: deployment.as_ref(),
    };
    secret_mounts::decide(pod, &uses, &protected, workload).map_err(Denied::Refused)
}

/// Whether a labelled pod's `mcp-sidecar` init container is the one the injection builds for
/// the AgentSpec its label names (an unknown AgentSpec or an empty label: no).
async fn operator_sidecar(s: &Shared, pod: &Pod, namespace: &str) -> Result<bool, Denied> {
    let Some(Ok(agent)) = inject::agent_of(pod) else {
        return Ok(false);
    };
    let Some(sidecar) = pod
        .spec
        .as_ref()
        .and_then(|p| p.init_containers.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == inject::SIDECAR_CONTAINER))
    else {
        return Ok(false);
    };
    let (refs, trust) = match super::injection_inputs(s, namespace, agent).await {
        Ok((_, refs, trust)) => (refs, trust),
        Err(Denied::Refused(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let expected = inject::validate::expected_sidecar(agent, &refs, &trust, &s.sidecar);
    Ok(inject::validate::sidecar_difference(sidecar, &expected).is_none())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn server(spec: serde_json::Value) -> McpServer {
        serde_json::from_value(json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "s", "namespace": "t", "uid": "u1"},
            "spec": spec
        }))
        .expect("an McpServer")
    }

    #[test]
    fn a_remote_servers_bearer_token_and_headers_are_protected_its_ca_is_not() {
        let p = protected_server(&server(json!({
            "url": "https://x.example/mcp",
            "credentials": {
                "bearerToken": {"secretKeyRef": {"name": "tok", "key": "t"}},
                "headers": [{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "hdr", "key": "k"}}}]
            },
            "tls": {"caBundle": {"secretKeyRef": {"name": "ca", "key": "ca.crt"}}}
        })));
        assert_eq!(p.name, "s");
        assert_eq!(p.uid, "u1");
        assert!(!p.stdio);
        assert_eq!(
            p.secrets,
            ["hdr".to_string(), "tok".to_string()].into_iter().collect()
        );
    }

    #[test]
    fn a_stdio_servers_token_and_env_secrets_are_protected() {
        let p = protected_server(&server(json!({
            "stdio": {"image": "node:22", "command": ["npx"], "env": [
                {"name": "PLAIN", "value": "1"},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}}
            ]}
        })));
        assert!(p.stdio);
        assert_eq!(
            p.secrets,
            ["api".to_string(), "s-mcp-token".to_string()]
                .into_iter()
                .collect()
        );
    }
}
