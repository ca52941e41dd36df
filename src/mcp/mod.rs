//! MCP client.
