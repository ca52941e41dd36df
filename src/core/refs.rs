//! References to one key of a Secret or a ConfigMap in the referring object's namespace: how a
//! CRD names a credential or a CA bundle, and how the grants document tells the sidecar where to
//! read them. Only ever a name and a key, never a value.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A DNS subdomain (RFC 1123), the form of most Kubernetes object names, Secrets and ConfigMaps
/// included.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Longest DNS subdomain.
pub const DNS_SUBDOMAIN_MAX_LENGTH: u32 = 253;

/// A key of a Secret's or ConfigMap's data.
pub const DATA_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

/// The schema of the name of a Secret or ConfigMap.
fn object_name_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": DNS_SUBDOMAIN_MAX_LENGTH,
        "pattern": DNS_SUBDOMAIN_PATTERN,
    })
}

/// The schema of a key in a Secret's or ConfigMap's data.
fn data_key_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": DNS_SUBDOMAIN_MAX_LENGTH,
        "pattern": DATA_KEY_PATTERN,
    })
}

/// One key of a Secret in the referring object's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct SecretKeySelector {
    /// Name of the Secret. It must be in the same namespace as the object that refers to it.
    #[schemars(schema_with = "object_name_schema")]
    pub name: String,
    /// Key within the Secret's data whose value is used.
    #[schemars(schema_with = "data_key_schema")]
    pub key: String,
}

/// One key of a ConfigMap in the referring object's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ConfigMapKeySelector {
    /// Name of the ConfigMap. It must be in the same namespace as the object that refers to it.
    #[schemars(schema_with = "object_name_schema")]
    pub name: String,
    /// Key within the ConfigMap's data whose value is used.
    #[schemars(schema_with = "data_key_schema")]
    pub key: String,
}
