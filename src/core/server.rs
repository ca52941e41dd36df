//! What a server is, in the words both sides use: which protocol era it speaks and what it says
//! about itself. The MCP client finds these out; the McpServer status and the grants document
//! carry them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which generation of MCP the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Era {
    /// `initialize` handshake and sessions (2024-11-05 … 2025-11-25).
    Legacy,
    /// `server/discover`, per-request metadata, no sessions (2026-07-28).
    Modern,
}

/// What the server says about itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    /// The server implementation's name.
    #[serde(default)]
    pub name: String,
    /// The server implementation's version.
    #[serde(default)]
    pub version: String,
    /// A human-readable title, when the server gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// The HTTP transport of an MCP server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Streamable HTTP: one endpoint taking POSTs, answering with JSON or an SSE stream.
    #[default]
    StreamableHttp,
    /// The older HTTP+SSE transport: a GET event stream plus a POST endpoint it announces.
    Sse,
}
