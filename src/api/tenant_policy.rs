//! The `McpTenantPolicy` resource (cluster-scoped): the platform team's bound on what the
//! tenants (namespaces) it selects may be granted, per server.
//!
//! ```text
//! [ McpTenantPolicy ] --namespaceSelector--> [ Namespace ]
//!        | rules[].servers (names / labels / urls)  | contains
//!        +-------------------------------> [ McpServer ] <-- [ AgentSpec ]
//! ```
//!
//! A tool reaches a tenant only if every policy that selects the tenant permits it. Within one
//! policy, rules bound; they do not add up: a tool is permitted when at least one rule picks its
//! server and every rule that picks its server permits it (its allow, its deny, its maxAccess).
//! So a label, a name or a URL the tenant gives its McpServer can only ever narrow what a
//! rule's match adds: a rule's match never widens the grants.
//!
//! The access a policy judges is the platform's: what the server's annotations say, or what the
//! rules picking the server make of it with their `overrides` (the strictest of them, a rule
//! without an override for the tool counting as the annotations), raised (never lowered) by the
//! McpServer's own tools.overrides.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use std::collections::BTreeMap;

use crate::core::Access;

/// A platform team's bound on the MCP tools the namespaces it selects may be granted. A tool
/// reaches a namespace only if every policy selecting the namespace permits it.
// Each printcolumn(...) repeats the keys name/type_/json_path, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "mcp-operator.dev",
    version = "v1alpha1",
    kind = "McpTenantPolicy",
    plural = "mcptenantpolicies",
    status = "McpTenantPolicyStatus",
    shortname = "mcptp",
    category = "mcp",
    doc = "A platform team's bound on the MCP tools that the namespaces it selects may be granted. A tool reaches a namespace only if every policy selecting that namespace permits it. Within a policy, every rule that picks a server bounds it (rules do not add up), and a server no rule picks gets nothing.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Namespaces",
        type_ = "integer",
        json_path = ".status.selectedNamespaces"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct McpTenantPolicySpec {
    /// The namespaces (tenants) this policy bounds, by their labels. `{}` selects every
    /// namespace.
    pub namespace_selector: LabelSelector,

    /// What the selected namespaces may use. Rules bound; they do not add up: a tool is
    /// permitted when at least one rule picks its server and every rule that picks the server
    /// permits it (the tightest maxAccess, every deny, every allow list matches, every
    /// requireApprovalFor applies, pinning if any rule requires it). A server no rule picks gets
    /// nothing; an empty list permits nothing. Pick servers by what the tenant cannot change
    /// (servers.urls) where a label or a name is not enough: adding a match only narrows, but a
    /// server a tenant moves out of a rule's match is bounded by the other rules alone.
    #[schemars(length(max = 64))]
    pub rules: Vec<TenantRule>,
}

/// One rule: a set of servers and the bound on their tools. Every rule that picks a server
/// bounds it; several rules picking one server bound it together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantRule {
    /// The McpServers (in the selected namespaces) this rule applies to.
    pub servers: ServerSelector,

    /// Tool-name patterns permitted; empty means all (up to maxAccess). `*` matches any run of
    /// characters, `?` one character. When several rules pick a server, a tool must match the
    /// allow list of each of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub allow: Vec<String>,

    /// Tool-name patterns never permitted on the servers this rule picks, whatever allow says
    /// (deny wins), whatever the other rules say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub deny: Vec<String>,

    /// Highest access level permitted: read (read-only tools only), write (no destructive
    /// tools) or destructive (no limit, the same as leaving it out). Judged on the platform's
    /// classification (the server's annotations, or the rules' overrides), raised (never
    /// lowered) by the McpServer's tools.overrides. Several rules: the lowest applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::nullable_enum_schema::<Access>")]
    pub max_access: Option<Access>,

    /// Access level (read, write or destructive) at or above which every call needs a person's
    /// approval, whatever the AgentSpec says, judged on the same classification as maxAccess.
    /// Unset: the rule requires no approvals. Several rules: the lowest applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::nullable_enum_schema::<Access>")]
    pub require_approval_for: Option<Access>,

    /// Pin the tool definitions of the servers this rule picks, whatever their
    /// spec.pinning.enabled says: a tool that changes, or a new tool, is withheld from every
    /// agent until a person approves it. One rule requiring it is enough.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_pinning: bool,

    /// The platform's classification of tools of the servers this rule picks: exact tool name
    /// → read, write or destructive. It replaces the server's annotations and may lower them
    /// (e.g. a read-only tool its server forgot to annotate), which an McpServer's own
    /// tools.overrides cannot do under a policy; those can still only raise it. Every rule that
    /// picks a server classifies its tools, by its overrides or else as the server does, and
    /// the strictest counts: a reclassification downward holds where every rule picking the
    /// server makes it, so a label that makes one more rule pick a server never lowers one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 256,
        "x-kubernetes-validations" = [
            {
                "rule": "self.all(k, k.matches('^[A-Za-z0-9_.-]{1,128}$'))",
                "message": "rules[].overrides keys must be exact tool names: 1 to 128 letters, digits, '_', '-' or '.' (no wildcards)",
            },
        ]
    ))]
    pub overrides: BTreeMap<String, Access>,

    /// Resources (by URI or URI template) permitted on the servers this rule picks. Default:
    /// none. When several rules pick a server, a resource must match the allow list of each
    /// of them and none of their denies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<super::common::ResourcePatterns>,

    /// Prompts (by name) permitted on the servers this rule picks. Default: none; several
    /// rules bound together, as for resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<super::common::PromptPatterns>,
}

/// Which McpServers a rule picks: by name, by labels, or both (a server matching either is
/// picked), and, when urls is set, only those whose spec.url matches one of its patterns too
/// (urls alone picks by URL).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.names) && size(self.names) > 0) || has(self.selector) || (has(self.urls) && size(self.urls) > 0)",
        "message": "servers must pick servers by names, selector or urls",
    },
]))]
pub struct ServerSelector {
    /// McpServer names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 256),
        inner(
            length(min = 1, max = 253),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        )
    )]
    pub names: Vec<String>,

    /// McpServer labels. `{}` picks every server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Patterns of the McpServer's spec.url, what the platform (not the tenant) controls: a
    /// host (`mcp.corp.example`, `*.corp.example`), optionally with a scheme, a port and a
    /// path (`https://*.corp.example:8443/mcp/*`). `*` matches any run of characters, `?` one;
    /// the host is compared with the URL's host only (never its path or user part), a path
    /// pattern with its whole path, and a pattern without port or path accepts any. When set,
    /// the rule picks a server only if its URL matches one of them; with neither names nor
    /// selector, it picks every server whose URL matches. A stdio server has no spec.url and is
    /// never picked by urls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 2048),
            regex(pattern = r"^([A-Za-z][A-Za-z0-9+.*?-]*://)?[A-Za-z0-9.*?_\[\]:-]+(/[!-~]*)?$")
        )
    )]
    pub urls: Vec<String>,
}

/// What the operator observed of the policy. Written by the controller only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpTenantPolicyStatus {
    /// The metadata.generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready: the selectors are valid and the policy is in force.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// How many namespaces the namespaceSelector currently selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_namespaces: Option<u32>,
}
