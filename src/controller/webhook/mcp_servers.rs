//! `/validate/mcpservers`: who may make the operator use a Secret, and who may approve a pin.
//!
//! The controller may read every Secret and sends what an McpServer names to the URL the same
//! person wrote; a stdio server's Deployment gets the Secrets its `env` names. So creating an
//! McpServer must not be a way to read a Secret one may not `get`. And under an
//! McpTenantPolicy rule with `requirePinning`, approving a changed tool definition is a right
//! of its own (as `certificatesigningrequests/approval` is for CSRs), not of whoever may edit
//! the McpServer.
//!
//! ```text
//!  apiserver ──POST /validate/mcpservers (CREATE, UPDATE)──► review()
//!     secrets_to_check(old, new)  (pure) ─► SubjectAccessReview get secrets/<name>, per Secret
//!     approvals_given(old, new, picked?) (pure)
//!        └ only if something is given: McpTenantPolicies (list) + the Namespace (get)
//!          ─► shared::picking::pinning_required_by (the reconciler's own evaluation), old and new
//!          ─► SubjectAccessReview approve mcpservers/approval
//!     every refusal names the Secret or the permission and what to do; never whether a
//!     Secret exists (the review asks the authorizer only)
//! ```
//!
//! UPDATE checks what changes, so an admin's reference does not block a tenant editing
//! another field: a Secret key is checked when the new object names it in a place the old one
//! did not (sent to the server, trusted as CA, given to the process), and every Secret is
//! checked again when its values would go somewhere else (`spec.url`, the stdio image,
//! command or args, TLS verification turned off). An approval is checked when it is new
//! (a digest in the annotation, or a `spec.pinning.approved` entry, the old object did not
//! have); withdrawing one only narrows and needs no right. A server moved into a pinning
//! policy's reach (a label, a URL) with approvals already on it needs the right for all of
//! them: they were given without it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, PostParams};
use kube::core::admission::{AdmissionRequest, Operation};
use kube::{Api, Client, ResourceExt};

use crate::api::mcp_server::{
    APPROVE_ANNOTATION, McpServer, McpServerSpec, approved_by_annotation,
};
use crate::api::tenant_policy::McpTenantPolicy;
use crate::controller::shared::picking::{PINNING_BY_SPEC, pinning_required_by};
use crate::controller::shared::references::{SecretUse, secret_references};

/// The API group of the approval right.
pub const APPROVAL_GROUP: &str = "mcp-operator.dev";
/// `approve` on `mcpservers/approval`: who may approve pins under a policy requiring pinning.
pub const APPROVAL_RESOURCE: &str = "mcpservers";
pub const APPROVAL_SUBRESOURCE: &str = "approval";
pub const APPROVAL_VERB: &str = "approve";

// ------------------------------------------------------------------------------ pure

/// Where a Secret's values go: the URL, the stdio image, command and args, whether TLS is
/// verified. A change here re-checks every Secret the server names.
type Destination<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<(&'a str, &'a [String], &'a [String])>,
    bool,
);

fn destination(spec: &McpServerSpec) -> Destination<'_> {
    (
        spec.url.as_deref(),
        // The oauth2 client secret and refresh token go to the token endpoint.
        spec.credentials
            .as_ref()
            .and_then(|c| c.oauth2.as_ref())
            .map(|o| o.token_url.as_str()),
        spec.stdio
            .as_ref()
            .map(|s| (s.image.as_str(), s.command.as_slice(), s.args.as_slice())),
        spec.tls.as_ref().is_some_and(|t| t.insecure_skip_verify),
    )
}

/// A Secret the requester must be allowed to read, and the field that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretToCheck {
    pub name: String,
    pub field: String,
}

/// The Secrets whose `get` is asked of the requester: on CREATE every one the spec names; on
/// UPDATE those named in a new place (see the module comment), or all when the destination
/// changed. Once per Secret name (the first field naming it), in spec order.
pub fn secrets_to_check(old: Option<&McpServerSpec>, new: &McpServerSpec) -> Vec<SecretToCheck> {
    let known: BTreeSet<(SecretUse, &str, &str)> = match old {
        Some(old) if destination(old) == destination(new) => secret_references(old)
            .into_iter()
            .map(|r| (r.used, r.selector.name.as_str(), r.selector.key.as_str()))
            .collect(),
        _ => BTreeSet::new(),
    };
    let mut out: Vec<SecretToCheck> = Vec::new();
    for r in secret_references(new) {
        let name = r.selector.name.as_str();
        if known.contains(&(r.used, name, r.selector.key.as_str()))
            || out.iter().any(|c| c.name == name)
        {
            continue;
        }
        out.push(SecretToCheck {
            name: name.to_string(),
            field: r.field,
        });
    }
    out
}

/// Every approval an McpServer carries, in words: `annotation <digest>` and
/// `spec.pinning.approved <tool>=<digest>`.
fn approvals(server: &McpServer) -> BTreeSet<String> {
    let by_annotation = server
        .annotations()
        .get(APPROVE_ANNOTATION)
        .map(|v| approved_by_annotation(v))
        .unwrap_or_default()
        .into_iter()
        .map(|d| format!("{APPROVE_ANNOTATION} {d}"));
    let by_spec = server
        .spec
        .pinning
        .iter()
        .flat_map(|p| p.approved.iter())
        .map(|(tool, d)| format!("spec.pinning.approved {tool}={d}"));
    by_annotation.chain(by_spec).collect()
}

/// The approvals this request gives, given whether a policy requiring pinning picks the old
/// and the new object: none when neither is picked (the owner approves); the new ones when the
/// old object was picked; all of them when only the new one is (they were given without the
/// right).
pub fn approvals_given(
    old: Option<&McpServer>,
    new: &McpServer,
    old_picked: bool,
    new_picked: bool,
) -> Vec<String> {
    if !old_picked && !new_picked {
        return Vec::new();
    }
    let before = match old {
        Some(old) if old_picked => approvals(old),
        _ => BTreeSet::new(),
    };
    approvals(new).difference(&before).cloned().collect()
}

/// Whether the request could give an approval at all: only then are the policies read.
pub fn may_give_approvals(new: &McpServer) -> bool {
    !approvals(new).is_empty()
}

/// The policies (`McpTenantPolicy/<name>`) that require pinning for `server`, as the
/// controller evaluates them: its own spec's pinning does not count (the owner may approve
/// what the owner turned on).
pub fn pinning_policies<'a>(
    server: &McpServer,
    policies: impl IntoIterator<Item = &'a McpTenantPolicy>,
    namespace_labels: &BTreeMap<String, String>,
) -> Vec<String> {
    pinning_required_by(server, policies, namespace_labels)
        .into_iter()
        .filter(|by| by != PINNING_BY_SPEC)
        .collect()
}

/// Who the request is from, in messages.
fn user_name(user: &UserInfo) -> &str {
    user.username.as_deref().unwrap_or("(unknown user)")
}

/// The refusal for Secrets the requester may not read: names each and the field naming it,
/// never whether it exists.
pub fn secrets_refusal(user: &UserInfo, namespace: &str, refused: &[SecretToCheck]) -> String {
    let each: Vec<String> = refused
        .iter()
        .map(|s| {
            format!(
                "user {:?} may not get Secret {:?} in namespace {namespace:?} (named by {})",
                user_name(user),
                s.name,
                s.field
            )
        })
        .collect();
    format!(
        "{}: the operator would read it on your behalf. Ask for get on it, or have someone who \
         may read it create or change this McpServer",
        each.join("; ")
    )
}

/// The refusal for approvals the requester may not give.
pub fn approvals_refusal(
    user: &UserInfo,
    namespace: &str,
    server: &str,
    policies: &[String],
    given: &[String],
    approver_role: &str,
) -> String {
    let shown: Vec<&str> = given.iter().take(5).map(String::as_str).collect();
    let more = given.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "user {:?} may not approve tool or prompt definitions of McpServer {server:?} in namespace \
         {namespace:?} ({}{more}): {} requires pinning for it, and approving needs the verb \
         {APPROVAL_VERB} on {APPROVAL_RESOURCE}/{APPROVAL_SUBRESOURCE} (group \
         {APPROVAL_GROUP}) in that namespace. Ask someone bound to the ClusterRole \
         {approver_role} to approve, or leave the {APPROVE_ANNOTATION} annotation and \
         spec.pinning.approved as they were",
        user_name(user),
        shown.join(", "),
        policies.join(", "),
    )
}

/// The SubjectAccessReview asking whether `user` may do `attributes`: the request's user as
/// the apiserver authenticated it (name, groups, uid, extra), so the answer is the one RBAC or
/// any other authorizer would give that user.
pub fn review_for(user: &UserInfo, attributes: ResourceAttributes) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(attributes),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `get` on one Secret.
pub fn get_secret(namespace: &str, name: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(String::new()),
        resource: Some("secrets".into()),
        verb: Some("get".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..Default::default()
    }
}

/// `approve` on `mcpservers/approval` of one McpServer.
pub fn approve_pins(namespace: &str, name: &str) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(APPROVAL_GROUP.into()),
        resource: Some(APPROVAL_RESOURCE.into()),
        subresource: Some(APPROVAL_SUBRESOURCE.into()),
        verb: Some(APPROVAL_VERB.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..Default::default()
    }
}

// ------------------------------------------------------------------------------ I/O

/// Why a request was refused: the requester lacks a right (the message says which), or the
/// webhook could not ask (an apiserver error; the request is refused, failing closed).
pub enum Denied {
    Refused(String),
    Api(String),
}

/// Decides one McpServer admission. `approver_role` names the chart's pin-approver ClusterRole
/// in messages.
pub async fn validate(
    client: &Client,
    request: &AdmissionRequest<McpServer>,
    approver_role: &str,
) -> Result<(), Denied> {
    let (old, new) = match (&request.operation, &request.object) {
        (Operation::Create, Some(new)) => (None, new),
        (Operation::Update, Some(new)) => (request.old_object.as_ref(), new),
        _ => return Ok(()),
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let user = &request.user_info;

    let secrets = secrets_to_check(old.map(|o| &o.spec), &new.spec);
    let mut refused = Vec::new();
    for secret in secrets {
        if !allowed(client, user, get_secret(&namespace, &secret.name)).await? {
            refused.push(secret);
        }
    }
    if !refused.is_empty() {
        return Err(Denied::Refused(secrets_refusal(user, &namespace, &refused)));
    }

    if !may_give_approvals(new) {
        return Ok(());
    }
    let (policies, labels) = tenancy(client, &namespace).await?;
    let new_by = pinning_policies(new, policies.iter(), &labels);
    let old_by = old
        .map(|o| pinning_policies(o, policies.iter(), &labels))
        .unwrap_or_default();
    let given = approvals_given(old, new, !old_by.is_empty(), !new_by.is_empty());
    if given.is_empty() {
        return Ok(());
    }
    let name = if request.name.is_empty() {
        new.name_any()
    } else {
        request.name.clone()
    };
    if allowed(client, user, approve_pins(&namespace, &name)).await? {
        return Ok(());
    }
    let mut by: Vec<String> = new_by.into_iter().chain(old_by).collect();
    by.sort();
    by.dedup();
    Err(Denied::Refused(approvals_refusal(
        user,
        &namespace,
        &name,
        &by,
        &given,
        approver_role,
    )))
}

/// Every McpTenantPolicy and the labels of `namespace` (a namespace that cannot be found has
/// none: policies selecting `{}` still pick it).
async fn tenancy(
    client: &Client,
    namespace: &str,
) -> Result<(Vec<McpTenantPolicy>, BTreeMap<String, String>), Denied> {
    let read = std::time::Duration::from_secs(5);
    let policies = tokio::time::timeout(
        read,
        Api::<McpTenantPolicy>::all(client.clone()).list(&ListParams::default()),
    )
    .await
    .map_err(|_| Denied::Api("listing the McpTenantPolicies timed out".into()))?
    .map_err(|e| Denied::Api(format!("listing the McpTenantPolicies failed: {e}")))?
    .items;
    let labels = tokio::time::timeout(
        read,
        Api::<Namespace>::all(client.clone()).get_opt(namespace),
    )
    .await
    .map_err(|_| Denied::Api(format!("reading the Namespace {namespace:?} timed out")))?
    .map_err(|e| Denied::Api(format!("reading the Namespace {namespace:?} failed: {e}")))?
    .map(|ns| ns.labels().clone())
    .unwrap_or_default();
    Ok((policies, labels))
}

/// Asks the apiserver's authorizer.
async fn allowed(
    client: &Client,
    user: &UserInfo,
    attributes: ResourceAttributes,
) -> Result<bool, Denied> {
    let what = format!(
        "{} {}{}",
        attributes.verb.as_deref().unwrap_or_default(),
        attributes.resource.as_deref().unwrap_or_default(),
        attributes
            .name
            .as_deref()
            .map(|n| format!(" {n:?}"))
            .unwrap_or_default()
    );
    let review = review_for(user, attributes);
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review),
    )
    .await
    .map_err(|_| Denied::Api(format!("asking whether the user may {what} timed out")))?
    .map_err(|e| Denied::Api(format!("asking whether the user may {what} failed: {e}")))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests;
