//! The MCP client side: connect, negotiate the protocol era, list every page of `tools/list`
//! (and, for the controller, of the resources, templates and prompts the server advertises)
//! within bounds, and build the classified catalogue. Knows nothing of Kubernetes nor of the CRD
//! types: it speaks [`crate::core`]'s vocabulary (catalogue, era, transport, limits).
//!
//! ```text
//! read_server / watch_tool_changes
//!        │
//!        ▼
//!     session::open ─► endpoint (guard, resolve) ─► http (bounded bodies, credentials,
//!        │                                              │    the response budget: budget)
//!        │                                              │
//!        │ (era detection, handshake)   streamable_http ┴ http_sse (old transport)
//!        │                                      └── sse::SseReader ──┘   (also used by watch)
//!        ├──► listing (every page, the rules) ──► core::catalog (pure: classify, digest)
//!        ├──► watch (one long-lived subscription to notifications/tools/list_changed; the
//!        │          sidecar's relay: prompt and resource changes on a call connection)
//!        └──► call (the sidecar: concurrent tools/call on one negotiated connection)
//!               └─ pass_through: a JSON answer's result handed on as the server's bytes
//!
//!  rpc: JSON-RPC framing, classification and the reply type every transport returns
//!  tls: what a connection trusts (spec.tls: system roots, a CA bundle, no verification),
//!       for http's client and oauth's
//!  serving: the other side — the server half of Streamable HTTP (replies, guard, era checks)
//!           that the sidecar's and the bridge's endpoints share
//! ```
//!
//! No cycles: `watch` builds on `session`, the transports on `http`, `rpc` and `sse`.
//!
//! [`read_server`] is the one entry point for reading: the probe and the controller both call it.
//! [`watch_tool_changes`] is the controller's trigger: it says *when* to read again, never what.

pub mod answer_scan;
pub mod budget;
pub mod call;
pub mod connection;
pub mod endpoint;
pub mod error;
mod http;
mod http_sse;
pub mod listing;
pub mod oauth;
pub mod pass_through;
mod rpc;
pub mod serving;
pub mod session;
mod sse;
mod streamable_http;
pub mod streamed;
mod tls;
pub mod watch;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

pub use crate::core::catalog;
use crate::core::resources_prompts::{ListRead, OfferedRead};
pub use crate::core::{Access, Catalog, CatalogTool, Limits, Transport};
pub use budget::{Allowance, ReservationShare, ResponseBudget};
pub use connection::{Credentials, SecretValue, ServerConnection, TlsSettings, TransportKind};
pub use endpoint::EndpointPolicy;
pub use error::McpError;
pub use session::{Era, ServerInfo};
pub use watch::{Interest, ToolChangeWatch, WatchError, WatchEvent, watch_tool_changes};

/// What one successful read of a server found.
#[derive(Debug)]
pub struct ServerReport {
    pub era: Era,
    pub protocol_version: String,
    pub server_info: ServerInfo,
    /// Whether the server pushes `notifications/tools/list_changed`.
    pub pushes_tool_changes: bool,
    /// The smallest `ttlMs` a modern server gave for its tool list.
    pub ttl_ms: Option<u64>,
    pub pages_read: u32,
    /// Raw tool definitions in listing order (the sidecar needs the live schemas).
    pub tools: Vec<Map<String, Value>>,
    /// The resources, templates and prompts, as far as [`read_catalogue`] read them (none
    /// offered for [`read_server`], which reads the tools only).
    pub offered: OfferedRead,
    /// The share of the response budget the read's bodies hold: given back when the report,
    /// and with it every parsed page, is dropped.
    pub held: std::sync::Arc<Allowance>,
}

impl ServerReport {
    /// The classified catalogue (overrides: tool name → access).
    pub fn catalog(&self, overrides: &BTreeMap<String, Access>) -> Catalog {
        let mut catalog = catalog::build(&self.tools, overrides, self.pages_read);
        crate::core::resources_prompts::record(&mut catalog, &self.offered);
        catalog
    }
}

/// Which step of reading a server failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Reaching the server and negotiating the protocol: the server is not usable.
    Connect,
    /// Listing the tools after a successful handshake: the server answers, its catalogue is bad.
    List,
}

/// A failed read: the reason, and whether the server got as far as the handshake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct ReadFailure {
    pub stage: Stage,
    pub error: McpError,
}

/// A 401 whose challenge names RFC 9728 metadata becomes [`McpError::OAuthRequired`] naming
/// the authorization servers the metadata lists (read under the endpoint guard, bounded).
async fn follow_challenge(e: McpError, url: &url::Url, conn: &ServerConnection) -> McpError {
    match e {
        McpError::Unauthorized {
            resource_metadata: Some(metadata),
            ..
        } => oauth::required(url, &metadata, &conn.tls, conn.endpoint_policy).await,
        e => e,
    }
}

/// Connects to a server and reads its whole tool list. The handshake and the listing each get
/// `limits.connect_timeout`. The sidecar's reads: it needs the live tools only.
pub async fn read_server(conn: &ServerConnection) -> Result<ServerReport, ReadFailure> {
    read(conn, false).await
}

/// [`read_server`], then the resources, resource templates and prompts the server advertises
/// (each list under the same bounds as the tools, within its own `connect_timeout`). A list
/// that fails does not fail the read: it is reported in [`ServerReport::offered`]. The
/// controller's probe and `mcp-operator probe` read this way.
pub async fn read_catalogue(conn: &ServerConnection) -> Result<ServerReport, ReadFailure> {
    read(conn, true).await
}

async fn read(conn: &ServerConnection, offered: bool) -> Result<ServerReport, ReadFailure> {
    let connect_failed = |error| ReadFailure {
        stage: Stage::Connect,
        error,
    };
    let list_failed = |error| ReadFailure {
        stage: Stage::List,
        error,
    };
    let url = endpoint::parse_url(&conn.url).map_err(connect_failed)?;
    let limit = conn.limits.connect_timeout;
    let timeout = |what| McpError::Timeout {
        what,
        limit,
        pages_read: 0,
    };
    // Time spent waiting for the response budget is not the server's: the deadlines skip it.
    let allowance = std::sync::Arc::new(
        conn.budget
            .as_ref()
            .map_or_else(Allowance::unlimited, ResponseBudget::allowance),
    );
    let session = budget::within(
        limit,
        &allowance,
        session::open_with(conn, &url, allowance.clone()),
    )
    .await
    .ok_or_else(|| timeout("connecting and negotiating the protocol"))
    .and_then(|opened| opened);
    let mut session = match session {
        Ok(session) => session,
        Err(e) => return Err(connect_failed(follow_challenge(e, &url, conn).await)),
    };

    let mut pages_read = 0;
    let listed = budget::within(
        limit,
        &allowance,
        listing::list_all_tools(&mut session, conn.limits.max_tool_pages, &mut pages_read),
    )
    .await;
    let listing = match listed {
        Some(Ok(listing)) => listing,
        Some(Err(e)) => {
            session.close().await;
            return Err(list_failed(e));
        }
        None => {
            session.close().await;
            return Err(list_failed(
                timeout("listing the tools").with_pages_read(pages_read),
            ));
        }
    };
    let offered = match offered {
        true => read_offered(&mut session, conn, &allowance).await,
        false => OfferedRead::default(),
    };
    let report = ServerReport {
        era: session.era,
        protocol_version: session.protocol_version.clone(),
        server_info: session.server_info.clone(),
        pushes_tool_changes: session.pushes_tool_changes(),
        ttl_ms: listing.ttl_ms,
        pages_read: listing.pages_read,
        tools: listing.tools,
        offered,
        held: allowance,
    };
    session.close().await;
    Ok(report)
}

/// The lists beside the tools that the server advertises (`resources`: resources and
/// templates; `prompts`: prompts), each read whole or failed with its reason.
async fn read_offered(
    session: &mut session::Session,
    conn: &ServerConnection,
    allowance: &std::sync::Arc<Allowance>,
) -> OfferedRead {
    let mut read = OfferedRead::default();
    if session.offers("resources") {
        read.resources = read_list(session, conn, allowance, listing::List::Resources).await;
        read.resource_templates =
            read_list(session, conn, allowance, listing::List::ResourceTemplates).await;
    }
    if session.offers("prompts") {
        read.prompts = read_list(session, conn, allowance, listing::List::Prompts).await;
    }
    read
}

async fn read_list(
    session: &mut session::Session,
    conn: &ServerConnection,
    allowance: &std::sync::Arc<Allowance>,
    list: listing::List,
) -> ListRead {
    let limit = conn.limits.connect_timeout;
    let mut pages_read = 0;
    let listed = budget::within(
        limit,
        allowance,
        listing::list_all(session, list, conn.limits.max_tool_pages, &mut pages_read),
    )
    .await;
    let error = match listed {
        Some(Ok(listing)) => return ListRead::Read(listing.tools),
        Some(Err(e)) => e,
        None => McpError::Timeout {
            what: list_what(list),
            limit,
            pages_read,
        },
    };
    ListRead::Failed {
        reason: error.reason().to_string(),
        message: error.to_string(),
    }
}

fn list_what(list: listing::List) -> &'static str {
    match list {
        listing::List::Tools => "listing the tools",
        listing::List::Resources => "listing the resources",
        listing::List::ResourceTemplates => "listing the resource templates",
        listing::List::Prompts => "listing the prompts",
    }
}
