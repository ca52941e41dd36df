//! One running stdio server: its process, the `initialize` handshake the bridge makes with it,
//! and the JSON-RPC traffic over its stdin/stdout. The bridge gives every request it forwards
//! an id of its own (and every progress token a token of its own), so any number of clients
//! can share one child without their ids colliding; replies are matched back here.
//!
//! stdout carries only JSON-RPC, one message per line, each at most `max_line_bytes` (a longer
//! one fails the request it answers, the child stays in use). stderr goes to the bridge's log
//! line by line, prefixed with the child's name, each line cut at [`STDERR_LINE_BYTES`].

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::lines::{self, Line};

/// Longest stderr line logged; the rest of it is dropped (a child printing a megabyte of
/// binary to stderr must not flood the log pipeline).
pub const STDERR_LINE_BYTES: usize = 8192;

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Spec {
    pub program: String,
    pub args: Vec<String>,
    pub max_line_bytes: usize,
    /// How long the process gets to answer `initialize`.
    pub startup_timeout: Duration,
}

impl Spec {
    /// The name logs use for this child: the program's file name and its first argument.
    pub fn label(&self) -> String {
        let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
        match self.args.first() {
            Some(first) => format!("{} {}", base(&self.program), base(first)),
            None => base(&self.program),
        }
    }
}

/// Why a forwarded request got no reply from the child.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildError {
    #[error("the server process exited before it answered (it is being restarted)")]
    Exited,
    /// The process was already gone when the request was to be written: it never saw it, so
    /// sending it to the restarted process is safe.
    #[error("the server process had exited; the request was not sent")]
    NotSent,
    #[error("the server's reply was {len} bytes, over the bridge's limit of {max} bytes per line")]
    ReplyTooLong { len: usize, max: usize },
    #[error("the request is {len} bytes as one line, over the bridge's limit of {max} bytes")]
    RequestTooLong { len: usize, max: usize },
    #[error("the server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("could not start the server process: {0}")]
    Spawn(String),
    #[error("the server refused initialize: {0}")]
    Initialize(String),
}

struct Pending {
    reply: oneshot::Sender<Result<Map<String, Value>, ChildError>>,
    /// The client's progress token and where its progress notifications go.
    progress: Option<(Value, mpsc::UnboundedSender<Value>)>,
}

/// A started, initialized child.
pub struct Child {
    pub pid: Option<u32>,
    /// The child's `initialize` result (capabilities, serverInfo, instructions), set once the
    /// handshake is done.
    init: std::sync::OnceLock<Map<String, Value>>,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: std::sync::Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    max_line_bytes: usize,
    /// False once its stdin or stdout is found closed: the process is gone or going.
    alive: std::sync::atomic::AtomicBool,
}

/// The process handle, kept by whoever supervises the child.
pub type Process = tokio::process::Child;

impl Child {
    /// Starts the process and makes the `initialize` handshake, offering `protocol_version`.
    /// Notifications the child sends (other than progress) go to `notes`.
    pub async fn start(
        spec: &Spec,
        protocol_version: &str,
        notes: broadcast::Sender<Value>,
    ) -> Result<(Arc<Child>, Process), ChildError> {
        let mut process = Command::new(&spec.program)
            .args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ChildError::Spawn(format!("{}: {e}", spec.program)))?;
        let pid = process.id();
        let label = spec.label();
        tracing::info!(child = %label, pid, "started the server process");
        let stdin = process.stdin.take().expect("stdin is piped");
        let stdout = process.stdout.take().expect("stdout is piped");
        let stderr = process.stderr.take().expect("stderr is piped");
        tokio::spawn(log_stderr(stderr, label.clone(), pid));

        let child = Arc::new(Child {
            pid,
            init: std::sync::OnceLock::new(),
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            pending: std::sync::Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            max_line_bytes: spec.max_line_bytes,
            alive: std::sync::atomic::AtomicBool::new(true),
        });
        tokio::spawn(read_stdout(
            Arc::clone(&child),
            stdout,
            notes,
            label.clone(),
        ));

        let mut params = Map::new();
        params.insert("protocolVersion".into(), json!(protocol_version));
        params.insert("capabilities".into(), json!({}));
        params.insert(
            "clientInfo".into(),
            json!({"name": "mcp-operator-bridge", "version": env!("CARGO_PKG_VERSION")}),
        );
        let answer = match tokio::time::timeout(
            spec.startup_timeout,
            child.request("initialize", params, None, |_| {}),
        )
        .await
        {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(ChildError::Timeout(spec.startup_timeout)),
        };
        let init = match (answer.get("result"), answer.get("error")) {
            (Some(Value::Object(result)), _) => result.clone(),
            (_, Some(error)) => return Err(ChildError::Initialize(brief(error))),
            _ => return Err(ChildError::Initialize("no result".into())),
        };
        child
            .notify("notifications/initialized", Map::new())
            .await
            .map_err(|_| ChildError::Exited)?;
        let _ = child.init.set(init);
        Ok((child, process))
    }

    /// Sends a request and waits for the child's reply message (with `result` or `error`; its
    /// id is the bridge's own, the caller puts the client's back). A progress token in
    /// `params._meta` is replaced by the bridge's own; notifications for it go to `progress`.
    /// `sent` learns the bridge's id for the request (to cancel it later).
    pub async fn request(
        self: &Arc<Self>,
        method: &str,
        mut params: Map<String, Value>,
        progress: Option<mpsc::UnboundedSender<Value>>,
        sent: impl FnOnce(u64),
    ) -> Result<Map<String, Value>, ChildError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        sent(id);
        let mut route = None;
        if let Some(Value::Object(meta)) = params.get_mut("_meta")
            && let Some(token) = meta.remove("progressToken")
        {
            // Nobody listening for this call's progress: the child is not asked for any.
            if let Some(tx) = progress {
                meta.insert("progressToken".into(), json!(format!("bridge-{id}")));
                route = Some((token, tx));
            }
        }
        let line = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params,
        }))
        .expect("JSON serialises");
        if line.len() > self.max_line_bytes {
            return Err(ChildError::RequestTooLong {
                len: line.len(),
                max: self.max_line_bytes,
            });
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(
            id,
            Pending {
                reply: tx,
                progress: route,
            },
        );
        let mut waiting = Waiting {
            child: Arc::clone(self),
            id,
            done: false,
        };
        if self.write_line(line).await.is_err() {
            waiting.done = true;
            self.pending.lock().expect("pending lock").remove(&id);
            return Err(ChildError::NotSent);
        }
        let reply = rx.await.unwrap_or(Err(ChildError::Exited));
        waiting.done = true;
        reply
    }

    /// Sends a notification (no reply expected).
    pub async fn notify(&self, method: &str, params: Map<String, Value>) -> std::io::Result<()> {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if !params.is_empty() {
            message["params"] = Value::Object(params);
        }
        let line = serde_json::to_vec(&message).expect("JSON serialises");
        if line.len() > self.max_line_bytes {
            return Ok(());
        }
        self.write_line(line).await
    }

    /// Tells the child a forwarded request was cancelled (the client said so or went away).
    pub async fn cancel(&self, id: u64) {
        if self
            .pending
            .lock()
            .expect("pending lock")
            .remove(&id)
            .is_some()
        {
            let mut params = Map::new();
            params.insert("requestId".into(), json!(id));
            let _ = self.notify("notifications/cancelled", params).await;
        }
    }

    /// The child's `initialize` result.
    pub fn init(&self) -> Map<String, Value> {
        self.init.get().cloned().unwrap_or_default()
    }

    async fn write_line(&self, mut line: Vec<u8>) -> std::io::Result<()> {
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        let written = match stdin.as_mut() {
            Some(pipe) if self.is_alive() => match pipe.write_all(&line).await {
                Ok(()) => pipe.flush().await,
                Err(e) => Err(e),
            },
            _ => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        if written.is_err() {
            self.alive.store(false, Ordering::Relaxed);
        }
        written
    }

    /// Whether the process may still read what is written to it.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Closes stdin: a stdio server's signal to exit.
    pub async fn close_stdin(&self) {
        self.stdin.lock().await.take();
    }

    /// Fails every request still waiting (the process is gone).
    pub fn fail_all(&self) {
        let pending: Vec<Pending> = self
            .pending
            .lock()
            .expect("pending lock")
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in pending {
            let _ = p.reply.send(Err(ChildError::Exited));
        }
    }

    fn answer(&self, id: u64, reply: Result<Map<String, Value>, ChildError>) {
        if let Some(p) = self.pending.lock().expect("pending lock").remove(&id) {
            let _ = p.reply.send(reply);
        }
    }

    /// Sends a progress notification to the client whose call it is about, with the client's
    /// own token back in place; gives it back when it is nobody's.
    fn route_progress(&self, mut note: Map<String, Value>) -> Option<Map<String, Value>> {
        let id = note
            .get("params")
            .and_then(|p| p.get("progressToken"))
            .and_then(Value::as_str)
            .and_then(|t| t.strip_prefix("bridge-"))
            .and_then(|t| t.parse::<u64>().ok());
        let pending = self.pending.lock().expect("pending lock");
        let Some((client_token, tx)) = id
            .and_then(|id| pending.get(&id))
            .and_then(|p| p.progress.as_ref())
        else {
            drop(pending);
            return Some(note);
        };
        if let Some(Value::Object(params)) = note.get_mut("params") {
            params.insert("progressToken".into(), client_token.clone());
        }
        let _ = tx.send(Value::Object(note));
        None
    }
}

/// Cancels the request at the child when the caller stops waiting before the reply came.
struct Waiting {
    child: Arc<Child>,
    id: u64,
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            let child = Arc::clone(&self.child);
            let id = self.id;
            tokio::spawn(async move { child.cancel(id).await });
        }
    }
}

fn brief(error: &Value) -> String {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message");
    let message: String = message.chars().take(300).collect();
    match error.get("code").and_then(Value::as_i64) {
        Some(code) => format!("{message} ({code})"),
        None => message,
    }
}

async fn read_stdout(
    child: Arc<Child>,
    stdout: tokio::process::ChildStdout,
    notes: broadcast::Sender<Value>,
    label: String,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let max = child.max_line_bytes;
    loop {
        let line = match lines::read_line(&mut reader, max).await {
            Ok(Line::Complete(bytes)) => bytes,
            Ok(Line::TooLong { len, head, tail }) => {
                match lines::id_in_fragments(&head, &tail) {
                    Some(id) => {
                        tracing::warn!(child = %label, len, max, id, "the server wrote a reply over the line limit; that request fails");
                        child.answer(id, Err(ChildError::ReplyTooLong { len, max }));
                    }
                    None => {
                        tracing::warn!(child = %label, len, max, "the server wrote a line over the limit; dropped")
                    }
                }
                continue;
            }
            Ok(Line::Eof) | Err(_) => break,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(&line) else {
            let shown: String = String::from_utf8_lossy(&line).chars().take(200).collect();
            tracing::warn!(child = %label, line = %shown, "the server wrote a line to stdout that is not a JSON-RPC message; ignored");
            continue;
        };
        let id = message.get("id").cloned();
        match (message.get("method").and_then(Value::as_str), id) {
            // A reply to one of ours.
            (None, Some(id)) => {
                if let Some(id) = id.as_u64() {
                    child.answer(id, Ok(message));
                }
            }
            // A request of the child's own (roots, sampling, elicitation, ping): the bridge
            // declared no client capabilities, so only ping is answered with success.
            (Some(method), Some(id)) => {
                let reply = if method == "ping" {
                    json!({"jsonrpc": "2.0", "id": id, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": -32601,
                        "message": "the bridge does not forward requests from the server to clients",
                    }})
                };
                let line = serde_json::to_vec(&reply).expect("JSON serialises");
                let _ = child.write_line(line).await;
            }
            (Some("notifications/progress"), None) => {
                if let Some(rest) = child.route_progress(message) {
                    let _ = notes.send(Value::Object(rest));
                }
            }
            (Some(_), None) => {
                let _ = notes.send(Value::Object(message));
            }
            (None, None) => {}
        }
    }
    child.alive.store(false, Ordering::Relaxed);
    child.fail_all();
}

async fn log_stderr(stderr: tokio::process::ChildStderr, label: String, pid: Option<u32>) {
    let mut reader = BufReader::new(stderr);
    loop {
        match lines::read_line(&mut reader, STDERR_LINE_BYTES).await {
            Ok(Line::Complete(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                tracing::info!(child = %label, pid, "stderr: {}", text.trim_end());
            }
            Ok(Line::TooLong { len, head, .. }) => {
                let text = String::from_utf8_lossy(&head[..head.len().min(STDERR_LINE_BYTES)]);
                tracing::info!(child = %label, pid, len, "stderr (cut): {}", text.trim_end());
            }
            Ok(Line::Eof) | Err(_) => return,
        }
    }
}

/// Waits for the child to exit after its stdin closed, and kills it after `grace`.
pub async fn stop(child: &Child, process: &mut Process, grace: Duration) {
    child.close_stdin().await;
    if tokio::time::timeout(grace, process.wait()).await.is_err() {
        let _ = process.kill().await;
    }
    child.fail_all();
}
