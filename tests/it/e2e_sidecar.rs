//! The sidecar on grants the real controller published: an McpServer and an AgentSpec on the
//! real control plane, the grants ConfigMap laid out on disk as the kubelet lays out a ConfigMap
//! volume (a timestamped directory behind `..data`, swapped on every change), the sidecar on it,
//! and the official Python SDK client as the agent. The example AgentSpec's gates (`approval:
//! destructive`, `requireApproval: [put_object]`) are asked about through the client's
//! elicitation handler in both eras. A platform engineer's policy change narrows what the agent
//! can see and call within seconds.

use crate::e2e;
use crate::operator;
use crate::sidecar_support;
use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::{Client, ResourceExt};
use mcp_operator::api::agent_spec::AgentSpec;
use mcp_operator::api::tenant_policy::McpTenantPolicy;
use operator::{Operator, apply_server, server_manifest};
use serde_json::json;
use sidecar_support::{
    Sidecar, agent, agent_answering, agent_with, names, swap_files, upstream_calls,
};
use support::Fixtures;

const TENANT_LABEL: &str = "mcp-operator.dev/e2e-tenant";

/// A ready sidecar on the grants the controller publishes for AgentSpec `agent`, kept current
/// the way the kubelet keeps a mounted ConfigMap, and started as the webhook starts it: with
/// the keyring's public keys (read from the operator's Secret in `namespace`, where the test's
/// operator runs), the namespace and the AgentSpec's uid, so it obeys only signed grants.
pub(crate) async fn sidecar_on_published_grants(
    client: &Client,
    namespace: &str,
    agent: &str,
) -> Sidecar {
    let args = injected_args(client, namespace, agent).await;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sidecar = Sidecar::start_on(&[], &args);
    mirror_config_map(
        client.clone(),
        namespace.to_string(),
        format!("{agent}-mcp-grants"),
        sidecar.dir.path().join("grants"),
    );
    mount_referenced_secrets(client, namespace, agent, &sidecar.dir.path().join("creds")).await;
    sidecar.wait_ready().await;
    sidecar
}

/// Lays out the Secret keys the published grants reference under `creds/secrets/<name>/<key>`,
/// as the webhook's projected volume does in a pod (a stdio server's token among them).
async fn mount_referenced_secrets(
    client: &Client,
    namespace: &str,
    agent: &str,
    creds: &std::path::Path,
) {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = format!("{agent}-mcp-grants");
    let doc: mcp_operator::grants::GrantsDocument =
        operator::eventually(Duration::from_secs(60), "the published grants", || async {
            let cm = config_maps
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not published yet")?;
            let text = cm
                .data
                .unwrap_or_default()
                .remove("grants.json")
                .ok_or("no grants.json")?;
            serde_json::from_str(&text).map_err(|e| e.to_string())
        })
        .await;
    let refs = mcp_operator::inject::References::of(
        doc.servers.iter().filter_map(|s| s.endpoint.as_ref()),
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), namespace);
    for (secret, keys) in &refs.secrets {
        let Ok(Some(found)) = secrets.get_opt(secret).await else {
            continue;
        };
        let data = found.data.unwrap_or_default();
        for key in keys {
            if let Some(value) = data.get(key) {
                let dir = creds.join("secrets").join(secret);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(key), &value.0).unwrap();
            }
        }
    }
}

/// The flags the webhook gives the sidecar of a pod of AgentSpec `agent`: the operator's public
/// keys (its keyring Secret in `namespace`), the namespace, the uid, a state directory.
pub(crate) async fn injected_args(client: &Client, namespace: &str, agent: &str) -> Vec<String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), namespace);
    let keyring = operator::eventually(
        Duration::from_secs(30),
        "the operator's grants signing keys",
        || async {
            let secret = secrets
                .get_opt("mcp-operator-grants-signing")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not created yet")?;
            let data = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            mcp_operator::grants::signature::Keyring::from_secret_data(&data)
                .map_err(|e| e.to_string())
        },
    )
    .await;
    let uid = operator::eventually(Duration::from_secs(30), "the AgentSpec's uid", || async {
        Api::<AgentSpec>::namespaced(client.clone(), namespace)
            .get_opt(agent)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|a| a.uid())
            .ok_or_else(|| format!("no AgentSpec {agent}"))
    })
    .await;
    vec![
        format!("--grants-verify-keys={}", keyring.verifying_keys().to_arg()),
        format!("--agent-namespace={namespace}"),
        format!("--agent-uid={uid}"),
        "--state-dir=STATE".into(),
        format!("--agent={agent}"),
    ]
}

/// Copies the ConfigMap's `grants.json` and `grants.sig` into `root` whenever the ConfigMap
/// changes, the way the kubelet updates a ConfigMap volume (a deleted ConfigMap leaves the
/// last files, as the kubelet does).
pub(crate) fn mirror_config_map(
    client: Client,
    namespace: String,
    name: String,
    root: std::path::PathBuf,
) {
    tokio::spawn(async move {
        let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
        let mut seen = String::new();
        let mut generation = 1000;
        loop {
            if let Ok(Some(cm)) = api.get_opt(&name).await
                && cm.resource_version().unwrap_or_default() != seen
            {
                seen = cm.resource_version().unwrap_or_default();
                let files: Vec<(&str, Vec<u8>)> = ["grants.json", "grants.sig"]
                    .into_iter()
                    .filter_map(|key| {
                        let text = cm.data.as_ref()?.get(key)?;
                        Some((key, text.as_bytes().to_vec()))
                    })
                    .collect();
                swap_files(&root, &mut generation, &files);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

#[tokio::test]
async fn the_sidecar_serves_the_published_grants_and_a_policy_change_narrows_them_within_seconds() {
    let (client, ns) = e2e::setup("sidecar").await;
    Api::<Namespace>::all(client.clone())
        .patch(
            ns.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {TENANT_LABEL: ns.name()}}})),
        )
        .await
        .unwrap();
    let fixture = Fixtures::load().sdk_server(&[]);
    let _op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-sidecar");
    apply_server(
        &client,
        ns.name(),
        server_manifest("files", &fixture.url, json!({})),
    )
    .await;
    crate::e2e::apply_agent(
        &client,
        ns.name(),
        "bot",
        // As examples/agentspec.yaml gates files-admin.
        json!({"servers": [{"name": "files", "requireApproval": ["put_object"]}], "approval": "destructive"}),
    )
    .await;

    let sidecar = sidecar_on_published_grants(&client, ns.name(), "bot").await;
    // The controller's digests match what the sidecar reads live: every granted tool is offered.
    let out = agent(
        &sidecar.url,
        "auto",
        json!([
            {"op": "list"},
            {"op": "call", "name": "files__write_file", "arguments": {"path": "/a"}},
            {"op": "call", "name": "files__delete_file", "arguments": {"path": "/a"}},
        ]),
    )
    .await;
    let steps = &out["steps"];
    assert_eq!(
        names(&steps[0]),
        [
            "files__delete_file",
            "files__put_object",
            "files__read_file",
            "files__write_file"
        ],
        "{out}"
    );
    assert_eq!(steps[1]["isError"], false, "{out}");
    // approval: destructive gates delete_file (unannotated); a client without elicitation
    // cannot approve it.
    assert_eq!(steps[2]["error"]["code"], -32021, "{out}");
    assert!(
        steps[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("approval"),
        "{out}"
    );
    // With a person behind the client: put_object (requireApproval) approved, delete_file
    // declined (modern), then delete_file approved (legacy).
    let out = agent_answering(
        &sidecar.url,
        "auto",
        json!([
            {"op": "call", "name": "files__put_object", "arguments": {"path": "/p"}},
            {"op": "call", "name": "files__delete_file", "arguments": {"path": "/d"}},
        ]),
        json!(["accept", "decline"]),
    )
    .await;
    assert_eq!(out["steps"][0]["isError"], false, "{out}");
    assert!(
        out["steps"][1]["text"]
            .as_str()
            .unwrap()
            .contains("declined"),
        "{out}"
    );
    let out = agent_answering(
        &sidecar.url,
        "legacy",
        json!([{"op": "call", "name": "files__delete_file", "arguments": {"path": "/l"}}]),
        json!(["accept"]),
    )
    .await;
    assert_eq!(out["steps"][0]["isError"], false, "{out}");
    assert!(
        out["elicitations"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Access: destructive"),
        "{out}"
    );

    // The platform team caps this tenant at read while the agent is connected.
    let policy_name = ns.scoped_name("read-only");
    let policy: McpTenantPolicy = serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpTenantPolicy",
        "metadata": {"name": policy_name},
        "spec": {"namespaceSelector": {"matchLabels": {TENANT_LABEL: ns.name()}},
                 "rules": [{"servers": {"names": ["files"]}, "maxAccess": "read"}]},
    }))
    .unwrap();
    ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);
    let applied = std::sync::Arc::new(std::sync::Mutex::new(None::<Instant>));
    let applied_at = applied.clone();
    let policy_client = client.clone();
    let out = agent_with(
        &sidecar.url,
        "legacy",
        json!([
            {"op": "wait_list_changed", "timeout": 30, "trigger": true},
            {"op": "call", "name": "files__write_file", "arguments": {"path": "/b"}},
        ]),
        || async move {
            *applied_at.lock().unwrap() = Some(Instant::now());
            Api::<McpTenantPolicy>::all(policy_client)
                .patch(
                    &policy_name,
                    &PatchParams::apply(crate::e2e::FIELD_MANAGER).force(),
                    &Patch::Apply(&policy),
                )
                .await
                .unwrap();
        },
    )
    .await;
    let narrowed_in = applied.lock().unwrap().unwrap().elapsed();
    eprintln!(
        "policy applied → the agent was told and listed the narrower set within {narrowed_in:?}"
    );
    let steps = &out["steps"];
    assert_eq!(steps[0]["changed"], true, "no list_changed: {out}");
    assert_eq!(names(&steps[0]), ["files__read_file"], "{out}");
    assert!(
        steps[1]["text"].as_str().unwrap().contains("not granted"),
        "{out}"
    );
    assert!(narrowed_in < Duration::from_secs(15), "{narrowed_in:?}");
    let calls = upstream_calls(&fixture.url).await;
    assert_eq!(
        calls,
        ["write_file", "put_object", "delete_file"],
        "only the calls made while granted, and approved where gated, reached the server"
    );
}
