//! An owned ConfigMap published only when its content changed: the content's digest lives in an
//! annotation, and a ConfigMap that already carries the digest is neither built nor written;
//! and its removal, where one already gone is no error.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};

/// The digest `annotation` of a ConfigMap's metadata says it holds.
pub fn digest_of<K: kube::Resource>(object: &K, annotation: &str) -> Option<String> {
    object.meta().annotations.as_ref()?.get(annotation).cloned()
}

/// Makes the ConfigMap `name` hold what `build` returns, unless it already carries `digest` in
/// `annotation` (read as metadata only). Returns whether it was written.
pub async fn apply_if_changed(
    api: &Api<ConfigMap>,
    name: &str,
    annotation: &str,
    digest: &str,
    field_manager: &str,
    build: impl FnOnce() -> ConfigMap,
) -> Result<bool, kube::Error> {
    if let Some(existing) = api.get_metadata_opt(name).await?
        && digest_of(&existing, annotation).as_deref() == Some(digest)
    {
        return Ok(false);
    }
    api.patch(
        name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(&build()),
    )
    .await?;
    Ok(true)
}

/// Deletes the ConfigMap `name`; one already gone is no error.
pub async fn delete_if_present(api: &Api<ConfigMap>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
