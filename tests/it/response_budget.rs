//! The response budget against the hostile fixture's big answers. The controller's: many
//! servers answering large bodies at once (announced JSON, chunked JSON, an event stream)
//! through one shared budget. Every read ends — with its catalogue, or refused with a budget
//! reason — and the budget's own high-water mark never passes its size. A read that alone needs
//! more than the whole budget is refused at once, with the reason and the flag to change. The
//! sidecar's: 64 agents' calls answered 8 MB each at once all get their whole answer, and the
//! sidecar process stays inside the chart's memory limit (answers too big to hold pass as they
//! arrive, so an answer larger than the whole budget passes too).

use crate::sidecar_support;
use crate::support;

use serde_json::{Value, json};
use sidecar_support::{Sidecar, grants_for, http, modern_tools_call};

use std::time::Duration;

use mcp_operator::mcp::{self, EndpointPolicy, ResponseBudget, ServerConnection};
use support::Fixtures;

const MIB: u64 = 1024 * 1024;

fn connection(url: String, budget: &ResponseBudget) -> ServerConnection {
    mcp_operator::install_crypto_provider();
    let mut conn = ServerConnection::new(url);
    conn.endpoint_policy = EndpointPolicy {
        allow_loopback: true,
    };
    // Longer than any wait for the budget here: a read must end by the budget's rules, never
    // by its deadline.
    conn.limits.connect_timeout = Duration::from_secs(60);
    conn.limits.max_response_bytes = 16 * MIB;
    conn.budget = Some(budget.clone());
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_big_answers_at_once_never_pass_the_budget_and_every_read_ends() {
    let server = Fixtures::load().hostile_server();
    // 6 MB in one announced JSON page (bulk), 8 MiB announced (huge), 8 MiB chunked JSON and
    // 8 MiB in an event stream, neither announcing its length.
    let bulk = format!(
        "{}/bulk/mcp?tools=20&pages=1&schema_bytes=6000000",
        server.url
    );
    let urls: Vec<String> = (0..12)
        .map(|i| match i % 4 {
            0 => bulk.clone(),
            1 => format!("{}/huge/mcp", server.url),
            2 => format!("{}/huge-chunked/mcp", server.url),
            _ => format!("{}/huge-sse/mcp", server.url),
        })
        .collect();
    // Room for about three big answers at a time, a third of what the twelve need at once.
    let budget = ResponseBudget::new(30 * MIB);
    let reads: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let conn = connection(url, &budget);
            tokio::spawn(async move {
                // The report (and its share of the budget) is dropped here, as the controller
                // drops it once the catalogue is built.
                match mcp::read_server(&conn).await {
                    Ok(report) => Ok(report.tools.len()),
                    Err(failure) => Err((failure.error.reason(), failure.error.to_string())),
                }
            })
        })
        .collect();
    let (mut read, mut busy) = (0, 0);
    for task in reads {
        let ended = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("every read ends")
            .unwrap();
        match ended {
            Ok(tools) => {
                assert!(tools >= 1);
                read += 1;
            }
            Err((reason, message)) => {
                assert_eq!(reason, "ResponseBudgetBusy", "{message}");
                assert!(message.contains("gave its share back"), "{message}");
                busy += 1;
            }
        }
    }
    println!(
        "12 big answers through a 30 MiB budget: {read} read, {busy} gave way; at most {} bytes held at once",
        budget.high_water()
    );
    assert!(read >= 1, "the budget lets at least one big answer through");
    assert!(
        budget.high_water() <= budget.total(),
        "high water {} over the budget {}",
        budget.high_water(),
        budget.total()
    );
    assert!(
        budget.high_water() >= 12 * MIB,
        "several big answers were held at once ({} bytes at most)",
        budget.high_water()
    );
    assert_eq!(budget.in_use(), 0, "every read gave its share back");
}

#[tokio::test]
async fn a_read_larger_than_the_whole_budget_is_refused_at_once() {
    let server = Fixtures::load().hostile_server();
    let budget = ResponseBudget::new(4 * MIB);
    for mode in ["huge", "huge-chunked", "huge-sse"] {
        let conn = connection(format!("{}/{mode}/mcp", server.url), &budget);
        let failure = tokio::time::timeout(Duration::from_secs(30), mcp::read_server(&conn))
            .await
            .expect("refused, not left waiting")
            .unwrap_err();
        assert_eq!(failure.error.reason(), "ResponseBudgetExceeded", "{mode}");
        let message = failure.error.to_string();
        assert!(message.contains("4194304 bytes"), "{message}");
        assert!(message.contains("--response-budget"), "{message}");
        assert_eq!(
            budget.in_use(),
            0,
            "{mode}: the refused read gave back what it held"
        );
    }
    // Small answers still fit.
    let conn = connection(format!("{}/ok/mcp", server.url), &budget);
    let report = mcp::read_server(&conn).await.unwrap();
    assert_eq!(report.tools.len(), 6);
    assert!(budget.in_use() > 0, "the report holds its pages");
    drop(report);
    assert_eq!(budget.in_use(), 0);
}

/// The chart's memory limit of the sidecar container (values.yaml `sidecar.resources`, and the
/// injection's default).
const SIDECAR_MEMORY_LIMIT: u64 = 128 * MIB;

async fn big_call(url: &str, id: u64, bytes: u64) -> Value {
    let arguments = json!({"bytes": bytes});
    let response = modern_tools_call(url, id, "big__alpha", arguments, json!({})).await;
    let body = response.bytes().await.expect("a body");
    serde_json::from_slice(&body).expect("a JSON answer")
}

/// The peak resident memory of a process, from /proc (VmHWM).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process runs");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kb * 1024
}

#[tokio::test(flavor = "multi_thread")]
async fn sixty_four_big_answers_at_once_pass_the_sidecar_inside_its_memory_limit() {
    sixty_four_big_answers("big-answers").await;
}

/// The same answers as events on the call's stream (the SDK servers' default): passed on as the
/// event's bytes, like a JSON body, not parsed into values and written out again.
#[tokio::test(flavor = "multi_thread")]
async fn sixty_four_big_answers_as_events_pass_the_sidecar_inside_its_memory_limit() {
    sixty_four_big_answers("big-answers-sse").await;
}

async fn sixty_four_big_answers(mode: &str) {
    let server = Fixtures::load().hostile_server();
    let url = format!("{}/{mode}/mcp", server.url);
    let grants = grants_for(
        "big",
        "big",
        &url,
        &["alpha"],
        json!({"maxResponseBytes": 16 * MIB, "callTimeoutMs": 300_000}),
        None,
    )
    .await;
    // The default --response-budget (64 MiB): every answer passes as it arrives, a chunk at a time.
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let pid = sidecar.child.id();
    let idle = peak_rss(pid);
    let calls: Vec<_> = (0..64)
        .map(|id| {
            let url = sidecar.url.clone();
            tokio::spawn(async move { big_call(&url, id, 8_000_000).await })
        })
        .collect();
    for (id, call) in calls.into_iter().enumerate() {
        let answer = tokio::time::timeout(Duration::from_secs(300), call)
            .await
            .expect("every call ends")
            .unwrap();
        assert_eq!(answer["id"], id as u64, "the agent's own id");
        let result = &answer["result"];
        assert_eq!(
            result["resultType"],
            "complete",
            "{}",
            &answer.to_string()[..200.min(answer.to_string().len())]
        );
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert_eq!(
            text.len(),
            8_000_000,
            "the whole answer, not: {}",
            &text[..300.min(text.len())]
        );
    }
    let peak = peak_rss(pid);
    eprintln!(
        "sidecar RSS: idle {} MiB, peak {} MiB",
        idle / MIB,
        peak / MIB
    );
    // What the budget guarantees: over the sidecar's own footprint before the load, the answers
    // held at once (the budget) plus buffers that are not answers (the HTTP connections' read
    // and write buffers, the agents' requests, the allocator's slack).
    // What the sidecar itself reports: the budget, and a high-water mark within it that saw
    // several answers at once.
    let metrics = sidecar.metrics().await;
    let gauge = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("mcp_sidecar_{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics:\n{metrics}"))
    };
    let budget = mcp_operator::sidecar::DEFAULT_RESPONSE_BUDGET;
    assert_eq!(gauge("response_budget_bytes"), budget);
    let high = gauge("response_budget_high_water_bytes");
    eprintln!("response budget high water: {high} bytes");
    // Each answer passes as it arrives, holding a chunk at a time: many at once, none whole.
    assert!((MIB..=budget).contains(&high), "{high}");
    let growth = peak.saturating_sub(idle);
    let overhead = 32 * MIB;
    assert!(
        growth <= mcp_operator::sidecar::DEFAULT_RESPONSE_BUDGET + overhead,
        "the sidecar grew by {} MiB under the load, more than the budget (64 MiB) and {} MiB",
        growth / MIB,
        overhead / MIB
    );
    // The chart's limit is the release image's: a debug build's own footprint is larger.
    if !cfg!(debug_assertions) {
        assert!(
            peak <= SIDECAR_MEMORY_LIMIT,
            "the sidecar's peak RSS {} MiB passed the chart's limit of {} MiB",
            peak / MIB,
            SIDECAR_MEMORY_LIMIT / MIB
        );
    }
    let audit = sidecar.audit();
    assert_eq!(
        audit.iter().filter(|a| a["outcome"] == "ok").count(),
        64,
        "every call audited ok"
    );
}

/// The budget bounds what is held at once, not an answer's size: an answer past it passes as it
/// arrives, holding a chunk at a time ([`crate::sidecar_streaming`] has its faults).
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_larger_than_the_sidecars_whole_budget_passes_as_it_arrives() {
    let server = Fixtures::load().hostile_server();
    let url = format!("{}/big-answers/mcp", server.url);
    let grants = grants_for(
        "big",
        "big",
        &url,
        &["alpha"],
        json!({"maxResponseBytes": 16 * MIB}),
        None,
    )
    .await;
    const BUDGET: u64 = 2 * MIB;
    let sidecar = Sidecar::start_with(Some(&grants), &["--response-budget", &BUDGET.to_string()]);
    sidecar.wait_ready().await;
    let answer = big_call(&sidecar.url, 1, 3_000_000).await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text.len(), 3_000_000, "the whole answer");
    let metrics = sidecar.metrics().await;
    let high: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mcp_sidecar_response_budget_high_water_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the high-water mark");
    assert!(high <= BUDGET, "held at most the budget at once: {high}");
    // A small answer still passes.
    let answer = big_call(&sidecar.url, 2, 1000).await;
    assert_eq!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .map(str::len),
        Some(1000),
        "{answer}"
    );
}

async fn initialize(url: &str) -> reqwest::Response {
    http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .expect("the sidecar answers")
}

/// A client on loopback that announces a body of `announced` bytes and sends all but the last
/// ten: the sidecar holds what arrived while it waits for the rest.
async fn stalled_body(url: &str, announced: usize) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt as _;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {announced}\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&vec![b' '; announced - 10]).await.unwrap();
    socket.flush().await.unwrap();
    socket
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_request_bodies_held_at_once_stay_within_the_request_budget() {
    const BUDGET: u64 = 2 * MIB;
    let sidecar = Sidecar::start_with(
        None,
        &["--request-budget=2097152", "--max-request-bytes=1048576"],
    );
    // Two agents' bodies at the bound, their last bytes not sent: they fill the budget.
    let stalled = vec![
        stalled_body(&sidecar.url, MIB as usize).await,
        stalled_body(&sidecar.url, MIB as usize).await,
    ];
    // A third request finds no room: it waits its turn, then (no room came within the wait) is
    // refused with what to do, naming the flag.
    let refused = initialize(&sidecar.url).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("2097152 bytes of --request-budget"),
        "{body}"
    );
    // The agents that stalled go away: what they held is given back, and requests pass again.
    drop(stalled);
    let answered = initialize(&sidecar.url).await;
    assert_eq!(answered.status(), 200);
    let metrics = sidecar.metrics().await;
    assert!(
        metrics.contains("mcp_sidecar_agent_requests_refused_total{reason=\"budget_busy\"} 1"),
        "{metrics}"
    );
    let high: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mcp_sidecar_request_budget_high_water_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the high-water metric");
    assert!(
        (2 * (MIB - 10)..=BUDGET).contains(&high),
        "held at most the budget, and both stalled bodies: {high}"
    );
}

#[test]
fn a_request_bound_over_the_request_budget_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .args([
            "sidecar",
            "--grants-file=/nonexistent/grants.json",
            "--credentials-dir=/nonexistent",
            "--request-budget=1048576",
            "--max-request-bytes=2097152",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-request-bytes=2097152 is over --request-budget=1048576"),
        "{stderr}"
    );
}
