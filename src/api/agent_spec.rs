//! The `AgentSpec` resource: which McpServers one agent uses and which of their tools it wants.
//! The controller intersects it with what each server offers and what the tenant's policies
//! permit, and publishes the result (the grants) in a ConfigMap the agent's sidecar mounts.
//!
//! ```text
//! [ AgentSpec ] --servers[].name--> [ McpServer ]      (same namespace)
//!      |
//!      +--owns--> [ ConfigMap <name>-mcp-grants ] key grants.json  <-- mounted by the sidecar
//! ```

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
pub use crate::core::Approval;

/// Suffix of the grants ConfigMap's name: `<agentspec>-mcp-grants`.
pub const GRANTS_CONFIG_MAP_SUFFIX: &str = "-mcp-grants";

/// Key of the grants document in the grants ConfigMap.
pub const GRANTS_KEY: &str = "grants.json";

/// Name of the ConfigMap holding an AgentSpec's grants. The schema limits AgentSpec names so
/// this stays a valid object name.
pub fn grants_config_map_name(agent_spec: &str) -> String {
    format!("{agent_spec}{GRANTS_CONFIG_MAP_SUFFIX}")
}

/// What one agent may call: the McpServers it uses (in its namespace) and the tools it wants
/// from each. The operator publishes the granted tools in the ConfigMap named in status.
// Each printcolumn(...) repeats the keys name/type_/json_path, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "mcp-operator.dev",
    version = "v1alpha1",
    kind = "AgentSpec",
    namespaced,
    status = "AgentSpecStatus",
    shortname = "ags",
    category = "mcp",
    doc = "The MCP servers one agent uses and the tools it wants from each. The operator narrows them by what each server offers and what the tenant's McpTenantPolicies permit, and publishes the grants in a ConfigMap for the agent's sidecar.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#,
        priority = 1
    ),
    // The name is a label value (mcp-operator.dev/agentspec on the grants ConfigMap,
    // mcp-operator.dev/agent on the agent's pods), and label values stop at 63 characters.
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63").message(
        "AgentSpec names are at most 63 characters: the name is a label value on its grants ConfigMap and on the agent's pods"
    ),
    printcolumn(name = "Tools", type_ = "integer", json_path = ".status.grantedTools"),
    printcolumn(
        name = "ConfigMap",
        type_ = "string",
        json_path = ".status.grantsConfigMap"
    ),
    printcolumn(
        name = "Pods",
        type_ = "integer",
        json_path = ".status.pods.injected",
        priority = 1
    ),
    printcolumn(
        name = "OutOfDate",
        type_ = "integer",
        json_path = ".status.pods.outOfDate"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpecSpec {
    /// The McpServers this agent uses, each at most once. Every tool reaches the agent as
    /// `<prefix>__<tool>`.
    #[schemars(
        length(min = 1, max = 64),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["name"],
            "x-kubernetes-validations" = [
                {
                    "rule": "self.all(a, self.exists_one(b, (has(b.prefix) ? b.prefix : b.name) == (has(a.prefix) ? a.prefix : a.name)))",
                    "message": "each server needs its own prefix (prefix, or the server name when prefix is not set): two servers with the same prefix would publish tools under the same names",
                },
            ]
        )
    )]
    pub servers: Vec<AgentServer>,

    /// Which calls need a person's approval, by the tool's access level: none, destructive (the
    /// default: destructive tools only), writes (write and destructive tools) or all. Tools the
    /// server or this spec list in requireApproval always need it.
    #[serde(default)]
    pub approval: Approval,
}

/// One McpServer an agent uses and the tools it wants from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.prefix) || self.name.matches('^[A-Za-z0-9_-]+$')",
        "messageExpression": "'server ' + self.name + ' has a character a tool prefix may not contain (only letters, digits, _ and - are allowed); set prefix'",
        "fieldPath": ".name",
    },
]))]
pub struct AgentServer {
    /// Name of an McpServer in the AgentSpec's namespace.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,

    /// Prefix of this server's tools as the agent sees them: `<prefix>__<tool>`. Defaults to the
    /// server name. Letters, digits, `_` and `-`; no `__` (it separates prefix and tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[A-Za-z0-9_-]+$"),
        extend("x-kubernetes-validations" = [
            {
                "rule": "!self.contains('__')",
                "message": "prefix must not contain '__': it separates the prefix from the tool name",
            },
        ])
    )]
    pub prefix: Option<String>,

    /// Tool-name patterns the agent wants; empty means every tool the server and the tenant's
    /// policies permit. `*` matches any run of characters, `?` one character. A pattern that
    /// matches nothing is reported in status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub allow: Vec<String>,

    /// Tool-name patterns the agent does not want, whatever allow says (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub deny: Vec<String>,

    /// Tool names (exact, no wildcards) whose every call needs a person's approval for this
    /// agent, in addition to those the approval level selects. A name the server does not offer
    /// is reported in status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_name_list_schema")]
    pub require_approval: Vec<String>,

    /// The server's resources and resource templates the agent may list, read and subscribe
    /// to, by URI. Default: none (least privilege; resources were not granted before this
    /// field existed, and a server's resources are often its files): name allow patterns to
    /// grant some. Where a McpTenantPolicy selects the namespace, a resource must also be
    /// allowed by every rule that picks the server. The agent sees them as
    /// `<prefix>+<uri>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<super::common::ResourcePatterns>,

    /// The server's prompts the agent may list and get, by name. Default: none (as for
    /// resources). The agent sees them as `<prefix>__<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<super::common::PromptPatterns>,
}

/// What the operator granted the agent. Written by the controller only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpecStatus {
    /// The metadata.generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Resolved, Ready and PodsUpToDate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,

    /// Per server: how many tools were granted and why the others were withheld.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<AgentServerStatus>,

    /// Name of the ConfigMap (key grants.json) holding the grants for the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants_config_map: Option<String>,

    /// SHA-256 of the published grants document: changes whenever the grants change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants_digest: Option<String>,

    /// The signature sequence of the published grants document. The injection gives it to
    /// each new pod's sidecar as the oldest document it may obey, so an older signed document
    /// put back in the ConfigMap is refused by a brand-new pod too. Only the operator writes
    /// status: a tenant must not be granted agentspecs/status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants_sequence: Option<u64>,

    /// Total number of tools granted across all servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_tools: Option<u32>,

    /// The pods injected with this agent's sidecar, and how many must be restarted to mount a
    /// Secret or ConfigMap key the grants came to reference after they started; the
    /// PodsUpToDate condition names them and the keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<AgentPodsStatus>,
}

/// The pods running this agent's sidecar (labelled mcp-operator.dev/agent, not finished, not
/// being deleted).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentPodsStatus {
    /// Pods injected with the sidecar for this AgentSpec.
    pub injected: u32,
    /// Injected pods that do not mount every Secret and ConfigMap key the grants reference now
    /// (their volumes were fixed when they were created): they must be restarted.
    pub out_of_date: u32,
}

/// The grant outcome for one server of an AgentSpec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentServerStatus {
    /// Name of the McpServer.
    pub name: String,
    /// Tools granted from this server.
    pub granted_tools: u32,
    /// Tools the server's own curation (spec.tools allow/deny of the McpServer) hides.
    pub withheld_by_server: u32,
    /// Tools the tenant's McpTenantPolicies do not permit.
    pub withheld_by_policy: u32,
    /// Tools this AgentSpec's allow/deny does not ask for.
    pub withheld_by_spec: u32,
    /// Tools asked for and permitted that the server's pinning withholds until a person
    /// approves their changed (or new) definitions; the conditions name them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub awaiting_approval: u32,
    /// Whether the server's catalogue is currently synced. An optional server that is not
    /// available contributes no tools until it is.
    pub available: bool,
    /// Whether the granted tools' schemas exceed the sidecar's preload budget, so the sidecar
    /// offers discovery tools for this server instead of every schema.
    pub deferred: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
