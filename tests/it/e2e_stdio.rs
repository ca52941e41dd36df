//! stdio McpServers on the real control plane, without a node: the controller applies the
//! Deployment and Service (owned by the McpServer, under its field manager), says the workload
//! does not serve before anything about reachability, rolls the Deployment when spec.stdio
//! changes, leaves someone else's Deployment alone, and garbage collection removes the workload
//! with the McpServer. Then on the real node (e2e/node.sh, with kube-proxy so the ClusterIP
//! answers from the host): `@modelcontextprotocol/server-memory` in the Node image of
//! `e2e/image.sh node`, behind the bridge copied in from the operator image, goes Ready with its
//! real catalogue, and an agent calls its tools through a sidecar on the published grants. That
//! pod meets the `restricted` Pod Security level (its namespace enforces it), and answers only
//! the token the operator issued: a pod of another namespace, or the host without the token,
//! calling the ClusterIP is refused.
//!
//! ```text
//!  controller (host) ──► status.url http://<clusterIP>:8000/mcp ──kube-proxy──► pod: bridge ─stdio─► node server-memory
//!  agent (SDK client) ─► sidecar (host, grants ConfigMap mirrored) ──────────────┘
//! ```

use crate::e2e;
use crate::e2e_node::{container_log, node, node_image, operator_image, pod_finished};
use crate::e2e_sidecar::sidecar_on_published_grants;
use crate::operator::{self, Operator, condition, eventually, wait_condition};
use crate::sidecar_support::{agent, names};

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use mcp_operator::api::mcp_server::McpServer;
use serde_json::json;

const SOON: Duration = Duration::from_secs(30);
const BRIDGE_IMAGE: &str = "mcp-operator.local/mcp-operator:e2e-stdio";

/// The controller for one namespace, told which image holds the bridge.
fn operator(kubeconfig: &std::path::Path, namespace: &str, identity: &str) -> Operator {
    operator_with(kubeconfig, namespace, identity, BRIDGE_IMAGE)
}

fn operator_with(
    kubeconfig: &std::path::Path,
    namespace: &str,
    identity: &str,
    bridge_image: &str,
) -> Operator {
    let metrics_port = crate::support::free_port();
    let args = [
        "controller",
        "--watch-namespace",
        namespace,
        "--identity",
        identity,
        "--max-failure-backoff",
        "4s",
        "--bridge-image",
        bridge_image,
        "--metrics-addr",
        &format!("127.0.0.1:{metrics_port}"),
    ]
    .map(String::from);
    Operator::spawn(kubeconfig, identity, &args, &[], metrics_port)
}

fn memory(name: &str, stdio_extra: serde_json::Value) -> serde_json::Value {
    let mut stdio = json!({
        "image": "mcp-e2e.local/not-pulled:1",
        "imagePullPolicy": "Never",
        "command": ["npx", "-y", "@modelcontextprotocol/server-memory"],
    });
    for (k, v) in stdio_extra.as_object().cloned().unwrap_or_default() {
        stdio[k] = v;
    }
    e2e::stdio_server_manifest(name, stdio)
}

#[tokio::test]
async fn a_stdio_server_gets_an_owned_workload_and_says_it_does_not_serve_yet() {
    let (client, ns) = e2e::setup("stdio").await;
    let _op = operator(&e2e::kubeconfig_path().await, ns.name(), "op-stdio");
    let servers: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    let services: Api<Service> = Api::namespaced(client.clone(), ns.name());
    operator::apply_server(
        &client,
        ns.name(),
        memory(
            "memory",
            json!({"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "memory-credentials", "key": "token"}}}]}),
        ),
    )
    .await;

    // Not ready, and saying why: the workload, not the server's reachability.
    let s = wait_condition(
        &servers,
        "memory",
        "Ready",
        "False",
        Some("WorkloadNotReady"),
        SOON,
    )
    .await;
    let ready = condition(&s, "Ready").unwrap();
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("Deployment memory-mcp has 0 of 1 pods available."),
        "{message}"
    );
    let reachable = condition(&s, "Reachable").unwrap();
    assert_eq!(reachable["status"], "Unknown", "{reachable}");
    assert_eq!(reachable["reason"], "WorkloadNotReady", "{reachable}");
    let uid = s.uid().unwrap();

    // The Deployment and the Service: owned by the McpServer, applied by the operator.
    let d = deployments.get("memory-mcp").await.unwrap();
    let owner = &d.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("McpServer", "memory", uid.as_str())
    );
    assert_eq!(owner.controller, Some(true));
    assert!(
        d.managed_fields()
            .iter()
            .any(|f| f.manager.as_deref() == Some("mcp-operator")
                && f.operation.as_deref() == Some("Apply")),
        "{:?}",
        d.managed_fields()
    );
    assert_eq!(d.labels()["mcp-operator.dev/mcpserver"], "memory");
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(
        pod.init_containers.as_ref().unwrap()[0].image.as_deref(),
        Some(BRIDGE_IMAGE)
    );
    let server = &pod.containers[0];
    assert_eq!(server.image.as_deref(), Some("mcp-e2e.local/not-pulled:1"));
    let args = server.args.as_ref().unwrap();
    assert_eq!(
        &args[..5],
        [
            "bridge",
            "--listen",
            "0.0.0.0:8000",
            "--bearer-token-file=/var/run/mcp-operator/token/token",
            "--"
        ]
        .map(String::from)
    );
    let svc = services.get("memory-mcp").await.unwrap();
    assert_eq!(svc.owner_references()[0].uid, uid);
    let ip = svc.spec.as_ref().unwrap().cluster_ip.clone().unwrap();
    assert_eq!(
        s.status.as_ref().unwrap().url.as_deref(),
        Some(format!("http://{ip}:8000/mcp").as_str())
    );

    // Changing spec.stdio rolls the Deployment.
    operator::apply_server(
        &client,
        ns.name(),
        memory("memory", json!({"perSession": true})),
    )
    .await;
    let rolled = eventually(SOON, "the Deployment to take --per-session", || async {
        let d = deployments
            .get("memory-mcp")
            .await
            .map_err(|e| e.to_string())?;
        let args = d
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .args
            .clone()
            .unwrap_or_default();
        if args.iter().any(|a| a == "--per-session") {
            Ok(d)
        } else {
            Err(format!("{args:?}"))
        }
    })
    .await;
    assert!(rolled.metadata.generation > d.metadata.generation);
    let env = rolled.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert_eq!(
        env.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["HOME"],
        "the env entry removed from spec.stdio is gone from the pods (HOME is the operator's)"
    );

    // Deleting the McpServer removes its workload (garbage collection of owned objects).
    servers
        .delete("memory", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually(SOON, "the workload to be collected", || async {
        let d = deployments
            .get_opt("memory-mcp")
            .await
            .map_err(|e| e.to_string())?;
        let s = services
            .get_opt("memory-mcp")
            .await
            .map_err(|e| e.to_string())?;
        match (d, s) {
            (None, None) => Ok(()),
            (d, s) => Err(format!(
                "deployment {}, service {}",
                d.is_some(),
                s.is_some()
            )),
        }
    })
    .await;
}

#[tokio::test]
async fn someone_elses_deployment_of_the_same_name_is_left_alone() {
    let (client, ns) = e2e::setup("stdio-conflict").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    let theirs: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "files-mcp", "labels": {"team": "theirs"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "theirs"}},
            "template": {
                "metadata": {"labels": {"app": "theirs"}},
                "spec": {"containers": [{"name": "x", "image": "theirs:1"}]},
            },
        },
    }))
    .unwrap();
    deployments
        .patch(
            "files-mcp",
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
    let _op = operator(
        &e2e::kubeconfig_path().await,
        ns.name(),
        "op-stdio-conflict",
    );
    operator::apply_server(&client, ns.name(), memory("files", json!({}))).await;
    let servers: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let s = wait_condition(
        &servers,
        "files",
        "Ready",
        "False",
        Some("WorkloadConflict"),
        SOON,
    )
    .await;
    let message = condition(&s, "Ready").unwrap()["message"].to_string();
    assert!(
        message.contains("A Deployment named files-mcp already exists"),
        "{message}"
    );
    let still = deployments.get("files-mcp").await.unwrap();
    assert_eq!(still.labels()["team"], "theirs");
    assert!(still.owner_references().is_empty());
    assert_eq!(
        still.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("theirs:1")
    );
}

#[tokio::test]
async fn server_memory_in_a_pod_is_ready_with_its_catalogue_and_an_agent_calls_its_tools() {
    let (client, ns) = e2e::setup("stdio-node").await;
    let kubeconfig = e2e::kubeconfig_path().await;
    let cluster_dir = kubeconfig.parent().expect("the cluster dir").to_path_buf();
    let node = node(&cluster_dir);
    if let Err(reason) = &node.kube_proxy {
        panic!(
            "the node's ClusterIPs do not answer from the host, so the controller cannot reach a stdio server: {reason}"
        );
    }
    let scratch = tempfile::tempdir().expect("a temp dir");
    let (operator_repository, operator_tag) = operator_image(&cluster_dir, scratch.path());
    let (node_repository, node_tag) = node_image(&cluster_dir, scratch.path());
    let _op = operator_with(
        &kubeconfig,
        ns.name(),
        "op-stdio-node",
        &format!("{operator_repository}:{operator_tag}"),
    );
    // The namespace enforces the restricted Pod Security level: the server's pods must meet it.
    Api::<Namespace>::all(client.clone())
        .patch(
            ns.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    operator::apply_server(
        &client,
        ns.name(),
        e2e::stdio_server_manifest(
            "memory",
            json!({
                "image": format!("{node_repository}:{node_tag}"),
                "imagePullPolicy": "Never",
                "command": ["node", "/opt/mcp/servers/node_modules/@modelcontextprotocol/server-memory/dist/index.js"],
                "resources": {"limits": {"memory": "256Mi"}},
            }),
        ),
    )
    .await;
    let servers: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let s = wait_condition(
        &servers,
        "memory",
        "Ready",
        "True",
        Some("Ready"),
        Duration::from_secs(120),
    )
    .await;
    eprintln!(
        "e2e_stdio: applied → Ready (pod started, bridge up, catalogue read) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let status = s.status.as_ref().unwrap();
    assert!(
        status
            .url
            .as_deref()
            .is_some_and(|u| u.ends_with(":8000/mcp")),
        "{:?}",
        status.url
    );
    let catalog = &status.catalog.as_ref().unwrap().catalog;
    let access: std::collections::BTreeMap<&str, String> = catalog
        .tools
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                serde_json::to_value(t.access)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    // server-memory's own annotations, classified.
    let expect: std::collections::BTreeMap<&str, String> = [
        ("add_observations", "write"),
        ("create_entities", "write"),
        ("create_relations", "write"),
        ("delete_entities", "destructive"),
        ("delete_observations", "destructive"),
        ("delete_relations", "destructive"),
        ("open_nodes", "read"),
        ("read_graph", "read"),
        ("search_nodes", "read"),
    ]
    .into_iter()
    .map(|(n, a)| (n, a.to_string()))
    .collect();
    assert_eq!(access, expect, "{catalog:?}");
    let read_graph = catalog
        .tools
        .iter()
        .find(|t| t.name == "read_graph")
        .unwrap();
    assert_eq!(
        read_graph
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint),
        Some(true)
    );
    assert!(
        status
            .server_info
            .as_ref()
            .is_some_and(|i| i.name.contains("memory")),
        "{:?}",
        status.server_info
    );

    // Only the token's holders: the operator's Secret and NetworkPolicy are there, and the
    // ClusterIP refuses whoever comes without the token.
    let url = status.url.clone().unwrap();
    let token = Api::<Secret>::namespaced(client.clone(), ns.name())
        .get("memory-mcp-token")
        .await
        .expect("the operator issued the server's token");
    assert!(token.data.unwrap_or_default().contains_key("token"));
    assert!(
        Api::<NetworkPolicy>::namespaced(client.clone(), ns.name())
            .get_opt("memory-mcp")
            .await
            .unwrap()
            .is_some()
    );
    crate::support::probe(&[&url]).assert_fails_with("Unauthorized");
    let other = e2e::TestNamespace::create(&client, "stdio-other-tenant").await;
    let caller = format!(
        "fetch({url:?}, {{method: 'POST', headers: {{'content-type': 'application/json', \
         accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25'}}, \
         body: JSON.stringify({{jsonrpc: '2.0', id: 1, method: 'tools/call', params: \
         {{name: 'read_graph', arguments: {{}}}}}})}}).then(async r => console.log('STATUS ' + \
         r.status + ' ' + await r.text())).catch(e => console.log('ERROR ' + e))"
    );
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "other-tenant"},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [{
            "name": "caller", "image": format!("{node_repository}:{node_tag}"),
            "imagePullPolicy": "Never", "args": ["-e", caller],
        }]},
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), other.name());
    pods.create(&Default::default(), &pod).await.unwrap();
    pod_finished(&pods, "other-tenant", Duration::from_secs(60)).await;
    let said = container_log(&cluster_dir, other.name(), "other-tenant", "caller");
    assert!(
        said.contains("STATUS 401") && said.contains("bearer token"),
        "a pod of another namespace reached the server: {said}"
    );

    // An agent with a sidecar on the grants the controller publishes calls the server's tools.
    e2e::apply_agent(
        &client,
        ns.name(),
        "bot",
        json!({"servers": [{"name": "memory"}]}),
    )
    .await;
    let sidecar = sidecar_on_published_grants(&client, ns.name(), "bot").await;
    let out = agent(
        &sidecar.url,
        "auto",
        json!([
            {"op": "list"},
            {"op": "call", "name": "memory__create_entities", "arguments": {"entities": [
                {"name": "e2e-stdio", "entityType": "test", "observations": ["runs in a pod"]},
            ]}},
            {"op": "call", "name": "memory__search_nodes", "arguments": {"query": "e2e-stdio"}},
        ]),
    )
    .await;
    let steps = &out["steps"];
    let listed = names(&steps[0]);
    assert!(
        listed.contains(&"memory__create_entities".to_string())
            && listed.contains(&"memory__read_graph".to_string()),
        "{out}"
    );
    assert_eq!(steps[1]["isError"], false, "{out}");
    assert_eq!(steps[2]["isError"], false, "{out}");
    assert!(
        steps[2]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("runs in a pod"),
        "{out}"
    );
}
