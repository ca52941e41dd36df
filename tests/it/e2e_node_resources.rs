//! Resources and prompts in a real pod: an agent (the official TypeScript SDK client, the node
//! image's `ts_client.mjs`, a legacy session) started by the kubelet beside its injected sidecar
//! reads exactly the resources and prompts its AgentSpec grants of two real servers on the
//! node's address — the official Python SDK's server (tests/fixtures/sdk_server.py, which
//! records every `resources/read` and `prompts/get` it receives) and the official
//! `@modelcontextprotocol/server-everything` (Node) — and never another.
//!
//! ```text
//! agent pod ─ ts_client.mjs ─► 127.0.0.1:9500 mcp-sidecar ─┬─► files      (sdk_server.py,     node IP)  prefix fs
//!                                                          └─► everything (server-everything, node IP)  prefix ev
//! ```
//!
//! Judged as a user would: what the agent lists equals what the grants allow out of what each
//! server lists when asked directly (by the same client, from the host), the granted reads and
//! gets bring their content, the others are refused with the JSON-RPC code and reason, the SDK
//! server's own record shows it never heard a refused one, and the sidecar's audit lines in
//! `kubectl logs -c mcp-sidecar` show every refused one decided `not_granted` with no attempt
//! upstream (server-everything keeps no record of its own).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use mcp_operator::api::agent_spec::{AgentSpec, grants_config_map_name};
use serde_json::{Value, json};

use crate::e2e;
use crate::e2e_node::{
    ONE_RELEASE, TS_CLIENT, agent_pod, container_log, node_image, on_node, pod_finished,
};
use crate::sidecar_support::{self, http, json_of};
use crate::support::Fixtures;

const SOON: Duration = Duration::from_secs(60);

fn strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = serde_json::from_value(v.clone()).unwrap_or_default();
    out.sort();
    out
}

/// Every `resources/read`, `prompts/get` and `completion/complete` the SDK fixture server at
/// `url` received.
async fn upstream_reads(url: &str) -> Vec<String> {
    let mut u = url::Url::parse(url).unwrap();
    u.set_path("/control/reads");
    let v = json_of(http().get(u).send().await.unwrap()).await;
    serde_json::from_value(v["reads"].clone()).unwrap()
}

/// An agent pod reads exactly its granted resources and prompts of the official Python SDK's
/// server and server-everything through its injected sidecar, and never another.
#[tokio::test]
async fn an_agent_pod_reads_exactly_its_granted_resources_and_prompts_of_real_servers() {
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("node-resources").await;
    let (client, ns, cluster_dir, node) = on.parts();
    let started = Instant::now();
    let (_uninstall, _fullname) = on.install_chart();
    let node_image = {
        let (repository, tag) = node_image(cluster_dir, on.scratch.path());
        format!("{repository}:{tag}")
    };

    // --- two real servers on the node's address (in a pod, 127.0.0.1 is the pod itself).
    let fixtures = Fixtures::load();
    let files = fixtures.sdk_server(&["--host", &node.ip]);
    // server-everything listens on every address; the pods reach it at the node's.
    let everything = fixtures.everything_server();
    let everything_url = everything.url.replacen("127.0.0.1", &node.ip, 1);

    // What each server offers, asked directly by the same client the pod runs.
    let offers_of = |url: String| async move {
        sidecar_support::agent(
            &url,
            "typescript",
            json!([{"op": "resources"}, {"op": "templates"}, {"op": "prompts"}]),
        )
        .await
    };
    let files_offers = offers_of(files.url.clone()).await;
    let offers_offers = offers_of(everything_url.clone()).await;

    for object in [
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
               "metadata": {"name": "files"}, "spec": {"url": files.url}}),
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
               "metadata": {"name": "everything"}, "spec": {"url": everything_url}}),
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
        "metadata": {"name": "reader"},
        "spec": {"approval": "none", "servers": [
            {"name": "files", "prefix": "fs", "allow": ["read_file"],
             "resources": {"allow": ["file:///docs/{name}"]},
             "prompts": {"allow": ["review"]}},
            {"name": "everything", "prefix": "ev", "allow": ["echo"],
             "resources": {"allow": ["demo://resource/static/document/*",
                                     "demo://resource/dynamic/text/{resourceId}"],
                           "deny": ["*instructions*"]},
             "prompts": {"allow": ["simple-prompt", "args-*"]}},
        ]}}),
    ] {
        e2e::apply(client, &object, ns.name()).await;
    }
    let specs: Api<AgentSpec> = Api::namespaced(client.clone(), ns.name());
    e2e::wait_condition(&specs, "reader", "Ready", "True", None, SOON).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let grants: Value = serde_json::from_str(
        &config_maps
            .get(&grants_config_map_name("reader"))
            .await
            .expect("the grants ConfigMap")
            .data
            .unwrap()["grants.json"],
    )
    .expect("grants.json");
    assert_eq!(
        grants["schemaVersion"], "mcp-operator.dev/grants/v2",
        "resources and prompts are granted: {grants}"
    );

    // What the grants allow out of what the servers offer, under each server's prefix.
    let prefixed = |prefix: &str, names: Vec<String>| -> Vec<String> {
        names.into_iter().map(|n| format!("{prefix}{n}")).collect()
    };
    let files_resources = strings(&files_offers["steps"][0]["resources"]);
    let everything_resources = strings(&offers_offers["steps"][0]["resources"]);
    let mut expected_resources = prefixed(
        "fs+",
        files_resources
            .iter()
            .filter(|u| u.starts_with("file:///docs/"))
            .cloned()
            .collect(),
    );
    expected_resources.extend(prefixed(
        "ev+",
        everything_resources
            .iter()
            .filter(|u| {
                u.starts_with("demo://resource/static/document/") && !u.contains("instructions")
            })
            .cloned()
            .collect(),
    ));
    expected_resources.sort();
    // Each server offers more than is granted: the narrowing is the sidecar's, not the servers'.
    assert!(
        files_resources.contains(&"file:///private/keys.txt".to_string())
            && everything_resources
                .contains(&"demo://resource/static/document/instructions.md".to_string())
            && expected_resources.len() >= 3
            && expected_resources.len() < files_resources.len() + everything_resources.len(),
        "what the servers offer: {files_offers}\n{offers_offers}"
    );
    let all_templates = [
        strings(&files_offers["steps"][1]["templates"]),
        strings(&offers_offers["steps"][1]["templates"]),
    ]
    .concat();
    assert!(
        all_templates.contains(&"file:///private/{name}".to_string())
            && all_templates.contains(&"demo://resource/dynamic/blob/{resourceId}".to_string()),
        "{all_templates:?}"
    );
    let all_prompts = [
        strings(&files_offers["steps"][2]["prompts"]),
        strings(&offers_offers["steps"][2]["prompts"]),
    ]
    .concat();
    for ungranted in ["exfiltrate", "completable-prompt", "resource-prompt"] {
        assert!(
            all_prompts.contains(&ungranted.to_string()),
            "{all_prompts:?}"
        );
    }

    // --- the agent in a pod: lists, reads and gets what is granted, tries what is not.
    let steps = json!([
        {"op": "resources"},
        {"op": "templates"},
        {"op": "prompts"},
        {"op": "read", "uri": "fs+file:///docs/readme.md"},
        {"op": "read", "uri": "fs+file:///private/keys.txt"},
        {"op": "read", "uri": "file:///private/keys.txt"},
        {"op": "read", "uri": "ev+demo://resource/static/document/architecture.md"},
        {"op": "read", "uri": "ev+demo://resource/static/document/instructions.md"},
        {"op": "read", "uri": "ev+demo://resource/dynamic/text/1"},
        {"op": "read", "uri": "ev+demo://resource/dynamic/blob/1"},
        {"op": "get_prompt", "name": "fs__review", "arguments": {"path": "a.md"}},
        {"op": "get_prompt", "name": "fs__exfiltrate"},
        {"op": "get_prompt", "name": "ev__args-prompt", "arguments": {"city": "Paris", "state": "Texas"}},
        {"op": "get_prompt", "name": "ev__completable-prompt",
         "arguments": {"department": "Engineering", "name": "Alice"}},
    ]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let container = json!({
        "name": "agent", "image": node_image, "imagePullPolicy": "Never",
        "args": [TS_CLIENT, "$(MCP_SERVER_URL)", steps.to_string()],
    });
    let admitted = Instant::now();
    pods.create(
        &PostParams::default(),
        &agent_pod("reader", Some("reader"), container, "Never"),
    )
    .await
    .unwrap_or_else(|e| panic!("creating the agent pod: {}", e2e::describe(&e)));
    let phase = pod_finished(&pods, "reader", Duration::from_secs(120)).await;
    let log = container_log(cluster_dir, ns.name(), "reader", "agent");
    let sidecar_log = container_log(
        cluster_dir,
        ns.name(),
        "reader",
        mcp_operator::inject::SIDECAR_CONTAINER,
    );
    assert_eq!(
        phase, "Succeeded",
        "the agent failed:\n{log}\n--- the sidecar's log:\n{sidecar_log}"
    );
    eprintln!(
        "e2e_node_resources: the agent pod finished {:.1}s after admission ({:.1}s since the install began)",
        admitted.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let out: Value = log
        .lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(|v| v["steps"].is_array())
        })
        .unwrap_or_else(|| panic!("no result line in the agent's log:\n{log}"));
    let steps = &out["steps"];

    // Listed: exactly the granted ones, under `<prefix>+<uri>` and `<prefix>__<prompt>`.
    assert_eq!(
        strings(&steps[0]["resources"]),
        expected_resources,
        "the agent lists exactly its granted resources: {out}"
    );
    assert_eq!(
        strings(&steps[1]["templates"]),
        [
            "ev+demo://resource/dynamic/text/{resourceId}",
            "fs+file:///docs/{name}"
        ],
        "the agent lists exactly its granted templates: {out}"
    );
    assert_eq!(
        strings(&steps[2]["prompts"]),
        ["ev__args-prompt", "ev__simple-prompt", "fs__review"],
        "the agent lists exactly its granted prompts: {out}"
    );

    // Granted reads and gets: the content arrives, its URIs under the names the agent can ask.
    assert_eq!(
        steps[3]["contents"],
        json!([{"uri": "fs+file:///docs/readme.md", "mimeType": null, "text": "# Read me", "blob": null}]),
        "{out}"
    );
    let architecture = &steps[6]["contents"][0];
    assert_eq!(
        architecture["uri"], "ev+demo://resource/static/document/architecture.md",
        "{out}"
    );
    assert!(
        architecture["text"]
            .as_str()
            .is_some_and(|t| t.contains("Architecture")),
        "server-everything's document arrives: {out}"
    );
    assert_eq!(
        steps[8]["contents"][0]["uri"], "ev+demo://resource/dynamic/text/1",
        "a URI of a granted template: {out}"
    );
    let review = &steps[10]["messages"];
    assert_eq!(review[0]["content"]["text"], "review a.md", "{out}");
    assert_eq!(
        review[1]["content"]["resource"]["uri"], "fs+file:///docs/guide.md",
        "an embedded resource comes back under a name the agent can read: {out}"
    );
    assert_eq!(
        steps[12]["messages"][0]["content"]["text"], "What's weather in Paris, Texas?",
        "{out}"
    );

    // Refused: the JSON-RPC code and the reason.
    for i in [4, 5, 7, 9] {
        let error = &steps[i]["error"];
        assert_eq!(error["code"], -32002, "step {i}: {out}");
        assert!(
            error["message"]
                .as_str()
                .unwrap_or_default()
                .contains("is not granted to this agent"),
            "step {i}: {out}"
        );
    }
    for (i, name) in [(11, "fs__exfiltrate"), (13, "ev__completable-prompt")] {
        let error = &steps[i]["error"];
        assert_eq!(error["code"], -32602, "step {i}: {out}");
        assert!(
            error["message"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!(
                    "the prompt \"{name}\" is not granted to this agent"
                )),
            "step {i}: {out}"
        );
    }

    // The SDK server heard only the granted read and get.
    assert_eq!(
        upstream_reads(&files.url).await,
        [
            "resources/read file:///docs/readme.md",
            "prompts/get review"
        ],
        "what the SDK server was asked"
    );

    // The sidecar's audit: one line per read and get, each refused one `not_granted` and never
    // attempted upstream, each granted one sent as the server names it.
    let audit: Vec<Value> = sidecar_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "mcp_sidecar::audit")
        .map(|l| l["fields"].clone())
        .filter(|f| f["method"] == "resources/read" || f["method"] == "prompts/get")
        .collect();
    let decided: Vec<(&str, &str, &str, &str)> = audit
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default();
            (s("name"), s("raw"), s("decision"), s("outcome"))
        })
        .collect();
    let refused = |name| (name, "", "not_granted", "refused");
    assert_eq!(
        decided,
        [
            (
                "fs+file:///docs/readme.md",
                "file:///docs/readme.md",
                "allowed",
                "ok"
            ),
            refused("fs+file:///private/keys.txt"),
            refused("file:///private/keys.txt"),
            (
                "ev+demo://resource/static/document/architecture.md",
                "demo://resource/static/document/architecture.md",
                "allowed",
                "ok"
            ),
            refused("ev+demo://resource/static/document/instructions.md"),
            (
                "ev+demo://resource/dynamic/text/1",
                "demo://resource/dynamic/text/1",
                "allowed",
                "ok"
            ),
            refused("ev+demo://resource/dynamic/blob/1"),
            ("fs__review", "review", "allowed", "ok"),
            refused("fs__exfiltrate"),
            ("ev__args-prompt", "args-prompt", "allowed", "ok"),
            refused("ev__completable-prompt"),
        ],
        "the sidecar's audit lines for reads and gets:\n{sidecar_log}"
    );
    for f in &audit {
        assert_eq!(f["agent"], "reader", "{f}");
        let attempts = f["attempts"].as_u64();
        if f["decision"] == "allowed" {
            assert!(attempts.is_some_and(|a| a >= 1), "{f}");
        } else {
            assert_eq!(
                attempts,
                Some(0),
                "a refused one is never sent upstream: {f}"
            );
        }
    }
}
