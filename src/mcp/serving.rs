//! The server side of Streamable HTTP, shared by every endpoint this binary serves (the
//! sidecar's `/mcp` and the stdio bridge's): JSON-RPC replies and event-stream framing, the
//! Host/Origin guard, reading one request body within a bound, and deciding which protocol
//! era a request speaks and whether it carries what that era requires.
//!
//! Only the wire rules live here; what a method *does* belongs to each endpoint.

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::http::header::{AsHeaderName, HeaderName};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use rmcp::model::ErrorCode;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use super::budget::Allowance;
use super::error::McpError;
use super::session::{LEGACY_VERSIONS, MODERN_VERSION};

pub const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
// Header names as values, not strings: a lookup by string parses the name first.
const PROTOCOL_VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
const NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The `_meta` prefix of the modern era's per-request keys (protocol version, client info and
/// capabilities), which a legacy server behind us has never heard of.
pub const META_MODERN_PREFIX: &str = "io.modelcontextprotocol/";
/// Legacy revisions clients may speak to us (2024-11-05 is not offered: it has no Streamable
/// HTTP), newest first.
pub const SERVED_LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// The JSON-RPC code for a session this endpoint does not know (the client initializes again).
pub const SESSION_NOT_FOUND: i64 = -32001;

// ─── responses ───────────────────────────────────────────────────────────────────────────

pub fn rpc_result(id: &Value, result: Map<String, Value>) -> Value {
    super::rpc::envelope(id.clone(), [("result", Value::Object(result))])
}

pub fn rpc_error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    super::rpc::envelope(id.clone(), [("error", error)])
}

pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, serde_json::to_vec(body).expect("JSON serialises")).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub fn error_response(status: StatusCode, id: &Value, code: ErrorCode, message: &str) -> Response {
    json_response(status, &rpc_error(id, code.0 as i64, message, None))
}

pub fn sse_event(value: &Value) -> Bytes {
    Bytes::from(format!(
        "event: message\ndata: {}\n\n",
        serde_json::to_string(value).expect("JSON serialises")
    ))
}

pub fn sse_response(
    rx: mpsc::Receiver<Bytes>,
    headers: Vec<(&'static str, HeaderValue)>,
) -> Response {
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

pub fn list_changed(meta: Option<&Value>) -> Value {
    let mut note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    if let Some(meta) = meta {
        note["params"] = json!({"_meta": meta});
    }
    note
}

/// An HMAC-SHA256 key sealing the tokens an endpoint hands out and must recognise later, in
/// another process too (session ids, approval states): `<base64url(JSON)>.<base64url(tag)>`,
/// the tag over a purpose label and the body, so a token of one kind never opens as another.
/// Visible ASCII only, so a token is also a header value.
#[derive(Clone)]
pub struct SealKey {
    key: ring::hmac::Key,
}

/// Why a token does not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealError {
    /// Not a token of this shape, or its content does not parse.
    Malformed,
    /// The tag does not match: altered, another key, or another purpose.
    Forged,
}

/// Longest token opened; anything longer is refused before it is decoded.
pub const MAX_SEALED_CHARS: usize = 4096;

impl SealKey {
    pub fn from_bytes(bytes: &[u8]) -> Self {
        SealKey {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes),
        }
    }

    /// A fresh random key (tokens then die with the process).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random source works");
        Self::from_bytes(&bytes)
    }

    /// A key derived from a secret the process is given (e.g. a mounted token) for one `use_`:
    /// every process given the same secret has the same key, and the secret itself never
    /// seals anything.
    pub fn derived(secret: &[u8], use_: &str) -> Self {
        let base = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
        Self::from_bytes(ring::hmac::sign(&base, use_.as_bytes()).as_ref())
    }

    pub fn seal(&self, purpose: &[u8], value: &impl serde::Serialize) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body = b64.encode(serde_json::to_vec(value).expect("sealed values serialise"));
        let tag = ring::hmac::sign(&self.key, &Self::signed(purpose, &body));
        format!("{body}.{}", b64.encode(tag.as_ref()))
    }

    /// The value `purpose` sealed with this key; the tag is checked (in constant time) before
    /// the body is decoded.
    pub fn open<T: serde::de::DeserializeOwned>(
        &self,
        purpose: &[u8],
        token: &str,
    ) -> Result<T, SealError> {
        if token.len() > MAX_SEALED_CHARS {
            return Err(SealError::Malformed);
        }
        let (body, tag) = token.split_once('.').ok_or(SealError::Malformed)?;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let tag = b64.decode(tag).map_err(|_| SealError::Malformed)?;
        ring::hmac::verify(&self.key, &Self::signed(purpose, body), &tag)
            .map_err(|_| SealError::Forged)?;
        let payload = b64.decode(body).map_err(|_| SealError::Malformed)?;
        serde_json::from_slice(&payload).map_err(|_| SealError::Malformed)
    }

    fn signed(purpose: &[u8], body: &str) -> Vec<u8> {
        let mut signed = Vec::with_capacity(purpose.len() + 1 + body.len());
        signed.extend_from_slice(purpose);
        signed.push(0);
        signed.extend_from_slice(body.as_bytes());
        signed
    }
}

/// A fresh, unguessable session id.
pub fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    hex::encode(bytes)
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

// ─── the guard ───────────────────────────────────────────────────────────────────────────

pub fn is_loopback_host(host: &str) -> bool {
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

/// Host and Origin checks (DNS rebinding: a web page must not reach the tools). `check_host`
/// is on when the endpoint listens on loopback only.
// The refusal is the response itself, built once per refused request.
#[allow(clippy::result_large_err)]
pub fn guard(check_host: bool, headers: &HeaderMap) -> Result<(), Response> {
    let forbidden = |why: &str| {
        error_response(
            StatusCode::FORBIDDEN,
            &Value::Null,
            ErrorCode::INVALID_REQUEST,
            why,
        )
    };
    if check_host {
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

pub fn header_str(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub fn accepts_sse(headers: &HeaderMap) -> bool {
    header_str(headers, header::ACCEPT).is_some_and(|a| a.contains("text/event-stream"))
}

/// The inverse of the `=?base64?…?=` header encoding MCP uses for names HTTP cannot carry.
pub fn decode_header_value(value: &str) -> Option<String> {
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

// ─── one request ─────────────────────────────────────────────────────────────────────────

/// One JSON-RPC message a client POSTed.
pub struct Incoming {
    pub id: Option<Value>,
    /// None: the message is a response (to a request the endpoint sent).
    pub method: Option<String>,
    pub params: Map<String, Value>,
    /// The whole message when it is a response: what the request it answers waits for.
    pub response: Option<Map<String, Value>>,
}

/// How much of an oversized body is read (and dropped) before refusing it, as a multiple of
/// the limit: a client still writing when the refusal comes sees a broken pipe instead of the
/// error, so a moderately oversized body is drained first; beyond this the connection is cut.
const DRAIN_FACTOR: usize = 16;

/// The refusal of a body the budget had no room for: other requests held it all for as long as
/// a wait may last (or, with a budget smaller than the body bound, it could never fit).
fn over_budget(error: &McpError, flag: &str) -> Response {
    let budget = match error {
        McpError::ResponseBudgetBusy { budget } | McpError::OverResponseBudget { budget, .. } => {
            *budget
        }
        _ => 0,
    };
    let mut response = error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &Value::Null,
        ErrorCode::INTERNAL_ERROR,
        &format!(
            "other requests' bodies hold all {budget} bytes of {flag} at once; send this request again shortly"
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Reads and parses one POST body of at most `max_bytes`: a single JSON-RPC message object.
#[allow(clippy::result_large_err)]
pub async fn read_message(body: Body, max_bytes: usize) -> Result<Incoming, Response> {
    read_message_charged(body, max_bytes, &Allowance::unlimited(), "").await
}

/// [`read_message`], the bytes kept charged to `allowance` as they arrive (what it took is held
/// until the caller drops it): a body that does not fit waits for others to finish, and one
/// that waited too long is refused with 503, naming `flag` (the budget's own).
#[allow(clippy::result_large_err)]
pub async fn read_message_charged(
    body: Body,
    max_bytes: usize,
    allowance: &Allowance,
    flag: &str,
) -> Result<Incoming, Response> {
    use futures::StreamExt as _;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            break;
        };
        total = total.saturating_add(chunk.len());
        if total <= max_bytes {
            if let Err(e) = allowance.take(chunk.len() as u64).await {
                return Err(over_budget(&e, flag));
            }
            bytes.extend_from_slice(&chunk);
        } else if total > max_bytes.saturating_mul(DRAIN_FACTOR) {
            break;
        }
    }
    if total > max_bytes {
        return Err(error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Value::Null,
            ErrorCode::INVALID_REQUEST,
            &format!("the request body exceeds {max_bytes} bytes"),
        ));
    }
    parse_message(&bytes)
}

/// One JSON-RPC message from its bytes. An object is read straight into its members (no map of
/// the envelope is built: the sidecar reads one per call); a member present twice is refused,
/// not left to whichever copy a reader keeps.
#[allow(clippy::result_large_err)]
pub fn parse_message(bytes: &[u8]) -> Result<Incoming, Response> {
    let not_json = || {
        error_response(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            ErrorCode::PARSE_ERROR,
            "the body is not JSON",
        )
    };
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Err(_) => not_json(),
                Ok(_) => error_response(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    ErrorCode::INVALID_REQUEST,
                    "send one JSON-RPC message per request (batches are not supported)",
                ),
            },
        );
    }
    let message: Message = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            error_response(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                ErrorCode::INVALID_REQUEST,
                &format!("the body is not one JSON-RPC message: {e}"),
            )
        } else {
            not_json()
        }
    })?;
    let method = match message.method {
        Some(Value::String(m)) => Some(m),
        _ => None,
    };
    let params = match message.params {
        Some(Value::Object(params)) => params,
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                message.id.as_ref().unwrap_or(&Value::Null),
                ErrorCode::INVALID_PARAMS,
                "params must be an object",
            ));
        }
    };
    // A response goes on to the request it answers: its members as the agent sent them.
    let response = method.is_none().then(|| {
        let mut whole = Map::new();
        for (key, value) in [
            ("jsonrpc", message.jsonrpc),
            ("id", message.id.clone()),
            ("result", message.result),
            ("error", message.error),
        ] {
            if let Some(value) = value {
                whole.insert(key.into(), value);
            }
        }
        whole
    });
    Ok(Incoming {
        id: message.id,
        method,
        params,
        response,
    })
}

/// The members of a JSON-RPC message the endpoints read; any other is skipped. Each is `Some`
/// when present, `null` included (`"id": null` is a request's id, not a notification).
#[derive(serde::Deserialize)]
struct Message {
    #[serde(default, deserialize_with = "present")]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

/// The era a request speaks, as the endpoint serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestEra {
    /// An `initialize` (None) or a request in a known session (its id).
    Legacy(Option<String>),
    /// 2026-07-28: no session, every request says its version.
    Modern,
}

/// Decides the era and checks what that era requires of the request. `session_version` looks
/// a legacy session up: its negotiated protocol version, or None when unknown.
#[allow(clippy::result_large_err)]
pub fn era_of(
    headers: &HeaderMap,
    method: &str,
    params: &Map<String, Value>,
    id: Option<&Value>,
    session_version: impl FnOnce(&str) -> Option<String>,
) -> Result<RequestEra, Response> {
    let null = Value::Null;
    let id = id.unwrap_or(&null);
    let header_version = header_str(headers, PROTOCOL_VERSION_HEADER);
    let meta_version = params
        .get("_meta")
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let modern = method == "server/discover"
        || meta_version.is_some()
        || header_version
            .is_some_and(|v| !SERVED_LEGACY_VERSIONS.contains(&v) && !LEGACY_VERSIONS.contains(&v));
    if !modern {
        if method == "initialize" {
            return Ok(RequestEra::Legacy(None));
        }
        let Some(session) = header_str(headers, SESSION_HEADER) else {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::INVALID_REQUEST,
                "no Mcp-Session-Id: send initialize first (or speak 2026-07-28 with _meta)",
            ));
        };
        let Some(known) = session_version(session) else {
            return Err(error_response(
                StatusCode::NOT_FOUND,
                id,
                ErrorCode(SESSION_NOT_FOUND as i32),
                "session not found: initialize a new session",
            ));
        };
        if let Some(v) = header_version
            && v != known
            && !SERVED_LEGACY_VERSIONS.contains(&v)
        {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                id,
                ErrorCode::INVALID_REQUEST,
                "unsupported MCP-Protocol-Version",
            ));
        }
        return Ok(RequestEra::Legacy(Some(session.to_string())));
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
    if header_str(headers, METHOD_HEADER) != Some(method) {
        return mismatch("Mcp-Method");
    }
    if method == "tools/call"
        && let Some(name) = params.get("name").and_then(Value::as_str)
        && header_str(headers, NAME_HEADER)
            .and_then(decode_header_value)
            .as_deref()
            != Some(name)
    {
        return mismatch("Mcp-Name");
    }
    Ok(RequestEra::Modern)
}

/// The legacy version to answer an `initialize` with: the client's when we serve it, else our
/// newest.
pub fn negotiated_legacy_version(params: &Map<String, Value>) -> &'static str {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    SERVED_LEGACY_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .copied()
        .unwrap_or(SERVED_LEGACY_VERSIONS[0])
}

/// The versions a `server/discover` result lists: the modern one, then the legacy ones.
pub fn supported_versions() -> Value {
    let mut all = vec![Value::from(MODERN_VERSION)];
    all.extend(SERVED_LEGACY_VERSIONS.iter().map(|v| Value::from(*v)));
    Value::Array(all)
}

/// How often an idle event stream carries a comment, so proxies and clients see it alive.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(25);

/// Resolves once `shutdown` turns true (or its sender is gone): an event stream then ends.
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// An event stream's body: `first` (a response or acknowledgement), then each message of
/// `messages`, a keepalive comment whenever the stream is idle for [`KEEPALIVE`], and `last` when
/// `shutdown` turns true. It ends when the client goes away, when `messages` ends (its source is
/// gone), or at shutdown. The sidecar and the bridge differ only in where their messages come
/// from.
pub fn event_stream(
    first: Option<Value>,
    messages: impl futures::Stream<Item = Value> + Send + 'static,
    last: Option<Value>,
    mut shutdown: watch::Receiver<bool>,
) -> mpsc::Receiver<Bytes> {
    use futures::StreamExt as _;
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut messages = std::pin::pin!(messages);
        if let Some(first) = first
            && tx.send(sse_event(&first)).await.is_err()
        {
            return;
        }
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else { return };
                    if tx.send(sse_event(&message)).await.is_err() { return; }
                }
                _ = stopped(&mut shutdown) => {
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

/// Resolves at SIGTERM (what the kubelet sends) or Ctrl-C: when a server starts draining.
pub async fn terminated() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler installs");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// What a 2026-07-28 `subscriptions/listen` is answered with.
pub struct Listen {
    /// The subscriber asked for `notifications/tools/list_changed`.
    pub wants_tools: bool,
    /// `notifications/subscriptions/acknowledged`, naming what is honoured.
    pub ack: Value,
    /// The `_meta` every message on the stream carries (the subscription's id).
    pub meta: Value,
    /// The final result that closes the stream.
    pub last: Value,
}

/// What a `subscriptions/listen` asks for (its `notifications` filter), or what a server
/// honours of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenFilter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    /// `resourceSubscriptions`: the resources whose updates are wanted.
    pub resource_uris: Vec<String>,
}

impl ListenFilter {
    /// The filter of a `subscriptions/listen`'s params (anything malformed asks for nothing).
    pub fn requested(params: &Map<String, Value>) -> Self {
        let filter = params.get("notifications");
        let flag = |key: &str| {
            filter
                .and_then(|n| n.get(key))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        ListenFilter {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            resource_uris: filter
                .and_then(|n| n.get("resourceSubscriptions"))
                .and_then(Value::as_array)
                .map(|uris| {
                    uris.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The filter as the acknowledgement names it (only what is on).
    fn to_json(&self) -> Map<String, Value> {
        let mut honoured = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                honoured.insert(key.into(), Value::Bool(true));
            }
        }
        if !self.resource_uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(self.resource_uris));
        }
        honoured
    }
}

/// The messages of a `subscriptions/listen` with request `id` and `params`; tool changes are
/// the only notifications offered.
pub fn listen_messages(id: &Value, params: &Map<String, Value>) -> Listen {
    let honoured = ListenFilter {
        tools: ListenFilter::requested(params).tools,
        ..ListenFilter::default()
    };
    listen_honouring(id, &honoured)
}

/// The messages of a `subscriptions/listen` with request `id` that honours `honoured`.
pub fn listen_honouring(id: &Value, honoured: &ListenFilter) -> Listen {
    let meta = json!({META_SUBSCRIPTION_ID: id});
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": honoured.to_json(), "_meta": meta},
    });
    let last = rpc_result(
        id,
        json!({"resultType": "complete", "_meta": meta})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    Listen {
        wants_tools: honoured.tools,
        ack,
        meta,
        last,
    }
}

/// A notification of `method` with `params`, carrying `meta` (a listen stream's subscription
/// id) when given.
pub fn notification(method: &str, mut params: Map<String, Value>, meta: Option<&Value>) -> Value {
    if let Some(meta) = meta {
        params.insert("_meta".into(), meta.clone());
    }
    let mut note = json!({"jsonrpc": "2.0", "method": method});
    if !params.is_empty() {
        note["params"] = Value::Object(params);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(bytes: &[u8]) -> (StatusCode, Value) {
        let Err(response) = parse_message(bytes) else {
            panic!("{} was read", String::from_utf8_lossy(bytes));
        };
        let status = response.status();
        let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
            .expect("a body");
        (status, serde_json::from_slice(&body).expect("JSON"))
    }

    #[test]
    fn a_message_is_read_into_its_members() {
        let m = parse_message(
            br#" {"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","arguments":{"x":1}},"extra":[1]}"#,
        )
        .expect("a request");
        assert_eq!(m.id, Some(json!("a")));
        assert_eq!(m.method.as_deref(), Some("tools/call"));
        assert_eq!(
            Value::Object(m.params),
            json!({"name": "t", "arguments": {"x": 1}})
        );
        assert!(m.response.is_none());
        // `"id": null` is an id (answered), no id a notification (not answered).
        let null_id =
            parse_message(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).expect("read");
        assert_eq!(null_id.id, Some(Value::Null));
        let note =
            parse_message(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":null}"#)
                .expect("read");
        assert_eq!((note.id, note.params.is_empty()), (None, true));
        // A response (no method, or a method that is not a string) goes on whole.
        let answer = parse_message(br#"{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}"#)
            .expect("read");
        assert_eq!(
            answer.response.map(Value::Object),
            Some(json!({"jsonrpc": "2.0", "id": "s-1", "result": {"action": "accept"}}))
        );
    }

    #[test]
    fn a_body_that_is_not_one_message_is_refused_with_its_reason() {
        let (status, body) = refusal(b"{\"jsonrpc\":");
        assert_eq!(
            (status, &body["error"]["message"]),
            (StatusCode::BAD_REQUEST, &json!("the body is not JSON"))
        );
        let (_, body) = refusal(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("batches are not supported")
        );
        let (_, body) = refusal(b"[1,");
        assert_eq!(body["error"]["message"], "the body is not JSON");
        let (status, body) =
            refusal(br#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("duplicate field `method`"), "{message}");
        let (_, body) = refusal(br#"{"jsonrpc":"2.0","id":4,"method":"ping","params":[1]}"#);
        assert_eq!(
            (&body["id"], &body["error"]["message"]),
            (&json!(4), &json!("params must be an object"))
        );
    }

    #[test]
    fn a_sealed_token_opens_only_with_its_key_and_purpose() {
        let key = SealKey::generate();
        let token = key.seal(b"one", &json!({"a": 1}));
        assert!(token.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_eq!(key.open::<Value>(b"one", &token), Ok(json!({"a": 1})));
        assert_eq!(key.open::<Value>(b"two", &token), Err(SealError::Forged));
        assert_eq!(
            SealKey::generate().open::<Value>(b"one", &token),
            Err(SealError::Forged)
        );
        for bad in ["", "x", "a.b", &"a".repeat(MAX_SEALED_CHARS + 1)] {
            assert!(key.open::<Value>(b"one", bad).is_err(), "{bad}");
        }
        // The same secret, the same key; another use, another key.
        let a = SealKey::derived(b"token", "sessions");
        let b = SealKey::derived(b"token", "sessions");
        let c = SealKey::derived(b"token", "other");
        let t = a.seal(b"p", &1);
        assert_eq!(b.open::<u32>(b"p", &t), Ok(1));
        assert_eq!(c.open::<u32>(b"p", &t), Err(SealError::Forged));
    }

    #[test]
    fn a_listen_acknowledges_what_is_honoured() {
        let params = json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true,
            "resourceSubscriptions": ["a+file:///x", 7]}});
        let asked = ListenFilter::requested(params.as_object().unwrap());
        assert!(asked.tools && asked.prompts && !asked.resources);
        assert_eq!(asked.resource_uris, ["a+file:///x"]);
        // The bridge offers tool changes only.
        let bridge = listen_messages(&json!(3), params.as_object().unwrap());
        assert_eq!(
            bridge.ack["params"]["notifications"],
            json!({"toolsListChanged": true})
        );
        let all = listen_honouring(&json!(4), &asked);
        assert_eq!(
            all.ack["params"]["notifications"],
            json!({"toolsListChanged": true, "promptsListChanged": true,
                "resourceSubscriptions": ["a+file:///x"]})
        );
    }

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

    #[test]
    fn initialize_answers_the_clients_version_when_served() {
        let asked = |v: &str| {
            let mut p = Map::new();
            p.insert("protocolVersion".into(), json!(v));
            negotiated_legacy_version(&p)
        };
        assert_eq!(asked("2025-03-26"), "2025-03-26");
        assert_eq!(asked("2024-11-05"), "2025-11-25");
        assert_eq!(negotiated_legacy_version(&Map::new()), "2025-11-25");
    }
}
