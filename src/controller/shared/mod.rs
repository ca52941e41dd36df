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
//! - [`picking`]: which McpServers a tenant-policy rule picks (names, labels, URL patterns).

pub mod config_map;
pub mod events;
pub mod picking;
pub mod ready;
pub mod selector;
pub mod status;
