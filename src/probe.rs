//! The `probe` subcommand: connect to one MCP server exactly as the controller would and print one
//! JSON document, the catalogue or the failure.
//!
//! Exit codes: 0 the catalogue was read; 1 the server could not be read (the document says
//! why); 2 the invocation itself is wrong (bad flag, unreadable file).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use crate::core::duration::parse_duration;
use crate::core::limits::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOOL_PAGES,
};
use crate::mcp::{
    self, Access, Credentials, EndpointPolicy, Limits, ReadFailure, SecretValue, ServerConnection,
    TlsSettings, Transport,
};

/// Flags of `mcp-operator probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The server's MCP endpoint URL (http or https), e.g. https://mcp.example.com/mcp.
    pub url: String,
    /// Transport: streamable-http (both protocol eras) or sse (the old HTTP+SSE transport).
    #[arg(long, default_value = "streamable-http", value_parser = ["streamable-http", "sse"])]
    pub transport: String,
    /// File holding a bearer token, sent as `Authorization: Bearer <token>` (surrounding
    /// whitespace is trimmed).
    #[arg(long, value_name = "FILE")]
    pub bearer_token_file: Option<PathBuf>,
    /// Extra request header `Name: value` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// PEM file of the CA(s) to trust instead of the system roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate (for debugging only).
    #[arg(long)]
    pub insecure_skip_verify: bool,
    /// Most `tools/list` pages to read before giving up.
    #[arg(long, default_value_t = DEFAULT_MAX_TOOL_PAGES, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub max_pages: u32,
    /// Largest response body accepted, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_RESPONSE_BYTES)]
    pub max_response_bytes: u64,
    /// Deadline for the handshake, and again for the whole listing (e.g. 10s, 1m30s, 500ms).
    #[arg(long, default_value = DEFAULT_CONNECT_TIMEOUT, value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Override a tool's access class: `NAME=read|write|destructive` (repeatable).
    #[arg(long = "override", value_name = "NAME=ACCESS")]
    pub overrides: Vec<String>,
    /// Allow loopback addresses (127.0.0.0/8, ::1). Link-local and metadata addresses are always refused.
    #[arg(long)]
    pub allow_loopback: bool,
}

/// Runs the probe and prints its JSON document.
pub fn main(args: ProbeArgs) -> ExitCode {
    let (conn, overrides) = match connection(&args) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("mcp-operator probe: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let (document, code) = match runtime.block_on(mcp::read_catalogue(&conn)) {
        Ok(report) => (success_document(&report, &overrides), ExitCode::SUCCESS),
        Err(e) => (failure_document(&e), ExitCode::from(1)),
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&document).expect("the document serialises")
    );
    code
}

/// The document printed when the catalogue was read.
pub fn success_document(
    report: &mcp::ServerReport,
    overrides: &std::collections::BTreeMap<String, Access>,
) -> Value {
    let mut doc = json!({
        "reachable": true,
        "era": report.era,
        "protocolVersion": report.protocol_version,
        "serverInfo": report.server_info,
        "pushesToolChanges": report.pushes_tool_changes,
        "catalog": report.catalog(overrides),
    });
    if let Some(ttl) = report.ttl_ms {
        doc["ttlMs"] = json!(ttl);
    }
    doc
}

/// The document printed when the server could not be read.
pub fn failure_document(failure: &ReadFailure) -> Value {
    json!({
        "reachable": false,
        "stage": failure.stage,
        "reason": failure.error.reason(),
        "message": failure.error.to_string(),
    })
}

type Overrides = std::collections::BTreeMap<String, Access>;

fn connection(args: &ProbeArgs) -> Result<(ServerConnection, Overrides), String> {
    let mut credentials = Credentials::default();
    if let Some(path) = &args.bearer_token_file {
        let token = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the bearer token file {}: {e}", path.display()))?;
        credentials.bearer_token = Some(SecretValue::new(token.trim()));
    }
    for header in &args.headers {
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| "--header takes 'Name: value'".to_string())?;
        let name = name.trim();
        if name.is_empty() {
            return Err("--header takes 'Name: value' with a non-empty name".into());
        }
        credentials
            .headers
            .push((name.to_string(), SecretValue::new(value.trim())));
    }
    let ca_pem = match &args.ca_file {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let mut overrides = Overrides::new();
    for item in &args.overrides {
        let (name, access) = item
            .split_once('=')
            .ok_or_else(|| "--override takes NAME=read|write|destructive".to_string())?;
        let access = match access {
            "read" => Access::Read,
            "write" => Access::Write,
            "destructive" => Access::Destructive,
            other => return Err(format!("--override: unknown access {other:?}")),
        };
        overrides.insert(name.to_string(), access);
    }
    let conn = ServerConnection {
        url: args.url.clone(),
        transport: if args.transport == "sse" {
            Transport::Sse
        } else {
            Transport::StreamableHttp
        },
        credentials,
        tls: TlsSettings {
            ca_pem,
            insecure_skip_verify: args.insecure_skip_verify,
        },
        limits: Limits {
            connect_timeout: args.connect_timeout,
            max_tool_pages: args.max_pages,
            max_response_bytes: args.max_response_bytes,
        },
        endpoint_policy: EndpointPolicy {
            allow_loopback: args.allow_loopback,
        },
        budget: None,
        reservations: None,
    };
    Ok((conn, overrides))
}
