//! Calling tools on one server: a negotiated connection that many calls share at once (the
//! sidecar's upstream side). Listing stays in [`super::listing`]; this module only sends
//! `tools/call` and `notifications/cancelled`, and says precisely what is known about a call
//! that failed — whether the server can have run it — because the caller's resend rule depends
//! on nothing else.
//!
//! ```text
//! ToolSession::open ─► endpoint guard ─► Http ─► Session (era, handshake) ─► pieces kept here
//! ToolSession::call ─► POST (clone of Http: concurrent) ─► JSON or SSE reply
//!                          └─ notifications on the call's stream ─► the caller's channel
//! ```
//!
//! Over Streamable HTTP calls run concurrently (each is its own POST on a shared connection
//! pool). The old HTTP+SSE transport has one stream per connection, so calls on it take turns.
//!
//! Per call, only what the call itself needs is built: the connection's headers are made once
//! at open. With a response budget, each call's answer is charged to an allowance of its own,
//! held until the answer has gone on: an answer's result as the server's bytes, whether it came
//! as a JSON body or as an event on the call's stream ([`super::pass_through`], held once), any
//! other answer (an error, an unusual envelope) as bytes plus its parsed copies.

use std::sync::atomic::{AtomicU64, Ordering};

use http::StatusCode;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, mpsc};

use std::sync::Arc;

use super::answer_scan::AnswerScan;
use super::budget::{Allowance, ReservationShare, ResponseBudget, UnannouncedAnswer};
use super::connection::{ServerConnection, TransportKind};
use super::endpoint;
use super::error::McpError;
use super::http::{AnswerRead, Http, Response, content_type};
use super::http_sse::HttpSse;
use super::pass_through::RawResult;
use super::rpc::{self, Incoming, RpcReply};
use super::session::{Era, MODERN_VERSION, Session, Wire, modern_meta_fields};
use super::sse::{SseMessage, SseReader};
use super::streamable_http::{SESSION_HEADER, StreamableHttp};
use super::streamed::{Begun, STREAM_PAST, StreamedResult};
use super::watch::{self, Interest, ToolChangeWatch, WatchError};

/// What a server answered to `tools/call`.
#[derive(Debug, PartialEq)]
pub enum CallAnswer {
    /// The result object, exactly as the server sent it.
    Result(Map<String, Value>),
    /// The result object of a JSON answer, as the server's bytes (and what they hold of the
    /// response budget).
    Passed(RawResult),
    /// A result too big to hold, passed on as it arrives (`tools/call` only).
    Streamed(Box<StreamedResult>),
    /// A JSON-RPC error: its code and structured data (never the server's free text).
    Error { code: i64, data: Option<Value> },
}

/// Why a call got no answer, sorted by what the server can have done with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallFailure {
    /// The request never reached the server (connection refused): nothing ran.
    #[error("{0}")]
    NotSent(McpError),
    /// The server does not know the session (404, or the 400 some servers answer): it ran
    /// nothing, and the connection must be opened again.
    #[error("the server no longer knows the session (HTTP {status})")]
    SessionGone { status: u16 },
    /// 401 or 403: the credential is wrong or not allowed. Not worth repeating as is.
    #[error("{0}")]
    Refused(McpError),
    /// The request was sent and no answer came back: the server may or may not have run it.
    #[error("{0}")]
    AfterSending(McpError),
}

/// One negotiated connection to a server, shared by concurrent calls.
pub struct ToolSession {
    wire: CallWire,
    pub era: Era,
    pub protocol_version: String,
    next_id: AtomicU64,
    /// Every call's headers but its name (version, method, session, content types).
    call_headers: HeaderMap,
    /// The bound on answer bytes held at once, shared by every call of the process.
    budget: Option<ResponseBudget>,
    /// What this server's answers may reserve of it at once.
    share: Option<ReservationShare>,
}

/// How one request's answer is read.
struct Reading<'a> {
    /// The request's id, which the answer must carry.
    id: u64,
    /// Where notifications on the request's stream go.
    notifications: Option<&'a mpsc::UnboundedSender<Value>>,
    /// Past this many bytes, an answer whose result has begun is passed on as it arrives.
    stream_past: Option<u64>,
}

enum CallWire {
    Streamable {
        http: Http,
        session_id: Option<HeaderValue>,
    },
    Sse(Mutex<HttpSse>),
}

impl ToolSession {
    /// Connects, negotiates the protocol (the era `expect` names tried first) and keeps the
    /// connection for calls. Bounded by `conn.limits.connect_timeout`.
    pub async fn open(conn: &ServerConnection, expect: Option<Era>) -> Result<Self, McpError> {
        let limit = conn.limits.connect_timeout;
        tokio::time::timeout(limit, Self::open_unbounded(conn, expect))
            .await
            .unwrap_or(Err(McpError::Timeout {
                what: "connecting and negotiating the protocol",
                limit,
                pages_read: 0,
            }))
    }

    async fn open_unbounded(
        conn: &ServerConnection,
        expect: Option<Era>,
    ) -> Result<Self, McpError> {
        let url = endpoint::parse_url(&conn.url)?;
        let checked = endpoint::check(&url, conn.endpoint_policy).await?;
        let http = super::session::http_for(conn, checked)?;
        let session = match conn.transport {
            TransportKind::Sse => Session::open_sse(http).await?,
            TransportKind::StreamableHttp => {
                match Session::open_streamable_expecting(http.clone(), expect).await {
                    Ok(session) => session,
                    // The server changed era since the controller read it: detect afresh.
                    Err(McpError::NotMcp(_) | McpError::ProtocolError(_))
                        if expect == Some(Era::Legacy) =>
                    {
                        Session::open_streamable(http).await?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let era = session.era;
        let protocol_version = session.protocol_version.clone();
        let wire = match session.into_wire() {
            Wire::Streamable(wire) => CallWire::Streamable {
                http: wire.http,
                session_id: wire.session_id,
            },
            Wire::Sse(wire) => CallWire::Sse(Mutex::new(wire)),
        };
        let mut session = ToolSession {
            wire,
            era,
            protocol_version,
            next_id: AtomicU64::new(100),
            call_headers: HeaderMap::new(),
            budget: conn.budget.clone(),
            share: conn.reservations.clone().or_else(|| {
                conn.budget
                    .as_ref()
                    .map(|b| ReservationShare::of(b, conn.limits.max_response_bytes))
            }),
        };
        let mut headers = session.headers("tools/call", None);
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let CallWire::Streamable {
            http,
            session_id: Some(id),
        } = &session.wire
        {
            headers.insert(SESSION_HEADER, id.clone());
            // The handshake's bytes are read: the connection holds nothing of the budget.
            http.allowance().release();
        } else if let CallWire::Streamable { http, .. } = &session.wire {
            http.allowance().release();
        }
        session.call_headers = headers;
        Ok(session)
    }

    /// A fresh request id for [`Self::call`] (so the caller can cancel it by id).
    pub fn next_request_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `tools/call` with `params` (name, arguments and the agent's `_meta`, to which the
    /// modern era's own metadata is added) as request `id`. Notifications the server sends on
    /// the call's stream (progress, log messages) go to `notifications`.
    pub async fn call(
        &self,
        id: u64,
        params: &Map<String, Value>,
        notifications: Option<&mpsc::UnboundedSender<Value>>,
    ) -> Result<CallAnswer, CallFailure> {
        self.send_request(id, "tools/call", params, notifications, true)
            .await
    }

    /// Sends any request the sidecar passes on (`tools/call`, `resources/read`,
    /// `prompts/get`, the list methods…) the way [`Self::call`] sends a call: the same headers
    /// (`Mcp-Method` this method; `Mcp-Name` the params' `name`, or `uri` for the resource
    /// methods), the same answer and failure taxonomy.
    pub async fn request(
        &self,
        id: u64,
        method: &str,
        params: &Map<String, Value>,
        notifications: Option<&mpsc::UnboundedSender<Value>>,
    ) -> Result<CallAnswer, CallFailure> {
        self.send_request(id, method, params, notifications, false)
            .await
    }

    /// `streams`: an answer too big to hold may be passed on as it arrives
    /// ([`CallAnswer::Streamed`]).
    async fn send_request(
        &self,
        id: u64,
        method: &str,
        params: &Map<String, Value>,
        notifications: Option<&mpsc::UnboundedSender<Value>>,
        streams: bool,
    ) -> Result<CallAnswer, CallFailure> {
        let mut headers = self.call_headers.clone();
        if self.era == Era::Modern {
            if method != "tools/call"
                && let Ok(v) = HeaderValue::from_str(method)
            {
                headers.insert(HeaderName::from_static("mcp-method"), v);
            }
            let name_param = if method.starts_with("resources/") {
                "uri"
            } else {
                "name"
            };
            if let Some(v) = params
                .get(name_param)
                .and_then(Value::as_str)
                .and_then(|n| HeaderValue::from_str(n).ok())
            {
                headers.insert(HeaderName::from_static("mcp-name"), v);
            }
        }
        // The modern era's own metadata goes into every request's `_meta`, over the agent's.
        let added_meta = (self.era == Era::Modern).then(modern_meta_fields);
        match &self.wire {
            CallWire::Streamable { http, session_id } => {
                let reading = Reading {
                    id,
                    notifications,
                    stream_past: streams.then_some(STREAM_PAST),
                };
                let body = rpc::request_json(id, method, params, added_meta);
                self.call_streamable(http, session_id.as_ref(), body, headers, reading)
                    .await
            }
            CallWire::Sse(wire) => {
                let body = rpc::request(id, method, params, added_meta);
                let mut wire = wire.lock().await;
                wire.request(&body, id, "send the request")
                    .await
                    .map(answer_of)
                    .map_err(after_sending)
            }
        }
    }

    /// Opens a watch on what the server pushes about `interest` on this connection: a legacy
    /// session's GET stream (a server sends the resource updates of the session that
    /// subscribed on that session's stream only), or a modern `subscriptions/listen` naming the
    /// resources. Ending the watch leaves the connection open. The old SSE transport's one
    /// stream belongs to its calls: [`WatchError::NotPushed`].
    pub async fn watch(&self, interest: Interest) -> Result<ToolChangeWatch, WatchError> {
        let CallWire::Streamable { http, session_id } = &self.wire else {
            return Err(WatchError::NotPushed(
                "the old SSE transport's notifications are not relayed",
            ));
        };
        let mut wire = StreamableHttp {
            http: http.clone(),
            session_id: session_id.clone(),
        };
        let max_event_bytes = http.max_response_bytes();
        match self.era {
            Era::Legacy => {
                if session_id.is_none() {
                    return Err(WatchError::NotPushed(
                        "the server keeps no session to push notifications on",
                    ));
                }
                let headers = self.headers("", None);
                match wire
                    .get_stream(headers, "open the notification stream")
                    .await?
                {
                    Ok(response) => Ok(watch::on_stream(
                        Era::Legacy,
                        response,
                        None,
                        max_event_bytes,
                        interest,
                    )),
                    Err(status) => Err(watch::refused_get_stream(status)),
                }
            }
            Era::Modern => {
                let id = self.next_request_id();
                let params = watch::listen_params(&interest);
                let body = rpc::request(
                    id,
                    watch::SUBSCRIPTIONS_LISTEN,
                    &params,
                    Some(modern_meta_fields()),
                );
                let headers = self.headers(watch::SUBSCRIPTIONS_LISTEN, None);
                let response = wire
                    .request_stream(&body, id, headers, "subscribe to notifications")
                    .await?
                    .map_err(watch::refused_listen)?;
                let mut watch =
                    watch::on_stream(Era::Modern, response, Some(id), max_event_bytes, interest);
                watch.acknowledged().await?;
                Ok(watch)
            }
        }
    }

    /// Tells the server the agent no longer waits for request `id`. Best effort.
    pub async fn cancel(&self, id: u64, reason: &str) {
        let note = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason},
        });
        match &self.wire {
            CallWire::Streamable { http, session_id } => {
                let headers = self.headers("notifications/cancelled", None);
                let mut request = http
                    .post(&http.endpoint().url)
                    .header(
                        ACCEPT,
                        HeaderValue::from_static("application/json, text/event-stream"),
                    )
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                    .headers(headers)
                    .body(serde_json::to_vec(&note).expect("JSON serialises"));
                if let Some(session) = session_id {
                    request = request.header(SESSION_HEADER, session.clone());
                }
                if let Ok(response) = http.send(request, "").await {
                    let _ = http.read_body(response).await;
                }
            }
            CallWire::Sse(wire) => {
                if let Ok(mut wire) = wire.try_lock() {
                    let _ = wire.notify(&note).await;
                }
            }
        }
    }

    /// Ends a legacy session politely (failures do not matter).
    pub async fn close(self) {
        if let CallWire::Streamable {
            http,
            session_id: Some(session),
        } = self.wire
        {
            let request = http
                .delete(&http.endpoint().url)
                .header(SESSION_HEADER, session);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), http.send(request, ""))
                .await;
        }
    }

    fn headers(&self, method: &str, name: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let version = match self.era {
            Era::Modern => MODERN_VERSION,
            Era::Legacy => self.protocol_version.as_str(),
        };
        if let Ok(v) = HeaderValue::from_str(version) {
            headers.insert(HeaderName::from_static("mcp-protocol-version"), v);
        }
        if self.era == Era::Modern {
            if let Ok(v) = HeaderValue::from_str(method) {
                headers.insert(HeaderName::from_static("mcp-method"), v);
            }
            if let Some(v) = name.and_then(|n| HeaderValue::from_str(n).ok()) {
                headers.insert(HeaderName::from_static("mcp-name"), v);
            }
        }
        headers
    }

    async fn call_streamable(
        &self,
        http: &Http,
        session_id: Option<&HeaderValue>,
        body: Vec<u8>,
        headers: HeaderMap,
        reading: Reading<'_>,
    ) -> Result<CallAnswer, CallFailure> {
        let id = reading.id;
        let request = http.post(&http.endpoint().url).headers(headers).body(body);
        // This call's share of the response budget (the connection's is for its handshake).
        let allowance = Arc::new(
            self.budget
                .as_ref()
                .map_or_else(Allowance::unlimited, ResponseBudget::allowance),
        );
        let response = http
            .send(request, "call the tool")
            .await
            .map_err(|e| match e {
                McpError::Unauthorized { .. } | McpError::Forbidden { .. } => {
                    CallFailure::Refused(e)
                }
                McpError::ConnectionRefused { .. } => CallFailure::NotSent(e),
                e => CallFailure::AfterSending(e),
            })?;
        let status = response.status();
        if !status.is_success() {
            let is_json = content_type(&response).starts_with("application/json");
            let body = http.read_body(response).await.unwrap_or_default();
            // A legacy server that lost the session ran nothing: 404 per the spec, 400 from
            // server-everything and Python SDK 1.24/1.25.
            if session_id.is_some()
                && (status == StatusCode::NOT_FOUND || status == StatusCode::BAD_REQUEST)
            {
                return Err(CallFailure::SessionGone {
                    status: status.as_u16(),
                });
            }
            let reply = rpc::reply_in_error_body(is_json, &body, id);
            return match reply {
                Some(reply) => Ok(answer_of(reply)),
                None if status.is_client_error() => {
                    Err(CallFailure::NotSent(McpError::ProtocolError(format!(
                        "the server refused the call with HTTP {}",
                        status.as_u16()
                    ))))
                }
                None => Err(CallFailure::AfterSending(McpError::ProtocolError(format!(
                    "the server answered the call with HTTP {}",
                    status.as_u16()
                )))),
            };
        }
        if content_type(&response).starts_with("text/event-stream") {
            let headers = self.headers("", None);
            return read_call_stream(
                http,
                response,
                reading,
                &allowance,
                self.share.clone(),
                |request_id| self.refuse_server_request(http, session_id, &headers, request_id),
            )
            .await;
        }
        let body = match reading.stream_past {
            None => http
                .read_answer_charged(response, &allowance, self.share.clone())
                .await
                .map_err(after_sending)?,
            Some(past) => match http
                .read_answer_or_begin(response, &allowance, self.share.clone(), past)
                .await
                .map_err(after_sending)?
            {
                AnswerRead::Whole(body) => body,
                AnswerRead::Begun { body, response } => {
                    let read = body.len() as u64;
                    match begun_result(body, response, read) {
                        Ok(begun) => {
                            return Ok(CallAnswer::Streamed(Box::new(StreamedResult::json(
                                begun, http, allowance, id,
                            ))));
                        }
                        // Not an answer to pass on as it comes: read whole, the usual way.
                        Err(back) => http
                            .read_rest(back.0, back.1, &allowance, self.share.clone())
                            .await
                            .map_err(after_sending)?,
                    }
                }
            },
        };
        if let Some(raw) = RawResult::of_answer(body.clone(), id) {
            return Ok(CallAnswer::Passed(raw.holding(allowance)));
        }
        // The general path parses the answer: its copies are charged too (the bytes, the
        // values, the agent's response), and held until this call's answer is dropped.
        charge_copies(&allowance, body.len())
            .await
            .map_err(after_sending)?;
        let value: Value = serde_json::from_slice(&body).map_err(|_| {
            after_sending(McpError::ProtocolError(
                "the answer to the call is not JSON".into(),
            ))
        })?;
        match rpc::classify(value, id) {
            Incoming::Reply(reply) => Ok(held_answer(reply, &allowance)),
            Incoming::Other(_) => Err(after_sending(McpError::ProtocolError(
                "the answer does not answer the call".into(),
            ))),
            Incoming::Malformed(why) => Err(after_sending(McpError::ProtocolError(format!(
                "the answer to the call is {why}"
            )))),
        }
    }
}

impl ToolSession {
    /// Answers a request the server sent on a call's stream (elicitation, sampling, roots: this
    /// client declared none of them) with an error, so the server is not left waiting.
    fn refuse_server_request(
        &self,
        http: &Http,
        session_id: Option<&HeaderValue>,
        headers: &HeaderMap,
        request_id: Value,
    ) {
        let answer = serde_json::json!({
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": -32601, "message": "this client (mcp-operator sidecar) declared no capability for server requests; it answers none"},
        });
        let mut headers = headers.clone();
        headers.remove(HeaderName::from_static("mcp-method"));
        let mut request = http
            .post(&http.endpoint().url)
            .header(
                ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            )
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .headers(headers)
            .body(serde_json::to_vec(&answer).expect("JSON serialises"));
        if let Some(session) = session_id {
            request = request.header(SESSION_HEADER, session.clone());
        }
        let http = http.clone();
        tokio::spawn(async move {
            if let Ok(response) = http.send(request, "").await {
                let _ = http.read_body(response).await;
            }
        });
    }
}

/// Reads a call's event stream until it carries the answer, handing notifications over and
/// the ids of requests the server sent to `refuse`.
async fn read_call_stream(
    http: &Http,
    mut response: Response,
    reading: Reading<'_>,
    allowance: &Arc<Allowance>,
    share: Option<ReservationShare>,
    refuse: impl Fn(Value),
) -> Result<CallAnswer, CallFailure> {
    let Reading {
        id,
        notifications,
        mut stream_past,
    } = reading;
    let mut reader = SseReader::whole(http.max_response_bytes());
    // An answer that may be passed on as it comes holds at most its first bytes: charged as
    // they come, never reserved ahead.
    let mut charge = match stream_past {
        Some(_) => UnannouncedAnswer::chunk_by_chunk(),
        None => UnannouncedAnswer::reserving(http.max_response_bytes(), share),
    };
    let mut read = 0u64;
    loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|e| after_sending(http.transport_error(&e)))?;
        let Some(chunk) = chunk else {
            return Err(after_sending(McpError::ProtocolError(
                "the server closed the call's stream without answering".into(),
            )));
        };
        read += chunk.len() as u64;
        charge
            .arrived(allowance, chunk.len() as u64)
            .await
            .map_err(after_sending)?;
        for event in reader.feed_events(&chunk).map_err(after_sending)? {
            // The usual answer goes on as the event's bytes: never parsed into values, nothing
            // held beyond what its chunks took.
            if event.carries_message()
                && let Some(raw) = RawResult::of_answer(event.data.clone(), id)
            {
                charge.done(allowance);
                return Ok(CallAnswer::Passed(raw.holding(Arc::clone(allowance))));
            }
            let value = match event.message() {
                SseMessage::Json(value) => value,
                SseMessage::NotJson => {
                    return Err(after_sending(McpError::ProtocolError(
                        "an event on the call's stream is not JSON".into(),
                    )));
                }
                SseMessage::Empty | SseMessage::Endpoint(_) | SseMessage::Other => continue,
            };
            match rpc::classify(value, id) {
                Incoming::Reply(reply) => {
                    // The event's bytes were charged as they came; its values and the agent's
                    // copy of them are what this answer holds beyond them.
                    charge.done(allowance);
                    charge_copies(allowance, allowance.held() as usize)
                        .await
                        .map_err(after_sending)?;
                    return Ok(held_answer(reply, allowance));
                }
                Incoming::Other(value) => {
                    let has_method = value.get("method").is_some();
                    match value.get("id") {
                        None if has_method => {
                            if let Some(tx) = notifications {
                                let _ = tx.send(value);
                            }
                        }
                        Some(request_id) if has_method => refuse(request_id.clone()),
                        _ => {}
                    }
                }
                Incoming::Malformed(why) => {
                    return Err(after_sending(McpError::ProtocolError(format!(
                        "an event on the call's stream is {why}"
                    ))));
                }
            }
        }
        if let Some(past) = stream_past
            && reader.pending_bytes() > past
        {
            // Tried once: an event that is not an answer's by now is read whole.
            stream_past = None;
            if let Some(data) = reader.answer_so_far() {
                match begun_result(data, response, read) {
                    Ok(begun) => {
                        return Ok(CallAnswer::Streamed(Box::new(StreamedResult::event(
                            begun,
                            http,
                            Arc::clone(allowance),
                            id,
                        ))));
                    }
                    Err(back) => response = back.1,
                }
            }
        }
        charge.handled_up_to(allowance, reader.pending_bytes());
    }
}

/// The answer's first bytes, scanned: [`Begun`] when its result object has begun and nothing
/// is wrong so far (it goes on as it comes); otherwise the bytes and the response back.
fn begun_result(
    body: Vec<u8>,
    response: Response,
    read: u64,
) -> Result<Begun, Box<(Vec<u8>, Response)>> {
    let mut scan = AnswerScan::default();
    let range = scan.feed(&body);
    if !scan.inside_result() {
        return Err(Box::new((body, response)));
    }
    Ok(Begun {
        first: bytes::Bytes::from(body).slice(range),
        scan,
        response,
        read,
    })
}

fn answer_of(reply: RpcReply) -> CallAnswer {
    match reply {
        RpcReply::Result(result) => CallAnswer::Result(result),
        RpcReply::Error { code, data } => CallAnswer::Error { code, data },
    }
}

/// Charges the two copies a parsed answer of `bytes` has beyond its bytes (the values, and the
/// agent's response written from them).
async fn charge_copies(allowance: &Allowance, bytes: usize) -> Result<(), McpError> {
    allowance.take(2 * bytes as u64).await
}

/// A parsed answer whose result goes on as bytes, holding what `allowance` took for it.
fn held_answer(reply: RpcReply, allowance: &Arc<Allowance>) -> CallAnswer {
    match reply {
        RpcReply::Result(result) => {
            CallAnswer::Passed(RawResult::of_map(&result).holding(Arc::clone(allowance)))
        }
        RpcReply::Error { code, data } => CallAnswer::Error { code, data },
    }
}

fn after_sending(e: McpError) -> CallFailure {
    CallFailure::AfterSending(e)
}
