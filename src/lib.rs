//! mcp-operator: declares remote MCP servers and the tool grants of AI agents on Kubernetes.
//!
//! Data flows one way:
//!
//! ```text
//! Kubernetes objects ──► plain inputs ──► pure core (mcp::catalog, grants) ──► status / ConfigMaps
//!        api/                                   mcp/ (network side)             controller/
//! ```
//!
//! - [`api`]: the CRD types and their validation. No I/O.
//! - [`mcp`]: the MCP client side: connect, negotiate, list every page within bounds, classify.
//!   Knows nothing of Kubernetes.
//! - [`grants`]: the pure narrowing core (planes, patterns, qualified names).
//! - [`probe`]: the `probe` subcommand: one server, one JSON document.
#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod api;
pub mod controller;
pub mod grants;
pub mod mcp;
pub mod probe;

/// Installs the one rustls crypto provider this binary uses (ring). Two providers compiled in
/// make the first TLS connection panic, so every entry point calls this before any TLS happens.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
