//! Schema fragments the three CRDs share: the patterns and length bounds that tool names and
//! tool-name patterns must satisfy. The field types they share (Secret and ConfigMap key
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
