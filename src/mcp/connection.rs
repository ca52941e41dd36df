//! What it takes to reach one MCP server: URL, transport, credentials, TLS and limits. The
//! controller builds this from an McpServer and its Secrets; the probe from its flags.

use std::fmt;
use std::time::Duration;

use super::endpoint::EndpointPolicy;

/// Which HTTP transport the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// Streamable HTTP (both protocol eras).
    #[default]
    StreamableHttp,
    /// The old HTTP+SSE transport: a GET event stream plus a POST endpoint.
    Sse,
}

/// A credential value. Its Debug output is redacted so it cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: impl Into<String>) -> Self {
        SecretValue(value.into())
    }

    /// The value itself, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// Credentials sent with every request.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Sent as `Authorization: Bearer <token>`.
    pub bearer_token: Option<SecretValue>,
    /// Extra headers (name, value).
    pub headers: Vec<(String, SecretValue)>,
}

/// How the server's certificate is checked.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// PEM bundle to trust instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any certificate (loudly reported by the controller).
    pub insecure_skip_verify: bool,
}

/// Bounds on one connection and listing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Applies to the handshake, and again to the whole listing.
    pub connect_timeout: Duration,
    pub max_tool_pages: u32,
    pub max_response_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: Duration::from_secs(10),
            max_tool_pages: 100,
            max_response_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Everything needed to connect to one server.
#[derive(Debug, Clone)]
pub struct ServerConnection {
    pub url: String,
    pub transport: TransportKind,
    pub credentials: Credentials,
    pub tls: TlsSettings,
    pub limits: Limits,
    pub endpoint_policy: EndpointPolicy,
}

impl ServerConnection {
    pub fn new(url: impl Into<String>) -> Self {
        ServerConnection {
            url: url.into(),
            transport: TransportKind::default(),
            credentials: Credentials::default(),
            tls: TlsSettings::default(),
            limits: Limits::default(),
            endpoint_policy: EndpointPolicy::default(),
        }
    }
}
