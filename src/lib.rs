//! mcp-operator: declares remote MCP servers and the tool grants of AI agents on Kubernetes.
//!
//! Dependencies point one way, down to a pure vocabulary:
//!
//! ```text
//!                 main.rs (clap: run | probe | crds | sidecar | bridge | import | check-url)
//!                    │            │          │
//!                    ▼            ▼          ▼
//!              controller      probe      sidecar ──► grants, mcp (never api, controller)
//!             ╱    │     ╲        │
//!            ▼     ▼      ▼       ▼
//!          api   grants    mcp ◄──┘
//!            ╲     │      ╱
//!             ▼    ▼     ▼
//!                 core
//!
//!    controller (its admission webhook) ──► inject ──► grants, core
//! ```
//!
//! - [`core`]: the vocabulary: catalogue, access and approval, era, server info, transport,
//!   limits and their defaults, Secret/ConfigMap key references, durations. Depends on nothing.
//! - [`api`]: the CRD types and their validation. No I/O. Uses `core`.
//! - [`mcp`]: the MCP client side: connect, negotiate, list every page within bounds, classify.
//!   Knows nothing of Kubernetes nor of `api`. Uses `core`.
//! - [`grants`]: the pure narrowing core (planes, patterns, qualified names) and the grants
//!   document. Uses only `core`.
//! - [`inject`]: pure: a labelled Pod and its AgentSpec's credential references → the JSON patch
//!   adding the sidecar. Uses `grants` and `core`; the controller's admission webhook serves it.
//! - [`controller`]: the reconcilers and the admission webhook; the only module that talks to
//!   Kubernetes.
//! - [`probe`]: the `probe` subcommand: one server, one JSON document.
//! - [`bridge`]: the `bridge` subcommand: a stdio MCP server served over Streamable HTTP.
//!   Uses `mcp` and `core` only.
//! - [`check_url`]: the `check-url` subcommand: GET one URL, exit 0 on a 2xx answer (the
//!   chart's `helm test` hook). Uses only `core`'s duration parser.
//! - [`import`]: the `import` subcommand: desktop `mcpServers` JSON → manifests. Pure.
//! - [`sidecar`]: the `sidecar` subcommand: the agent's only MCP endpoint, enforcing its grants
//!   at call time. Uses `grants`, `mcp` and `core` only (never `api` or `controller`).
//!
//! A unit test (`layering`) fails when a module of `core`, `api`, `mcp`, `grants`, `inject` or
//! `sidecar` imports against this direction.
#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod api;
pub mod bridge;
pub mod check_url;
pub mod controller;
pub mod core;
pub mod grants;
pub mod import;
pub mod inject;
pub mod mcp;
pub mod probe;
pub mod sidecar;
pub mod telemetry;

#[cfg(test)]
mod layering;

/// Installs the one rustls crypto provider this binary uses (ring). Two providers compiled in
/// make the first TLS connection panic, so every entry point calls this before any TLS happens.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
