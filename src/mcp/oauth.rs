//! OAuth 2.0 access tokens for a server behind an authorization server
//! (`spec.credentials.oauth2`), and the RFC 9728 metadata of a server that asks for one.
//!
//! ```text
//!  OAuthSettings (token URL, client id, client secret | refresh token, scopes, resource)
//!        │ client(): one TokenClient per settings digest, shared process-wide
//!        ▼
//!  TokenClient::token()  ── cached, valid past now? ──► the token
//!        │ no: fetch (one at a time: concurrent callers wait for the same fetch)
//!        ▼
//!  POST tokenUrl  grant_type=client_credentials | refresh_token   (endpoint guard, no redirects,
//!        │                                                          bounded time and size; the
//!        │                                                          system's roots + spec.tls)
//!        ├─ 200 {access_token, expires_in} → cached until expires_in minus a margin
//!        └─ 400/401 {error} → OAuthTokenRefused carrying the RFC 6749 §5.2 code, never the body
//! ```
//!
//! The controller's probes and each sidecar build their connections through [`client`], so a
//! token is fetched once per (settings, process) and reused by every connection and call until
//! it nears expiry; a 401 from the server renews it once ([`TokenClient::renew`]). A rotated
//! client secret is other settings, hence another client and a fresh token. The token endpoint
//! and the metadata are checked against the system's roots and the server's `spec.tls` CA
//! bundle, or not at all under `insecureSkipVerify`, which is logged once per token client (the
//! client secret goes to whoever answers): the only thing here that logs. No error carries a
//! token, a secret or a response body.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sha2::{Digest, Sha256};

use super::connection::{SecretValue, TlsSettings};
use super::endpoint::{self, CheckedEndpoint, EndpointPolicy};
use super::error::McpError;

/// The most a token endpoint's or a metadata document's answer may hold.
const MAX_ANSWER_BYTES: u64 = 64 * 1024;
/// The most one token request (connect, send, answer) may take.
const FETCH_LIMIT: Duration = Duration::from_secs(10);
/// A token is renewed this long before it expires, at most (a quarter of its lifetime for a
/// short-lived one), so a call never leaves with a token about to lapse on the way.
const RENEW_MARGIN: Duration = Duration::from_secs(60);
/// A token whose answer gave no `expires_in` is used this long before it is fetched again.
const UNSTATED_LIFETIME: Duration = Duration::from_secs(300);
/// A refused or failed fetch is answered from memory this long, so a sidecar's calls do not
/// hammer the token endpoint with a credential it already refused.
const FAILURE_MEMORY: Duration = Duration::from_secs(5);

/// How to obtain tokens, with the secret values read (from the Secret, or its mounted file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthSettings {
    pub token_url: String,
    pub client_id: String,
    /// Sent with HTTP Basic authentication (RFC 6749 §2.3.1); without one the client is public
    /// and its id goes in the form.
    pub client_secret: Option<SecretValue>,
    /// Some: the refresh-token grant with this token; None: the client-credentials grant.
    pub refresh_token: Option<SecretValue>,
    pub scopes: Vec<String>,
    pub audience: Option<String>,
    /// RFC 8707 resource indicator.
    pub resource: Option<String>,
}

impl OAuthSettings {
    /// The grant's name as RFC 6749 spells it.
    pub fn grant(&self) -> &'static str {
        if self.refresh_token.is_some() {
            "refresh_token"
        } else {
            "client_credentials"
        }
    }

    /// A digest of every setting and value: equal digests share one token.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        let mut field = |v: &str| {
            h.update(v.as_bytes());
            h.update(b"\0");
        };
        field(&self.token_url);
        field(&self.client_id);
        field(self.client_secret.as_ref().map_or("\u{1}", |s| s.expose()));
        field(self.refresh_token.as_ref().map_or("\u{1}", |s| s.expose()));
        field(&self.scopes.join(" "));
        field(self.audience.as_deref().unwrap_or("\u{1}"));
        field(self.resource.as_deref().unwrap_or("\u{1}"));
        hex::encode(h.finalize())
    }
}

/// The process's token clients by settings digest (and TLS settings, endpoint policy), with when each was
/// last asked for. Held strongly: the controller's probes open a connection per read and drop
/// it, and the token must outlive them (a weak registry fetched a token per read). A client
/// nobody holds is dropped once unused for [`IDLE_CLIENT`], so settings that changed (a rotated
/// secret digests differently) do not pile up.
type Registry = Mutex<HashMap<String, (Arc<TokenClient>, Instant)>>;

/// How long a token client nobody holds is kept after it was last asked for.
const IDLE_CLIENT: Duration = Duration::from_secs(3600);

fn registry() -> &'static Registry {
    static CLIENTS: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    CLIENTS.get_or_init(Default::default)
}

/// The one token client for `settings` in this process, reaching the token endpoint with the
/// server's TLS settings `tls`.
pub fn client(
    settings: &OAuthSettings,
    tls: &TlsSettings,
    policy: EndpointPolicy,
) -> Arc<TokenClient> {
    let key = format!(
        "{}\0{}\0{}",
        settings.digest(),
        tls_digest(tls),
        policy.allow_loopback
    );
    let now = Instant::now();
    let mut clients = registry().lock().expect("token clients lock");
    if let Some((found, used)) = clients.get_mut(&key) {
        *used = now;
        return found.clone();
    }
    clients.retain(|_, (c, used)| {
        Arc::strong_count(c) > 1 || now.saturating_duration_since(*used) < IDLE_CLIENT
    });
    let made = Arc::new(TokenClient::new(settings.clone(), tls.clone(), policy));
    if tls.insecure_skip_verify {
        tracing::warn!(
            reason = "InsecureTokenEndpoint",
            token_endpoint = %made.endpoint_name(),
            "the token endpoint's certificate is not verified (spec.tls.insecureSkipVerify): the client secret or refresh token goes to whoever answers at its address"
        );
    }
    clients.insert(key, (made.clone(), now));
    made
}

/// A digest of the TLS settings: a changed CA bundle is another token client.
fn tls_digest(tls: &TlsSettings) -> String {
    let mut h = Sha256::new();
    h.update([u8::from(tls.insecure_skip_verify)]);
    if let Some(pem) = &tls.ca_pem {
        h.update(b"ca\0");
        h.update(pem);
    }
    hex::encode(h.finalize())
}

/// Fetches, caches and renews the access token of one set of settings.
pub struct TokenClient {
    settings: OAuthSettings,
    /// The server's spec.tls: its CA bundle is trusted beside the system's roots.
    tls: TlsSettings,
    policy: EndpointPolicy,
    /// Held across a fetch: concurrent callers share it.
    state: tokio::sync::Mutex<State>,
    fetches: AtomicU64,
}

impl std::fmt::Debug for TokenClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenClient")
            .field("token_url", &self.settings.token_url)
            .field("grant", &self.settings.grant())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    token: Option<(SecretValue, Instant)>,
    /// A refresh token the authorization server rotated in its last answer.
    refresh_token: Option<SecretValue>,
    failed: Option<(McpError, Instant)>,
}

impl TokenClient {
    pub fn new(settings: OAuthSettings, tls: TlsSettings, policy: EndpointPolicy) -> Self {
        TokenClient {
            settings,
            tls,
            policy,
            state: tokio::sync::Mutex::new(State::default()),
            fetches: AtomicU64::new(0),
        }
    }

    /// How many times the token endpoint was asked (for tests and the benchmark).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// A token valid for a while yet: the cached one, or a new one.
    pub async fn token(&self) -> Result<SecretValue, McpError> {
        let mut state = self.state.lock().await;
        self.current(&mut state).await
    }

    /// A token other than `rejected`, which the server answered 401 to: a call that raced
    /// another's renewal gets that renewal's token without a fetch of its own.
    pub async fn renew(&self, rejected: &SecretValue) -> Result<SecretValue, McpError> {
        let mut state = self.state.lock().await;
        if state.token.as_ref().is_some_and(|(t, _)| t == rejected) {
            state.token = None;
        }
        self.current(&mut state).await
    }

    async fn current(&self, state: &mut State) -> Result<SecretValue, McpError> {
        let now = Instant::now();
        if let Some((token, renew_at)) = &state.token
            && now < *renew_at
        {
            return Ok(token.clone());
        }
        if let Some((error, until)) = &state.failed
            && now < *until
        {
            return Err(error.clone());
        }
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let refresh = state
            .refresh_token
            .clone()
            .or_else(|| self.settings.refresh_token.clone());
        let fetched = tokio::time::timeout(FETCH_LIMIT, self.fetch(refresh.as_ref()))
            .await
            .unwrap_or_else(|_| {
                Err(self.failed(format!(
                    "it did not answer within {}s",
                    FETCH_LIMIT.as_secs()
                )))
            });
        match fetched {
            Ok(issued) => {
                let lifetime = issued.expires_in.unwrap_or(UNSTATED_LIFETIME);
                let margin = RENEW_MARGIN.min(lifetime / 4);
                state.token = Some((issued.access_token.clone(), now + lifetime - margin));
                if let Some(rotated) = issued.refresh_token {
                    state.refresh_token = Some(rotated);
                }
                state.failed = None;
                Ok(issued.access_token)
            }
            Err(e) => {
                state.token = None;
                state.failed = Some((e.clone(), Instant::now() + FAILURE_MEMORY));
                Err(e)
            }
        }
    }

    fn endpoint_name(&self) -> String {
        url::Url::parse(&self.settings.token_url)
            .ok()
            .and_then(|u| {
                u.host_str()
                    .map(|h| format!("{h}:{}", u.port_or_known_default().unwrap_or(0)))
            })
            .unwrap_or_else(|| "(invalid URL)".into())
    }

    fn failed(&self, detail: String) -> McpError {
        McpError::OAuthTokenFailed {
            endpoint: self.endpoint_name(),
            detail,
        }
    }

    async fn fetch(&self, refresh: Option<&SecretValue>) -> Result<Issued, McpError> {
        let s = &self.settings;
        let url = token_url(&s.token_url, self.policy).map_err(|e| self.failed(e))?;
        let checked = endpoint::check(&url, self.policy)
            .await
            .map_err(|e| self.failed(e.to_string()))?;
        let client = pinned_client(&checked, &self.tls).map_err(|e| self.failed(e.to_string()))?;
        let body = form_body(s, refresh);
        let mut request = client
            .post(checked.url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            );
        if let Some(secret) = &s.client_secret {
            // RFC 6749 §2.3.1: both form-encoded before they are put in Basic.
            let enc = |v: &str| -> String {
                url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
            };
            request = request.basic_auth(enc(&s.client_id), Some(enc(secret.expose())));
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| self.failed(transport_detail(&e, &checked)))?;
        let status = response.status();
        let body = read_capped(response)
            .await
            .map_err(|detail| self.failed(detail))?;
        if status == StatusCode::BAD_REQUEST || status == StatusCode::UNAUTHORIZED {
            return Err(match refusal_code(&body) {
                Some(error) => McpError::OAuthTokenRefused {
                    endpoint: self.endpoint_name(),
                    grant: s.grant(),
                    error,
                },
                None => self.failed(format!(
                    "it answered {} without an OAuth error code",
                    status.as_u16()
                )),
            });
        }
        if !status.is_success() {
            return Err(self.failed(format!("it answered HTTP {}", status.as_u16())));
        }
        issued(&body).map_err(|detail| self.failed(detail.into()))
    }
}

/// The token request's form (RFC 6749 §4.4.2, §6; RFC 8707 `resource`): a public client
/// (no secret) names itself in it.
fn form_body(s: &OAuthSettings, refresh: Option<&SecretValue>) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", s.grant());
    if let Some(refresh) = refresh {
        form.append_pair("refresh_token", refresh.expose());
    }
    if !s.scopes.is_empty() {
        form.append_pair("scope", &s.scopes.join(" "));
    }
    if let Some(audience) = &s.audience {
        form.append_pair("audience", audience);
    }
    if let Some(resource) = &s.resource {
        form.append_pair("resource", resource);
    }
    if s.client_secret.is_none() {
        form.append_pair("client_id", &s.client_id);
    }
    form.finish()
}

/// What a token endpoint issued.
#[derive(Debug)]
struct Issued {
    access_token: SecretValue,
    expires_in: Option<Duration>,
    refresh_token: Option<SecretValue>,
}

/// Reads a successful token answer (RFC 6749 §5.1).
fn issued(body: &[u8]) -> Result<Issued, &'static str> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "its answer is not JSON")?;
    let token = v
        .get("access_token")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .ok_or("its answer has no access_token")?;
    if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
        return Err("the access token it issued holds characters HTTP headers cannot carry");
    }
    let kind = v.get("token_type").and_then(|t| t.as_str()).unwrap_or("");
    if !kind.eq_ignore_ascii_case("bearer") {
        return Err("it issued a token whose token_type is not Bearer");
    }
    // A number, or (some servers) a string of digits.
    let expires_in = match v.get("expires_in") {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|s| s.is_finite() && *s > 0.0)
    .map(|s| Duration::from_secs_f64(s.min(86_400.0 * 365.0)));
    let refresh_token = v
        .get("refresh_token")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(SecretValue::new);
    Ok(Issued {
        access_token: SecretValue::new(token),
        expires_in,
        refresh_token,
    })
}

/// The `error` code of a refusal (RFC 6749 §5.2), when it is one: 1–64 characters of the
/// charset the RFC allows. Nothing else of the body is kept.
pub fn refusal_code(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let code = v.get("error")?.as_str()?;
    let allowed = |c: char| matches!(c, '\x20'..='\x21' | '\x23'..='\x5b' | '\x5d'..='\x7e');
    (!code.is_empty() && code.len() <= 64 && code.chars().all(allowed)).then(|| code.to_owned())
}

/// The token URL, if tokens may be asked for there: https, or http to a loopback host where
/// loopback is allowed (tests, a local issuer). Client secrets travel on it.
pub fn token_url(raw: &str, policy: EndpointPolicy) -> Result<url::Url, String> {
    let url = endpoint::parse_url(raw).map_err(|e| format!("its tokenUrl is not usable: {e}"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "its tokenUrl carries user info: give the client in clientId and clientSecret".into(),
        );
    }
    if url.scheme() == "https" {
        return Ok(url);
    }
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if loopback && policy.allow_loopback {
        Ok(url)
    } else {
        Err("its tokenUrl must be https:// (the client secret and the tokens travel on it)".into())
    }
}

/// A client pinned to the addresses the guard checked, refusing redirects, trusting the
/// system's CA roots and the server's CA bundle (or nothing, under insecureSkipVerify).
fn pinned_client(
    checked: &CheckedEndpoint,
    tls: &TlsSettings,
) -> Result<reqwest::Client, McpError> {
    super::http::authorization_server_client(checked, tls)
}

fn transport_detail(e: &reqwest::Error, checked: &CheckedEndpoint) -> String {
    let addr = checked.display_addr();
    if e.is_timeout() {
        return format!("connecting to {addr} timed out");
    }
    if e.is_connect() {
        return format!("connecting to {addr} failed (refused, or TLS)");
    }
    format!("the request to {addr} failed")
}

/// The body, at most [`MAX_ANSWER_BYTES`].
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES)
    {
        return Err(format!("its answer is over {MAX_ANSWER_BYTES} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| "its answer broke off".to_string())?
    {
        if body.len() as u64 + chunk.len() as u64 > MAX_ANSWER_BYTES {
            return Err(format!("its answer is over {MAX_ANSWER_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The `resource_metadata` URL of a `WWW-Authenticate: Bearer …` challenge (RFC 9728 §5.1).
pub fn resource_metadata(challenges: &[&str]) -> Option<String> {
    for challenge in challenges {
        let Some((scheme, params)) = challenge.trim().split_once(char::is_whitespace) else {
            continue;
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            continue;
        }
        let mut rest = params;
        while let Some(eq) = rest.find('=') {
            let name = rest[..eq].trim().trim_start_matches(',').trim();
            let after = rest[eq + 1..].trim_start();
            let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            } else {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim(), &after[end..])
            };
            if name.eq_ignore_ascii_case("resource_metadata") && !value.is_empty() {
                return Some(value.to_owned());
            }
            rest = next;
        }
    }
    None
}

/// What a server's protected-resource metadata says: the authorization servers that issue
/// its tokens.
pub async fn required(
    server_url: &url::Url,
    metadata_url: &str,
    tls: &TlsSettings,
    policy: EndpointPolicy,
) -> McpError {
    let found = protected_resource(server_url, metadata_url, tls, policy).await;
    let authorization_servers = match found {
        Ok(servers) => servers,
        Err(detail) => {
            return McpError::OAuthRequired {
                authorization_servers: Vec::new(),
                detail,
            };
        }
    };
    McpError::OAuthRequired {
        authorization_servers,
        detail: String::new(),
    }
}

async fn protected_resource(
    server_url: &url::Url,
    metadata_url: &str,
    tls: &TlsSettings,
    policy: EndpointPolicy,
) -> Result<Vec<String>, String> {
    let unreadable =
        |why: &str| format!("its protected-resource metadata could not be read ({why})");
    let url = endpoint::parse_url(metadata_url).map_err(|_| unreadable("not an http(s) URL"))?;
    let checked = endpoint::check(&url, policy)
        .await
        .map_err(|e| unreadable(&e.to_string()))?;
    let client = pinned_client(&checked, tls).map_err(|e| unreadable(&e.to_string()))?;
    let fetch = async {
        let response = client
            .get(checked.url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| unreadable(&transport_detail(&e, &checked)))?;
        if !response.status().is_success() {
            return Err(unreadable(&format!("HTTP {}", response.status().as_u16())));
        }
        read_capped(response).await.map_err(|e| unreadable(&e))
    };
    let body = tokio::time::timeout(FETCH_LIMIT, fetch)
        .await
        .map_err(|_| unreadable("no answer in time"))??;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|_| unreadable("not JSON"))?;
    // RFC 9728 §3.3: metadata naming another resource is not this server's.
    if let Some(resource) = v.get("resource").and_then(|r| r.as_str())
        && !same_resource(resource, server_url)
    {
        return Err(unreadable(
            "it names another resource than the server's URL",
        ));
    }
    let servers: Vec<String> = v
        .get("authorization_servers")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str())
        .filter(|s| {
            s.len() <= 256 && url::Url::parse(s).is_ok_and(|u| u.scheme().starts_with("http"))
        })
        .take(4)
        .map(str::to_owned)
        .collect();
    if servers.is_empty() {
        return Err(unreadable("it names no authorization server"));
    }
    Ok(servers)
}

fn same_resource(resource: &str, server: &url::Url) -> bool {
    let trim = |s: &str| s.trim_end_matches('/').to_owned();
    url::Url::parse(resource)
        .is_ok_and(|r| r.origin() == server.origin() && trim(r.path()) == trim(server.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_only_its_error_code() {
        assert_eq!(
            refusal_code(
                br#"{"error":"invalid_client","error_description":"secret s3cret wrong"}"#
            ),
            Some("invalid_client".into())
        );
        assert_eq!(refusal_code(b"<html>no</html>"), None);
        assert_eq!(refusal_code(br#"{"error":"bad\"quote"}"#), None);
        assert_eq!(
            refusal_code(format!(r#"{{"error":"{}"}}"#, "x".repeat(65)).as_bytes()),
            None
        );
    }

    #[test]
    fn an_issued_token_needs_bearer_and_states_its_lifetime() {
        let ok =
            issued(br#"{"access_token":"abc","token_type":"bearer","expires_in":"30"}"#).unwrap();
        assert_eq!(ok.access_token.expose(), "abc");
        assert_eq!(ok.expires_in, Some(Duration::from_secs(30)));
        assert!(issued(br#"{"access_token":"abc","token_type":"mac"}"#).is_err());
        assert!(issued(br#"{"token_type":"Bearer"}"#).is_err());
        let err = issued(b"{\"access_token\":\"a\\nb\",\"token_type\":\"Bearer\"}").unwrap_err();
        assert!(!err.contains("a\nb"));
    }

    #[test]
    fn token_urls_are_https_or_an_allowed_loopback() {
        let strict = EndpointPolicy::default();
        let local = EndpointPolicy {
            allow_loopback: true,
        };
        assert!(token_url("https://auth.example/token", strict).is_ok());
        assert!(
            token_url("http://auth.example/token", local)
                .unwrap_err()
                .contains("https")
        );
        assert!(token_url("http://127.0.0.1:9/token", strict).is_err());
        assert!(token_url("http://127.0.0.1:9/token", local).is_ok());
        assert!(
            token_url("https://u:p@auth.example/token", strict)
                .unwrap_err()
                .contains("user info")
        );
    }

    #[test]
    fn the_metadata_url_is_read_from_a_bearer_challenge() {
        assert_eq!(
            resource_metadata(&[
                r#"Bearer error="invalid_token", resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp""#
            ]),
            Some("https://a.example/.well-known/oauth-protected-resource/mcp".into())
        );
        assert_eq!(
            resource_metadata(&[
                "Basic realm=x",
                "Bearer resource_metadata=https://b.example/m"
            ]),
            Some("https://b.example/m".into())
        );
        assert_eq!(resource_metadata(&[r#"Bearer realm="mcp""#]), None);
        assert_eq!(resource_metadata(&["Bearer"]), None);
    }

    #[test]
    fn settings_that_differ_in_a_secret_share_no_token() {
        let a = OAuthSettings {
            token_url: "https://auth.example/token".into(),
            client_id: "agent".into(),
            client_secret: Some(SecretValue::new("s3cret-one")),
            refresh_token: None,
            scopes: vec!["mcp".into()],
            audience: None,
            resource: None,
        };
        let mut b = a.clone();
        b.client_secret = Some(SecretValue::new("two"));
        assert_ne!(a.digest(), b.digest());
        let policy = EndpointPolicy::default();
        let tls = TlsSettings::default();
        let (ca, cb) = (client(&a, &tls, policy), client(&b, &tls, policy));
        assert!(Arc::ptr_eq(&ca, &client(&a, &tls, policy)));
        assert!(!Arc::ptr_eq(&ca, &cb));
        // Another CA bundle is another client: its fetches are checked against other roots.
        let bundle = TlsSettings {
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            insecure_skip_verify: false,
        };
        assert!(!Arc::ptr_eq(&ca, &client(&a, &bundle, policy)));
        assert!(!format!("{a:?}").contains("s3cret"));
    }
}
