//! The CRD types of mcp-operator (group `mcp-operator.dev`, version `v1alpha1`) and their schema
//! validation. No I/O.
//!
//! ```text
//!            [ McpTenantPolicy ] (cluster-scoped) --namespaceSelector--> [ Namespace ]
//!                    | rules[].servers                                        |
//!                    v                                                        | contains
//! [ Secret ] <-- [ McpServer ] <--servers[].name-- [ AgentSpec ] --owns--> [ ConfigMap grants ]
//! ```
//!
//! - [`mcp_server`]: `McpServer`, a remote MCP server; status holds its classified catalogue.
//! - [`agent_spec`]: `AgentSpec`, the servers and tools one agent wants; status holds its grants.
//! - [`tenant_policy`]: `McpTenantPolicy`, the platform team's bound per namespace.
//! - [`conditions`]: KEP-1623 conditions and the condition types the three kinds report.
//! - [`common`]: field types and schema fragments the kinds share.
//!
//! The schema is the first line of defence (DESIGN §8): malformed specs are refused at
//! `kubectl apply` by the OpenAPI schema and CEL rules generated from these types, so the
//! controller only ever sees well-formed input. [`crds_yaml`] prints the CRDs; the checked-in
//! `crds/crds.yaml` must equal it (a unit test says so).

pub mod agent_spec;
pub mod common;
pub mod conditions;
pub mod mcp_server;
pub mod tenant_policy;

pub use agent_spec::{AgentSpec, AgentSpecSpec, AgentSpecStatus, Approval};
pub use mcp_server::{McpServer, McpServerSpec, McpServerStatus};
pub use tenant_policy::{McpTenantPolicy, McpTenantPolicySpec, McpTenantPolicyStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every mcp-operator resource.
pub const GROUP: &str = "mcp-operator.dev";

/// The three CustomResourceDefinitions, in the order they are printed.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [McpServer::crd(), AgentSpec::crd(), McpTenantPolicy::crd()]
        .into_iter()
        .map(tidy_schemas)
        .collect()
}

/// The CustomResourceDefinitions as one multi-document YAML stream (McpServer, AgentSpec,
/// McpTenantPolicy), exactly what `crds/crds.yaml` holds.
pub fn crds_yaml() -> String {
    serde_saphyr::to_string_multiple(&crds())
        .expect("CustomResourceDefinitions always serialise to YAML")
}

/// Two touches to what schemars generates, on every schema node of a CRD:
///
/// - Doc comments are wrapped at 100 columns in the source; `kubectl explain` wraps on its own,
///   so descriptions keep paragraph breaks (blank lines) and lose the source's line breaks.
/// - schemars says `format: uint32`/`uint64` for unsigned integers, which the apiserver does not
///   know (it warns on every apply); they become `int64`, and `minimum: 0` stays.
fn tidy_schemas(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(crd).expect("a CRD is JSON");
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
    {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                tidy_schema(schema);
            }
        }
    }
    serde_json::from_value(value).expect("tidying schemas keeps a valid CRD")
}

fn tidy_schema(schema: &mut serde_json::Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(serde_json::Value::String(description)) = object.get_mut("description") {
        *description = description
            .split("\n\n")
            .map(|paragraph| {
                paragraph
                    .split('\n')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    if let Some(format) = object.get_mut("format")
        && format.as_str().is_some_and(|f| f.starts_with("uint"))
    {
        *format = "int64".into();
    }
    if let Some(properties) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.values_mut().for_each(tidy_schema);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = object.get_mut(key) {
            tidy_schema(child);
        }
    }
}

#[cfg(test)]
mod tests;
