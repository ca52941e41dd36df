//! Why a server could not be read. Each variant is a reason a person can act on; its
//! [`McpError::reason`] is the word that appears in conditions, metric labels and log lines.
//!
//! Messages are composed here from facts we observed (status codes, counts, addresses). They never
//! repeat a server's response body, and never a credential: neither is ever passed in.

use std::time::Duration;

use super::listing::List;

/// A failure to connect to an MCP server or to read its whole catalogue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The URL is not one we can connect to.
    #[error("the URL is not valid: {0}")]
    InvalidUrl(String),
    /// The endpoint guard refused the address.
    #[error("{0}")]
    BlockedEndpoint(String),
    /// A credential (a header value, the bearer token) holds characters HTTP cannot carry, e.g.
    /// a newline left in the Secret. The message names the header, never the value.
    #[error("{0}")]
    InvalidCredential(String),
    /// The host name does not resolve.
    #[error("the host name {host} does not resolve; check the URL and the cluster's DNS")]
    DnsFailure { host: String },
    /// Nothing listens at the address.
    #[error("connection to {addr} was refused: is the server running and listening on that port?")]
    ConnectionRefused { addr: String },
    /// A step did not finish in time.
    #[error("{what} did not finish within {}{}", humanize(*limit), pages_note(*pages_read))]
    Timeout {
        what: &'static str,
        limit: Duration,
        pages_read: u32,
    },
    /// The TLS handshake failed (unknown CA, wrong host name, expired certificate, plain HTTP on a TLS port…).
    #[error(
        "the TLS handshake with {host} failed ({detail}); check spec.tls.caBundle and the server's certificate"
    )]
    TlsError { host: String, detail: String },
    /// Other connection failures (reset, closed early).
    #[error("the connection to {addr} failed: {detail}")]
    ConnectionFailed { addr: String, detail: String },
    /// HTTP 401.
    #[error("the server answered 401 Unauthorized{}: check the bearer token, header or oauth2 Secrets referenced by spec.credentials", step_note(.during))]
    Unauthorized {
        during: &'static str,
        /// The RFC 9728 metadata URL its `WWW-Authenticate` challenge named, if any.
        resource_metadata: Option<String>,
    },
    /// The server asks for OAuth (RFC 9728): its metadata names the authorization servers.
    #[error("the server requires an OAuth access token{}{}: configure spec.credentials.oauth2 with a client of {}", servers_note(.authorization_servers), detail_note(.detail), if .authorization_servers.len() > 1 { "one of them" } else { "its authorization server" })]
    OAuthRequired {
        authorization_servers: Vec<String>,
        detail: String,
    },
    /// The token endpoint refused the grant; `error` is its RFC 6749 §5.2 code, nothing else of
    /// its answer.
    #[error("the token endpoint {endpoint} refused the {grant} grant with error {error}{}", refusal_hint(.error))]
    OAuthTokenRefused {
        endpoint: String,
        grant: &'static str,
        error: String,
    },
    /// No token could be had from the token endpoint (unreachable, blocked, not OAuth).
    #[error("no access token could be obtained from the token endpoint {endpoint}: {detail}")]
    OAuthTokenFailed { endpoint: String, detail: String },
    /// HTTP 403.
    #[error("the server answered 403 Forbidden{}: the credential is valid but not allowed to use this server", step_note(.during))]
    Forbidden { during: &'static str },
    /// The endpoint is not an MCP server (HTML, 404, not JSON-RPC).
    #[error("the endpoint does not speak MCP: {0}")]
    NotMcp(String),
    /// The server speaks no protocol revision we support.
    #[error("the server speaks no MCP revision this operator supports: {0}")]
    UnsupportedProtocol(String),
    /// The server broke the protocol (error answer, malformed reply).
    #[error("{0}")]
    ProtocolError(String),
    /// A response exceeded `maxResponseBytes`.
    #[error("a response exceeded the limit of {limit} bytes{}; raise spec.discovery.maxResponseBytes if the server is trusted", pages_note(*pages_read))]
    ResponseTooLarge { limit: u64, pages_read: u32 },
    /// One read's responses (or one call's answer) would hold more than the whole response
    /// budget of the controller or the sidecar.
    #[error("the responses of one read of this server need more than the whole response budget of {budget} bytes{}; lower spec.discovery.maxResponseBytes or maxToolPages, or raise --response-budget (of the controller, or of the sidecar for calls)", pages_note(*pages_read))]
    OverResponseBudget { budget: u64, pages_read: u32 },
    /// The response budget was full with other servers' responses, all waiting for more: this
    /// read gave its share back so the others could finish. Tried again shortly.
    #[error(
        "the response budget of {budget} bytes (--response-budget) was full with answers being read at once, all waiting for more; this one gave its share back so the others could finish"
    )]
    ResponseBudgetBusy { budget: u64 },
    /// One server's answers held their whole share of the response budget for the longest wait
    /// (a server that sends its answers slowly, or many big ones at once): this answer gave way.
    #[error(
        "this server's answers already reserve their whole share of the response budget ({share} bytes of --response-budget) and none finished within the longest wait: the server may be sending its answers slowly"
    )]
    ServerShareBusy { share: u64 },
    /// The listing needs more pages than `maxToolPages` (the bound of every list).
    #[error(
        "the server's {} list needs more than {max_pages} pages of {} (read {max_pages}); raise spec.discovery.maxToolPages if the server is trusted", .list.noun(), .list.method()
    )]
    TooManyPages { list: List, max_pages: u32 },
    /// The server sent a cursor it had sent before: paging would never end.
    #[error(
        "the server repeated a cursor on page {page} of {} (pages read: {page}): its paging loops", .list.method()
    )]
    RepeatedCursor { list: List, page: u32 },
    /// One entry (a tool's or prompt's name, a resource's URI, a template's URI template)
    /// listed twice.
    #[error(
        "the server lists the {} {name:?} twice in {} (pages {first_page} and {page}; pages read: {page})", .list.noun(), .list.method()
    )]
    Duplicate {
        list: List,
        name: String,
        first_page: u32,
        page: u32,
    },
    /// A tool name outside the MCP tool-name charset.
    #[error(
        "the server lists a tool with an invalid name {name:?} on page {page} (pages read: {page}); tool names are 1-128 characters of A-Z a-z 0-9 _ - ."
    )]
    InvalidToolName { name: String, page: u32 },
}

impl McpError {
    /// The reason word used in conditions, metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            McpError::InvalidUrl(_) => "InvalidURL",
            McpError::BlockedEndpoint(_) => "BlockedEndpoint",
            McpError::InvalidCredential(_) => "InvalidCredential",
            McpError::DnsFailure { .. } => "DNSFailure",
            McpError::ConnectionRefused { .. } => "ConnectionRefused",
            McpError::Timeout { .. } => "Timeout",
            McpError::TlsError { .. } => "TLSError",
            McpError::ConnectionFailed { .. } => "ConnectionFailed",
            McpError::Unauthorized { .. } => "Unauthorized",
            McpError::Forbidden { .. } => "Forbidden",
            McpError::OAuthRequired { .. } => "OAuthRequired",
            McpError::OAuthTokenRefused { .. } => "OAuthTokenRefused",
            McpError::OAuthTokenFailed { .. } => "OAuthTokenFailed",
            McpError::NotMcp(_) => "NotMcp",
            McpError::UnsupportedProtocol(_) => "UnsupportedProtocol",
            McpError::ProtocolError(_) => "ProtocolError",
            McpError::ResponseTooLarge { .. } => "ResponseTooLarge",
            McpError::OverResponseBudget { .. } => "ResponseBudgetExceeded",
            McpError::ResponseBudgetBusy { .. } => "ResponseBudgetBusy",
            McpError::ServerShareBusy { .. } => "ServerShareBusy",
            McpError::TooManyPages { .. } => "TooManyPages",
            McpError::RepeatedCursor { .. } => "RepeatedCursor",
            McpError::Duplicate { list, .. } => match list {
                List::Tools => "DuplicateTool",
                List::Resources => "DuplicateResource",
                List::ResourceTemplates => "DuplicateResourceTemplate",
                List::Prompts => "DuplicatePrompt",
            },
            McpError::InvalidToolName { .. } => "InvalidToolName",
        }
    }

    /// Records how many pages had been read when a deadline or size cap struck.
    pub(crate) fn with_pages_read(mut self, pages: u32) -> Self {
        match &mut self {
            McpError::Timeout { pages_read, .. }
            | McpError::ResponseTooLarge { pages_read, .. }
            | McpError::OverResponseBudget { pages_read, .. } => *pages_read = pages,
            _ => {}
        }
        self
    }
}

fn pages_note(pages_read: u32) -> String {
    if pages_read == 0 {
        String::new()
    } else {
        format!(" (pages read: {pages_read})")
    }
}

fn servers_note(servers: &[String]) -> String {
    match servers {
        [] => String::new(),
        [one] => format!(" issued by the authorization server {one}"),
        many => format!(
            " issued by one of the authorization servers {}",
            many.join(", ")
        ),
    }
}

fn detail_note(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

/// What to check for each RFC 6749 §5.2 code.
fn refusal_hint(error: &str) -> &'static str {
    match error {
        "invalid_client" => {
            ": check spec.credentials.oauth2.clientId and the Secret key its clientSecret names"
        }
        "invalid_grant" => {
            ": the refresh token is invalid, expired or revoked; put a new one in the Secret key refreshToken names"
        }
        "unauthorized_client" => ": the client may not use this grant type",
        "invalid_scope" => ": check spec.credentials.oauth2.scopes",
        "invalid_target" => ": check spec.credentials.oauth2.resource and audience",
        "unsupported_grant_type" => ": the authorization server does not offer this grant",
        _ => "",
    }
}

fn step_note(step: &str) -> String {
    if step.is_empty() {
        String::new()
    } else {
        format!(" to {step}")
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_message_counts_pages() {
        let e = McpError::Timeout {
            what: "listing the tools",
            limit: Duration::from_secs(10),
            pages_read: 0,
        }
        .with_pages_read(3);
        assert_eq!(e.reason(), "Timeout");
        assert_eq!(
            e.to_string(),
            "listing the tools did not finish within 10s (pages read: 3)"
        );
    }

    #[test]
    fn unauthorized_names_the_step_and_the_fix() {
        let e = McpError::Unauthorized {
            resource_metadata: None,
            during: "initialize",
        };
        assert!(e.to_string().contains("401"));
        assert!(e.to_string().contains("spec.credentials"));
    }
}
