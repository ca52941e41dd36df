//! Objects the controller's unit tests build: McpServers, AgentSpecs and McpTenantPolicies in
//! namespace `team-a`, and the SDK fixture's four-tool catalogue. Test-only.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::agent_spec::AgentSpec;
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::{McpTenantPolicy, McpTenantPolicySpec};
use crate::core::Catalog;
use crate::core::catalog::build;

pub fn server(name: &str, labels: Value, spec: Value, status: Value) -> McpServer {
    let mut s: McpServer = serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels},
        "spec": spec,
    }))
    .unwrap();
    if !status.is_null() {
        s.status = Some(serde_json::from_value(status).unwrap());
    }
    s
}

pub fn ready_status(catalog: &Catalog) -> Value {
    json!({
        "era": "legacy", "protocolVersion": "2025-11-25",
        "catalog": serde_json::to_value(catalog).unwrap(),
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    })
}

/// read_file (read), write_file (write), put_object (idempotent write), delete_file
/// (destructive): the SDK fixture's named tools.
pub fn catalog() -> Catalog {
    let tools: Vec<_> = [
        json!({"name": "read_file", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
        json!({"name": "write_file", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false, "destructiveHint": false}}),
        json!({"name": "put_object", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true}}),
        json!({"name": "delete_file", "inputSchema": {"type": "object"}}),
    ]
    .into_iter()
    .map(|v| v.as_object().unwrap().clone())
    .collect();
    build(&tools, &BTreeMap::new(), 1)
}

pub fn agent(spec: Value) -> AgentSpec {
    serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
        "metadata": {"name": "bot", "namespace": "team-a", "uid": "u-1", "generation": 3},
        "spec": spec,
    }))
    .unwrap()
}

pub fn policy(name: &str, spec: Value) -> McpTenantPolicy {
    McpTenantPolicy::new(
        name,
        serde_json::from_value::<McpTenantPolicySpec>(spec).unwrap(),
    )
}

pub fn full_server() -> McpServer {
    server(
        "gh",
        json!({}),
        json!({
            "url": "https://gh.example/mcp", "transport": "sse", "retry": 4,
            "timeouts": {"connect": "5s", "call": "1m"},
            "credentials": {
                "bearerToken": {"secretKeyRef": {"name": "gh-token", "key": "token"}},
                "headers": [{"name": "X-Tenant", "valueFrom": {"secretKeyRef": {"name": "gh-tenant", "key": "id"}}}],
            },
            "tls": {"caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}},
        }),
        ready_status(&catalog()),
    )
}

/// Labels from pairs, as selectors and namespaces carry them.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
