//! The grants ConfigMap `<agentspec>-mcp-grants`: built here from the grants document (pure),
//! written by the AgentSpec reconciler only when the digest it carries differs from the one in
//! the cluster.
//!
//! ```text
//! [ AgentSpec bot ] --owns (controller)--> [ ConfigMap bot-mcp-grants ]
//!                                            labels: app.kubernetes.io/managed-by=mcp-operator
//!                                                    mcp-operator.dev/agentspec=bot
//!                                            annotation mcp-operator.dev/grants-digest
//!                                            data: grants.json  (never a secret value)
//! ```
//!
//! Deleting the AgentSpec lets the garbage collector delete the ConfigMap; deleting the
//! ConfigMap by hand triggers a reconcile (the controller watches the ConfigMaps it owns) that
//! writes it again.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::{Api, Client, Resource, ResourceExt};

use crate::api::agent_spec::{AgentSpec, GRANTS_KEY, grants_config_map_name};
use crate::controller::shared::config_map::apply_if_changed;
use crate::grants::GrantsDocument;

/// Annotation carrying the published document's digest.
pub const DIGEST_ANNOTATION: &str = "mcp-operator.dev/grants-digest";
/// Label naming the AgentSpec a grants ConfigMap belongs to.
pub const AGENT_LABEL: &str = "mcp-operator.dev/agentspec";
/// Label on everything the operator creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "mcp-operator";

/// The most bytes a grants document may have. The apiserver refuses a ConfigMap over 1 MiB
/// (1,048,576 bytes, metadata included); the rest is left for the metadata and the managed
/// fields.
pub const MAX_GRANTS_BYTES: usize = 1_000_000;

/// The document as the ConfigMap holds it (compact: a large catalogue's indentation alone
/// would cost a third of the room).
fn document_json(doc: &GrantsDocument) -> String {
    serde_json::to_string(doc).expect("a grants document serialises")
}

/// What can be published for `doc`: the document itself when it fits in a ConfigMap, else (with
/// its size) the same servers granting no tools — never the last document, which may grant
/// what the objects no longer allow.
pub fn publishable(doc: &GrantsDocument) -> (std::borrow::Cow<'_, GrantsDocument>, Option<usize>) {
    let size = document_json(doc).len();
    if size <= MAX_GRANTS_BYTES {
        return (std::borrow::Cow::Borrowed(doc), None);
    }
    let mut empty = doc.clone();
    for server in &mut empty.servers {
        server.tools.clear();
        server.deferred = false;
    }
    (std::borrow::Cow::Owned(empty), Some(size))
}

/// The grants ConfigMap for one AgentSpec holding `doc` (whose digest is `digest`).
pub fn config_map(agent: &AgentSpec, doc: &GrantsDocument, digest: &str) -> ConfigMap {
    let json = document_json(doc);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(grants_config_map_name(&agent.name_any())),
            namespace: agent.namespace(),
            owner_references: agent.controller_owner_ref(&()).map(|o| vec![o]),
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                (AGENT_LABEL.to_string(), agent.name_any()),
            ])),
            annotations: Some(BTreeMap::from([(
                DIGEST_ANNOTATION.to_string(),
                digest.to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(GRANTS_KEY.to_string(), json)])),
        ..Default::default()
    }
}

/// The digest a grants ConfigMap says it holds.
pub fn published_digest<K: Resource>(config_map: &K) -> Option<&str> {
    config_map
        .meta()
        .annotations
        .as_ref()?
        .get(DIGEST_ANNOTATION)
        .map(String::as_str)
}

/// Makes the grants ConfigMap hold `doc`. `cached` is the digest the controller's ConfigMap
/// store shows (it may lag): when it matches, nothing is read or written; otherwise the
/// ConfigMap is read and written only when its digest differs. Returns whether it was written.
pub async fn publish(
    client: &Client,
    agent: &AgentSpec,
    doc: &GrantsDocument,
    digest: &str,
    cached: Option<&str>,
    field_manager: &str,
) -> Result<bool, kube::Error> {
    if cached == Some(digest) {
        return Ok(false);
    }
    let namespace = agent.namespace().unwrap_or_default();
    let name = grants_config_map_name(&agent.name_any());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    apply_if_changed(
        &api,
        &name,
        DIGEST_ANNOTATION,
        digest,
        field_manager,
        || config_map(agent, doc, digest),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::agent_spec::input::{fill_endpoints, resolve_input};
    use crate::controller::fixtures::{agent, catalog, full_server, ready_status, server};
    use crate::grants::{SCHEMA_VERSION, ServerGrants, TenantDefault, resolve};
    use serde_json::{Value, json};

    /// The grants schema every published document must satisfy.
    const SCHEMA: &str = include_str!("../../../schemas/grants.v1.json");

    fn schema_errors(doc: &Value) -> Vec<String> {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        validator
            .iter_errors(doc)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    #[test]
    fn the_schema_is_a_valid_draft_2020_12_schema_of_this_version() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        assert!(jsonschema::meta::is_valid(&schema));
        assert_eq!(
            schema["properties"]["schemaVersion"]["const"],
            json!(SCHEMA_VERSION)
        );
    }

    /// A document exercising every field: an available server with a bearer token, a header,
    /// TLS, era and protocol; an unavailable optional one; a missing one; a deferred one.
    #[test]
    fn a_resolved_document_with_every_field_matches_the_schema() {
        let cat = catalog();
        let gh = full_server();
        let mut tls = server(
            "tls",
            json!({}),
            json!({"url": "https://tls.example/mcp", "tls": {"insecureSkipVerify": true},
                   "tools": {"requireApproval": ["read_file"]}}),
            ready_status(&cat),
        );
        tls.status.as_mut().unwrap().era = Some(crate::core::Era::Modern);
        tls.status.as_mut().unwrap().protocol_version = Some("2026-07-28".into());
        let down = server(
            "down",
            json!({}),
            json!({"url": "http://down.example/mcp", "optional": true}),
            Value::Null,
        );
        let a = agent(json!({"servers": [
            {"name": "gh", "prefix": "git-hub", "deny": ["delete_*"]},
            {"name": "tls"},
            {"name": "down"},
            {"name": "gone"},
        ], "approval": "writes"}));
        let servers = BTreeMap::from([
            ("gh".to_string(), (&gh, Some(&cat))),
            ("tls".to_string(), (&tls, Some(&cat))),
            ("down".to_string(), (&down, None)),
        ]);
        let input = resolve_input(&a, &servers, vec![], TenantDefault::Allow, 10);
        let mut doc = resolve(&input).document.unwrap();
        fill_endpoints(
            &mut doc,
            &BTreeMap::from([
                ("gh".to_string(), &gh),
                ("tls".to_string(), &tls),
                ("down".to_string(), &down),
            ]),
        );
        let value = serde_json::to_value(&doc).unwrap();
        assert_eq!(schema_errors(&value), Vec::<String>::new(), "{value:#}");
        // Every optional field is present somewhere, so the schema checked it.
        let text = value.to_string();
        for field in [
            "bearerToken",
            "headers",
            "caBundleConfigMap",
            "insecureSkipVerify",
            "era",
            "protocolVersion",
            "connectTimeoutMs",
            "callTimeoutMs",
            "retry",
            "requiresApproval",
            "definitionDigest",
            "idempotent",
        ] {
            assert!(text.contains(field), "{field} missing from {value:#}");
        }
        assert!(
            doc.servers.iter().any(|s| s.deferred),
            "the budget of 10 defers"
        );
        assert!(
            doc.servers
                .iter()
                .any(|s| !s.available && s.endpoint.is_some())
        );
        assert!(doc.servers.iter().any(|s| s.endpoint.is_none()));
    }

    #[test]
    fn the_schema_refuses_secret_values_and_unknown_fields() {
        let doc = GrantsDocument::new(vec![]);
        let mut value = serde_json::to_value(&doc).unwrap();
        assert!(schema_errors(&value).is_empty());
        value["servers"] = json!([{
            "name": "gh", "prefix": "gh", "optional": false, "available": true, "deferred": false,
            "endpoint": {"url": "https://gh.example/mcp", "transport": "streamable-http",
                         "connectTimeoutMs": 1, "callTimeoutMs": 1, "retry": 0,
                         "bearerToken": {"name": "t", "key": "k", "value": "s3cr3t"}},
            "tools": [],
        }]);
        assert!(
            !schema_errors(&value).is_empty(),
            "a value next to a reference"
        );
        value["schemaVersion"] = json!("mcp-operator.dev/grants/v2");
        assert!(
            schema_errors(&value)
                .iter()
                .any(|e| e.contains("schemaVersion"))
        );
    }

    /// `tools` granted tools of 120-character names from one server.
    fn document_of(tools: usize) -> GrantsDocument {
        GrantsDocument::new(vec![ServerGrants {
            name: "big".into(),
            prefix: "big".into(),
            optional: false,
            available: true,
            deferred: true,
            endpoint: None,
            tools: (0..tools)
                .map(|i| {
                    let name = format!("{}{i:08}", "t".repeat(112));
                    crate::grants::GrantedTool {
                        qualified_name: format!("big__{name}"),
                        name,
                        access: crate::core::Access::Read,
                        idempotent: true,
                        requires_approval: false,
                        definition_digest: format!("{i:064}"),
                    }
                })
                .collect(),
        }])
    }

    #[test]
    fn grants_that_fit_are_published_as_they_are() {
        let doc = document_of(100);
        let (published, too_large) = publishable(&doc);
        assert_eq!(too_large, None);
        assert_eq!(*published, doc);
        let cm = config_map(&agent(json!({"servers": [{"name": "big"}]})), &doc, "d");
        let text = &cm.data.unwrap()[GRANTS_KEY];
        assert_eq!(serde_json::from_str::<GrantsDocument>(text).unwrap(), doc);
    }

    #[test]
    fn grants_too_large_for_a_config_map_are_published_granting_nothing() {
        let doc = document_of(5_000);
        let size = serde_json::to_string(&doc).unwrap().len();
        assert!(
            size > MAX_GRANTS_BYTES,
            "the test needs a document over the limit"
        );
        let (published, too_large) = publishable(&doc);
        assert_eq!(too_large, Some(size));
        // The same server, no tools: never the last document, which may grant what the
        // objects no longer allow.
        assert_eq!(published.servers.len(), 1);
        assert_eq!(published.servers[0].name, "big");
        assert!(published.servers[0].tools.is_empty());
        assert!(!published.servers[0].deferred);
        assert_eq!(published.tool_count(), 0);
        assert_ne!(published.digest(), doc.digest());
        let value = serde_json::to_value(&*published).unwrap();
        assert_eq!(schema_errors(&value), Vec::<String>::new());
    }

    #[test]
    fn the_config_map_is_owned_labelled_and_carries_its_digest() {
        let a = agent(json!({"servers": [{"name": "gh"}]}));
        let doc = GrantsDocument::new(vec![ServerGrants {
            name: "gh".into(),
            prefix: "gh".into(),
            optional: false,
            available: false,
            deferred: false,
            endpoint: None,
            tools: vec![],
        }]);
        let cm = config_map(&a, &doc, &doc.digest());
        assert_eq!(cm.metadata.name.as_deref(), Some("bot-mcp-grants"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("team-a"));
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str(),
                owner.controller
            ),
            ("AgentSpec", "bot", "u-1", Some(true))
        );
        let labels = cm.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[MANAGED_BY_LABEL], "mcp-operator");
        assert_eq!(labels[AGENT_LABEL], "bot");
        assert_eq!(published_digest(&cm), Some(doc.digest().as_str()));
        let back: GrantsDocument =
            serde_json::from_str(&cm.data.as_ref().unwrap()[GRANTS_KEY]).unwrap();
        assert_eq!(back, doc);
        assert_eq!(back.schema_version, SCHEMA_VERSION);
    }
}
