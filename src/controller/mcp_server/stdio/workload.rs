//! The Deployment and Service of a stdio McpServer, against the apiserver: applied with
//! server-side apply under the operator's field manager, owned by the McpServer (deleting it
//! deletes them, by garbage collection), written only when what [`stdio_workload`] builds
//! differs from what they carry; then read back to tell whether the server can be reached and
//! at which URL. The objects themselves and every judgement about them are
//! [`stdio_workload`]'s (pure).
//!
//! An object of the same name that this McpServer does not control is someone else's: it is
//! never overwritten, and the status says so. The token Secret is created once and never
//! written again (a new token only when someone deletes it), so an idle server costs no write.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use crate::api::mcp_server::{McpServer, stdio_token_secret_name};

use super::build::{self, Inputs, NotReady};
use crate::controller::context::Context;
use crate::controller::error::ReconcileError;

/// What the workload of a stdio server looks like now.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// The Service's URL, once it has a ClusterIP.
    pub url: Option<String>,
    /// Why the server cannot be reached yet; None when the Deployment is available.
    pub not_ready: Option<NotReady>,
}

/// Makes the workload of a stdio server what its spec says and reports its state; None for a
/// remote server (whose workload, if it had one as a stdio server before, is removed).
pub async fn reconcile(
    server: &McpServer,
    ctx: &Context,
) -> Result<Option<Observed>, ReconcileError> {
    let Some(stdio) = server.spec.stdio.as_ref() else {
        // Only a server that was stdio has a URL in status: only then is there anything to
        // remove, so remote servers cost no request here.
        if server.status.as_ref().is_some_and(|s| s.url.is_some()) {
            remove(server, ctx).await?;
        }
        return Ok(None);
    };
    let Some(bridge_image) = ctx.settings.bridge_image.as_deref() else {
        return Ok(Some(not_serving(
            "NoBridgeImage",
            "The operator runs without --bridge-image, so it cannot run stdio servers: set it \
             to the operator's own image (the Helm chart does)."
                .into(),
        )));
    };
    let (Some(owner), Some(uid)) = (server.controller_owner_ref(&()), server.uid()) else {
        // Every stored object has a uid; one without is not ours to act on.
        return Ok(None);
    };
    let namespace = server.namespace().unwrap_or_default();
    let server_name = server.name_any();
    let inputs = Inputs {
        server: &server_name,
        namespace: &namespace,
        owner,
        stdio,
        bridge_image,
        operator_namespace: ctx.settings.operator_namespace.as_deref(),
    };
    let name = build::name(&server_name);
    let conflict = |kind: &str| {
        Ok(Some(not_serving(
            "WorkloadConflict",
            format!(
                "A {kind} named {name} already exists in namespace {namespace} and does not \
                 belong to this McpServer; it is left alone. Rename the McpServer or remove \
                 that {kind}."
            ),
        )))
    };
    // The token first: the pods cannot start without it.
    if !token(&inputs, &uid, ctx).await? {
        return conflict("Secret");
    }
    if apply(build::network_policy(&inputs), &uid, ctx, "NetworkPolicy")
        .await?
        .is_none()
    {
        return conflict("NetworkPolicy");
    }
    let Some(deployment) = apply(build::deployment(&inputs), &uid, ctx, "Deployment").await? else {
        return conflict("Deployment");
    };
    let Some(service) = apply(build::service(&inputs), &uid, ctx, "Service").await? else {
        return conflict("Service");
    };
    observe(&server_name, &namespace, &deployment, &service, ctx)
        .await
        .map(Some)
}

/// A workload that does not serve, and why.
fn not_serving(reason: &'static str, message: String) -> Observed {
    Observed {
        url: None,
        not_ready: Some(NotReady { reason, message }),
    }
}

/// The workload's state: the Service's URL once it has a ClusterIP, and why it does not serve
/// (from the Deployment, and its pods only when it does not).
async fn observe(
    server_name: &str,
    namespace: &str,
    deployment: &Deployment,
    service: &Service,
    ctx: &Context,
) -> Result<Observed, ReconcileError> {
    let url = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(build::url);
    let not_ready = match build::assess(deployment, &[]) {
        Ok(()) => None,
        Err(_) => {
            // Only a workload that does not serve costs a look at its pods.
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
            let selector = build::selector(server_name)
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let pods = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(ReconcileError::Workload)?;
            build::assess(deployment, &pods.items).err()
        }
    };
    let not_ready = match (not_ready, &url) {
        (None, None) => Some(NotReady {
            reason: build::WORKLOAD_NOT_READY,
            message: format!("Service {} has no ClusterIP yet.", build::name(server_name)),
        }),
        (not_ready, _) => not_ready,
    };
    Ok(Observed { url, not_ready })
}

/// Makes sure the server's token Secret exists: created with a fresh token when absent, left
/// as it is when this McpServer controls it; false when someone else's Secret has the name.
async fn token(inputs: &Inputs<'_>, uid: &str, ctx: &Context) -> Result<bool, ReconcileError> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), inputs.namespace);
    let name = stdio_token_secret_name(inputs.server);
    if let Some(existing) = secrets
        .get_metadata_opt(&name)
        .await
        .map_err(ReconcileError::Workload)?
    {
        return Ok(build::controlled_by(
            existing.metadata.owner_references.as_deref(),
            uid,
        ));
    }
    let secret = build::token_secret(inputs, &crate::bridge::token::generate());
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            ctx.metrics.count_write("Secret");
            tracing::info!(
                namespace = inputs.namespace,
                server = inputs.server,
                secret = name,
                "issued the stdio server's token"
            );
            Ok(true)
        }
        // Made by a reconcile that raced this one: whose it is decides, next time.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(true),
        Err(e) => Err(ReconcileError::Workload(e)),
    }
}

/// Applies `desired` unless the object of its name already carries its digest; None when one
/// exists that this McpServer (`uid`) does not control.
async fn apply<K>(
    desired: K,
    uid: &str,
    ctx: &Context,
    kind: &'static str,
) -> Result<Option<K>, ReconcileError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let namespace = desired.meta().namespace.clone().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = api
        .get_opt(desired.meta().name.as_deref().unwrap_or_default())
        .await
        .map_err(ReconcileError::Workload)?;
    if let Some(existing) = existing {
        if !build::controlled_by(existing.meta().owner_references.as_deref(), uid) {
            return Ok(None);
        }
        if build::digest_of(existing.meta()) == build::digest_of(desired.meta()) {
            return Ok(Some(existing));
        }
    }
    let name = desired.meta().name.clone().unwrap_or_default();
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(&ctx.settings.field_manager).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(ReconcileError::Workload)?;
    ctx.metrics.count_write(kind);
    Ok(Some(applied))
}

/// Deletes the workload of a server that is no longer stdio (the objects it controls).
async fn remove(server: &McpServer, ctx: &Context) -> Result<(), ReconcileError> {
    let Some(uid) = server.uid() else {
        return Ok(());
    };
    let namespace = server.namespace().unwrap_or_default();
    let name = build::name(&server.name_any());
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(d) = deployments
        .get_metadata_opt(&name)
        .await
        .map_err(ReconcileError::Workload)?
        && build::controlled_by(d.metadata.owner_references.as_deref(), &uid)
    {
        delete(&deployments, &name).await?;
    }
    if let Some(s) = services
        .get_metadata_opt(&name)
        .await
        .map_err(ReconcileError::Workload)?
        && build::controlled_by(s.metadata.owner_references.as_deref(), &uid)
    {
        delete(&services, &name).await?;
    }
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(p) = policies
        .get_metadata_opt(&name)
        .await
        .map_err(ReconcileError::Workload)?
        && build::controlled_by(p.metadata.owner_references.as_deref(), &uid)
    {
        delete(&policies, &name).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let token = stdio_token_secret_name(&server.name_any());
    if let Some(s) = secrets
        .get_metadata_opt(&token)
        .await
        .map_err(ReconcileError::Workload)?
        && build::controlled_by(s.metadata.owner_references.as_deref(), &uid)
    {
        delete(&secrets, &token).await?;
    }
    Ok(())
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), ReconcileError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(ReconcileError::Workload(e)),
    }
}

/// The McpServer a watched Deployment belongs to (the watch's mapper).
pub fn owner_of(
    deployment: &kube::core::PartialObjectMeta<Deployment>,
) -> Option<ObjectRef<McpServer>> {
    let owners = deployment.metadata.owner_references.as_deref()?;
    let name = build::owner_name(owners)?;
    Some(ObjectRef::new(name).within(&deployment.namespace()?))
}
