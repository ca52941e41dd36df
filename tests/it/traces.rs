//! One trace across agent → sidecar → upstream, in a real OpenTelemetry Collector: the
//! collector built from its Go modules (tests/fixtures/otelcol.sh: OTLP receiver, file
//! exporter), the real sidecar exporting to it (OTEL_EXPORTER_OTLP_ENDPOINT), the Python SDK
//! fixture server recording the trace context each request carried. The agent's span is made
//! up here (a traceparent of our own), as an instrumented agent would send it. And the
//! controller's probe spans, from the controller process on the e2e control plane.

use crate::e2e;
use crate::operator::{Operator, apply_server, server_manifest, wait_condition};
use crate::sidecar_support;
use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sidecar_support::{grants_for, http, json_of, swap_grants};
use support::Fixtures;

/// The agent's trace and span, as an instrumented agent would have them.
const AGENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";
/// A second agent trace, sent as the HTTP header only.
const HEADER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HEADER_SPAN: &str = "b7ad6b7169203331";

struct Collector {
    child: Child,
    endpoint: String,
    spans: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    fn start() -> Collector {
        let built = Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/otelcol.sh"
            ))
            .arg("build")
            .output()
            .expect("otelcol.sh runs");
        assert!(
            built.status.success(),
            "the collector builds: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let bin = String::from_utf8(built.stdout).unwrap().trim().to_string();
        let dir = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let spans = dir.path().join("spans.json");
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n",
                spans.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("collector.log")).unwrap();
        let child = Command::new(bin)
            .arg("--config")
            .arg(format!("file:{}", config.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the collector starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the collector did not listen: {}",
                std::fs::read_to_string(dir.path().join("collector.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Collector {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            spans,
            _dir: dir,
        }
    }

    /// Every span the collector wrote, flattened: (service.name, span).
    fn spans(&self) -> Vec<(String, Value)> {
        self.spans_with_resource()
            .into_iter()
            .map(|(resource, span)| {
                (
                    attribute(&resource, "service.name").unwrap_or_default(),
                    span,
                )
            })
            .collect()
    }

    /// Every span the collector wrote, with the resource it came from.
    fn spans_with_resource(&self) -> Vec<(Value, Value)> {
        let text = std::fs::read_to_string(&self.spans).unwrap_or_default();
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let doc: Value =
                serde_json::from_str(line).expect("the file exporter writes JSON lines");
            for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        out.push((rs["resource"].clone(), span.clone()));
                    }
                }
            }
        }
        out
    }

    /// Waits until a span named `name` whose attribute `key` is `value` is in the file;
    /// returns it with its resource.
    async fn wait_named(&self, name: &str, key: &str, value: &str) -> (Value, Value) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(found) = self
                .spans_with_resource()
                .into_iter()
                .find(|(_, s)| s["name"] == name && attribute(s, key).as_deref() == Some(value))
            {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no span {name} with {key}={value} reached the collector; it has {:?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until a span of `trace` whose name starts with `name` is in the file.
    async fn wait_span(&self, trace: &str, name: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((_, span)) = self.spans().into_iter().find(|(_, s)| {
                s["traceId"] == trace && s["name"].as_str().is_some_and(|n| n.starts_with(name))
            }) {
                return span;
            }
            assert!(
                Instant::now() < deadline,
                "no span {name} of trace {trace} reached the collector; it has {:?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An attribute's value as text (string, int or bool), of a span or a resource.
fn attribute(of: &Value, key: &str) -> Option<String> {
    let kv = of["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)?;
    let v = &kv["value"];
    v["stringValue"]
        .as_str()
        .map(str::to_string)
        .or_else(|| v["intValue"].as_str().map(str::to_string))
        .or_else(|| v["intValue"].as_i64().map(|i| i.to_string()))
        .or_else(|| v["boolValue"].as_bool().map(|b| b.to_string()))
}

/// A sidecar exporting to `collector`, on a kubelet-style grants directory.
struct TracedSidecar {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for TracedSidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TracedSidecar {
    fn start(grants: &Value, collector: &Collector) -> TracedSidecar {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("grants");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(dir.path().join("creds/secrets")).unwrap();
        let mut generation = 0;
        swap_grants(&root, &mut generation, &serde_json::to_vec(grants).unwrap());
        let port = support::free_port();
        let log = std::fs::File::create(dir.path().join("sidecar.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
            .args(["--log-format", "json", "sidecar", "--grants-file"])
            .arg(root.join("grants.json"))
            .arg("--credentials-dir")
            .arg(dir.path().join("creds"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--allow-loopback"])
            .args(["--agent", "test-agent"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_SERVICE_NAME", "sidecar-under-test")
            // Export each batch within a tenth of a second: the test reads the file.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the sidecar starts");
        TracedSidecar {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sidecar.log")).unwrap_or_default()
    }

    /// Initializes a legacy session once the sidecar serves its tools; returns its id.
    async fn session(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(response) = post(&self.url, None, &[], initialize()).await {
                let session = response.headers()["mcp-session-id"]
                    .to_str()
                    .unwrap()
                    .to_string();
                let tools = json_of(
                    post(
                        &self.url,
                        Some(&session),
                        &[],
                        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
                    )
                    .await
                    .unwrap(),
                )
                .await;
                if tools["result"]["tools"]
                    .as_array()
                    .is_some_and(|t| !t.is_empty())
                {
                    return session;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the sidecar did not serve its tools: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "traced-agent", "version": "1"}}})
}

async fn post(
    url: &str,
    session: Option<&str>,
    headers: &[(&str, &str)],
    body: Value,
) -> Result<reqwest::Response, reqwest::Error> {
    let mut request = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.send().await
}

fn parent_of(traceparent: &str) -> (&str, &str) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "a W3C traceparent: {traceparent}");
    (parts[1], parts[2])
}

async fn upstream_traces(server: &str) -> Value {
    let base = server.trim_end_matches("/mcp");
    json_of(
        http()
            .get(format!("{base}/control/traces"))
            .send()
            .await
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_trace_spans_the_agent_the_sidecar_and_the_upstream() {
    let collector = Collector::start();
    let server = Fixtures::load().sdk_server(&[]);
    let grants = grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await;
    let sidecar = TracedSidecar::start(&grants, &collector);
    let session = sidecar.session().await;

    // 1. The agent's span in params._meta (SEP-414), on a granted tool.
    let traceparent = format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01");
    let answer = json_of(
        post(
            &sidecar.url,
            Some(&session),
            &[],
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "fs__read_file", "arguments": {"path": "/a"},
                "_meta": {"traceparent": traceparent, "tracestate": "agent=1"}}}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    let span = collector.wait_span(AGENT_TRACE, "tools/call").await;
    assert_eq!(span["name"], "tools/call fs__read_file");
    assert_eq!(
        span["parentSpanId"], AGENT_SPAN,
        "the sidecar's span is the agent's child"
    );
    assert_eq!(span["kind"], 2, "SERVER");
    for (key, want) in [
        ("mcp_operator.agent", "test-agent"),
        ("mcp_operator.server", "files"),
        ("gen_ai.tool.name", "fs__read_file"),
        ("mcp_operator.tool.raw", "read_file"),
        ("mcp.method.name", "tools/call"),
        ("mcp_operator.decision", "allowed"),
        ("mcp_operator.decision.reason", "allowed"),
        ("mcp_operator.outcome", "ok"),
        ("mcp_operator.upstream.status_code", "200"),
    ] {
        assert_eq!(
            attribute(&span, key).as_deref(),
            Some(want),
            "{key} in {span}"
        );
    }
    let sidecar_span = span["spanId"].as_str().unwrap().to_string();
    let seen = upstream_traces(&server.url).await;
    let meta = seen["meta"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool"] == "read_file")
        .unwrap_or_else(|| panic!("the upstream got the call: {seen}"));
    assert_eq!(
        parent_of(
            meta["traceparent"]
                .as_str()
                .expect("a traceparent in _meta")
        ),
        (AGENT_TRACE, sidecar_span.as_str()),
        "the upstream's _meta names the sidecar's span as parent: {seen}"
    );
    assert!(
        seen["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| parent_of(h.as_str().unwrap()) == (AGENT_TRACE, sidecar_span.as_str())),
        "the upstream's HTTP traceparent names the sidecar's span as parent: {seen}"
    );

    // 2. The agent's span as the HTTP header only, on a tool that is not granted: refused,
    // never sent, still traced.
    let header = format!("00-{HEADER_TRACE}-{HEADER_SPAN}-01");
    let answer = json_of(
        post(
            &sidecar.url,
            Some(&session),
            &[("traceparent", &header)],
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
                "name": "fs__delete_file", "arguments": {"path": "/a"}}}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let refused = collector.wait_span(HEADER_TRACE, "tools/call").await;
    assert_eq!(refused["parentSpanId"], HEADER_SPAN);
    for (key, want) in [
        ("mcp_operator.decision", "refused"),
        ("mcp_operator.decision.reason", "not_granted"),
        ("mcp_operator.outcome", "refused"),
    ] {
        assert_eq!(
            attribute(&refused, key).as_deref(),
            Some(want),
            "{key} in {refused}"
        );
    }
    assert_eq!(
        attribute(&refused, "mcp_operator.upstream.status_code"),
        None,
        "a refused call reaches no upstream"
    );
    let calls = upstream_traces(&server.url).await["meta"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(calls, 1, "only the granted call reached the server");

    // 3. Every request is a span, with the service named as OTEL_SERVICE_NAME says.
    let spans = collector.spans();
    assert!(
        spans
            .iter()
            .all(|(service, _)| service == "sidecar-under-test"),
        "{spans:?}"
    );
    assert!(
        spans.iter().any(|(_, s)| s["name"] == "initialize"),
        "{spans:?}"
    );
    assert!(
        spans.iter().any(|(_, s)| s["name"] == "tools/list"
            && attribute(s, "mcp_operator.agent").as_deref() == Some("test-agent")),
        "{spans:?}"
    );
}

/// Without an endpoint, the sidecar exports nothing and passes the agent's `_meta` unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_the_agents_trace_context_passes_unchanged() {
    let server = Fixtures::load().sdk_server(&[]);
    let grants = grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await;
    let sidecar = sidecar_support::Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let (agent, _) =
        sidecar_support::RawLegacyAgent::initialize(&sidecar.url, "2025-11-25", json!({})).await;
    let traceparent = format!("00-{AGENT_TRACE}-{AGENT_SPAN}-01");
    let answer = json_of(
        agent
            .post(
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "fs__read_file", "arguments": {"path": "/a"},
                "_meta": {"traceparent": traceparent}}}),
            )
            .await,
    )
    .await;
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    let seen = upstream_traces(&server.url).await;
    assert_eq!(
        seen["meta"][0]["traceparent"],
        traceparent.as_str(),
        "{seen}"
    );
    assert_eq!(
        seen["headers"],
        json!([]),
        "no span, no header of the sidecar's: {seen}"
    );
}

/// The controller, exporting as the chart's `telemetry` values make it (the OTEL_* environment,
/// the pod's resource attributes): each probe is a span `probe <namespace>/<name>` with its
/// result, and the server's requests of that probe are its children.
#[tokio::test(flavor = "multi_thread")]
async fn the_controllers_probes_are_spans_with_their_result_and_the_servers_requests_as_children() {
    let collector = Collector::start();
    let (client, ns) = e2e::setup("probe-traces").await;
    let server = Fixtures::load().sdk_server(&[]);
    let attributes = format!("k8s.namespace.name={},k8s.pod.name=op-traced", ns.name());
    let _op = Operator::start_with_env(
        &e2e::kubeconfig_path().await,
        ns.name(),
        "op-traced",
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", &attributes),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let api: kube::Api<mcp_operator::api::mcp_server::McpServer> =
        kube::Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest("traced", &server.url, json!({})),
    )
    .await;
    let gone = format!("http://127.0.0.1:{}/mcp", support::free_port());
    apply_server(
        &client,
        ns.name(),
        server_manifest("gone", &gone, json!({})),
    )
    .await;
    wait_condition(
        &api,
        "traced",
        "Ready",
        "True",
        None,
        Duration::from_secs(30),
    )
    .await;
    let down = wait_condition(
        &api,
        "gone",
        "Ready",
        "False",
        None,
        Duration::from_secs(30),
    )
    .await;
    let reason = e2e::condition(&down, "Reachable").unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();

    // A probe that read the server: its result, its tools, and who made it.
    let name = format!("probe {}/traced", ns.name());
    let (resource, span) = collector
        .wait_named(&name, "mcp_operator.probe.result", "ready")
        .await;
    assert_eq!(span["kind"], 1, "INTERNAL: {span}");
    for (key, want) in [
        ("mcp_operator.namespace", ns.name()),
        ("mcp_operator.server", "traced"),
        ("mcp_operator.probe.tools", "4"),
    ] {
        assert_eq!(
            attribute(&span, key).as_deref(),
            Some(want),
            "{key} in {span}"
        );
    }
    for (key, want) in [
        ("service.name", "mcp-operator-controller"),
        ("k8s.pod.name", "op-traced"),
        ("k8s.namespace.name", ns.name()),
    ] {
        assert_eq!(
            attribute(&resource, key).as_deref(),
            Some(want),
            "{key} in {resource}"
        );
    }
    // The server heard whose child its work was: the probe's span.
    let probe = (
        span["traceId"].as_str().unwrap().to_string(),
        span["spanId"].as_str().unwrap().to_string(),
    );
    let seen = upstream_traces(&server.url).await;
    assert!(
        seen["headers"].as_array().unwrap().iter().any(|h| {
            let (trace, parent) = parent_of(h.as_str().unwrap());
            (trace, parent) == (probe.0.as_str(), probe.1.as_str())
        }),
        "a request of the probe names its span as parent: {seen} / {probe:?}"
    );

    // A probe that failed: the reason the condition gives.
    let name = format!("probe {}/gone", ns.name());
    let (_, failed) = collector
        .wait_named(&name, "mcp_operator.probe.result", "failed")
        .await;
    assert_eq!(
        attribute(&failed, "mcp_operator.probe.reason").as_deref(),
        Some(reason.as_str()),
        "{failed}"
    );
}
