//! The grants ConfigMap `<agentspec>-mcp-grants`: built here from the grants document and its
//! signature (pure), judged against what the cluster holds (pure), written by the AgentSpec
//! reconciler when it is not exactly what the operator would publish.
//!
//! ```text
//! [ AgentSpec bot ] --owns (controller)--> [ ConfigMap bot-mcp-grants ]
//!                                            labels: app.kubernetes.io/managed-by=mcp-operator
//!                                                    mcp-operator.dev/agentspec=bot
//!                                            annotation mcp-operator.dev/grants-digest
//!                                            data: grants.json  (never a secret value)
//!                                                  grants.sig   (grants::signature)
//! ```
//!
//! What the cluster holds is compared by content, not by annotation: the `grants.json` bytes,
//! a signature by the current key bound to this AgentSpec, and the digest annotation. A
//! ConfigMap that fails is written again; when its own signature does not vouch for it (edited
//! by hand, signature removed or forged, an older signed document put back) the reconciler
//! also reports `GrantsTampered` ([`judge`] says what changed). Deleting the ConfigMap by hand
//! triggers a reconcile (the controller watches the ConfigMaps it owns) that writes it again.
//! Deleting the AgentSpec publishes the revoked document first (see the reconciler's
//! finalizer); that ConfigMap has no owner, the reconciler removes it itself.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::api::agent_spec::{AgentSpec, GRANTS_KEY, grants_config_map_name};
use crate::grants::GrantsDocument;
use crate::grants::signature::{self, Binding, GrantsSignature, Keyring, Refused, SIGNATURE_KEY};

/// Annotation carrying the published document's digest.
pub const DIGEST_ANNOTATION: &str = "mcp-operator.dev/grants-digest";
/// Annotation on a revoked grants ConfigMap: when the revoked document was first published.
pub const REVOKED_ANNOTATION: &str = "mcp-operator.dev/revoked-at";
/// Label naming the AgentSpec a grants ConfigMap belongs to.
pub const AGENT_LABEL: &str = "mcp-operator.dev/agentspec";
pub use crate::controller::shared::{MANAGED_BY, MANAGED_BY_LABEL};

/// The most bytes a grants document may have. The apiserver refuses a ConfigMap over 1 MiB
/// (1,048,576 bytes, metadata included); the rest is left for the signature, the metadata and
/// the managed fields.
pub const MAX_GRANTS_BYTES: usize = 1_000_000;

/// The document as the ConfigMap holds it (compact: a large catalogue's indentation alone
/// would cost a third of the room). These exact bytes are signed.
pub fn document_json(doc: &GrantsDocument) -> String {
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
    let mut servers = doc.servers.clone();
    for server in &mut servers {
        server.tools.clear();
        server.resources.clear();
        server.prompts.clear();
        server.deferred = false;
    }
    (
        std::borrow::Cow::Owned(GrantsDocument::new(servers)),
        Some(size),
    )
}

/// Whose grants: the AgentSpec's namespace, name and uid.
pub fn binding(agent: &AgentSpec) -> Binding {
    Binding {
        namespace: agent.namespace().unwrap_or_default(),
        agent_spec: agent.name_any(),
        uid: agent.uid().unwrap_or_default(),
    }
}

/// What one grants ConfigMap is to hold.
pub struct Intent<'a> {
    pub doc: &'a GrantsDocument,
    /// [`document_json`] of `doc`.
    pub json: String,
    pub digest: String,
    /// Owned by the AgentSpec (not once it is being deleted: the garbage collector must not
    /// take the revoked document away before the pods have read it).
    pub owned: bool,
}

impl<'a> Intent<'a> {
    pub fn new(doc: &'a GrantsDocument, owned: bool) -> Self {
        Intent {
            doc,
            json: document_json(doc),
            digest: doc.digest(),
            owned,
        }
    }
}

/// The grants ConfigMap for one AgentSpec holding `intent`, signed by `sig`.
pub fn config_map(
    agent: &AgentSpec,
    intent: &Intent<'_>,
    sig: &GrantsSignature,
    revoked_at: Option<&str>,
) -> ConfigMap {
    let mut annotations = BTreeMap::from([(DIGEST_ANNOTATION.to_string(), intent.digest.clone())]);
    if let Some(at) = revoked_at {
        annotations.insert(REVOKED_ANNOTATION.to_string(), at.to_string());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(grants_config_map_name(&agent.name_any())),
            namespace: agent.namespace(),
            owner_references: if intent.owned {
                agent.controller_owner_ref(&()).map(|o| vec![o])
            } else {
                None
            },
            labels: Some(BTreeMap::from([
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                (AGENT_LABEL.to_string(), agent.name_any()),
            ])),
            annotations: Some(annotations),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            (GRANTS_KEY.to_string(), intent.json.clone()),
            (SIGNATURE_KEY.to_string(), sig.to_json()),
        ])),
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

/// How the grants ConfigMap in the cluster compares with what the operator would publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// Exactly it: the bytes, a signature by the current key for this AgentSpec, the digest.
    UpToDate { sequence: u64 },
    /// There is none.
    Missing,
    /// An earlier document of the operator's (the grants changed since, or the keys were
    /// rotated, or it was written before grants were signed): written again, quietly.
    Stale { sequence: Option<u64> },
    /// Changed by someone else: what changed, in sentences.
    Tampered { changes: Vec<String> },
}

impl Judged {
    /// The highest sequence the ConfigMap proves the operator published.
    fn sequence(&self) -> Option<u64> {
        match self {
            Judged::UpToDate { sequence } => Some(*sequence),
            Judged::Stale { sequence } => *sequence,
            _ => None,
        }
    }
}

/// Judges `existing` against `intent`. `last` is the highest sequence this controller
/// published for the AgentSpec (None after a restart: the ConfigMap's own valid signature is
/// then the only record).
pub fn judge(
    existing: Option<&ConfigMap>,
    intent: &Intent<'_>,
    keyring: &Keyring,
    binding: &Binding,
    last: Option<u64>,
) -> Judged {
    let Some(existing) = existing else {
        return Judged::Missing;
    };
    let data = existing.data.clone().unwrap_or_default();
    let Some(json) = data.get(GRANTS_KEY) else {
        return Judged::Tampered {
            changes: vec![format!("{GRANTS_KEY} was removed")],
        };
    };
    let sig = data.get(SIGNATURE_KEY).map(|s| s.as_bytes());
    let annotated = published_digest(existing);
    let there: Option<GrantsDocument> = serde_json::from_str(json).ok();
    let verified = signature::verify(json.as_bytes(), sig, &keyring.known_keys(), binding, last);
    match verified {
        Ok(v) => {
            let sequence = Some(v.sequence);
            if there.as_ref().map(GrantsDocument::digest).as_deref() != annotated {
                return Judged::Tampered {
                    changes: vec![format!("the annotation {DIGEST_ANNOTATION} was changed")],
                };
            }
            if *json == intent.json
                && v.key_id == keyring.current.id()
                && annotated == Some(intent.digest.as_str())
            {
                return Judged::UpToDate {
                    sequence: v.sequence,
                };
            }
            Judged::Stale { sequence }
        }
        // Written before grants were signed (an upgrade): its digest still vouches for it.
        Err(Refused::Unsigned)
            if last.is_none()
                && there.as_ref().map(GrantsDocument::digest).as_deref() == annotated
                && annotated.is_some() =>
        {
            Judged::Stale { sequence: None }
        }
        Err(refused) => {
            let mut changes = vec![tampering(&refused)];
            if matches!(refused, Refused::ContentChanged { .. }) {
                changes.extend(tool_changes(there.as_ref(), json, intent.doc));
            }
            Judged::Tampered { changes }
        }
    }
}

/// What a refusal means for a ConfigMap the operator wrote.
fn tampering(refused: &Refused) -> String {
    match refused {
        Refused::Unsigned => format!("{SIGNATURE_KEY} was removed"),
        Refused::Malformed(_) | Refused::UnsupportedVersion(_) => {
            format!(
                "{SIGNATURE_KEY} was replaced by something that is not the operator's signature"
            )
        }
        Refused::UnknownKey { key_id, .. } => {
            format!("{SIGNATURE_KEY} names the key {key_id}, which is not the operator's")
        }
        Refused::BadSignature { .. } => {
            format!("{SIGNATURE_KEY} was edited: its signature no longer verifies")
        }
        Refused::ContentChanged { .. } => {
            format!("{GRANTS_KEY} was edited: it no longer matches its signature")
        }
        Refused::OtherNamespace { signed, .. } => {
            format!("the grants of an AgentSpec in namespace {signed} were copied in")
        }
        Refused::OtherAgentSpec { signed, .. } => {
            format!("the grants of the AgentSpec {signed} were copied in")
        }
        Refused::OtherUid { .. } => {
            "the grants of an earlier AgentSpec of the same name were put back".to_string()
        }
        Refused::OlderSequence { sequence, last } => format!(
            "an older signed document (sequence {sequence}) was put back over sequence {last}"
        ),
    }
}

/// Which granted tools an edited `grants.json` adds, removes or changes against `intent`.
fn tool_changes(
    there: Option<&GrantsDocument>,
    json: &str,
    intent: &GrantsDocument,
) -> Vec<String> {
    let Some(there) = there else {
        return vec![format!(
            "{GRANTS_KEY} is not a grants document ({} bytes)",
            json.len()
        )];
    };
    let tools = |doc: &GrantsDocument| -> BTreeMap<String, String> {
        doc.servers
            .iter()
            .flat_map(|s| s.tools.iter())
            .map(|t| (t.qualified_name.clone(), format!("{t:?}")))
            .collect()
    };
    let (theirs, ours) = (tools(there), tools(intent));
    let names = |it: &mut dyn Iterator<Item = &String>| -> (usize, String) {
        let all: Vec<&String> = it.collect();
        let mut shown: Vec<String> = all
            .iter()
            .take(5)
            .map(|n| n.chars().take(80).collect())
            .collect();
        if all.len() > 5 {
            shown.push(format!("and {} more", all.len() - 5));
        }
        (all.len(), shown.join(", "))
    };
    let mut out = Vec::new();
    let (n, list) = names(&mut theirs.keys().filter(|k| !ours.contains_key(*k)));
    if n > 0 {
        out.push(format!("{n} tool(s) added: {list}"));
    }
    let (n, list) = names(&mut ours.keys().filter(|k| !theirs.contains_key(*k)));
    if n > 0 {
        out.push(format!("{n} tool(s) removed: {list}"));
    }
    let (n, list) = names(
        &mut theirs
            .iter()
            .filter(|(k, v)| ours.get(*k).is_some_and(|o| o != *v))
            .map(|(k, _)| k),
    );
    if n > 0 {
        out.push(format!(
            "{n} tool(s) changed (access, approval or digest): {list}"
        ));
    }
    let servers = |doc: &GrantsDocument| -> BTreeSet<String> {
        doc.servers
            .iter()
            .map(|s| format!("{:?}", (&s.name, &s.endpoint, s.available)))
            .collect()
    };
    if servers(there) != servers(intent) {
        out.push("a server's connection details changed".into());
    }
    out
}

/// The field managers other than `ours` that wrote the ConfigMap: who edited it, as far as the
/// apiserver records (never the person; their client's name).
pub fn other_managers(config_map: &ConfigMap, ours: &str) -> Vec<String> {
    let mut managers: Vec<String> = config_map
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.manager.clone())
        .filter(|m| m != ours)
        .collect();
    managers.sort();
    managers.dedup();
    managers
}

/// The `GrantsTampered` message.
pub fn tampered_message(
    name: &str,
    changes: &[String],
    managers: &[String],
    sequence: u64,
) -> String {
    let by = if managers.is_empty() {
        String::new()
    } else {
        format!(" (field manager {})", managers.join(", "))
    };
    let mut text = format!(
        "The grants ConfigMap {name} was changed by someone other than the operator{by}: {}. Sidecars never obey grants the operator did not sign; the signed grants were put back (sequence {sequence}).",
        changes.join("; ")
    );
    if text.len() > 1000 {
        let mut cut = 1000;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// What [`publish`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub written: bool,
    /// The sequence the ConfigMap now holds.
    pub sequence: u64,
    /// The ConfigMap's resourceVersion now.
    pub resource_version: Option<String>,
    /// Someone else had changed it: the `GrantsTampered` message.
    pub tampered: Option<String>,
    /// When the revoked document was first published (revoked intents only).
    pub revoked_at: Option<String>,
}

/// Makes the grants ConfigMap hold `intent`, signed: reads it, [`judge`]s it, and writes it
/// unless it is up to date. `last` is the highest sequence published for this AgentSpec.
pub async fn publish(
    client: &Client,
    agent: &AgentSpec,
    intent: &Intent<'_>,
    keyring: &Keyring,
    last: Option<u64>,
    field_manager: &str,
) -> Result<Publication, kube::Error> {
    let namespace = agent.namespace().unwrap_or_default();
    let name = grants_config_map_name(&agent.name_any());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let existing = api.get_opt(&name).await?;
    let binding = binding(agent);
    let judged = judge(existing.as_ref(), intent, keyring, &binding, last);
    let revoked_at = intent.doc.revoked.then(|| {
        existing
            .as_ref()
            .and_then(|cm| cm.annotations().get(REVOKED_ANNOTATION).cloned())
            .filter(|_| matches!(judged, Judged::UpToDate { .. }))
            .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().to_string())
    });
    if let Judged::UpToDate { sequence } = judged {
        return Ok(Publication {
            written: false,
            sequence,
            resource_version: existing.and_then(|cm| cm.resource_version()),
            tampered: None,
            revoked_at,
        });
    }
    let now_ms = u64::try_from(k8s_openapi::jiff::Timestamp::now().as_millisecond()).unwrap_or(0);
    let sequence = signature::next_sequence(now_ms, last.max(judged.sequence()));
    let sig = keyring
        .current
        .sign(intent.json.as_bytes(), &binding, sequence);
    let written = api
        .patch(
            &name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(&config_map(agent, intent, &sig, revoked_at.as_deref())),
        )
        .await?;
    let tampered = match &judged {
        Judged::Tampered { changes } => Some(tampered_message(
            &name,
            changes,
            &existing
                .as_ref()
                .map(|cm| other_managers(cm, field_manager))
                .unwrap_or_default(),
            sequence,
        )),
        _ => None,
    };
    Ok(Publication {
        written: true,
        sequence,
        resource_version: written.resource_version(),
        tampered,
        revoked_at,
    })
}

/// Removes the grants ConfigMap (once the revoked document has been served long enough).
pub async fn remove(client: &Client, agent: &AgentSpec) -> Result<(), kube::Error> {
    let namespace = agent.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    crate::controller::shared::config_map::delete_if_present(
        &api,
        &grants_config_map_name(&agent.name_any()),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::agent_spec::input::resolve_input;
    use crate::controller::fixtures::{agent, catalog, full_server, ready_status, server};
    use crate::controller::shared::endpoint::fill_endpoints;
    use crate::grants::signature::Keyring;
    use crate::grants::{SCHEMA_VERSION, SCHEMA_VERSION_V1, ServerGrants, TenantDefault, resolve};
    use serde_json::{Value, json};

    /// The grants schemas every published document must satisfy, by schemaVersion.
    const SCHEMA_V1: &str = include_str!("../../../schemas/grants.v1.json");
    const SCHEMA_V2: &str = include_str!("../../../schemas/grants.v2.json");

    /// The errors of `doc` against the schema of the version it says it is.
    fn schema_errors(doc: &Value) -> Vec<String> {
        let text = match doc["schemaVersion"].as_str() {
            Some(SCHEMA_VERSION_V1) => SCHEMA_V1,
            Some(SCHEMA_VERSION) => SCHEMA_V2,
            other => return vec![format!("schemaVersion {other:?} has no schema")],
        };
        let schema: Value = serde_json::from_str(text).unwrap();
        let validator = jsonschema::draft202012::new(&schema).unwrap();
        validator
            .iter_errors(doc)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    #[test]
    fn the_schemas_are_valid_draft_2020_12_schemas_of_their_versions() {
        for (text, version) in [(SCHEMA_V1, SCHEMA_VERSION_V1), (SCHEMA_V2, SCHEMA_VERSION)] {
            let schema: Value = serde_json::from_str(text).unwrap();
            assert!(jsonschema::meta::is_valid(&schema));
            assert_eq!(
                schema["properties"]["schemaVersion"]["const"],
                json!(version)
            );
        }
    }

    /// An AgentSpec entry granting resources and prompts publishes a v2 document that
    /// grants/v2's schema accepts, and v1's refuses (an older reader must not half-read it).
    #[test]
    fn a_document_granting_resources_and_prompts_is_v2_and_matches_its_schema() {
        let cat = catalog();
        let gh = full_server();
        let a = agent(json!({"servers": [
            {"name": "gh", "resources": {"allow": ["repo://docs/*", "repo://{owner}/readme"],
                                          "deny": ["repo://docs/secret*"]},
             "prompts": {"allow": ["triage_*"]}},
        ]}));
        let servers = BTreeMap::from([("gh".to_string(), (&gh, Some(&cat)))]);
        let input = resolve_input(&a, &servers, vec![], TenantDefault::Allow, u64::MAX);
        let mut doc = resolve(&input).document;
        fill_endpoints(&mut doc, &BTreeMap::from([("gh".to_string(), &gh)]));
        let value = serde_json::to_value(&doc).unwrap();
        assert_eq!(value["schemaVersion"], json!(SCHEMA_VERSION));
        assert_eq!(schema_errors(&value), Vec::<String>::new(), "{value:#}");
        assert_eq!(
            value["servers"][0]["prompts"],
            json!([{"allow": ["triage_*"]}])
        );
        // A pinned server's approved prompt digests are part of v2.
        let mut pinned = doc.clone();
        pinned.servers[0].prompt_digests = Some(BTreeMap::from([(
            "triage_x".to_string(),
            format!("sha256:{}", "a".repeat(64)),
        )]));
        let pinned = serde_json::to_value(&pinned).unwrap();
        assert_eq!(schema_errors(&pinned), Vec::<String>::new(), "{pinned:#}");
        let mut as_v1 = value.clone();
        as_v1["schemaVersion"] = json!(SCHEMA_VERSION_V1);
        assert!(!schema_errors(&as_v1).is_empty());
        // Too large to publish: nothing at all is granted, resources and prompts included.
        let (published, _) = publishable(&doc);
        assert_eq!(*published, doc, "it fits");
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
        let mut doc = resolve(&input).document;
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
            !schema_errors(&value).is_empty(),
            "a value next to a reference, in v2 too"
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
            resources: vec![crate::grants::PatternBound {
                allow: vec!["*".into()],
                deny: vec![],
            }],
            prompts: vec![],
            prompt_digests: None,
        }])
    }

    #[test]
    fn grants_that_fit_are_published_as_they_are() {
        let doc = document_of(100);
        let (published, too_large) = publishable(&doc);
        assert_eq!(too_large, None);
        assert_eq!(*published, doc);
        let a = agent(json!({"servers": [{"name": "big"}]}));
        let intent = Intent::new(&doc, true);
        let sig = Keyring::generate()
            .current
            .sign(intent.json.as_bytes(), &binding(&a), 1);
        let cm = config_map(&a, &intent, &sig, None);
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
        assert!(published.servers[0].resources.is_empty());
        assert_eq!(published.schema_version, SCHEMA_VERSION_V1);
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
            resources: vec![],
            prompts: vec![],
            prompt_digests: None,
        }]);
        let keyring = Keyring::generate();
        let intent = Intent::new(&doc, true);
        let sig = keyring
            .current
            .sign(intent.json.as_bytes(), &binding(&a), 1);
        let cm = config_map(&a, &intent, &sig, None);
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
        assert_eq!(back.schema_version, SCHEMA_VERSION_V1);
        let data = cm.data.as_ref().unwrap();
        assert_eq!(data[SIGNATURE_KEY], sig.to_json());
        assert!(
            signature::verify(
                data[GRANTS_KEY].as_bytes(),
                Some(data[SIGNATURE_KEY].as_bytes()),
                &keyring.verifying_keys(),
                &binding(&a),
                None
            )
            .is_ok()
        );
        // No private key anywhere in what the ConfigMap holds.
        let text = serde_json::to_string(&cm).unwrap();
        for seed in keyring.to_secret_data().values() {
            use base64::Engine as _;
            assert!(!text.contains(&base64::engine::general_purpose::STANDARD.encode(seed)));
            assert!(!text.contains(&hex::encode(seed)));
        }
        // Revoked: not owned (the garbage collector must not take it away early).
        let revoked = GrantsDocument::revoked();
        let intent = Intent::new(&revoked, false);
        let cm = config_map(&a, &intent, &sig, Some("2026-12-02T00:00:00Z"));
        assert!(cm.metadata.owner_references.is_none());
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()[REVOKED_ANNOTATION],
            "2026-12-02T00:00:00Z"
        );
    }

    /// The AgentSpec `bot`, a document granting `tools` of server fs, and a keyring.
    fn scene(tools: &[&str]) -> (AgentSpec, GrantsDocument, Keyring) {
        let a = agent(json!({"servers": [{"name": "fs"}]}));
        let mut granted: Vec<crate::grants::GrantedTool> = tools
            .iter()
            .map(|t| crate::grants::GrantedTool {
                qualified_name: format!("fs__{t}"),
                name: t.to_string(),
                access: crate::core::Access::Read,
                idempotent: true,
                requires_approval: false,
                definition_digest: "sha256:1".into(),
            })
            .collect();
        granted.sort_by(|a, b| a.qualified_name.cmp(&b.qualified_name));
        let doc = GrantsDocument::new(vec![ServerGrants {
            name: "fs".into(),
            prefix: "fs".into(),
            optional: false,
            available: true,
            deferred: false,
            endpoint: None,
            tools: granted,
            resources: vec![],
            prompts: vec![],
            prompt_digests: None,
        }]);
        (a, doc, Keyring::generate())
    }

    fn published(
        a: &AgentSpec,
        doc: &GrantsDocument,
        keyring: &Keyring,
        sequence: u64,
    ) -> ConfigMap {
        let intent = Intent::new(doc, true);
        let sig = keyring
            .current
            .sign(intent.json.as_bytes(), &binding(a), sequence);
        config_map(a, &intent, &sig, None)
    }

    fn changes(judged: Judged) -> Vec<String> {
        match judged {
            Judged::Tampered { changes } => changes,
            other => panic!("not tampered: {other:?}"),
        }
    }

    #[test]
    fn what_the_operator_published_is_up_to_date_and_an_older_one_is_stale() {
        let (a, doc, keyring) = scene(&["read"]);
        let b = binding(&a);
        let cm = published(&a, &doc, &keyring, 5);
        let intent = Intent::new(&doc, true);
        assert_eq!(
            judge(Some(&cm), &intent, &keyring, &b, Some(5)),
            Judged::UpToDate { sequence: 5 }
        );
        assert_eq!(judge(None, &intent, &keyring, &b, None), Judged::Missing);
        // The grants changed since.
        let (_, wider, _) = scene(&["read", "write"]);
        assert_eq!(
            judge(Some(&cm), &Intent::new(&wider, true), &keyring, &b, Some(5)),
            Judged::Stale { sequence: Some(5) }
        );
        // The keys were rotated: signed again with the new current key, not tampered.
        let rotated = keyring.rotated();
        assert_eq!(
            judge(Some(&cm), &intent, &rotated, &b, None),
            Judged::Stale { sequence: Some(5) }
        );
        // Written by an operator before signing: its digest annotation vouches for it.
        let mut unsigned = cm.clone();
        unsigned.data.as_mut().unwrap().remove(SIGNATURE_KEY);
        assert_eq!(
            judge(Some(&unsigned), &intent, &keyring, &b, None),
            Judged::Stale { sequence: None }
        );
        // ...but not once this controller published a signed one.
        assert_eq!(
            changes(judge(Some(&unsigned), &intent, &keyring, &b, Some(5))),
            ["grants.sig was removed"]
        );
    }

    #[test]
    fn a_hand_edit_is_tampering_and_says_what_changed() {
        let (a, doc, keyring) = scene(&["read"]);
        let b = binding(&a);
        let intent = Intent::new(&doc, true);
        let cm = published(&a, &doc, &keyring, 5);

        // Two tools added, the signature and annotations untouched.
        let (_, wider, _) = scene(&["read", "write", "delete"]);
        let mut edited = cm.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert(GRANTS_KEY.into(), document_json(&wider));
        let c = changes(judge(Some(&edited), &intent, &keyring, &b, Some(5)));
        assert_eq!(
            c[0],
            "grants.json was edited: it no longer matches its signature"
        );
        assert_eq!(c[1], "2 tool(s) added: fs__delete, fs__write");

        // Access raised on a granted tool.
        let mut raised = doc.clone();
        raised.servers[0].tools[0].access = crate::core::Access::Destructive;
        let mut edited = cm.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert(GRANTS_KEY.into(), document_json(&raised));
        let c = changes(judge(Some(&edited), &intent, &keyring, &b, Some(5)));
        assert!(
            c[1].contains("1 tool(s) changed") && c[1].contains("fs__read"),
            "{c:?}"
        );

        // Garbage.
        let mut edited = cm.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert(GRANTS_KEY.into(), "{".into());
        assert!(
            changes(judge(Some(&edited), &intent, &keyring, &b, Some(5)))[1]
                .contains("not a grants document")
        );

        // Re-signed by someone else's key.
        let stranger = Keyring::generate();
        let forged = published(&a, &wider, &stranger, 6);
        assert!(
            changes(judge(Some(&forged), &intent, &keyring, &b, Some(5)))[0]
                .contains("not the operator's")
        );

        // An older genuine document put back.
        let (_, older, _) = scene(&["read", "write"]);
        let old = published(&a, &older, &keyring, 3);
        assert_eq!(
            changes(judge(Some(&old), &intent, &keyring, &b, Some(5))),
            ["an older signed document (sequence 3) was put back over sequence 5"]
        );

        // Another AgentSpec's grants copied in.
        let mut other = a.clone();
        other.metadata.name = Some("other".into());
        let copied = published(&other, &doc, &keyring, 9);
        assert!(
            changes(judge(Some(&copied), &intent, &keyring, &b, Some(5)))[0]
                .contains("AgentSpec other")
        );

        // The digest annotation alone.
        let mut annotated = cm.clone();
        annotated
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(DIGEST_ANNOTATION.into(), "sha256:x".into());
        assert_eq!(
            changes(judge(Some(&annotated), &intent, &keyring, &b, Some(5))),
            ["the annotation mcp-operator.dev/grants-digest was changed"]
        );

        // grants.json removed.
        let mut removed = cm.clone();
        removed.data.as_mut().unwrap().remove(GRANTS_KEY);
        assert_eq!(
            changes(judge(Some(&removed), &intent, &keyring, &b, Some(5))),
            ["grants.json was removed"]
        );
    }

    #[test]
    fn the_tampered_message_names_the_changes_and_the_editor_and_stays_short() {
        let text = tampered_message(
            "bot-mcp-grants",
            &[
                "grants.json was edited".into(),
                "1 tool(s) added: fs__x".into(),
            ],
            &["kubectl-patch".into()],
            42,
        );
        assert_eq!(
            text,
            "The grants ConfigMap bot-mcp-grants was changed by someone other than the operator (field manager kubectl-patch): grants.json was edited; 1 tool(s) added: fs__x. Sidecars never obey grants the operator did not sign; the signed grants were put back (sequence 42)."
        );
        let long = tampered_message("cm", &["x".repeat(5000)], &[], 1);
        assert!(long.len() <= 1004);
    }
}
