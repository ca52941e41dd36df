//! The key an McpServer is remembered by, (namespace, name): the McpServer reconciler's
//! schedule, probes and subscriptions, and the AgentSpec reconciler's cache of spilled
//! catalogues all use it.

use kube::ResourceExt;

use crate::api::mcp_server::McpServer;

/// (namespace, name) of an McpServer.
pub type ServerKey = (String, String);

/// (namespace, name) of an McpServer.
pub fn key_of(server: &McpServer) -> ServerKey {
    (server.namespace().unwrap_or_default(), server.name_any())
}
