//! The grants document: what one agent may call, as the controller publishes it in the
//! AgentSpec's grants ConfigMap (key `grants.json`) and the sidecar reads it.
//!
//! ```text
//! resolve() ──► GrantsDocument { servers[].tools[] }           (endpoint: None)
//!                    │ controller fills servers[].endpoint from the McpServer
//!                    ▼
//!              ConfigMap <agentspec>-mcp-grants / grants.json ──► sidecar: permits(doc, name)
//! ```
//!
//! [`super::resolve`] builds the document with every server's `endpoint` left empty; the
//! controller fills the connection details (URL, transport, era, credential *references*, TLS,
//! timeouts, retry) before it publishes, so the digest covers them too. The sidecar calls
//! [`permits`] at call time. Never a secret value: credentials are references to Secret keys.
//!
//! Versions, and who reads what. `grants/v2` is `grants/v1` plus, per server, the pattern
//! bounds of its granted resources and prompts (`resources`, `prompts`: see
//! [`super::resources_prompts`]). A document that grants no resource and no prompt has exactly
//! the v1 layout and is written as `grants/v1` (see [`GrantsDocument::new`]), so a sidecar older
//! than this operator keeps obeying it through an upgrade; only a document that grants
//! resources or prompts says `grants/v2`, which an older sidecar refuses like any file it cannot
//! read (it keeps its last good grants, and `/readyz` says why) instead of silently dropping
//! what it does not understand. This sidecar reads both; a v1 document grants no resources and
//! no prompts.

use serde::{Deserialize, Serialize};

use super::resources_prompts::PatternBound;
use crate::core::catalog::{Access, definition_digest};
use crate::core::{ConfigMapKeySelector, Era, SecretKeySelector, Transport};

/// The `schemaVersion` of documents that grant resources or prompts.
pub const SCHEMA_VERSION: &str = "mcp-operator.dev/grants/v2";

/// The `schemaVersion` of documents that grant tools only: the v1 layout, which older sidecars
/// read too. Also read by this sidecar.
pub const SCHEMA_VERSION_V1: &str = "mcp-operator.dev/grants/v1";

/// Every `schemaVersion` this code reads.
pub const READABLE_SCHEMA_VERSIONS: [&str; 2] = [SCHEMA_VERSION_V1, SCHEMA_VERSION];

/// What one agent may call: per server, where it is and which tools are granted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantsDocument {
    /// [`SCHEMA_VERSION`] when some server grants resources or prompts, else
    /// [`SCHEMA_VERSION_V1`] (see the module comment).
    pub schema_version: String,
    /// The AgentSpec is being deleted: nothing is granted, whatever `servers` says (it is
    /// empty). Published, signed, before the grants ConfigMap goes (see
    /// [`super::signature`]); absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
    /// Every server the AgentSpec references, sorted by name; unavailable ones too (with no
    /// tools), so the sidecar can say why a server's tools are missing.
    pub servers: Vec<ServerGrants>,
}

/// The grants of one server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerGrants {
    /// Name of the McpServer.
    pub name: String,
    /// Prefix of its tools' qualified names (`<prefix>__<tool>`).
    pub prefix: String,
    /// The McpServer says it is optional: while unavailable it grants nothing and does not make
    /// the AgentSpec not ready.
    pub optional: bool,
    /// The server exists, is Ready and has a catalogue. An unavailable server grants no tools.
    pub available: bool,
    /// The granted tools' schemas exceed the preload budget: the sidecar offers discovery tools
    /// for this server instead of every schema.
    pub deferred: bool,
    /// How to reach the server; filled by the controller, absent for a server that does not
    /// exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// The granted tools, sorted by qualified name.
    pub tools: Vec<GrantedTool>,
    /// The bounds on the server's resources and resource templates the agent may list, read
    /// and subscribe to (their URI or URI template matched): granted when every bound permits
    /// it; none (absent) grants nothing. grants/v2.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<PatternBound>,
    /// The bounds on the server's prompts (their names), likewise. grants/v2.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<PatternBound>,
    /// Under pinning (the McpServer pins its definitions), the prompts the bounds grant that do
    /// not wait for approval: name → the definitionDigest approved. The sidecar serves a prompt
    /// of this server only when it is listed here and its live definition digests the same;
    /// absent when the server is not pinned (the bounds alone decide). grants/v2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_digests: Option<std::collections::BTreeMap<String, String>>,
}

impl ServerGrants {
    /// Whether some resource or prompt may be granted (the document needs grants/v2).
    pub fn grants_resources_or_prompts(&self) -> bool {
        !self.resources.is_empty() || !self.prompts.is_empty()
    }
}

/// One granted tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantedTool {
    /// `<prefix>__<name>`: the name the agent sees and calls.
    pub qualified_name: String,
    /// The tool's name on its server.
    pub name: String,
    /// read, write or destructive: the one access that applies to this agent (see
    /// `resolve`: under a tenant policy the platform's classification, which an McpServer's
    /// override only raises). The sidecar resends a failed read, and audits this access.
    pub access: Access,
    /// Repeating a call has no further effect (the server's `idempotentHint`): safe to resend.
    pub idempotent: bool,
    /// Every call needs a person's approval.
    pub requires_approval: bool,
    /// SHA-256 of the tool definition that was granted; the sidecar does not offer a tool whose
    /// live definition digests differently.
    pub definition_digest: String,
}

/// How the sidecar reaches one server, exactly as the controller does. Filled by the controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The server's URL.
    pub url: String,
    /// streamable-http or sse.
    pub transport: Transport,
    /// The protocol generation the controller negotiated (legacy or modern), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub era: Option<Era>,
    /// The protocol revision the controller negotiated, e.g. 2025-11-25, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// The Secret key holding a bearer token, sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<SecretKeySelector>,
    /// Extra headers whose values are read from Secret keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderReference>,
    /// OAuth 2.0 tokens obtained from a token endpoint, their secrets by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2Reference>,
    /// TLS settings for https:// URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsReference>,
    /// Limit for connecting and the handshake, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Limit for one tool call, in milliseconds.
    pub call_timeout_ms: u64,
    /// Retry budget for read-only or idempotent calls.
    pub retry: u32,
    /// Most `tools/list` pages the sidecar reads (the McpServer's `discovery.maxToolPages`);
    /// absent in documents written before the sidecar existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_pages: Option<u32>,
    /// Largest response the sidecar accepts from the server, in bytes (the McpServer's
    /// `discovery.maxResponseBytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
}

/// How the sidecar obtains the server's OAuth tokens (the McpServer's
/// `spec.credentials.oauth2`): the refresh-token grant when `refreshToken` is set, client
/// credentials otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuth2Reference {
    pub token_url: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretKeySelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<SecretKeySelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

/// A header whose value is read from a Secret key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderReference {
    /// The HTTP header name.
    pub name: String,
    /// Where its value is.
    pub secret_key_ref: SecretKeySelector,
}

/// TLS settings by reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsReference {
    /// A Secret key holding a PEM CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_secret: Option<SecretKeySelector>,
    /// A ConfigMap key holding a PEM CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_config_map: Option<ConfigMapKeySelector>,
    /// Certificates are not verified.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl GrantsDocument {
    /// A document of these servers, of the oldest schema version that carries them: v1 unless
    /// some server grants resources or prompts.
    pub fn new(servers: Vec<ServerGrants>) -> Self {
        let version = if servers
            .iter()
            .any(ServerGrants::grants_resources_or_prompts)
        {
            SCHEMA_VERSION
        } else {
            SCHEMA_VERSION_V1
        };
        GrantsDocument {
            schema_version: version.to_string(),
            revoked: false,
            servers,
        }
    }

    /// The document published when the AgentSpec is deleted: it grants nothing.
    pub fn revoked() -> Self {
        GrantsDocument {
            revoked: true,
            ..GrantsDocument::new(vec![])
        }
    }

    /// `sha256:<hex>` of the document's RFC 8785 canonical JSON: the ConfigMap is written only
    /// when this changes.
    pub fn digest(&self) -> String {
        definition_digest(&serde_json::to_value(self).expect("a grants document is JSON"))
    }

    /// Total number of granted tools.
    pub fn tool_count(&self) -> usize {
        self.servers.iter().map(|s| s.tools.len()).sum()
    }

    /// The first way this document breaks the naming rule every reader relies on, as a
    /// sentence: each server has a non-empty prefix and each granted tool's qualified name is
    /// exactly `<prefix>__<name>`. Names without `__` are thereby left to the sidecar's own
    /// tools (its discovery tools), which no granted tool can then shadow.
    pub fn naming_problem(&self) -> Option<String> {
        self.servers.iter().find_map(|server| {
            if server.prefix.is_empty() {
                return Some(format!("server {} has an empty prefix", server.name));
            }
            server.tools.iter().find_map(|tool| {
                let expected = qualified_name(&server.prefix, &tool.name);
                (tool.qualified_name != expected).then(|| {
                    format!(
                        "tool {:?} of server {} has the qualified name {:?}, not {:?}",
                        tool.name.chars().take(128).collect::<String>(),
                        server.name,
                        tool.qualified_name.chars().take(128).collect::<String>(),
                        expected.chars().take(128).collect::<String>()
                    )
                })
            })
        })
    }

    /// The server and granted tool a qualified name stands for, if it is granted.
    pub fn find(&self, qualified_name: &str) -> Option<(&ServerGrants, &GrantedTool)> {
        self.servers.iter().find_map(|server| {
            let rest = qualified_name.strip_prefix(server.prefix.as_str())?;
            rest.strip_prefix("__")?;
            let i = server
                .tools
                .binary_search_by(|t| t.qualified_name.as_str().cmp(qualified_name))
                .ok()?;
            Some((server, &server.tools[i]))
        })
    }
}

/// The call-time check: the granted tool `qualified_name` stands for, or None when the name does
/// not survive narrowing (refuse the call). The sidecar calls this for every `tools/call`,
/// however the agent got the name; [`GrantsDocument::find`] then names the tool's server.
pub fn permits<'d>(doc: &'d GrantsDocument, qualified_name: &str) -> Option<&'d GrantedTool> {
    doc.find(qualified_name).map(|(_, tool)| tool)
}

/// `<prefix>__<tool>`.
pub fn qualified_name(prefix: &str, tool: &str) -> String {
    format!("{prefix}__{tool}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(prefix: &str, name: &str) -> GrantedTool {
        GrantedTool {
            qualified_name: qualified_name(prefix, name),
            name: name.into(),
            access: Access::Read,
            idempotent: true,
            requires_approval: false,
            definition_digest: "sha256:00".into(),
        }
    }

    fn server(name: &str, prefix: &str, tools: &[&str]) -> ServerGrants {
        let mut tools: Vec<GrantedTool> = tools.iter().map(|t| tool(prefix, t)).collect();
        tools.sort_by(|a, b| a.qualified_name.cmp(&b.qualified_name));
        ServerGrants {
            name: name.into(),
            prefix: prefix.into(),
            optional: false,
            available: true,
            deferred: false,
            endpoint: None,
            tools,
            resources: vec![],
            prompts: vec![],
            prompt_digests: None,
        }
    }

    #[test]
    fn permits_finds_granted_tools_only() {
        let doc = GrantsDocument::new(vec![
            server("gh", "gh", &["get_issue", "list_issues"]),
            server("gh2", "gh_", &["x"]),
        ]);
        assert_eq!(permits(&doc, "gh__get_issue").unwrap().name, "get_issue");
        assert_eq!(permits(&doc, "gh___x").unwrap().name, "x");
        assert!(permits(&doc, "gh__delete_repo").is_none());
        assert!(permits(&doc, "get_issue").is_none());
        assert!(
            permits(&doc, "gh2__x").is_none(),
            "the prefix, not the server name"
        );
        assert!(permits(&doc, "").is_none());
        let (server, _) = doc.find("gh__list_issues").unwrap();
        assert_eq!(server.name, "gh");
        assert_eq!(doc.tool_count(), 3);
    }

    #[test]
    fn every_qualified_name_must_be_prefix_and_name() {
        let mut doc = GrantsDocument::new(vec![server("gh", "gh", &["get_issue"])]);
        assert_eq!(doc.naming_problem(), None);
        doc.servers[0].tools[0].qualified_name = "list_tools".into();
        let problem = doc.naming_problem().unwrap();
        assert!(
            problem.contains("\"list_tools\"") && problem.contains("gh__get_issue"),
            "{problem}"
        );
        doc.servers[0].tools.clear();
        doc.servers[0].prefix.clear();
        assert!(doc.naming_problem().unwrap().contains("empty prefix"));
    }

    #[test]
    fn serialises_camel_case_with_schema_version_and_a_stable_digest() {
        let doc = GrantsDocument::new(vec![server("gh", "gh", &["get_issue"])]);
        let value = serde_json::to_value(&doc).unwrap();
        assert_eq!(value["schemaVersion"], json!(SCHEMA_VERSION_V1));
        assert!(value["servers"][0].get("resources").is_none());
        assert_eq!(
            value["servers"][0]["tools"][0]["qualifiedName"],
            json!("gh__get_issue")
        );
        assert_eq!(
            value["servers"][0]["tools"][0]["requiresApproval"],
            json!(false)
        );
        assert!(value["servers"][0].get("endpoint").is_none());
        assert!(value.get("revoked").is_none(), "absent unless revoked");
        let back: GrantsDocument = serde_json::from_value(value).unwrap();
        assert_eq!(back, doc);
        assert_eq!(back.digest(), doc.digest());
        let revoked = serde_json::to_value(GrantsDocument::revoked()).unwrap();
        assert_eq!(
            revoked,
            json!({"schemaVersion": SCHEMA_VERSION_V1, "revoked": true, "servers": []})
        );
        assert!(doc.digest().starts_with("sha256:"));

        let mut changed = doc.clone();
        changed.servers[0].tools[0].requires_approval = true;
        assert_ne!(changed.digest(), doc.digest());
    }

    /// Granting a resource or a prompt is what makes a document v2; a v1 document (as an older
    /// operator wrote it) reads as granting none.
    #[test]
    fn resources_or_prompts_make_a_v2_document_and_v1_reads_as_none() {
        let mut granting = server("fs", "fs", &["read_file"]);
        granting.prompts = vec![PatternBound {
            allow: vec!["review_*".into()],
            deny: vec![],
        }];
        let doc = GrantsDocument::new(vec![server("gh", "gh", &[]), granting]);
        let value = serde_json::to_value(&doc).unwrap();
        assert_eq!(value["schemaVersion"], json!(SCHEMA_VERSION));
        assert_eq!(
            value["servers"][1]["prompts"],
            json!([{"allow": ["review_*"]}])
        );
        assert!(value["servers"][1].get("resources").is_none());
        let back: GrantsDocument = serde_json::from_value(value).unwrap();
        assert_eq!(back, doc);

        let v1 = json!({"schemaVersion": SCHEMA_VERSION_V1, "servers": [{
            "name": "fs", "prefix": "fs", "optional": false, "available": true,
            "deferred": false, "tools": []}]});
        let old: GrantsDocument = serde_json::from_value(v1).unwrap();
        assert!(old.servers[0].resources.is_empty() && old.servers[0].prompts.is_empty());
        assert!(!old.servers[0].grants_resources_or_prompts());
    }

    #[test]
    fn the_endpoint_never_holds_a_secret_value() {
        let mut doc = GrantsDocument::new(vec![server("gh", "gh", &["get_issue"])]);
        doc.servers[0].endpoint = Some(Endpoint {
            url: "https://mcp.example.com/mcp".into(),
            transport: Transport::StreamableHttp,
            era: Some(Era::Legacy),
            protocol_version: Some("2025-11-25".into()),
            bearer_token: Some(SecretKeySelector {
                name: "gh-token".into(),
                key: "token".into(),
            }),
            headers: vec![],
            oauth2: None,
            tls: None,
            connect_timeout_ms: 10_000,
            call_timeout_ms: 30_000,
            retry: 2,
            max_tool_pages: Some(100),
            max_response_bytes: None,
        });
        let value = serde_json::to_value(&doc).unwrap();
        let endpoint = &value["servers"][0]["endpoint"];
        assert_eq!(endpoint["transport"], json!("streamable-http"));
        assert_eq!(endpoint["era"], json!("legacy"));
        assert_eq!(
            endpoint["bearerToken"],
            json!({"name": "gh-token", "key": "token"})
        );
        let back: GrantsDocument = serde_json::from_value(value).unwrap();
        assert_eq!(back, doc);
    }
}
