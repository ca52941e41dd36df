//! The catalogue: what one MCP server offers, classified and digested, and the access levels
//! (read, write, destructive) that classification, policies and approval speak in. Pure: built
//! from the raw tool definitions that `mcp::listing` read, written by the probe and by the
//! controller into status, narrowed by `grants`.
//!
//! Two classifications live side by side, because they have different owners: what the server
//! says of a tool (its hints, MCP's defaults; `servedAccess`) and what the McpServer's
//! `tools.overrides` make of it (`access`). The owner of an McpServer is a tenant; where a
//! McpTenantPolicy bounds the server, `grants` lets that override only tighten (see
//! [`CatalogTool::tenant_override`]), so both must reach it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use super::parts::{AwaitingApproval, Part, PartDigests};
pub use super::resources_prompts::{
    CatalogPrompt, CatalogResource, CatalogResourceTemplate, UnreadList,
};

/// How much a tool can change the world, from the least to the most. Ordered, so a ceiling is a
/// comparison.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// The tool only reads (`readOnlyHint: true`).
    Read,
    /// The tool changes state but does not destroy it (`destructiveHint: false`).
    Write,
    /// The tool may destroy state. MCP's default for a tool with no annotations.
    Destructive,
}

impl Access {
    /// The word the CRDs and grants.json use: `read`, `write` or `destructive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Destructive => "destructive",
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which tool calls need a person's approval, by access level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// No call needs approval because of its access level.
    None,
    /// Calls to destructive tools need approval.
    #[default]
    Destructive,
    /// Calls to write and destructive tools need approval.
    Writes,
    /// Every call needs approval.
    All,
}

/// The compact catalogue of one MCP server, as the probe prints it and the controller stores it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    /// Number of tools the server offers.
    pub tool_count: u32,
    /// SHA-256 over the sorted tool definition digests: changes whenever any tool changes.
    pub digest: String,
    /// How many `tools/list` pages the listing read.
    pub pages_read: u32,
    /// SHA-256 over the McpServer's `tools.overrides` the access levels were computed with;
    /// absent when there are none. A change of classification alone leaves `digest` as it is,
    /// so readers of a spilled catalogue (whose status keeps no tools) see it change here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides_digest: Option<String>,
    /// The tools, sorted by name.
    #[serde(default)]
    pub tools: Vec<CatalogTool>,
    /// Number of resources the server lists (every page of resources/list); absent when the
    /// server does not advertise resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_count: Option<u32>,
    /// Number of resource templates (resources/templates/list); absent when the server does not
    /// advertise resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_template_count: Option<u32>,
    /// Number of prompts (prompts/list); absent when the server does not advertise prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_count: Option<u32>,
    /// The resources, sorted by URI (empty in status when the catalogue is spilled).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<CatalogResource>,
    /// The resource templates, sorted by URI template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_templates: Vec<CatalogResourceTemplate>,
    /// The prompts, sorted by name. Under pinning a changed or new prompt waits for approval
    /// like a tool (awaitingApproval).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<CatalogPrompt>,
    /// Lists beside the tools (resources, templates, prompts) the last read could not read: the
    /// tools are kept as read, and so are that list's entries from the read before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread_lists: Vec<UnreadList>,
}

/// One tool of a catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogTool {
    /// The tool's name as the server lists it.
    pub name: String,
    /// Human-readable title, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The description, cut to a display length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// read, write or destructive: from the annotations (MCP defaults apply) unless the
    /// McpServer's tools.overrides names the tool. Under a McpTenantPolicy that picks the server
    /// an override only tightens: the grants (AgentSpec status, grants.json) show the access
    /// that applies.
    pub access: Access,
    /// What the server's own annotations make of the tool (MCP defaults apply), when
    /// tools.overrides names it; absent otherwise (access is then the served access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "served_access_schema")]
    pub served_access: Option<Access>,
    /// True when the server says repeating a call has no further effect (`idempotentHint`).
    pub idempotent: bool,
    /// The tool's annotations exactly as the server sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Size in bytes of the input (and output) schema as JSON.
    pub schema_bytes: u64,
    /// SHA-256 of the RFC 8785 canonical JSON of the whole tool definition.
    pub definition_digest: String,
    /// Short digests of the parts of the definition a person reviews (title, description,
    /// input and output schema, annotations, anything else), so a change can be told by part.
    #[serde(default, skip_serializing_if = "PartDigests::is_empty")]
    pub parts: PartDigests,
    /// Set while pinning withholds this tool from every grant: its definition is not the one
    /// pinned, and no person approved it yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_approval: Option<AwaitingApproval>,
}

/// servedAccess's schema: the access values, nullable, described by the field's own comment
/// (the enum type's description would replace it).
fn served_access_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = Access::json_schema(generator);
    if let Some(object) = schema.as_object_mut() {
        object.remove("description");
        object.insert("nullable".into(), true.into());
    }
    schema
}

impl CatalogTool {
    /// The access the server's annotations give the tool, whatever the McpServer overrides.
    pub fn served_access(&self) -> Access {
        self.served_access.unwrap_or(self.access)
    }

    /// The access the McpServer's `tools.overrides` set for this tool, if they name it.
    pub fn tenant_override(&self) -> Option<Access> {
        self.served_access.map(|_| self.access)
    }
}

/// MCP tool annotations (hints, not guarantees).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Annotation title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates (meaningful when not read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling the tool repeatedly with the same arguments has no additional effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// Longest description kept in the catalogue (characters); the full text stays on the server.
pub const DESCRIPTION_DISPLAY_CHARS: usize = 200;

/// Builds the catalogue from raw tool definitions. `overrides` (tool name → access, the
/// McpServer's `tools.overrides`) set `access`; the served access is kept beside it.
pub fn build(
    tools: &[Map<String, Value>],
    overrides: &BTreeMap<String, Access>,
    pages_read: u32,
) -> Catalog {
    let mut tools: Vec<CatalogTool> = tools.iter().map(|t| catalog_tool(t, overrides)).collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Catalog {
        tool_count: tools.len() as u32,
        digest: catalog_digest(&tools),
        pages_read,
        overrides_digest: overrides_digest(overrides),
        tools,
        ..Catalog::default()
    }
}

/// `sha256:<hex>` over `name=access` lines of the overrides in name order; None without any.
/// A restarted controller compares it with the spec's to tell whether status still holds the
/// classification the spec asks for.
pub fn overrides_digest(overrides: &BTreeMap<String, Access>) -> Option<String> {
    if overrides.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    for (name, access) in overrides {
        hasher.update(format!("{name}={access}\n").as_bytes());
    }
    Some(format!("sha256:{}", hex::encode(hasher.finalize())))
}

fn catalog_tool(tool: &Map<String, Value>, overrides: &BTreeMap<String, Access>) -> CatalogTool {
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let annotations: Option<ToolAnnotations> = tool
        .get("annotations")
        .and_then(|a| serde_json::from_value(a.clone()).ok());
    let served = classify(annotations.as_ref());
    let overridden = overrides.get(&name).copied();
    let idempotent = annotations
        .as_ref()
        .and_then(|a| a.idempotent_hint)
        .unwrap_or(false);
    let schema_bytes = ["inputSchema", "outputSchema"]
        .iter()
        .filter_map(|k| tool.get(*k))
        .map(|s| serde_json::to_vec(s).map_or(0, |v| v.len() as u64))
        .sum();
    CatalogTool {
        title: tool
            .get("title")
            .and_then(Value::as_str)
            .map(|t| cut(t, DESCRIPTION_DISPLAY_CHARS)),
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .map(|d| cut(d, DESCRIPTION_DISPLAY_CHARS)),
        access: overridden.unwrap_or(served),
        served_access: overridden.map(|_| served),
        idempotent,
        annotations,
        schema_bytes,
        definition_digest: definition_digest(&Value::Object(tool.clone())),
        parts: PartDigests::of(tool),
        awaiting_approval: None,
        name,
    }
}

/// MCP's annotation defaults: `readOnlyHint` false, `destructiveHint` true. So only an explicit
/// read-only hint makes a tool `read`, and only an explicit `destructiveHint: false` makes a
/// writing tool `write`.
pub fn classify(annotations: Option<&ToolAnnotations>) -> Access {
    let read_only = annotations.and_then(|a| a.read_only_hint).unwrap_or(false);
    let destructive = annotations.and_then(|a| a.destructive_hint).unwrap_or(true);
    if read_only {
        Access::Read
    } else if destructive {
        Access::Destructive
    } else {
        Access::Write
    }
}

/// `sha256:<hex>` of the RFC 8785 canonical JSON of a value: key order and number spelling do not
/// change it.
pub fn definition_digest(value: &Value) -> String {
    let canonical =
        serde_json_canonicalizer::to_vec(value).expect("a serde_json value canonicalises");
    format!("sha256:{}", hex::encode(Sha256::digest(&canonical)))
}

/// Digest over the tools' definition digests in name order.
fn catalog_digest(sorted_tools: &[CatalogTool]) -> String {
    let mut hasher = Sha256::new();
    for tool in sorted_tools {
        hasher.update(tool.definition_digest.as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

pub(super) fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn ann(read_only: Option<bool>, destructive: Option<bool>) -> ToolAnnotations {
        ToolAnnotations {
            read_only_hint: read_only,
            destructive_hint: destructive,
            ..Default::default()
        }
    }

    #[test]
    fn classification_follows_mcp_defaults() {
        assert_eq!(classify(None), Access::Destructive);
        assert_eq!(classify(Some(&ann(None, None))), Access::Destructive);
        assert_eq!(classify(Some(&ann(Some(true), None))), Access::Read);
        // readOnly wins over a destructive hint: the hint only means something for writers.
        assert_eq!(classify(Some(&ann(Some(true), Some(true)))), Access::Read);
        assert_eq!(
            classify(Some(&ann(Some(false), Some(false)))),
            Access::Write
        );
        assert_eq!(classify(Some(&ann(None, Some(false)))), Access::Write);
        assert_eq!(
            classify(Some(&ann(Some(false), Some(true)))),
            Access::Destructive
        );
    }

    #[test]
    fn access_words_are_the_serde_words() {
        for a in [Access::Read, Access::Write, Access::Destructive] {
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
    }

    #[test]
    fn overrides_beat_hints() {
        let tools = [tool(
            json!({"name": "rm", "inputSchema": {"type": "object"},
                                 "annotations": {"readOnlyHint": true}}),
        )];
        let overrides = BTreeMap::from([("rm".to_string(), Access::Destructive)]);
        let cat = build(&tools, &overrides, 1);
        assert_eq!(cat.tools[0].access, Access::Destructive);
        // What the server said stays beside it: a policy judges that, not the override.
        assert_eq!(cat.tools[0].served_access, Some(Access::Read));
        assert_eq!(cat.tools[0].served_access(), Access::Read);
        assert_eq!(cat.tools[0].tenant_override(), Some(Access::Destructive));
        assert!(cat.overrides_digest.is_some());
    }

    #[test]
    fn a_tool_without_override_has_only_its_served_access() {
        let tools = [
            tool(json!({"name": "ls", "inputSchema": {}, "annotations": {"readOnlyHint": true}})),
            tool(json!({"name": "rm", "inputSchema": {}})),
        ];
        let overrides = BTreeMap::from([("rm".to_string(), Access::Read)]);
        let cat = build(&tools, &overrides, 1);
        let ls = &cat.tools[0];
        assert_eq!(
            (ls.access, ls.served_access, ls.tenant_override()),
            (Access::Read, None, None)
        );
        let json = serde_json::to_value(ls).unwrap();
        assert!(
            json.get("servedAccess").is_none(),
            "status stays as it was: {json}"
        );
        let rm = &cat.tools[1];
        assert_eq!(
            (rm.access, rm.served_access()),
            (Access::Read, Access::Destructive)
        );
        assert_eq!(
            serde_json::to_value(rm).unwrap()["servedAccess"],
            "destructive"
        );
        // A catalogue stored before servedAccess existed still reads.
        let old: CatalogTool = serde_json::from_value(
            json!({"name": "x", "access": "read", "idempotent": false, "schemaBytes": 2,
                   "definitionDigest": "sha256:x"}),
        )
        .unwrap();
        assert_eq!(
            (old.served_access(), old.tenant_override()),
            (Access::Read, None)
        );
    }

    #[test]
    fn the_overrides_digest_follows_the_classification_and_nothing_else() {
        let none = BTreeMap::new();
        assert_eq!(overrides_digest(&none), None);
        let read = BTreeMap::from([("rm".to_string(), Access::Read)]);
        let write = BTreeMap::from([("rm".to_string(), Access::Write)]);
        assert_ne!(overrides_digest(&read), overrides_digest(&write));
        assert_eq!(overrides_digest(&read), overrides_digest(&read.clone()));
        let tools = [tool(json!({"name": "rm", "inputSchema": {}}))];
        // The catalogue digest is the definitions' only: pinning never waits on a classification.
        assert_eq!(
            build(&tools, &read, 1).digest,
            build(&tools, &none, 1).digest
        );
        assert_ne!(
            build(&tools, &read, 1).overrides_digest,
            build(&tools, &write, 1).overrides_digest
        );
    }

    #[test]
    fn digest_ignores_key_order_and_number_spelling() {
        let a = json!({"name": "t", "inputSchema": {"type": "object", "maximum": 10}, "x": 1.0});
        let b: Value = serde_json::from_str(
            r#"{"x": 1, "inputSchema": {"maximum": 1e1, "type": "object"}, "name": "t"}"#,
        )
        .unwrap();
        assert_eq!(definition_digest(&a), definition_digest(&b));
        let c = json!({"name": "t", "inputSchema": {"type": "object", "maximum": 11}, "x": 1});
        assert_ne!(definition_digest(&a), definition_digest(&c));
        assert!(definition_digest(&a).starts_with("sha256:"));
        assert_eq!(definition_digest(&a).len(), "sha256:".len() + 64);
    }

    #[test]
    fn catalogue_is_sorted_and_its_digest_ignores_listing_order() {
        let t1 = tool(json!({"name": "b", "inputSchema": {"type": "object"}}));
        let t2 = tool(json!({"name": "a", "inputSchema": {"type": "object"},
                             "annotations": {"idempotentHint": true, "destructiveHint": false}}));
        let one = build(&[t1.clone(), t2.clone()], &BTreeMap::new(), 2);
        let two = build(&[t2, t1], &BTreeMap::new(), 1);
        assert_eq!(one.tools[0].name, "a");
        assert_eq!(one.digest, two.digest);
        assert_eq!(one.tool_count, 2);
        assert!(one.tools[0].idempotent);
        assert_eq!(one.tools[0].access, Access::Write);
        assert_eq!(one.tools[1].access, Access::Destructive);
    }

    #[test]
    fn a_changed_tool_changes_the_catalogue_digest() {
        let before = build(
            &[tool(
                json!({"name": "a", "inputSchema": {"type": "object"}}),
            )],
            &BTreeMap::new(),
            1,
        );
        let after = build(
            &[tool(
                json!({"name": "a", "description": "new", "inputSchema": {"type": "object"}}),
            )],
            &BTreeMap::new(),
            1,
        );
        assert_ne!(before.digest, after.digest);
    }

    #[test]
    fn descriptions_are_cut_on_character_boundaries() {
        let long = "é".repeat(500);
        let cat = build(
            &[tool(
                json!({"name": "a", "description": long, "inputSchema": {}}),
            )],
            &BTreeMap::new(),
            1,
        );
        let d = cat.tools[0].description.as_ref().unwrap();
        assert_eq!(d.chars().count(), DESCRIPTION_DISPLAY_CHARS + 1);
        assert!(d.ends_with('…'));
    }

    #[test]
    fn schema_bytes_count_input_and_output_schemas() {
        let cat = build(
            &[tool(json!({"name": "a", "inputSchema": {"type": "object"},
                          "outputSchema": {"type": "object"}}))],
            &BTreeMap::new(),
            1,
        );
        assert_eq!(
            cat.tools[0].schema_bytes,
            2 * r#"{"type":"object"}"#.len() as u64
        );
    }
}
