//! The sidecar between real agents and real servers: the official Python SDK client (both eras),
//! the TypeScript SDK client and the MCP Inspector CLI talk to `mcp-operator sidecar`, which
//! talks to the Python SDK fixture server, server-everything and the hostile fixture. The grants
//! file is laid out as the kubelet lays out a ConfigMap volume (a timestamped directory behind a
//! `..data` symlink, swapped on update).

use crate::sidecar_support;
use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use sidecar_support::{
    RawLegacyAgent, Sidecar, Signer, agent, agent_with, files_behind_sidecar, grants_for, http,
    inspector, json_of, modern_tools_call, names, upstream_calls, upstream_cancelled,
};
use support::Fixtures;

async fn hostile_calls(base: &str) -> Vec<String> {
    let v = json_of(
        http()
            .get(format!("{base}/call-faults/calls"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    serde_json::from_value(v["calls"].clone()).unwrap()
}

const MODES: [&str; 2] = ["legacy", "auto"];

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_in_flight_call_finish_then_exits_zero() {
    let fixtures = Fixtures::load();
    let hostile = fixtures.hostile_server();
    let url = format!("{}/call-faults/mcp", hostile.url);
    let grants = grants_for(
        "faulty",
        "ff",
        &url,
        &["hang_once"],
        json!({"callTimeoutMs": 3000}),
        None,
    )
    .await;
    let mut sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let pid = sidecar.child.id().to_string();
    let out = agent_with(
        &sidecar.url.clone(),
        "auto",
        json!([{"op": "wait_list_changed", "timeout": 0.1, "trigger": true}, {"op": "call", "name": "ff__hang_once", "arguments": {}}]),
        || async move {
            // SIGTERM lands while the call below is in flight.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let _ = Command::new("kill").args(["-TERM", &pid]).status();
            });
        },
    )
    .await;
    assert!(
        out["steps"][1]["text"]
            .as_str()
            .unwrap()
            .contains("did not finish within 3s"),
        "the in-flight call got its answer: {out}"
    );
    let status = sidecar.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", sidecar.log_text());
    assert!(sidecar.log_text().contains("in-flight calls finished"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_on_the_old_sse_transport_is_called_too() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&["--sse"]);
    let grants = grants_for(
        "old",
        "old",
        &server.url,
        &["read_file"],
        json!({"transport": "sse"}),
        None,
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let out = agent(
        &sidecar.url,
        "auto",
        json!([{"op": "list"}, {"op": "call", "name": "old__read_file", "arguments": {"path": "/x"}}, {"op": "calls", "name": "old__read_file", "count": 4}]),
    )
    .await;
    assert_eq!(names(&out["steps"][0]), ["old__read_file"], "{out}");
    assert_eq!(out["steps"][1]["isError"], false, "{out}");
    assert!(
        out["steps"][2]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["isError"] == false),
        "{out}"
    );
    assert_eq!(upstream_calls(&server.url).await.len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_client_lists_calls_and_hears_of_changes() {
    let (server, mut sidecar) = files_behind_sidecar(&["read_file", "write_file"]).await;
    let narrow = grants_for("files", "fs", &server.url, &["write_file"], json!({}), None).await;
    let url = sidecar.url.clone();
    let sidecar_ref = &mut sidecar;
    let out = agent_with(
        &url,
        "typescript",
        json!([
            {"op": "list"},
            {"op": "call", "name": "fs__read_file", "arguments": {"path": "/ts"}},
            {"op": "call", "name": "fs__delete_file", "arguments": {"path": "/ts"}},
            {"op": "wait_list_changed", "timeout": 10, "trigger": true},
        ]),
        || async move { sidecar_ref.swap_grants(narrow.to_string().as_bytes()) },
    )
    .await;
    let steps = &out["steps"];
    assert_eq!(
        names(&steps[0]),
        ["fs__read_file", "fs__write_file"],
        "{out}"
    );
    assert_eq!(steps[1]["isError"], false, "{out}");
    assert!(steps[1]["text"].as_str().unwrap().contains("read_file"));
    assert!(
        steps[2]["text"].as_str().unwrap().contains("not granted"),
        "{out}"
    );
    assert_eq!(steps[3]["changed"], true, "{out}");
    assert_eq!(names(&steps[3]), ["fs__write_file"], "{out}");
    assert_eq!(upstream_calls(&server.url).await, ["read_file"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_inspector_cli_lists_and_calls_only_the_granted_tools() {
    let (server, sidecar) = files_behind_sidecar(&["read_file", "write_file"]).await;
    for era in ["legacy", "modern"] {
        let listed = inspector(&sidecar.url, era, &["--method", "tools/list"]).await;
        assert_eq!(listed.code, 0, "{era}: {}\n{}", listed.doc, listed.stderr);
        let tools = listed.doc["result"]["tools"].as_array().unwrap();
        let listed_names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(listed_names, ["fs__read_file", "fs__write_file"], "{era}");
        assert_eq!(tools[0]["description"], "Read a file.", "{era}");

        let path = format!("/inspector/{era}");
        let called = inspector(
            &sidecar.url,
            era,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "fs__read_file",
                "--tool-arg",
                &format!("path={path}"),
            ],
        )
        .await;
        assert_eq!(called.code, 0, "{era}: {}\n{}", called.doc, called.stderr);
        let result = &called.doc["result"];
        assert_eq!(result["isError"], false, "{era}: {result}");
        let echoed: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            echoed,
            json!({"tool": "read_file", "arguments": {"path": path}}),
            "{era}: the upstream's result passes through unchanged"
        );

        // The Inspector calls only what the sidecar listed: a name the grants leave out is
        // refused by the Inspector itself, naming it, and no tools/call is sent at all.
        let refused = inspector(
            &sidecar.url,
            era,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "fs__delete_file",
                "--tool-arg",
                "path=/etc",
            ],
        )
        .await;
        assert_ne!(refused.code, 0, "{era}: {}", refused.doc);
        let message = refused.doc["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("fs__delete_file"),
            "{era}: {}",
            refused.doc
        );
    }
    assert_eq!(
        upstream_calls(&server.url).await,
        ["read_file", "read_file"]
    );
    let audit = sidecar.audit();
    assert_eq!(
        audit.len(),
        2,
        "one audit line per call the sidecar got: {audit:?}"
    );
    assert!(
        audit.iter().all(|a| a["tool"] == "fs__read_file"
            && a["decision"] == "allowed"
            && a["outcome"] == "ok"),
        "{audit:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn both_eras_see_exactly_the_grants_and_a_refused_name_never_reaches_the_server() {
    let (server, sidecar) = files_behind_sidecar(&["read_file", "write_file"]).await;
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([
                {"op": "list"},
                {"op": "call", "name": "fs__read_file", "arguments": {"path": "ARG-VALUE-7731"}},
                {"op": "call", "name": "fs__delete_file", "arguments": {"path": "/etc"}},
                {"op": "call", "name": "delete_file", "arguments": {"path": "/etc"}},
                {"op": "calls", "name": "fs__write_file", "count": 8},
                // No server is deferred: the discovery tools do not exist for this agent.
                {"op": "call", "name": "call_tool", "arguments": {"server": "files", "tool": "delete_file", "arguments": {"path": "/etc"}}},
            ]),
        )
        .await;
        let expected_version = if mode == "legacy" {
            "2025-11-25"
        } else {
            "2026-07-28"
        };
        assert_eq!(out["protocolVersion"], expected_version, "{out}");
        let steps = &out["steps"];
        assert_eq!(names(&steps[0]), ["fs__read_file", "fs__write_file"]);
        // The upstream's live definition, under the qualified name.
        assert_eq!(steps[0]["tools"][0]["description"], "Read a file.");
        assert_eq!(steps[0]["tools"][0]["annotations"]["readOnlyHint"], true);
        assert_eq!(steps[1]["isError"], false, "{out}");
        let echoed: Value = serde_json::from_str(steps[1]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            echoed,
            json!({"tool": "read_file", "arguments": {"path": "ARG-VALUE-7731"}})
        );
        for refused in [&steps[2], &steps[3]] {
            assert_eq!(refused["isError"], true, "{out}");
            let text = refused["text"].as_str().unwrap();
            assert!(text.contains("is not granted to this agent"), "{text}");
            assert!(
                !text.contains("fs__read_file"),
                "a refusal lists no other tools: {text}"
            );
        }
        assert!(
            steps[5]["text"]
                .as_str()
                .unwrap()
                .contains("the tool \"call_tool\" is not granted"),
            "{out}"
        );
        let concurrent = steps[4].as_array().unwrap();
        assert_eq!(concurrent.len(), 8);
        assert!(concurrent.iter().all(|r| r["isError"] == false), "{out}");
    }
    let calls = upstream_calls(&server.url).await;
    assert!(
        !calls.iter().any(|c| c.contains("delete")),
        "a refused call reached the server: {calls:?}"
    );
    assert_eq!(calls.iter().filter(|c| *c == "read_file").count(), 2);
    assert_eq!(calls.iter().filter(|c| *c == "write_file").count(), 16);

    let audit = sidecar.audit();
    let refused: Vec<&Value> = audit
        .iter()
        .filter(|a| a["decision"] == "not_granted")
        .collect();
    assert_eq!(refused.len(), 6, "{audit:?}");
    let allowed = audit
        .iter()
        .find(|a| a["tool"] == "fs__read_file")
        .expect("an audit line for the allowed call");
    assert_eq!(allowed["agent"], "test-agent");
    assert_eq!(allowed["server"], "files");
    assert_eq!(allowed["raw_tool"], "read_file");
    assert_eq!(allowed["access"], "read");
    assert_eq!(allowed["outcome"], "ok");
    assert_eq!(allowed["attempts"], 1);
    assert!(
        !sidecar.log_text().contains("ARG-VALUE-7731"),
        "arguments must never be logged"
    );

    let metrics = sidecar.metrics().await;
    assert!(
        metrics.contains(
            "mcp_sidecar_tool_calls_total{server=\"files\",decision=\"allowed\",outcome=\"ok\"}"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("decision=\"not_granted\""), "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_is_called_through_the_sidecar() {
    let fixtures = Fixtures::load();
    let server = fixtures.everything_server();
    let grants = grants_for(
        "everything",
        "ev",
        &server.url,
        &["echo", "trigger-long-running-operation"],
        json!({}),
        None,
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([{"op": "list"}, {"op": "call", "name": "ev__echo", "arguments": {"message": "hello through the sidecar"}},
                   {"op": "call", "name": "ev__get-env", "arguments": {}},
                   {"op": "call", "name": "ev__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 3}, "progress": true}]),
        )
        .await;
        assert_eq!(
            names(&out["steps"][0]),
            ["ev__echo", "ev__trigger-long-running-operation"],
            "{out}"
        );
        // The upstream's progress notifications reach the agent on the call's stream.
        assert_eq!(out["steps"][3]["progress"], json!([1.0, 2.0, 3.0]), "{out}");
        assert!(
            out["steps"][3]["text"]
                .as_str()
                .unwrap()
                .contains("completed"),
            "{out}"
        );
        assert_eq!(out["steps"][1]["isError"], false, "{out}");
        assert!(
            out["steps"][1]["text"]
                .as_str()
                .unwrap()
                .contains("hello through the sidecar"),
            "{out}"
        );
        assert!(
            out["steps"][2]["text"]
                .as_str()
                .unwrap()
                .contains("not granted"),
            "{out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_definition_is_withheld_and_the_agent_is_told() {
    for mode in MODES {
        let (server, sidecar) = files_behind_sidecar(&["read_file", "write_file"]).await;
        let url = server.url.clone();
        let out = agent_with(
            &sidecar.url,
            mode,
            json!([
                {"op": "list"},
                {"op": "wait_list_changed", "timeout": 20, "trigger": true},
                // The change is two upstream notifications (remove, add): let both land.
                {"op": "sleep", "seconds": 2},
                {"op": "call", "name": "fs__read_file", "arguments": {"path": "/x"}},
            ]),
            || async move {
                // The same name, another definition: what a rug pull looks like.
                support::sdk_control(&url, "remove-tool", "read_file").await;
                support::sdk_control_with(
                    &url,
                    "add-tool",
                    &[("name", "read_file"), ("access", "destructive")],
                )
                .await;
            },
        )
        .await;
        let steps = &out["steps"];
        assert_eq!(names(&steps[0]), ["fs__read_file", "fs__write_file"]);
        assert_eq!(steps[1]["changed"], true, "{mode}: no list_changed: {out}");
        assert_eq!(names(&steps[1]), ["fs__write_file"], "{out}");
        let text = steps[3]["text"].as_str().unwrap();
        assert_eq!(steps[3]["isError"], true);
        assert!(
            text.contains("fs__read_file") && text.contains("changed since it was granted"),
            "{text}"
        );
        assert!(
            !upstream_calls(&server.url)
                .await
                .contains(&"read_file".to_string())
        );
        assert!(
            sidecar
                .audit()
                .iter()
                .any(|a| a["decision"] == "definition_changed")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grants_file_is_reloaded_and_a_bad_one_keeps_the_last_good() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let mut sidecar = Sidecar::start(None);
    let (status, text) = sidecar.readyz().await;
    assert_eq!(status, 503);
    assert!(
        text.contains("nothing is granted") && text.contains("does not exist"),
        "{text}"
    );

    let wide = grants_for(
        "files",
        "fs",
        &server.url,
        &["read_file", "write_file"],
        json!({}),
        None,
    )
    .await;
    sidecar.swap_grants(wide.to_string().as_bytes());
    sidecar.wait_ready().await;

    sidecar.swap_grants(b"{\"schemaVersion\": \"mcp-operator.dev/grants/v1\", \"servers\": [");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, text) = sidecar.readyz().await;
        if text.contains("last good") {
            assert_eq!(status, 200, "{text}");
            assert!(text.contains("is not JSON"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad file was not noticed: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = agent(&sidecar.url, "auto", json!([{"op": "list"}])).await;
    assert_eq!(names(&out["steps"][0]), ["fs__read_file", "fs__write_file"]);

    // A narrower document: an open agent session is told, and its next list is narrower.
    let narrow = grants_for("files", "fs", &server.url, &["write_file"], json!({}), None).await;
    for mode in MODES {
        let doc = if mode == "legacy" {
            narrow.clone()
        } else {
            wide.clone()
        };
        let expected: Vec<&str> = if mode == "legacy" {
            vec!["fs__write_file"]
        } else {
            vec!["fs__read_file", "fs__write_file"]
        };
        let sidecar_ref = &mut sidecar;
        let bytes = doc.to_string();
        let out = agent_with(
            &sidecar_ref.url.clone(),
            mode,
            json!([{"op": "wait_list_changed", "timeout": 10, "trigger": true},
                   {"op": "call", "name": "fs__read_file", "arguments": {"path": "/x"}}]),
            || async move {
                sidecar_ref.swap_grants(bytes.as_bytes());
            },
        )
        .await;
        assert_eq!(out["steps"][0]["changed"], true, "{mode}: {out}");
        assert_eq!(names(&out["steps"][0]), expected, "{mode}: {out}");
        let refused = out["steps"][1]["text"]
            .as_str()
            .unwrap()
            .contains("not granted");
        assert_eq!(refused, mode == "legacy", "{mode}: {out}");
    }
    let reloads = sidecar.metrics().await;
    assert!(
        reloads.contains("mcp_sidecar_grants_reloads_total{result=\"invalid\"}"),
        "{reloads}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn resends_only_what_is_safe_and_says_when_the_outcome_is_unknown() {
    let fixtures = Fixtures::load();
    let hostile = fixtures.hostile_server();
    let url = format!("{}/call-faults/mcp", hostile.url);
    let grants = grants_for(
        "faulty",
        "ff",
        &url,
        &[],
        json!({"callTimeoutMs": 1500, "retry": 2}),
        None,
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let out = agent(
        &sidecar.url,
        "legacy",
        json!([
            {"op": "call", "name": "ff__drop_read", "arguments": {}},
            {"op": "call", "name": "ff__drop_write", "arguments": {}},
            {"op": "call", "name": "ff__hang_once", "arguments": {}},
            {"op": "call", "name": "ff__hang_once", "arguments": {}},
            {"op": "call", "name": "ff__steady", "arguments": {}},
        ]),
    )
    .await;
    let steps = &out["steps"];
    // A read-only tool whose server dropped the connection is resent once.
    assert_eq!(steps[0]["isError"], false, "{out}");
    assert_eq!(steps[0]["text"], "called drop_read");
    // A write is not: the agent is told the outcome is unknown.
    assert_eq!(steps[1]["isError"], true, "{out}");
    let text = steps[1]["text"].as_str().unwrap();
    assert!(
        text.contains("outcome of the call to ff__drop_write is unknown") && text.contains("check"),
        "{text}"
    );
    // A hanging call times out; the next one works.
    assert!(
        steps[2]["text"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1500ms"),
        "{out}"
    );
    assert_eq!(steps[3]["text"], "called hang_once", "{out}");
    assert_eq!(steps[4]["text"], "called steady");

    // The server "restarts": every session is unknown (404). Nothing ran, so even a write is
    // sent again, on a new session, exactly once.
    http()
        .post(format!("{}/call-faults/forget-sessions", hostile.url))
        .send()
        .await
        .unwrap();
    let out = agent(
        &sidecar.url,
        "auto",
        json!([{"op": "call", "name": "ff__drop_write", "arguments": {}}]),
    )
    .await;
    assert_eq!(out["steps"][0]["text"], "called drop_write", "{out}");

    let calls = hostile_calls(&hostile.url).await;
    let count = |n: &str| calls.iter().filter(|c| *c == n).count();
    assert_eq!(count("drop_read"), 2, "{calls:?}");
    assert_eq!(
        count("drop_write"),
        2,
        "one execution per agent call: {calls:?}"
    );
    assert_eq!(count("hang_once"), 2, "{calls:?}");
    assert_eq!(count("steady"), 1, "{calls:?}");

    let audit = sidecar.audit();
    let outcome = |tool: &str| -> Vec<(String, u64)> {
        audit
            .iter()
            .filter(|a| a["tool"] == tool)
            .map(|a| {
                (
                    a["outcome"].as_str().unwrap().to_string(),
                    a["attempts"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(outcome("ff__drop_read"), [("ok".to_string(), 2)]);
    assert_eq!(
        outcome("ff__drop_write"),
        [("outcome_unknown".to_string(), 1), ("ok".to_string(), 2)]
    );
    assert_eq!(outcome("ff__hang_once")[0].0, "timeout");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_secret_file_is_used_on_the_next_connect() {
    let fixtures = Fixtures::load();
    let port = support::free_port().to_string();
    let first = fixtures.sdk_server(&["--port", &port, "--bearer", "TOKEN-ONE-5521"]);
    let grants = grants_for(
        "files",
        "fs",
        &first.url,
        &["read_file"],
        json!({}),
        Some("TOKEN-ONE-5521"),
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.write_secret("upstream-token", "token", "TOKEN-ONE-5521\n");
    sidecar.wait_ready().await;
    let call = json!([{"op": "call", "name": "fs__read_file", "arguments": {"path": "/x"}}]);
    let out = agent(&sidecar.url, "auto", call.clone()).await;
    assert_eq!(out["steps"][0]["isError"], false, "{out}");

    // The server comes back with a new token; the Secret is rotated after that.
    drop(first);
    let _second = fixtures.sdk_server(&["--port", &port, "--bearer", "TOKEN-TWO-8834"]);
    // The sidecar may still report the moment the old server was gone (connection refused)
    // until it reads the new one; then the old token must be refused with 401.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let text = loop {
        let out = agent(&sidecar.url, "auto", call.clone()).await;
        let text = out["steps"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if text.contains("401") || std::time::Instant::now() > deadline {
            break text;
        }
        assert!(
            text.contains("refused"),
            "before the new server is read, only the gap may show: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        text.contains("401"),
        "the old token is refused, not retried: {text}"
    );
    sidecar.write_secret("upstream-token", "token", "TOKEN-TWO-8834");
    sidecar.wait_ready().await;
    let out = agent(&sidecar.url, "legacy", call).await;
    assert_eq!(
        out["steps"][0]["isError"], false,
        "the rotated file was not read: {out}"
    );

    let log = sidecar.log_text();
    assert!(
        !log.contains("TOKEN-ONE") && !log.contains("TOKEN-TWO"),
        "a credential reached the log"
    );
}

/// `/readyz` answers anyone who reaches the pod: it counts a missing credential and never names
/// it; the sidecar's log does, and the credential written makes it ready.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_counts_missing_credentials_without_naming_them() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&["--bearer", "TOKEN-6613"]);
    let grants = grants_for(
        "files",
        "fs",
        &server.url,
        &["read_file"],
        json!({}),
        Some("TOKEN-6613"),
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (status, text) = sidecar.readyz().await;
        if text.contains("missing") {
            assert_eq!(status, 503, "{text}");
            break text;
        }
        assert!(Instant::now() < deadline, "no missing credential: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        text.starts_with("not ready: 1 credential missing"),
        "{text}"
    );
    assert!(
        !text.contains("upstream-token") && !text.contains("secrets/"),
        "/readyz names the credential: {text}"
    );
    assert!(
        sidecar.log_text().contains("upstream-token"),
        "the log names the missing credential"
    );
    sidecar.write_secret("upstream-token", "token", "TOKEN-6613");
    sidecar.wait_ready().await;
    let (status, text) = sidecar.readyz().await;
    assert_eq!((status, text.trim()), (200, "ok"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_refuses_what_agents_must_not_do() {
    let (server, sidecar) = files_behind_sidecar(&["read_file"]).await;
    let post = |body: Value, headers: &[(&str, &str)]| {
        let mut r = http()
            .post(&sidecar.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    // An unknown legacy session: 404 with a JSON-RPC body.
    let r = post(list.clone(), &[("mcp-session-id", "no-such-session")])
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let body: Value = json_of(r).await;
    assert_eq!(body["id"], 1);
    assert!(body["error"]["code"].is_i64());
    // A web page's origin is refused.
    let r = post(list.clone(), &[("origin", "https://evil.example.com")])
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = post(list.clone(), &[("host", "evil.example.com")])
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    // Modern: headers must match the body; unknown versions name the supported one.
    let meta = |v: &str| json!({"io.modelcontextprotocol/protocolVersion": v, "io.modelcontextprotocol/clientCapabilities": {}});
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fs__read_file", "arguments": {"path": "/x"}, "_meta": meta("2026-07-28")}});
    let r = post(
        call.clone(),
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "fs__write_file"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(json_of(r).await["error"]["code"], -32020);
    let r = post(
        call.clone(),
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
            ("mcp-name", "fs__read_file"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(json_of(r).await["error"]["code"], -32020);
    let old = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta("2027-01-01")}});
    let r = post(
        old,
        &[
            ("mcp-protocol-version", "2027-01-01"),
            ("mcp-method", "tools/list"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = json_of(r).await;
    assert_eq!(body["error"]["code"], -32022);
    assert_eq!(body["error"]["data"]["supported"], json!(["2026-07-28"]));
    let r = post(
        call,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "fs__read_file"),
        ],
    )
    .await
    .unwrap();
    let body: Value = json_of(r).await;
    assert_eq!(body["result"]["isError"], false, "{body}");
    assert_eq!(body["result"]["resultType"], "complete");
    // A body over the bound.
    let huge = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"pad": "x".repeat(5 * 1024 * 1024)}});
    let r = post(huge, &[]).await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(upstream_calls(&server.url).await, ["read_file"]);
}

/// Grants for the SDK fixture server with `gated` tools requiring approval.
async fn gated_grants(url: &str, names: &[&str], gated: &[&str]) -> Value {
    let mut grants = grants_for("files", "fs", url, names, json!({}), None).await;
    for tool in grants["servers"][0]["tools"].as_array_mut().unwrap() {
        if gated.contains(&tool["name"].as_str().unwrap()) {
            tool["requiresApproval"] = json!(true);
        }
    }
    grants
}

fn decisions(sidecar: &Sidecar, tool: &str) -> Vec<String> {
    sidecar
        .audit()
        .iter()
        .filter(|a| a["tool"] == tool)
        .map(|a| a["decision"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_tool_runs_only_after_an_explicit_yes_in_both_eras() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let grants = gated_grants(&server.url, &["read_file", "delete_file"], &["delete_file"]).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in MODES {
        let call = |i: usize| json!({"op": "call", "name": "fs__delete_file", "arguments": {"path": format!("/gated/{mode}/{i}")}});
        let out = sidecar_support::agent_answering(
            &sidecar.url,
            mode,
            json!([
                {"op": "call", "name": "fs__read_file", "arguments": {"path": "/free"}},
                call(0), call(1), call(2), call(3),
            ]),
            json!(["accept", "decline", "cancel", "accept-false"]),
        )
        .await;
        let steps = &out["steps"];
        assert_eq!(steps[0]["isError"], false, "{mode}: {out}");
        assert_eq!(
            steps[1]["isError"], false,
            "{mode}: the yes did not run it: {out}"
        );
        let echoed: Value = serde_json::from_str(steps[1]["text"].as_str().unwrap()).unwrap();
        assert_eq!(echoed["arguments"]["path"], format!("/gated/{mode}/0"));
        for (step, word) in [(2, "declined"), (3, "cancelled"), (4, "declined")] {
            assert_eq!(steps[step]["isError"], true, "{mode}: {out}");
            let text = steps[step]["text"].as_str().unwrap();
            assert!(
                text.contains(word) && text.contains("was not run"),
                "{mode}: {text}"
            );
        }
        // Asked once per gated call, never about the free one, with what is about to happen.
        let asked = out["elicitations"].as_array().unwrap();
        assert_eq!(asked.len(), 4, "{mode}: {out}");
        let message = asked[0]["message"].as_str().unwrap();
        for part in [
            "Server: files",
            "Tool: delete_file (called as fs__delete_file)",
            "Access: destructive",
            &format!("path = \"/gated/{mode}/0\""),
        ] {
            assert!(message.contains(part), "{mode}: {part}: {message}");
        }
        assert_eq!(asked[0]["schema"]["required"], json!(["approve"]));
    }
    let calls = upstream_calls(&server.url).await;
    assert_eq!(
        calls.iter().filter(|c| *c == "delete_file").count(),
        2,
        "exactly the two approved calls ran: {calls:?}"
    );
    let mut seen = decisions(&sidecar, "fs__delete_file");
    seen.sort();
    let mut expected = vec![
        "approved",
        "approved",
        "declined",
        "declined",
        "declined",
        "declined",
        "cancelled",
        "cancelled",
    ];
    // The modern client's first leg of each call is answered with the form.
    expected.extend(["approval_asked"; 4]);
    expected.sort();
    assert_eq!(seen, expected);
    assert!(
        !sidecar.log_text().contains("/gated/"),
        "arguments must never be logged"
    );
    let metrics = sidecar.metrics().await;
    assert!(
        metrics.contains("decision=\"approved\",outcome=\"ok\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("decision=\"declined\",outcome=\"refused\""),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_cannot_answer_forms_is_refused_and_nothing_runs() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let grants = gated_grants(&server.url, &["delete_file"], &["delete_file"]).await;
    let sidecar = Sidecar::start_with(Some(&grants), &["--approval-timeout", "1s"]);
    sidecar.wait_ready().await;
    let call = json!([{"op": "call", "name": "fs__delete_file", "arguments": {"path": "/x"}}]);
    let legacy = agent(&sidecar.url, "legacy", call.clone()).await;
    let text = legacy["steps"][0]["text"].as_str().unwrap();
    assert_eq!(legacy["steps"][0]["isError"], true, "{legacy}");
    assert!(
        text.contains("needs a person's approval") && text.contains("cannot give it"),
        "{text}"
    );
    let modern = agent(&sidecar.url, "auto", call.clone()).await;
    assert_eq!(modern["steps"][0]["error"]["code"], -32021, "{modern}");
    // A person who never answers: the legacy call is refused at the timeout.
    let hung =
        sidecar_support::agent_answering(&sidecar.url, "legacy", call, json!(["hang"])).await;
    let text = hung["steps"][0]["text"].as_str().unwrap();
    assert!(text.contains("no answer came within 1s"), "{hung}");

    // A 2025-03-26 session has no elicitation, whatever it declares.
    let (old, init) =
        RawLegacyAgent::initialize(&sidecar.url, "2025-03-26", json!({"elicitation": {}})).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
    let r = old
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fs__delete_file", "arguments": {"path": "/x"}}}))
        .await;
    let body = json_of(r).await;
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("cannot give it") && text.contains("2025-03-26"),
        "{body}"
    );

    assert!(upstream_calls(&server.url).await.is_empty());
    let seen = decisions(&sidecar, "fs__delete_file");
    assert_eq!(
        seen,
        ["cannot_ask", "cannot_ask", "timed_out", "cannot_ask"]
    );
}

/// A modern client that can answer forms: one `tools/call` with the given extra params.
async fn modern_call(url: &str, id: u64, name: &str, arguments: Value, extra: Value) -> Value {
    let mut extra = extra;
    extra["_meta"] = json!({
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}});
    json_of(modern_tools_call(url, id, name, arguments, extra).await).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_modern_approval_cannot_be_replayed_altered_retargeted_or_forged() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let grants = gated_grants(
        &server.url,
        &["delete_file", "write_file"],
        &["delete_file", "write_file"],
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    // Its states expire after a second.
    let hasty = Sidecar::start_with(Some(&grants), &["--approval-ttl", "1s"]);
    sidecar.wait_ready().await;
    hasty.wait_ready().await;
    let url = &sidecar.url;
    let args = json!({"path": "/a"});
    let asked = modern_call(url, 1, "fs__delete_file", args.clone(), json!({})).await;
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    assert_eq!(
        result["inputRequests"]["approval"]["method"],
        "elicitation/create"
    );
    let state = result["requestState"].as_str().unwrap().to_string();
    let yes = json!({"approval": {"action": "accept", "content": {"approve": true}}});
    let retry = |state: &str| json!({"inputResponses": yes, "requestState": state});
    let refused = |body: &Value, words: &str| {
        assert_eq!(body["result"]["isError"], true, "{body}");
        let text = body["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(words), "wanted {words:?}: {text}");
    };

    let other_args = modern_call(
        url,
        2,
        "fs__delete_file",
        json!({"path": "/b"}),
        retry(&state),
    )
    .await;
    refused(&other_args, "arguments differ");
    let other_tool = modern_call(url, 3, "fs__write_file", args.clone(), retry(&state)).await;
    refused(&other_tool, "is for the tool fs__delete_file");
    // One character of the signed part changed. (Not the tag's last character: it carries
    // unused bits, and a change there alone makes the state malformed, not forged.)
    let mut forged = state.clone().into_bytes();
    forged[0] = if forged[0] == b'A' { b'B' } else { b'A' };
    let forged = modern_call(
        url,
        4,
        "fs__delete_file",
        args.clone(),
        retry(&String::from_utf8(forged).unwrap()),
    )
    .await;
    refused(&forged, "altered");
    let garbage = modern_call(
        url,
        5,
        "fs__delete_file",
        args.clone(),
        retry("not-a-state"),
    )
    .await;
    refused(&garbage, "not one this sidecar issues");
    assert!(
        upstream_calls(&server.url).await.is_empty(),
        "nothing ran yet"
    );

    // The real answer runs it, once; the same answer again does not.
    let ran = modern_call(url, 6, "fs__delete_file", args.clone(), retry(&state)).await;
    assert_eq!(ran["result"]["isError"], false, "{ran}");
    assert_eq!(ran["result"]["resultType"], "complete");
    let replayed = modern_call(url, 7, "fs__delete_file", args.clone(), retry(&state)).await;
    refused(&replayed, "already answered");
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);

    // An answer after the state expired.
    let asked = modern_call(&hasty.url, 8, "fs__delete_file", args.clone(), json!({})).await;
    let late = asked["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let expired = modern_call(&hasty.url, 9, "fs__delete_file", args.clone(), retry(&late)).await;
    refused(&expired, "expired");
    // A state from another sidecar process (its own key) does not open here.
    let elsewhere = modern_call(url, 11, "fs__delete_file", args.clone(), retry(&late)).await;
    refused(&elsewhere, "altered or was not issued by this sidecar");

    // Without the capability: -32021 naming it.
    let r = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "fs__delete_file")
        .body(json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "fs__delete_file", "arguments": args,
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}).to_string())
        .send()
        .await
        .unwrap();
    let body = json_of(r).await;
    assert_eq!(body["error"]["code"], -32021, "{body}");
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"]["elicitation"],
        json!({"form": {}})
    );
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);
    let seen = decisions(&sidecar, "fs__delete_file");
    assert_eq!(
        seen.iter().filter(|d| *d == "invalid_approval").count(),
        5,
        "{seen:?}"
    );
    assert_eq!(
        decisions(&hasty, "fs__delete_file"),
        ["approval_asked", "invalid_approval"]
    );
    assert_eq!(
        seen.iter().filter(|d| *d == "approved").count(),
        1,
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_and_log_lines_of_a_call_reach_the_agent_and_the_log() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&["--chatty"]);
    let grants = grants_for("files", "fs", &server.url, &["report"], json!({}), None).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([{"op": "call", "name": "fs__report", "arguments": {"path": format!("/r/{mode}")}, "progress": true}]),
        )
        .await;
        let step = &out["steps"][0];
        assert_eq!(step["isError"], false, "{mode}: {out}");
        assert_eq!(step["progress"], json!([1.0, 2.0]), "{mode}: {out}");
        assert_eq!(
            step["logs"],
            json!([{"level": "warning", "logger": "fixture", "data": format!("reporting on /r/{mode}")}]),
            "{mode}: {out}"
        );
    }
    let log = sidecar.log_text();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "mcp_sidecar::upstream_log")
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0]["fields"]["server"], "files");
    assert_eq!(lines[0]["fields"]["level"], "warning");
    assert_eq!(lines[0]["level"], "WARN");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_client_approves_and_declines_through_its_handler() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let grants = gated_grants(&server.url, &["delete_file"], &["delete_file"]).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let call =
        |path: &str| json!({"op": "call", "name": "fs__delete_file", "arguments": {"path": path}});
    let out = sidecar_support::agent_answering(
        &sidecar.url,
        "typescript",
        json!([call("/ts/yes"), call("/ts/no"), call("/ts/dismissed")]),
        json!(["accept", "decline", "cancel"]),
    )
    .await;
    let steps = &out["steps"];
    assert_eq!(steps[0]["isError"], false, "{out}");
    assert!(
        steps[0]["text"].as_str().unwrap().contains("/ts/yes"),
        "{out}"
    );
    assert!(
        steps[1]["text"].as_str().unwrap().contains("declined"),
        "{out}"
    );
    assert!(
        steps[2]["text"].as_str().unwrap().contains("cancelled"),
        "{out}"
    );
    assert_eq!(out["elicitations"].as_array().unwrap().len(), 3, "{out}");
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);
    // Without a handler it declares no elicitation and cannot approve.
    let out = agent(&sidecar.url, "typescript", json!([call("/ts/unasked")])).await;
    assert!(
        out["steps"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cannot give it"),
        "{out}"
    );
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);
    assert_eq!(
        decisions(&sidecar, "fs__delete_file"),
        ["approved", "declined", "cancelled", "cannot_ask"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_call_is_judged_by_its_answer_and_the_grants_when_answered() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let gated = gated_grants(&server.url, &["read_file", "delete_file"], &["delete_file"]).await;
    let ungated = gated_grants(&server.url, &["read_file", "delete_file"], &[]).await;
    let revoked = gated_grants(&server.url, &["read_file"], &[]).await;
    let mut sidecar = Sidecar::start(Some(&gated));
    sidecar.wait_ready().await;
    let url = sidecar.url.clone();
    let call =
        |path: &str| json!({"op": "call", "name": "fs__delete_file", "arguments": {"path": path}});

    // The gate is removed while the person thinks, and they say no: still refused; the next
    // call runs unasked.
    let sidecar_ref = &mut sidecar;
    let bytes = ungated.to_string();
    let out = sidecar_support::agent_answering_with(
        &url,
        "legacy",
        json!([call("/held/declined"), {"op": "sleep", "seconds": 1}, call("/held/next")]),
        json!(["decline-late"]),
        || async move { sidecar_ref.swap_grants(bytes.as_bytes()) },
    )
    .await;
    let steps = &out["steps"];
    assert!(
        steps[0]["text"].as_str().unwrap().contains("declined"),
        "{out}"
    );
    assert_eq!(steps[2]["isError"], false, "{out}");
    assert_eq!(out["elicitations"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);

    // The grant is removed while the person thinks, and they say yes: the grants of the
    // moment refuse it.
    sidecar.swap_grants(gated.to_string().as_bytes());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sidecar_ref = &mut sidecar;
    let bytes = revoked.to_string();
    let out = sidecar_support::agent_answering_with(
        &url,
        "legacy",
        json!([call("/held/revoked")]),
        json!(["accept-late"]),
        || async move { sidecar_ref.swap_grants(bytes.as_bytes()) },
    )
    .await;
    let text = out["steps"][0]["text"].as_str().unwrap();
    assert!(text.contains("not granted"), "{out}");
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);
    assert_eq!(
        decisions(&sidecar, "fs__delete_file"),
        ["declined", "allowed", "not_granted"]
    );
}

/// Grants for a mixed agent: the SDK fixture `big` (4 named tools + 347 generated ones with
/// ~6 KB schemas: 351 tools, ~2 MB) as McpServer `catalog`, prefix `cat`, **deferred**, with
/// every tool granted but `tool_0002`, `delete_file` needing approval and `tool_0001` granted
/// under another definition than the live one; and `small` as McpServer `files`, prefix `fs`,
/// preloaded, granting `read_file`.
async fn mixed_deferred_grants(big: &str, small: &str) -> Value {
    let mut catalog = grants_for("catalog", "cat", big, &[], json!({}), None).await;
    let server = &mut catalog["servers"][0];
    server["deferred"] = json!(true);
    let tools = server["tools"].as_array_mut().unwrap();
    assert_eq!(tools.len(), 351, "the fixture serves 351 tools");
    tools.retain(|t| t["name"] != "tool_0002");
    for tool in tools.iter_mut() {
        if tool["name"] == "delete_file" {
            tool["requiresApproval"] = json!(true);
        }
        if tool["name"] == "tool_0001" {
            tool["definitionDigest"] = json!(format!("sha256:{}", "0".repeat(64)));
        }
    }
    let files = grants_for("files", "fs", small, &["read_file"], json!({}), None).await;
    let servers = json!([catalog["servers"][0].clone(), files["servers"][0].clone()]);
    json!({"schemaVersion": "mcp-operator.dev/grants/v1", "servers": servers})
}

fn text_json(step: &Value) -> Value {
    assert_eq!(step["isError"], false, "{step}");
    serde_json::from_str(step["text"].as_str().unwrap()).unwrap()
}

fn refusal(step: &Value) -> &str {
    assert_eq!(step["isError"], true, "{step}");
    step["text"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deferred_server_is_found_read_and_called_through_three_tools_with_the_same_narrowing() {
    let fixtures = Fixtures::load();
    let big = fixtures.sdk_server(&["--tools", "347", "--schema-bytes", "5900"]);
    let small = fixtures.sdk_server(&[]);
    let grants = mixed_deferred_grants(&big.url, &small.url).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let call =
        |tool: &str, arguments: Value| json!({"op": "call", "name": tool, "arguments": arguments});
    let target = |tool: &str, arguments: Value| {
        call(
            "call_tool",
            json!({"server": "catalog", "tool": tool, "arguments": arguments}),
        )
    };
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([
                {"op": "list"},
                call("list_tools", json!({})),
                {"op": "discover", "arguments": {}},
                {"op": "discover", "arguments": {"server": "catalog", "query": "TOOL NUMBER 34"}},
                call("list_tools", json!({"server": "files"})),
                call("get_tool_info", json!({"server": "catalog", "tool": "tool_0005"})),
                call("get_tool_info", json!({"server": "catalog", "tool": "tool_0001"})),
                call("get_tool_info", json!({"server": "catalog", "tool": "tool_0002"})),
                target("read_file", json!({"path": "VIA-DISCOVERY-4417"})),
                target("tool_0002", json!({"path": "/not-granted"})),
                target("delete_file", json!({"path": "/gated"})),
                target("tool_0001", json!({"path": "/withheld"})),
                call("call_tool", json!({"server": "files", "tool": "read_file", "arguments": {"path": "/x"}})),
                call("call_tool", json!({"server": "nowhere", "tool": "read_file"})),
                call("fs__read_file", json!({"path": "/direct"})),
            ]),
        )
        .await;
        let steps = &out["steps"];
        // The agent sees the preloaded server's tool and three discovery tools: kilobytes.
        assert_eq!(
            names(&steps[0]),
            ["call_tool", "fs__read_file", "get_tool_info", "list_tools"],
            "{mode}"
        );
        let listed = steps[0]["bytes"].as_u64().unwrap();
        assert!(listed < 8 * 1024, "{mode}: the list is {listed} bytes");
        assert!(
            out["instructions"]
                .as_str()
                .unwrap()
                .contains("The tools of catalog are not listed one by one"),
            "{out}"
        );
        // list_tools: granted tools whose definitions match, paged and bounded.
        let first = text_json(&steps[1]);
        assert_eq!(
            first["total"], 349,
            "351 less the ungranted and the withheld: {first}"
        );
        assert_eq!(first["tools"].as_array().unwrap().len(), 50);
        assert!(first["nextCursor"].is_string());
        let entry = &first["tools"][0];
        assert_eq!(
            entry,
            &json!({"server": "catalog", "tool": "delete_file", "access": "destructive",
                    "requiresApproval": true, "description": "Delete a file."})
        );
        let every = &steps[2];
        let tools: Vec<&str> = every["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["tool"].as_str().unwrap())
            .collect();
        assert_eq!(tools.len(), 349, "{mode}");
        assert!(every["pages"].as_u64().unwrap() >= 7);
        assert!(!tools.contains(&"tool_0001") && !tools.contains(&"tool_0002"));
        let found: Vec<&str> = steps[3]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["tool"].as_str().unwrap())
            .collect();
        assert_eq!(
            found,
            [
                "tool_0034",
                "tool_0340",
                "tool_0341",
                "tool_0342",
                "tool_0343",
                "tool_0344",
                "tool_0345",
                "tool_0346"
            ],
            "{mode}"
        );
        assert!(
            refusal(&steps[4]).contains("listed directly, named fs__<tool>"),
            "{out}"
        );
        // get_tool_info: the full live definition, and only of what list_tools shows.
        let info = text_json(&steps[5]);
        assert_eq!(info["definition"]["name"], "tool_0005");
        assert!(
            info["definition"]["inputSchema"]["properties"]["option_000"].is_object(),
            "{info}"
        );
        assert!(
            refusal(&steps[6]).contains("tool_0001 of server catalog is withheld"),
            "{out}"
        );
        assert!(refusal(&steps[7]).contains("is not granted"), "{out}");
        // call_tool: the target runs through the direct call's pipeline.
        let echoed = text_json(&steps[8]);
        assert_eq!(
            echoed,
            json!({"tool": "read_file", "arguments": {"path": "VIA-DISCOVERY-4417"}})
        );
        assert!(
            refusal(&steps[9]).contains("\"tool_0002\" of server catalog is not granted"),
            "{out}"
        );
        // The approval gate is the target's (about cat__delete_file, never call_tool). This
        // client can give no approval, so the tool is not run: a modern client hears -32021
        // (it lacks the capability), a legacy one a tool error.
        let gated = match steps[10]["error"]["code"].as_i64() {
            Some(code) => {
                assert_eq!(code, -32021, "{mode}: {}", steps[10]);
                steps[10]["error"]["message"].as_str().unwrap()
            }
            None => refusal(&steps[10]),
        };
        assert!(
            gated.contains("cat__delete_file") && gated.contains("approval"),
            "the approval is about the target: {gated}"
        );
        assert!(
            refusal(&steps[11]).contains("cat__tool_0001 is withheld"),
            "{out}"
        );
        assert!(
            refusal(&steps[12]).contains("listed directly"),
            "a preloaded server is not reachable through discovery: {out}"
        );
        assert!(
            refusal(&steps[13]).contains("no server \"nowhere\" is granted"),
            "{out}"
        );
        assert_eq!(steps[14]["isError"], false, "{out}");
    }
    // What ran upstream: the allowed target, twice (one per era); nothing refused reached it.
    assert_eq!(upstream_calls(&big.url).await, ["read_file", "read_file"]);
    assert_eq!(upstream_calls(&small.url).await, ["read_file", "read_file"]);

    let audit = sidecar.audit();
    let via: Vec<&Value> = audit.iter().filter(|a| a["via"] == "call_tool").collect();
    let line = |tool: &str| {
        via.iter()
            .find(|a| a["tool"] == tool)
            .unwrap_or_else(|| panic!("no audit line for {tool}: {audit:?}"))
    };
    let allowed = line("cat__read_file");
    assert_eq!(allowed["server"], "catalog");
    assert_eq!(allowed["raw_tool"], "read_file");
    assert_eq!(allowed["decision"], "allowed");
    assert_eq!(allowed["outcome"], "ok");
    let gated = line("cat__delete_file");
    assert_ne!(gated["decision"], "allowed", "{gated}");
    assert_eq!(gated["outcome"], "refused", "{gated}");
    assert_eq!(line("cat__tool_0001")["decision"], "definition_changed");
    let unresolved = line("tool_0002");
    assert_eq!(unresolved["decision"], "not_granted");
    assert_eq!(unresolved["access"], "destructive", "{unresolved}");
    assert_eq!(unresolved["server"], "catalog");
    assert_eq!(via.len(), 2 * 6, "{via:?}");
    assert!(
        audit
            .iter()
            .any(|a| a["tool"] == "fs__read_file" && a["via"] == "direct")
    );
    assert!(
        !sidecar.log_text().contains("VIA-DISCOVERY-4417"),
        "arguments must never be logged"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_asks_the_agent_is_answered_no_and_the_agent_is_not_asked() {
    let fixtures = Fixtures::load();
    let hostile = fixtures.hostile_server();
    let url = format!("{}/call-faults/mcp", hostile.url);
    let grants = grants_for("faulty", "ff", &url, &["asks_agent"], json!({}), None).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in MODES {
        let out = sidecar_support::agent_answering(
            &sidecar.url,
            mode,
            json!([{"op": "call", "name": "ff__asks_agent", "arguments": {}}]),
            json!(["accept"]),
        )
        .await;
        assert_eq!(
            out["steps"][0]["text"], "asked the agent; the client answered error -32601",
            "{mode}: {out}"
        );
        assert_eq!(out["elicitations"], json!([]), "{mode}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2025_06_18_session_is_asked_on_the_calls_own_stream() {
    use futures::StreamExt;
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let grants = gated_grants(&server.url, &["delete_file"], &["delete_file"]).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    let (june, _) =
        RawLegacyAgent::initialize(&sidecar.url, "2025-06-18", json!({"elicitation": {}})).await;
    let r = june
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "fs__delete_file", "arguments": {"path": "/june"}}}))
        .await;
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = r.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::<Value>::new();
    while events.len() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("the stream goes on")
            .expect("the stream is not over")
            .unwrap();
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                let message: Value = serde_json::from_str(data).unwrap();
                if message["method"] == "elicitation/create" {
                    assert!(
                        message["params"].get("mode").is_none(),
                        "no modes before 2025-11-25: {message}"
                    );
                    assert!(upstream_calls(&server.url).await.is_empty());
                    let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                                        "result": {"action": "accept", "content": {"approve": true}}});
                    let r = june.post(answer).await;
                    assert_eq!(r.status().as_u16(), 202);
                }
                events.push(message);
            }
        }
    }
    assert_eq!(events[0]["method"], "elicitation/create", "{events:?}");
    assert_eq!(events[1]["id"], 2, "{events:?}");
    assert_eq!(events[1]["result"]["isError"], false, "{events:?}");
    assert_eq!(upstream_calls(&server.url).await, ["delete_file"]);
    assert_eq!(decisions(&sidecar, "fs__delete_file"), ["approved"]);
}

/// An agent gives up on a slow call (the Python SDK's `read_timeout_seconds`): a legacy agent
/// sends `notifications/cancelled`, a 2026-07-28 agent closes the call's HTTP request. Either
/// way the sidecar ends the upstream call (a legacy upstream gets `notifications/cancelled` for
/// that request id; a modern one sees the request closed), audits it as outcome unknown, and
/// the next call works.
#[tokio::test(flavor = "multi_thread")]
async fn an_agents_cancellation_reaches_the_upstream_and_the_next_call_works() {
    let fixtures = Fixtures::load();
    for upstream_era in ["legacy", "modern"] {
        let server = fixtures.sdk_server(&[]);
        // A call timeout far beyond the test's patience: an upstream call that ends here ended
        // because it was cancelled, not because it timed out.
        let endpoint = json!({"era": upstream_era, "callTimeoutMs": 120_000,
            "protocolVersion": if upstream_era == "legacy" { "2025-11-25" } else { "2026-07-28" }});
        let grants = grants_for("files", "fs", &server.url, &["read_file"], endpoint, None).await;
        let sidecar = Sidecar::start(Some(&grants));
        sidecar.wait_ready().await;
        let mut slow_paths = Vec::new();
        for mode in MODES {
            // Without and with progress: a JSON answer, or an event stream.
            let plain = format!("/slow/{mode}");
            let streamed = format!("/slow/{mode}/progress");
            let out = agent(
                &sidecar.url,
                mode,
                json!([
                    {"op": "call", "name": "fs__read_file", "arguments": {"path": plain, "sleep": 30}, "timeout": 1},
                    {"op": "call", "name": "fs__read_file", "arguments": {"path": streamed, "sleep": 30}, "timeout": 1, "progress": true},
                    {"op": "call", "name": "fs__read_file", "arguments": {"path": "/after"}},
                ]),
            )
            .await;
            let steps = &out["steps"];
            for gave_up in [&steps[0], &steps[1]] {
                assert!(
                    gave_up["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("timed out")),
                    "{upstream_era}/{mode}: {out}"
                );
            }
            assert_eq!(steps[2]["isError"], false, "{upstream_era}/{mode}: {out}");
            slow_paths.extend([plain, streamed]);
        }
        // The upstream ends each slow call when it hears of the cancellation.
        let deadline = Instant::now() + Duration::from_secs(10);
        let seen = loop {
            let seen = upstream_cancelled(&server.url).await;
            let paths: Vec<&str> = seen["cancelled"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["arguments"]["path"].as_str())
                .collect();
            if slow_paths.iter().all(|p| paths.contains(&p.as_str())) {
                break seen;
            }
            assert!(
                Instant::now() < deadline,
                "{upstream_era}: not every slow call was cancelled upstream: {seen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let cancelled = seen["cancelled"].as_array().unwrap();
        assert_eq!(cancelled.len(), 4, "{upstream_era}: {seen}");
        if upstream_era == "legacy" {
            // The legacy wire's cancel is a notification naming the sidecar's request id.
            let mut named: Vec<&Value> = seen["notifications"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| &n["requestId"])
                .collect();
            let mut ids: Vec<&Value> = cancelled.iter().map(|c| &c["requestId"]).collect();
            named.sort_by_key(|v| v.to_string());
            ids.sort_by_key(|v| v.to_string());
            assert_eq!(named, ids, "{seen}");
        }
        let calls = upstream_calls(&server.url).await;
        assert_eq!(calls.len(), 6, "each call was sent once: {calls:?}");

        let audit = sidecar.audit();
        let outcomes: Vec<&str> = audit
            .iter()
            .map(|a| a["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(
            outcomes.iter().filter(|o| **o == "outcome_unknown").count(),
            4,
            "{upstream_era}: every abandoned call is audited, its outcome unknown: {audit:?}"
        );
        assert_eq!(
            outcomes.iter().filter(|o| **o == "ok").count(),
            2,
            "{audit:?}"
        );
        assert_eq!(outcomes.len(), 6, "{audit:?}");
    }
}

/// Waits until `/readyz` holds `needle`; returns its status and text.
async fn readyz_saying(sidecar: &Sidecar, needle: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = sidecar.readyz().await;
        if text.contains(needle) {
            return (status, text);
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never said {needle:?}: {text}\n{}",
            sidecar.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With the keys the webhook injects, the sidecar obeys only what the operator signed for its
/// AgentSpec: a hand-edited grants.json (a tool added, the signature left as it was) and an
/// older signed document put back are refused — the last good grants stay, a metric counts
/// the reason, /readyz says it — also after a restart; a signed revoked document grants
/// nothing, and every refusal says why.
#[tokio::test(flavor = "multi_thread")]
async fn signed_grants_refuse_a_tampered_or_replayed_document_and_a_revoked_one_grants_nothing() {
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&[]);
    let signer = Signer::new();
    let narrow = grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await;
    let wide = grants_for(
        "files",
        "fs",
        &server.url,
        &["read_file", "write_file"],
        json!({}),
        None,
    )
    .await;
    let mut sidecar = Sidecar::start_signed(&narrow, &signer, 100);
    sidecar.wait_ready().await;
    let listed = |out: &Value| names(&out["steps"][0]);
    let out = agent(&sidecar.url, "auto", json!([{"op": "list"}])).await;
    assert_eq!(listed(&out), ["fs__read_file"]);

    // A tenant's edit: write_file added to grants.json, grants.sig untouched.
    let narrow_sig = signer.sign(&serde_json::to_vec(&narrow).unwrap(), 100);
    sidecar.swap_files(&[
        ("grants.json", serde_json::to_vec(&wide).unwrap()),
        ("grants.sig", narrow_sig.clone()),
    ]);
    let (status, text) = readyz_saying(&sidecar, "last good").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("changed after it was signed"), "{text}");
    let out = agent(
        &sidecar.url,
        "auto",
        json!([{"op": "list"}, {"op": "call", "name": "fs__write_file",
                "arguments": {"path": "/x", "content": "y"}}]),
    )
    .await;
    assert_eq!(listed(&out), ["fs__read_file"], "{out}");
    assert!(
        out["steps"][1]["text"]
            .as_str()
            .unwrap()
            .contains("not granted"),
        "{out}"
    );
    assert!(upstream_calls(&server.url).await.is_empty());
    let metrics = sidecar.metrics().await;
    assert!(
        metrics.contains("mcp_sidecar_grants_rejected_total{reason=\"content_changed\"} 1"),
        "{metrics}"
    );
    assert!(
        sidecar.log_text().contains("keeping the last good grants"),
        "{}",
        sidecar.log_text()
    );

    // Unsigned altogether: refused the same way.
    sidecar.swap_files(&[("grants.json", serde_json::to_vec(&wide).unwrap())]);
    readyz_saying(&sidecar, "it is not signed").await;

    // The operator's newer document is obeyed.
    let wide_json = serde_json::to_vec(&wide).unwrap();
    sidecar.swap_files(&[
        ("grants.json", wide_json.clone()),
        ("grants.sig", signer.sign(&wide_json, 200)),
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sidecar.readyz().await != (200, "ok\n".to_string()) {
        assert!(Instant::now() < deadline, "{:?}", sidecar.readyz().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = agent(&sidecar.url, "auto", json!([{"op": "list"}])).await;
    assert_eq!(listed(&out), ["fs__read_file", "fs__write_file"]);

    // The older signed document put back: a replay, refused; the newer grants stay.
    let narrow_files = [
        ("grants.json", serde_json::to_vec(&narrow).unwrap()),
        ("grants.sig", narrow_sig),
    ];
    sidecar.swap_files(&narrow_files);
    let (status, text) = readyz_saying(&sidecar, "a replay").await;
    assert_eq!(status, 200, "{text}");
    let out = agent(&sidecar.url, "auto", json!([{"op": "list"}])).await;
    assert_eq!(listed(&out), ["fs__read_file", "fs__write_file"]);

    // Restarted with the replayed document in place: the state directory remembers 200.
    sidecar.restart();
    let (status, text) = readyz_saying(&sidecar, "a replay").await;
    assert_eq!(status, 503, "nothing good to fall back on: {text}");
    let metrics = sidecar.metrics().await;
    assert!(
        metrics.contains("mcp_sidecar_grants_rejected_total{reason=\"older_sequence\"} 1"),
        "{metrics}"
    );

    // The AgentSpec is deleted: the operator's signed revoked document grants nothing.
    sidecar.swap_files(&[
        ("grants.json", wide_json.clone()),
        ("grants.sig", signer.sign(&wide_json, 300)),
    ]);
    sidecar.wait_ready().await;
    let revoked = br#"{"schemaVersion":"mcp-operator.dev/grants/v1","revoked":true,"servers":[]}"#;
    sidecar.swap_files(&[
        ("grants.json", revoked.to_vec()),
        ("grants.sig", signer.sign(revoked, 400)),
    ]);
    let (status, text) = readyz_saying(&sidecar, "revoked").await;
    assert_eq!(status, 503, "{text}");
    assert!(
        text.contains("team-a/test-agent is being deleted"),
        "{text}"
    );
    let out = agent(
        &sidecar.url,
        "auto",
        json!([{"op": "list"}, {"op": "call", "name": "fs__read_file", "arguments": {"path": "/x"}}]),
    )
    .await;
    assert_eq!(listed(&out), Vec::<String>::new(), "{out}");
    let refusal = out["steps"][1]["text"].as_str().unwrap();
    assert!(
        refusal.contains("not granted") && refusal.contains("revoked"),
        "{refusal}"
    );
    assert!(upstream_calls(&server.url).await.is_empty());

    // Another AgentSpec's signed grants copied in: refused for what they are.
    let other = Signer {
        keyring: signer.keyring.clone(),
        binding: mcp_operator::grants::signature::Binding {
            agent_spec: "other".into(),
            ..signer.binding.clone()
        },
    };
    sidecar.swap_files(&[
        ("grants.json", wide_json.clone()),
        ("grants.sig", other.sign(&wide_json, 500)),
    ]);
    readyz_saying(&sidecar, "signed for the AgentSpec \"other\"").await;
    // No private key in what the sidecar logs or shows.
    use base64::Engine as _;
    let shown = format!("{}{}", sidecar.log_text(), sidecar.metrics().await);
    for seed in signer.keyring.to_secret_data().values() {
        assert!(!shown.contains(&base64::engine::general_purpose::STANDARD.encode(seed)));
    }
}

/// A sidecar run by hand without keys obeys unsigned grants, and says so at start.
#[tokio::test(flavor = "multi_thread")]
async fn without_verify_keys_the_sidecar_obeys_unsigned_grants_and_warns() {
    let (_server, sidecar) = files_behind_sidecar(&["read_file"]).await;
    assert!(
        sidecar.log_text().contains("no --grants-verify-keys"),
        "{}",
        sidecar.log_text()
    );
}
