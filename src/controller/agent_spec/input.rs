//! Kubernetes objects → the plain inputs of `grants::resolve`, and the one decision that
//! resolves them (endpoints filled by [`crate::controller::shared::endpoint`]). Pure: the AgentSpec reconciler reads the objects from its stores
//! and calls these; tests build the objects by hand.
//!
//! ```text
//! [ Namespace ].labels ──namespaceSelector──► selecting [ McpTenantPolicy ]s ──rules──► PolicyInput
//!                                      names / selector vs McpServer labels / urls vs spec.url
//! [ AgentSpec ].servers[] ──name──► [ McpServer ] (spec + status.catalog) ──► AgentServerInput
//!                                          └──► Endpoint (URL, transport, era, Secret *references*)
//! ```
//!
//! Invalid label selectors fail closed: a policy whose namespaceSelector cannot be evaluated
//! selects every namespace (it can only take tools away, and its status says why); a rule whose
//! server selector cannot be evaluated picks servers by name (and URL) only, and still bounds
//! every other server it might pick.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;

use crate::api::agent_spec::AgentSpec;
use crate::api::common::PromptPatterns;
use crate::api::common::ResourcePatterns;
use crate::api::conditions::{READY, TRUE, find};
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::McpTenantPolicy;
use crate::core::catalog::Catalog;
use crate::grants::{
    AgentServerInput, GrantsDocument, McpServerInput, PatternBound, PolicyInput, Resolution,
    ResolveInput, RuleInput, TenantDefault, resolve,
};

use crate::controller::shared::endpoint::fill_endpoints;
use crate::controller::shared::picking::{self, Pick};

/// One policy as the core sees it, for an AgentSpec using `servers` (its referenced McpServers
/// that exist, by name; `referenced` are all the names it references). A rule picks a server by
/// name, or by labels when the server exists, and only at a URL its `servers.urls` names when
/// it has any (see [`picking`]).
pub fn policy_input(
    policy: &McpTenantPolicy,
    referenced: &BTreeSet<String>,
    servers: &BTreeMap<String, &McpServer>,
) -> PolicyInput {
    let rules = policy
        .spec
        .rules
        .iter()
        .enumerate()
        .map(|(position, rule)| {
            let mut picked = BTreeSet::new();
            let mut bounds_only = BTreeSet::new();
            for name in referenced {
                match picking::pick(&rule.servers, name, servers.get(name).copied()) {
                    Pick::Picked => picked.insert(name.clone()),
                    Pick::Unknown => bounds_only.insert(name.clone()),
                    Pick::NotPicked => false,
                };
            }
            RuleInput {
                position,
                servers: picked,
                bounds_only,
                allow: rule.allow.clone(),
                deny: rule.deny.clone(),
                max_access: rule.max_access,
                require_approval_for: rule.require_approval_for,
                overrides: rule.overrides.clone(),
                resources: resource_bound(rule.resources.as_ref()),
                prompts: prompt_bound(rule.prompts.as_ref()),
            }
        })
        .collect();
    PolicyInput {
        name: policy.name_any(),
        rules,
    }
}

/// What an McpServer says about itself. `catalog` is its catalogue (from status, or read back
/// from the companion ConfigMap when spilled); None when there is none.
pub fn server_input<'a>(server: &McpServer, catalog: Option<&'a Catalog>) -> McpServerInput<'a> {
    let ready = server
        .status
        .as_ref()
        .and_then(|s| find(&s.conditions, READY));
    let tools = server.spec.tools.as_ref();
    McpServerInput {
        ready: ready.is_some_and(|c| c.status == TRUE),
        not_ready_reason: ready.filter(|c| c.status != TRUE).map(|c| c.reason.clone()),
        optional: server.spec.optional,
        catalog,
        allow: tools.map(|t| t.allow.clone()).unwrap_or_default(),
        deny: tools.map(|t| t.deny.clone()).unwrap_or_default(),
        require_approval: tools
            .map(|t| t.require_approval.clone())
            .unwrap_or_default(),
        pinned: server.status.as_ref().is_some_and(|s| s.pinning.is_some()),
    }
}

/// The catalogue in an McpServer's status, unless it was spilled to a ConfigMap (then the
/// caller reads it from there).
pub fn status_catalog(server: &McpServer) -> Option<&Catalog> {
    let status = server.status.as_ref()?;
    if status.catalog_config_map.is_some() {
        return None;
    }
    status.catalog.as_ref().map(|c| &c.catalog)
}

/// The input of one resolution. `servers` maps the names the AgentSpec references to the
/// McpServers that exist and their catalogues; `policies` are those selecting its namespace.
pub fn resolve_input<'a>(
    agent: &AgentSpec,
    servers: &BTreeMap<String, (&McpServer, Option<&'a Catalog>)>,
    policies: Vec<PolicyInput>,
    tenant_default: TenantDefault,
    preload_budget: u64,
) -> ResolveInput<'a> {
    ResolveInput {
        servers: agent
            .spec
            .servers
            .iter()
            .map(|s| AgentServerInput {
                name: s.name.clone(),
                prefix: s.prefix.clone(),
                allow: s.allow.clone(),
                deny: s.deny.clone(),
                require_approval: s.require_approval.clone(),
                resources: resource_bound(s.resources.as_ref()),
                prompts: prompt_bound(s.prompts.as_ref()),
                server: servers
                    .get(&s.name)
                    .map(|(server, catalog)| server_input(server, *catalog)),
            })
            .collect(),
        approval: agent.spec.approval,
        policies,
        tenant_default,
        preload_budget,
    }
}

/// The one decision of an AgentSpec reconcile: what the pure core resolves (its findings and
/// collisions make the status; a collision's tools are already withheld from its document),
/// and the document to publish, endpoints filled from `servers`.
pub struct Grants {
    pub resolution: Resolution,
    /// The document to publish, endpoints filled.
    pub document: GrantsDocument,
}

/// Resolves `input` once and fills the endpoints of the document to publish.
pub fn decide_grants(input: &ResolveInput<'_>, servers: &BTreeMap<String, &McpServer>) -> Grants {
    let resolution = resolve(input);
    let mut document = resolution.document.clone();
    fill_endpoints(&mut document, servers);
    Grants {
        resolution,
        document,
    }
}

/// The resource patterns of an AgentSpec entry or a policy rule, as the core reads them
/// (absent: none granted).
fn resource_bound(patterns: Option<&ResourcePatterns>) -> PatternBound {
    patterns.map_or_else(PatternBound::default, |p| PatternBound {
        allow: p.allow.clone(),
        deny: p.deny.clone(),
    })
}

/// The prompt patterns likewise.
fn prompt_bound(patterns: Option<&PromptPatterns>) -> PatternBound {
    patterns.map_or_else(PatternBound::default, |p| PatternBound {
        allow: p.allow.clone(),
        deny: p.deny.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{agent, catalog, full_server, policy, ready_status, server};
    use crate::core::catalog::{Access, build};
    use crate::grants::resolve;
    use serde_json::{Value, json};

    #[test]
    fn rules_pick_referenced_servers_by_name_or_labels() {
        let cat = catalog();
        let gh = server(
            "gh",
            json!({"tier": "prod"}),
            json!({"url": "https://gh.example/mcp"}),
            ready_status(&cat),
        );
        let fs = server(
            "fs",
            json!({"tier": "dev"}),
            json!({"url": "https://fs.example/mcp"}),
            ready_status(&cat),
        );
        let servers = BTreeMap::from([("gh".to_string(), &gh), ("fs".to_string(), &fs)]);
        let referenced: BTreeSet<String> =
            ["gh", "fs", "gone"].iter().map(|s| s.to_string()).collect();
        let p = policy(
            "p",
            json!({"namespaceSelector": {}, "rules": [
                {"servers": {"names": ["gone", "elsewhere"]}, "maxAccess": "read"},
                {"servers": {"selector": {"matchLabels": {"tier": "prod"}}}, "deny": ["delete_*"]},
                {"servers": {"names": ["fs"], "selector": {"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}}},
                {"servers": {"selector": {}}, "requireApprovalFor": "write"},
                {"servers": {"urls": ["gh.example"]}, "overrides": {"delete_file": "write"}},
                {"servers": {"names": ["gh", "fs"], "urls": ["https://fs.example/*"]}},
            ]}),
        );
        let input = policy_input(&p, &referenced, &servers);
        assert_eq!(input.name, "p");
        let names = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>();
        let picked: Vec<Vec<String>> = input.rules.iter().map(|r| names(&r.servers)).collect();
        assert_eq!(
            picked,
            vec![
                vec!["gone"],
                vec!["gh"],
                vec!["fs"],
                vec!["fs", "gh"],
                vec!["gh"],
                vec!["fs"]
            ]
        );
        // The invalid selector still bounds gh, which it might pick, without letting it in.
        assert_eq!(names(&input.rules[2].bounds_only), ["gh"]);
        assert!(input.rules.iter().enumerate().all(|(i, r)| r.position == i));
        assert_eq!(input.rules[0].max_access, Some(Access::Read));
        assert_eq!(input.rules[1].deny, vec!["delete_*".to_string()]);
        assert_eq!(input.rules[3].require_approval_for, Some(Access::Write));
        assert_eq!(
            input.rules[4].overrides,
            BTreeMap::from([("delete_file".to_string(), Access::Write)])
        );
    }

    #[test]
    fn server_input_reads_readiness_curation_and_optional() {
        let cat = catalog();
        let s = server(
            "gh",
            json!({}),
            json!({"url": "https://gh.example/mcp", "optional": true,
                   "tools": {"allow": ["*_file"], "deny": ["delete_*"], "requireApproval": ["write_file"]}}),
            ready_status(&cat),
        );
        let input = server_input(&s, status_catalog(&s));
        assert!(input.ready && input.optional);
        assert_eq!(input.not_ready_reason, None);
        assert_eq!(input.catalog.unwrap().tool_count, 4);
        assert_eq!(input.allow, vec!["*_file".to_string()]);
        assert_eq!(input.deny, vec!["delete_*".to_string()]);
        assert_eq!(input.require_approval, vec!["write_file".to_string()]);

        let mut down = s.clone();
        down.status.as_mut().unwrap().conditions[0].status = "False".into();
        down.status.as_mut().unwrap().conditions[0].reason = "Unauthorized".into();
        let input = server_input(&down, None);
        assert!(!input.ready);
        assert_eq!(input.not_ready_reason.as_deref(), Some("Unauthorized"));

        let fresh = server(
            "new",
            json!({}),
            json!({"url": "https://x.example/mcp"}),
            Value::Null,
        );
        let input = server_input(&fresh, status_catalog(&fresh));
        assert!(!input.ready && input.catalog.is_none() && input.not_ready_reason.is_none());

        let mut spilled = s.clone();
        spilled.status.as_mut().unwrap().catalog_config_map = Some("gh-mcp-catalog".into());
        assert!(
            status_catalog(&spilled).is_none(),
            "read from the ConfigMap instead"
        );
    }

    #[test]
    fn a_collision_is_resolved_by_withholding_both_tools_and_nothing_else() {
        let cat = catalog();
        let a = server(
            "a",
            json!({}),
            json!({"url": "https://a.example/mcp"}),
            ready_status(&cat),
        );
        let b = server(
            "b",
            json!({}),
            json!({"url": "https://b.example/mcp"}),
            ready_status(&cat),
        );
        // "x" + "__" + "_read_file" and "x_" + "__" + "read_file" are both x___read_file.
        let agent = agent(json!({"servers": [
            {"name": "a", "prefix": "x"},
            {"name": "b", "prefix": "x_"},
        ]}));
        // Server a (prefix x) also offers _read_file.
        let mut cat_b = cat.clone();
        let extra = build(
            &[json!({"name": "_read_file", "inputSchema": {}, "annotations": {"readOnlyHint": true}})
                .as_object()
                .unwrap()
                .clone()],
            &BTreeMap::new(),
            1,
        );
        cat_b = Catalog {
            tools: [cat_b.tools, extra.tools].concat(),
            tool_count: 5,
            ..cat_b
        };
        cat_b.tools.sort_by(|x, y| x.name.cmp(&y.name));
        let servers = BTreeMap::from([
            ("a".to_string(), (&a, Some(&cat_b))),
            ("b".to_string(), (&b, Some(&cat))),
        ]);
        let input = resolve_input(&agent, &servers, vec![], TenantDefault::Allow, u64::MAX);
        // The reconciler's one decision: one resolution, the collision reported, neither
        // colliding tool published, everything else is.
        let by_name = BTreeMap::from([("a".to_string(), &a), ("b".to_string(), &b)]);
        let grants = decide_grants(&input, &by_name);
        assert_eq!(grants.resolution.collisions.len(), 1);
        let names: Vec<&str> = grants
            .document
            .servers
            .iter()
            .flat_map(|s| s.tools.iter().map(|t| t.qualified_name.as_str()))
            .collect();
        assert!(!names.contains(&"x___read_file"), "{names:?}");
        assert_eq!(grants.document.tool_count(), 4 + 5 - 2);
        assert!(grants.document.servers.iter().all(|s| s.endpoint.is_some()));
    }

    #[test]
    fn fill_endpoints_skips_missing_servers() {
        let gh = full_server();
        let agent = agent(json!({"servers": [{"name": "gh"}, {"name": "gone"}]}));
        let cat = catalog();
        let servers = BTreeMap::from([("gh".to_string(), (&gh, Some(&cat)))]);
        let input = resolve_input(&agent, &servers, vec![], TenantDefault::Allow, u64::MAX);
        let mut doc = resolve(&input).document;
        fill_endpoints(&mut doc, &BTreeMap::from([("gh".to_string(), &gh)]));
        assert!(
            doc.servers
                .iter()
                .find(|s| s.name == "gh")
                .unwrap()
                .endpoint
                .is_some()
        );
        assert!(
            doc.servers
                .iter()
                .find(|s| s.name == "gone")
                .unwrap()
                .endpoint
                .is_none()
        );
    }
}
