//! Answers too big to hold pass the sidecar as they arrive (loopback, the hostile fixture's
//! `streamed-answers` modes): the agent reads the start of an answer while the server still
//! holds the rest, from a JSON body or from the event on the call's stream, and gets the whole
//! answer under its own id. An answer that goes wrong on the way — invalid JSON at its end, a
//! server asking for input, more than maxResponseBytes, a server that hangs up or never ends —
//! is broken off: the agent never holds a complete answer the server did not give, the audit
//! line says how the call ended, and the next call works.

use crate::sidecar_support;
use crate::support;

use serde_json::{Value, json};
use sidecar_support::{Sidecar, grants_for, http, modern_tools_call};
use std::time::Duration;
use support::{Fixtures, Server};

const MIB: u64 = 1024 * 1024;
const SIZE: usize = 4_000_000;

struct Setup {
    server: Server,
    mode: &'static str,
    sidecar: Sidecar,
}

async fn setup(mode: &'static str, call_timeout_ms: u64) -> Setup {
    let server = Fixtures::load().hostile_server();
    let url = format!("{}/{mode}/mcp", server.url);
    let grants = grants_for(
        "big",
        "big",
        &url,
        &["alpha"],
        json!({"maxResponseBytes": 10 * MIB, "callTimeoutMs": call_timeout_ms}),
        None,
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    Setup {
        server,
        mode,
        sidecar,
    }
}

impl Setup {
    /// Starts a call (as a modern agent that wants log lines: the `-sse` mode's log line turns
    /// the sidecar's answer into an event stream).
    async fn call(&self, id: u64, then: &str) -> reqwest::Response {
        let arguments = json!({"bytes": SIZE, "then": then});
        let meta = json!({"_meta": {"io.modelcontextprotocol/logLevel": "debug"}});
        modern_tools_call(&self.sidecar.url, id, "big__alpha", arguments, meta).await
    }

    async fn release(&self) {
        let response = http()
            .post(format!("{}/{}/release", self.server.url, self.mode))
            .send()
            .await
            .expect("the fixture answers");
        assert_eq!(response.status(), 200);
    }

    fn audited(&self, outcome: &str) -> usize {
        self.sidecar
            .audit()
            .iter()
            .filter(|a| a["tool"] == "big__alpha" && a["outcome"] == outcome)
            .count()
    }
}

/// Reads the body until at least `bytes` came (or it ends); what came, and whether it ended
/// cleanly (None) or how it broke off.
async fn read_some(response: &mut reqwest::Response, bytes: usize) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    while got.len() < bytes {
        match tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .expect("the sidecar goes on sending")
        {
            Ok(Some(chunk)) => got.extend_from_slice(&chunk),
            Ok(None) => return (got, true),
            Err(_) => return (got, false),
        }
    }
    (got, true)
}

/// The agent's answer in what came: the JSON body, or the `message` event that answers `id`
/// on the event stream. None when no complete answer is there.
fn answer_in(body: &[u8], id: u64) -> Option<Value> {
    if body.first() == Some(&b'{') {
        return serde_json::from_slice(body).ok();
    }
    let text = String::from_utf8_lossy(body);
    // Only a finished event counts (an event's blank line ends it).
    text.split("\n\n")
        .filter(|e| text.contains(&format!("{e}\n\n")))
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|message| message["id"] == id)
}

async fn passes_as_it_arrives(mode: &'static str) {
    let setup = setup(mode, 60_000).await;
    let mut response = setup.call(1, "finish").await;
    // The server holds the second half until released: a sidecar that read answers whole would
    // send nothing yet.
    let (first, _) = read_some(&mut response, SIZE / 4).await;
    assert!(
        first.len() >= SIZE / 4,
        "the start of the answer reached the agent while the server held the rest ({} bytes)",
        first.len()
    );
    assert_eq!(setup.audited("ok"), 0, "the call has not ended yet");
    setup.release().await;
    let (rest, ended) = read_some(&mut response, usize::MAX).await;
    assert!(ended, "the body ends cleanly");
    let body = [first, rest].concat();
    let answer = answer_in(&body, 1).expect("one whole answer");
    assert_eq!(answer["jsonrpc"], "2.0");
    assert_eq!(answer["result"]["resultType"], "complete");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(text.len(), SIZE, "the whole text");
    if mode.ends_with("-sse") {
        let text = String::from_utf8_lossy(&body[..200]);
        assert!(
            text.starts_with("event: message") && text.contains("notifications/message"),
            "the log line went first, on the agent's stream: {text}"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(setup.audited("ok"), 1, "audited once, when it ended");
    let metrics = setup.sidecar.metrics().await;
    let high: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mcp_sidecar_response_budget_high_water_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the high-water mark");
    assert!(
        high < (SIZE / 2) as u64,
        "the sidecar held a part of the answer at a time, not all of it: {high} bytes"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_big_answer_reaches_the_agent_while_the_server_still_sends_it() {
    passes_as_it_arrives("streamed-answers").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_big_answer_on_the_calls_event_stream_reaches_the_agent_as_it_arrives() {
    passes_as_it_arrives("streamed-answers-sse").await;
}

async fn broken_off(mode: &'static str) {
    let setup = setup(mode, 3_000).await;
    let cases: &[(&str, &str)] = &[
        ("garbage", "outcome_unknown"),
        ("input_required", "error"),
        ("too_long", "outcome_unknown"),
        ("close", "outcome_unknown"),
        ("hang", "timeout"),
    ];
    for (n, (then, outcome)) in cases.iter().enumerate() {
        let id = 10 + n as u64;
        let before = setup.audited(outcome);
        let mut response = setup.call(id, then).await;
        let (first, _) = read_some(&mut response, SIZE / 4).await;
        assert!(first.len() >= SIZE / 4, "{then}: the start came");
        if !matches!(*then, "close" | "hang") {
            setup.release().await;
        }
        let (rest, _) = read_some(&mut response, usize::MAX).await;
        let body = [first, rest].concat();
        assert!(
            answer_in(&body, id).is_none(),
            "{then}: the agent holds no complete answer ({} bytes came)",
            body.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            setup.audited(outcome),
            before + 1,
            "{then}: audited {outcome}: {:?}",
            setup.sidecar.audit().last()
        );
    }
    let log = setup.sidecar.log_text();
    for why in [
        "not valid JSON",
        "asked for more input",
        "exceeded the limit",
        "did not end within",
    ] {
        assert!(
            log.contains(why),
            "the sidecar's log says why an answer was broken off ({why})"
        );
    }
    // And the next call works.
    let mut response = setup.call(99, "finish").await;
    let (first, _) = read_some(&mut response, SIZE / 4).await;
    setup.release().await;
    let (rest, _) = read_some(&mut response, usize::MAX).await;
    let answer = answer_in(&[first, rest].concat(), 99).expect("the next call's whole answer");
    assert_eq!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .len(),
        SIZE
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_big_answer_that_goes_wrong_on_the_way_is_broken_off_and_says_why() {
    broken_off("streamed-answers").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_big_event_that_goes_wrong_on_the_way_is_broken_off_and_says_why() {
    broken_off("streamed-answers-sse").await;
}
