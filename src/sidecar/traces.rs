//! The sidecar's spans: one per agent request (kind SERVER, named `<method> <target>`), child
//! of the agent's trace context (`params._meta.traceparent`, else the `traceparent` header),
//! with the call's decision and outcome added where the pipeline knows them. The upstream's
//! requests made while it is current carry it (`crate::mcp::http`, `crate::mcp::rpc`). Nothing
//! here runs when tracing is off: every function starts by asking [`telemetry`].
//!
//! Attributes: `mcp.method.name`, `jsonrpc.request.id`, `mcp_operator.agent`,
//! `gen_ai.tool.name` (the name the agent called), and for a tool call `mcp_operator.server`,
//! `mcp_operator.tool.raw` (the upstream's name), `mcp_operator.decision` (`allowed`,
//! `refused`, `asked`), `mcp_operator.decision.reason` (the audit line's decision:
//! `not_granted`, `definition_changed`…), `mcp_operator.outcome`, `mcp_operator.attempts`,
//! `mcp_operator.upstream.status_code` (the upstream's HTTP status). A failed call's span has
//! status error.

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use crate::telemetry::{self, Attribute, Span};

use super::audit::{CallRecord, Decision, Outcome};

/// The span of one agent request (None when tracing is off). `method` is the JSON-RPC
/// method; a `tools/call`, `prompts/get` or `resources/read` names its target in the span.
pub fn request(
    agent: &str,
    method: &str,
    id: &Value,
    params: &Map<String, Value>,
    headers: &HeaderMap,
) -> Option<Span> {
    if !telemetry::enabled() {
        return None;
    }
    let target = ["name", "uri"]
        .iter()
        .find_map(|k| params.get(*k).and_then(Value::as_str))
        .map(|t| t.chars().take(128).collect::<String>());
    telemetry::start_server(
        || match &target {
            Some(t) => format!("{method} {t}"),
            None => method.to_string(),
        },
        headers,
        params.get("_meta"),
        || {
            let mut attributes = vec![
                Attribute::new("mcp.method.name", method.to_string()),
                Attribute::new("mcp_operator.agent", agent.to_string()),
                Attribute::new("jsonrpc.request.id", id.to_string()),
            ];
            if method == "tools/call"
                && let Some(t) = &target
            {
                attributes.push(Attribute::new("gen_ai.tool.name", t.clone()));
            }
            attributes
        },
    )
}

/// What the pipeline decided for a call and how it ended, on the current span.
pub fn call(record: &CallRecord<'_>) {
    telemetry::set(|| {
        let mut attributes = vec![
            Attribute::new("mcp_operator.decision", decided(record.decision)),
            Attribute::new("mcp_operator.decision.reason", record.decision.as_str()),
            Attribute::new("mcp_operator.outcome", record.outcome.as_str()),
            Attribute::new("mcp_operator.attempts", i64::from(record.attempts)),
            Attribute::new("mcp_operator.via", record.via.as_str()),
        ];
        if let Some(server) = record.server {
            attributes.push(Attribute::new("mcp_operator.server", server.to_string()));
        }
        if let Some(raw) = record.raw_tool {
            attributes.push(Attribute::new("mcp_operator.tool.raw", raw.to_string()));
        }
        attributes
    });
    if matches!(
        record.outcome,
        Outcome::Error | Outcome::OutcomeUnknown | Outcome::Timeout
    ) {
        telemetry::failed(|| format!("the call ended {}", record.outcome.as_str()));
    }
}

/// A request the sidecar does not serve, on the current span.
pub fn not_served() {
    telemetry::set(|| {
        vec![
            Attribute::new("mcp_operator.decision", "refused"),
            Attribute::new("mcp_operator.decision.reason", "method_not_served"),
        ]
    });
}

/// `allowed`, `refused` or `asked` (the modern era's approval form went back to the agent).
fn decided(decision: Decision) -> &'static str {
    match decision {
        d if d.sent() => "allowed",
        Decision::ApprovalAsked => "asked",
        _ => "refused",
    }
}
