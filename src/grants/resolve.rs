//! [`resolve`]: the one function that intersects the three planes for one AgentSpec. The
//! AgentSpec reconciler calls it on every change of the AgentSpec, a referenced McpServer or a
//! tenant policy; tests call it with hand-built inputs.
//!
//! ```text
//!  catalogue ──server allow/deny──► offered ──every selecting policy──► permitted ──spec allow/deny──► granted
//!                 withheldByServer            withheldByPolicy                 withheldBySpec
//! ```
//!
//! Rules the design left open, decided here:
//!
//! - Rules bound; they do not add up. Within one policy, a tool on server S is permitted when
//!   at least one rule picks S and **every** rule that picks S permits it: its allow list
//!   matches (empty: all), none of its denies matches, and the tool's access is at most its
//!   maxAccess. So the tightest ceiling and every deny apply, and a rule's match (a label or a
//!   name the tenant adds) can only narrow. A policy none of whose rules picks S permits none of
//!   S's tools (the safe default; an empty rule list permits nothing). A rule whose label
//!   selector cannot be evaluated bounds the servers it might pick (`bounds_only`) without
//!   letting them in.
//! - The access a policy judges is the platform's: where policies select the tenant, every
//!   rule bounding the server classifies each tool, by its `overrides` when they name the tool
//!   (the platform's reclassification, which may lower), else as the server serves it (its
//!   annotations), and the strictest of these counts. So a reclassification downward holds
//!   where every rule bounding the server makes it, and one more rule match can only raise a
//!   classification, never lower it. The McpServer's own `tools.overrides` (the tenant's) can
//!   only raise it further. Without any policy (tenant default allow) the McpServer's
//!   overrides apply as they are. That one access is what maxAccess, every approval level and
//!   the published `access` speak of, and an override the policy does not follow is reported
//!   (`OverrideNotApplied`).
//! - Every `requireApprovalFor` of a rule that picks the server applies (the lowest level
//!   wins), to every granted tool of the server.
//! - A server that is missing, not Ready, or has no catalogue grants nothing (a stale catalogue
//!   is not used) and is listed as unavailable. A missing server's `optional` is unknown, so it
//!   is treated as required.
//! - Grant patterns and requireApproval names are checked against what the server *offers*
//!   (its catalogue after its own allow/deny); a pattern that matches only hidden tools is
//!   reported too, with a message saying so.
//! - Withheld counts are taken in plane order: a tool is counted against the first plane that
//!   drops it, so granted + the three withheld counts + awaiting approval = the catalogue's
//!   size.
//! - A tool its server's pinning holds back (`awaitingApproval` in the catalogue) is granted to
//!   nobody; only an AgentSpec that would have been granted it counts it and hears why.
//! - Two granted tools sharing a qualified name are a collision: neither is chosen. Both are
//!   withheld (counted as withheld by the spec, as if the AgentSpec denied them, from every
//!   entry of their servers) and the rest is published, so a collision never keeps older grants
//!   in service; the `NameCollision` finding names both and keeps the AgentSpec from being
//!   ready. One pass decides this: the published document never holds a name twice.
//! - Resources and prompts follow the same planes with one difference: no allow pattern grants
//!   none (see [`super::resources_prompts`]). The document carries the bounds, not names (the
//!   sidecar matches the live URIs and names against them) — except under pinning, where it
//!   also carries the granted, approved prompts' digests (`promptDigests`): the AgentSpec entry's, then, where
//!   policies select the tenant, those of every rule bounding the server, all of which must
//!   permit. A policy with no rule picking the server, a rule without allow patterns, the tenant
//!   default deny, or an unavailable server grants none.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::document::{GrantedTool, GrantsDocument, ServerGrants, qualified_name};
use super::input::{
    AgentServerInput, Approval, McpServerInput, PolicyInput, ResolveInput, TenantDefault,
};
use super::pattern::PatternSet;
use super::resources_prompts::PatternBound;
use crate::core::{Access, Catalog, CatalogTool};

/// The outcome of one resolution.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    /// The grants to publish: the intersection minus every colliding tool. Every server's
    /// `endpoint` is empty: the controller fills it.
    pub document: GrantsDocument,
    /// Per server, sorted by name: what the AgentSpec's status reports (of the document as
    /// published, colliding tools withheld).
    pub servers: Vec<ServerOutcome>,
    /// Tools that passed every plane but share a qualified name; none of them is published.
    pub collisions: Vec<Collision>,
    /// Everything a person should hear about, sorted by reason, server and message.
    pub findings: Vec<Finding>,
    /// True when there is no collision and every required server is available.
    pub ready: bool,
}

impl Resolution {
    /// True when qualified names were unique without withholding anything.
    pub fn resolved(&self) -> bool {
        self.collisions.is_empty()
    }

    /// The distinct reasons among the findings, in [`Reason`] order.
    pub fn reasons(&self) -> Vec<Reason> {
        let set: BTreeSet<Reason> = self.findings.iter().map(|f| f.reason).collect();
        set.into_iter().collect()
    }

    /// The findings that keep the AgentSpec from being ready.
    pub fn blocking(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.blocking)
    }
}

/// The grant outcome for one server, field for field what `AgentServerStatus` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerOutcome {
    pub name: String,
    pub prefix: String,
    /// The server exists, is Ready and has a catalogue.
    pub available: bool,
    /// From the McpServer; false when it does not exist.
    pub optional: bool,
    /// The granted tools' schemas exceed the preload budget.
    pub deferred: bool,
    pub granted_tools: u32,
    /// Dropped by the McpServer's own allow/deny.
    pub withheld_by_server: u32,
    /// Offered but not permitted by the tenant's policies (or the tenant default).
    pub withheld_by_policy: u32,
    /// Permitted but not asked for by the AgentSpec's allow/deny.
    pub withheld_by_spec: u32,
    /// Asked for and permitted, but the server pins its definitions and this one waits for a
    /// person's approval.
    pub awaiting_approval: u32,
    /// Sum of the granted tools' schema sizes, compared with the preload budget.
    pub granted_schema_bytes: u64,
}

/// Granted tools that share one qualified name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Collision {
    pub qualified_name: String,
    /// Two or more, sorted.
    pub tools: Vec<ToolRef>,
}

/// A tool of a server.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ToolRef {
    pub server: String,
    pub tool: String,
}

/// Why a finding was raised. The words are the condition reasons the controller writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Reason {
    /// Two granted tools have the same qualified name; neither is published.
    NameCollision,
    /// A referenced McpServer does not exist.
    ServerNotFound,
    /// A referenced McpServer is not Ready or has no catalogue yet.
    ServerNotReady,
    /// The tenant's policies withhold a tool asked for by name, or a whole server.
    DeniedByPolicy,
    /// An AgentSpec allow pattern matches no tool the server offers.
    PatternMatchesNothing,
    /// An AgentSpec requireApproval name is not a tool the server offers.
    RequireApprovalNotOffered,
    /// A tool the agent would be granted is withheld: its server pins tool definitions and
    /// this one changed (or is new) and waits for a person's approval.
    AwaitingApproval,
    /// The McpServer's tools.overrides would lower a tool's classification where a tenant
    /// policy bounds the server: the policy judges the stricter classification instead.
    OverrideNotApplied,
}

impl Reason {
    /// The reason word, as conditions, metrics and logs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NameCollision => "NameCollision",
            Reason::ServerNotFound => "ServerNotFound",
            Reason::ServerNotReady => "ServerNotReady",
            Reason::DeniedByPolicy => "DeniedByPolicy",
            Reason::PatternMatchesNothing => "PatternMatchesNothing",
            Reason::RequireApprovalNotOffered => "RequireApprovalNotOffered",
            Reason::AwaitingApproval => "AwaitingApproval",
            Reason::OverrideNotApplied => "OverrideNotApplied",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something a person should hear about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub reason: Reason,
    /// The server concerned; None for a collision, which names its servers in the message.
    pub server: Option<String>,
    /// A sentence a person can act on.
    pub message: String,
    /// It keeps the AgentSpec from being ready.
    pub blocking: bool,
}

impl Finding {
    fn new(reason: Reason, server: Option<&str>, message: String, blocking: bool) -> Self {
        Finding {
            reason,
            server: server.map(str::to_string),
            message,
            blocking,
        }
    }
}

/// Intersects the planes for one AgentSpec. Pure and deterministic: the order of servers,
/// patterns, policies and rules in the input never changes the result.
pub fn resolve(input: &ResolveInput<'_>) -> Resolution {
    let policies = PolicyPlane::new(&input.policies, input.tenant_default);
    let mut entries: Vec<&AgentServerInput<'_>> = input.servers.iter().collect();
    entries.sort_by(|a, b| (&a.name, prefix_of(a)).cmp(&(&b.name, prefix_of(b))));

    let mut findings = Vec::new();
    let mut servers = Vec::with_capacity(entries.len());
    let mut outcomes = Vec::with_capacity(entries.len());
    for &entry in &entries {
        let (grants, outcome) = resolve_server(entry, input, &policies, &mut findings);
        servers.push(grants);
        outcomes.push(outcome);
    }

    let collisions = collisions(&servers);
    withhold_colliding(
        &collisions,
        &entries,
        &mut servers,
        &mut outcomes,
        input.preload_budget,
    );
    for c in &collisions {
        let named: Vec<String> = c
            .tools
            .iter()
            .map(|t| format!("tool {} of McpServer {}", t.tool, t.server))
            .collect();
        findings.push(Finding::new(
            Reason::NameCollision,
            None,
            format!(
                "{} would all be published as {}; give one of these servers another prefix or \
                 deny one of the tools",
                named.join(" and "),
                c.qualified_name
            ),
            true,
        ));
    }

    findings.sort();
    findings.dedup();
    let ready = !findings.iter().any(|f| f.blocking);
    Resolution {
        document: GrantsDocument::new(servers),
        servers: outcomes,
        collisions,
        findings,
        ready,
    }
}

fn prefix_of<'e>(entry: &'e AgentServerInput<'_>) -> &'e str {
    entry.prefix.as_deref().unwrap_or(&entry.name)
}

fn resolve_server(
    entry: &AgentServerInput<'_>,
    input: &ResolveInput<'_>,
    policies: &PolicyPlane,
    findings: &mut Vec<Finding>,
) -> (ServerGrants, ServerOutcome) {
    let name = entry.name.as_str();
    let prefix = prefix_of(entry).to_string();
    let optional = entry.server.as_ref().is_some_and(|s| s.optional);
    let mut outcome = ServerOutcome {
        name: name.to_string(),
        prefix: prefix.clone(),
        available: false,
        optional,
        deferred: false,
        granted_tools: 0,
        withheld_by_server: 0,
        withheld_by_policy: 0,
        withheld_by_spec: 0,
        awaiting_approval: 0,
        granted_schema_bytes: 0,
    };
    let mut grants = ServerGrants {
        name: name.to_string(),
        prefix: prefix.clone(),
        optional,
        available: false,
        deferred: false,
        endpoint: None,
        tools: Vec::new(),
        resources: Vec::new(),
        prompts: Vec::new(),
        prompt_digests: None,
    };

    let (server, catalog) = match &entry.server {
        None => {
            findings.push(Finding::new(
                Reason::ServerNotFound,
                Some(name),
                format!(
                    "McpServer {name} does not exist in this namespace; create it or remove it \
                     from spec.servers"
                ),
                true,
            ));
            return (grants, outcome);
        }
        Some(server) => match (server.ready, server.catalog) {
            (true, Some(catalog)) => (server, catalog),
            _ => {
                findings.push(not_ready(name, server));
                return (grants, outcome);
            }
        },
    };

    outcome.available = true;
    grants.available = true;
    let rules = policies.for_server(name);
    grants.resources = rules.bounds_of(&entry.resources, |r| &r.resources);
    grants.prompts = rules.bounds_of(&entry.prompts, |r| &r.prompts);
    if server.pinned {
        grants.prompt_digests = super::resources_prompts::pinned_prompts(catalog, &grants.prompts);
    }
    let server_plane = PatternSet::new(&server.allow, &server.deny);
    let spec_plane = PatternSet::new(&entry.allow, &entry.deny);
    let asked_by_name: BTreeSet<&str> = spec_plane
        .allow()
        .iter()
        .filter(|p| p.is_literal())
        .map(|p| p.as_str())
        .collect();
    let approval_names: BTreeSet<&str> = server
        .require_approval
        .iter()
        .chain(&entry.require_approval)
        .map(String::as_str)
        .collect();

    let mut offered: Vec<&str> = Vec::new();
    for tool in &catalog.tools {
        if !server_plane.permits(&tool.name) {
            outcome.withheld_by_server += 1;
            continue;
        }
        offered.push(&tool.name);
        let access = rules.access(tool);
        if let Some(finding) = rules.override_not_applied(name, tool, access)
            && spec_plane.permits(&tool.name)
        {
            findings.push(finding);
        }
        let denying = rules.denying(tool, access);
        if !denying.is_empty() {
            outcome.withheld_by_policy += 1;
            if asked_by_name.contains(tool.name.as_str()) && spec_plane.permits(&tool.name) {
                findings.push(Finding::new(
                    Reason::DeniedByPolicy,
                    Some(name),
                    format!(
                        "tool {} of McpServer {name} is asked for by name, but {}",
                        tool.name,
                        denying.describe()
                    ),
                    false,
                ));
            }
            continue;
        }
        if !spec_plane.permits(&tool.name) {
            outcome.withheld_by_spec += 1;
            continue;
        }
        if let Some(waiting) = &tool.awaiting_approval {
            // Neither the new definition nor the pinned one: the server no longer serves that.
            outcome.awaiting_approval += 1;
            findings.push(Finding::new(
                Reason::AwaitingApproval,
                Some(name),
                format!(
                    "tool {} of McpServer {name} is withheld until a person approves it ({}); \
                     the McpServer's status.pinning.waiting shows what changed",
                    tool.name,
                    waiting.what_changed()
                ),
                false,
            ));
            continue;
        }
        let requires_approval = input_approval(input.approval, access)
            || approval_names.contains(tool.name.as_str())
            || rules.require_approval(access);
        outcome.granted_schema_bytes = outcome
            .granted_schema_bytes
            .saturating_add(tool.schema_bytes);
        grants.tools.push(GrantedTool {
            qualified_name: qualified_name(&prefix, &tool.name),
            name: tool.name.clone(),
            access,
            idempotent: tool.idempotent,
            requires_approval,
            definition_digest: tool.definition_digest.clone(),
        });
    }
    grants
        .tools
        .sort_by(|a, b| a.qualified_name.cmp(&b.qualified_name));
    outcome.granted_tools = grants.tools.len() as u32;
    outcome.deferred = outcome.granted_schema_bytes > input.preload_budget;
    grants.deferred = outcome.deferred;

    if !offered.is_empty()
        && outcome.withheld_by_policy as usize == offered.len()
        && let Some(why) = rules.whole_server_denied()
    {
        findings.push(Finding::new(
            Reason::DeniedByPolicy,
            Some(name),
            format!("no tool of McpServer {name} is granted: {why}"),
            false,
        ));
    }
    pattern_findings(name, catalog, &offered, &spec_plane, findings);
    let offered: BTreeSet<&str> = offered.into_iter().collect();
    for wanted in entry.require_approval.iter().collect::<BTreeSet<_>>() {
        if !offered.contains(wanted.as_str()) {
            findings.push(Finding::new(
                Reason::RequireApprovalNotOffered,
                Some(name),
                format!(
                    "requireApproval names {wanted}, which McpServer {name} does not offer; \
                     check the spelling against the server's catalogue"
                ),
                false,
            ));
        }
    }
    (grants, outcome)
}

fn not_ready(name: &str, server: &McpServerInput<'_>) -> Finding {
    let state = match (server.ready, &server.not_ready_reason) {
        (true, _) => "has no tool catalogue yet".to_string(),
        (false, Some(reason)) if !reason.is_empty() => format!("is not ready ({reason})"),
        (false, _) => "is not ready".to_string(),
    };
    let consequence = if server.optional {
        "it is optional, so its tools are left out until it is"
    } else {
        "the agent is not ready until it is, or until the McpServer is marked optional"
    };
    Finding::new(
        Reason::ServerNotReady,
        Some(name),
        format!("McpServer {name} {state}; {consequence}"),
        !server.optional,
    )
}

fn input_approval(level: Approval, access: Access) -> bool {
    match level {
        Approval::None => false,
        Approval::Destructive => access >= Access::Destructive,
        Approval::Writes => access >= Access::Write,
        Approval::All => true,
    }
}

fn pattern_findings(
    name: &str,
    catalog: &Catalog,
    offered: &[&str],
    spec_plane: &PatternSet,
    findings: &mut Vec<Finding>,
) {
    let nothing_offered = spec_plane.matching_nothing(offered.iter().copied()).allow;
    if nothing_offered.is_empty() {
        return;
    }
    let nothing_at_all: BTreeSet<String> = spec_plane
        .matching_nothing(catalog.tools.iter().map(|t| t.name.as_str()))
        .allow
        .into_iter()
        .collect();
    for pattern in nothing_offered {
        let message = if nothing_at_all.contains(&pattern) {
            format!("allow pattern {pattern} matches no tool of McpServer {name}")
        } else {
            format!(
                "allow pattern {pattern} matches only tools that McpServer {name} hides \
                 (its spec.tools allow/deny)"
            )
        };
        findings.push(Finding::new(
            Reason::PatternMatchesNothing,
            Some(name),
            message,
            false,
        ));
    }
}

/// The tenant plane, compiled once per resolution.
struct PolicyPlane {
    tenant_default: TenantDefault,
    policies: Vec<CompiledPolicy>,
}

struct CompiledPolicy {
    name: String,
    rules: Vec<CompiledRule>,
}

struct CompiledRule {
    position: usize,
    servers: BTreeSet<String>,
    bounds_only: BTreeSet<String>,
    patterns: PatternSet,
    /// The allow patterns, sorted, as a finding quotes them.
    allow: Vec<String>,
    max_access: Access,
    require_approval_for: Option<Access>,
    overrides: BTreeMap<String, Access>,
    resources: PatternBound,
    prompts: PatternBound,
}

impl CompiledRule {
    fn bounds(&self, server: &str) -> bool {
        self.servers.contains(server) || self.bounds_only.contains(server)
    }

    /// Why this rule refuses a tool of the given access, if it does.
    fn refusal(&self, tool: &str, access: Access) -> Option<String> {
        let rule = format!("rules[{}]", self.position);
        if self.patterns.denies(tool) {
            Some(format!("its {rule} denies it"))
        } else if !self.patterns.allows(tool) {
            Some(format!(
                "its {rule} allows only {}",
                quoted_list(&self.allow)
            ))
        } else if access > self.max_access {
            Some(format!(
                "its {rule} caps access at {} and {tool} counts as {access}",
                self.max_access
            ))
        } else {
            None
        }
    }
}

/// "a, b, c" for a few patterns, "a, b, c and 4 more" for many.
fn quoted_list(items: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = items
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        let _ = write!(text, " and {} more", items.len() - SHOWN);
    }
    text
}

impl PolicyPlane {
    fn new(policies: &[PolicyInput], tenant_default: TenantDefault) -> Self {
        let mut policies: Vec<CompiledPolicy> = policies
            .iter()
            .map(|p| {
                let mut rules: Vec<CompiledRule> = p
                    .rules
                    .iter()
                    .map(|r| {
                        let mut allow = r.allow.clone();
                        allow.sort();
                        allow.dedup();
                        CompiledRule {
                            position: r.position,
                            servers: r.servers.clone(),
                            bounds_only: r.bounds_only.clone(),
                            patterns: PatternSet::new(&r.allow, &r.deny),
                            allow,
                            max_access: r.max_access.unwrap_or(Access::Destructive),
                            require_approval_for: r.require_approval_for,
                            overrides: r.overrides.clone(),
                            resources: r.resources.normalized(),
                            prompts: r.prompts.normalized(),
                        }
                    })
                    .collect();
                // The first refusing rule is quoted: in spec order, so the input's order of
                // rules cannot show through.
                rules.sort_by_key(|r| r.position);
                CompiledPolicy {
                    name: p.name.clone(),
                    rules,
                }
            })
            .collect();
        // Names are quoted in findings; sorted, the input's order cannot show through.
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        PolicyPlane {
            tenant_default,
            policies,
        }
    }

    /// The policies' rules that bound one server.
    fn for_server(&self, server: &str) -> ServerRules<'_> {
        ServerRules {
            tenant_default: self.tenant_default,
            policies: self
                .policies
                .iter()
                .map(|p| PolicyOnServer {
                    name: p.name.as_str(),
                    picked: p.rules.iter().any(|r| r.servers.contains(server)),
                    rules: p.rules.iter().filter(|r| r.bounds(server)).collect(),
                })
                .collect(),
        }
    }
}

/// The tenant plane as it applies to one server: for every selecting policy, whether a rule
/// picks the server and the rules that bound it (possibly none).
struct ServerRules<'p> {
    tenant_default: TenantDefault,
    policies: Vec<PolicyOnServer<'p>>,
}

struct PolicyOnServer<'p> {
    name: &'p str,
    /// Some rule picks the server (a rule that only bounds it does not let it in).
    picked: bool,
    /// Every rule that bounds the server, in spec order.
    rules: Vec<&'p CompiledRule>,
}

impl PolicyOnServer<'_> {
    /// Why this policy refuses the tool, if it does.
    fn refusal(&self, tool: &str, access: Access) -> Option<String> {
        if !self.picked {
            return Some("it has no rule that picks the server".to_string());
        }
        self.rules.iter().find_map(|r| r.refusal(tool, access))
    }
}

/// Who, on the tenant plane, withholds a tool.
enum Denial<'p> {
    Nobody,
    TenantDefault,
    /// The refusing policies, each with why.
    Policies(Vec<(&'p str, String)>),
}

impl Denial<'_> {
    fn is_empty(&self) -> bool {
        matches!(self, Denial::Nobody)
    }

    fn describe(&self) -> String {
        match self {
            Denial::Nobody => String::new(),
            Denial::TenantDefault => NO_POLICY_DENY.to_string(),
            Denial::Policies(refusals) if refusals.len() == 1 => {
                let (name, why) = &refusals[0];
                format!("McpTenantPolicy {name} does not permit it: {why}")
            }
            Denial::Policies(refusals) => {
                let names: Vec<&str> = refusals.iter().map(|(n, _)| *n).collect();
                let whys: Vec<String> = refusals
                    .iter()
                    .map(|(name, why)| format!("{name}: {why}"))
                    .collect();
                format!(
                    "McpTenantPolicies {} do not permit it ({})",
                    names.join(", "),
                    whys.join("; ")
                )
            }
        }
    }
}

const NO_POLICY_DENY: &str =
    "no McpTenantPolicy selects this namespace and the controller's tenant default is deny";

impl<'p> ServerRules<'p> {
    /// The one access a tool has for this tenant. Without policies: the McpServer's
    /// classification as it stands. Under policies: every rule bounding the server classifies
    /// the tool, by its `overrides` when they name it, else as the server serves it, and the
    /// strictest counts (so a reclassification downward holds only where every such rule makes
    /// it: a label that makes one more rule pick the server can only raise it); the McpServer's
    /// own override then only raises that.
    fn access(&self, tool: &CatalogTool) -> Access {
        if self.policies.is_empty() {
            return tool.access;
        }
        let base = self.platform_access(tool);
        tool.tenant_override().map_or(base, |o| o.max(base))
    }

    /// The platform's classification of a tool: the strictest of the bounding rules' (each
    /// its override for the tool, or the served access).
    fn platform_access(&self, tool: &CatalogTool) -> Access {
        let served = tool.served_access();
        self.policies
            .iter()
            .flat_map(|p| &p.rules)
            .map(|r| r.overrides.get(&tool.name).copied().unwrap_or(served))
            .max()
            .unwrap_or(served)
    }

    /// The finding for an McpServer override the policies do not follow: one that would lower
    /// the tool below `access`, where every selecting policy picks the server (elsewhere
    /// nothing of it is granted and the override does not matter).
    fn override_not_applied(
        &self,
        server: &str,
        tool: &CatalogTool,
        access: Access,
    ) -> Option<Finding> {
        let lowered = tool.tenant_override().filter(|o| *o < access)?;
        if self.policies.is_empty() || !self.policies.iter().all(|p| p.picked) {
            return None;
        }
        let whose = if self.platform_access(tool) == tool.served_access() {
            "as the server classifies it"
        } else {
            "as the McpTenantPolicy rules picking the server classify it"
        };
        Some(Finding::new(
            Reason::OverrideNotApplied,
            Some(server),
            format!(
                "McpServer {server}'s tools.overrides classify {} as {lowered}, but a \
                 McpTenantPolicy bounds this server, and there an McpServer's override can \
                 only raise a classification: {} counts as {access}, {whose}; a platform \
                 engineer can reclassify it in the rules[].overrides of every policy rule that \
                 picks the server",
                tool.name, tool.name
            ),
            false,
        ))
    }

    fn denying(&self, tool: &CatalogTool, access: Access) -> Denial<'p> {
        if self.policies.is_empty() {
            return match self.tenant_default {
                TenantDefault::Allow => Denial::Nobody,
                TenantDefault::Deny => Denial::TenantDefault,
            };
        }
        let refusals: Vec<(&str, String)> = self
            .policies
            .iter()
            .filter_map(|p| p.refusal(&tool.name, access).map(|why| (p.name, why)))
            .collect();
        if refusals.is_empty() {
            Denial::Nobody
        } else {
            Denial::Policies(refusals)
        }
    }

    /// The resource or prompt bounds (`of` picks which) granted on this server: the
    /// AgentSpec's `wanted`, then every bounding rule's, sorted and deduplicated; none at all
    /// when one of them (or the tenant default, or a policy without a picking rule) grants
    /// nothing.
    fn bounds_of(
        &self,
        wanted: &PatternBound,
        of: impl Fn(&CompiledRule) -> &PatternBound,
    ) -> Vec<PatternBound> {
        if wanted.grants_nothing() {
            return Vec::new();
        }
        if self.policies.is_empty() && self.tenant_default == TenantDefault::Deny {
            return Vec::new();
        }
        let mut bounds = vec![wanted.normalized()];
        for policy in &self.policies {
            if !policy.picked {
                return Vec::new();
            }
            for rule in &policy.rules {
                let bound = of(rule);
                if bound.grants_nothing() {
                    return Vec::new();
                }
                bounds.push(bound.clone());
            }
        }
        bounds.sort();
        bounds.dedup();
        bounds
    }

    fn require_approval(&self, access: Access) -> bool {
        self.policies
            .iter()
            .flat_map(|p| &p.rules)
            .any(|r| r.require_approval_for.is_some_and(|level| level <= access))
    }

    /// Why the whole server is withheld regardless of tool, if it is.
    fn whole_server_denied(&self) -> Option<String> {
        if self.policies.is_empty() {
            return (self.tenant_default == TenantDefault::Deny).then(|| NO_POLICY_DENY.into());
        }
        let without_rule: Vec<&str> = self
            .policies
            .iter()
            .filter(|p| !p.picked)
            .map(|p| p.name)
            .collect();
        match without_rule.as_slice() {
            [] => None,
            [one] => Some(format!("McpTenantPolicy {one} has no rule that picks it")),
            many => Some(format!(
                "McpTenantPolicies {} have no rule that picks it",
                many.join(", ")
            )),
        }
    }
}

/// The collision rule: every tool of a collision leaves every entry of its server (neither
/// colliding tool is chosen), counted as withheld by the spec; the counts and the deferral
/// follow. `entries`, `servers` and `outcomes` are aligned.
fn withhold_colliding(
    collisions: &[Collision],
    entries: &[&AgentServerInput<'_>],
    servers: &mut [ServerGrants],
    outcomes: &mut [ServerOutcome],
    preload_budget: u64,
) {
    if collisions.is_empty() {
        return;
    }
    let colliding: BTreeSet<(&str, &str)> = collisions
        .iter()
        .flat_map(|c| &c.tools)
        .map(|t| (t.server.as_str(), t.tool.as_str()))
        .collect();
    for ((entry, grants), outcome) in entries.iter().zip(servers).zip(outcomes) {
        let before = grants.tools.len();
        grants
            .tools
            .retain(|tool| !colliding.contains(&(entry.name.as_str(), tool.name.as_str())));
        let withheld = (before - grants.tools.len()) as u32;
        if withheld == 0 {
            continue;
        }
        let schema_bytes: BTreeMap<&str, u64> = entry
            .server
            .as_ref()
            .and_then(|s| s.catalog)
            .map(|c| {
                c.tools
                    .iter()
                    .map(|t| (t.name.as_str(), t.schema_bytes))
                    .collect()
            })
            .unwrap_or_default();
        outcome.granted_tools -= withheld;
        outcome.withheld_by_spec += withheld;
        outcome.granted_schema_bytes = grants.tools.iter().fold(0u64, |sum, t| {
            sum.saturating_add(schema_bytes.get(t.name.as_str()).copied().unwrap_or(0))
        });
        outcome.deferred = outcome.granted_schema_bytes > preload_budget;
        grants.deferred = outcome.deferred;
    }
}

fn collisions(servers: &[ServerGrants]) -> Vec<Collision> {
    let mut by_name: BTreeMap<&str, Vec<ToolRef>> = BTreeMap::new();
    for server in servers {
        for tool in &server.tools {
            by_name
                .entry(&tool.qualified_name)
                .or_default()
                .push(ToolRef {
                    server: server.name.clone(),
                    tool: tool.name.clone(),
                });
        }
    }
    by_name
        .into_iter()
        .filter(|(_, tools)| tools.len() > 1)
        .map(|(name, mut tools)| {
            tools.sort();
            Collision {
                qualified_name: name.to_string(),
                tools,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
