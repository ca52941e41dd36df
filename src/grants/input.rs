//! The plain inputs of [`super::resolve`]: one AgentSpec, what its servers offer, and the tenant
//! policies that select its namespace. The controller converts Kubernetes objects into these
//! (it evaluates label selectors; the core never sees one), and tests build them by hand.
//!
//! ```text
//! ResolveInput ── servers[] AgentServerInput ──server──► McpServerInput ──catalog──► &Catalog
//!      │                (the AgentSpec's entry)           (None: no such McpServer)
//!      └── policies[] PolicyInput ── rules[] RuleInput { servers: names this rule picks,
//!                                                          bounds_only, bounds, overrides }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::resources_prompts::PatternBound;
use crate::core::{Access, Catalog};

pub use crate::core::Approval;

/// Everything one resolution needs.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolveInput<'a> {
    /// The AgentSpec's `servers[]`, in any order.
    pub servers: Vec<AgentServerInput<'a>>,
    /// The AgentSpec's `approval` level.
    pub approval: Approval,
    /// The McpTenantPolicies whose namespaceSelector selects the AgentSpec's namespace, in any
    /// order. Empty: `tenant_default` decides.
    pub policies: Vec<PolicyInput>,
    /// What a namespace no policy selects gets (`--tenant-default`).
    pub tenant_default: TenantDefault,
    /// The deployment's preload budget in characters of schema: a server whose granted tools'
    /// schemas (`CatalogTool::schema_bytes`) add up to more is marked deferred.
    pub preload_budget: u64,
}

/// One entry of the AgentSpec's `servers[]`, with the McpServer it names.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentServerInput<'a> {
    /// Name of the McpServer (same namespace as the AgentSpec).
    pub name: String,
    /// The tools' prefix; None means the server name.
    pub prefix: Option<String>,
    /// The AgentSpec's allow patterns for this server (empty: all).
    pub allow: Vec<String>,
    /// The AgentSpec's deny patterns for this server.
    pub deny: Vec<String>,
    /// Tool names whose calls need approval for this agent.
    pub require_approval: Vec<String>,
    /// The resources (URIs, URI templates) the agent wants; no allow pattern: none.
    pub resources: PatternBound,
    /// The prompts (names) the agent wants; no allow pattern: none.
    pub prompts: PatternBound,
    /// The McpServer; None when it does not exist.
    pub server: Option<McpServerInput<'a>>,
}

/// What the McpServer says about itself and its tools.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServerInput<'a> {
    /// Its Ready condition is True.
    pub ready: bool,
    /// The reason of its Ready condition when it is not ready (e.g. Unauthorized), quoted in the
    /// ServerNotReady finding.
    pub not_ready_reason: Option<String>,
    /// `spec.optional`.
    pub optional: bool,
    /// Its catalogue (each tool's `access` with `tools.overrides` applied, and the served access
    /// beside it); None when it has none yet. Only used when `ready`.
    pub catalog: Option<&'a Catalog>,
    /// `spec.tools.allow`.
    pub allow: Vec<String>,
    /// `spec.tools.deny`.
    pub deny: Vec<String>,
    /// `spec.tools.requireApproval`.
    pub require_approval: Vec<String>,
    /// Pinning is on for it (its status has a pinning section): the grants then carry the
    /// granted prompts' digests, and a waiting prompt is granted to no agent.
    pub pinned: bool,
}

/// One McpTenantPolicy that selects the AgentSpec's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyInput {
    /// The policy's name, quoted in findings.
    pub name: String,
    /// Its rules, in any order.
    pub rules: Vec<RuleInput>,
}

/// One rule of a tenant policy. Every rule that picks a server bounds it; a rule never adds to
/// what another rule of its policy permits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleInput {
    /// Its index in the policy's `spec.rules`, quoted in findings (`rules[2]`).
    pub position: usize,
    /// Names of the McpServers (among those the AgentSpec references) this rule picks: the
    /// controller evaluates `servers.names`, `servers.selector` and `servers.urls`.
    pub servers: BTreeSet<String>,
    /// McpServers this rule bounds without picking them: those its label selector might pick
    /// when the selector cannot be evaluated. Failing closed, the rule's bounds hold for them,
    /// but it does not count as a rule that lets them in.
    pub bounds_only: BTreeSet<String>,
    /// Tool-name patterns permitted (empty: all).
    pub allow: Vec<String>,
    /// Tool-name patterns never permitted on the servers this rule picks.
    pub deny: Vec<String>,
    /// Highest access permitted; None: no ceiling.
    pub max_access: Option<Access>,
    /// Access level at or above which every call to the servers this rule picks needs approval.
    pub require_approval_for: Option<Access>,
    /// The platform's classification of tools (exact name → access) on the servers this rule
    /// picks: replaces what the server's annotations say, and may lower it.
    pub overrides: BTreeMap<String, Access>,
    /// Resources permitted on the servers this rule bounds; no allow pattern: none.
    pub resources: PatternBound,
    /// Prompts permitted on the servers this rule bounds; no allow pattern: none.
    pub prompts: PatternBound,
}

/// What a namespace that no McpTenantPolicy selects may be granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantDefault {
    /// No policy plane: the server's and the AgentSpec's narrowing alone decide.
    Allow,
    /// Nothing is granted.
    Deny,
}

impl TenantDefault {
    /// The flag value: `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantDefault::Allow => "allow",
            TenantDefault::Deny => "deny",
        }
    }
}

impl fmt::Display for TenantDefault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TenantDefault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(TenantDefault::Allow),
            "deny" => Ok(TenantDefault::Deny),
            other => Err(format!(
                "tenant default must be allow or deny, not {other:?}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_default_parses_and_prints_the_flag_values() {
        for d in [TenantDefault::Allow, TenantDefault::Deny] {
            assert_eq!(d.to_string().parse::<TenantDefault>(), Ok(d));
        }
        assert!("Allow".parse::<TenantDefault>().is_err());
    }
}
