//! The load client of `bench/sidecar.sh`: one MCP agent (legacy session or modern stateless)
//! calling one tool as fast as it can from C concurrent tasks over TCP_NODELAY connections,
//! printing one JSON line of latency percentiles, throughput and how many calls it made (the
//! warm-up included, for CPU per call). Measures; asserts nothing about time.
//!
//!   sidecar_load URL legacy|modern TOOL CONCURRENCY CALLS [ok|refused]
//!
//! TOOL `call_tool:SERVER/NAME` calls NAME on a deferred SERVER through the discovery tool
//! `call_tool`; `read:URI` sends `resources/read` of URI instead of a call, `prompt:NAME`
//! `prompts/get` of NAME; `refused` expects every answer to be a refusal (an approval-gated tool
//! called by an agent that cannot be asked).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
/// Calls made one at a time before the measured ones.
const WARM_UP: u64 = 200;

#[derive(Clone)]
struct Agent {
    http: reqwest::Client,
    url: String,
    modern: bool,
    session: Option<String>,
    tool: String,
    /// Through discovery: (server, tool on it).
    via_call_tool: Option<(String, String)>,
    /// Not a call: `resources/read` or `prompts/get`, and the params' key for TOOL's rest.
    other: Option<(&'static str, &'static str, String)>,
    expect_refused: bool,
}

impl Agent {
    async fn post(
        &self,
        body: Value,
        method: &str,
        name: Option<&str>,
    ) -> (reqwest::header::HeaderMap, Vec<u8>) {
        let mut r = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if self.modern {
            r = r
                .header("mcp-protocol-version", MODERN)
                .header("mcp-method", method);
            if let Some(n) = name {
                r = r.header("mcp-name", n);
            }
        } else {
            r = r.header("mcp-protocol-version", "2025-11-25");
        }
        if let Some(s) = &self.session {
            r = r.header("mcp-session-id", s);
        }
        let response = r
            .body(body.to_string())
            .send()
            .await
            .expect("the server answers");
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("a body").to_vec();
        (headers, bytes)
    }

    async fn call(&self, id: u64) {
        if let Some((method, key, target)) = &self.other {
            return self.read_or_get(id, method, key, target).await;
        }
        let mut params = match &self.via_call_tool {
            None => json!({"name": self.tool, "arguments": {"x": "bench"}}),
            Some((server, tool)) => json!({"name": "call_tool", "arguments": {
                "server": server, "tool": tool, "arguments": {"x": "bench"}}}),
        };
        self.modern_meta(&mut params);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let name = match &self.via_call_tool {
            None => self.tool.clone(),
            Some(_) => "call_tool".to_string(),
        };
        let (_, bytes) = self.post(body, "tools/call", Some(&name)).await;
        let text = String::from_utf8_lossy(&bytes);
        // A refusal is a tool error, or (a modern agent that cannot be asked) JSON-RPC -32021.
        let refused = text.contains("\"isError\":true") || text.contains("\"code\":-32021");
        assert!(
            (text.contains("\"result\"") || refused) && refused == self.expect_refused,
            "the call did not end as expected: {text}"
        );
    }
}

impl Agent {
    fn modern_meta(&self, params: &mut Value) {
        if self.modern {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            });
        }
    }

    /// One `resources/read` (`key` uri) or `prompts/get` (`key` name) of `target`.
    async fn read_or_get(&self, id: u64, method: &str, key: &str, target: &str) {
        let mut params = json!({ key: target });
        self.modern_meta(&mut params);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let name = (key == "name").then_some(target);
        let (_, bytes) = self.post(body, method, name).await;
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("\"contents\"") || text.contains("\"messages\""),
            "{method} did not answer: {text}"
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() {
    mcp_operator::install_crypto_provider();
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    // `cargo test --all-targets` runs bench targets with no arguments: nothing to measure then.
    let [url, era, tool, concurrency, calls, ..] = &args[..] else {
        eprintln!(
            "usage: sidecar_load URL legacy|modern TOOL CONCURRENCY CALLS (bench/sidecar.sh runs it)"
        );
        return;
    };
    let concurrency: usize = concurrency.parse().unwrap();
    let calls: usize = calls.parse().unwrap();
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(concurrency * 2)
        .build()
        .unwrap();
    let via_call_tool = tool
        .strip_prefix("call_tool:")
        .and_then(|t| t.split_once('/'))
        .map(|(s, t)| (s.to_string(), t.to_string()));
    let other = if let Some(uri) = tool.strip_prefix("read:") {
        Some(("resources/read", "uri", uri.to_string()))
    } else {
        tool.strip_prefix("prompt:")
            .map(|name| ("prompts/get", "name", name.to_string()))
    };
    let mut agent = Agent {
        http,
        url: url.clone(),
        modern: era == "modern",
        session: None,
        tool: tool.clone(),
        via_call_tool,
        other,
        expect_refused: args.get(5).is_some_and(|e| e == "refused"),
    };
    if !agent.modern {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        let (headers, _) = agent.post(init, "initialize", None).await;
        agent.session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        agent
            .post(
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                "notifications/initialized",
                None,
            )
            .await;
    }
    for i in 0..WARM_UP {
        agent.call(i).await;
    }
    let per_task = calls / concurrency;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_task);
            for i in 0..per_task {
                let begin = Instant::now();
                agent.call(1_000 + (t * per_task + i) as u64).await;
                latencies.push(begin.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort();
    println!(
        "{}",
        json!({
            "p50_us": percentile(&all, 0.50), "p95_us": percentile(&all, 0.95), "p99_us": percentile(&all, 0.99),
            "calls_per_s": all.len() as f64 / elapsed.as_secs_f64(), "calls": all.len(),
            "calls_made": all.len() as u64 + WARM_UP,
        })
    );
}
