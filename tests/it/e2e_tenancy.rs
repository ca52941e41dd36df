//! A tenant who tries to widen what the platform bounds, on the real control plane (issue 19,
//! items 1 and 2). The tenant is the user `tenant-a` with a Role in its namespace only: it edits
//! McpServers, AgentSpecs, ConfigMaps and Pods there, as `kubectl --as=tenant-a` would (the
//! client impersonates it), and nothing else. The platform engineer (the admin client) writes
//! the McpTenantPolicy. What counts is what the operator publishes in the grants ConfigMap.
//!
//! ```text
//!  admin:    McpTenantPolicy { files: read · tier=admin: no deletes, approve every call ·
//!                              capped: read, put_object reclassified read }
//!  tenant-a: McpServer files, capped (tools.overrides lowering delete_file and write_file),
//!            AgentSpec bot → then labels files tier=admin, then tightens an override
//!  tenant-a: McpServer big (5,000 tools: its catalogue in a ConfigMap) → edits that ConfigMap
//!            while the operator restarts
//! ```

use crate::e2e;
use crate::operator;
use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::{Client, ResourceExt};
use mcp_operator::api::agent_spec::AgentSpec;
use mcp_operator::api::mcp_server::McpServer;
use mcp_operator::api::tenant_policy::McpTenantPolicy;
use operator::{Operator, eventually, server_manifest};
use serde_json::{Value, json};
use support::Fixtures;

const SOON: Duration = Duration::from_secs(30);
const TENANT: &str = "tenant-a";
const TENANT_LABEL: &str = "mcp-operator.dev/e2e-tenant";

/// What a tenant may do in its namespace: its McpServers, AgentSpecs, ConfigMaps and Pods.
async fn grant_tenant_role(admin: &Client, namespace: &str) {
    e2e::grant_role(
        admin,
        namespace,
        "tenant",
        TENANT,
        json!([
            {"apiGroups": ["mcp-operator.dev"], "resources": ["mcpservers", "agentspecs"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps", "pods"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        ]),
    )
    .await;
}

/// A namespace for the tenant: its Role there, and the label the test's policy selects.
async fn tenant_namespace(test: &str) -> (Client, e2e::TestNamespace) {
    let (admin, ns) = e2e::setup(test).await;
    grant_tenant_role(&admin, ns.name()).await;
    Api::<Namespace>::all(admin.clone())
        .patch(
            ns.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {TENANT_LABEL: ns.name()}}})),
        )
        .await
        .unwrap();
    (admin, ns)
}

/// The platform engineer's McpTenantPolicy `name` with `rules`, selecting the tenant's
/// namespace only; its full name.
async fn apply_policy(admin: &Client, ns: &e2e::TestNamespace, name: &str, rules: Value) -> String {
    let policy_name = ns.scoped_name(name);
    let policy: McpTenantPolicy = serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpTenantPolicy",
        "metadata": {"name": policy_name},
        "spec": {
            "namespaceSelector": {"matchLabels": {TENANT_LABEL: ns.name()}},
            "rules": rules,
        },
    }))
    .unwrap();
    Api::<McpTenantPolicy>::all(admin.clone())
        .patch(
            &policy_name,
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&policy),
        )
        .await
        .unwrap();
    ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);
    policy_name
}

/// Server-side apply of a namespaced object by `client` (the tenant).
async fn apply<K>(client: &Client, namespace: &str, manifest: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(manifest).unwrap();
    let name = object.name_any();
    Api::<K>::namespaced(client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("{TENANT} applying {name}: {}", e2e::describe(&e)));
}

/// The granted tools of one server in the published grants: qualified name → (access,
/// requiresApproval).
fn granted(doc: &Value, server: &str) -> Vec<(String, String, bool)> {
    let mut tools: Vec<(String, String, bool)> = doc["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == server)
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["qualifiedName"].as_str().unwrap().to_string(),
                t["access"].as_str().unwrap().to_string(),
                t["requiresApproval"].as_bool().unwrap(),
            )
        })
        .collect();
    tools.sort();
    tools
}

fn tool(name: &str, access: &str, approval: bool) -> (String, String, bool) {
    (name.to_string(), access.to_string(), approval)
}

/// Waits until the published grants of `server` are exactly `expected`; returns the document.
async fn wait_granted(
    client: &Client,
    namespace: &str,
    server: &str,
    expected: &[(String, String, bool)],
) -> Value {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    eventually(
        SOON,
        &format!("bot's grants of {server}: {expected:?}"),
        || async {
            let cm = api
                .get_opt("bot-mcp-grants")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no grants ConfigMap yet")?;
            let text = cm
                .data
                .as_ref()
                .and_then(|d| d.get("grants.json"))
                .ok_or("no grants.json")?;
            let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
            let got = granted(&doc, server);
            if got == expected {
                Ok(doc)
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_tenant_can_neither_lower_a_classification_nor_widen_its_grants_with_a_label() {
    let (admin, ns) = tenant_namespace("tenancy").await;
    let namespace = ns.name().to_string();
    let fixture = Fixtures::load().sdk_server(&[]);
    let _op = Operator::start(&e2e::kubeconfig_path().await, &namespace, "op-tenancy");

    // The platform engineer's policy for this namespace.
    let policy_name = apply_policy(
        &admin,
        &ns,
        "bounds",
        json!([
            {"servers": {"names": ["files"]}, "maxAccess": "read"},
            {"servers": {"selector": {"matchLabels": {"tier": "admin"}}},
             "deny": ["delete_*"], "requireApprovalFor": "read"},
            {"servers": {"names": ["capped"]}, "maxAccess": "read",
             "overrides": {"put_object": "read"}},
        ]),
    )
    .await;

    // The tenant: two McpServers on the same upstream; on capped it "reclassifies" the tools
    // the policy's ceiling would keep out.
    let tenant = e2e::client_as(TENANT).await;
    apply::<McpServer>(
        &tenant,
        &namespace,
        server_manifest("files", &fixture.url, json!({})),
    )
    .await;
    apply::<McpServer>(
        &tenant,
        &namespace,
        server_manifest(
            "capped",
            &fixture.url,
            json!({"tools": {"overrides": {"delete_file": "read", "write_file": "read"}}}),
        ),
    )
    .await;
    apply::<AgentSpec>(
        &tenant,
        &namespace,
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
               "metadata": {"name": "bot"},
               "spec": {"servers": [{"name": "files"}, {"name": "capped"}]}}),
    )
    .await;

    // The override-to-read attack has no effect: delete_file and write_file stay over the
    // ceiling. The platform's reclassification of put_object (served as a write) holds, and
    // the AgentSpec's approval level (destructive, the default) judges it as read.
    wait_granted(
        &admin,
        &namespace,
        "capped",
        &[
            tool("capped__put_object", "read", false),
            tool("capped__read_file", "read", false),
        ],
    )
    .await;
    let doc = wait_granted(
        &admin,
        &namespace,
        "files",
        &[tool("files__read_file", "read", false)],
    )
    .await;
    eprintln!("published grants: {doc:#}");
    let agents: Api<AgentSpec> = Api::namespaced(tenant.clone(), &namespace);
    let resolved = eventually(SOON, "bot's Resolved condition", || async {
        let agent = agents.get("bot").await.map_err(|e| e.to_string())?;
        let status = serde_json::to_value(agent.status).map_err(|e| e.to_string())?;
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Resolved").cloned())
            .filter(|c| c["reason"] == "OverrideNotApplied")
            .ok_or_else(|| format!("{status}"))
    })
    .await;
    let message = resolved["message"].as_str().unwrap();
    eprintln!("what the tenant reads in bot's Resolved condition: {message}");
    assert!(
        message.contains("delete_file counts as destructive")
            && message.contains("write_file counts as write")
            && message.contains("can only raise a classification"),
        "{message}"
    );

    // The policy is not the tenant's to change.
    let denied = Api::<McpTenantPolicy>::all(tenant.clone())
        .patch(
            &policy_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rules": []}})),
        )
        .await
        .expect_err("a tenant cannot edit a McpTenantPolicy");
    assert!(e2e::describe(&denied).contains("forbidden"), "{denied}");

    // The label attack: tier=admin makes the admin rule pick files too. It only narrows:
    // files stays read-only, and now every call needs approval (the admin rule's bound).
    Api::<McpServer>::namespaced(tenant.clone(), &namespace)
        .patch(
            "files",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "admin"}}})),
        )
        .await
        .unwrap();
    wait_granted(
        &admin,
        &namespace,
        "files",
        &[tool("files__read_file", "read", true)],
    )
    .await;

    // An override that tightens keeps working: read_file as destructive leaves capped's
    // read ceiling.
    apply::<McpServer>(
        &tenant,
        &namespace,
        server_manifest(
            "capped",
            &fixture.url,
            json!({"tools": {"overrides": {"read_file": "destructive"}}}),
        ),
    )
    .await;
    wait_granted(
        &admin,
        &namespace,
        "capped",
        &[tool("capped__put_object", "read", false)],
    )
    .await;
}

/// A catalogue too large for status is kept in a ConfigMap in the tenant's namespace, which the
/// tenant may edit. Lowering a tool's access class there (every digest field kept, the content
/// key unchanged) while the operator restarts (so no reconciler holds the catalogue it read
/// before) widens nothing: grants take only the catalogue status's digest names, the operator
/// writes the ConfigMap again, and a Warning event says why.
#[tokio::test]
async fn a_tenant_who_edits_a_spilled_catalogue_widens_nothing() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::ListParams;
    use std::io::{Read, Write};

    let (admin, ns) = tenant_namespace("tenancy-spill").await;
    let namespace = ns.name().to_string();
    let hostile = Fixtures::load().hostile_server();
    let op = Operator::start(&e2e::kubeconfig_path().await, &namespace, "op-spill");
    apply_policy(
        &admin,
        &ns,
        "spill-bounds",
        json!([{"servers": {"names": ["big"]}, "maxAccess": "read"}]),
    )
    .await;

    // 5,000 tools: too many for status. bulk_00000 and every fourth are read-only, bulk_00001
    // writes.
    let tenant = e2e::client_as(TENANT).await;
    apply::<McpServer>(
        &tenant,
        &namespace,
        server_manifest(
            "big",
            &format!("{}/bulk/mcp?tools=5000&pages=10", hostile.url),
            json!({"timeouts": {"connect": "60s"}}),
        ),
    )
    .await;
    apply::<AgentSpec>(
        &tenant,
        &namespace,
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
               "metadata": {"name": "bot"},
               "spec": {"servers": [{"name": "big", "allow": ["bulk_0000?"]}]}}),
    )
    .await;
    let read_only = [
        tool("big__bulk_00000", "read", false),
        tool("big__bulk_00004", "read", false),
        tool("big__bulk_00008", "read", false),
    ];
    wait_granted(&admin, &namespace, "big", &read_only).await;

    // The tenant's edit, while the operator restarts: bulk_00001 "read", everything else as it
    // was.
    drop(op);
    let config_maps: Api<ConfigMap> = Api::namespaced(tenant.clone(), &namespace);
    let spilled = config_maps
        .get("big-mcp-catalog")
        .await
        .expect("the tenant reads the spilled catalogue");
    let gz = |catalog: &Value| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder
            .write_all(&serde_json::to_vec(catalog).unwrap())
            .unwrap();
        encoder.finish().unwrap()
    };
    let ungz = |cm: &ConfigMap| -> Value {
        let bytes = &cm.binary_data.as_ref().unwrap()["catalog.json.gz"].0;
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut json)
            .unwrap();
        serde_json::from_slice(&json).unwrap()
    };
    let access_of = |catalog: &Value, name: &str| {
        catalog["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["access"].clone())
            .unwrap()
    };
    assert_eq!(access_of(&ungz(&spilled), "bulk_00001"), "write");
    let edit = |cm: ConfigMap| {
        let config_maps = config_maps.clone();
        let mut catalog = ungz(&cm);
        for t in catalog["tools"].as_array_mut().unwrap() {
            if t["name"] == "bulk_00001" {
                t["access"] = json!("read");
            }
        }
        let patch = json!({"binaryData": {"catalog.json.gz": ByteString(gz(&catalog))}});
        async move {
            config_maps
                .patch(
                    "big-mcp-catalog",
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .unwrap_or_else(|e| panic!("{TENANT} edits its ConfigMap: {}", e2e::describe(&e)));
        }
    };
    edit(spilled).await;

    let _op = Operator::start(&e2e::kubeconfig_path().await, &namespace, "op-spill");

    // The operator notices, writes it again and says so; its grants never take the edit's word
    // (they may leave the server out until the ConfigMap is whole again).
    let events: Api<Event> = Api::namespaced(admin.clone(), &namespace);
    let grants: Api<ConfigMap> = Api::namespaced(admin.clone(), &namespace);
    // Checked at every step below: the edit's bulk_00001 never reaches the grants.
    let never_granted = || async {
        let doc = grants
            .get("bot-mcp-grants")
            .await
            .map_err(|e| e.to_string())?;
        let doc: Value =
            serde_json::from_str(&doc.data.unwrap_or_default()["grants.json"]).unwrap();
        let now = granted(&doc, "big");
        assert!(
            now.iter().all(|(name, _, _)| name != "big__bulk_00001"),
            "the edited catalogue reached the grants: {now:?}"
        );
        Ok::<(), String>(())
    };
    let event = eventually(SOON, "a CatalogConfigMapAltered event", || async {
        never_granted().await?;
        events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("CatalogConfigMapAltered")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("big")
            })
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    let note = event.note.unwrap_or_default();
    eprintln!("what the tenant reads in the event: {note}");
    assert!(
        note.contains("big-mcp-catalog") && note.contains("someone other than the operator"),
        "{note}"
    );
    let written_again = || async {
        never_granted().await?;
        let cm = config_maps
            .get("big-mcp-catalog")
            .await
            .map_err(|e| e.to_string())?;
        let access = access_of(&ungz(&cm), "bulk_00001");
        (access == "write")
            .then_some(())
            .ok_or(format!("bulk_00001: {access}"))
    };
    eventually(
        SOON,
        "the ConfigMap holds the operator's catalogue again",
        written_again,
    )
    .await;
    wait_granted(&admin, &namespace, "big", &read_only).await;

    // Again while the operator runs: its ConfigMap watch sees a spill written by another field
    // manager and reads the server at once, not at its next refresh (five minutes away).
    let cm = config_maps.get("big-mcp-catalog").await.unwrap();
    edit(cm).await;
    eventually(
        SOON,
        "the ConfigMap written again while running",
        written_again,
    )
    .await;
    wait_granted(&admin, &namespace, "big", &read_only).await;

    // Another door to the same room: the tenant deletes the ConfigMap and creates its own in
    // its place, holding the edited catalogue (a create, not a patch; no owner reference).
    let mut forged = config_maps.get("big-mcp-catalog").await.unwrap();
    config_maps
        .delete("big-mcp-catalog", &Default::default())
        .await
        .unwrap();
    let mut catalog = ungz(&forged);
    for t in catalog["tools"].as_array_mut().unwrap() {
        if t["name"] == "bulk_00001" {
            t["access"] = json!("read");
        }
    }
    forged.metadata = kube::api::ObjectMeta {
        name: Some("big-mcp-catalog".into()),
        ..Default::default()
    };
    forged.binary_data = Some(
        [("catalog.json.gz".to_string(), ByteString(gz(&catalog)))]
            .into_iter()
            .collect(),
    );
    config_maps
        .create(&Default::default(), &forged)
        .await
        .unwrap_or_else(|e| panic!("{TENANT} creates its own ConfigMap: {}", e2e::describe(&e)));
    eventually(SOON, "the forged ConfigMap written over", written_again).await;
    wait_granted(&admin, &namespace, "big", &read_only).await;
}
