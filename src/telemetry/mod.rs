//! Traces: OpenTelemetry spans for the sidecar's requests and the controller's probes, exported
//! over OTLP (http/protobuf) only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and the W3C trace context (`traceparent`,
//! `tracestate`) carried across the hop: taken from the agent's request (`params._meta`, as
//! SEP-414 puts it, else the HTTP header) and passed to the upstream (HTTP header, and `_meta`
//! where the upstream request carries one). This module is the only one that names the
//! OpenTelemetry crates, as [`crate::mcp`] is for rmcp.
//!
//! ```text
//! init (env) ─► Tracing (provider, tracer) in a OnceLock ─┐  nothing set: None, and every
//!                                                        │  function below returns at once
//! start_server / start_internal ─► Span (Context) ──────►├─ within(span, future): current while polled
//!   set / upstream_status: attributes of the current span │  in_current: a spawned task keeps it
//! mcp::http send ─► headers() ; mcp::rpc request ─► trace_meta() into params._meta
//! ```
//!
//! Cost when off: one atomic load per hook; no span, no context, no allocation (issue 24
//! counts the sidecar's CPU per call).

mod export;

use std::future::Future;
use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    FutureExt as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde_json::Value;

pub use opentelemetry::KeyValue as Attribute;

/// The environment variables that turn export on (either one), as the OpenTelemetry spec names
/// them.
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    service: String,
}

static TRACING: OnceLock<Option<Tracing>> = OnceLock::new();

fn tracing() -> Option<&'static Tracing> {
    TRACING.get().and_then(Option::as_ref)
}

/// Whether spans are made (an exporter is configured).
pub fn enabled() -> bool {
    tracing().is_some()
}

/// Why export could not be turned on although an endpoint is set.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL={0} is not supported: this build exports http/protobuf only"
    )]
    Protocol(String),
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

/// What [`init`] set up; [`Traces::shutdown`] sends the spans still buffered.
pub struct Traces(bool);

/// Reads the standard OpenTelemetry environment (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`)
/// and turns export on when an endpoint is set. `service` names the process when
/// `OTEL_SERVICE_NAME` does not. Must run inside a tokio runtime (the exporter posts on it).
/// A setting it cannot follow is logged and leaves tracing off. A second call keeps what the
/// first set up.
pub fn init(service: &str) -> Traces {
    if let Some(done) = TRACING.get() {
        return Traces(done.is_some());
    }
    let built = configured(&|name| std::env::var(name).ok()).and_then(|on| match on {
        false => Ok(None),
        true => build(service).map(Some),
    });
    let tracing = built.unwrap_or_else(|e| {
        tracing::warn!(reason = "TracesOff", "not exporting traces: {e}");
        None
    });
    if let Some(t) = &tracing {
        tracing::info!(
            service = %t.service,
            "exporting traces over OTLP (http/protobuf) to the endpoint OTEL_EXPORTER_OTLP_ENDPOINT names"
        );
    }
    let _ = TRACING.set(tracing);
    Traces(enabled())
}

/// Whether the environment asks for export: an endpoint is set, the SDK is not disabled, and
/// the protocol is one this build speaks.
fn configured(env: &dyn Fn(&str) -> Option<String>) -> Result<bool, TelemetryError> {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    if !ENDPOINT_VARS.iter().any(|v| set(v)) {
        return Ok(false);
    }
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = env(var).filter(|v| !v.trim().is_empty()) {
            if protocol.trim() != "http/protobuf" {
                return Err(TelemetryError::Protocol(protocol));
            }
            break;
        }
    }
    Ok(true)
}

fn build(service: &str) -> Result<Tracing, TelemetryError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(export::Client::new().map_err(TelemetryError::Exporter)?)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| service.to_string());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("mcp-operator");
    Ok(Tracing {
        provider,
        tracer,
        service: name,
    })
}

impl Traces {
    /// Whether spans are exported.
    pub fn on(&self) -> bool {
        self.0
    }

    /// Sends what is buffered and stops the exporter (off the runtime's threads: the export
    /// itself runs on the runtime, which may have one thread).
    pub async fn shutdown(self) {
        let Some(t) = tracing().filter(|_| self.0) else {
            return;
        };
        let provider = t.provider.clone();
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

/// One span, while it is open (it ends when the last clone of it is dropped).
#[derive(Clone, Debug)]
pub struct Span(Context);

impl Span {
    /// The span's W3C `traceparent`.
    pub fn traceparent(&self) -> String {
        let mut carrier = Fields::default();
        TraceContextPropagator::new().inject_context(&self.0, &mut carrier);
        carrier.traceparent.unwrap_or_default()
    }

    /// Adds attributes to this span.
    pub fn set(&self, attributes: Vec<KeyValue>) {
        self.0.span().set_attributes(attributes);
    }
}

/// The trace context fields of a request, by name.
#[derive(Default)]
struct Fields {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        match key {
            "traceparent" => self.traceparent = Some(value),
            "tracestate" => self.tracestate = Some(value),
            _ => {}
        }
    }
}

impl Extractor for Fields {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent.as_deref(),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The caller's trace context: `_meta`'s `traceparent`/`tracestate` when it has a traceparent
/// (the request's own, which a client sets per request), else the HTTP headers'.
fn remote_parent(headers: &http::HeaderMap, meta: Option<&Value>) -> Context {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let from_meta = meta.and_then(|m| {
        let traceparent = text(m.get("traceparent"))?;
        Some(Fields {
            traceparent: Some(traceparent),
            tracestate: text(m.get("tracestate")),
        })
    });
    let fields = from_meta.unwrap_or_else(|| {
        let header = |name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Fields {
            traceparent: header("traceparent"),
            tracestate: header("tracestate"),
        }
    });
    TraceContextPropagator::new().extract_with_context(&Context::new(), &fields)
}

/// A span for a request this process serves (kind SERVER), child of the caller's trace
/// context when the request carries one. None when tracing is off (nothing is read or built).
pub fn start_server(
    name: impl FnOnce() -> String,
    headers: &http::HeaderMap,
    meta: Option<&Value>,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Span> {
    let t = tracing()?;
    let parent = remote_parent(headers, meta);
    let span = t
        .tracer
        .span_builder(name())
        .with_kind(SpanKind::Server)
        .with_attributes(attributes())
        .start_with_context(&t.tracer, &parent);
    Some(Span(parent.with_span(span)))
}

/// A span for work this process starts itself (kind INTERNAL), child of the current span if
/// any. None when tracing is off.
pub fn start_internal(
    name: impl FnOnce() -> String,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> Option<Span> {
    let t = tracing()?;
    let parent = Context::current();
    let span = t
        .tracer
        .span_builder(name())
        .with_kind(SpanKind::Internal)
        .with_attributes(attributes())
        .start_with_context(&t.tracer, &parent);
    Some(Span(parent.with_span(span)))
}

/// Runs `future` with `span` current while it is polled (upstream requests made inside carry
/// it); without a span, just runs it.
pub async fn within<F: Future>(span: Option<Span>, future: F) -> F::Output {
    match span {
        Some(Span(cx)) => future.with_context(cx).await,
        None => future.await,
    }
}

/// `future` with the current span kept current, for a task spawned from inside a span.
pub fn in_current<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let span = enabled().then(|| Span(Context::current()));
    within(span, future)
}

/// Adds attributes to the current span (nothing when tracing is off or no span is current).
pub fn set(attributes: impl FnOnce() -> Vec<KeyValue>) {
    if enabled() {
        let cx = Context::current();
        if cx.has_active_span() {
            cx.span().set_attributes(attributes());
        }
    }
}

/// Marks the current span failed, with why.
pub fn failed(description: impl FnOnce() -> String) {
    if enabled() {
        let cx = Context::current();
        if cx.has_active_span() {
            cx.span().set_status(Status::error(description()));
        }
    }
}

/// Records the HTTP status an upstream answered on the current span
/// (`mcp_operator.upstream.status_code`; the last request's wins: the call's own comes after
/// any connection handshake).
pub fn upstream_status(status: u16) {
    set(|| {
        vec![KeyValue::new(
            "mcp_operator.upstream.status_code",
            i64::from(status),
        )]
    });
}

/// The current span's `traceparent`/`tracestate` as HTTP headers, for a request sent inside it.
/// None when tracing is off or no span is current.
pub fn headers() -> Option<http::HeaderMap> {
    let fields = current_fields()?;
    let mut headers = http::HeaderMap::new();
    for (name, value) in [
        ("traceparent", fields.traceparent),
        ("tracestate", fields.tracestate),
    ] {
        if let Some(v) = value.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
            headers.insert(http::HeaderName::from_static(name), v);
        }
    }
    Some(headers)
}

/// The current span's trace context as a request's `_meta` carries it (SEP-414), or None when
/// tracing is off or no span is current. A request that carries it carries no other
/// `traceparent` or `tracestate` (`mcp::rpc` writes it so).
pub struct TraceMeta {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

pub fn trace_meta() -> Option<TraceMeta> {
    let fields = current_fields()?;
    Some(TraceMeta {
        traceparent: fields.traceparent?,
        tracestate: fields.tracestate,
    })
}

fn current_fields() -> Option<Fields> {
    tracing()?;
    let cx = Context::current();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut fields = Fields::default();
    TraceContextPropagator::new().inject_context(&cx, &mut fields);
    fields.traceparent.as_ref()?;
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn export_is_on_only_with_an_endpoint_and_http_protobuf() {
        assert!(!configured(&env(&[])).unwrap());
        assert!(!configured(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])).unwrap());
        assert!(configured(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])).unwrap());
        assert!(
            configured(&env(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces"
            )]))
            .unwrap()
        );
        assert!(
            !configured(&env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "true")
            ]))
            .unwrap()
        );
        assert!(
            configured(&env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            ]))
            .unwrap()
        );
        let grpc = configured(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap_err();
        assert_eq!(
            grpc.to_string(),
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: this build exports http/protobuf only"
        );
    }

    #[test]
    fn the_parent_comes_from_meta_first_then_the_header() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-11111111111111111111111111111111-2222222222222222-01",
            ),
        );
        let meta = serde_json::json!({
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "rojo=00f067aa0ba902b7",
        });
        let cx = remote_parent(&headers, Some(&meta));
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(sc.trace_state().header(), "rojo=00f067aa0ba902b7");
        let cx = remote_parent(&headers, Some(&serde_json::json!({"progressToken": 1})));
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "11111111111111111111111111111111"
        );
        let none = remote_parent(&http::HeaderMap::new(), None);
        assert!(!none.span().span_context().is_valid());
        let bad = remote_parent(
            &http::HeaderMap::new(),
            Some(&serde_json::json!({"traceparent": "not-a-trace"})),
        );
        assert!(!bad.span().span_context().is_valid());
    }

    /// Off (no init in the unit tests): no span, no header, no trace context for `_meta` (so an
    /// agent's own passes unchanged: `mcp::rpc`'s tests).
    #[test]
    fn off_builds_nothing_and_changes_nothing() {
        assert!(start_server(|| unreachable!(), &http::HeaderMap::new(), None, Vec::new).is_none());
        assert!(start_internal(|| unreachable!(), Vec::new).is_none());
        assert!(headers().is_none());
        assert!(trace_meta().is_none());
    }
}
