//! The one way a reconciler writes a status: server-side apply of the whole status, forced, under
//! the operator's field manager, so the status is exactly what the pure decision computed.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Applies `status` to `object`'s status subresource.
pub async fn apply_status<K, S>(
    client: &kube::Client,
    object: &K,
    status: &S,
    field_manager: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    S: Serialize,
{
    let api: Api<K> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
    apply_status_with(&api, object, status, field_manager).await
}

/// Applies `status` through `api` (cluster-scoped kinds pass `Api::all`).
pub async fn apply_status_with<K, S>(
    api: &Api<K>,
    object: &K,
    status: &S,
    field_manager: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}
