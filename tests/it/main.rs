//! Every integration and end-to-end test of mcp-operator, in one test binary: one link instead of
//! eleven, one control plane per run, and helpers shared without `allow(dead_code)`.
//!
//! ```text
//! helpers      support (fixture MCP servers on loopback) ◄── sidecar_support (a sidecar process)
//!              e2e (the real control plane, a namespace per test) ◄── operator (the controller binary)
//!
//! tests        bridge                                                          real clients ⇄ bridge ⇄ real stdio servers
//!              import                                                          the import command on real-world configs
//!              probe_real_servers, probe_hostile_servers, watch_tool_changes,
//!              response_budget                                                 real servers, no cluster
//!              sidecar, sidecar_restarts                                       real agents ⇄ sidecar ⇄ real servers
//!              traces                                                          one trace agent → sidecar → server, in a real OTel Collector
//!              e2e_crd_validation, e2e_rbac, e2e_mcp_server, e2e_grants,
//!              e2e_sidecar, e2e_stdio, e2e_tenancy, e2e_mcp_admission          the real control plane
//!              chart_alerts                                                    the chart's PrometheusRule, by promtool
//!              image_contract, e2e_node, e2e_dataplane_faults,
//!              e2e_node_resources                                              the image; real pods on the node
//!              e2e_services                                                    ClusterIP Services on the node
//! ```
//!
//! Run one group with its module path: `cargo test --test it e2e_grants::`.

mod e2e;
mod operator;
mod sidecar_support;
mod support;

mod bridge;
mod chart_alerts;
mod e2e_crd_validation;
mod e2e_dataplane_faults;
mod e2e_grants;
mod e2e_injected_traces;
mod e2e_mcp_admission;
mod e2e_mcp_server;
mod e2e_node;
mod e2e_node_resources;
mod e2e_oauth;
mod e2e_rbac;
mod e2e_secret_guard;
mod e2e_services;
mod e2e_sidecar;
mod e2e_stdio;
mod e2e_tenancy;
mod image_contract;
mod import;
mod oauth;
mod probe_hostile_servers;
mod probe_real_servers;
mod response_budget;
mod sidecar;
mod sidecar_resources;
mod sidecar_restarts;
mod sidecar_streaming;
mod traces;
mod watch_tool_changes;
