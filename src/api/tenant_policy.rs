//! The `McpTenantPolicy` resource (cluster-scoped): the platform team's bound on what the
//! tenants (namespaces) it selects may be granted, per server.
//!
//! ```text
//! [ McpTenantPolicy ] --namespaceSelector--> [ Namespace ]
//!        | rules[].servers (names / labels)        | contains
//!        +-------------------------------> [ McpServer ] <-- [ AgentSpec ]
//! ```
//!
//! A tool reaches a tenant only if every policy that selects the tenant permits it. Within one
//! policy, a tool is permitted when some rule picks its server and permits the tool, and no rule
//! that picks its server denies it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
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
    doc = "A platform team's bound on the MCP tools that the namespaces it selects may be granted. A tool reaches a namespace only if every policy selecting that namespace permits it; a server no rule of a selecting policy picks is not permitted there.",
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

    /// What the selected namespaces may use. A tool is permitted when some rule picks its
    /// server and permits the tool, and no rule that picks its server denies it; a server no rule
    /// picks gets nothing; an empty list permits nothing.
    #[schemars(length(max = 64))]
    pub rules: Vec<TenantRule>,
}

/// One rule: a set of servers and the bound on their tools.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantRule {
    /// The McpServers (in the selected namespaces) this rule applies to.
    pub servers: ServerSelector,

    /// Tool-name patterns permitted; empty means all (up to maxAccess). `*` matches any run of
    /// characters, `?` one character.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub allow: Vec<String>,

    /// Tool-name patterns never permitted, whatever allow says (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub deny: Vec<String>,

    /// Highest access level permitted: read (read-only tools only), write (no destructive
    /// tools) or destructive (no limit, the same as leaving it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::nullable_enum_schema::<Access>")]
    pub max_access: Option<Access>,

    /// Access level (read, write or destructive) at or above which every call needs a person's
    /// approval, whatever the AgentSpec says. Unset: the policy requires no approvals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::nullable_enum_schema::<Access>")]
    pub require_approval_for: Option<Access>,

    /// Pin the tool definitions of the servers this rule picks, whatever their
    /// spec.pinning.enabled says: a tool that changes, or a new tool, is withheld from every
    /// agent until a person approves it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_pinning: bool,
}

/// Which McpServers a rule picks: by name, by labels, or both (a server matching either is
/// picked).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.names) && size(self.names) > 0) || has(self.selector)",
        "message": "servers must pick servers by names, by selector, or both",
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
