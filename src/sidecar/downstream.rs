//! The agent's side: one MCP endpoint, `/mcp`, for both protocol eras (our own axum handler over
//! rmcp's protocol constants; rmcp's server runtime would own sessions and streams we need to
//! gate per call).
//!
//! ```text
//! POST /mcp ─ guard (Host, Origin, body bound) ─ era?
//!   legacy  initialize → session (Mcp-Session-Id, sealed: sessions::Sessions); later requests need
//!           it (one no process of this pod issued, or one ended → 404); it outlives restarts
//!   modern  _meta + MCP-Protocol-Version + Mcp-Method (+ Mcp-Name) checked (-32020/-32022)
//!     ├ tools/list  → pages of the shared View
//!     ├ tools/call  → discovery::call → calls::Calls::call: JSON, or SSE as soon as the call has something to
//!     │               stream first (the upstream's progress or log lines, a legacy approval
//!     │               request); the agent's POSTed answer to that request → approval::PendingAnswers
//!     ├ resources/*, prompts/*, completion/complete → resources_prompts (granted ones only)
//!     ├ resources/subscribe|unsubscribe (legacy) → relay (the session's subscriptions)
//!     ├ server/discover, ping, notifications (cancelled)
//!     └ subscriptions/listen (modern) → SSE: acknowledged (what is granted of what it asked),
//!                                       then the agent's notifications (below)
//! GET /mcp (legacy session) → SSE: the agent's notifications (resuming a call's stream,
//!          Last-Event-ID: first that call's "outcome unknown");  DELETE /mcp → ends the session
//!
//! The agent's notifications: tools/list_changed when its tool list moves;
//! resources/list_changed and prompts/list_changed when the grants change what it is granted
//! or a granting server says its list changed; resources/updated for a resource it subscribed
//! to and is granted now (see relay).
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorCode;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc, watch};

pub use crate::mcp::serving::serve;
use crate::mcp::serving::{
    Listen, ListenFilter, META_SERVER_INFO, RequestEra as Era, SESSION_HEADER, SESSION_NOT_FOUND,
    accepts_sse, error_response, event_stream, header_str, json_response, list_changed,
    listen_honouring, notification as note_of, rpc_error, rpc_result, sse_event, sse_response,
    supported_versions,
};

use super::calls::{Caller, CallerEra, Calls, LOG_LEVELS, Reply, ToolCall};
use super::discovery;
use super::listing::View;
use super::metrics::Metrics;
use super::relay::Relayed;
use super::resources_prompts::{ListKind, Narrowing};
use super::sessions::{Session, SessionError, Sessions};

const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// How agent request bodies are bounded: each by `max_bytes`, all held at once by `budget`
/// (`--max-request-bytes`, `--request-budget`).
pub struct RequestBodies {
    pub max_bytes: usize,
    pub budget: crate::mcp::ResponseBudget,
}

/// The agent-facing handler's state.
pub struct Downstream {
    pub calls: Arc<Calls>,
    pub view: watch::Receiver<Arc<View>>,
    pub metrics: Arc<Metrics>,
    /// The bound on each request body and on those held at once.
    pub bodies: RequestBodies,
    /// Check Host against loopback names (on when listening on loopback).
    pub check_host: bool,
    /// Set to true at shutdown: event streams end.
    pub shutdown: watch::Receiver<bool>,
    /// Legacy sessions: sealed ids, so a restarted sidecar serves the ones issued before.
    pub sessions: Arc<Sessions>,
    /// In-flight calls the agent may cancel: (session or "", request id) → signal.
    /// (foldhash: inserted, looked up and removed on every call.)
    in_flight: std::sync::Mutex<foldhash::HashMap<(String, String), Arc<Notify>>>,
}

impl Downstream {
    pub fn new(
        calls: Arc<Calls>,
        view: watch::Receiver<Arc<View>>,
        sessions: Arc<Sessions>,
        metrics: Arc<Metrics>,
        bodies: RequestBodies,
        check_host: bool,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Downstream {
            calls,
            view,
            metrics,
            bodies,
            check_host,
            shutdown,
            sessions,
            in_flight: std::sync::Mutex::new(foldhash::HashMap::default()),
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

// ─── POST ────────────────────────────────────────────────────────────────────────────────

// The request whole, not `HeaderMap` and `Body`: axum's `HeaderMap` extractor copies the
// headers of every request.
async fn post(State(d): State<Arc<Downstream>>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if let Err(refused) = crate::mcp::serving::guard(d.check_host, &headers) {
        return refused;
    }
    // Held until this request is answered: its body, then its parsed message, live that long.
    let held = d.bodies.budget.allowance();
    let incoming = match crate::mcp::serving::read_message_charged(
        body,
        d.bodies.max_bytes,
        &held,
        "--request-budget",
    )
    .await
    {
        Ok(m) => m,
        Err(refused) => {
            let reason = match refused.status() {
                StatusCode::PAYLOAD_TOO_LARGE => Some("too_large"),
                StatusCode::SERVICE_UNAVAILABLE => Some("budget_busy"),
                _ => None,
            };
            if let Some(reason) = reason {
                d.metrics
                    .requests_refused
                    .get_or_create(&vec![("reason".to_string(), reason.to_string())])
                    .inc();
            }
            return refused;
        }
    };
    d.metrics
        .request_bytes_high_water
        .set(d.bodies.budget.high_water() as i64);
    let (id, params) = (incoming.id, incoming.params);
    let Some(method) = incoming.method else {
        // A response from the agent: to an approval request sent on one of its session's call
        // streams, or to nothing (then it is dropped). Only the session it was sent on counts.
        if let Some(response) = &incoming.response
            && let Some(session) = header_str(&headers, SESSION_HEADER)
            && d.sessions.open(session).is_ok()
        {
            d.calls.approvals.answers.deliver(session, response);
        }
        return StatusCode::ACCEPTED.into_response();
    };

    let (era, session) = match era_of(&d, &headers, &method, &params, id.as_ref()) {
        Ok(opened) => opened,
        Err(response) => return response,
    };
    let Some(id) = id else {
        notification(&d, &era, &method, &params);
        return StatusCode::ACCEPTED.into_response();
    };
    let span = super::traces::request(&d.calls.agent, &method, &id, &params, &headers);
    // Boxed: every layer above (the span, axum's handler, hyper's service) would otherwise
    // move the dispatch future again for every request (it is small now that its rare arms
    // are boxed: 704 bytes, from 9.0 KB).
    crate::telemetry::within(
        span,
        Box::pin(dispatch(d, era, session, &method, id, params, &headers)),
    )
    .await
}

/// The arms other than `tools/call` and `tools/list` are boxed where they are awaited: the
/// dispatch future is as large as its largest arm, and it is moved whole for every request.
async fn dispatch(
    d: Arc<Downstream>,
    era: Era,
    session: Option<Session>,
    method: &str,
    id: Value,
    params: Map<String, Value>,
    headers: &HeaderMap,
) -> Response {
    match method {
        "initialize" => initialize(&d, &id, &params),
        "server/discover" => json_response(StatusCode::OK, &rpc_result(&id, discover(&d))),
        "ping" => {
            let mut result = Map::new();
            if matches!(era, Era::Modern) {
                result.insert("resultType".into(), json!("complete"));
            }
            json_response(StatusCode::OK, &rpc_result(&id, result))
        }
        "tools/list" => {
            settled(&d).await;
            tools_list(&d, &era, &id, &params)
        }
        "tools/call" => {
            settled(&d).await;
            tools_call(d, era, session, id, params, headers).await
        }
        "resources/list" | "resources/templates/list" | "prompts/list" => {
            settled(&d).await;
            let kind = match method {
                "resources/list" => ListKind::Resources,
                "resources/templates/list" => ListKind::Templates,
                _ => ListKind::Prompts,
            };
            granted_list(Box::pin(d.calls.list_granted(kind)).await, &era, &id)
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            settled(&d).await;
            Box::pin(subscribe(&d, &era, &id, method, &params)).await
        }
        "resources/read" => {
            settled(&d).await;
            Box::pin(d.calls.resource_request(method, params))
                .await
                .into_json_response(&id, matches!(era, Era::Modern))
        }
        "prompts/get" => {
            settled(&d).await;
            Box::pin(d.calls.prompt_get(params))
                .await
                .into_json_response(&id, matches!(era, Era::Modern))
        }
        "completion/complete" => {
            settled(&d).await;
            Box::pin(d.calls.complete(params))
                .await
                .into_json_response(&id, matches!(era, Era::Modern))
        }
        "logging/setLevel" if matches!(era, Era::Legacy(_)) => set_level(&d, &era, &id, &params),
        "subscriptions/listen" if matches!(era, Era::Modern) => {
            settled(&d).await;
            Box::pin(listen(&d, id, &params)).await
        }
        _ => {
            super::traces::not_served();
            json_response(
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
            )
        }
    }
}

/// The request's era, and the legacy session it names, opened (once per request: the call
/// needs its claims too).
#[allow(clippy::result_large_err)]
fn era_of(
    d: &Downstream,
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
    id: Option<&Value>,
) -> Result<(Era, Option<Session>), Response> {
    let mut session = None;
    let era = crate::mcp::serving::era_of(headers, method, params, id, |token| {
        let opened = opened(d, token)?;
        let protocol = opened.claims.protocol.clone();
        session = Some(opened);
        Some(protocol)
    })?;
    Ok((era, session))
}

/// The session a request names, or None (logged, then answered 404 by the caller).
fn opened(d: &Downstream, token: &str) -> Option<Session> {
    match d.sessions.open(token) {
        Ok(session) => Some(session),
        Err(e) => {
            refused_session(&e);
            None
        }
    }
}

fn refused_session(e: &SessionError) {
    tracing::info!(
        reason = e.reason(),
        "an agent request names no session of this sidecar ({e}); answered 404 so the client initializes again"
    );
}

/// Longest a request waits for a freshly started sidecar to have read its grants and its
/// servers' tools. A restarted sidecar is called at once by an agent that kept its session; it
/// answers as the old process would once it knows what the old one knew, not with "still
/// reading" in between.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Resolves once the view is built from read grants and read servers (or nothing is granted),
/// or after [`SETTLE_WAIT`]: a server still being read after that is said so by the call.
async fn settled(d: &Downstream) {
    let ready =
        |v: &Arc<View>| v.nothing_granted.is_some() || (v.grants.is_some() && v.reading.is_empty());
    if ready(&d.view.borrow()) {
        return;
    }
    let mut view = d.view.clone();
    let _ = tokio::time::timeout(SETTLE_WAIT, view.wait_for(ready)).await;
}

fn server_info() -> Value {
    json!({"name": "mcp-operator-sidecar", "version": env!("CARGO_PKG_VERSION")})
}

/// What the sidecar serves: tools always; resources, prompts and completions only while the
/// grants grant some (an agent is not told of a capability it could not use). Subscriptions and
/// list changes are the relay's: a granted resource's updates, any list the grants or a
/// granting server change.
fn capabilities(view: &View) -> Value {
    let mut capabilities = json!({"tools": {"listChanged": true}});
    if let Some(grants) = &view.grants {
        let (resources, prompts) = (
            grants.narrowing.grants_resources(),
            grants.narrowing.grants_prompts(),
        );
        if resources {
            capabilities["resources"] = json!({"subscribe": true, "listChanged": true});
        }
        if prompts {
            capabilities["prompts"] = json!({"listChanged": true});
        }
        if resources || prompts {
            capabilities["completions"] = json!({});
        }
    }
    capabilities
}

/// Legacy sessions also hear the upstreams' log lines of their calls (`notifications/message`).
fn legacy_capabilities(view: &View) -> Value {
    let mut capabilities = capabilities(view);
    capabilities["logging"] = json!({});
    capabilities
}

/// A resource, template or prompt list as the agent gets it: one page; in the modern era not
/// to be cached (it follows the grants) and the agent's own.
fn granted_list(reply: Reply, era: &Era, id: &Value) -> Response {
    let modern = matches!(era, Era::Modern);
    let reply = match reply {
        Reply::Result(mut result) if modern => {
            result.insert("ttlMs".into(), json!(0));
            result.insert("cacheScope".into(), json!("private"));
            Reply::Result(result)
        }
        other => other,
    };
    reply.into_json_response(id, modern)
}

fn initialize(d: &Downstream, id: &Value, params: &Map<String, Value>) -> Response {
    let version = crate::mcp::serving::negotiated_legacy_version(params);
    let session = d.sessions.issue(version, params);
    d.metrics.agent_sessions.set(d.sessions.cached() as i64);
    let view = Arc::clone(&d.view.borrow());
    let result = json!({
        "protocolVersion": version,
        "capabilities": legacy_capabilities(&view),
        "serverInfo": server_info(),
        "instructions": view.instructions(),
    });
    let mut response = json_response(
        StatusCode::OK,
        &rpc_result(id, result.as_object().cloned().unwrap_or_default()),
    );
    response.headers_mut().insert(
        SESSION_HEADER,
        HeaderValue::from_str(&session).expect("a sealed id is a header value"),
    );
    response
}

fn discover(d: &Downstream) -> Map<String, Value> {
    let view = Arc::clone(&d.view.borrow());
    let mut meta = Map::new();
    meta.insert(META_SERVER_INFO.into(), server_info());
    json!({
        "resultType": "complete",
        "supportedVersions": supported_versions(),
        "capabilities": capabilities(&view),
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

/// A legacy session's `resources/subscribe` or `unsubscribe`: recorded for the session (its GET
/// stream hears the updates), the upstream told by the relay. The modern era has no such
/// method: its agents name the resources in `subscriptions/listen`.
async fn subscribe(
    d: &Downstream,
    era: &Era,
    id: &Value,
    method: &str,
    params: &Map<String, Value>,
) -> Response {
    let Era::Legacy(session) = era else {
        return json_response(
            StatusCode::OK,
            &rpc_error(
                id,
                ErrorCode::METHOD_NOT_FOUND.0 as i64,
                &format!(
                    "{method} is not part of protocol 2026-07-28: name the resources in subscriptions/listen (resourceSubscriptions)"
                ),
                None,
            ),
        );
    };
    let who = session.as_deref().unwrap_or("");
    let qualified = params.get("uri").and_then(Value::as_str).unwrap_or("");
    let reply = match d
        .calls
        .subscription(who, qualified, method == "resources/subscribe")
        .await
    {
        Ok(()) => Reply::Result(Map::new()),
        Err(reply) => reply,
    };
    reply.into_json_response(id, false)
}

fn set_level(d: &Downstream, era: &Era, id: &Value, params: &Map<String, Value>) -> Response {
    let Some(level) = params
        .get("level")
        .and_then(Value::as_str)
        .filter(|l| LOG_LEVELS.contains(l))
    else {
        return json_response(
            StatusCode::OK,
            &rpc_error(
                id,
                ErrorCode::INVALID_PARAMS.0 as i64,
                &format!("level must be one of {}", LOG_LEVELS.join(", ")),
                None,
            ),
        );
    };
    if let Era::Legacy(Some(session)) = era {
        d.sessions.set_log_level(session, level);
    }
    json_response(StatusCode::OK, &rpc_result(id, Map::new()))
}

/// What a legacy session hears of the upstreams' log lines until it sets a level.
const DEFAULT_LEGACY_LOG_LEVEL: &str = "info";

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
    known: Option<Session>,
    id: Value,
    params: Map<String, Value>,
    headers: &HeaderMap,
) -> Response {
    let modern = matches!(era, Era::Modern);
    let key = flight_key(&era, &id);
    let cancel = Arc::new(Notify::new());
    let cancel_signal = Arc::clone(&cancel);
    d.in_flight
        .lock()
        .expect("in-flight lock")
        .insert(key.clone(), Arc::clone(&cancel));
    let in_flight = InFlight {
        d: Arc::clone(&d),
        key,
    };
    // Who is calling: a legacy session's declared capabilities, or the modern request's own.
    let primes = known
        .as_ref()
        .is_some_and(|k| k.claims.protocol == "2025-11-25");
    let (session, requested_capabilities, log_level) = match &era {
        Era::Legacy(Some(session)) => (
            known
                .as_ref()
                .map(|k| (session.clone(), Arc::clone(&k.claims))),
            None,
            Some(
                known
                    .and_then(|k| k.log_level)
                    .unwrap_or_else(|| DEFAULT_LEGACY_LOG_LEVEL.to_string()),
            ),
        ),
        _ => {
            let meta = params.get("_meta");
            (
                None,
                meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)).cloned(),
                meta.and_then(|m| m.get(META_LOG_LEVEL))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            )
        }
    };
    let streams = accepts_sse(headers);
    let call = ToolCall::from_params(params);
    let (stream_tx, mut stream_rx) = mpsc::unbounded_channel::<Value>();
    let calls = Arc::clone(&d.calls);
    // The call is polled here, in the handler's task, until its answer or a message that must
    // go before it: the usual call takes no second task.
    let mut running = Running {
        call: Some(Box::pin(crate::telemetry::in_current(async move {
            let (era, capabilities) = match &session {
                Some((session, claims)) => (
                    CallerEra::Legacy {
                        session,
                        protocol_version: &claims.protocol,
                    },
                    claims.capabilities.as_ref(),
                ),
                None => (CallerEra::Modern, requested_capabilities.as_ref()),
            };
            let caller = Caller {
                era,
                capabilities,
                stream: streams.then_some(&stream_tx),
                log_level: log_level.as_deref(),
            };
            // Boxed where it starts: the block around it stays small, so wrapping and
            // boxing the block moves a few words, not the whole call (its state is kilobytes).
            let reply = Box::pin(discovery::call(&calls, call, &caller, cancel.notified())).await;
            drop(in_flight);
            reply
        }))),
        cancel: Arc::clone(&cancel_signal),
    };
    // JSON when the answer comes first; an event stream as soon as something must go before it.
    let first = {
        let call = running.call.as_mut().expect("the call runs");
        tokio::select! {
            biased;
            reply = call => match stream_rx.try_recv() {
                Ok(note) => Err((note, Some(reply))),
                Err(_) => Ok(reply),
            },
            Some(note) = stream_rx.recv() => Err((note, None)),
        }
    };
    let (first, early_reply) = match first {
        Ok(reply) => {
            running.call = None;
            return reply.into_json_response(&id, modern);
        }
        Err(pair) => pair,
    };
    // The response turns into an event stream: the call (if it has not answered yet) goes on
    // in a task of its own, this handler returns the stream.
    let (reply_tx, mut reply_rx) = tokio::sync::oneshot::channel::<Reply>();
    match running.call.take() {
        Some(call) if early_reply.is_none() => {
            tokio::spawn(async move {
                let _ = reply_tx.send(call.await);
            });
        }
        _ => drop(reply_tx),
    }
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    // 2025-11-25 clients resume a call's stream that breaks before its answer (GET with
    // Last-Event-ID) once it primed them with an event id: a sidecar killed mid-call then
    // tells them so (see `get_stream`) instead of leaving the call to its timeout.
    let priming = primes.then(|| call_event_id(&id));
    tokio::spawn(async move {
        if let Some(event_id) = priming {
            let _ = tx
                .send(Bytes::from(format!("id: {event_id}\ndata: \n\n")))
                .await;
        }
        let _ = tx.send(sse_event(&first)).await;
        let reply = match early_reply {
            Some(reply) => Some(reply),
            None => loop {
                tokio::select! {
                    biased;
                    Some(note) = stream_rx.recv() => { let _ = tx.send(sse_event(&note)).await; }
                    reply = &mut reply_rx => break reply.ok(),
                }
            },
        };
        while let Ok(note) = stream_rx.try_recv() {
            let _ = tx.send(sse_event(&note)).await;
        }
        if let Some(reply) = reply {
            reply.send_as_event(&id, modern, &tx).await;
        }
    });
    sse_response(rx, vec![])
}

/// A call the handler polls itself. Dropped before the call ended (axum drops the handler when
/// the agent's connection closes), it signals the call's cancellation and lets the call finish
/// in a task of its own: the server is told, and the call's audit line is written.
struct Running {
    call: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Reply> + Send>>>,
    cancel: Arc<Notify>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.cancel.notify_one();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(call);
            }
        }
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

// ─── event streams ───────────────────────────────────────────────────────────────────────

/// Which notifications an agent's stream carries besides its first and last message.
struct Wants {
    tools: bool,
    prompts: bool,
    resources: bool,
    /// Whose resource subscriptions its updates follow: a legacy session, or a modern listen.
    subscriber: Option<String>,
    /// A modern listen's own subscriptions, dropped with its stream.
    forget_on_end: bool,
}

/// Sends `first` (if any), then the agent's notifications (see the module comment), until the
/// agent goes away or the sidecar stops; `last` is sent at shutdown.
fn change_stream(
    d: &Downstream,
    first: Option<Value>,
    meta: Option<Value>,
    last: Option<Value>,
    wants: Wants,
) -> mpsc::Receiver<Bytes> {
    let mut view = d.view.clone();
    let seen = Arc::clone(&view.borrow_and_update());
    let feed = AgentFeed {
        view,
        seen,
        events: d.calls.relay.events(),
        calls: Arc::clone(&d.calls),
        wants,
        meta,
        pending: VecDeque::new(),
    };
    let changes = futures::stream::unfold(feed, |mut feed| async move {
        let note = feed.next().await?;
        Some((note, feed))
    });
    event_stream(first, changes, last, d.shutdown.clone())
}

/// One agent stream's source: the view (its grants and tools) and the relay.
struct AgentFeed {
    view: watch::Receiver<Arc<View>>,
    /// The view the last notifications were judged against.
    seen: Arc<View>,
    events: tokio::sync::broadcast::Receiver<Relayed>,
    calls: Arc<Calls>,
    wants: Wants,
    meta: Option<Value>,
    pending: VecDeque<Value>,
}

impl AgentFeed {
    async fn next(&mut self) -> Option<Value> {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            if let Some(note) = self.pending.pop_front() {
                return Some(note);
            }
            tokio::select! {
                changed = self.view.changed() => {
                    changed.ok()?;
                    let next = Arc::clone(&self.view.borrow_and_update());
                    self.moved(&next);
                    self.seen = next;
                }
                event = self.events.recv() => match event {
                    Ok(event) => {
                        if let Some(note) = self.relayed(&event) {
                            return Some(note);
                        }
                    }
                    // Some were missed: the lists may have changed.
                    Err(RecvError::Lagged(_)) => {
                        self.push_changed(self.wants.resources, "notifications/resources/list_changed");
                        self.push_changed(self.wants.prompts, "notifications/prompts/list_changed");
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }

    fn push_changed(&mut self, wanted: bool, method: &str) {
        if wanted {
            self.pending
                .push_back(note_of(method, Map::new(), self.meta.as_ref()));
        }
    }

    /// The notifications a new view makes: the tool list moved, or the grants changed what
    /// resources or prompts are granted.
    fn moved(&mut self, next: &View) {
        if self.wants.tools && next.digest != self.seen.digest {
            self.pending.push_back(list_changed(self.meta.as_ref()));
        }
        let empty = Narrowing::default();
        let before = self.seen.grants.as_ref().map_or(&empty, |g| &g.narrowing);
        let after = next.grants.as_ref().map_or(&empty, |g| &g.narrowing);
        let resources_moved = !before.same_as(after, ListKind::Resources);
        let prompts_moved = !before.same_as(after, ListKind::Prompts);
        if resources_moved {
            self.push_changed(self.wants.resources, "notifications/resources/list_changed");
        }
        if prompts_moved {
            self.push_changed(self.wants.prompts, "notifications/prompts/list_changed");
        }
    }

    /// What the agent hears of one relayed event: only what it asked for and is granted now.
    fn relayed(&self, event: &Relayed) -> Option<Value> {
        let view = Arc::clone(&self.view.borrow());
        let narrowing = &view.grants.as_ref()?.narrowing;
        let (method, params) = match event {
            Relayed::ResourceUpdated { server, uri } => {
                let who = self.wants.subscriber.as_deref()?;
                if !self.calls.relay.subscribes(who, server, uri) {
                    return None;
                }
                let qualified = narrowing.granted_resource(server, uri)?;
                let mut params = Map::new();
                params.insert("uri".into(), Value::String(qualified));
                ("notifications/resources/updated", params)
            }
            Relayed::ResourcesChanged { server } => {
                if !self.wants.resources || !narrowing.server_grants(server, ListKind::Resources) {
                    return None;
                }
                ("notifications/resources/list_changed", Map::new())
            }
            Relayed::PromptsChanged { server } => {
                if !self.wants.prompts || !narrowing.server_grants(server, ListKind::Prompts) {
                    return None;
                }
                ("notifications/prompts/list_changed", Map::new())
            }
        };
        Some(note_of(method, params, self.meta.as_ref()))
    }
}

impl Drop for AgentFeed {
    fn drop(&mut self) {
        if self.wants.forget_on_end
            && let Some(who) = &self.wants.subscriber
        {
            self.calls.forget_subscriber(who);
        }
    }
}

/// Names each modern listen for the relay (its request id is the agent's, not unique).
static LISTENS: AtomicU64 = AtomicU64::new(1);

/// A modern `subscriptions/listen`: honoured is what it asked for of what is granted; each
/// granted resource it names is subscribed (upstream too) for as long as the stream is open.
async fn listen(d: &Downstream, id: Value, params: &Map<String, Value>) -> Response {
    let asked = ListenFilter::requested(params);
    let (resources, prompts) = {
        let view = d.view.borrow();
        view.grants.as_ref().map_or((false, false), |g| {
            (g.narrowing.grants_resources(), g.narrowing.grants_prompts())
        })
    };
    let who = format!("listen-{}", LISTENS.fetch_add(1, Ordering::Relaxed));
    let mut honoured = ListenFilter {
        tools: asked.tools,
        prompts: asked.prompts && prompts,
        resources: asked.resources && resources,
        resource_uris: Vec::new(),
    };
    for uri in asked.resource_uris.iter().take(MAX_LISTEN_URIS) {
        if d.calls.subscription(&who, uri, true).await.is_ok() {
            honoured.resource_uris.push(uri.clone());
        }
    }
    let Listen {
        ack, meta, last, ..
    } = listen_honouring(&id, &honoured);
    let wants = Wants {
        tools: honoured.tools,
        prompts: honoured.prompts,
        resources: honoured.resources,
        subscriber: Some(who),
        forget_on_end: true,
    };
    let rx = change_stream(d, Some(ack), Some(meta), Some(last), wants);
    sse_response(rx, vec![])
}

/// Resources one listen may name (each may open an upstream subscription).
const MAX_LISTEN_URIS: usize = 256;

async fn get_stream(State(d): State<Arc<Downstream>>, headers: HeaderMap) -> Response {
    if let Err(refused) = crate::mcp::serving::guard(d.check_host, &headers) {
        return refused;
    }
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "GET needs an Mcp-Session-Id (legacy era)",
        )
            .into_response();
    };
    if opened(&d, session).is_none() {
        return error_response(
            StatusCode::NOT_FOUND,
            &Value::Null,
            ErrorCode(SESSION_NOT_FOUND as i32),
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
    // A call's stream resumed: whatever this process knows, the call's answer is not here to
    // replay (its process is gone, or its stream is). The agent hears that its outcome is
    // unknown, and the stream goes on as the session's change stream.
    let first = header_str(&headers, "last-event-id")
        .and_then(call_of_event_id)
        .map(|call| {
            rpc_error(
                &call,
                ErrorCode::INTERNAL_ERROR.0 as i64,
                "the call's connection to the sidecar broke before its answer (the sidecar restarted?): whether the tool ran is unknown; check before calling it again",
                None,
            )
        });
    let wants = Wants {
        tools: true,
        prompts: true,
        resources: true,
        subscriber: Some(session.to_string()),
        forget_on_end: false,
    };
    let rx = change_stream(&d, first, None, None, wants);
    sse_response(rx, vec![])
}

/// The event id that primes a call's stream: the call's request id, so a resumed stream knows
/// which call it was.
fn call_event_id(id: &Value) -> String {
    use base64::Engine as _;
    format!(
        "call-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.to_string())
    )
}

/// The request id a [`call_event_id`] names (a string or a number, as JSON-RPC allows).
fn call_of_event_id(event_id: &str) -> Option<Value> {
    use base64::Engine as _;
    let encoded = event_id.strip_prefix("call-")?;
    if encoded.len() > 256 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(|v| v.is_string() || v.is_number())
}

async fn delete_session(State(d): State<Arc<Downstream>>, headers: HeaderMap) -> Response {
    if let Err(refused) = crate::mcp::serving::guard(d.check_host, &headers) {
        return refused;
    }
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::BAD_REQUEST, "DELETE needs an Mcp-Session-Id").into_response();
    };
    if let Err(e) = d.sessions.end(session) {
        refused_session(&e);
        error_response(
            StatusCode::NOT_FOUND,
            &Value::Null,
            ErrorCode(SESSION_NOT_FOUND as i32),
            "session not found",
        )
    } else {
        d.calls.forget_subscriber(session);
        d.metrics.agent_sessions.set(d.sessions.cached() as i64);
        StatusCode::OK.into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_event_id_names_its_request_id() {
        for id in [json!(7), json!("req-1"), json!("é/\n")] {
            assert_eq!(call_of_event_id(&call_event_id(&id)), Some(id));
        }
        for bad in ["", "call-", "call-!!", "other-MQ", "call-bnVsbA"] {
            assert_eq!(call_of_event_id(bad), None, "{bad}");
        }
    }
}
