//! The CRD types of mcp-operator (group `mcp-operator.dev`, version `v1alpha1`) and their schema
//! validation. No I/O.

/// The CustomResourceDefinitions as one multi-document YAML stream.
pub fn crds_yaml() -> String {
    String::new()
}
