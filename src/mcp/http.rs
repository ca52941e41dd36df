//! The HTTP side of both MCP transports: one reqwest client per server, pinned to the addresses
//! the endpoint guard checked, with credentials attached as sensitive headers, redirects refused,
//! and every response body read against the byte cap and charged to the connection's share of
//! the response budget as it arrives.

use std::error::Error as _;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, StatusCode};

use super::budget::{Allowance, ReservationShare, UnannouncedAnswer};
use super::connection::{Credentials, TlsSettings};
use super::endpoint::{CheckedEndpoint, EndpointPolicy};
use super::error::McpError;
use super::oauth::TokenClient;

/// The HTTP client for one server. Cloning shares the connection pool (the sidecar sends
/// concurrent calls over clones).
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    pub endpoint: CheckedEndpoint,
    credential_headers: HeaderMap,
    /// The server's OAuth tokens, shared with every connection of the same settings.
    oauth: Option<Arc<TokenClient>>,
    pub max_response_bytes: u64,
    connect_timeout: Duration,
    /// What this connection's bodies hold of the response budget (clones share it).
    allowance: Arc<Allowance>,
}

/// How much of a call's answer [`Http::read_answer_or_begin`] read.
pub enum AnswerRead {
    /// All of it.
    Whole(Bytes),
    /// Its first bytes; the rest is still in the response.
    Begun { body: Vec<u8>, response: Response },
}

/// The TLS settings of every server verified against the system's root certificates, built
/// once: reqwest reads and parses every system root each time it builds such a client, and the
/// controller builds one per probe (up to --probe-concurrency at once), each holding its own
/// copy of the roots for the probe's life. What reqwest would build: the platform verifier,
/// every TLS version, ALPN h2 then http/1.1.
fn system_roots_tls() -> Result<rustls::ClientConfig, String> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = rustls::crypto::CryptoProvider::get_default()
                .cloned()
                .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
            let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
                .map_err(|e| e.to_string())?;
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(rustls::ALL_VERSIONS)
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(config)
        })
        .clone()
}

impl Http {
    pub fn new(
        endpoint: CheckedEndpoint,
        credentials: &Credentials,
        tls: &TlsSettings,
        connect_timeout: Duration,
        max_response_bytes: u64,
        allowance: Arc<Allowance>,
        policy: EndpointPolicy,
    ) -> Result<Self, McpError> {
        let client = pinned_client(&endpoint, tls)?;
        Ok(Http {
            client,
            credential_headers: credential_headers(credentials)?,
            oauth: credentials
                .oauth2
                .as_ref()
                .map(|settings| super::oauth::client(settings, tls, policy)),
            endpoint,
            max_response_bytes,
            connect_timeout,
            allowance,
        })
    }

    /// The share of the response budget this connection's bodies hold.
    pub fn allowance(&self) -> Arc<Allowance> {
        self.allowance.clone()
    }

    /// Charges `bytes` that arrived (or are about to be buffered) to the response budget,
    /// waiting while it is busy.
    pub async fn charge(&self, bytes: usize) -> Result<(), McpError> {
        self.allowance.take(bytes as u64).await
    }

    /// Sends one request; 401 and 403 become errors here, every other status is the caller's.
    /// With OAuth, the token is the cached one, and a 401 is answered once more with a renewed
    /// token (a request that cannot be repeated, a stream, is not).
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
        step: &'static str,
    ) -> Result<Response, McpError> {
        let mut request = request.headers(self.credential_headers.clone());
        // Inside a traced span (the sidecar's request, a probe), the server hears whose child
        // its work is.
        if let Some(trace) = crate::telemetry::headers() {
            request = request.headers(trace);
        }
        let Some(oauth) = &self.oauth else {
            return judge(self.dispatch(request).await?, step);
        };
        // The token paths are boxed: without them this future is a kilobyte larger for every
        // request, OAuth or not, and it is moved with each call's.
        let token = Box::pin(oauth.token()).await?;
        let again = request.try_clone();
        let response = self.dispatch(with_token(request, &token)?).await?;
        match again {
            Some(again) if response.status() == StatusCode::UNAUTHORIZED => {
                let fresh = Box::pin(oauth.renew(&token)).await?;
                judge(self.dispatch(with_token(again, &fresh)?).await?, step)
            }
            _ => judge(response, step),
        }
    }

    async fn dispatch(&self, request: reqwest::RequestBuilder) -> Result<Response, McpError> {
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        crate::telemetry::upstream_status(response.status().as_u16());
        Ok(response)
    }

    pub fn post(&self, url: &url::Url) -> reqwest::RequestBuilder {
        self.client.post(url.clone())
    }

    pub fn get(&self, url: &url::Url) -> reqwest::RequestBuilder {
        self.client.get(url.clone())
    }

    pub fn delete(&self, url: &url::Url) -> reqwest::RequestBuilder {
        self.client.delete(url.clone())
    }

    /// Reads a whole body, refusing it once it passes the cap (checked as it streams, so a giant
    /// body never sits in memory). A body of announced length is charged to the budget whole
    /// before it is read (and buffered without regrowing); any other as each chunk arrives.
    pub async fn read_body(&self, response: Response) -> Result<Bytes, McpError> {
        self.read_body_charged(response, &self.allowance).await
    }

    /// [`Http::read_body`], charged to `allowance` (one call's own) instead of the
    /// connection's.
    pub async fn read_body_charged(
        &self,
        response: Response,
        allowance: &Allowance,
    ) -> Result<Bytes, McpError> {
        self.read_charged(response, allowance, UnannouncedAnswer::chunk_by_chunk())
            .await
    }

    /// A call's answer, charged to its own `allowance`: a body of unannounced length reserves
    /// ahead ([`UnannouncedAnswer`]), because a call, unlike a read, cannot be tried again when
    /// the budget gives way.
    pub async fn read_answer_charged(
        &self,
        response: Response,
        allowance: &Allowance,
        share: Option<ReservationShare>,
    ) -> Result<Bytes, McpError> {
        let charge = UnannouncedAnswer::reserving(self.max_response_bytes, share);
        self.read_charged(response, allowance, charge).await
    }

    async fn read_charged(
        &self,
        mut response: Response,
        allowance: &Allowance,
        mut unannounced: UnannouncedAnswer,
    ) -> Result<Bytes, McpError> {
        let limit = self.max_response_bytes;
        let announced = response.content_length();
        if announced.is_some_and(|n| n > limit) {
            return Err(McpError::ResponseTooLarge {
                limit,
                pages_read: 0,
            });
        }
        let mut body = Vec::new();
        if let Some(n) = announced {
            allowance.take(n).await?;
            body.reserve_exact(n as usize);
        }
        while let Some(chunk) = self.next_chunk(&mut response, body.len()).await? {
            // Hyper holds a body to its announced length; only a body without one is charged
            // as it comes.
            if announced.is_none() {
                unannounced.arrived(allowance, chunk.len() as u64).await?;
            }
            body.extend_from_slice(&chunk);
        }
        unannounced.done(allowance);
        Ok(body.into())
    }

    /// A call's answer: read whole when it ends within `stream_past` bytes; otherwise the bytes
    /// read so far, just past that (charged as they came), and the rest still in the response —
    /// for the caller to pass on as it arrives ([`super::streamed`]) or to read whole
    /// ([`Self::read_rest`]).
    pub async fn read_answer_or_begin(
        &self,
        mut response: Response,
        allowance: &Allowance,
        share: Option<ReservationShare>,
        stream_past: u64,
    ) -> Result<AnswerRead, McpError> {
        let limit = self.max_response_bytes;
        match response.content_length() {
            Some(n) if n > limit => {
                return Err(McpError::ResponseTooLarge {
                    limit,
                    pages_read: 0,
                });
            }
            Some(n) if n <= stream_past => {
                let charge = UnannouncedAnswer::reserving(limit, share);
                return self
                    .read_charged(response, allowance, charge)
                    .await
                    .map(AnswerRead::Whole);
            }
            _ => {}
        }
        let mut body = Vec::new();
        let mut charge = UnannouncedAnswer::chunk_by_chunk();
        while let Some(chunk) = self.next_chunk(&mut response, body.len()).await? {
            charge.arrived(allowance, chunk.len() as u64).await?;
            body.extend_from_slice(&chunk);
            if body.len() as u64 > stream_past {
                return Ok(AnswerRead::Begun { body, response });
            }
        }
        Ok(AnswerRead::Whole(body.into()))
    }

    /// Reads the rest of an answer [`Self::read_answer_or_begin`] began, whole.
    pub async fn read_rest(
        &self,
        mut body: Vec<u8>,
        mut response: Response,
        allowance: &Allowance,
        share: Option<ReservationShare>,
    ) -> Result<Bytes, McpError> {
        let rest = self.max_response_bytes.saturating_sub(body.len() as u64);
        let mut charge = UnannouncedAnswer::reserving(rest, share);
        while let Some(chunk) = self.next_chunk(&mut response, body.len()).await? {
            charge.arrived(allowance, chunk.len() as u64).await?;
            body.extend_from_slice(&chunk);
        }
        charge.done(allowance);
        Ok(body.into())
    }

    /// The body's next chunk, when the `read` bytes before it and it stay within the cap.
    async fn next_chunk(
        &self,
        response: &mut Response,
        read: usize,
    ) -> Result<Option<Bytes>, McpError> {
        let chunk = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let limit = self.max_response_bytes;
        if let Some(chunk) = &chunk
            && read as u64 + chunk.len() as u64 > limit
        {
            return Err(McpError::ResponseTooLarge {
                limit,
                pages_read: 0,
            });
        }
        Ok(chunk)
    }

    /// Maps a reqwest failure to the reason a person can act on.
    pub fn transport_error(&self, e: &reqwest::Error) -> McpError {
        let addr = self.endpoint.display_addr();
        if e.is_timeout() {
            return McpError::Timeout {
                what: "connecting to the server",
                limit: self.connect_timeout,
                pages_read: 0,
            };
        }
        if let Some(detail) = tls_detail(e) {
            return McpError::TlsError {
                host: self.endpoint.host.clone(),
                detail,
            };
        }
        if has_io_kind(e, std::io::ErrorKind::ConnectionRefused) {
            return McpError::ConnectionRefused { addr };
        }
        if has_io_kind(e, std::io::ErrorKind::TimedOut) {
            return McpError::Timeout {
                what: "connecting to the server",
                limit: self.connect_timeout,
                pages_read: 0,
            };
        }
        McpError::ConnectionFailed {
            addr,
            detail: root_cause(e),
        }
    }
}

/// 401 and 403 as errors; a 401's RFC 9728 challenge kept for the caller to follow.
fn judge(response: Response, step: &'static str) -> Result<Response, McpError> {
    match response.status() {
        StatusCode::UNAUTHORIZED => {
            let challenges: Vec<&str> = response
                .headers()
                .get_all(reqwest::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            Err(McpError::Unauthorized {
                during: step,
                resource_metadata: super::oauth::resource_metadata(&challenges),
            })
        }
        StatusCode::FORBIDDEN => Err(McpError::Forbidden { during: step }),
        _ => Ok(response),
    }
}

/// `request` with `Authorization: Bearer <token>`, marked sensitive.
fn with_token(
    request: reqwest::RequestBuilder,
    token: &super::connection::SecretValue,
) -> Result<reqwest::RequestBuilder, McpError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
        McpError::InvalidCredential(
            "the access token holds characters HTTP headers cannot carry".into(),
        )
    })?;
    value.set_sensitive(true);
    Ok(request.header(reqwest::header::AUTHORIZATION, value))
}

/// A client that connects only to the addresses the guard checked, refuses redirects and
/// trusts `tls`'s CA bundle (the system's roots without one).
pub(crate) fn pinned_client(
    endpoint: &CheckedEndpoint,
    tls: &TlsSettings,
) -> Result<reqwest::Client, McpError> {
    built_client(endpoint, tls, Roots::BundleOnly)
}

/// A client for the server's authorization server (its token endpoint, its RFC 9728
/// metadata), pinned like [`pinned_client`]: spec.tls's CA bundle is trusted beside the
/// system's roots, not instead of them, since a server on a private CA is often behind a
/// public authorization server (and the other way round); insecureSkipVerify applies as to the
/// server.
pub(crate) fn authorization_server_client(
    endpoint: &CheckedEndpoint,
    tls: &TlsSettings,
) -> Result<reqwest::Client, McpError> {
    built_client(endpoint, tls, Roots::SystemAndBundle)
}

/// What a client built with a CA bundle trusts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Roots {
    /// The bundle alone (spec.tls for the server: "trust this instead of the system roots").
    BundleOnly,
    /// The system's roots and the bundle.
    SystemAndBundle,
}

fn built_client(
    endpoint: &CheckedEndpoint,
    tls: &TlsSettings,
    roots: Roots,
) -> Result<reqwest::Client, McpError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        // Calls are small writes on kept-alive connections: no Nagle delay on them.
        .tcp_nodelay(true)
        .user_agent(concat!("mcp-operator/", env!("CARGO_PKG_VERSION")));
    if let Some(_domain) = endpoint.url.domain() {
        builder = builder.resolve_to_addrs(&endpoint.host, &endpoint.addrs);
    }
    if tls.ca_pem.is_none() && !tls.insecure_skip_verify {
        let config = system_roots_tls().map_err(|detail| McpError::ConnectionFailed {
            addr: endpoint.display_addr(),
            detail: format!("the HTTP client could not be built ({detail})"),
        })?;
        builder = builder.tls_backend_preconfigured(config);
    }
    if let Some(pem) = &tls.ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|_| McpError::TlsError {
            host: endpoint.host.clone(),
            detail: "the CA bundle is not valid PEM".into(),
        })?;
        if certs.is_empty() {
            return Err(McpError::TlsError {
                host: endpoint.host.clone(),
                detail: "the CA bundle holds no certificate".into(),
            });
        }
        builder = match roots {
            Roots::BundleOnly => builder.tls_certs_only(certs),
            Roots::SystemAndBundle => builder.tls_certs_merge(certs),
        };
    }
    if tls.insecure_skip_verify {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    builder.build().map_err(|e| McpError::ConnectionFailed {
        addr: endpoint.display_addr(),
        detail: format!("the HTTP client could not be built ({})", root_cause(&e)),
    })
}

/// Whether a status and content type say "this is a web page, not an MCP endpoint".
pub fn is_html(response: &Response) -> bool {
    content_type(response).starts_with("text/html")
}

pub fn content_type(response: &Response) -> String {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn credential_headers(credentials: &Credentials) -> Result<HeaderMap, McpError> {
    let mut headers = HeaderMap::new();
    for (name, value) in &credentials.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            McpError::InvalidCredential(format!(
                "the header name {name:?} is not a valid HTTP header name"
            ))
        })?;
        let mut value = HeaderValue::from_str(value.expose()).map_err(|_| {
            // Never echo the value: it is a secret.
            McpError::InvalidCredential(format!(
                "the value of header {name} contains characters HTTP headers cannot carry"
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    if let Some(token) = &credentials.bearer_token {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
            McpError::InvalidCredential(
                "the bearer token contains characters HTTP headers cannot carry (a trailing newline in the Secret?)"
                    .into(),
            )
        })?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    Ok(headers)
}

/// The deepest error message in the chain: reqwest's own Display names the URL, which may carry
/// a token in its query, so it is never used.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let text = cur.to_string();
    if text.len() > 200 {
        format!("{}…", &text[..text.floor_char_boundary(200)])
    } else {
        text
    }
}

fn chain(e: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(e.source(), |cur: &&(dyn std::error::Error + 'static)| {
        (*cur).source()
    })
}

/// The rustls error in `cause`, also behind I/O errors wrapped in I/O errors (hyper wraps
/// tokio-rustls's, and `io::Error::source` skips the error it carries).
fn rustls_error_in<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(cause);
    while let Some(c) = current {
        if let Some(tls) = c.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        current = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
    }
    None
}

fn has_io_kind(e: &reqwest::Error, kind: std::io::ErrorKind) -> bool {
    chain(e).any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
    })
}

fn tls_detail(e: &reqwest::Error) -> Option<String> {
    if let Some(tls) = chain(e).find_map(rustls_error_in) {
        return Some(match tls {
            // What rustls reads when the other end answers in plain text (an HTTP server's
            // "400 Bad Request" to a ClientHello).
            rustls::Error::InvalidMessage(_) => format!(
                "{tls}: the server did not answer in TLS; if it serves plain HTTP, its URL starts with http://"
            ),
            other => other.to_string(),
        });
    }
    let text = root_cause(e).to_ascii_lowercase();
    (text.contains("certificate") || text.contains("tls") || text.contains("handshake"))
        .then(|| root_cause(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::SecretValue;

    #[test]
    fn a_credential_http_cannot_carry_is_a_credential_problem_and_never_echoed() {
        let header = Credentials {
            bearer_token: None,
            headers: vec![("X-Api-Key".into(), SecretValue::new("s3cret\nvalue"))],
            oauth2: None,
        };
        let token = Credentials {
            bearer_token: Some(SecretValue::new("t0ken\n")),
            headers: Vec::new(),
            oauth2: None,
        };
        for credentials in [header, token] {
            let e = credential_headers(&credentials).unwrap_err();
            assert_eq!(e.reason(), "InvalidCredential", "{e}");
            let text = e.to_string();
            assert!(
                !text.contains("s3cret") && !text.contains("t0ken"),
                "{text}"
            );
        }
    }
}
