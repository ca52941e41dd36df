//! Watching a server for `notifications/tools/list_changed`: the controller's cue to read the
//! server again (DESIGN §4 step 7). The watch says *when* to re-read, never *what* changed: the
//! catalogue only ever comes from a whole listing by [`super::read_server`].
//!
//! [`watch_tool_changes`] opens its own connection (same endpoint guard, credentials, TLS and
//! byte cap as a read; the handshake bounded by `connect_timeout`) and holds one subscription:
//!
//! ```text
//! legacy Streamable HTTP   initialize ─► notifications/initialized ─► GET <endpoint>
//!                          (Mcp-Session-Id)         the session's event stream carries them
//! modern (2026-07-28)      POST subscriptions/listen {notifications: {toolsListChanged: true}}
//!                          the response stream: acknowledged first, then the notifications
//! old HTTP+SSE transport   initialize over the stream; notifications arrive on the same stream
//! ```
//!
//! A server that does not declare `capabilities.tools.listChanged` (or that offers no stream to
//! push on) is refused with [`WatchError::NotPushed`], so nobody holds a connection for nothing.
//!
//! The sidecar also relays what a server pushes about its prompts and resources
//! ([`super::call::ToolSession::watch`], with an [`Interest`]): the same stream and the same
//! reading, opened on the connection its calls use (a legacy server sends a session's resource
//! updates on that session's GET stream only).
//!
//! The watch has no deadline once open: keep-alive comments cost nothing. One event larger than
//! `maxResponseBytes` ends it, and so does anything that ends the stream (server restart, network
//! failure, a graceful close). An ended watch is itself a signal: the controller re-reads the
//! server and opens a new watch. Dropping the watch closes its connection (and deletes a legacy
//! session, best effort).

use http::StatusCode;
use serde_json::{Map, Value, json};

use super::connection::ServerConnection;
use super::endpoint;
use super::error::McpError;
use super::http::Response;
use super::http_sse::HttpSse;
use super::rpc::Answer;
use super::rpc::RpcReply;
use super::session::{self, Era, Wire, not_mcp_status};
use super::sse::{SseMessage, SseReader};
use super::streamable_http::StreamableHttp;
use crate::core::Transport;

const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
const RESOURCE_UPDATED: &str = "notifications/resources/updated";
pub(super) const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
const METHOD_NOT_FOUND: i64 = -32601;
/// Distinct resource updates kept unread: past it the watch ends (its reader re-reads instead).
const MAX_PENDING_UPDATES: usize = 1024;

/// What a watch asks the server to push. Tool list changes are what the controller and the
/// sidecar's definitions watch; the sidecar's relay asks for the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interest {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    /// Resources whose updates are wanted: the modern era names them in `subscriptions/listen`;
    /// a legacy session subscribes them with `resources/subscribe` on the session itself.
    pub resource_uris: Vec<String>,
}

impl Interest {
    /// Tool list changes and nothing else.
    pub fn tools() -> Self {
        Interest {
            tools: true,
            ..Interest::default()
        }
    }
}

/// What a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The server said its tool list changed (several notifications in a row may arrive as one).
    ToolsChanged,
    /// Its prompt list changed (only when the [`Interest`] asked for prompts).
    PromptsChanged,
    /// Its resource list changed (only when the [`Interest`] asked for resources).
    ResourcesChanged,
    /// The resource at this URI changed (only when the [`Interest`] asked for resources; which
    /// URIs come is the server's subscription state, so the reader filters them).
    ResourceUpdated(String),
    /// The subscription is gone (stream closed, connection failed, server restarted, an event
    /// over the byte cap). The sentence says why; it never repeats what the server sent.
    Ended(String),
}

/// Why no watch was opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The server does not push tool list changes: rely on the refresh interval instead.
    #[error("the server does not push tool list changes: {0}")]
    NotPushed(&'static str),
    /// Connecting, negotiating or subscribing failed.
    #[error(transparent)]
    Failed(#[from] McpError),
}

impl WatchError {
    /// The reason word for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            WatchError::NotPushed(_) => "NotPushed",
            WatchError::Failed(e) => e.reason(),
        }
    }
}

/// One open subscription to a server's tool list changes.
pub struct ToolChangeWatch {
    era: Era,
    feed: Feed,
    state: State,
}

/// Where the server's messages come from.
enum Feed {
    /// A Streamable HTTP event stream: a legacy session's GET stream, or the response stream of
    /// a modern `subscriptions/listen` (whose request id is `listen_id`).
    Stream(Box<StreamFeed>),
    /// The old transport's one event stream (its reader task ends when this is dropped).
    Sse(HttpSse),
}

struct StreamFeed {
    response: Response,
    /// A chunk read but not yet fed: kept across a cancelled wait for the response budget.
    unread: Option<bytes::Bytes>,
    reader: SseReader,
    listen_id: Option<u64>,
    /// Kept to delete a legacy session when the watch ends; `None` once closed.
    wire: Option<StreamableHttp>,
}

/// What the messages seen so far amount to. Updated synchronously after each read, so
/// [`ToolChangeWatch::next`] loses nothing when its future is dropped.
#[derive(Debug, Default)]
struct State {
    interest: Interest,
    changed: bool,
    prompts_changed: bool,
    resources_changed: bool,
    /// Updated URIs not yet read, each once, oldest first.
    updated: std::collections::VecDeque<String>,
    ended: Option<String>,
    /// What a modern server agreed to send (its acknowledgement's `notifications`).
    acknowledged: Option<Value>,
}

/// Opens a watch on the server's tool list (a connection of its own). The handshake (guard,
/// connection, era detection, opening the stream and, for a modern server, its
/// acknowledgement) must finish within `limits.connect_timeout`.
pub async fn watch_tool_changes(conn: &ServerConnection) -> Result<ToolChangeWatch, WatchError> {
    let url = endpoint::parse_url(&conn.url)?;
    let limit = conn.limits.connect_timeout;
    tokio::time::timeout(limit, open(conn, &url))
        .await
        .unwrap_or_else(|_| {
            Err(WatchError::Failed(McpError::Timeout {
                what: "opening the notification stream",
                limit,
                pages_read: 0,
            }))
        })
}

impl ToolChangeWatch {
    /// The protocol era the watch speaks.
    pub fn era(&self) -> Era {
        self.era
    }

    /// Waits for the next event. After [`WatchEvent::Ended`] every call returns the same event
    /// at once. Cancel-safe: dropping the future loses no notification.
    pub async fn next(&mut self) -> WatchEvent {
        loop {
            if std::mem::take(&mut self.state.changed) {
                return WatchEvent::ToolsChanged;
            }
            if std::mem::take(&mut self.state.prompts_changed) {
                return WatchEvent::PromptsChanged;
            }
            if std::mem::take(&mut self.state.resources_changed) {
                return WatchEvent::ResourcesChanged;
            }
            if let Some(uri) = self.state.updated.pop_front() {
                return WatchEvent::ResourceUpdated(uri);
            }
            if let Some(reason) = &self.state.ended {
                return WatchEvent::Ended(reason.clone());
            }
            self.read_more().await;
        }
    }

    /// Closes the connection, deleting a legacy session (waits at most 2 s for that).
    pub async fn close(mut self) {
        if let Feed::Stream(feed) = &mut self.feed
            && let Some(mut wire) = feed.wire.take()
        {
            wire.close().await;
        }
    }

    /// Reads what arrives next and records what it means. Cancel-safe: a chunk read is kept
    /// until it is fed, and the stream holds of the response budget only the event it is still
    /// reading.
    async fn read_more(&mut self) {
        let state = &mut self.state;
        match &mut self.feed {
            Feed::Stream(feed) => match read_chunk(feed).await {
                Ok(Some(chunk)) => {
                    if let Some(wire) = &feed.wire
                        && let Err(e) = wire.http.charge(chunk.len()).await
                    {
                        state.end(e.to_string());
                        return;
                    }
                    feed.unread = None;
                    let fed = feed.reader.feed(&chunk);
                    if let Some(wire) = &feed.wire {
                        wire.http
                            .allowance()
                            .hold_at_most(feed.reader.pending_bytes());
                    }
                    let events = match fed {
                        Ok(events) => events,
                        Err(e) => {
                            state.end(e.to_string());
                            return;
                        }
                    };
                    for event in events {
                        match event {
                            SseMessage::Json(value) => state.absorb(&value, feed.listen_id),
                            SseMessage::NotJson => {
                                state.end("an event on the notification stream is not JSON".into());
                                return;
                            }
                            SseMessage::Empty | SseMessage::Endpoint(_) | SseMessage::Other => {}
                        }
                    }
                }
                Ok(None) => state.end("the server closed the notification stream".into()),
                Err(e) => state.end(match &feed.wire {
                    Some(wire) => format!(
                        "the notification stream broke: {}",
                        wire.http.transport_error(&e)
                    ),
                    None => "the notification stream broke".into(),
                }),
            },
            Feed::Sse(sse) => match sse.next_message().await {
                Some(Ok(value)) => {
                    state.absorb(&value, None);
                    // Handled: the watch keeps nothing of it.
                    sse.allowance().release();
                }
                Some(Err(e)) => state.end(format!("the event stream broke: {e}")),
                None => state.end("the server closed the event stream".into()),
            },
        }
    }

    /// Reads a modern listen stream until the server acknowledges the subscription. A watch of
    /// tool list changes needs them honoured; any other watch takes what the server honours.
    pub(super) async fn acknowledged(&mut self) -> Result<(), WatchError> {
        loop {
            if let Some(honoured) = &self.state.acknowledged {
                let tools = honoured
                    .get("toolsListChanged")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if self.state.interest == Interest::tools() && !tools {
                    return Err(WatchError::NotPushed(
                        "subscriptions/listen was acknowledged without notifications/tools/list_changed",
                    ));
                }
                return Ok(());
            }
            if let Some(reason) = &self.state.ended {
                return Err(WatchError::Failed(McpError::ProtocolError(format!(
                    "the subscription ended before the server acknowledged it ({reason})"
                ))));
            }
            self.read_more().await;
        }
    }
}

/// The chunk kept from a cancelled read, or the next one from the stream.
async fn read_chunk(feed: &mut StreamFeed) -> Result<Option<bytes::Bytes>, hyper::Error> {
    if feed.unread.is_none() {
        feed.unread = feed.response.chunk().await?;
    }
    Ok(feed.unread.clone())
}

impl Drop for ToolChangeWatch {
    fn drop(&mut self) {
        // The event stream closes with its response; a legacy session is deleted in the
        // background (best effort, bounded by StreamableHttp::close).
        if let Feed::Stream(feed) = &mut self.feed
            && let Some(mut wire) = feed.wire.take()
            && wire.session_id.is_some()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { wire.close().await });
        }
    }
}

impl State {
    fn end(&mut self, reason: String) {
        if self.ended.is_none() {
            self.ended = Some(reason);
        }
    }

    /// Records what one received message (or batch) means.
    fn absorb(&mut self, value: &Value, listen_id: Option<u64>) {
        if let Value::Array(batch) = value {
            for item in batch {
                self.absorb(item, listen_id);
            }
            return;
        }
        match signal(value, listen_id) {
            Signal::ToolsChanged => self.changed = true,
            Signal::PromptsChanged if self.interest.prompts => self.prompts_changed = true,
            Signal::ResourcesChanged if self.interest.resources => self.resources_changed = true,
            Signal::ResourceUpdated(uri) if self.interest.resources => {
                if !self.updated.contains(&uri) {
                    if self.updated.len() >= MAX_PENDING_UPDATES {
                        self.end(format!(
                            "more than {MAX_PENDING_UPDATES} resource updates were left unread"
                        ));
                        return;
                    }
                    self.updated.push_back(uri);
                }
            }
            Signal::PromptsChanged | Signal::ResourcesChanged | Signal::ResourceUpdated(_) => {}
            Signal::Acknowledged(honoured) => {
                self.acknowledged.get_or_insert(honoured);
            }
            Signal::Ended(reason) => self.end(reason),
            Signal::Ignored => {}
        }
    }
}

/// What one message on a notification stream means to the watch.
#[derive(Debug, PartialEq, Eq)]
enum Signal {
    ToolsChanged,
    PromptsChanged,
    ResourcesChanged,
    ResourceUpdated(String),
    /// A modern server acknowledged the subscription: what it will send (its `notifications`).
    Acknowledged(Value),
    Ended(String),
    /// Anything else: other notifications, server requests (not answered), someone else's
    /// subscription, responses on a stream that carries none of ours.
    Ignored,
}

fn signal(value: &Value, listen_id: Option<u64>) -> Signal {
    let Some(obj) = value.as_object() else {
        return Signal::Ended("a message on the notification stream is not JSON-RPC".into());
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Signal::Ended("a message on the notification stream is not JSON-RPC 2.0".into());
    }
    let Some(method) = obj.get("method") else {
        return match (listen_id, obj.get("id")) {
            (Some(listen_id), Some(id)) if same_id(id, listen_id) => {
                match obj
                    .get("error")
                    .and_then(|e| e.get("code"))
                    .and_then(Value::as_i64)
                {
                    Some(code) => Signal::Ended(format!(
                        "the server ended the subscription with JSON-RPC error {code}"
                    )),
                    None => Signal::Ended("the server ended the subscription".into()),
                }
            }
            _ => Signal::Ignored,
        };
    };
    if obj.contains_key("id") {
        // A server request: the watch declares no capabilities and answers none.
        return Signal::Ignored;
    }
    let params = obj.get("params");
    if let Some(listen_id) = listen_id
        && let Some(tag) = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_SUBSCRIPTION_ID))
        && !same_id(tag, listen_id)
    {
        return Signal::Ignored;
    }
    match method.as_str() {
        Some(TOOLS_LIST_CHANGED) => Signal::ToolsChanged,
        Some(PROMPTS_LIST_CHANGED) => Signal::PromptsChanged,
        Some(RESOURCES_LIST_CHANGED) => Signal::ResourcesChanged,
        Some(RESOURCE_UPDATED) => match params.and_then(|p| p.get("uri")).and_then(Value::as_str) {
            Some(uri) => Signal::ResourceUpdated(uri.to_string()),
            None => Signal::Ignored,
        },
        Some(SUBSCRIPTIONS_ACKNOWLEDGED) => Signal::Acknowledged(
            params
                .and_then(|p| p.get("notifications"))
                .cloned()
                .unwrap_or_else(|| json!({})),
        ),
        _ => Signal::Ignored,
    }
}

fn same_id(id: &Value, ours: u64) -> bool {
    match id {
        Value::Number(n) => n.as_u64() == Some(ours),
        Value::String(s) => s == &ours.to_string(),
        _ => false,
    }
}

/// The `subscriptions/listen` parameters for `interest` (the era's `_meta` is added by the
/// session).
pub(super) fn listen_params(interest: &Interest) -> Map<String, Value> {
    let mut filter = Map::new();
    for (key, wanted) in [
        ("toolsListChanged", interest.tools),
        ("promptsListChanged", interest.prompts),
        ("resourcesListChanged", interest.resources),
    ] {
        if wanted {
            filter.insert(key.into(), Value::Bool(true));
        }
    }
    if !interest.resource_uris.is_empty() {
        filter.insert(
            "resourceSubscriptions".into(),
            json!(interest.resource_uris),
        );
    }
    let mut params = Map::new();
    params.insert("notifications".into(), Value::Object(filter));
    params
}

async fn open(conn: &ServerConnection, url: &url::Url) -> Result<ToolChangeWatch, WatchError> {
    let max_event_bytes = conn.limits.max_response_bytes;
    let mut session = session::open(conn, url).await?;
    let era = session.era;
    if !session.pushes_tool_changes() {
        session.close().await;
        return Err(WatchError::NotPushed(
            "it does not declare capabilities.tools.listChanged",
        ));
    }
    let feed = match (conn.transport, era) {
        (Transport::Sse, _) => match session.into_wire() {
            Wire::Sse(sse) => Feed::Sse(sse),
            Wire::Streamable(_) => {
                return Err(WatchError::Failed(McpError::ProtocolError(
                    "the old SSE transport did not open an event stream".into(),
                )));
            }
        },
        (Transport::StreamableHttp, Era::Legacy) => {
            let opened = session
                .open_get_stream("open the notification stream")
                .await;
            let response = match opened {
                Ok(Ok(response)) => response,
                Ok(Err(status)) => {
                    session.close().await;
                    return Err(refused_get_stream(status));
                }
                Err(e) => {
                    session.close().await;
                    return Err(e.into());
                }
            };
            streamable_feed(session.into_wire(), response, None, max_event_bytes)?
        }
        (Transport::StreamableHttp, Era::Modern) => {
            let (id, opened) = session
                .request_stream(
                    SUBSCRIPTIONS_LISTEN,
                    listen_params(&Interest::tools()),
                    "subscribe to tool list changes",
                )
                .await?;
            let response = opened.map_err(refused_listen)?;
            streamable_feed(session.into_wire(), response, Some(id), max_event_bytes)?
        }
    };
    let mut watch = ToolChangeWatch {
        era,
        feed,
        state: State {
            interest: Interest::tools(),
            ..State::default()
        },
    };
    if matches!(&watch.feed, Feed::Stream(feed) if feed.listen_id.is_some()) {
        watch.acknowledged().await?;
    }
    Ok(watch)
}

/// A watch reading `response`, an event stream already opened on a connection someone else
/// keeps (the sidecar's pooled one): a legacy session's GET stream, or the stream of the modern
/// `subscriptions/listen` request `listen_id` (not yet acknowledged: see [`ToolChangeWatch::acknowledged`]).
/// Ending the watch closes the stream, never the session.
pub(super) fn on_stream(
    era: Era,
    response: Response,
    listen_id: Option<u64>,
    max_event_bytes: u64,
    interest: Interest,
) -> ToolChangeWatch {
    ToolChangeWatch {
        era,
        feed: Feed::Stream(Box::new(StreamFeed {
            response,
            unread: None,
            reader: SseReader::per_event(max_event_bytes),
            listen_id,
            wire: None,
        })),
        state: State {
            interest,
            ..State::default()
        },
    }
}

/// A legacy GET for the session's event stream answered without one.
pub(super) fn refused_get_stream(status: StatusCode) -> WatchError {
    match status {
        StatusCode::METHOD_NOT_ALLOWED => WatchError::NotPushed(
            "it offers no event stream for server messages (GET answered HTTP 405)",
        ),
        status if status.is_success() => WatchError::Failed(McpError::ProtocolError(format!(
            "opening the notification stream answered HTTP {} without an event stream",
            status.as_u16()
        ))),
        status => WatchError::Failed(not_mcp_status(status, "opening the notification stream")),
    }
}

fn streamable_feed(
    wire: Wire,
    response: Response,
    listen_id: Option<u64>,
    max_event_bytes: u64,
) -> Result<Feed, WatchError> {
    match wire {
        Wire::Streamable(wire) => Ok(Feed::Stream(Box::new(StreamFeed {
            response,
            unread: None,
            reader: SseReader::per_event(max_event_bytes),
            listen_id,
            wire: Some(wire),
        }))),
        Wire::Sse(_) => Err(WatchError::Failed(McpError::ProtocolError(
            "a Streamable HTTP session turned out to be the old SSE transport".into(),
        ))),
    }
}

/// A `subscriptions/listen` answered at once instead of with a stream.
pub(super) fn refused_listen(answer: Answer) -> WatchError {
    let reply = match answer {
        Answer::Reply(reply) | Answer::Status(_, Some(reply)) => reply,
        Answer::Status(status, None) => {
            return WatchError::Failed(not_mcp_status(status, "subscribe to tool list changes"));
        }
    };
    match reply {
        RpcReply::Error {
            code: METHOD_NOT_FOUND,
            ..
        } => WatchError::NotPushed("it does not offer subscriptions/listen"),
        RpcReply::Error { code, .. } => WatchError::Failed(McpError::ProtocolError(format!(
            "the server refused subscriptions/listen with JSON-RPC error {code}"
        ))),
        RpcReply::Result(_) => WatchError::Failed(McpError::ProtocolError(
            "the server answered subscriptions/listen at once instead of opening a stream".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controller runs each watch in its own task: the watch and its futures must be Send.
    #[allow(dead_code)]
    fn watches_can_live_in_spawned_tasks(conn: &ServerConnection, watch: &mut ToolChangeWatch) {
        fn send<T: Send>(_: T) {}
        send(watch_tool_changes(conn));
        send(watch.next());
    }

    #[test]
    fn listen_asks_for_tool_list_changes_only() {
        assert_eq!(
            Value::Object(listen_params(&Interest::tools())),
            json!({"notifications": {"toolsListChanged": true}})
        );
        let relay = Interest {
            tools: false,
            prompts: true,
            resources: true,
            resource_uris: vec!["file:///a".into()],
        };
        assert_eq!(
            Value::Object(listen_params(&relay)),
            json!({"notifications": {"promptsListChanged": true, "resourcesListChanged": true,
                "resourceSubscriptions": ["file:///a"]}})
        );
    }

    #[test]
    fn tool_list_changes_are_signalled_in_every_era() {
        let legacy = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        assert_eq!(signal(&legacy, None), Signal::ToolsChanged);
        let modern = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 7}}});
        assert_eq!(signal(&modern, Some(7)), Signal::ToolsChanged);
        let as_string = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "7"}}});
        assert_eq!(signal(&as_string, Some(7)), Signal::ToolsChanged);
        // Another subscription's notification is not ours.
        assert_eq!(signal(&modern, Some(8)), Signal::Ignored);
    }

    #[test]
    fn the_acknowledgement_says_whether_tool_changes_will_come() {
        let ack = |filter: Value| {
            json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 3}, "notifications": filter}})
        };
        assert_eq!(
            signal(&ack(json!({"toolsListChanged": true})), Some(3)),
            Signal::Acknowledged(json!({"toolsListChanged": true}))
        );
    }

    #[test]
    fn the_listen_response_ends_the_subscription() {
        let done = json!({"jsonrpc": "2.0", "id": 3, "result": {"_meta": {}}});
        assert!(matches!(signal(&done, Some(3)), Signal::Ended(_)));
        let failed =
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "SECRET"}});
        match signal(&failed, Some(3)) {
            Signal::Ended(reason) => {
                assert!(reason.contains("-32603"));
                assert!(!reason.contains("SECRET"), "never repeat the server's text");
            }
            other => panic!("{other:?}"),
        }
        // Someone else's response, and responses on a legacy GET stream, mean nothing.
        assert_eq!(signal(&done, Some(4)), Signal::Ignored);
        assert_eq!(signal(&done, None), Signal::Ignored);
    }

    #[test]
    fn other_messages_are_ignored_and_garbage_ends_the_watch() {
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        assert_eq!(signal(&ping, None), Signal::Ignored);
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
        assert_eq!(signal(&log, None), Signal::Ignored);
        assert!(matches!(signal(&json!({"foo": 1}), None), Signal::Ended(_)));
        assert!(matches!(signal(&json!(42), None), Signal::Ended(_)));
    }

    #[test]
    fn prompt_and_resource_changes_count_only_when_asked_for() {
        let note = |method: &str, params: Value| json!({"jsonrpc": "2.0", "method": method, "params": params});
        let messages = [
            note("notifications/prompts/list_changed", json!({})),
            note("notifications/resources/list_changed", json!({})),
            note(
                "notifications/resources/updated",
                json!({"uri": "file:///a"}),
            ),
            note(
                "notifications/resources/updated",
                json!({"uri": "file:///a"}),
            ),
            note(
                "notifications/resources/updated",
                json!({"uri": "file:///b"}),
            ),
        ];
        let mut tools_only = State {
            interest: Interest::tools(),
            ..State::default()
        };
        let mut relay = State {
            interest: Interest {
                prompts: true,
                resources: true,
                ..Interest::default()
            },
            ..State::default()
        };
        for m in &messages {
            tools_only.absorb(m, None);
            relay.absorb(m, None);
        }
        assert!(!tools_only.prompts_changed && !tools_only.resources_changed);
        assert!(tools_only.updated.is_empty());
        assert!(relay.prompts_changed && relay.resources_changed);
        assert_eq!(Vec::from(relay.updated.clone()), ["file:///a", "file:///b"]);
        for i in 0..MAX_PENDING_UPDATES {
            relay.absorb(
                &note(
                    "notifications/resources/updated",
                    json!({"uri": format!("u{i}")}),
                ),
                None,
            );
        }
        assert!(relay.ended.as_deref().is_some_and(|r| r.contains("unread")));
    }

    #[test]
    fn a_batch_counts_every_member_and_changes_coalesce() {
        let mut state = State::default();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        state.absorb(&json!([note.clone(), note]), None);
        assert!(state.changed);
        assert!(state.ended.is_none());
        state.end("first".into());
        state.end("second".into());
        assert_eq!(state.ended.as_deref(), Some("first"));
    }
}
