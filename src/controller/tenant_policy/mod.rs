//! The McpTenantPolicy reconciler: counts the namespaces a policy's namespaceSelector selects
//! and checks its selectors, and writes status only when that changed. The policy's effect on
//! grants is the AgentSpec reconciler's business (every AgentSpec re-resolves on any policy
//! change); this one tells the platform team what the policy reaches.
//!
//! ```text
//!  [ Namespace ] ─metadata watch─► every policy ─┐
//!  [ McpTenantPolicy ] ─watch────────────────────┴─► reconcile ─► status (SSA), Events
//! ```
//!
//! Policies and namespaces are cluster-scoped: watched everywhere even with --watch-namespace.

mod status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::conditions::{READY, TRUE, find};
use crate::api::tenant_policy::{McpTenantPolicy, McpTenantPolicyStatus};

use super::context::Context;
use super::error::ReconcileError;
use super::shared::picking::{self, policy_selects};
use super::shared::selector as grants_selector;
use super::shared::{events, status::apply_status_with};
use status::next_policy_status;

pub const KIND: &str = "McpTenantPolicy";

/// The shared context and the namespaces, from the watch that triggers the reconciler.
pub struct PolicyContext {
    pub base: Arc<Context>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The namespace store has received its first list.
    pub namespaces_listed: super::health::readiness::Readiness,
}

/// Reconciles one McpTenantPolicy.
pub async fn reconcile(
    policy: Arc<McpTenantPolicy>,
    ctx: Arc<PolicyContext>,
) -> Result<Action, ReconcileError> {
    ctx.base
        .metrics
        .time_reconcile(KIND, reconcile_inner(&policy, &ctx))
        .await
}

pub fn error_policy(
    policy: Arc<McpTenantPolicy>,
    error: &ReconcileError,
    _ctx: Arc<PolicyContext>,
) -> Action {
    warn!(
        mcptenantpolicy = %policy.name_any(),
        reason = error.reason(),
        "reconcile failed: {error}"
    );
    Action::requeue(Duration::from_secs(10))
}

/// What is wrong with a policy's selectors, one sentence each, saying what follows from it.
pub fn selector_problems(policy: &McpTenantPolicy) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(e) = grants_selector::validate(&policy.spec.namespace_selector) {
        problems.push(format!(
            "namespaceSelector is invalid: {e}; until it is fixed the policy applies to every \
             namespace (it fails closed)."
        ));
    }
    for (i, rule) in policy.spec.rules.iter().enumerate() {
        if let Some(selector) = &rule.servers.selector
            && let Err(e) = grants_selector::validate(selector)
        {
            problems.push(format!(
                "rules[{i}].servers.selector is invalid: {e}; until it is fixed the rule picks \
                 servers by name only, and its bounds still hold for every server it might \
                 pick (it fails closed)."
            ));
        }
        for pattern in &rule.servers.urls {
            if let Err(e) = picking::check_url_pattern(pattern) {
                problems.push(format!(
                    "rules[{i}].servers.urls: {e}; it picks no server until it is fixed."
                ));
            }
        }
    }
    problems
}

async fn reconcile_inner(
    policy: &McpTenantPolicy,
    ctx: &PolicyContext,
) -> Result<Action, ReconcileError> {
    if policy.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.namespaces_listed.wait().await;
    let selected = ctx
        .namespaces
        .state()
        .iter()
        .filter(|ns| ns.meta().deletion_timestamp.is_none() && policy_selects(policy, ns.labels()))
        .count();
    let problems = selector_problems(policy);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = next_policy_status(
        policy.status.as_ref(),
        policy.meta().generation,
        u32::try_from(selected).unwrap_or(u32::MAX),
        &problems,
        now,
    );
    if policy.status.as_ref() == Some(&status) {
        return Ok(Action::await_change());
    }
    // The event first: a crash before the status write repeats it rather than losing it.
    announce(policy, &ctx.base, &status).await;
    let api: Api<McpTenantPolicy> = Api::all(ctx.base.client.clone());
    apply_status_with(&api, policy, &status, &ctx.base.settings.field_manager)
        .await
        .map_err(ReconcileError::StatusPatch)?;
    ctx.base.metrics.count_write(KIND);
    Ok(Action::await_change())
}

/// An event when the policy's Ready condition flips.
async fn announce(policy: &McpTenantPolicy, ctx: &Context, status: &McpTenantPolicyStatus) {
    let was = policy
        .status
        .as_ref()
        .and_then(|s| find(&s.conditions, READY))
        .map(|c| c.status == TRUE);
    let Some(now) = find(&status.conditions, READY) else {
        return;
    };
    let ready = now.status == TRUE;
    if was == Some(ready) || (was.is_none() && ready) {
        return;
    }
    let name = policy.name_any();
    if ready {
        info!(mcptenantpolicy = %name, "McpTenantPolicy selectors are valid again");
    } else {
        warn!(mcptenantpolicy = %name, reason = %now.reason, "{}", now.message);
    }
    let event = Event {
        type_: if ready {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: now.reason.clone(),
        note: Some(now.message.clone()),
        action: "Evaluate".into(),
        secondary: None,
    };
    events::publish(&ctx.recorder, &policy.object_ref(&()), vec![event]).await;
}

/// Every policy (Namespace watch → reconcile: any namespace may join or leave a selection).
pub fn all(policies: &Store<McpTenantPolicy>) -> Vec<ObjectRef<McpTenantPolicy>> {
    policies
        .state()
        .iter()
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::policy;
    use serde_json::json;

    #[test]
    fn selector_problems_name_the_field_and_the_consequence() {
        let ok = policy(
            "p",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}},
                   "rules": [{"servers": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}}]}),
        );
        assert!(selector_problems(&ok).is_empty());
        let bad = policy(
            "p",
            json!({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Equals", "values": ["a"]}]},
                   "rules": [{"servers": {"names": ["gh"]}},
                             {"servers": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}}}]}),
        );
        let problems = selector_problems(&bad);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("namespaceSelector is invalid")
                && problems[0].contains("every namespace")
        );
        assert!(
            problems[1].starts_with("rules[1].servers.selector is invalid")
                && problems[1].contains("by name only")
                && problems[1].contains("fails closed")
        );
        let no_host = policy(
            "p",
            json!({"namespaceSelector": {},
                   "rules": [{"servers": {"urls": ["*.corp.example", "https:///mcp"]}}]}),
        );
        assert_eq!(
            selector_problems(&no_host),
            [
                "rules[0].servers.urls: the urls pattern \"https:///mcp\" names no host; write a \
              host such as mcp.corp.example or *.corp.example, optionally with a scheme, port \
              and path; it picks no server until it is fixed."
            ]
        );
    }
}
