//! The HTTP side of both MCP transports: one pooled client per server (hyper's, reached
//! directly: a call costs no URL parsing, redirect or retry layers), pinned to the addresses
//! the endpoint guard checked, with credentials attached as sensitive headers, redirects never
//! followed, and every response body read against the byte cap and charged to the
//! connection's share of the response budget as it arrives.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue, IntoHeaderName, USER_AGENT};
use http::{Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::budget::{Allowance, ReservationShare, UnannouncedAnswer};
use super::connection::{Credentials, TlsSettings};
use super::endpoint::{CheckedEndpoint, EndpointPolicy};
use super::error::McpError;
use super::oauth::TokenClient;
use super::tls::{self, Roots};

type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<HttpConnector<PinnedResolver>>,
    Full<Bytes>,
>;

/// The HTTP client for one server. Cloning shares the connection pool (the sidecar sends
/// concurrent calls over clones) and this connection's share of the response budget.
#[derive(Clone)]
pub struct Http {
    server: Arc<Server>,
    /// What this connection's bodies hold of the response budget (clones share it).
    allowance: Arc<Allowance>,
}

/// What every request to one server shares, fixed when the connection is made.
struct Server {
    client: Client,
    endpoint: CheckedEndpoint,
    /// The endpoint's URL as the client takes it, converted once.
    endpoint_uri: Option<Uri>,
    credential_headers: HeaderMap,
    /// The server's OAuth tokens, shared with every connection of the same settings.
    oauth: Option<Arc<TokenClient>>,
    max_response_bytes: u64,
    connect_timeout: Duration,
}

/// One request to the server, built by [`Http::post`], [`Http::get`] or [`Http::delete`].
/// Its body is bytes, so it can always be sent again (with a renewed OAuth token).
#[derive(Clone)]
pub struct Request {
    method: Method,
    uri: Result<Uri, String>,
    headers: HeaderMap,
    body: Bytes,
}

impl Request {
    /// Sets `name` (replacing what was set before).
    pub fn header(mut self, name: impl IntoHeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Sets each of `headers` (replacing what was set before under the same names).
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        if self.headers.is_empty() {
            // The usual case (a call's headers, built whole): taken, not copied.
            self.headers = headers;
            return self;
        }
        let mut last = None;
        for (name, value) in headers {
            // A name comes once, before its values; several values of one name are kept.
            match name {
                Some(name) => {
                    self.headers.insert(name.clone(), value);
                    last = Some(name);
                }
                None => {
                    if let Some(name) = &last {
                        self.headers.append(name, value);
                    }
                }
            }
        }
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }
}

/// A server's response: its head, and its body read chunk by chunk.
pub struct Response {
    head: http::response::Parts,
    body: hyper::body::Incoming,
}

impl Response {
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }

    /// The body's length, when the server announced it.
    pub fn content_length(&self) -> Option<u64> {
        hyper::body::Body::size_hint(&self.body).exact()
    }

    /// The body's next bytes; `None` at its end (trailers are skipped).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        while let Some(frame) = self.body.frame().await {
            if let Ok(data) = frame?.into_data()
                && !data.is_empty()
            {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

/// How much of a call's answer [`Http::read_answer_or_begin`] read.
pub enum AnswerRead {
    /// All of it.
    Whole(Bytes),
    /// Its first bytes; the rest is still in the response.
    Begun { body: Vec<u8>, response: Response },
}

/// Resolves only the checked host, to the addresses the guard checked: the client never asks
/// DNS, so a name that changed since the check cannot move a request elsewhere.
#[derive(Clone)]
struct PinnedResolver {
    host: Arc<str>,
    addrs: Arc<[SocketAddr]>,
}

impl tower::Service<Name> for PinnedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        std::future::ready(if name.as_str().eq_ignore_ascii_case(&self.host) {
            Ok(self.addrs.iter().copied().collect::<Vec<_>>().into_iter())
        } else {
            Err(std::io::Error::other(format!(
                "{} is not the host that was checked",
                name.as_str()
            )))
        })
    }
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
        let client = pinned_client(&endpoint, tls, connect_timeout)?;
        let server = Server {
            client,
            endpoint_uri: uri_of(&endpoint.url).ok(),
            credential_headers: credential_headers(credentials)?,
            oauth: credentials
                .oauth2
                .as_ref()
                .map(|settings| super::oauth::client(settings, tls, policy)),
            endpoint,
            max_response_bytes,
            connect_timeout,
        };
        Ok(Http {
            server: Arc::new(server),
            allowance,
        })
    }

    /// Where requests go: the checked URL, host and addresses.
    pub fn endpoint(&self) -> &CheckedEndpoint {
        &self.server.endpoint
    }

    /// The largest body read from this server.
    pub fn max_response_bytes(&self) -> u64 {
        self.server.max_response_bytes
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
    /// token (every request's body is bytes, so it can be sent again).
    pub async fn send(&self, request: Request, step: &'static str) -> Result<Response, McpError> {
        let mut request = request.headers(self.server.credential_headers.clone());
        // Inside a traced span (the sidecar's request, a probe), the server hears whose child
        // its work is.
        if let Some(trace) = crate::telemetry::headers() {
            request = request.headers(trace);
        }
        let Some(oauth) = &self.server.oauth else {
            return judge(self.dispatch(request).await?, step);
        };
        // The token paths are boxed: without them this future is a kilobyte larger for every
        // request, OAuth or not, and it is moved with each call's.
        let token = Box::pin(oauth.token()).await?;
        let again = request.clone();
        let response = self.dispatch(with_token(request, &token)?).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            let fresh = Box::pin(oauth.renew(&token)).await?;
            return judge(self.dispatch(with_token(again, &fresh)?).await?, step);
        }
        judge(response, step)
    }

    async fn dispatch(&self, request: Request) -> Result<Response, McpError> {
        let uri = request.uri.map_err(|detail| McpError::ConnectionFailed {
            addr: self.server.endpoint.display_addr(),
            detail,
        })?;
        let mut headers = request.headers;
        headers
            .entry(USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT_VALUE));
        headers
            .entry(ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        let mut sent = http::Request::new(Full::new(request.body));
        *sent.method_mut() = request.method;
        *sent.uri_mut() = uri;
        *sent.headers_mut() = headers;
        let response = self
            .server
            .client
            .request(sent)
            .await
            .map_err(|e| self.transport_error(&e))?;
        crate::telemetry::upstream_status(response.status().as_u16());
        let (head, body) = response.into_parts();
        Ok(Response { head, body })
    }

    pub fn post(&self, url: &url::Url) -> Request {
        self.request(Method::POST, url)
    }

    pub fn get(&self, url: &url::Url) -> Request {
        self.request(Method::GET, url)
    }

    pub fn delete(&self, url: &url::Url) -> Request {
        self.request(Method::DELETE, url)
    }

    fn request(&self, method: Method, url: &url::Url) -> Request {
        let uri = match &self.server.endpoint_uri {
            Some(uri) if *url == self.server.endpoint.url => Ok(uri.clone()),
            _ => uri_of(url),
        };
        // The user agent and `Accept: */*` are added when it is sent, unless set by then.
        Request {
            method,
            uri,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
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
        let charge = UnannouncedAnswer::reserving(self.server.max_response_bytes, share);
        self.read_charged(response, allowance, charge).await
    }

    async fn read_charged(
        &self,
        mut response: Response,
        allowance: &Allowance,
        mut unannounced: UnannouncedAnswer,
    ) -> Result<Bytes, McpError> {
        let limit = self.server.max_response_bytes;
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
        let limit = self.server.max_response_bytes;
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
        let rest = self
            .server
            .max_response_bytes
            .saturating_sub(body.len() as u64);
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
        let limit = self.server.max_response_bytes;
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

    /// Maps a failure to send or to read to the reason a person can act on.
    pub fn transport_error(&self, e: &(dyn std::error::Error + 'static)) -> McpError {
        let addr = self.server.endpoint.display_addr();
        if let Some(detail) = tls_detail(e) {
            return McpError::TlsError {
                host: self.server.endpoint.host.clone(),
                detail,
            };
        }
        if has_io_kind(e, std::io::ErrorKind::ConnectionRefused) {
            return McpError::ConnectionRefused { addr };
        }
        if has_io_kind(e, std::io::ErrorKind::TimedOut) {
            return McpError::Timeout {
                what: "connecting to the server",
                limit: self.server.connect_timeout,
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
                .get_all(http::header::WWW_AUTHENTICATE)
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
    request: Request,
    token: &super::connection::SecretValue,
) -> Result<Request, McpError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
        McpError::InvalidCredential(
            "the access token holds characters HTTP headers cannot carry".into(),
        )
    })?;
    value.set_sensitive(true);
    Ok(request.header(http::header::AUTHORIZATION, value))
}

const USER_AGENT_VALUE: &str = concat!("mcp-operator/", env!("CARGO_PKG_VERSION"));

/// The URL as the client takes it (a fragment is never sent).
fn uri_of(url: &url::Url) -> Result<Uri, String> {
    let whole = url.as_str();
    let sent = whole.split_once('#').map_or(whole, |(before, _)| before);
    sent.parse()
        .map_err(|_| "the URL cannot be sent as an HTTP request target".to_string())
}

/// A client that connects only to the addresses the guard checked (within `connect_timeout`,
/// without Nagle's delay: calls are small writes on kept-alive connections), never follows a
/// redirect, and trusts `tls`'s CA bundle (the system's roots without one).
fn pinned_client(
    endpoint: &CheckedEndpoint,
    tls: &TlsSettings,
    connect_timeout: Duration,
) -> Result<Client, McpError> {
    let config = tls::client_config(&endpoint.host, tls, Roots::BundleOnly)?;
    let mut tcp = HttpConnector::new_with_resolver(PinnedResolver {
        host: endpoint.host.as_str().into(),
        addrs: endpoint.addrs.as_slice().into(),
    });
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(Arc::unwrap_or_clone(config))
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(tcp);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector),
    )
}

/// A client for the server's authorization server (its token endpoint, its RFC 9728
/// metadata), pinned like [`pinned_client`]: spec.tls's CA bundle is trusted beside the
/// system's roots, not instead of them, since a server on a private CA is often behind a
/// public authorization server (and the other way round); insecureSkipVerify applies as to the
/// server. Its requests are rare and small: reqwest's conveniences are worth their cost there.
pub(crate) fn authorization_server_client(
    endpoint: &CheckedEndpoint,
    tls: &TlsSettings,
) -> Result<reqwest::Client, McpError> {
    let mut config = Arc::unwrap_or_clone(tls::client_config(
        &endpoint.host,
        tls,
        Roots::SystemAndBundle,
    )?);
    // A preconfigured client offers what its configuration offers.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .user_agent(USER_AGENT_VALUE)
        .tls_backend_preconfigured(config);
    if endpoint.url.domain().is_some() {
        builder = builder.resolve_to_addrs(&endpoint.host, &endpoint.addrs);
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
        .get(http::header::CONTENT_TYPE)
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
        headers.insert(http::header::AUTHORIZATION, value);
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

/// `e` and every error under it.
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |cur: &&(dyn std::error::Error + 'static)| {
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

fn has_io_kind(e: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    chain(e).any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
    })
}

fn tls_detail(e: &(dyn std::error::Error + 'static)) -> Option<String> {
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
    fn headers_set_later_replace_those_of_the_same_name_and_keep_each_value() {
        let request = Request {
            method: Method::POST,
            uri: Ok(Uri::from_static("http://example.test/mcp")),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let mut first = HeaderMap::new();
        first.insert(ACCEPT, HeaderValue::from_static("application/json"));
        first.insert("x-kept", HeaderValue::from_static("1"));
        let mut later = HeaderMap::new();
        later.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        later.append("x-several", HeaderValue::from_static("a"));
        later.append("x-several", HeaderValue::from_static("b"));
        let sent = request.headers(first).headers(later).headers;
        assert_eq!(sent[ACCEPT], "text/event-stream");
        assert_eq!(sent["x-kept"], "1");
        let several: Vec<_> = sent.get_all("x-several").iter().collect();
        assert_eq!(several, ["a", "b"]);
        assert_eq!(sent.len(), 4);
    }

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
