//! Shared by the sidecar tests: a sidecar process on kubelet-style grants and credentials
//! directories, grants documents built from a live server, and the SDK clients as agents.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{self, Fixtures};
use mcp_operator::mcp::{self, EndpointPolicy, ServerConnection};

/// A running sidecar on its own grants and credentials directories.
pub struct Sidecar {
    pub child: Child,
    pub url: String,
    pub base: String,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    generation: u32,
    port: u16,
    extra: Vec<String>,
}

/// What a sidecar started with `--grants-verify-keys` is told to trust, and how to sign for it
/// the way the operator does.
pub struct Signer {
    pub keyring: mcp_operator::grants::signature::Keyring,
    pub binding: mcp_operator::grants::signature::Binding,
}

impl Signer {
    /// A fresh keyring, for AgentSpec `test-agent` in `team-a` (uid `uid-test-agent`).
    pub fn new() -> Self {
        Signer {
            keyring: mcp_operator::grants::signature::Keyring::generate(),
            binding: mcp_operator::grants::signature::Binding {
                namespace: "team-a".into(),
                agent_spec: "test-agent".into(),
                uid: "uid-test-agent".into(),
            },
        }
    }

    /// The flags the webhook would inject (but the state directory, which is the sidecar's).
    pub fn args(&self) -> Vec<String> {
        vec![
            format!(
                "--grants-verify-keys={}",
                self.keyring.verifying_keys().to_arg()
            ),
            format!("--agent-namespace={}", self.binding.namespace),
            format!("--agent-uid={}", self.binding.uid),
        ]
    }

    /// `grants.sig` for these exact bytes.
    pub fn sign(&self, grants_json: &[u8], sequence: u64) -> Vec<u8> {
        self.keyring
            .current
            .sign(grants_json, &self.binding, sequence)
            .to_json()
            .into_bytes()
    }
}

impl Sidecar {
    pub fn start(grants: Option<&Value>) -> Sidecar {
        Self::start_with(grants, &[])
    }

    /// A sidecar with more flags (e.g. `--approval-timeout 1s`).
    pub fn start_with(grants: Option<&Value>, extra: &[&str]) -> Sidecar {
        let files: Vec<(&str, Vec<u8>)> = grants
            .map(|doc| vec![("grants.json", serde_json::to_vec(doc).unwrap())])
            .unwrap_or_default();
        Self::start_on(&files, extra)
    }

    /// A sidecar that obeys only what `signer` signs (the flags the webhook injects, and a
    /// state directory of its own), on `grants` signed with `sequence`.
    pub fn start_signed(grants: &Value, signer: &Signer, sequence: u64) -> Sidecar {
        let json = serde_json::to_vec(grants).unwrap();
        let sig = signer.sign(&json, sequence);
        let mut extra = signer.args();
        extra.push("--state-dir=STATE".into());
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        Self::start_on(&[("grants.json", json), ("grants.sig", sig)], &extra)
    }

    /// A sidecar on the ConfigMap files `files` (name, bytes); `--state-dir=STATE` in `extra`
    /// becomes a directory of its own.
    pub fn start_on(files: &[(&str, Vec<u8>)], extra: &[&str]) -> Sidecar {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("grants");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(dir.path().join("creds/secrets")).unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        let mut generation = 0;
        if !files.is_empty() {
            swap_files(&root, &mut generation, files);
        }
        let extra: Vec<String> = extra
            .iter()
            .map(|a| {
                a.replace(
                    "--state-dir=STATE",
                    &format!("--state-dir={}", dir.path().join("state").display()),
                )
            })
            .collect();
        let port = support::free_port();
        let log = dir.path().join("sidecar.log");
        let child = spawn(dir.path(), port, &extra, &log);
        let sidecar = Sidecar {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            base: format!("http://127.0.0.1:{port}"),
            dir,
            log,
            generation,
            port,
            extra,
        };
        sidecar.wait_listening();
        sidecar
    }

    /// Kills the sidecar and starts it again on the same directories (as the kubelet restarts
    /// a container: the emptyDir state stays).
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.dir.path(), self.port, &self.extra, &self.log);
        self.wait_listening();
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the sidecar did not listen: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Replaces the ConfigMap's files at once (grants.json and grants.sig), as the kubelet does.
    pub fn swap_files(&mut self, files: &[(&str, Vec<u8>)]) {
        swap_files(&self.dir.path().join("grants"), &mut self.generation, files);
    }

    pub fn swap_grants(&mut self, bytes: &[u8]) {
        swap_grants(&self.dir.path().join("grants"), &mut self.generation, bytes);
    }

    pub fn write_secret(&self, name: &str, key: &str, value: &str) {
        let dir = self.dir.path().join("creds/secrets").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let tmp = dir.join(format!(".{key}.tmp"));
        std::fs::write(&tmp, value).unwrap();
        std::fs::rename(&tmp, dir.join(key)).unwrap();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The audit lines written so far.
    pub fn audit(&self) -> Vec<Value> {
        self.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "mcp_sidecar::audit")
            .map(|v| v["fields"].clone())
            .collect()
    }

    pub async fn readyz(&self) -> (u16, String) {
        let response = http()
            .get(format!("{}/readyz", self.base))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// The sidecar's Prometheus exposition.
    pub async fn metrics(&self) -> String {
        let response = http()
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap();
        response.text().await.unwrap()
    }

    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (status, text) = self.readyz().await;
            if status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready: {text}\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `mcp-operator sidecar` on the directories under `dir` (its log appended to `log`).
fn spawn(dir: &Path, port: u16, extra: &[String], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    // The AgentSpec's name is test-agent unless the test names it.
    let agent = if extra.iter().any(|a| a.starts_with("--agent=")) {
        vec![]
    } else {
        vec!["--agent", "test-agent"]
    };
    Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .args(["--log-format", "json", "sidecar", "--grants-file"])
        .arg(dir.join("grants/grants.json"))
        .arg("--credentials-dir")
        .arg(dir.join("creds"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--allow-loopback"])
        .args(agent)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the sidecar starts")
}

/// Replaces the grants file as the kubelet does: a new timestamped directory, then an atomic
/// rename of the `..data` symlink (`grants.json` points through it).
pub fn swap_grants(root: &Path, generation: &mut u32, bytes: &[u8]) {
    swap_files(root, generation, &[("grants.json", bytes.to_vec())]);
}

/// Replaces every file of a ConfigMap volume at once, as the kubelet does: a new timestamped
/// directory holding exactly `files`, then an atomic rename of the `..data` symlink (each file
/// is a symlink through it; one no longer there dangles, as a removed key does).
pub fn swap_files(root: &Path, generation: &mut u32, files: &[(&str, Vec<u8>)]) {
    *generation += 1;
    let stamp = format!("..2026_12_01_10_00_00.{:04}", generation);
    std::fs::create_dir_all(root.join(&stamp)).unwrap();
    for (name, bytes) in files {
        std::fs::write(root.join(&stamp).join(name), bytes).unwrap();
    }
    let tmp = root.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp).unwrap();
    std::fs::rename(&tmp, root.join("..data")).unwrap();
    for (name, _) in files {
        if std::fs::symlink_metadata(root.join(name)).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), root.join(name)).unwrap();
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn json_of(response: reqwest::Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).expect("a JSON body")
}

/// Sends a modern-era `tools/call` of `tool` with `arguments` to the sidecar at `url`, as
/// request `id`; `extra`: more params (its `_meta` adds to, or replaces members of, the
/// request's own). The response as it starts.
pub async fn modern_tools_call(
    url: &str,
    id: u64,
    tool: &str,
    arguments: Value,
    extra: Value,
) -> reqwest::Response {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}});
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        match (params["_meta"].as_object_mut(), key.as_str(), value) {
            (Some(meta), "_meta", Value::Object(more)) => meta.extend(more),
            (_, _, value) => params[key] = value,
        }
    }
    let response = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                .to_string(),
        )
        .send()
        .await
        .expect("the sidecar answers");
    assert_eq!(response.status(), 200);
    response
}

pub fn http() -> reqwest::Client {
    mcp_operator::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// One grants document for one server, granting `names` (every tool when empty), with the
/// digests the controller would have published (read from the live server now).
pub async fn grants_for(
    server: &str,
    prefix: &str,
    url: &str,
    names: &[&str],
    endpoint_extra: Value,
    token: Option<&str>,
) -> Value {
    mcp_operator::install_crypto_provider();
    let mut conn = ServerConnection::new(url);
    if endpoint_extra["transport"] == "sse" {
        conn.transport = mcp::TransportKind::Sse;
    }
    conn.endpoint_policy = EndpointPolicy {
        allow_loopback: true,
    };
    if let Some(token) = token {
        conn.credentials.bearer_token = Some(mcp::SecretValue::new(token));
    }
    let mut extra = endpoint_extra;
    if token.is_some() {
        extra["bearerToken"] = json!({"name": "upstream-token", "key": "token"});
    }
    grants_read_with(server, prefix, &conn, names, extra).await
}

/// The same, reading the server with `conn` as it is (its credentials: OAuth, a CA); the
/// endpoint's credential references are in `endpoint_extra`.
pub async fn grants_read_with(
    server: &str,
    prefix: &str,
    conn: &ServerConnection,
    names: &[&str],
    endpoint_extra: Value,
) -> Value {
    let url = conn.url.as_str();
    let report = mcp::read_server(conn)
        .await
        .expect("the fixture server is readable");
    let catalog = report.catalog(&Default::default());
    let mut tools: Vec<Value> = catalog
        .tools
        .iter()
        .filter(|t| names.is_empty() || names.contains(&t.name.as_str()))
        .map(|t| {
            json!({"qualifiedName": format!("{prefix}__{}", t.name), "name": t.name, "access": t.access,
                   "idempotent": t.idempotent, "requiresApproval": false, "definitionDigest": t.definition_digest})
        })
        .collect();
    tools.sort_by(|a, b| {
        a["qualifiedName"]
            .as_str()
            .cmp(&b["qualifiedName"].as_str())
    });
    let mut endpoint = json!({
        "url": url, "transport": "streamable-http", "era": report.era,
        "protocolVersion": report.protocol_version,
        "connectTimeoutMs": 5000, "callTimeoutMs": 10000, "retry": 1,
    });
    for (k, v) in endpoint_extra.as_object().cloned().unwrap_or_default() {
        endpoint[k] = v;
    }
    json!({"schemaVersion": "mcp-operator.dev/grants/v1", "servers": [{
        "name": server, "prefix": prefix, "optional": false, "available": true, "deferred": false,
        "endpoint": endpoint, "tools": tools,
    }]})
}

/// The SDK fixture server and a ready sidecar granting `names` of its tools, as McpServer
/// `files` with prefix `fs`.
pub async fn files_behind_sidecar(names: &[&str]) -> (support::Server, Sidecar) {
    let server = Fixtures::load().sdk_server(&[]);
    let grants = grants_for("files", "fs", &server.url, names, json!({}), None).await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    (server, sidecar)
}

/// Runs an SDK client with `steps`: the Python one (tests/fixtures/sdk_client.py) in `mode`
/// legacy or auto, the TypeScript one (tests/fixtures/ts_client.mjs) for mode `typescript`, or
/// the modern-era Node agent (tests/fixtures/modern_client.mjs) for mode `node-modern`. When a step
/// carries `"trigger": true`, `trigger` runs once the client is listening for list_changed.
pub async fn agent_with<F, Fut>(url: &str, mode: &str, steps: Value, trigger: F) -> Value
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    run_agent(url, mode, steps, None, trigger).await
}

/// An SDK client (Python, or TypeScript for mode `typescript`) with an elicitation handler answering each request with the next of
/// `answers` ("accept", "accept-false", "decline", "cancel"); the output's "elicitations" holds
/// what it was asked.
pub async fn agent_answering(url: &str, mode: &str, steps: Value, answers: Value) -> Value {
    run_agent(url, mode, steps, Some(answers), || async {}).await
}

/// [`agent_answering`], running `trigger` while a "-late" answer is pending.
pub async fn agent_answering_with<F, Fut>(
    url: &str,
    mode: &str,
    steps: Value,
    answers: Value,
    trigger: F,
) -> Value
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    run_agent(url, mode, steps, Some(answers), trigger).await
}

async fn run_agent<F, Fut>(
    url: &str,
    mode: &str,
    steps: Value,
    answers: Option<Value>,
    trigger: F,
) -> Value
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let fixtures = Fixtures::load();
    let mut command = if mode == "node-modern" {
        let mut c = Command::new(fixtures.typescript_sdk().0);
        c.arg(fixtures.fixture("modern_client.mjs"))
            .args([url, &steps.to_string()]);
        c
    } else if mode == "typescript" {
        let (node, sdk) = fixtures.typescript_sdk();
        let mut c = Command::new(node);
        c.arg(fixtures.fixture("ts_client.mjs"))
            .args([url, &steps.to_string()])
            .env("MCP_TS_SDK", sdk);
        if let Some(answers) = &answers {
            c.arg(answers.to_string());
        }
        c
    } else {
        let mut c = Command::new(fixtures.python());
        c.arg(fixtures.fixture("sdk_client.py"))
            .args([url, mode, &steps.to_string()]);
        if let Some(answers) = &answers {
            c.arg(answers.to_string());
        }
        c
    };
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the SDK client starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut trigger = Some(trigger);
    let result = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = rx.recv().await {
            let value: Value = serde_json::from_str(line.trim()).unwrap_or(Value::Null);
            if value.get("listening").is_some() {
                if let Some(t) = trigger.take() {
                    t().await;
                }
                continue;
            }
            if value.get("steps").is_some() {
                return Some(value);
            }
        }
        None
    })
    .await;
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    match result {
        Ok(Some(v)) => v,
        Ok(None) => panic!(
            "the SDK client failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => panic!(
            "the SDK client did not finish within 60s: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

pub async fn agent(url: &str, mode: &str, steps: Value) -> Value {
    agent_with(url, mode, steps, || async {}).await
}

pub fn names(step: &Value) -> Vec<String> {
    step["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

pub async fn upstream_calls(url: &str) -> Vec<String> {
    serde_json::from_value(sdk_control_get(url, "calls").await["calls"].take()).unwrap()
}

/// What the SDK fixture server at `url` saw cancelled: `cancelled` (calls ended in flight, with
/// their request id and arguments) and `notifications` (every notifications/cancelled).
pub async fn upstream_cancelled(url: &str) -> Value {
    sdk_control_get(url, "cancelled").await
}

/// How many MCP requests the SDK fixture server at `url` refused for a missing or wrong bearer
/// token (`--bearer`).
pub async fn upstream_unauthorized(url: &str) -> u64 {
    sdk_control_get(url, "unauthorized").await["unauthorized"]
        .as_u64()
        .expect("a count")
}

async fn sdk_control_get(url: &str, what: &str) -> Value {
    let mut u = url::Url::parse(url).unwrap();
    u.set_path(&format!("/control/{what}"));
    json_of(http().get(u).send().await.unwrap()).await
}

/// What one run of the MCP Inspector's CLI printed: its exit code and its one JSON document
/// (`{"result": …}` on stdout, or `{"error": …}` on stderr).
pub struct InspectorRun {
    pub code: i32,
    pub doc: Value,
    pub stderr: String,
}

/// Runs the MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`) once against `url` in
/// `era` (legacy, modern or auto) with `args` (`--method …`), on the agents' Node and with a
/// home directory of its own (it keeps a catalog and secrets under `~/.mcp-inspector`).
pub async fn inspector(url: &str, era: &str, args: &[&str]) -> InspectorRun {
    let (node, launcher) = Fixtures::load().inspector();
    let home = tempfile::tempdir().unwrap();
    let child = Command::new(node)
        .arg(launcher)
        .args(["--cli", url, "--protocol-era", era, "--format", "json"])
        .args(args)
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the Inspector starts");
    let pid = child.id().to_string();
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(output) = waited else {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        panic!("the Inspector did not finish within 60s: {args:?}");
    };
    let output = output.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let printed = if stdout.trim().is_empty() {
        stderr
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
    } else {
        Some(stdout.as_str())
    };
    let doc = printed
        .and_then(|text| serde_json::from_str(text.trim()).ok())
        .unwrap_or_else(|| panic!("the Inspector printed no JSON document: {stdout}\n{stderr}"));
    InspectorRun {
        code: output.status.code().unwrap_or(-1),
        doc,
        stderr,
    }
}

/// A legacy-era agent written by hand (raw JSON-RPC over HTTP, one session at one revision),
/// for what the SDK clients cannot be made to do: speak an old revision, answer a request on a
/// call's stream themselves.
pub struct RawLegacyAgent {
    url: String,
    version: &'static str,
    session: String,
}

impl RawLegacyAgent {
    /// Initializes a session at `version` declaring `capabilities`; returns the agent and the
    /// initialize answer.
    pub async fn initialize(
        url: &str,
        version: &'static str,
        capabilities: Value,
    ) -> (Self, Value) {
        let response = http()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": version, "capabilities": capabilities,
                    "clientInfo": {"name": "raw-agent", "version": "1"}}})
                .to_string(),
            )
            .send()
            .await
            .expect("the sidecar answers initialize");
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .expect("a session id")
            .to_string();
        let answer = json_of(response).await;
        let agent = RawLegacyAgent {
            url: url.to_string(),
            version,
            session,
        };
        (agent, answer)
    }

    /// One message on the session.
    pub async fn post(&self, body: Value) -> reqwest::Response {
        http()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", self.version)
            .body(body.to_string())
            .send()
            .await
            .expect("the sidecar answers")
    }
}
