//! A negotiated conversation with one MCP server, in whichever protocol era it speaks.
//!
//! Era detection (DESIGN §3): over Streamable HTTP we try the modern era first with
//! `server/discover`; a 400 carrying -32020/-32021/-32022 means the server is modern and
//! rejected us (we stay modern and report it); any other JSON-RPC error or 4xx means a legacy
//! server, and we fall back to the `initialize` handshake. The old HTTP+SSE transport is legacy.

use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use rmcp::model::{ClientCapabilities, ErrorCode, Implementation};

pub use crate::core::{Era, ServerInfo};

use super::error::McpError;
use super::http::{Http, Response};
use super::http_sse::HttpSse;
use super::rpc::Answer;
use super::rpc::{self, RpcReply};
use super::streamable_http::{SESSION_HEADER, StreamableHttp};

/// The modern protocol revision: no handshake, no sessions.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy revisions we accept from `initialize`, newest first (the first is the one we offer).
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

// JSON-RPC codes with which a modern server rejects a request without being legacy.
const HEADER_MISMATCH: i64 = ErrorCode::HEADER_MISMATCH.0 as i64;
const MISSING_CLIENT_CAPABILITY: i64 = ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY.0 as i64;
const UNSUPPORTED_PROTOCOL_VERSION: i64 = ErrorCode::UNSUPPORTED_PROTOCOL_VERSION.0 as i64;

/// The capabilities this client declares, always the same: a server's tool list may depend on
/// them, and the controller and the sidecar must see the same list.
pub fn client_capabilities() -> Value {
    serde_json::to_value(ClientCapabilities::default()).expect("capabilities serialise")
}

pub(super) fn client_info() -> Value {
    serde_json::to_value(Implementation::new(
        "mcp-operator",
        env!("CARGO_PKG_VERSION"),
    ))
    .expect("client info serialises")
}

/// What the server says about itself, cut to display lengths.
fn server_info_from(value: Option<&Value>) -> ServerInfo {
    let text = |key: &str, max: usize| {
        value
            .and_then(|v| v.get(key))
            .and_then(Value::as_str)
            .map(|s| truncate(s, max))
    };
    ServerInfo {
        name: text("name", 253).unwrap_or_default(),
        version: text("version", 64).unwrap_or_default(),
        title: text("title", 253),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_string()
    } else {
        s[..s.floor_char_boundary(max)].to_string()
    }
}

/// The transport under a session.
// One per session, moved rarely: its size is not worth a box on every request path.
#[allow(clippy::large_enum_variant)]
pub(super) enum Wire {
    Streamable(StreamableHttp),
    Sse(HttpSse),
}

/// An open, negotiated connection.
pub struct Session {
    wire: Wire,
    pub era: Era,
    pub protocol_version: String,
    pub server_info: ServerInfo,
    /// The server's declared capabilities (`tools.listChanged` tells whether it pushes changes).
    pub capabilities: Value,
    next_id: u64,
}

impl Session {
    /// Opens a Streamable HTTP session, detecting the era.
    pub async fn open_streamable(http: Http) -> Result<Session, McpError> {
        let mut wire = StreamableHttp::new(http);
        match discover(&mut wire).await? {
            Discovery::Modern {
                server_info,
                capabilities,
            } => Ok(Session {
                wire: Wire::Streamable(wire),
                era: Era::Modern,
                protocol_version: MODERN_VERSION.into(),
                server_info,
                capabilities,
                next_id: 2,
            }),
            Discovery::Legacy => {
                let mut session = Session {
                    wire: Wire::Streamable(wire),
                    era: Era::Legacy,
                    protocol_version: String::new(),
                    server_info: ServerInfo::default(),
                    capabilities: Value::Null,
                    next_id: 2,
                };
                session.initialize().await?;
                Ok(session)
            }
        }
    }

    /// Opens a Streamable HTTP session with the handshake of a server already known to be
    /// legacy (skips the modern probe); any other hint detects the era as usual.
    pub async fn open_streamable_expecting(
        http: Http,
        era: Option<Era>,
    ) -> Result<Session, McpError> {
        if era != Some(Era::Legacy) {
            return Session::open_streamable(http).await;
        }
        let mut session = Session {
            wire: Wire::Streamable(StreamableHttp::new(http)),
            era: Era::Legacy,
            protocol_version: String::new(),
            server_info: ServerInfo::default(),
            capabilities: Value::Null,
            next_id: 2,
        };
        session.initialize().await?;
        Ok(session)
    }

    /// Opens an old HTTP+SSE connection (always the legacy era).
    pub async fn open_sse(http: Http) -> Result<Session, McpError> {
        let wire = HttpSse::connect(http).await?;
        let mut session = Session {
            wire: Wire::Sse(wire),
            era: Era::Legacy,
            protocol_version: String::new(),
            server_info: ServerInfo::default(),
            capabilities: Value::Null,
            next_id: 1,
        };
        session.initialize().await?;
        Ok(session)
    }

    /// Whether the server declares the capability `name` (`resources`, `prompts`): only then
    /// are its lists asked for.
    pub fn offers(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(Value::is_object)
    }

    /// Whether the server pushes `notifications/tools/list_changed`.
    pub fn pushes_tool_changes(&self) -> bool {
        self.capabilities
            .pointer("/tools/listChanged")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    async fn initialize(&mut self) -> Result<(), McpError> {
        let params = json!({
            "protocolVersion": LEGACY_VERSIONS[0],
            "capabilities": client_capabilities(),
            "clientInfo": client_info(),
        });
        let params = params.as_object().cloned().unwrap_or_default();
        let (reply, headers) = self.send("initialize", params, "initialize").await?;
        let result = match reply {
            Answer::Reply(RpcReply::Result(result)) => result,
            Answer::Reply(RpcReply::Error { code, .. }) => {
                return Err(McpError::ProtocolError(format!(
                    "the server refused initialize with JSON-RPC error {code}"
                )));
            }
            Answer::Status(status, _) => return Err(not_mcp_status(status, "initialize")),
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                McpError::ProtocolError("the initialize result has no protocolVersion".into())
            })?;
        if !LEGACY_VERSIONS.contains(&version) {
            return Err(McpError::UnsupportedProtocol(format!(
                "initialize negotiated {:?}; supported are {}",
                truncate(version, 40),
                LEGACY_VERSIONS.join(", ")
            )));
        }
        self.protocol_version = version.to_string();
        self.server_info = server_info_from(result.get("serverInfo"));
        self.capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
        if let Wire::Streamable(wire) = &mut self.wire {
            wire.session_id = headers.get(SESSION_HEADER).cloned();
        }
        let note = rpc::notification("notifications/initialized");
        let headers = self.legacy_headers();
        match &mut self.wire {
            Wire::Streamable(wire) => wire.notify(&note, headers).await,
            Wire::Sse(wire) => wire.notify(&note).await,
        }
    }

    /// Sends one request with the era's metadata and headers.
    pub async fn request(
        &mut self,
        method: &'static str,
        params: Map<String, Value>,
        step: &'static str,
    ) -> Result<Answer, McpError> {
        self.send(method, params, step)
            .await
            .map(|(answer, _)| answer)
    }

    async fn send(
        &mut self,
        method: &'static str,
        params: Map<String, Value>,
        step: &'static str,
    ) -> Result<(Answer, HeaderMap), McpError> {
        let (id, body, headers) = self.frame(method, params);
        match &mut self.wire {
            Wire::Streamable(wire) => wire.request(&body, id, headers, step).await,
            Wire::Sse(wire) => Ok((
                Answer::Reply(wire.request(&body, id, step).await?),
                HeaderMap::new(),
            )),
        }
    }

    /// Sends one request whose answer may be a long-lived event stream (Streamable HTTP only):
    /// returns the request id and either the unread stream or the answer.
    pub(super) async fn request_stream(
        &mut self,
        method: &'static str,
        params: Map<String, Value>,
        step: &'static str,
    ) -> Result<(u64, Result<Response, Answer>), McpError> {
        let (id, body, headers) = self.frame(method, params);
        match &mut self.wire {
            Wire::Streamable(wire) => {
                Ok((id, wire.request_stream(&body, id, headers, step).await?))
            }
            Wire::Sse(_) => Err(McpError::ProtocolError(format!(
                "{method} needs Streamable HTTP; the old SSE transport carries no response streams"
            ))),
        }
    }

    /// Opens a legacy Streamable HTTP session's GET event stream (see
    /// [`StreamableHttp::get_stream`]).
    pub(super) async fn open_get_stream(
        &mut self,
        step: &'static str,
    ) -> Result<Result<Response, StatusCode>, McpError> {
        let headers = self.legacy_headers();
        match &mut self.wire {
            Wire::Streamable(wire) => wire.get_stream(headers, step).await,
            Wire::Sse(_) => Err(McpError::ProtocolError(
                "the old SSE transport has no session GET stream".into(),
            )),
        }
    }

    /// Hands the transport over to a caller that keeps the connection (watching for changes);
    /// closing it is then the caller's job.
    pub(super) fn into_wire(self) -> Wire {
        self.wire
    }

    /// A request's id, body and headers in the session's era.
    fn frame(
        &mut self,
        method: &'static str,
        params: Map<String, Value>,
    ) -> (u64, Value, HeaderMap) {
        let id = self.next_id;
        self.next_id += 1;
        let (headers, added_meta) = match self.era {
            Era::Modern => (modern_headers(method), Some(modern_meta_fields())),
            Era::Legacy => (self.legacy_headers(), None),
        };
        (id, rpc::request(id, method, &params, added_meta), headers)
    }

    fn legacy_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if !self.protocol_version.is_empty()
            && let Ok(v) = HeaderValue::from_str(&self.protocol_version)
        {
            headers.insert(HeaderName::from_static("mcp-protocol-version"), v);
        }
        headers
    }

    /// Ends the session (legacy Streamable HTTP sessions are deleted; nothing else to do).
    pub async fn close(mut self) {
        if let Wire::Streamable(wire) = &mut self.wire {
            wire.close().await;
        }
    }
}

enum Discovery {
    Modern {
        server_info: ServerInfo,
        capabilities: Value,
    },
    Legacy,
}

/// The modern era's `_meta` of every request, built once (the sidecar adds it to every call).
pub(super) fn modern_meta_fields() -> &'static Map<String, Value> {
    static META: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    META.get_or_init(|| {
        let mut meta = Map::new();
        meta.insert(META_PROTOCOL_VERSION.into(), MODERN_VERSION.into());
        meta.insert(META_CLIENT_INFO.into(), client_info());
        meta.insert(META_CLIENT_CAPABILITIES.into(), client_capabilities());
        meta
    })
}

fn modern_headers(method: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        HeaderName::from_static("mcp-protocol-version"),
        HeaderValue::from_static(MODERN_VERSION),
    );
    if let Ok(v) = HeaderValue::from_str(method) {
        headers.insert(HeaderName::from_static("mcp-method"), v);
    }
    headers
}

async fn discover(wire: &mut StreamableHttp) -> Result<Discovery, McpError> {
    let body = rpc::request(
        1,
        "server/discover",
        &Map::new(),
        Some(modern_meta_fields()),
    );
    let (answer, _) = wire
        .request(
            &body,
            1,
            modern_headers("server/discover"),
            "discover the server",
        )
        .await?;
    let reply = match answer {
        Answer::Reply(reply) => reply,
        Answer::Status(status, Some(reply)) if status.is_client_error() => reply,
        // A legacy server may answer an unknown method with any 4xx (or 404/405 for the POST).
        Answer::Status(status, None) if status.is_client_error() => return Ok(Discovery::Legacy),
        Answer::Status(status, _) => return Err(not_mcp_status(status, "discover")),
    };
    match reply {
        RpcReply::Result(result) => {
            let supported: Vec<&str> = result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !supported.contains(&MODERN_VERSION) {
                if supported.iter().any(|v| LEGACY_VERSIONS.contains(v)) {
                    return Ok(Discovery::Legacy);
                }
                return Err(McpError::UnsupportedProtocol(format!(
                    "server/discover offers {}; this operator speaks {MODERN_VERSION} and {}",
                    describe_versions(&supported),
                    LEGACY_VERSIONS.join(", ")
                )));
            }
            let server_info = server_info_from(
                result
                    .get("_meta")
                    .and_then(|m| m.get(META_SERVER_INFO))
                    .or_else(|| result.get("serverInfo")),
            );
            Ok(Discovery::Modern {
                server_info,
                capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
            })
        }
        RpcReply::Error {
            code: UNSUPPORTED_PROTOCOL_VERSION,
            data,
        } => {
            let supported: Vec<&str> = data
                .as_ref()
                .and_then(|d| d.get("supported"))
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            Err(McpError::UnsupportedProtocol(format!(
                "the server rejected protocol {MODERN_VERSION} (it supports {})",
                describe_versions(&supported)
            )))
        }
        RpcReply::Error {
            code: code @ (HEADER_MISMATCH | MISSING_CLIENT_CAPABILITY),
            ..
        } => Err(McpError::ProtocolError(format!(
            "the modern server rejected discovery with JSON-RPC error {code} ({})",
            if code == HEADER_MISMATCH {
                "request headers do not match the body"
            } else {
                "it requires a client capability this operator does not declare"
            }
        ))),
        RpcReply::Error { .. } => Ok(Discovery::Legacy),
    }
}

fn describe_versions(versions: &[&str]) -> String {
    let shown: Vec<String> = versions
        .iter()
        .filter(|v| {
            v.len() <= 20
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        })
        .take(8)
        .map(|v| v.to_string())
        .collect();
    if shown.is_empty() {
        "no version we recognise".into()
    } else {
        shown.join(", ")
    }
}

/// A non-2xx status where the protocol wanted an answer.
pub fn not_mcp_status(status: StatusCode, step: &str) -> McpError {
    match status.as_u16() {
        404 | 405 => McpError::NotMcp(format!(
            "{step} answered HTTP {}; is the URL the MCP endpoint (often ending in /mcp)?",
            status.as_u16()
        )),
        code if code >= 500 => {
            McpError::ProtocolError(format!("{step} answered HTTP {code}: the server failed"))
        }
        code => McpError::NotMcp(format!("{step} answered HTTP {code}")),
    }
}

/// Checks the endpoint, builds the HTTP client and negotiates the protocol. No deadline of its
/// own: every caller bounds it with `limits.connect_timeout`.
pub(super) async fn open(
    conn: &super::ServerConnection,
    url: &url::Url,
) -> Result<Session, McpError> {
    open_with(conn, url, std::sync::Arc::new(allowance_for(conn))).await
}

/// [`open`], the session's bodies charged to `allowance`.
pub(super) async fn open_with(
    conn: &super::ServerConnection,
    url: &url::Url,
    allowance: std::sync::Arc<super::budget::Allowance>,
) -> Result<Session, McpError> {
    let checked = super::endpoint::check(url, conn.endpoint_policy).await?;
    let http = http_with(conn, checked, allowance)?;
    match conn.transport {
        crate::core::Transport::StreamableHttp => Session::open_streamable(http).await,
        crate::core::Transport::Sse => Session::open_sse(http).await,
    }
}

/// The HTTP client for one connection to an endpoint already checked by the guard: its
/// credentials, TLS settings and bounds.
pub(crate) fn http_for(
    conn: &super::ServerConnection,
    checked: super::endpoint::CheckedEndpoint,
) -> Result<Http, McpError> {
    http_with(conn, checked, std::sync::Arc::new(allowance_for(conn)))
}

/// A new allowance on the connection's budget (unlimited without one).
fn allowance_for(conn: &super::ServerConnection) -> super::budget::Allowance {
    conn.budget
        .as_ref()
        .map_or_else(super::budget::Allowance::unlimited, |b| b.allowance())
}

/// [`http_for`], its bodies charged to `allowance`.
fn http_with(
    conn: &super::ServerConnection,
    checked: super::endpoint::CheckedEndpoint,
    allowance: std::sync::Arc<super::budget::Allowance>,
) -> Result<Http, McpError> {
    Http::new(
        checked,
        &conn.credentials,
        &conn.tls,
        conn.limits.connect_timeout,
        conn.limits.max_response_bytes,
        allowance,
        conn.endpoint_policy,
    )
}

#[cfg(test)]
mod protocol_constants {
    use rmcp::model::ProtocolVersion;

    use super::*;

    #[test]
    fn our_revisions_are_the_sdk_revisions() {
        assert_eq!(MODERN_VERSION, ProtocolVersion::V_2026_07_28.as_str());
        let sdk = [
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2024_11_05,
        ];
        for (ours, theirs) in LEGACY_VERSIONS.iter().zip(sdk.iter()) {
            assert_eq!(*ours, theirs.as_str());
        }
    }

    #[test]
    fn the_declared_capabilities_and_identity_are_fixed() {
        assert_eq!(client_capabilities(), json!({}));
        assert_eq!(client_info()["name"], "mcp-operator");
    }
}
