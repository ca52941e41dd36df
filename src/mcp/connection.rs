//! What it takes to reach one MCP server: URL, transport, credentials, TLS and limits. The
//! controller builds this from an McpServer and its Secrets; the probe from its flags.

use super::budget::{ReservationShare, ResponseBudget};
use super::endpoint::EndpointPolicy;
use crate::core::{Limits, Transport};
use std::fmt;

/// The name this module gave [`Transport`] before the vocabulary moved to [`crate::core`]; the
/// same enum.
pub type TransportKind = Transport;

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
    /// Access tokens obtained from an authorization server, sent as `Authorization: Bearer`.
    pub oauth2: Option<super::oauth::OAuthSettings>,
}

/// How the server's certificate is checked.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// PEM bundle to trust instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any certificate (loudly reported by the controller).
    pub insecure_skip_verify: bool,
}

/// Everything needed to connect to one server.
#[derive(Debug, Clone)]
pub struct ServerConnection {
    pub url: String,
    pub transport: Transport,
    pub credentials: Credentials,
    pub tls: TlsSettings,
    pub limits: Limits,
    pub endpoint_policy: EndpointPolicy,
    /// The process-wide bound on response bytes held at once (the controller's); `None`: only
    /// the per-response cap applies.
    pub budget: Option<ResponseBudget>,
    /// What this server's answers may reserve of `budget` at once. Shared by every connection
    /// to the server (the sidecar keeps one per upstream), so a server that makes the sidecar
    /// reconnect does not get a fresh share; `None`: a share of this connection's own.
    pub reservations: Option<ReservationShare>,
}

impl ServerConnection {
    pub fn new(url: impl Into<String>) -> Self {
        ServerConnection {
            url: url.into(),
            transport: Transport::default(),
            credentials: Credentials::default(),
            tls: TlsSettings::default(),
            limits: Limits::default(),
            endpoint_policy: EndpointPolicy::default(),
            budget: None,
            reservations: None,
        }
    }
}
