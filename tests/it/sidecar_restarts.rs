//! An agent keeps calling through a sidecar that is killed (SIGKILL, as an OOM kill or a failed
//! liveness probe ends it) and started again on the same directories, as the kubelet restarts a
//! native sidecar: its legacy session is still its session, every call after the restart
//! succeeds without the agent reconnecting, and the upstream ran no call twice. The official
//! TypeScript SDK client (legacy era), the official Python SDK client (legacy and modern
//! eras) and a modern-era Node agent (tests/fixtures/modern_client.mjs, the one the real-node
//! fault suite runs in a pod) are the agents; the SDK fixture server counts what ran.
//!
//! A call in flight at the kill: the TypeScript client gets `fetch failed` for it at once and
//! carries on. The Python client (mcp 2.x as pinned) is not killed mid-call here: a POST whose
//! connection drops raises httpx's ReadError out of its transport's task group, which ends the
//! whole client whatever the server does afterwards.
//!
//! How long the agent saw errors is printed (`restart figures:`), never asserted as a time.

use serde_json::{Value, json};

use crate::sidecar_support::{Sidecar, agent_with, grants_for, http, json_of};
use crate::support::Fixtures;

/// Calls `fs__write_file` (not idempotent: the sidecar never resends it) once every 200 ms, the
/// sidecar killed and restarted after the fifth answer. `upstream_sleep`: each call takes that
/// long upstream, so the kill lands while one is in flight.
fn loop_steps(count: u64, upstream_sleep: f64) -> Value {
    json!([{"op": "loop", "name": "fs__write_file", "arguments": {"path": "/loop", "sleep": upstream_sleep},
            "numbered": true, "count": count, "intervalMs": 200, "signalAfter": 5, "timeout": 5}])
}

/// What the upstream ran: the `n` of every write_file call it received.
async fn upstream_numbers(url: &str) -> Vec<u64> {
    upstream_numbers_of(url, "write_file").await
}

async fn upstream_numbers_of(url: &str, tool: &str) -> Vec<u64> {
    let mut u = url::Url::parse(url).unwrap();
    u.set_path("/control/call-args");
    let got = json_of(http().get(u).send().await.unwrap()).await;
    got["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["tool"] == tool)
        .filter_map(|c| c["arguments"]["n"].as_u64())
        .collect()
}

/// Checks one agent's loop across a restart and prints its figures.
async fn judge(label: &str, out: &Value, upstream: &[u64]) {
    let calls = out["steps"][0]["calls"].as_array().expect("the loop ran");
    let failed: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i]["ok"] != true)
        .collect();
    // Nothing ran twice; every call the agent saw succeed ran exactly once.
    let mut seen = std::collections::BTreeSet::new();
    for n in upstream {
        assert!(seen.insert(*n), "{label}: call {n} ran twice: {upstream:?}");
    }
    for (i, c) in calls.iter().enumerate() {
        if c["ok"] == true {
            assert!(
                seen.contains(&(i as u64)),
                "{label}: call {i} succeeded but never ran"
            );
        }
    }
    // Only the calls around the kill fail (in flight, or sent while nothing listened); every
    // later one succeeds, on the same session.
    if let (Some(&first), Some(&last)) = (failed.first(), failed.last()) {
        assert!(first >= 5, "{label}: a call before the kill failed: {out}");
        assert_eq!(
            last - first + 1,
            failed.len(),
            "{label}: failures are not one window: {out}"
        );
        assert!(
            failed.len() <= 10,
            "{label}: {} calls failed: {out}",
            failed.len()
        );
    }
    let ok_after = calls[failed.last().map_or(0, |l| l + 1)..]
        .iter()
        .all(|c| c["ok"] == true);
    assert!(ok_after, "{label}: a call after recovery failed: {out}");
    assert!(
        calls.len() - failed.last().map_or(0, |l| l + 1) >= 5,
        "{label}: too few calls after recovery to judge: {out}"
    );
    let window_ms = match (failed.first(), failed.last()) {
        (Some(&f), Some(&l)) => {
            let recovered = &calls[l + 1];
            recovered["at"].as_u64().unwrap() - calls[f]["at"].as_u64().unwrap()
        }
        _ => 0,
    };
    let errors: Vec<&str> = failed
        .iter()
        .filter_map(|&i| calls[i]["error"].as_str())
        .collect();
    println!(
        "restart figures: {label}: {} calls, {} failed, errors seen for {window_ms} ms, upstream ran {} (unknown outcome, not resent: {}); errors: {errors:?}",
        calls.len(),
        failed.len(),
        upstream.len(),
        upstream.len() - calls.iter().filter(|c| c["ok"] == true).count(),
    );
}

async fn survives_a_kill(mode: &str, upstream_sleep: f64) {
    let server = Fixtures::load().sdk_server(&[]);
    let grants = grants_for("files", "fs", &server.url, &["write_file"], json!({}), None).await;
    let mut sidecar = Sidecar::start_with(Some(&grants), &["--state-dir=STATE"]);
    sidecar.wait_ready().await;
    let url = sidecar.url.clone();
    let sidecar_ref = &mut sidecar;
    let out = agent_with(&url, mode, loop_steps(25, upstream_sleep), || async move {
        sidecar_ref.restart();
    })
    .await;
    let label = format!("{mode}, upstream call {upstream_sleep}s");
    judge(&label, &out, &upstream_numbers(&server.url).await).await;
    if mode != "auto" && mode != "node-modern" {
        assert!(
            out["protocolVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("2025")),
            "{out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typescript_agents_legacy_session_survives_a_killed_sidecar() {
    survives_a_kill("typescript", 0.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typescript_agents_legacy_session_survives_a_sidecar_killed_mid_call() {
    survives_a_kill("typescript", 0.4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agents_legacy_session_survives_a_killed_sidecar() {
    survives_a_kill("legacy", 0.0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agent_in_the_modern_era_carries_on_after_a_killed_sidecar() {
    survives_a_kill("auto", 0.0).await;
}

/// The modern era has no session to keep: a call cut by the kill fails, every later one succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_agent_in_the_modern_era_carries_on_after_a_sidecar_killed_mid_call() {
    survives_a_kill("node-modern", 0.4).await;
}

/// A session the agent ended stays ended after the restart; one it did not is still served;
/// one issued under another key (a sidecar without --state-dir) is asked to initialize again.
#[tokio::test(flavor = "multi_thread")]
async fn an_ended_session_stays_ended_across_a_restart() {
    let server = Fixtures::load().sdk_server(&[]);
    let grants = grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await;
    let mut sidecar = Sidecar::start_with(Some(&grants), &["--state-dir=STATE"]);
    sidecar.wait_ready().await;
    let client = http();
    let initialize = |url: String| {
        let client = client.clone();
        async move {
            let r = client
                .post(url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(
                    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "curl-agent", "version": "1"}}})
                    .to_string(),
                )
                .send()
                .await
                .unwrap();
            r.headers()["mcp-session-id"].to_str().unwrap().to_string()
        }
    };
    let url = sidecar.url.clone();
    let list = |session: String| {
        let client = client.clone();
        let url = url.clone();
        async move {
            client
                .post(url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18")
                .header("content-type", "application/json")
                .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let ended = initialize(sidecar.url.clone()).await;
    let kept = initialize(sidecar.url.clone()).await;
    let deleted = client
        .delete(&sidecar.url)
        .header("mcp-session-id", &ended)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 200);
    assert_eq!(list(ended.clone()).await, 404);
    sidecar.restart();
    sidecar.wait_ready().await;
    assert_eq!(list(ended.clone()).await, 404, "ended before the restart");
    assert_eq!(list(kept.clone()).await, 200, "kept across the restart");

    // Another sidecar (no state directory: a key of its own) knows neither.
    let other = Sidecar::start(Some(&grants));
    other.wait_ready().await;
    let r = client
        .post(&other.url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &kept)
        .header("mcp-protocol-version", "2025-06-18")
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(json_of(r).await["error"]["code"], -32001);
}

/// A call answered on an event stream (the upstream's log line and progress come first) when
/// the sidecar is killed: the TypeScript client (2025-11-25) resumes the stream, as the sidecar
/// primed it to, and the restarted sidecar answers that call "outcome unknown" at once, instead
/// of the call waiting for its timeout. The call is not sent again.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_call_cut_by_a_kill_is_answered_outcome_unknown_when_the_stream_resumes() {
    let server = Fixtures::load().sdk_server(&["--chatty"]);
    let grants = grants_for("files", "fs", &server.url, &["report"], json!({}), None).await;
    let mut sidecar = Sidecar::start_with(Some(&grants), &["--state-dir=STATE"]);
    sidecar.wait_ready().await;
    let url = sidecar.url.clone();
    let sidecar_ref = &mut sidecar;
    let steps = json!([{"op": "loop", "name": "fs__report", "arguments": {"path": "/r", "sleep": 1.0},
                        "numbered": true, "count": 12, "intervalMs": 200, "signalAfter": 3,
                        "timeout": 20, "progress": true}]);
    let out = agent_with(&url, "typescript", steps, || async move {
        // The next call is on its way: let it reach the upstream, then kill.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        sidecar_ref.restart();
    })
    .await;
    let calls = out["steps"][0]["calls"].as_array().unwrap();
    let failed: Vec<&Value> = calls.iter().filter(|c| c["ok"] != true).collect();
    assert_eq!(failed.len(), 1, "{out}");
    let error = failed[0]["error"].as_str().unwrap();
    assert!(error.contains("whether the tool ran is unknown"), "{out}");
    let after = calls
        .iter()
        .skip_while(|c| c["ok"] == true)
        .skip(1)
        .collect::<Vec<_>>();
    assert!(
        !after.is_empty() && after.iter().all(|c| c["ok"] == true),
        "{out}"
    );
    let ran = upstream_numbers_of(&server.url, "report").await;
    let mut seen = std::collections::BTreeSet::new();
    for n in &ran {
        assert!(seen.insert(*n), "call {n} ran twice: {ran:?}");
    }
    println!(
        "restart figures: typescript, streamed call cut by the kill: answered 'outcome unknown' after {} ms (the call's own timeout: 20 s)",
        failed[0]["ms"]
    );
}
