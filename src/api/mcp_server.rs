//! The `McpServer` resource: one MCP server, how to reach it (a remote `url`, or a `stdio`
//! server the operator runs as a workload), and what the server owner lets agents see of it.
//! The controller writes the server's classified tool catalogue and its health into the status.
//!
//! ```text
//! [ Secret ] <- credentials.*.secretKeyRef  [ McpServer ] -> url (remote MCP server)
//! [ Secret | ConfigMap ] <- tls.caBundle        |  ^    -> stdio: owns Deployment + Service
//! [ Secret ] <- stdio.env[].valueFrom ──────────┘  | servers[].name (same namespace)
//!                                             [ AgentSpec ]
//! ```

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use crate::core::limits;
use crate::core::pinning::{Part, StaleApproval};
use crate::core::{Access, Catalog, ConfigMapKeySelector, Duration, SecretKeySelector};
pub use crate::core::{Era as ProtocolEra, ServerInfo, Transport};

/// Annotation on an McpServer that asks for its catalogue to be read again now; any new value
/// triggers one refresh.
pub const REFRESH_ANNOTATION: &str = "mcp-operator.dev/refresh";

/// Annotation on an McpServer under pinning that approves tool definitions: one or more
/// digests, separated by commas or spaces, each a tool's `definitionDigest` (approving that
/// definition) or the catalogue's `digest` (approving every tool exactly as that catalogue
/// serves it). Setting it reads the server again and applies the approval to what it serves.
pub const APPROVE_ANNOTATION: &str = "mcp-operator.dev/approve";

/// The digests an approve annotation names (empty entries ignored).
pub fn approved_by_annotation(value: &str) -> std::collections::BTreeSet<String> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect()
}

/// The key of a stdio server's token in its `<name>-mcp-token` Secret.
pub const STDIO_TOKEN_KEY: &str = "token";

/// The Secret in which the operator keeps a stdio server's token: the server's bridge answers
/// only requests that carry it, and only the controller and the sidecars of the namespace are
/// given it.
pub fn stdio_token_secret_name(server: &str) -> String {
    format!("{server}-mcp-token")
}

impl McpServer {
    /// What the operator and the sidecars send the server: spec.credentials for a remote
    /// server; for a stdio server the bearer token is the operator's own (Secret
    /// `<name>-mcp-token`), beside any headers the spec names.
    pub fn credentials(&self) -> Option<Credentials> {
        if self.spec.stdio.is_none() {
            return self.spec.credentials.clone();
        }
        let name = self.metadata.name.as_deref().unwrap_or_default();
        Some(Credentials {
            bearer_token: Some(BearerToken {
                secret_key_ref: SecretKeySelector {
                    name: stdio_token_secret_name(name),
                    key: STDIO_TOKEN_KEY.into(),
                },
            }),
            headers: self
                .spec
                .credentials
                .as_ref()
                .map(|c| c.headers.clone())
                .unwrap_or_default(),
            oauth2: None,
        })
    }

    /// Where the operator and the sidecars reach the server: spec.url for a remote server;
    /// for a stdio server the URL of its Service, once the controller wrote it in status.
    pub fn endpoint_url(&self) -> Option<&str> {
        match &self.spec.url {
            Some(url) => Some(url),
            None => self.status.as_ref().and_then(|s| s.url.as_deref()),
        }
    }
}

/// An MCP server reached over HTTP: a remote one at `url`, or a stdio one the operator runs
/// (`stdio`) behind its own bridge and Service. The operator connects to it, reads its whole tool
/// catalogue, classifies every tool as read, write or destructive, and reports in status whether
/// the server is reachable and why not.
// Each printcolumn(...) repeats the keys name/type_/json_path, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "mcp-operator.dev",
    version = "v1alpha1",
    kind = "McpServer",
    namespaced,
    status = "McpServerStatus",
    shortname = "mcps",
    category = "mcp",
    doc = "An MCP server reached over HTTP, remote (spec.url) or run by the operator from a stdio command (spec.stdio): where it is, how to authenticate, and which of its tools agents may see. The operator keeps the server's classified tool catalogue and health in status.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(
        name = "Tools",
        type_ = "integer",
        json_path = ".status.catalog.toolCount"
    ),
    printcolumn(
        name = "Waiting",
        type_ = "integer",
        description = "Tools withheld until a person approves them (pinning)",
        json_path = ".status.pinning.waitingCount",
        priority = 1
    ),
    printcolumn(
        name = "Protocol",
        type_ = "string",
        json_path = ".status.protocolVersion"
    ),
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url", priority = 1),
    // The name is a label value (mcp-operator.dev/mcpserver on its spilled catalogue), and label
    // values stop at 63 characters.
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63").message(
        "McpServer names are at most 63 characters: the name is a label value on its catalogue ConfigMap"
    ),
    // A stdio server's workload and Service are named <name>-mcp, and a Service name is a DNS
    // label (RFC 1035) of at most 63 characters.
    validation = kube::core::Rule::new("!has(self.spec.stdio) || (size(self.metadata.name) <= 59 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))").message(
        "a stdio McpServer's name is at most 59 lower-case letters, digits and '-', starting with a letter: its Deployment and Service are named <name>-mcp"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.url) != has(self.stdio)",
        "message": "set exactly one of spec.url (a remote server) or spec.stdio (a stdio server the operator runs)",
    },
    {
        "rule": "!has(self.tls) || (has(self.url) && self.url.startsWith('https://'))",
        "message": "tls applies only to https:// URLs: remove spec.tls or use an https:// url",
        "fieldPath": ".tls",
    },
    {
        "rule": "!has(self.stdio) || !has(self.transport) || self.transport == 'streamable-http'",
        "message": "a stdio server is served over streamable-http by the operator's bridge: remove spec.transport or set it to streamable-http",
        "fieldPath": ".transport",
    },
    {
        "rule": "!has(self.stdio) || !has(self.credentials) || !has(self.credentials.bearerToken)",
        "message": "a stdio server's bearer token is the operator's own (the Secret <name>-mcp-token, which its bridge requires): remove credentials.bearerToken",
        "fieldPath": ".credentials.bearerToken",
    },
    {
        "rule": "!has(self.stdio) || !has(self.credentials) || !has(self.credentials.oauth2)",
        "message": "a stdio server is reached with the operator's own token: remove credentials.oauth2",
        "fieldPath": ".credentials.oauth2",
    },
]))]
pub struct McpServerSpec {
    /// Endpoint of a remote MCP server: an absolute http:// or https:// URL, e.g.
    /// https://mcp.example.com/mcp. Put credentials in spec.credentials, never in the URL.
    /// Exactly one of url or stdio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 2048),
        extend("x-kubernetes-validations" = [
            {
                "rule": "isURL(self) && (self.startsWith('http://') || self.startsWith('https://')) && url(self).getHostname() != ''",
                "message": "url must be an absolute http:// or https:// URL with a host, e.g. https://mcp.example.com/mcp",
            },
            {
                "rule": "!self.matches('^[a-zA-Z]+://[^/?#]*@')",
                "message": "url must not carry credentials (user:password@host): put them in a Secret and refer to it from spec.credentials",
            },
        ])
    )]
    pub url: Option<String>,

    /// A server that speaks MCP over stdio, run by the operator: a Deployment of the image
    /// with the command behind `mcp-operator bridge`, and a Service in front of it. The status
    /// then names the Service's URL. Exactly one of url or stdio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<Stdio>,

    /// How to speak HTTP to the server: streamable-http (the current MCP transport, default) or
    /// sse (the older HTTP+SSE transport, for servers that only speak it).
    #[serde(default)]
    pub transport: Transport,

    /// Credentials sent with every request, read from Secrets in this namespace. Only references
    /// live here, never values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Credentials>,

    /// TLS settings for https:// URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,

    /// The server owner's curation of the tool catalogue: which tools agents may see at all, how
    /// they are classified, and which always need a person's approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ServerTools>,

    /// When false (the default), an unreachable server makes every AgentSpec that uses it not
    /// Ready. When true, agents start without it and its tools appear once it is reachable.
    #[serde(default)]
    pub optional: bool,

    /// Time limits for talking to the server.
    #[serde(default)]
    pub timeouts: Timeouts,

    /// Bounds and schedule of reading the tool catalogue.
    #[serde(default)]
    pub discovery: Discovery,

    /// How many times the sidecar may resend a call that failed in transit. Applies only to
    /// tools that are read-only or idempotent; other calls are never resent.
    #[serde(default = "default_retry")]
    #[schemars(range(min = 0, max = 10))]
    pub retry: u32,

    /// Pinned tool definitions, the guard against a server changing a tool after it was
    /// reviewed. Off unless enabled here or required by an McpTenantPolicy rule picking this
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinning: Option<Pinning>,
}

/// Pinning: the first catalogue read pins every tool's definitionDigest; a tool whose
/// definition later differs from its pin, or a tool that was not there, is withheld from every
/// agent until a person approves it (here, or with the mcp-operator.dev/approve annotation). A
/// tool that changes back to its pinned definition is granted again; tools.overrides never
/// need approval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pinning {
    /// Pin this server's tool definitions.
    #[serde(default)]
    pub enabled: bool,

    /// Approved definitions: tool name → the definitionDigest approved for it (sha256:<64 hex>,
    /// as status.pinning.waiting[].servedDigest shows it). An entry the server does not serve is
    /// reported in status, never an error.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 256,
        "additionalProperties" = {
            "type": "string",
            "maxLength": 71,
            "pattern": "^sha256:[0-9a-f]{64}$",
        },
        "x-kubernetes-validations" = [
            {
                "rule": "self.all(k, k.matches('^[A-Za-z0-9_.-]{1,128}$'))",
                "message": "pinning.approved keys must be exact tool names: 1 to 128 letters, digits, '_', '-' or '.' (no wildcards)",
            },
        ]
    ))]
    pub approved: BTreeMap<String, String>,
}

/// Longest single command word or argument of a stdio server.
pub const STDIO_ARG_MAX_LENGTH: u32 = 4096;

/// A stdio MCP server the operator runs: a Deployment whose pods run the image with
/// `mcp-operator bridge -- <command> <args>` (the bridge binary is copied in from the
/// operator's own image, so any image holding the command works), and a Service in front of
/// it. The bridge speaks Streamable HTTP (both protocol eras) to the cluster and stdio to the
/// server, restarts the server with backoff when it exits, and bounds every line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stdio {
    /// The container image holding the command, e.g. node:22-slim. The image needs glibc (the
    /// bridge is the operator's own binary); its entrypoint is not used.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,

    /// How the image's pull policy is decided: Always, IfNotPresent or Never; empty: the
    /// Kubernetes default for the image's tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pull_policy_schema")]
    pub image_pull_policy: Option<String>,

    /// The server's command, e.g. [npx, -y, @modelcontextprotocol/server-memory]: run as
    /// given, through no shell. `$(VAR)` names a variable of env, as in a container's command.
    #[schemars(schema_with = "command_schema")]
    pub command: Vec<String>,

    /// Arguments after the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "args_schema")]
    pub args: Vec<String>,

    /// Environment variables of the server: each a literal value or a key of a Secret in
    /// this namespace (read by the kubelet; the operator never reads it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Vec<StdioEnv>,

    /// CPU and memory for the server's container (the bridge runs in it too), as in a
    /// container's resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// Pods of the Deployment (1 to 50). The Service keeps each client on one pod (session
    /// affinity), so sessions survive more than one.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 50))]
    pub replicas: u32,

    /// One server process per MCP session, for servers that keep state per client (a memory,
    /// a browser): one client's state is never another's. Off: one process serves every
    /// client.
    #[serde(default)]
    pub per_session: bool,

    /// The user the server runs as. Unset: user and group 65532, non-root, which a namespace
    /// enforcing the `restricted` Pod Security level admits (with no capabilities,
    /// RuntimeDefault seccomp and no privilege escalation, always). Only for an image that
    /// cannot run otherwise: `runAsUser: 0` (root), which `restricted` namespaces refuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<StdioSecurityContext>,
}

/// Who a stdio server's process is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.runAsNonRoot) && self.runAsNonRoot && has(self.runAsUser) && self.runAsUser == 0)",
        "message": "runAsNonRoot cannot hold with runAsUser 0: drop one of them",
    },
]))]
pub struct StdioSecurityContext {
    /// The user id (default 65532; 0 runs the server as root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_user: Option<i64>,
    /// The group id (default: the user id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_group: Option<i64>,
    /// Have the kubelet refuse to start the server as root (default: true unless runAsUser is
    /// 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
}

fn default_replicas() -> u32 {
    1
}

fn pull_policy_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["Always", "IfNotPresent", "Never"],
    })
}

fn command_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 64,
        "items": {"type": "string", "minLength": 1, "maxLength": STDIO_ARG_MAX_LENGTH},
    })
}

fn args_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 256,
        "items": {"type": "string", "maxLength": STDIO_ARG_MAX_LENGTH},
    })
}

/// One environment variable of a stdio server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.value) != has(self.valueFrom)",
        "message": "stdio.env entries take exactly one of value or valueFrom.secretKeyRef",
    },
]))]
pub struct StdioEnv {
    /// The variable's name.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    )]
    pub name: String,

    /// A literal value. Put anything secret in a Secret and use valueFrom instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub value: Option<String>,

    /// The value read from a Secret key in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvValueSource>,
}

/// Where an environment variable's value comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvValueSource {
    /// The Secret key holding the value.
    pub secret_key_ref: SecretKeySelector,
}

/// Compute resources of a stdio server's container: quantities such as 500m or 256Mi by
/// resource name (cpu, memory, ephemeral-storage).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// What the scheduler reserves for the container.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "quantities"
    )]
    #[schemars(schema_with = "quantities_schema")]
    pub requests: BTreeMap<String, Quantity>,

    /// The most the container may use.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "quantities"
    )]
    #[schemars(schema_with = "quantities_schema")]
    pub limits: BTreeMap<String, Quantity>,
}

/// Quantities as a container's resources take them: a number (`cpu: 1`) or a string (`500m`).
/// The apiserver keeps a number as written, so it is read back as one.
fn quantities<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, Quantity>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Text(String),
        Number(serde_json::Number),
    }
    let written = BTreeMap::<String, Written>::deserialize(deserializer)?;
    Ok(written
        .into_iter()
        .map(|(name, value)| {
            let text = match value {
                Written::Text(text) => text,
                Written::Number(number) => number.to_string(),
            };
            (name, Quantity(text))
        })
        .collect())
}

/// A Kubernetes quantity, as the apiserver validates one.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

fn quantities_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 8,
        "additionalProperties": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": 64,
            "pattern": QUANTITY_PATTERN,
        },
    })
}

fn default_retry() -> u32 {
    limits::DEFAULT_RETRY
}

/// Credentials for the MCP server, each read from a Secret in the McpServer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.bearerToken) || !has(self.headers) || self.headers.all(h, h.name.lowerAscii() != 'authorization')",
        "message": "credentials.headers must not set Authorization when credentials.bearerToken is set: the bearer token is sent as the Authorization header",
        "fieldPath": ".headers",
    },
    {
        "rule": "!has(self.oauth2) || !has(self.bearerToken)",
        "message": "credentials.oauth2 and credentials.bearerToken both set the Authorization header: choose one",
        "fieldPath": ".oauth2",
    },
    {
        "rule": "!has(self.oauth2) || !has(self.headers) || self.headers.all(h, h.name.lowerAscii() != 'authorization')",
        "message": "credentials.headers must not set Authorization when credentials.oauth2 is set: the access token is sent as the Authorization header",
        "fieldPath": ".headers",
    },
]))]
pub struct Credentials {
    /// A bearer token, sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<BearerToken>,

    /// Extra HTTP headers whose values come from Secrets, e.g. an API key header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-validations" = [
            {
                "rule": "self.all(a, self.exists_one(b, b.name.lowerAscii() == a.name.lowerAscii()))",
                "message": "credentials.headers must not name the same header twice (names compare case-insensitively)",
            },
        ])
    )]
    pub headers: Vec<HeaderCredential>,

    /// OAuth 2.0: the operator and each sidecar obtain access tokens from the authorization
    /// server's token endpoint (client credentials, or a refresh token), cache them until
    /// shortly before they expire, and send them as `Authorization: Bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2>,
}

/// How tokens are obtained: `grantType` picks the grant (RFC 6749 §4.4, §6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.grantType != 'client_credentials' || has(self.clientSecret)",
        "message": "the client_credentials grant needs credentials.oauth2.clientSecret",
        "fieldPath": ".clientSecret",
    },
    {
        "rule": "(self.grantType == 'refresh_token') == has(self.refreshToken)",
        "message": "credentials.oauth2.refreshToken is set exactly when grantType is refresh_token",
        "fieldPath": ".refreshToken",
    },
]))]
pub struct OAuth2 {
    /// The token endpoint, e.g. https://auth.example.com/oauth/token. https://, or http:// to
    /// a loopback host (which only a controller and sidecar run with --allow-loopback reach).
    #[schemars(
        length(min = 1, max = 2048),
        extend("x-kubernetes-validations" = [
            {
                "rule": "isURL(self) && (self.startsWith('https://') || (self.startsWith('http://') && (url(self).getHostname() == 'localhost' || url(self).getHostname() == '::1' || url(self).getHostname().startsWith('127.'))))",
                "message": "tokenUrl must be an https:// URL (the client secret and the tokens travel on it), or http:// to a loopback host",
            },
            {
                "rule": "!self.matches('^[a-zA-Z]+://[^/?#]*@')",
                "message": "tokenUrl must not carry credentials (user:password@host): give them in clientId and clientSecret",
            },
        ])
    )]
    pub token_url: String,

    /// client_credentials (the client acts for itself) or refresh_token (for a user, with the
    /// refresh token in refreshToken).
    pub grant_type: OAuth2GrantType,

    /// The client's id at the authorization server.
    #[schemars(length(min = 1, max = 256))]
    pub client_id: String,

    /// The Secret key holding the client secret, sent with HTTP Basic authentication. Needed
    /// for client_credentials; without it a refresh_token client is public.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<FromSecret>,

    /// The Secret key holding the refresh token (refresh_token grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<FromSecret>,

    /// Scopes asked for, sent space-separated as `scope`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub scopes: Vec<OAuth2Scope>,

    /// `audience`, for authorization servers that take one (Auth0, Okta and others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub audience: Option<String>,

    /// `resource` (RFC 8707): the absolute URI of the server the token is for, usually its
    /// URL; the MCP authorization spec asks clients to send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 2048),
        extend("x-kubernetes-validations" = [
            {
                "rule": "isURL(self) && !self.contains('#')",
                "message": "resource must be an absolute URI without a fragment (RFC 8707), e.g. https://mcp.example.com/mcp",
            },
        ])
    )]
    pub resource: Option<String>,
}

/// One OAuth scope (RFC 6749 §3.3: printable ASCII without space, quote or backslash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct OAuth2Scope(
    #[schemars(length(min = 1, max = 256), regex(pattern = r"^[!#-\[\]-~]+$"))] pub String,
);

/// Which OAuth 2.0 grant obtains the tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OAuth2GrantType {
    #[serde(rename = "client_credentials")]
    ClientCredentials,
    #[serde(rename = "refresh_token")]
    RefreshToken,
}

/// A value read from a Secret key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FromSecret {
    pub secret_key_ref: SecretKeySelector,
}

/// A bearer token read from a Secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BearerToken {
    /// The Secret key holding the token (the bare token, without `Bearer `).
    pub secret_key_ref: SecretKeySelector,
}

/// One HTTP header whose value is read from a Secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderCredential {
    /// Header name, e.g. X-API-Key. An HTTP token; headers the operator sets itself are refused.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"),
        extend("x-kubernetes-validations" = [
            {
                "rule": "!(self.lowerAscii() in ['host', 'content-length', 'content-type', 'accept', 'connection', 'transfer-encoding', 'mcp-session-id', 'mcp-protocol-version', 'mcp-method', 'mcp-name', 'last-event-id'])",
                "message": "this header is set by the operator itself (Host, Content-Length, Content-Type, Accept, Connection, Transfer-Encoding, Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID); choose another header name",
            },
        ])
    )]
    pub name: String,

    /// Where the header's value comes from.
    pub value_from: HeaderValueSource,
}

/// The source of a header value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValueSource {
    /// The Secret key holding the header's value.
    pub secret_key_ref: SecretKeySelector,
}

/// TLS settings for an https:// server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.caBundle) && has(self.insecureSkipVerify) && self.insecureSkipVerify)",
        "message": "tls.insecureSkipVerify and tls.caBundle contradict each other: a CA bundle is pointless when certificates are not verified; remove one",
    },
]))]
pub struct Tls {
    /// PEM CA certificates to trust for this server instead of the public web roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,

    /// Skip verifying the server's certificate. For tests only: anyone on the path can then
    /// impersonate the server. The McpServer's status says so while it is set.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// Where a PEM CA bundle is read from: exactly one of a Secret key or a ConfigMap key in the
/// McpServer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.secretKeyRef) != has(self.configMapKeyRef)",
        "message": "tls.caBundle takes exactly one of secretKeyRef or configMapKeyRef",
    },
]))]
pub struct CaBundle {
    /// A Secret key holding the PEM bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeySelector>,

    /// A ConfigMap key holding the PEM bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<ConfigMapKeySelector>,
}

/// The server owner's curation of the server's tools. Applies to every agent and tenant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerTools {
    /// Tool-name patterns agents may see; empty means all. `*` matches any run of characters,
    /// `?` one character; otherwise letters, digits, `_`, `-` and `.`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub allow: Vec<String>,

    /// Tool-name patterns agents never see, whatever allow says (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_pattern_list_schema")]
    pub deny: Vec<String>,

    /// Access level per tool name (read, write or destructive), replacing what the tool's own
    /// annotations say. Keys are exact tool names, no wildcards. Where a McpTenantPolicy picks
    /// this server, an override only tightens: the stricter of it and the annotations applies
    /// (status keeps both: access and servedAccess); lowering a classification there is the
    /// platform's (the policy's rules[].overrides).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 256,
        "x-kubernetes-validations" = [
            {
                "rule": "self.all(k, k.matches('^[A-Za-z0-9_.-]{1,128}$'))",
                "message": "tools.overrides keys must be exact tool names: 1 to 128 letters, digits, '_', '-' or '.' (no wildcards)",
            },
        ]
    ))]
    pub overrides: BTreeMap<String, Access>,

    /// Tool names (exact, no wildcards) whose every call needs a person's approval, for every
    /// agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::tool_name_list_schema")]
    pub require_approval: Vec<String>,
}

/// Time limits for talking to the MCP server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    /// Limit for connecting and the protocol handshake, and again for reading the whole tool
    /// catalogue. A Go-style duration such as 10s or 1m; more than 0s, at most 5m.
    #[serde(default = "default_connect_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "!self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || (!self.matches('(^|[a-z])([0-9]{6,}([.][0-9]+)?h|[0-9]{8,}([.][0-9]+)?m($|[0-9])|[0-9]{10,}([.][0-9]+)?s|[0-9]{13,}([.][0-9]+)?ms)') && duration(self) > duration('0s') && duration(self) <= duration('5m'))",
            "message": "timeouts.connect must be more than 0s and at most 5m",
        },
    ]))]
    pub connect: Duration,

    /// Limit for one tool call made by the sidecar. A Go-style duration such as 30s or 2m; more
    /// than 0s, at most 1h.
    #[serde(default = "default_call_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "!self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || (!self.matches('(^|[a-z])([0-9]{6,}([.][0-9]+)?h|[0-9]{8,}([.][0-9]+)?m($|[0-9])|[0-9]{10,}([.][0-9]+)?s|[0-9]{13,}([.][0-9]+)?ms)') && duration(self) > duration('0s') && duration(self) <= duration('1h'))",
            "message": "timeouts.call must be more than 0s and at most 1h",
        },
    ]))]
    pub call: Duration,
}

fn default_connect_timeout() -> Duration {
    Duration::from_static(limits::DEFAULT_CONNECT_TIMEOUT)
}

fn default_call_timeout() -> Duration {
    Duration::from_static(limits::DEFAULT_CALL_TIMEOUT)
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: default_connect_timeout(),
            call: default_call_timeout(),
        }
    }
}

/// Bounds and schedule of reading a server's tool catalogue. A listing that breaks a bound fails
/// as a whole; the last good catalogue is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Most `tools/list` pages read in one listing (1 to 10000). A server that needs more is
    /// reported as TooManyPages.
    #[serde(default = "default_max_tool_pages")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_tool_pages: u32,

    /// Largest single response accepted from the server, in bytes (64 KiB to 64 MiB; default
    /// 4 MiB). A larger one is reported as ResponseTooLarge.
    #[serde(default = "default_max_response_bytes")]
    #[schemars(range(min = 65536, max = 67108864))]
    pub max_response_bytes: u64,

    /// How often the catalogue is read again when nothing else triggers it. A Go-style duration
    /// such as 5m or 1h; at least 30s, at most 24h.
    #[serde(default = "default_refresh_interval")]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "!self.matches('^([0-9]+([.][0-9]+)?(ms|s|m|h))+$') || (!self.matches('(^|[a-z])([0-9]{6,}([.][0-9]+)?h|[0-9]{8,}([.][0-9]+)?m($|[0-9])|[0-9]{10,}([.][0-9]+)?s|[0-9]{13,}([.][0-9]+)?ms)') && duration(self) >= duration('30s') && duration(self) <= duration('24h'))",
            "message": "discovery.refreshInterval must be at least 30s and at most 24h",
        },
    ]))]
    pub refresh_interval: Duration,
}

fn default_max_tool_pages() -> u32 {
    limits::DEFAULT_MAX_TOOL_PAGES
}

fn default_max_response_bytes() -> u64 {
    limits::DEFAULT_MAX_RESPONSE_BYTES
}

fn default_refresh_interval() -> Duration {
    Duration::from_static(limits::DEFAULT_REFRESH_INTERVAL)
}

impl Default for Discovery {
    fn default() -> Self {
        Self {
            max_tool_pages: default_max_tool_pages(),
            max_response_bytes: default_max_response_bytes(),
            refresh_interval: default_refresh_interval(),
        }
    }
}

/// What the operator last observed of the MCP server. Written by the controller only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatus {
    /// The metadata.generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Where a stdio server is reached: its Service's URL (http://<clusterIP>:<port>/mcp).
    /// The operator and the agents' sidecars connect here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,

    /// The server's own name and version, as it reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<ServerInfo>,

    /// The MCP protocol revision in use, e.g. 2025-11-25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,

    /// The protocol generation the server speaks: legacy (initialize handshake and sessions) or
    /// modern (no handshake, server/discover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::common::nullable_enum_schema::<ProtocolEra>")]
    pub era: Option<ProtocolEra>,

    /// The last complete tool catalogue read from the server. Kept when a later listing fails
    /// (CatalogSynced then says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<CatalogStatus>,

    /// Name of the ConfigMap in this namespace holding the full catalogue (gzip) when it is too
    /// large for status; catalog.tools is then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_config_map: Option<String>,

    /// SHA-256 of the catalogue JSON that ConfigMap holds (`sha256:<hex>`). The controller reads
    /// the ConfigMap back only while it holds exactly that: anyone who may edit ConfigMaps in
    /// this namespace can write it, and grants are built from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_config_map_digest: Option<String>,

    /// Pinned tool definitions, while pinning is on: which tools wait for a person's approval
    /// and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinning: Option<PinningStatus>,

    /// CredentialsResolved, Reachable, CatalogSynced, Ready, and ToolsApproved while pinning is
    /// on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Most waiting tools listed in status.pinning.waiting; every waiting tool is marked
/// (awaitingApproval) in the catalogue itself.
pub const WAITING_LISTED_MAX: usize = 100;

/// Pinning as the controller applies it. The pins themselves are the catalogue's digests: a
/// tool's definitionDigest, or awaitingApproval.pinnedDigest while it waits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinningStatus {
    /// What turns pinning on: spec.pinning.enabled and/or the McpTenantPolicies requiring it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_by: Vec<String>,

    /// How many tools wait for approval (withheld from every agent).
    pub waiting_count: u32,

    /// The waiting tools, sorted by name (at most 100; the catalogue marks every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<WaitingTool>,

    /// Entries of spec.pinning.approved the server does not serve: update or remove them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_approvals: Vec<StaleApproval>,

    /// How many prompts wait for approval (left out of every agent's prompts/list, their
    /// prompts/get refused by the sidecar).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting_prompt_count: u32,

    /// The waiting prompts, sorted by name (at most 100; the catalogue marks every one).
    /// Approved like tools: spec.pinning.approved (prompt name → servedDigest) or the approve
    /// annotation naming the servedDigest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_prompts: Vec<WaitingTool>,

    /// The catalogue's prompts are pinned (catalog.prompts holds their pins). False for a
    /// catalogue pinned before prompts were: its next read pins every prompt as served.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompts_pinned: bool,

    /// Changes whenever the catalogue or its set of waiting tools changes; readers of a spilled
    /// catalogue compare it with the ConfigMap's.
    pub content_key: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One tool (or, in waitingPrompts, one prompt) withheld until a person approves it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingTool {
    /// The tool's (or prompt's) name.
    pub name: String,
    /// The definitionDigest last approved; absent for one that is new since pinning began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_digest: Option<String>,
    /// The definitionDigest the server serves now: approve this one.
    pub served_digest: String,
    /// The parts that differ from the pinned definition (title, description, inputSchema,
    /// outputSchema, annotations, other); empty for a new tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<Part>,
    /// The same in words: "new tool", "description changed".
    pub summary: String,
}

/// The catalogue in status: the probe's catalogue document plus when it was read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogStatus {
    /// The catalogue itself (toolCount, digest, pagesRead, tools), exactly as the probe prints it.
    #[serde(flatten)]
    pub catalog: Catalog,

    /// When the catalogue was last read completely. Stays put while listings fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
}
