//! A stdio McpServer as a workload: its Deployment and Service behind `mcp-operator bridge`.
//!
//! - [`build`]: what to apply and how its state reads (pure).
//! - [`workload`]: applies them and observes them (kube calls).

pub mod build;
pub mod workload;
