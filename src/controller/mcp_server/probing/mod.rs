//! Reading an McpServer: when it is due, the probe tasks that read it outside the reconcile
//! slots, and the subscriptions of servers that push `tools/list_changed`.
//!
//! - [`plan`]: the one next step of a reconcile's read, and when a read server is due (pure).
//! - [`connection`]: the McpServer → `ServerConnection` mapping (pure).
//! - [`schedule`]: when each server is next due for a probe, and in which [`schedule::Lane`].
//! - [`probes`]: the probe tasks, their lanes, and which result a reconcile may use.
//! - [`resume`]: after a restart, when the status says a server was last read (pure).
//! - [`subscriptions`]: one `tools/list_changed` subscription per server that pushes.

pub mod connection;
pub mod plan;
pub mod probes;
pub mod resume;
pub mod schedule;
pub mod subscriptions;
