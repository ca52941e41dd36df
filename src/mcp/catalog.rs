//! The catalogue: what one MCP server offers, classified and digested. Pure: built from the raw
//! tool definitions that `mcp::listing` read, written by the probe and by the controller into status.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much a tool can change the world, from the least to the most. Ordered, so a ceiling is a
/// comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// The tool only reads (`readOnlyHint: true`).
    Read,
    /// The tool changes state but does not destroy it (`destructiveHint: false`).
    Write,
    /// The tool may destroy state. MCP's default for a tool with no annotations.
    Destructive,
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
    /// The tools, sorted by name.
    #[serde(default)]
    pub tools: Vec<CatalogTool>,
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
    /// read, write or destructive: from the annotations (MCP defaults apply) unless overridden.
    pub access: Access,
    /// True when the server says repeating a call has no further effect (`idempotentHint`).
    pub idempotent: bool,
    /// The tool's annotations exactly as the server sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Size in bytes of the input (and output) schema as JSON.
    pub schema_bytes: u64,
    /// SHA-256 of the RFC 8785 canonical JSON of the whole tool definition.
    pub definition_digest: String,
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
