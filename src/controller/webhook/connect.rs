//! `/validate/pods-connect` (ValidatingWebhookConfiguration entry
//! `connect.pods.validate.mcp-operator.dev`, CONNECT on `pods/exec` and `pods/attach`): an exec
//! or attach into a container that holds an McpServer's credential is refused
//! ([`crate::inject::connect`]). The apiserver sends the exec or attach options, not the pod:
//! the pod is read here.
//!
//! ```text
//!  apiserver ──POST /validate/pods-connect──► the pod (get; gone: admitted, the apiserver 404s)
//!                                              │ the container reached ("" → the only one)
//!                                              │ uses a Secret? McpServers of the namespace (list)
//!                                              ▼
//!                                 inject::connect::on_connect (pure) ──► admitted | refusal
//! ```

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use crate::inject::connect;
use crate::inject::secret_mounts::Protected;

use super::{Denied, Shared};

/// The container the options name (`PodExecOptions.container`, `PodAttachOptions.container`).
fn named_container(request: &AdmissionRequest<DynamicObject>) -> Option<&str> {
    request
        .object
        .as_ref()
        .and_then(|o| o.data.get("container"))
        .and_then(|c| c.as_str())
}

pub(super) async fn validate(
    s: &Shared,
    request: &AdmissionRequest<DynamicObject>,
    namespace: &str,
) -> Result<(), Denied> {
    let subresource = request.sub_resource.as_deref().unwrap_or_default();
    if !matches!(subresource, "exec" | "attach") {
        return Ok(());
    }
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), namespace);
    let name = &request.name;
    let pod = tokio::time::timeout(Duration::from_secs(5), pods.get_opt(name))
        .await
        .map_err(|_| Denied::Api(format!("reading the pod {name:?} timed out")))?
        .map_err(|e| Denied::Api(format!("reading the pod {name:?} failed: {e}")))?;
    let Some(pod) = pod else {
        return Ok(());
    };
    let Some(container) = connect::target(&pod, named_container(request)) else {
        return Ok(());
    };
    // Most containers hold no Secret at all: no McpServer list for them.
    let uses_one = !connect::held_secrets(&pod, container).is_empty();
    let protected = if uses_one {
        super::secret_mounts::protected(s, namespace).await?
    } else {
        Protected::default()
    };
    connect::on_connect(&pod, subresource, container, &protected).map_err(Denied::Refused)
}
