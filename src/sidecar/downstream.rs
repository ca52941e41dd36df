//! The agent's side: one MCP endpoint, `/mcp`, for both protocol eras (our own axum handler over
//! rmcp's protocol constants; rmcp's server runtime would own sessions and streams we need to
//! gate per call).
//!
//! ```text
//! POST /mcp ─ guard (Host, Origin, body bound) ─ era?
//!   legacy  initialize → session (Mcp-Session-Id); later requests need it (unknown → 404)
//!   modern  _meta + MCP-Protocol-Version + Mcp-Method (+ Mcp-Name) checked (-32020/-32022)
//!     ├ tools/list  → pages of the shared View
//!     ├ tools/call  → calls::Calls::call (JSON, or SSE when the agent asked for progress)
//!     ├ server/discover, ping, notifications (cancelled)
//!     └ subscriptions/listen (modern) → SSE: acknowledged, then tools/list_changed
//! GET /mcp (legacy session) → SSE: tools/list_changed;  DELETE /mcp → ends the session
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rmcp::model::ErrorCode;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc, watch};

use crate::mcp::session::{LEGACY_VERSIONS, MODERN_VERSION};

use super::calls::{Calls, Reply};
use super::listing::View;
use super::metrics::Metrics;

const SESSION_HEADER: &str = "mcp-session-id";
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// Legacy revisions agents may speak (2024-11-05 is not offered: it has no Streamable HTTP).
const AGENT_LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Most legacy sessions kept; beyond it the oldest is forgotten (its agent gets 404 and
/// initializes again, which every client does), so agents that never DELETE cannot grow memory.
const MAX_SESSIONS: usize = 4096;
/// How often an idle event stream carries a comment, so proxies and clients see it alive.
const KEEPALIVE: Duration = Duration::from_secs(25);

/// The agent-facing handler's state.
pub struct Downstream {
    pub calls: Arc<Calls>,
    pub view: watch::Receiver<Arc<View>>,
    pub metrics: Arc<Metrics>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Check Host against loopback names (on when listening on loopback).
    pub check_host: bool,
    /// Set to true at shutdown: event streams end.
    pub shutdown: watch::Receiver<bool>,
    sessions: std::sync::Mutex<HashMap<String, AgentSession>>,
    /// In-flight calls the agent may cancel: (session or "", request id) → signal.
    in_flight: std::sync::Mutex<HashMap<(String, String), Arc<Notify>>>,
}

#[derive(Debug, Clone)]
struct AgentSession {
    protocol_version: String,
    created: std::time::Instant,
}

impl Downstream {
    pub fn new(
        calls: Arc<Calls>,
        view: watch::Receiver<Arc<View>>,
        metrics: Arc<Metrics>,
        max_body_bytes: usize,
        check_host: bool,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Downstream {
            calls,
            view,
            metrics,
            max_body_bytes,
            check_host,
            shutdown,
            sessions: std::sync::Mutex::new(HashMap::new()),
            in_flight: std::sync::Mutex::new(HashMap::new()),
        })
    }

    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
            .route(
                "/mcp",
                axum::routing::post(post)
                    .get(get_stream)
                    .delete(delete_session),
            )
            .with_state(Arc::clone(self))
    }
}

/// Serves the router on `listener` with TCP_NODELAY until `shutdown` turns true, then lets
/// in-flight requests finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    })
    .await
}

// ─── responses ───────────────────────────────────────────────────────────────────────────

fn rpc_result(id: &Value, result: Map<String, Value>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn rpc_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, serde_json::to_vec(body).expect("JSON serialises")).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(status: StatusCode, id: &Value, code: ErrorCode, message: &str) -> Response {
    json_response(status, &rpc_error(id, code.0 as i64, message, None))
}

fn sse_event(value: &Value) -> Bytes {
    Bytes::from(format!(
        "event: message\ndata: {}\n\n",
        serde_json::to_string(value).expect("JSON serialises")
    ))
}

fn sse_response(rx: mpsc::Receiver<Bytes>, headers: Vec<(&'static str, HeaderValue)>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    for (name, value) in headers {
        h.insert(name, value);
    }
    response
}

// ─── the guard ───────────────────────────────────────────────────────────────────────────

fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(name.to_ascii_lowercase().as_str(), "localhost" | "::1")
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Host and Origin checks (DNS rebinding: a web page must not reach the agent's tools).
// The refusal is the response itself, built once per refused request.
#[allow(clippy::result_large_err)]
fn guard(d: &Downstream, headers: &HeaderMap) -> Result<(), Response> {
    let forbidden = |why: &str| {
        error_response(
            StatusCode::FORBIDDEN,
            &Value::Null,
            ErrorCode::INVALID_REQUEST,
            why,
        )
    };
    if d.check_host {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !is_loopback_host(host) {
            return Err(forbidden(
                "the Host header must name this machine (localhost or a loopback address)",
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if !is_loopback_host(host) {
            return Err(forbidden(
                "requests from web pages of other origins are refused",
            ));
        }
    }
    Ok(())
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    header_str(headers, "accept").is_some_and(|a| a.contains("text/event-stream"))
}

/// The inverse of the `=?base64?…?=` header encoding MCP uses for names HTTP cannot carry.
fn decode_header_value(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(value.to_string()),
    }
}

// ─── POST ────────────────────────────────────────────────────────────────────────────────

enum Era {
    Legacy(Option<String>),
    Modern,
}

async fn post(State(d): State<Arc<Downstream>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(refused) = guard(&d, &headers) {
        return refused;
    }
    let bytes = match axum::body::to_bytes(body, d.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &Value::Null,
                ErrorCode::INVALID_REQUEST,
                &format!("the request body exceeds {} bytes", d.max_body_bytes),
            );
        }
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                ErrorCode::PARSE_ERROR,
                "the body is not JSON",
            );
        }
    };
    let Value::Object(message) = message else {
        return error_response(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            ErrorCode::INVALID_REQUEST,
            "send one JSON-RPC message per request (batches are not supported)",
        );
    };
    let id = message.get("id").cloned();
    let Some(method) = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        // A response from the agent (to a request this sidecar never sends yet): nothing to do.
        return StatusCode::ACCEPTED.into_response();
    };
    let params = match message.get("params") {
        Some(Value::Object(p)) => p.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                id.as_ref().unwrap_or(&Value::Null),
                ErrorCode::INVALID_PARAMS,
                "params must be an object",
            );
        }
    };

    let era = match era_of(&d, &headers, &method, &params, id.as_ref()) {
        Ok(era) => era,
        Err(response) => return response,
    };
    let Some(id) = id else {
        notification(&d, &era, &method, &params);
        return StatusCode::ACCEPTED.into_response();
    };
    match method.as_str() {
        "initialize" => initialize(&d, &id, &params),
        "server/discover" => json_response(StatusCode::OK, &rpc_result(&id, discover(&d))),
        "ping" => {
            let mut result = Map::new();
            if matches!(era, Era::Modern) {
                result.insert("resultType".into(), json!("complete"));
            }
            json_response(StatusCode::OK, &rpc_result(&id, result))
        }
        "tools/list" => tools_list(&d, &era, &id, &params),
        "tools/call" => tools_call(d, era, id, params, &headers).await,
        "subscriptions/listen" if matches!(era, Era::Modern) => listen(&d, id, &params),
        _ => json_response(
            StatusCode::OK,
            &rpc_error(
                &id,
                ErrorCode::METHOD_NOT_FOUND.0 as i64,
                &format!(
                    "this endpoint does not serve {}",
                    method.chars().take(64).collect::<String>()
                ),
                None,
            ),
        ),
    }
}

/// Decides the era and checks what that era requires of the request.
#[allow(clippy::result_large_err)]
fn era_of(
    d: &Downstream,
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
    id: Option<&Value>,
) -> Result<Era, Response> {
    let null = Value::Null;
    let id = id.unwrap_or(&null);
    let header_version = header_str(headers, "mcp-protocol-version");
    let meta_version = params
        .get("_meta")
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let modern = method == "server/discover"
        || meta_version.is_some()
        || header_version
            .is_some_and(|v| !AGENT_LEGACY_VERSIONS.contains(&v) && !LEGACY_VERSIONS.contains(&v));
    if !modern {
        if method == "initialize" {
            return Ok(Era::Legacy(None));
        }
        let Some(session) = header_str(headers, SESSION_HEADER) else {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::INVALID_REQUEST,
                "no Mcp-Session-Id: send initialize first (or speak 2026-07-28 with _meta)",
            ));
        };
        let known = d
            .sessions
            .lock()
            .expect("sessions lock")
            .get(session)
            .cloned();
        let Some(known) = known else {
            return Err(error_response(
                StatusCode::NOT_FOUND,
                id,
                ErrorCode(-32001),
                "session not found: initialize a new session",
            ));
        };
        if let Some(v) = header_version
            && v != known.protocol_version
            && !AGENT_LEGACY_VERSIONS.contains(&v)
        {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::INVALID_REQUEST,
                "unsupported MCP-Protocol-Version",
            ));
        }
        return Ok(Era::Legacy(Some(session.to_string())));
    }
    let mismatch = |what: &str| {
        Err(error_response(
            StatusCode::BAD_REQUEST,
            id,
            ErrorCode::HEADER_MISMATCH,
            &format!("{what} header does not match the request body"),
        ))
    };
    let Some(version) = meta_version else {
        return Err(error_response(
            StatusCode::BAD_REQUEST,
            id,
            ErrorCode::INVALID_PARAMS,
            &format!("params._meta must carry {META_PROTOCOL_VERSION}"),
        ));
    };
    if header_version != Some(version) {
        return mismatch("MCP-Protocol-Version");
    }
    if version != MODERN_VERSION {
        return Err(json_response(
            StatusCode::BAD_REQUEST,
            &rpc_error(
                id,
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION.0 as i64,
                "unsupported protocol version",
                Some(json!({"supported": [MODERN_VERSION], "requested": version})),
            ),
        ));
    }
    if header_str(headers, "mcp-method") != Some(method) {
        return mismatch("Mcp-Method");
    }
    if method == "tools/call"
        && let Some(name) = params.get("name").and_then(Value::as_str)
        && header_str(headers, "mcp-name")
            .and_then(decode_header_value)
            .as_deref()
            != Some(name)
    {
        return mismatch("Mcp-Name");
    }
    Ok(Era::Modern)
}

fn server_info() -> Value {
    json!({"name": "mcp-operator-sidecar", "version": env!("CARGO_PKG_VERSION")})
}

fn capabilities() -> Value {
    json!({"tools": {"listChanged": true}})
}

fn initialize(d: &Downstream, id: &Value, params: &Map<String, Value>) -> Response {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = if AGENT_LEGACY_VERSIONS.contains(&asked) {
        asked
    } else {
        AGENT_LEGACY_VERSIONS[0]
    };
    let session = new_session_id();
    {
        let mut sessions = d.sessions.lock().expect("sessions lock");
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&oldest);
            d.metrics.agent_sessions.dec();
        }
        sessions.insert(
            session.clone(),
            AgentSession {
                protocol_version: version.to_string(),
                created: std::time::Instant::now(),
            },
        );
    }
    d.metrics.agent_sessions.inc();
    let view = Arc::clone(&d.view.borrow());
    let result = json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": view.instructions(),
    });
    let mut response = json_response(
        StatusCode::OK,
        &rpc_result(id, result.as_object().cloned().unwrap_or_default()),
    );
    response.headers_mut().insert(
        SESSION_HEADER,
        HeaderValue::from_str(&session).expect("hex is a header value"),
    );
    response
}

fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    hex::encode(bytes)
}

fn discover(d: &Downstream) -> Map<String, Value> {
    let view = Arc::clone(&d.view.borrow());
    let mut meta = Map::new();
    meta.insert(META_SERVER_INFO.into(), server_info());
    json!({
        "resultType": "complete",
        "supportedVersions": [MODERN_VERSION, AGENT_LEGACY_VERSIONS[0], AGENT_LEGACY_VERSIONS[1], AGENT_LEGACY_VERSIONS[2]],
        "capabilities": capabilities(),
        "instructions": view.instructions(),
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": meta,
    })
    .as_object()
    .cloned()
    .unwrap_or_default()
}

fn tools_list(d: &Downstream, era: &Era, id: &Value, params: &Map<String, Value>) -> Response {
    let view = Arc::clone(&d.view.borrow());
    let cursor = params.get("cursor").and_then(Value::as_str);
    let Some((page, next)) = view.page(cursor) else {
        return json_response(
            StatusCode::OK,
            &rpc_error(
                id,
                ErrorCode::INVALID_PARAMS.0 as i64,
                "invalid cursor",
                None,
            ),
        );
    };
    let mut result = Map::new();
    result.insert(
        "tools".into(),
        Value::Array(page.iter().map(|t| Value::Object((**t).clone())).collect()),
    );
    if let Some(next) = next {
        result.insert("nextCursor".into(), Value::String(next));
    }
    if matches!(era, Era::Modern) {
        result.insert("resultType".into(), json!("complete"));
        // The list changes with the grants: agents must not cache it, and it is this agent's.
        result.insert("ttlMs".into(), json!(0));
        result.insert("cacheScope".into(), json!("private"));
    }
    json_response(StatusCode::OK, &rpc_result(id, result))
}

fn flight_key(era: &Era, id: &Value) -> (String, String) {
    let session = match era {
        Era::Legacy(Some(s)) => s.clone(),
        _ => String::new(),
    };
    (session, id.to_string())
}

/// Removes the in-flight entry when the call ends, however it ends.
struct InFlight {
    d: Arc<Downstream>,
    key: (String, String),
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.d
            .in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&self.key);
    }
}

async fn tools_call(
    d: Arc<Downstream>,
    era: Era,
    id: Value,
    params: Map<String, Value>,
    headers: &HeaderMap,
) -> Response {
    let modern = matches!(era, Era::Modern);
    let key = flight_key(&era, &id);
    let cancel = Arc::new(Notify::new());
    d.in_flight
        .lock()
        .expect("in-flight lock")
        .insert(key.clone(), Arc::clone(&cancel));
    let in_flight = InFlight {
        d: Arc::clone(&d),
        key,
    };
    let wants_progress = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .is_some();
    if !(wants_progress && accepts_sse(headers)) {
        let reply = d.calls.call(params, None, cancel.notified()).await;
        drop(in_flight);
        return json_response(StatusCode::OK, &reply_message(&id, reply, modern));
    }
    // The agent asked for progress: answer on an event stream carrying the upstream's
    // notifications for this call, then the result.
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let (note_tx, mut note_rx) = mpsc::unbounded_channel::<Value>();
        let call = d.calls.call(params, Some(&note_tx), cancel.notified());
        tokio::pin!(call);
        let reply = loop {
            tokio::select! {
                reply = &mut call => break reply,
                Some(note) = note_rx.recv() => {
                    let _ = tx.send(sse_event(&note)).await;
                }
                // A 2026-07-28 agent cancels by closing the request's stream: dropping the call
                // tells the upstream. (A legacy agent's disconnect is not a cancellation.)
                _ = tx.closed(), if modern => return,
            }
        };
        while let Ok(note) = note_rx.try_recv() {
            let _ = tx.send(sse_event(&note)).await;
        }
        let _ = tx.send(sse_event(&reply_message(&id, reply, modern))).await;
        drop(in_flight);
    });
    sse_response(rx, vec![])
}

fn reply_message(id: &Value, reply: Reply, modern: bool) -> Value {
    match reply {
        Reply::Result(mut result) => {
            if modern && !result.contains_key("resultType") {
                result.insert("resultType".into(), json!("complete"));
            }
            rpc_result(id, result)
        }
        Reply::Error {
            code,
            message,
            data,
        } => rpc_error(id, code, &message, data),
    }
}

fn notification(d: &Downstream, era: &Era, method: &str, params: &Map<String, Value>) {
    if method == "notifications/cancelled"
        && let Some(request) = params.get("requestId")
    {
        let key = flight_key(era, request);
        if let Some(signal) = d.in_flight.lock().expect("in-flight lock").get(&key) {
            signal.notify_one();
        }
    }
}

/// Completes once the sidecar is stopping.
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await.map(|_| ());
}

// ─── event streams ───────────────────────────────────────────────────────────────────────

fn list_changed(meta: Option<&Value>) -> Value {
    let mut note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    if let Some(meta) = meta {
        note["params"] = json!({"_meta": meta});
    }
    note
}

/// Sends `first` (if any), then a list_changed whenever the view's digest moves, until the
/// agent goes away or the sidecar stops; `last` is sent at shutdown.
fn change_stream(
    d: &Downstream,
    first: Option<Value>,
    meta: Option<Value>,
    last: Option<Value>,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let mut view = d.view.clone();
    let shutdown = d.shutdown.clone();
    tokio::spawn(async move {
        if let Some(first) = first
            && tx.send(sse_event(&first)).await.is_err()
        {
            return;
        }
        let mut seen = view.borrow_and_update().digest.clone();
        loop {
            tokio::select! {
                changed = view.changed() => {
                    if changed.is_err() { return; }
                    let digest = view.borrow_and_update().digest.clone();
                    if digest != seen {
                        seen = digest;
                        if tx.send(sse_event(&list_changed(meta.as_ref()))).await.is_err() { return; }
                    }
                }
                _ = stopped(shutdown.clone()) => {
                    if let Some(last) = last {
                        let _ = tx.send(sse_event(&last)).await;
                    }
                    return;
                }
                _ = tokio::time::sleep(KEEPALIVE) => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() { return; }
                }
                _ = tx.closed() => return,
            }
        }
    });
    rx
}

fn listen(d: &Downstream, id: Value, params: &Map<String, Value>) -> Response {
    let wants_tools = params
        .get("notifications")
        .and_then(|n| n.get("toolsListChanged"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let meta = json!({META_SUBSCRIPTION_ID: id});
    let mut honoured = Map::new();
    if wants_tools {
        honoured.insert("toolsListChanged".into(), Value::Bool(true));
    }
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": honoured, "_meta": meta},
    });
    let last = rpc_result(
        &id,
        json!({"resultType": "complete", "_meta": meta})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let rx = if wants_tools {
        change_stream(d, Some(ack), Some(meta), Some(last))
    } else {
        // Nothing to send but the acknowledgement; the stream stays open until shutdown.
        change_stream_silent(d, ack, last)
    };
    sse_response(rx, vec![])
}

fn change_stream_silent(d: &Downstream, ack: Value, last: Value) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let shutdown = d.shutdown.clone();
    tokio::spawn(async move {
        if tx.send(sse_event(&ack)).await.is_err() {
            return;
        }
        tokio::select! {
            _ = stopped(shutdown.clone()) => { let _ = tx.send(sse_event(&last)).await; }
            _ = tx.closed() => {}
        }
    });
    rx
}

async fn get_stream(State(d): State<Arc<Downstream>>, headers: HeaderMap) -> Response {
    if let Err(refused) = guard(&d, &headers) {
        return refused;
    }
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "GET needs an Mcp-Session-Id (legacy era)",
        )
            .into_response();
    };
    if !d
        .sessions
        .lock()
        .expect("sessions lock")
        .contains_key(session)
    {
        return error_response(
            StatusCode::NOT_FOUND,
            &Value::Null,
            ErrorCode(-32001),
            "session not found: initialize a new session",
        );
    }
    if !accepts_sse(&headers) {
        return (
            StatusCode::NOT_ACCEPTABLE,
            "GET streams are text/event-stream",
        )
            .into_response();
    }
    let rx = change_stream(&d, None, None, None);
    sse_response(rx, vec![])
}

async fn delete_session(State(d): State<Arc<Downstream>>, headers: HeaderMap) -> Response {
    if let Err(refused) = guard(&d, &headers) {
        return refused;
    }
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::BAD_REQUEST, "DELETE needs an Mcp-Session-Id").into_response();
    };
    if d.sessions
        .lock()
        .expect("sessions lock")
        .remove(session)
        .is_some()
    {
        d.metrics.agent_sessions.dec();
        StatusCode::OK.into_response()
    } else {
        error_response(
            StatusCode::NOT_FOUND,
            &Value::Null,
            ErrorCode(-32001),
            "session not found",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_only() {
        for ok in [
            "localhost",
            "localhost:9500",
            "127.0.0.1:9500",
            "127.3.4.5",
            "[::1]:9500",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example.com",
            "evil.example.com:9500",
            "10.0.0.1:9500",
            "localhost.evil.com",
            "[::2]:1",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn header_values_decode_the_base64_form() {
        assert_eq!(decode_header_value("fs__read").as_deref(), Some("fs__read"));
        assert_eq!(
            decode_header_value("=?base64?ZnNfX3JlYWQ=?=").as_deref(),
            Some("fs__read")
        );
        assert_eq!(decode_header_value("=?base64?!!?="), None);
    }
}
