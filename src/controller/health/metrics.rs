//! Prometheus metrics of the controller, served on `/metrics`. Label values are the same reason
//! words as in conditions and logs.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub kind: &'static str,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub namespace: String,
    pub name: String,
}

/// Every metric the controller exports.
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<KindLabels, Histogram>,
    pub probe_duration: Histogram,
    pub probes: Family<ReasonLabels, Counter>,
    pub status_writes: Family<KindLabels, Counter>,
    servers_by_reason: Family<ReasonLabels, Gauge>,
    tools: Family<ServerLabels, Gauge>,
    awaiting_approval: Family<ServerLabels, Gauge>,
    pub subscriptions_open: Gauge,
    /// Probes contacting their server now, outside the reconcile slots.
    pub probes_running: Gauge,
    /// Probes waiting for a probe slot.
    pub probes_waiting: Gauge,
    /// The response budget's size and the most of it ever held at once, in bytes.
    pub response_budget_bytes: Gauge,
    pub response_budget_high_water_bytes: Gauge,
    /// Admission reviews of the webhook (injection and pod validation) by result.
    admissions: Family<ResultLabels, Counter>,
    /// (namespace, name) → Ready reason, from which `servers_by_reason` is derived.
    reasons: Mutex<HashMap<(String, String), String>>,
}

/// A metric's name (under the `mcp_operator_` prefix) and its help text.
type Help = (&'static str, &'static str);

/// `mcp_operator_reconciles`.
const RECONCILES: Help = (
    "reconciles",
    "Reconciles by kind and result (ok or the error reason)",
);
/// `mcp_operator_reconcile_duration_seconds`.
const RECONCILE_DURATION: Help = ("reconcile_duration_seconds", "Time spent in one reconcile");
/// `mcp_operator_probe_duration_seconds`.
const PROBE_DURATION: Help = (
    "probe_duration_seconds",
    "Time to connect to an MCP server and list its whole catalogue",
);
/// `mcp_operator_probes`.
const PROBES: Help = (
    "probes",
    "Probes of MCP servers by outcome (Ready or the failure reason)",
);
/// `mcp_operator_writes`.
const STATUS_WRITES: Help = (
    "writes",
    "Writes to the apiserver (status patches, ConfigMaps) by kind",
);
/// `mcp_operator_mcpservers`.
const SERVERS_BY_REASON: Help = (
    "mcpservers",
    "McpServers by the reason of their Ready condition",
);
/// `mcp_operator_mcpserver_tools`.
const TOOLS: Help = ("mcpserver_tools", "Tools in each McpServer's catalogue");
/// `mcp_operator_mcpserver_tools_awaiting_approval`.
const AWAITING_APPROVAL: Help = (
    "mcpserver_tools_awaiting_approval",
    "Tools of each pinned McpServer withheld from every agent until a person approves them",
);
/// `mcp_operator_subscriptions_open`.
const SUBSCRIPTIONS_OPEN: Help = (
    "subscriptions_open",
    "Open tools/list_changed subscriptions to MCP servers",
);
/// `mcp_operator_probes_running`.
const PROBES_RUNNING: Help = (
    "probes_running",
    "Probes contacting their MCP server now (each its own task, outside the reconcile slots)",
);
/// `mcp_operator_probes_waiting`.
const PROBES_WAITING: Help = (
    "probes_waiting",
    "Probes waiting for a probe slot (first reads start before retries)",
);
/// `mcp_operator_response_budget_bytes`.
const RESPONSE_BUDGET_BYTES: Help = (
    "response_budget_bytes",
    "Bytes of MCP response bodies the controller may hold at once (--response-budget)",
);
/// `mcp_operator_response_budget_high_water_bytes`.
const RESPONSE_BUDGET_HIGH_WATER_BYTES: Help = (
    "response_budget_high_water_bytes",
    "The most bytes of MCP response bodies held at once since the controller started",
);
/// `mcp_operator_admissions`.
const ADMISSIONS: Help = (
    "admissions",
    "Pods the webhook answered, by result (injection: Injected, AlreadyInjected, NotLabelled; validation: Valid; both: Refused, ApiError, Invalid, Error)",
);

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("mcp_operator");
        let reconciles = register(&mut registry, RECONCILES, Family::default());
        let reconcile_duration = register(
            &mut registry,
            RECONCILE_DURATION,
            Family::<KindLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
        );
        let probe_duration = register(
            &mut registry,
            PROBE_DURATION,
            Histogram::new(exponential_buckets(0.005, 2.0, 14)),
        );
        let probes = register(&mut registry, PROBES, Family::default());
        let status_writes = register(&mut registry, STATUS_WRITES, Family::default());
        let servers_by_reason = register(&mut registry, SERVERS_BY_REASON, Family::default());
        let tools = register(&mut registry, TOOLS, Family::default());
        let awaiting_approval = register(&mut registry, AWAITING_APPROVAL, Family::default());
        let subscriptions_open = register(&mut registry, SUBSCRIPTIONS_OPEN, Gauge::default());
        let probes_running = register(&mut registry, PROBES_RUNNING, Gauge::default());
        let probes_waiting = register(&mut registry, PROBES_WAITING, Gauge::default());
        let response_budget_bytes =
            register(&mut registry, RESPONSE_BUDGET_BYTES, Gauge::default());
        let response_budget_high_water_bytes = register(
            &mut registry,
            RESPONSE_BUDGET_HIGH_WATER_BYTES,
            Gauge::default(),
        );
        let admissions = register(&mut registry, ADMISSIONS, Family::default());
        Metrics {
            registry,
            admissions,
            reconciles,
            reconcile_duration,
            probe_duration,
            probes,
            status_writes,
            servers_by_reason,
            tools,
            awaiting_approval,
            subscriptions_open,
            probes_running,
            probes_waiting,
            response_budget_bytes,
            response_budget_high_water_bytes,
            reasons: Mutex::new(HashMap::new()),
        }
    }
}

/// Registers a metric under its name and help, and hands it back to be kept.
fn register<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    (name, help): Help,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// Counts one admission review of the webhook.
    pub fn admission(&self, result: &str) {
        self.admissions
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
    }

    /// Records an McpServer's Ready reason and tool count (None when it is deleted).
    pub fn set_server(&self, namespace: &str, name: &str, state: Option<(&str, Option<u32>)>) {
        let key = (namespace.to_string(), name.to_string());
        let labels = ServerLabels {
            namespace: key.0.clone(),
            name: key.1.clone(),
        };
        let mut reasons = self.reasons.lock().expect("metrics lock");
        match state {
            Some((reason, tools)) => {
                reasons.insert(key, reason.to_string());
                match tools {
                    Some(n) => {
                        self.tools.get_or_create(&labels).set(n as i64);
                    }
                    None => {
                        self.tools.remove(&labels);
                    }
                }
            }
            None => {
                reasons.remove(&key);
                self.tools.remove(&labels);
            }
        }
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for reason in reasons.values() {
            *counts.entry(reason.as_str()).or_default() += 1;
        }
        self.servers_by_reason.clear();
        for (reason, n) in counts {
            self.servers_by_reason
                .get_or_create(&ReasonLabels {
                    reason: reason.to_string(),
                })
                .set(n);
        }
    }

    /// Records how many tools of a pinned McpServer wait for approval (None: pinning is off or
    /// the server is deleted).
    pub fn set_awaiting_approval(&self, namespace: &str, name: &str, waiting: Option<u32>) {
        let labels = ServerLabels {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        match waiting {
            Some(n) => {
                self.awaiting_approval.get_or_create(&labels).set(n as i64);
            }
            None => {
                self.awaiting_approval.remove(&labels);
            }
        }
    }

    /// Runs one reconcile, recording its duration and its result (`ok` or the error reason).
    pub async fn time_reconcile<T>(
        &self,
        kind: &'static str,
        reconcile: impl std::future::Future<
            Output = Result<T, crate::controller::error::ReconcileError>,
        >,
    ) -> Result<T, crate::controller::error::ReconcileError> {
        let started = std::time::Instant::now();
        let result = reconcile.await;
        self.reconcile_duration
            .get_or_create(&KindLabels { kind })
            .observe(started.elapsed().as_secs_f64());
        let result_label = match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => e.reason().to_string(),
        };
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind,
                result: result_label,
            })
            .inc();
        result
    }

    /// Counts one write to the apiserver.
    pub fn count_write(&self, kind: &'static str) {
        self.status_writes.get_or_create(&KindLabels { kind }).inc();
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding to a String");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_counted_by_reason() {
        let m = Metrics::default();
        m.set_server("a", "x", Some(("Ready", Some(3))));
        m.set_server("a", "y", Some(("Unauthorized", None)));
        m.set_server("b", "z", Some(("Ready", Some(1))));
        let text = m.render();
        assert!(
            text.contains(r#"mcp_operator_mcpservers{reason="Ready"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"mcp_operator_mcpservers{reason="Unauthorized"} 1"#));
        m.set_server("a", "y", None);
        let text = m.render();
        assert!(!text.contains("Unauthorized"), "{text}");
        assert!(text.contains(r#"mcp_operator_mcpserver_tools{namespace="a",name="x"} 3"#));
    }
}
