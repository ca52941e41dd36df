//! Schema fragments the three CRDs share: the patterns and length bounds that tool names,
//! tool-name patterns and resource and prompt patterns must satisfy, and the resource and
//! prompt pattern lists of AgentSpec entries and policy rules. The field types they share (Secret and ConfigMap key
//! references, duration strings) are vocabulary and live in [`crate::core`]; they are
//! re-exported here so CRD code reads them where it always did.
//!
//! The constants here are the single source of the rules: the CRD schema embeds them, and the
//! unit tests check that the generated schema carries them where they belong.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

pub use crate::core::duration::{DURATION_MAX_LENGTH, DURATION_PATTERN, Duration, InvalidDuration};
pub use crate::core::refs::{
    ConfigMapKeySelector, DATA_KEY_PATTERN, DNS_SUBDOMAIN_MAX_LENGTH, DNS_SUBDOMAIN_PATTERN,
    SecretKeySelector,
};

/// Longest tool name MCP allows (2025-11-25: "between 1 and 128 characters").
pub const TOOL_NAME_MAX_LENGTH: u32 = 128;

/// A tool name: the MCP charset (ASCII letters, digits, `_`, `-`, `.`), no wildcards.
pub const TOOL_NAME_PATTERN: &str = r"^[A-Za-z0-9_.-]+$";

/// A tool-name pattern: the tool-name charset plus the wildcards `*` (any run) and `?` (one
/// character).
pub const TOOL_PATTERN_PATTERN: &str = r"^[A-Za-z0-9_.*?-]+$";

/// A resource pattern (matched against a resource URI or URI template) or a prompt-name
/// pattern: visible ASCII, no space (URIs are ASCII per RFC 3986); `*` and `?` are the
/// wildcards, and in a resource pattern a URI-template expression `{…}` counts as `*`.
pub const RESOURCE_PATTERN_PATTERN: &str = r"^[!-~]+$";

/// Longest resource pattern: the length the CRDs allow an McpServer URL.
pub const RESOURCE_PATTERN_MAX_LENGTH: u32 = 2048;

/// Longest prompt-name pattern.
pub const PROMPT_PATTERN_MAX_LENGTH: u32 = 256;

/// Most entries in one allow, deny or requireApproval list. Bounds the cost of CEL rules and the
/// size of the object.
pub const TOOL_LIST_MAX_ITEMS: u32 = 256;

/// Text the CEL range rules refuse before calling `duration()` on it: a number too large for
/// its unit to be in any range we accept (at most 99999h, 9999999m, 999999999s,
/// 999999999999ms each). Within [`DURATION_MAX_LENGTH`] characters, what passes sums to well
/// under the 2562047h where Go's (and so CEL's) durations overflow, so a huge value gets the
/// rule's message instead of a CEL "type conversion error".
pub const DURATION_OVERFLOW_PATTERN: &str = "(^|[a-z])([0-9]{6,}([.][0-9]+)?h|[0-9]{8,}([.][0-9]+)?m($|[0-9])|[0-9]{10,}([.][0-9]+)?s|[0-9]{13,}([.][0-9]+)?ms)";

/// The schema of an optional enum field: the enum's values, nullable, without the enum type's
/// own description, so the field's doc comment describes the field (kube's rewrite of
/// `Option<Enum>` would otherwise replace it with the type's description).
pub(crate) fn nullable_enum_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = T::json_schema(generator);
    if let Some(object) = schema.as_object_mut() {
        object.remove("description");
        object.insert("nullable".into(), true.into());
    }
    schema
}

/// The schema of a tool name (no wildcards).
pub(crate) fn tool_name_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": TOOL_NAME_MAX_LENGTH,
        "pattern": TOOL_NAME_PATTERN,
    })
}

/// The schema of a list of tool names (no wildcards).
pub(crate) fn tool_name_list_schema(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": TOOL_LIST_MAX_ITEMS,
        "items": tool_name_schema(generator),
    })
}

/// The schema of a list of tool-name patterns (`*` and `?` allowed).
pub(crate) fn tool_pattern_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": TOOL_LIST_MAX_ITEMS,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": TOOL_NAME_MAX_LENGTH,
            "pattern": TOOL_PATTERN_PATTERN,
        },
    })
}

/// The schema of a list of resource patterns.
pub(crate) fn resource_pattern_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": TOOL_LIST_MAX_ITEMS,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": RESOURCE_PATTERN_MAX_LENGTH,
            "pattern": RESOURCE_PATTERN_PATTERN,
        },
    })
}

/// The schema of a list of prompt-name patterns.
pub(crate) fn prompt_pattern_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": TOOL_LIST_MAX_ITEMS,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": PROMPT_PATTERN_MAX_LENGTH,
            "pattern": RESOURCE_PATTERN_PATTERN,
        },
    })
}

/// Which resources (and resource templates) of a server are granted, by their URI or URI
/// template. Unlike tools, no allow pattern grants none.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePatterns {
    /// URI patterns granted; empty grants none. `*` matches any run of characters (`/`
    /// included), `?` one character (a literal `?` too), and a URI-template expression such
    /// as `{id}` counts as `*`, so a template's own text grants the template and the URIs it
    /// expands to. Example: `file:///docs/*`, `test://static/resource/{id}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "resource_pattern_list_schema")]
    pub allow: Vec<String>,
    /// URI patterns never granted, whatever allow says (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "resource_pattern_list_schema")]
    pub deny: Vec<String>,
}

/// Which prompts of a server are granted, by name. Unlike tools, no allow pattern grants none.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct PromptPatterns {
    /// Prompt-name patterns granted; empty grants none. `*` matches any run of characters,
    /// `?` one character.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "prompt_pattern_list_schema")]
    pub allow: Vec<String>,
    /// Prompt-name patterns never granted, whatever allow says (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "prompt_pattern_list_schema")]
    pub deny: Vec<String>,
}
