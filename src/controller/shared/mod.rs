//! What the three reconcilers write the same way: a status by server-side apply, events about an
//! object, an owned ConfigMap published only when its digest changed, and the label-selector
//! and rule-picking evaluation the reconcilers share.
//!
//! - [`status`]: `apply_status`, the one status write (SSA, forced, the operator's field manager).
//! - [`events`]: `publish`, events whose failure is logged, never fatal.
//! - [`config_map`]: `apply_if_changed`, an owned ConfigMap written only when the digest in its
//!   annotation differs.
//! - [`ready`]: `ReadyChange`, whether the Ready condition went down or came back.
//! - [`selector`]: Kubernetes label-selector semantics, invalid selectors reported.
//! - [`picking`]: which namespaces a tenant policy selects, which McpServers its rules pick
//!   (names, labels, URL patterns), and which policies require pinning of a server.
//! - [`references`]: every Secret key and ConfigMap an McpServer's spec names, and where each
//!   Secret value goes (the watches' index, the admission check of who may name a Secret).
//! - [`server_key`]: `ServerKey`, (namespace, name), what McpServers are remembered by.
//! - [`catalog_spill`]: the companion ConfigMap of a catalogue too large for status (the
//!   McpServer reconciler writes it, the AgentSpec reconciler reads it).
//! - [`endpoint`]: how a sidecar reaches an McpServer (the grants document's endpoint; the
//!   AgentSpec reconciler and the pod webhook both build it).

pub mod catalog_spill;
pub mod config_map;
pub mod endpoint;
pub mod events;
pub mod picking;
pub mod ready;
pub mod references;
pub mod selector;
pub mod server_key;
pub mod status;

/// The label on everything the operator creates (grants ConfigMaps, stdio workloads, the
/// signing keys' Secret), and its value.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "mcp-operator";
