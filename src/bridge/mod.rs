//! `mcp-operator bridge`: serves a stdio MCP server over Streamable HTTP, in both protocol
//! eras, so anything that speaks to remote servers (the controller, the sidecar, any client)
//! can use a server that only speaks stdio. The pod of an McpServer with `spec.stdio` runs it;
//! people run it locally too. Depends on [`crate::mcp`] and [`crate::core`] only.
//!
//! ```text
//! client ─ POST /mcp ─ serving (guard, body ≤ max line, era) ─┬ initialize / server/discover / ping: answered here
//!                                                             └ anything else ─► slot ─► child (stdin line)
//!        ◄─ JSON or SSE (progress) ◄── reply matched by the bridge's id ◄── child (stdout line)
//! GET /mcp (legacy) · subscriptions/listen (modern) ◄── the child's notifications
//! /healthz: serving · /readyz: the shared child is started and initialized
//! ```
//!
//! - [`child`]: one process, its handshake and its JSON-RPC traffic (ids and tokens remapped).
//! - [`slot`]: one supervised child: restart with backoff, requests wait for the ready one.
//! - [`lines`]: bounded newline-delimited reading.
//! - [`token`]: with `--bearer-token-file`, only clients that send its token are served.
//!
//! One shared child serves everyone unless `--per-session`: then every legacy session gets a
//! child of its own (stateful servers: one client's memory is not another's), and the shared
//! child serves the modern era, which has no sessions, and readiness.
//!
//! A session on the shared child is bound to no process's state, so its id is sealed
//! ([`serving::SealKey`], derived from `--bearer-token-file`'s token): a bridge restarted in the
//! same pod, or another replica given the same token, serves the ids it did not issue. Sessions
//! with a child of their own end with it (404, the client initializes again).

pub mod child;
pub mod lines;
pub mod slot;
pub mod token;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorCode;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::core::Duration as FlagDuration;
use crate::mcp::serving::{
    self, Listen, META_MODERN_PREFIX, META_SERVER_INFO, RequestEra, SESSION_HEADER,
    SESSION_NOT_FOUND, SealKey, accepts_sse, error_response, header_str, json_response,
    listen_messages, rpc_error, rpc_result, sse_event, sse_response,
};

use self::child::{ChildError, Spec};
use self::slot::Slot;

/// Flags of `mcp-operator bridge` (the McpServer reconciler's Deployment relies on them).
#[derive(clap::Args, Debug, Clone)]
pub struct BridgeArgs {
    /// Address clients connect to (`http://<listen>/mcp`). On a loopback address the Host
    /// header must name this machine (DNS rebinding).
    #[arg(long, env = "MCP_BRIDGE_LISTEN", default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// One server process per MCP session, for servers that keep state per client.
    #[arg(long, env = "MCP_BRIDGE_PER_SESSION")]
    pub per_session: bool,
    /// Longest JSON-RPC message, in bytes, either way: a request body over it is refused, a
    /// reply line over it fails its request (the bridge and the server stay up).
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_line_bytes: usize,
    /// How long a request waits for the server: to be started (or restarted) and to reply.
    #[arg(long, default_value = "5m")]
    pub request_timeout: FlagDuration,
    /// How long a server process gets to answer `initialize` (npx may download first).
    #[arg(long, default_value = "2m")]
    pub startup_timeout: FlagDuration,
    /// With --per-session: most sessions (processes) at once; beyond it initialize is refused.
    #[arg(long, default_value_t = 64)]
    pub max_sessions: usize,
    /// A session unused this long is ended (with --per-session, its process stopped).
    #[arg(long, default_value = "30m")]
    pub session_idle_timeout: FlagDuration,
    /// How long in-flight requests get to finish at SIGTERM before the processes are stopped.
    #[arg(long, default_value = "20s")]
    pub drain_timeout: FlagDuration,
    /// Serve only clients that send this file's content as a bearer token (read again for
    /// every request, so a rotated Secret takes effect without a restart). A stdio McpServer's
    /// pod mounts the operator's `<name>-mcp-token` Secret here.
    #[arg(long, env = "MCP_BRIDGE_BEARER_TOKEN_FILE")]
    pub bearer_token_file: Option<std::path::PathBuf>,
    /// The server to run, and its arguments: `-- npx -y @modelcontextprotocol/server-memory`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// Copies the running binary to `to`, executable by everyone (the server container may run as
/// any user): written beside `to` and renamed, so a half-written file is never run.
pub fn copy_self(to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let me = std::env::current_exe()?;
    let partial = to.with_extension("partial");
    std::fs::copy(&me, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, to)
}

/// Why the bridge could not run.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving failed: {0}")]
    Serve(std::io::Error),
    #[error("--bearer-token-file: {0}")]
    Token(String),
}

impl BridgeError {
    /// A short machine-readable reason for the log line.
    pub fn reason(&self) -> &'static str {
        match self {
            BridgeError::Listen { .. } => "ListenFailed",
            BridgeError::Serve(_) => "ServeFailed",
            BridgeError::Token(_) => "TokenUnreadable",
        }
    }
}

/// Most sessions kept on the shared process (beyond, the least recently used is forgotten here;
/// its sealed id opens again).
const MAX_SHARED_SESSIONS: usize = 4096;
/// Most ended shared sessions remembered (DELETE, idle): their ids do not open again in this
/// process.
const MAX_ENDED: usize = 4096;
/// What a sealed shared-session id is for (the tag covers it).
const SESSION_PURPOSE: &[u8] = b"mcp-operator/bridge-session";

/// What a shared session's id carries: enough to serve it in a process that did not issue it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct SharedSession {
    v: u8,
    /// Random: two sessions differ, and ending one names it.
    id: String,
    protocol: String,
}

/// A client's request: its session (or "" in the modern era) and its id as JSON text.
type FlightKey = (String, String);

struct Session {
    protocol_version: String,
    /// Its own child (per-session mode).
    slot: Option<Arc<Slot>>,
    last_used: Instant,
}

/// The bridge's state, shared by the handlers.
struct Bridge {
    spec: Spec,
    per_session: bool,
    check_host: bool,
    /// With --bearer-token-file: the token every request must carry.
    token: Option<token::RequiredToken>,
    max_line_bytes: usize,
    request_timeout: Duration,
    max_sessions: usize,
    shared: Arc<Slot>,
    sessions: std::sync::Mutex<HashMap<String, Session>>,
    /// Seals shared-session ids.
    seal: SealKey,
    /// Shared sessions ended in this process (their ids), oldest first.
    ended: std::sync::Mutex<std::collections::VecDeque<String>>,
    /// Forwarded requests a client may cancel: (session or "", client id) → (child, bridge id).
    in_flight: std::sync::Mutex<HashMap<FlightKey, (Arc<child::Child>, u64)>>,
    shutdown: watch::Receiver<bool>,
    /// Tools the server lists as read-only or idempotent (from the tools/list replies that
    /// passed through): a call to one may be sent again after a crash.
    safe_tools: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Runs the bridge until SIGTERM or Ctrl-C, then drains and stops every server process.
pub async fn run(args: BridgeArgs) -> Result<(), BridgeError> {
    let mut command = args.command.clone().into_iter();
    let spec = Spec {
        program: command.next().expect("clap requires a command"),
        args: command.collect(),
        max_line_bytes: args.max_line_bytes,
        startup_timeout: args.startup_timeout.as_std(),
    };
    let token = args
        .bearer_token_file
        .as_deref()
        .map(token::RequiredToken::new);
    // The token is the secret every replica and restart of this bridge shares: shared-session
    // ids sealed with a key derived from it outlive the process.
    let seal = match &token {
        Some(t) => SealKey::derived(
            t.check().map_err(BridgeError::Token)?.as_bytes(),
            "bridge shared sessions",
        ),
        None => SealKey::generate(),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| BridgeError::Listen {
            addr: args.listen,
            source,
        })?;
    let (shutdown_tx, shutdown) = watch::channel(false);
    let bridge = Arc::new(Bridge {
        shared: Slot::start(spec.clone(), serving::SERVED_LEGACY_VERSIONS[0].to_string()),
        spec,
        per_session: args.per_session,
        check_host: args.listen.ip().is_loopback(),
        token,
        max_line_bytes: args.max_line_bytes,
        request_timeout: args.request_timeout.as_std(),
        max_sessions: args.max_sessions,
        sessions: std::sync::Mutex::new(HashMap::new()),
        seal,
        ended: std::sync::Mutex::new(Default::default()),
        in_flight: std::sync::Mutex::new(HashMap::new()),
        shutdown: shutdown.clone(),
        safe_tools: std::sync::Mutex::new(std::collections::HashSet::new()),
    });
    tracing::info!(listen = %listener.local_addr().unwrap_or(args.listen), per_session = args.per_session, bearer_token = bridge.token.is_some(), "serving the stdio server over Streamable HTTP at /mcp");
    // Sessions clients never DELETE end after the idle timeout, in both modes.
    tokio::spawn(reap_idle(
        Arc::clone(&bridge),
        args.session_idle_timeout.as_std(),
    ));
    let router = router(&bridge);
    let mut server = tokio::spawn(serving::serve(listener, router, shutdown));
    let served = tokio::select! {
        served = &mut server => Some(served),
        _ = crate::mcp::serving::terminated() => None,
    };
    if let Some(served) = served {
        stop_all(&bridge).await;
        return match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(BridgeError::Serve(e)),
            Err(e) => Err(BridgeError::Serve(std::io::Error::other(e))),
        };
    }
    tracing::info!("stopping: finishing in-flight requests");
    let _ = shutdown_tx.send(true);
    if tokio::time::timeout(args.drain_timeout.as_std(), &mut server)
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?args.drain_timeout.as_std(), "requests still running after the drain timeout; stopping anyway");
        server.abort();
    }
    stop_all(&bridge).await;
    tracing::info!("stopped");
    Ok(())
}

async fn stop_all(bridge: &Bridge) {
    let slots: Vec<Arc<Slot>> = bridge
        .sessions
        .lock()
        .expect("sessions lock")
        .drain()
        .filter_map(|(_, s)| s.slot)
        .collect();
    let mut stops: Vec<_> = slots.iter().map(|s| s.stop()).collect();
    stops.push(bridge.shared.stop());
    futures::future::join_all(stops).await;
}

async fn reap_idle(bridge: Arc<Bridge>, idle: Duration) {
    let mut tick = tokio::time::interval(Duration::from_secs(30).min(idle));
    loop {
        tick.tick().await;
        let idle_slots: Vec<(String, Arc<Slot>)> = {
            let mut sessions = bridge.sessions.lock().expect("sessions lock");
            let old: Vec<String> = sessions
                .iter()
                .filter(|(_, s)| s.last_used.elapsed() >= idle)
                .map(|(id, _)| id.clone())
                .collect();
            old.into_iter()
                .filter_map(|id| {
                    let s = sessions.remove(&id)?;
                    if s.slot.is_none() {
                        bridge.end_shared(&id);
                    }
                    Some((id, s.slot?))
                })
                .collect()
        };
        // (Sessions of the shared process were removed above; only their own processes stop.)
        for (_, slot) in idle_slots {
            tracing::info!(
                ?idle,
                "ending a session unused for the idle timeout; stopping its process"
            );
            slot.stop().await;
        }
    }
}

impl Bridge {
    /// The session `token` names, as this process knows it or (a shared session issued by
    /// another process of this bridge) as its sealed id says: its protocol version.
    fn session_version(&self, token: &str) -> Option<String> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(s) = sessions.get_mut(token) {
            s.last_used = Instant::now();
            return Some(s.protocol_version.clone());
        }
        if self.per_session {
            return None;
        }
        let claims: SharedSession = self.seal.open(SESSION_PURPOSE, token).ok()?;
        if claims.v != 1
            || self
                .ended
                .lock()
                .expect("ended lock")
                .contains(&token.to_string())
        {
            return None;
        }
        forget_oldest_shared(&mut sessions);
        sessions.insert(
            token.to_string(),
            Session {
                protocol_version: claims.protocol.clone(),
                slot: None,
                last_used: Instant::now(),
            },
        );
        Some(claims.protocol)
    }

    /// A shared session ended here: its id does not open again in this process.
    fn end_shared(&self, token: &str) {
        let mut ended = self.ended.lock().expect("ended lock");
        if ended.len() >= MAX_ENDED {
            ended.pop_front();
        }
        ended.push_back(token.to_string());
    }

    /// Every request to /mcp: the browser guards (Host on loopback, Origin), then the token.
    /// Some: the refusal to send.
    fn refusal(&self, headers: &HeaderMap) -> Option<Response> {
        if let Err(refused) = serving::guard(self.check_host, headers) {
            return Some(refused);
        }
        let token = self.token.as_ref()?;
        token.authorize(headers).err().map(|r| *r)
    }
}

fn router(bridge: &Arc<Bridge>) -> axum::Router {
    axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(post)
                .get(get_stream)
                .delete(delete_session),
        )
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(readyz))
        .with_state(Arc::clone(bridge))
}

async fn readyz(State(b): State<Arc<Bridge>>) -> Response {
    let (status, state, reason, pid) = match b.shared.state() {
        slot::State::Ready(child) => (StatusCode::OK, "ready", None, child.pid),
        slot::State::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting", None, None),
        slot::State::Restarting { reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "restarting",
            Some(reason),
            None,
        ),
        slot::State::Stopped => (StatusCode::SERVICE_UNAVAILABLE, "stopped", None, None),
    };
    let sessions = b.sessions.lock().expect("sessions lock").len();
    json_response(
        status,
        &json!({
            "state": state,
            "reason": reason,
            "pid": pid,
            "restarts": b.shared.restarts(),
            "sessions": sessions,
        }),
    )
}

// ─── POST ────────────────────────────────────────────────────────────────────────────────

async fn post(State(b): State<Arc<Bridge>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(refused) = b.refusal(&headers) {
        return refused;
    }
    let incoming = match serving::read_message(body, b.max_line_bytes).await {
        Ok(m) => m,
        Err(refused) => return refused,
    };
    let (id, params) = (incoming.id, incoming.params);
    let Some(method) = incoming.method else {
        // A client's response: the bridge forwards no server requests, so none is awaited.
        return StatusCode::ACCEPTED.into_response();
    };
    let era = match serving::era_of(&headers, &method, &params, id.as_ref(), |session| {
        b.session_version(session)
    }) {
        Ok(era) => era,
        Err(refused) => return refused,
    };
    let Some(id) = id else {
        notification(&b, &era, &method, params).await;
        return StatusCode::ACCEPTED.into_response();
    };
    match method.as_str() {
        "initialize" => initialize(&b, &id, &params).await,
        "server/discover" => discover(&b, &id).await,
        "ping" => {
            let mut result = Map::new();
            if era == RequestEra::Modern {
                result.insert("resultType".into(), json!("complete"));
            }
            json_response(StatusCode::OK, &rpc_result(&id, result))
        }
        "subscriptions/listen" if era == RequestEra::Modern => listen(&b, id, &params),
        _ => forward(b, era, id, method, params, &headers).await,
    }
}

/// The slot a request of this era goes to.
fn slot_for(b: &Bridge, era: &RequestEra) -> Arc<Slot> {
    if let RequestEra::Legacy(Some(session)) = era
        && let Some(slot) = b
            .sessions
            .lock()
            .expect("sessions lock")
            .get(session)
            .and_then(|s| s.slot.clone())
    {
        return slot;
    }
    Arc::clone(&b.shared)
}

fn unavailable(id: &Value, why: &str) -> Response {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &rpc_error(id, ErrorCode::INTERNAL_ERROR.0 as i64, why, None),
    )
}

async fn initialize(b: &Bridge, id: &Value, params: &Map<String, Value>) -> Response {
    let version = serving::negotiated_legacy_version(params);
    let slot = if b.per_session {
        if b.sessions.lock().expect("sessions lock").len() >= b.max_sessions {
            return unavailable(
                id,
                &format!(
                    "the bridge already runs {} sessions, each with its own server process (--max-sessions); end one with DELETE",
                    b.max_sessions
                ),
            );
        }
        Slot::start(b.spec.clone(), version.to_string())
    } else {
        // Sessions on the shared process cost a map entry: past the bound the least recently
        // used is forgotten (its client gets 404 and initializes again, as every client does).
        forget_oldest_shared(&mut b.sessions.lock().expect("sessions lock"));
        Arc::clone(&b.shared)
    };
    let child = match slot.ready(b.request_timeout).await {
        Ok(child) => child,
        Err(why) => {
            if b.per_session {
                slot.stop().await;
            }
            return unavailable(id, &why);
        }
    };
    let init = child.init();
    let session = if b.per_session {
        serving::new_session_id()
    } else {
        b.seal.seal(
            SESSION_PURPOSE,
            &SharedSession {
                v: 1,
                id: serving::new_session_id(),
                protocol: version.to_string(),
            },
        )
    };
    b.sessions.lock().expect("sessions lock").insert(
        session.clone(),
        Session {
            protocol_version: version.to_string(),
            slot: b.per_session.then_some(slot),
            last_used: Instant::now(),
        },
    );
    let mut result = Map::new();
    result.insert("protocolVersion".into(), json!(version));
    for key in ["capabilities", "serverInfo", "instructions"] {
        if let Some(value) = init.get(key) {
            result.insert(key.into(), value.clone());
        }
    }
    result.entry("capabilities").or_insert_with(|| json!({}));
    let mut response = json_response(StatusCode::OK, &rpc_result(id, result));
    response.headers_mut().insert(
        SESSION_HEADER,
        HeaderValue::from_str(&session).expect("hex and sealed ids are header values"),
    );
    response
}

/// Past [`MAX_SHARED_SESSIONS`], the least recently used session is forgotten here (a shared
/// one's sealed id opens again when its client comes back).
fn forget_oldest_shared(sessions: &mut HashMap<String, Session>) {
    if sessions.len() >= MAX_SHARED_SESSIONS
        && let Some(oldest) = sessions
            .iter()
            .filter(|(_, s)| s.slot.is_none())
            .min_by_key(|(_, s)| s.last_used)
            .map(|(id, _)| id.clone())
    {
        sessions.remove(&oldest);
    }
}

async fn discover(b: &Bridge, id: &Value) -> Response {
    let child = match b.shared.ready(b.request_timeout).await {
        Ok(child) => child,
        Err(why) => return unavailable(id, &why),
    };
    let init = child.init();
    let mut meta = Map::new();
    if let Some(info) = init.get("serverInfo") {
        meta.insert(META_SERVER_INFO.into(), info.clone());
    }
    let mut result = Map::new();
    result.insert("resultType".into(), json!("complete"));
    result.insert("ttlMs".into(), json!(0));
    result.insert("cacheScope".into(), json!("private"));
    result.insert("supportedVersions".into(), serving::supported_versions());
    result.insert(
        "capabilities".into(),
        init.get("capabilities").cloned().unwrap_or(json!({})),
    );
    if let Some(instructions) = init.get("instructions") {
        result.insert("instructions".into(), instructions.clone());
    }
    result.insert("_meta".into(), Value::Object(meta));
    json_response(StatusCode::OK, &rpc_result(id, result))
}

fn flight_key(era: &RequestEra, id: &Value) -> FlightKey {
    let session = match era {
        RequestEra::Legacy(Some(s)) => s.clone(),
        _ => String::new(),
    };
    (session, id.to_string())
}

/// Removes the in-flight entry when the request ends, however it ends.
struct InFlight {
    b: Arc<Bridge>,
    key: FlightKey,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.b
            .in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&self.key);
    }
}

/// Drops the modern era's per-request `_meta` keys: the child speaks a legacy revision and
/// the bridge made its handshake for it.
fn strip_modern_meta(params: &mut Map<String, Value>) {
    if let Some(Value::Object(meta)) = params.get_mut("_meta") {
        meta.retain(|k, _| !k.starts_with(META_MODERN_PREFIX));
        if meta.is_empty() {
            params.remove("_meta");
        }
    }
}

async fn forward(
    b: Arc<Bridge>,
    era: RequestEra,
    id: Value,
    method: String,
    mut params: Map<String, Value>,
    headers: &HeaderMap,
) -> Response {
    let modern = (era == RequestEra::Modern).then(|| method.clone());
    if modern.is_some() {
        strip_modern_meta(&mut params);
    }
    let slot = slot_for(&b, &era);
    let deadline = Instant::now() + b.request_timeout;
    let child = match slot.ready(b.request_timeout).await {
        Ok(child) => child,
        Err(why) => return unavailable(&id, &why),
    };
    let key = flight_key(&era, &id);
    let in_flight = InFlight {
        b: Arc::clone(&b),
        key: key.clone(),
    };
    let wants_progress = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .is_some()
        && accepts_sse(headers);
    let remaining = deadline.saturating_duration_since(Instant::now());
    let timeout = b.request_timeout;
    // Records the bridge's id of the request at `child`, for notifications/cancelled.
    let register = |child: &Arc<child::Child>| {
        let b = Arc::clone(&b);
        let child = Arc::clone(child);
        let key = key.clone();
        move |bridge_id| {
            b.in_flight
                .lock()
                .expect("in-flight lock")
                .insert(key, (child, bridge_id));
        }
    };
    if !wants_progress {
        let call = async {
            let first = child
                .request(&method, params.clone(), None, register(&child))
                .await;
            let again = match &first {
                Err(ChildError::NotSent) => true,
                Err(ChildError::Exited) => safe_to_resend(&b, &method, &params),
                _ => false,
            };
            if !again {
                return first;
            }
            // The process died before answering: it never read the request (NotSent), or the
            // request changes nothing (a listing, a read-only or idempotent tool). The
            // restarted process gets it, once.
            match slot.ready(remaining).await {
                Ok(again) => again.request(&method, params, None, register(&again)).await,
                Err(_) => first,
            }
        };
        let reply = tokio::time::timeout(remaining, call)
            .await
            .unwrap_or(Err(ChildError::Timeout(timeout)));
        if method == "tools/list"
            && let Ok(message) = &reply
        {
            learn_safe_tools(&b, message);
        }
        drop(in_flight);
        return json_response(
            StatusCode::OK,
            &reply_message(&id, reply, modern.as_deref()),
        );
    }
    // The client asked for progress: an event stream with the child's progress for this call,
    // then the reply.
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let registered = register(&child);
    tokio::spawn(async move {
        let (note_tx, mut note_rx) = mpsc::unbounded_channel::<Value>();
        let call = tokio::time::timeout(
            remaining,
            child.request(&method, params, Some(note_tx), registered),
        );
        tokio::pin!(call);
        let reply = loop {
            tokio::select! {
                reply = &mut call => break reply.unwrap_or(Err(ChildError::Timeout(timeout))),
                Some(note) = note_rx.recv() => {
                    let _ = tx.send(sse_event(&note)).await;
                }
            }
        };
        while let Ok(note) = note_rx.try_recv() {
            let _ = tx.send(sse_event(&note)).await;
        }
        let _ = tx
            .send(sse_event(&reply_message(&id, reply, modern.as_deref())))
            .await;
        drop(in_flight);
    });
    sse_response(rx, vec![])
}

/// Methods that change nothing at the server, sent again after a crash.
const IDEMPOTENT_METHODS: [&str; 7] = [
    "tools/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
];

fn safe_to_resend(b: &Bridge, method: &str, params: &Map<String, Value>) -> bool {
    if IDEMPOTENT_METHODS.contains(&method) {
        return true;
    }
    method == "tools/call"
        && params
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|name| b.safe_tools.lock().expect("safe tools lock").contains(name))
}

/// Remembers which listed tools say they are read-only or idempotent.
fn learn_safe_tools(b: &Bridge, message: &Map<String, Value>) {
    let Some(tools) = message
        .get("result")
        .and_then(|r| r.get("tools"))
        .and_then(Value::as_array)
    else {
        return;
    };
    let mut safe = b.safe_tools.lock().expect("safe tools lock");
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        let hint = |key: &str| {
            tool.get("annotations")
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
                == Some(true)
        };
        if hint("readOnlyHint") || hint("idempotentHint") {
            safe.insert(name.to_string());
        } else {
            safe.remove(name);
        }
    }
}

/// Results the modern era lets clients cache, which must say for how long and for whom.
const CACHEABLE: [&str; 5] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Gives a legacy child's result what the modern era requires of it: a result type, and for
/// cacheable results a lifetime. Zero and private: the child may change its lists at any time
/// (it says so with list_changed), and nothing here knows whether they differ per user.
fn modernise(method: &str, result: &mut Map<String, Value>) {
    result
        .entry("resultType")
        .or_insert_with(|| json!("complete"));
    if CACHEABLE.contains(&method) {
        result.entry("ttlMs").or_insert_with(|| json!(0));
        result
            .entry("cacheScope")
            .or_insert_with(|| json!("private"));
    }
}

/// The client's reply: the child's message with the client's id back, or the bridge's error.
/// `modern`: the method, when the client speaks the modern era.
fn reply_message(
    id: &Value,
    reply: Result<Map<String, Value>, ChildError>,
    modern: Option<&str>,
) -> Value {
    match reply {
        Ok(mut message) => {
            message.insert("id".into(), id.clone());
            message.insert("jsonrpc".into(), json!("2.0"));
            if let Some(method) = modern
                && let Some(Value::Object(result)) = message.get_mut("result")
            {
                modernise(method, result);
            }
            Value::Object(message)
        }
        Err(e) => {
            let code = match e {
                ChildError::RequestTooLong { .. } => ErrorCode::INVALID_REQUEST.0,
                _ => ErrorCode::INTERNAL_ERROR.0,
            };
            rpc_error(id, code as i64, &e.to_string(), None)
        }
    }
}

async fn notification(b: &Bridge, era: &RequestEra, method: &str, mut params: Map<String, Value>) {
    match method {
        // The bridge made the handshake with the child itself.
        "notifications/initialized" => {}
        "notifications/cancelled" => {
            let Some(request) = params.get("requestId") else {
                return;
            };
            let key = flight_key(era, request);
            let target = b.in_flight.lock().expect("in-flight lock").remove(&key);
            if let Some((child, bridge_id)) = target {
                child.cancel(bridge_id).await;
            }
        }
        _ => {
            if *era == RequestEra::Modern {
                strip_modern_meta(&mut params);
            }
            let slot = slot_for(b, era);
            if let slot::State::Ready(child) = slot.state() {
                let _ = child.notify(method, params).await;
            }
        }
    }
}

// ─── event streams ───────────────────────────────────────────────────────────────────────

/// Completes once the bridge is stopping.
/// Which of the child's notifications an event stream carries.
#[derive(Clone, Copy)]
enum Pass {
    All,
    ToolChanges,
    Nothing,
}

/// Sends `first`, then every notification of the slot's child (with `meta` added), until the
/// client goes away or the bridge stops (then `last`).
fn note_stream(
    b: &Bridge,
    slot: &Slot,
    first: Option<Value>,
    meta: Option<Value>,
    last: Option<Value>,
    pass: Pass,
) -> mpsc::Receiver<Bytes> {
    let notes = futures::stream::unfold(slot.notes.subscribe(), move |mut notes| {
        let meta = meta.clone();
        async move {
            loop {
                let mut note = match notes.recv().await {
                    Ok(note) => note,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return None,
                };
                let method = note.get("method").and_then(Value::as_str).unwrap_or("");
                let passes = match pass {
                    Pass::All => true,
                    Pass::ToolChanges => method == "notifications/tools/list_changed",
                    Pass::Nothing => false,
                };
                if passes {
                    if let Some(meta) = &meta {
                        note["params"] = json!({"_meta": meta});
                    }
                    return Some((note, notes));
                }
            }
        }
    });
    serving::event_stream(first, notes, last, b.shutdown.clone())
}

fn listen(b: &Bridge, id: Value, params: &Map<String, Value>) -> Response {
    let Listen {
        wants_tools,
        ack,
        meta,
        last,
    } = listen_messages(&id, params);
    // Without toolsListChanged the stream carries the acknowledgement and stays open.
    let pass = if wants_tools {
        Pass::ToolChanges
    } else {
        Pass::Nothing
    };
    let rx = note_stream(b, &b.shared, Some(ack), Some(meta), Some(last), pass);
    sse_response(rx, vec![])
}

async fn get_stream(State(b): State<Arc<Bridge>>, headers: HeaderMap) -> Response {
    if let Some(refused) = b.refusal(&headers) {
        return refused;
    }
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "GET needs an Mcp-Session-Id (legacy era)",
        )
            .into_response();
    };
    b.session_version(session);
    let slot = {
        let sessions = b.sessions.lock().expect("sessions lock");
        match sessions.get(session) {
            Some(s) => s.slot.clone().unwrap_or_else(|| Arc::clone(&b.shared)),
            None => {
                return error_response(
                    StatusCode::NOT_FOUND,
                    &Value::Null,
                    ErrorCode(SESSION_NOT_FOUND as i32),
                    "session not found: initialize a new session",
                );
            }
        }
    };
    if !accepts_sse(&headers) {
        return (
            StatusCode::NOT_ACCEPTABLE,
            "GET streams are text/event-stream",
        )
            .into_response();
    }
    sse_response(note_stream(&b, &slot, None, None, None, Pass::All), vec![])
}

async fn delete_session(State(b): State<Arc<Bridge>>, headers: HeaderMap) -> Response {
    if let Some(refused) = b.refusal(&headers) {
        return refused;
    }
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::BAD_REQUEST, "DELETE needs an Mcp-Session-Id").into_response();
    };
    b.session_version(session);
    let removed = b.sessions.lock().expect("sessions lock").remove(session);
    match removed {
        Some(s) => {
            match s.slot {
                Some(slot) => slot.stop().await,
                None => b.end_shared(session),
            }
            StatusCode::OK.into_response()
        }
        None => error_response(
            StatusCode::NOT_FOUND,
            &Value::Null,
            ErrorCode(SESSION_NOT_FOUND as i32),
            "session not found",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_meta_keys_are_dropped_and_the_progress_token_kept() {
        let mut params = json!({"name": "x", "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {},
            "progressToken": 3,
        }})
        .as_object()
        .cloned()
        .unwrap();
        strip_modern_meta(&mut params);
        assert_eq!(
            Value::Object(params),
            json!({"name": "x", "_meta": {"progressToken": 3}})
        );
        let mut only = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "v"}})
            .as_object()
            .cloned()
            .unwrap();
        strip_modern_meta(&mut only);
        assert!(only.is_empty());
    }

    #[test]
    fn only_calls_that_change_nothing_are_sent_again() {
        let (_, shutdown) = watch::channel(false);
        let b = Bridge {
            spec: Spec {
                program: "true".into(),
                args: vec![],
                max_line_bytes: 1024,
                startup_timeout: Duration::from_secs(1),
            },
            per_session: false,
            check_host: true,
            token: None,
            max_line_bytes: 1024,
            request_timeout: Duration::from_secs(1),
            max_sessions: 1,
            shared: Slot::detached(),
            sessions: std::sync::Mutex::new(HashMap::new()),
            seal: SealKey::generate(),
            ended: std::sync::Mutex::new(Default::default()),
            in_flight: std::sync::Mutex::new(HashMap::new()),
            shutdown,
            safe_tools: std::sync::Mutex::new(std::collections::HashSet::new()),
        };
        let listed = json!({"result": {"tools": [
            {"name": "read", "annotations": {"readOnlyHint": true}},
            {"name": "put", "annotations": {"idempotentHint": true}},
            {"name": "delete", "annotations": {"destructiveHint": true}},
            {"name": "plain"},
        ]}});
        learn_safe_tools(&b, listed.as_object().unwrap());
        let call = |name: &str| json!({"name": name}).as_object().cloned().unwrap();
        assert!(safe_to_resend(&b, "tools/call", &call("read")));
        assert!(safe_to_resend(&b, "tools/call", &call("put")));
        assert!(!safe_to_resend(&b, "tools/call", &call("delete")));
        assert!(!safe_to_resend(&b, "tools/call", &call("plain")));
        assert!(!safe_to_resend(&b, "tools/call", &call("never-listed")));
        assert!(safe_to_resend(&b, "resources/read", &Map::new()));
        // A later listing that drops the hint drops the permission.
        let relisted = json!({"result": {"tools": [{"name": "read"}]}});
        learn_safe_tools(&b, relisted.as_object().unwrap());
        assert!(!safe_to_resend(&b, "tools/call", &call("read")));
    }

    #[test]
    fn replies_carry_the_clients_id_and_the_modern_result_type() {
        let child_reply = json!({"jsonrpc": "2.0", "id": 17, "result": {"tools": []}})
            .as_object()
            .cloned()
            .unwrap();
        let legacy = reply_message(&json!("a"), Ok(child_reply.clone()), None);
        assert_eq!(
            legacy,
            json!({"jsonrpc": "2.0", "id": "a", "result": {"tools": []}})
        );
        let modern = reply_message(&json!(5), Ok(child_reply), Some("tools/list"));
        assert_eq!(modern["result"]["resultType"], json!("complete"));
        assert_eq!(modern["result"]["ttlMs"], json!(0));
        assert_eq!(modern["result"]["cacheScope"], json!("private"));
        let failed = reply_message(
            &json!(5),
            Err(ChildError::ReplyTooLong { len: 10, max: 5 }),
            None,
        );
        assert_eq!(failed["error"]["code"], json!(-32603));
        assert_eq!(failed["id"], json!(5));
    }
}
