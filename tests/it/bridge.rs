//! `mcp-operator bridge` in front of real stdio servers nobody here wrote
//! (`@modelcontextprotocol/server-memory`, `server-filesystem`, pinned in
//! tests/fixtures/node-stdio) and server-everything over stdio, spoken to by the official Python
//! SDK client in both eras (directly and through the sidecar) and by our own probe.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::sidecar_support::{Sidecar, agent, grants_for, names};
use crate::support::{Fixtures, StdioServer, free_port, probe};

fn stdio_server(server: StdioServer) -> (String, String) {
    Fixtures::load().stdio_server(server)
}

/// A running bridge, stopped when dropped.
struct Bridge {
    child: Child,
    url: String,
    base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bridge {
    fn start(flags: &[&str], command: &[&str]) -> Bridge {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("bridge.log");
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
            .args(["bridge", "--listen", &listen])
            .args(flags)
            .arg("--")
            .args(command)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the bridge starts");
        let base = format!("http://{listen}");
        let bridge = Bridge {
            child,
            url: format!("{base}/mcp"),
            base,
            log,
            _dir: dir,
        };
        bridge.wait_ready(|_| true);
        bridge
    }

    fn readyz(&self) -> Option<Value> {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", &format!("{}/readyz", self.base)])
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Waits until /readyz says ready and `also` holds of its document.
    fn wait_ready(&self, also: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(doc) = self.readyz()
                && doc["state"] == "ready"
                && also(&doc)
            {
                return doc;
            }
            assert!(
                Instant::now() < deadline,
                "the bridge did not get ready: {:?}\n{}",
                self.readyz(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn memory_command(file: &str) -> Vec<String> {
    let (node, memory) = stdio_server(StdioServer::Memory);
    // `$$` is the shell's pid, which exec hands to node: each process gets its own file.
    vec![
        "sh".into(),
        "-c".into(),
        format!("MEMORY_FILE_PATH={file} exec {node} {memory}"),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn entity(name: &str, observation: &str) -> Value {
    json!({"op": "call", "name": "create_entities", "arguments": {"entities": [
        {"name": name, "entityType": "person", "observations": [observation]}
    ]}})
}

fn read_graph() -> Value {
    json!({"op": "call", "name": "read_graph", "arguments": {}})
}

fn entity_names(step: &Value) -> Vec<String> {
    step["structured"]["entities"]
        .as_array()
        .unwrap_or_else(|| panic!("no entities in {step}"))
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn server_memory_lists_and_calls_in_both_eras_on_one_shared_child() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.jsonl");
    let bridge = Bridge::start(&[], &strs(&memory_command(file.to_str().unwrap())));

    let legacy = agent(
        &bridge.url,
        "legacy",
        json!([{"op": "list"}, entity("ada", "wrote the first program"), read_graph()]),
    )
    .await;
    assert_eq!(legacy["protocolVersion"], "2025-11-25");
    let listed = names(&legacy["steps"][0]);
    for tool in ["create_entities", "read_graph", "search_nodes"] {
        assert!(listed.contains(&tool.to_string()), "{listed:?}");
    }
    assert_eq!(
        legacy["steps"][1]["isError"], false,
        "{}",
        legacy["steps"][1]
    );
    assert_eq!(entity_names(&legacy["steps"][2]), ["ada"]);

    // The modern era, on the same child: it sees what the legacy client wrote.
    let modern = agent(
        &bridge.url,
        "auto",
        json!([{"op": "list"}, entity("grace", "wrote a compiler"), read_graph()]),
    )
    .await;
    assert_eq!(modern["protocolVersion"], "2026-07-28");
    assert_eq!(names(&modern["steps"][0]), listed);
    assert_eq!(entity_names(&modern["steps"][2]), ["ada", "grace"]);

    // The child's stderr is in the bridge's log, prefixed with the child's name.
    let log = bridge.log();
    assert!(
        log.contains("stderr: Knowledge Graph MCP Server running on stdio"),
        "{log}"
    );
}

#[tokio::test]
async fn server_filesystem_reads_a_file_in_both_eras() {
    let (node, filesystem) = stdio_server(StdioServer::Filesystem);
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let file = root_path.join("notes.txt");
    std::fs::write(&file, "bridged over stdio\n").unwrap();
    let bridge = Bridge::start(&[], &[&node, &filesystem, root_path.to_str().unwrap()]);
    for mode in ["legacy", "auto"] {
        let out = agent(
            &bridge.url,
            mode,
            json!([
                {"op": "list"},
                {"op": "call", "name": "read_text_file", "arguments": {"path": file.to_str().unwrap()}},
                {"op": "call", "name": "read_text_file", "arguments": {"path": "/etc/passwd"}},
            ]),
        )
        .await;
        assert!(names(&out["steps"][0]).contains(&"read_text_file".to_string()));
        assert_eq!(
            out["steps"][1]["isError"], false,
            "{mode}: {}",
            out["steps"][1]
        );
        assert_eq!(out["steps"][1]["text"], "bridged over stdio\n", "{mode}");
        // The server's own sandbox still holds behind the bridge.
        assert_eq!(
            out["steps"][2]["isError"], true,
            "{mode}: {}",
            out["steps"][2]
        );
    }
}

/// The bridge passes every MCP request through, not only tools: server-everything over stdio
/// lists and reads its resources, templates and prompts behind it in both eras, and behind a
/// sidecar in front of the bridge the agent gets exactly the granted ones.
#[tokio::test(flavor = "multi_thread")]
async fn resources_and_prompts_of_a_stdio_server_pass_the_bridge_and_the_sidecar() {
    let (node, everything) = stdio_server(StdioServer::Everything);
    let bridge = Bridge::start(&[], &[&node, &everything, "stdio"]);
    let steps = json!([
        {"op": "resources"},
        {"op": "read", "uri": "demo://resource/static/document/architecture.md"},
        {"op": "prompts"},
        {"op": "get_prompt", "name": "simple-prompt"},
    ]);
    for mode in ["legacy", "auto"] {
        let out = agent(&bridge.url, mode, steps.clone()).await;
        let s = &out["steps"];
        let resources: Vec<String> = serde_json::from_value(s[0]["resources"].clone()).unwrap();
        assert!(
            resources.contains(&"demo://resource/static/document/architecture.md".to_string()),
            "{mode}: {out}"
        );
        assert!(
            s[0]["templates"].as_array().is_some_and(|t| !t.is_empty()),
            "{mode}: {out}"
        );
        assert_eq!(
            s[1]["contents"][0]["uri"], "demo://resource/static/document/architecture.md",
            "{mode}: {out}"
        );
        let prompts: Vec<String> = serde_json::from_value(s[2]["prompts"].clone()).unwrap();
        assert!(
            prompts.contains(&"simple-prompt".to_string()),
            "{mode}: {out}"
        );
        assert!(
            s[3]["messages"].as_array().is_some_and(|m| !m.is_empty()),
            "{mode}: {out}"
        );
    }

    let mut grants = grants_for("everything", "ev", &bridge.url, &["echo"], json!({}), None).await;
    grants["schemaVersion"] = json!("mcp-operator.dev/grants/v2");
    grants["servers"][0]["resources"] =
        json!([{"allow": ["demo://resource/static/document/architecture.md"]}]);
    grants["servers"][0]["prompts"] = json!([{"allow": ["simple-prompt"]}]);
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in ["legacy", "auto"] {
        let out = agent(
            &sidecar.url,
            mode,
            json!([
                {"op": "resources"},
                {"op": "read", "uri": "ev+demo://resource/static/document/architecture.md"},
                {"op": "read", "uri": "ev+demo://resource/static/document/features.md"},
                {"op": "prompts"},
            ]),
        )
        .await;
        let s = &out["steps"];
        assert_eq!(
            s[0]["resources"],
            json!(["ev+demo://resource/static/document/architecture.md"]),
            "{mode}: {out}"
        );
        assert_eq!(s[0]["templates"], json!([]), "{mode}: {out}");
        assert!(
            s[1]["contents"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{mode}: {out}"
        );
        assert_eq!(s[2]["error"]["code"], -32002, "{mode}: {out}");
        assert_eq!(
            s[3]["prompts"],
            json!(["ev__simple-prompt"]),
            "{mode}: {out}"
        );
    }
}

#[tokio::test]
async fn the_probe_sees_the_real_catalogue_with_annotations() {
    let (node, filesystem) = stdio_server(StdioServer::Filesystem);
    let root = tempfile::tempdir().unwrap();
    let bridge = Bridge::start(&[], &[&node, &filesystem, root.path().to_str().unwrap()]);
    let report = probe(&[&bridge.url]);
    report.assert_ok();
    assert_eq!(report.doc["era"], "modern", "{}", report.doc);
    let tools = report.doc["catalog"]["tools"].as_array().unwrap();
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {tools:?}"))
    };
    assert_eq!(tool("read_text_file")["annotations"]["readOnlyHint"], true);
    assert_eq!(tool("read_text_file")["access"], "read");
    assert_eq!(tool("write_file")["annotations"]["readOnlyHint"], false);
    assert_ne!(tool("write_file")["access"], "read");
    assert!(report.tool_count() >= 10, "{}", report.doc);
}

#[tokio::test]
async fn a_killed_child_is_restarted_and_the_next_request_works() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.jsonl");
    let bridge = Bridge::start(&[], &strs(&memory_command(file.to_str().unwrap())));
    let before = agent(
        &bridge.url,
        "legacy",
        json!([{"op": "list"}, entity("ada", "x")]),
    )
    .await;
    assert_eq!(before["steps"][1]["isError"], false);

    let first = bridge.wait_ready(|_| true);
    let pid = first["pid"].as_u64().expect("a pid while ready");
    // A session opened before the crash, used the instant after it: the request is written
    // before the bridge has noticed the exit, and still gets its answer, because read_graph
    // is read-only by the server's own annotations (the SDK client listed them above).
    mcp_operator::install_crypto_provider();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |body: Value, session: Option<String>| {
        let mut request = http
            .post(&bridge.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let opened = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        None,
    )
    .await
    .unwrap();
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let right_after = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "read_graph", "arguments": {}}}),
        Some(session),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_slice(&right_after.bytes().await.unwrap()).unwrap();
    assert!(answer.get("result").is_some(), "{answer}");

    // The very next request, in either era, works on the restarted child (the memory file
    // keeps what the first one stored).
    for mode in ["legacy", "auto"] {
        let after = agent(&bridge.url, mode, json!([read_graph()])).await;
        assert_eq!(entity_names(&after["steps"][0]), ["ada"], "{mode}");
    }
    let now = bridge.wait_ready(|_| true);
    assert_ne!(now["pid"].as_u64(), Some(pid));
    assert_eq!(now["restarts"], 1, "{now}");
    assert!(bridge.log().contains("the server process exited"));
}

#[tokio::test]
async fn a_10_mb_request_is_refused_and_the_bridge_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.jsonl");
    let bridge = Bridge::start(&[], &strs(&memory_command(file.to_str().unwrap())));
    let huge = "x".repeat(10 * 1024 * 1024);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "create_entities", "arguments": {"entities": [
            {"name": "big", "entityType": "t", "observations": [huge]}
        ]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
    }});
    mcp_operator::install_crypto_provider();
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(&bridge.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "create_entities")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let error: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(error["error"]["code"], -32600, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds 4194304 bytes"),
        "{error}"
    );
    let after = agent(&bridge.url, "auto", json!([read_graph()])).await;
    assert_eq!(entity_names(&after["steps"][0]), Vec::<String>::new());
    assert_eq!(bridge.wait_ready(|_| true)["restarts"], 0);
}

#[tokio::test]
async fn a_reply_over_the_line_limit_fails_that_request_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.jsonl");
    let bridge = Bridge::start(
        &["--max-line-bytes", "65536"],
        &strs(&memory_command(file.to_str().unwrap())),
    );
    // Three entities of 30 kB each: every request fits, the whole graph (90 kB) does not.
    // (Small: the steps reach the SDK client as one argument, at most 128 KiB.)
    let third = "y".repeat(30 * 1024);
    let steps = json!([
        entity("a", &third), entity("b", &third), entity("c", &third),
        read_graph(),
        {"op": "call", "name": "open_nodes", "arguments": {"names": ["nobody"]}},
    ]);
    let out = agent(&bridge.url, "legacy", steps).await;
    for i in 0..3 {
        assert_eq!(out["steps"][i]["isError"], false, "{}", out["steps"][i]);
    }
    let refused = &out["steps"][3]["error"];
    assert_eq!(refused["code"], -32603, "{}", out["steps"][3]);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("over the bridge's limit of 65536 bytes"),
        "{refused}"
    );
    // The same child answers the next request.
    assert_eq!(out["steps"][4]["isError"], false, "{}", out["steps"][4]);
    assert_eq!(bridge.wait_ready(|_| true)["restarts"], 0);
}

#[tokio::test]
async fn per_session_children_are_separate() {
    let dir = tempfile::tempdir().unwrap();
    // Each child its own memory file (`$$`: the child's pid), so state is per process.
    let file = format!("{}/memory-$$.jsonl", dir.path().display());
    let bridge = Bridge::start(&["--per-session"], &strs(&memory_command(&file)));
    let alice = agent(
        &bridge.url,
        "legacy",
        json!([entity("alice", "first session"), read_graph()]),
    )
    .await;
    assert_eq!(entity_names(&alice["steps"][1]), ["alice"]);
    let bob = agent(
        &bridge.url,
        "legacy",
        json!([read_graph(), entity("bob", "second session"), read_graph()]),
    )
    .await;
    assert_eq!(entity_names(&bob["steps"][0]), Vec::<String>::new());
    assert_eq!(entity_names(&bob["steps"][2]), ["bob"]);
    // Three processes wrote files of their own or none: the shared child (modern era,
    // readiness) never saw a call; the two sessions each wrote one.
    let written = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(written, 2);
    let started = bridge.log().matches("started the server process").count();
    assert_eq!(started, 3, "{}", bridge.log());
}

#[tokio::test]
async fn sigterm_stops_the_bridge_and_its_child() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.jsonl");
    let mut bridge = Bridge::start(&[], &strs(&memory_command(file.to_str().unwrap())));
    let pid = bridge.wait_ready(|_| true)["pid"].as_u64().unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &bridge.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = bridge.child.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "the bridge did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit}: {}", bridge.log());
    // Gone, or a zombie waiting for this container's init to reap it: not running.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with('Z'));
    assert!(!running, "the child {pid} outlived the bridge: {state}");
    assert!(bridge.log().contains("stopped the server process"));
}

#[test]
fn fixtures_name_the_stdio_servers() {
    // The stdio servers come from the same installer, and the same installed.env, as every
    // other fixture.
    for server in [
        StdioServer::Memory,
        StdioServer::Filesystem,
        StdioServer::Everything,
    ] {
        let (node, path) = stdio_server(server);
        assert!(PathBuf::from(&path).is_file(), "{server:?}: {path}");
        assert!(!node.is_empty(), "{server:?}: no node");
    }
}

#[test]
fn with_a_token_file_the_bridge_answers_only_clients_that_send_the_token() {
    // What a stdio McpServer's pod runs: no token, a wrong one, or another tenant's McpServer
    // pointed at the ClusterIP are all refused before the server sees anything.
    let (node, memory) = stdio_server(StdioServer::Memory);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "the-operators-token\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "a-guess").unwrap();
    let bridge = Bridge::start(
        &["--bearer-token-file", token.to_str().unwrap()],
        &[&node, &memory],
    );
    probe(&[&bridge.url]).assert_fails_with("Unauthorized");
    probe(&[&bridge.url, "--bearer-token-file", wrong.to_str().unwrap()])
        .assert_fails_with("Unauthorized");
    let report = probe(&[&bridge.url, "--bearer-token-file", token.to_str().unwrap()]);
    report.assert_ok();
    assert!(
        !report.doc["catalog"]["tools"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{}",
        report.doc
    );
    // Health stays open to the kubelet's probes.
    let health = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{}/healthz", bridge.base))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&health.stdout), "200");
    // The token never reaches the log.
    assert!(!bridge.log().contains("the-operators-token"));
    assert!(bridge.log().contains("NoToken") || bridge.log().contains("WrongToken"));
}

/// A session on the shared child outlives the bridge process that issued it: another process
/// given the same token (the bridge restarted in its pod, or another replica) serves it; one
/// with another token, or after the session was DELETEd there, asks for a new one (404).
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_session_is_served_by_another_bridge_process_with_the_same_token() {
    let (node, memory) = stdio_server(StdioServer::Memory);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "the-operators-token\n").unwrap();
    let other_token = dir.path().join("other");
    std::fs::write(&other_token, "another-token").unwrap();
    let flags = ["--bearer-token-file", token.to_str().unwrap()];
    let command = [node.as_str(), memory.as_str()];
    let client = crate::sidecar_support::http();
    let post = |url: String, bearer: &'static str, session: Option<String>, body: Value| {
        let client = client.clone();
        async move {
            let mut r = client
                .post(url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("authorization", format!("Bearer {bearer}"))
                .header("mcp-protocol-version", "2025-06-18");
            if let Some(s) = session {
                r = r.header("mcp-session-id", s);
            }
            r.body(body.to_string()).send().await.unwrap()
        }
    };
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let session = {
        let first = Bridge::start(&flags, &command);
        let r = post(
            first.url.clone(),
            "the-operators-token",
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
        r.headers()["mcp-session-id"].to_str().unwrap().to_string()
        // The first bridge stops here.
    };
    let second = Bridge::start(&flags, &command);
    let r = post(
        second.url.clone(),
        "the-operators-token",
        Some(session.clone()),
        list.clone(),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200, "{}", second.log());
    let listed: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert!(listed["result"]["tools"].as_array().is_some(), "{listed}");

    let stranger = Bridge::start(
        &["--bearer-token-file", other_token.to_str().unwrap()],
        &command,
    );
    let r = post(
        stranger.url.clone(),
        "another-token",
        Some(session.clone()),
        list.clone(),
    )
    .await;
    assert_eq!(r.status().as_u16(), 404);

    let deleted = client
        .delete(&second.url)
        .header("authorization", "Bearer the-operators-token")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 200);
    let r = post(
        second.url.clone(),
        "the-operators-token",
        Some(session),
        list,
    )
    .await;
    assert_eq!(r.status().as_u16(), 404);
}
