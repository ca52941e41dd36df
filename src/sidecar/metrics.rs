//! Prometheus metrics of the sidecar, served on `/metrics` (`--metrics-addr`). Label values are
//! the words of the audit line: decision (allowed, not_granted, definition_changed,
//! server_unavailable, approved, declined, cancelled, timed_out, cannot_ask, approval_asked,
//! invalid_approval) and outcome (ok, is_error, error, outcome_unknown, timeout, refused,
//! input_required).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub server: String,
    pub decision: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub server: String,
}

/// Every metric the sidecar exports.
pub struct Metrics {
    registry: Registry,
    pub calls: Family<CallLabels, Counter>,
    pub call_duration: Family<ServerLabels, Histogram>,
    pub upstream_connections: Family<ServerLabels, Gauge>,
    pub upstream_connects: Family<ServerLabels, Counter>,
    pub grants_reloads: Family<Vec<(String, String)>, Counter>,
    pub grants_rejected: Family<Vec<(String, String)>, Counter>,
    pub definitions_withheld: Family<ServerLabels, Gauge>,
    pub catalog_reads: Family<Vec<(String, String)>, Counter>,
    pub agent_sessions: Gauge,
    /// Agent requests refused before they were read whole: their body was over
    /// --max-request-bytes, or found no room in --request-budget.
    pub requests_refused: Family<Vec<(String, String)>, Counter>,
    /// The most bytes of agent request bodies held at once so far.
    pub request_bytes_high_water: Gauge,
    /// The upstream answers' budget (`--response-budget`), read at every scrape.
    response_budget: std::sync::OnceLock<crate::mcp::ResponseBudget>,
    response_budget_bytes: Gauge,
    response_budget_high_water: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mcp_sidecar");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls by server, decision and outcome",
            calls.clone(),
        );
        let call_duration = Family::<ServerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 18))
        });
        registry.register(
            "tool_call_duration_seconds",
            "Time from the agent's tools/call to its answer, calls sent upstream only (an approved call includes the wait for the answer)",
            call_duration.clone(),
        );
        let upstream_connections = Family::<ServerLabels, Gauge>::default();
        registry.register(
            "upstream_connections",
            "Open upstream connections used for calls",
            upstream_connections.clone(),
        );
        let upstream_connects = Family::<ServerLabels, Counter>::default();
        registry.register(
            "upstream_connects",
            "Upstream connections opened for calls (reconnects included)",
            upstream_connects.clone(),
        );
        let grants_reloads = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "grants_reloads",
            "Reads of the grants file by result (ok, invalid, missing or revoked)",
            grants_reloads.clone(),
        );
        let grants_rejected = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "grants_rejected",
            "Grants documents not obeyed, by reason (invalid, unsigned, content_changed, unknown_key, bad_signature, malformed_signature, unsupported_signature, other_namespace, other_agentspec, other_uid, older_sequence)",
            grants_rejected.clone(),
        );
        let definitions_withheld = Family::<ServerLabels, Gauge>::default();
        registry.register(
            "definitions_withheld",
            "Granted tools not offered because their live definition differs from the granted one",
            definitions_withheld.clone(),
        );
        let catalog_reads = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "catalog_reads",
            "Reads of an upstream's tool list by server and result (ok or the reason)",
            catalog_reads.clone(),
        );
        let agent_sessions = Gauge::default();
        registry.register(
            "agent_sessions",
            "Open legacy-era agent sessions",
            agent_sessions.clone(),
        );
        let requests_refused = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "agent_requests_refused",
            "Agent requests refused while their body was read, by reason (too_large: over --max-request-bytes; budget_busy: no room in --request-budget)",
            requests_refused.clone(),
        );
        let request_bytes_high_water = Gauge::default();
        registry.register(
            "request_budget_high_water_bytes",
            "The most bytes of agent request bodies held at once (bounded by --request-budget)",
            request_bytes_high_water.clone(),
        );
        let response_budget_bytes = Gauge::default();
        registry.register(
            "response_budget_bytes",
            "Bytes of upstream answers the sidecar may hold at once (--response-budget)",
            response_budget_bytes.clone(),
        );
        let response_budget_high_water = Gauge::default();
        registry.register(
            "response_budget_high_water_bytes",
            "The most bytes of upstream answers held (or reserved) at once so far",
            response_budget_high_water.clone(),
        );
        Metrics {
            registry,
            response_budget: std::sync::OnceLock::new(),
            response_budget_bytes,
            response_budget_high_water,
            calls,
            call_duration,
            upstream_connections,
            upstream_connects,
            grants_reloads,
            grants_rejected,
            definitions_withheld,
            catalog_reads,
            agent_sessions,
            requests_refused,
            request_bytes_high_water,
        }
    }

    /// Reports `budget` (the upstream answers' one) from now on.
    pub fn report_response_budget(&self, budget: &crate::mcp::ResponseBudget, total: u64) {
        let _ = self.response_budget.set(budget.clone());
        self.response_budget_bytes.set(total as i64);
    }

    pub fn render(&self) -> String {
        if let Some(budget) = self.response_budget.get() {
            self.response_budget_high_water
                .set(budget.high_water() as i64);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding to a String");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

pub fn server_label(server: &str) -> ServerLabels {
    ServerLabels {
        server: server.to_string(),
    }
}
