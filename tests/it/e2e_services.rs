//! ClusterIP Services on the e2e node, as stdio McpServers and `helm test` need them: kube-proxy
//! (e2e/node.sh, built from the control plane's own Kubernetes module) sends a connection to a
//! Service's ClusterIP to a pod behind it, from a process on the host (the controller in most
//! e2e tests) and from another pod on the node's bridge (the chart's controller, a test hook).
//!
//! ```text
//!  this test process ──► 10.0.0.x:80 ──route to mcpnodeN, kube-proxy DNAT──► pod 10.244.N.y:8000
//!  client pod ──► 10.0.0.x:80 ──forwarded back onto mcpnodeN (masqueraded)──► pod 10.244.N.y:8000
//! ```
//!
//! Nothing leaves the bridge: a Service whose endpoint is elsewhere is dropped, not forwarded.
//! The backend is the operator's own image running `mcp-operator bridge`, whose /healthz answers
//! `ok`. Without a node, or with a node that has no kube-proxy, these tests fail with the reason.

use crate::e2e;
use crate::e2e_node::{kubectl, node, operator_image, run};
use crate::operator::eventually;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SOON: Duration = Duration::from_secs(60);
/// The port the backend listens on in its pod, and the Service's port in front of it.
const TARGET_PORT: u16 = 8000;
const SERVICE_PORT: u16 = 80;

/// A one-replica Deployment `name` serving /healthz on TARGET_PORT, Ready once it answers.
fn backend(name: &str, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{
                        "name": "bridge",
                        "image": image,
                        "imagePullPolicy": "Never",
                        // The bridge answers /healthz whatever its server does; the server
                        // here (printing the CRDs and exiting) is never started.
                        "args": ["bridge", "--listen", format!("0.0.0.0:{TARGET_PORT}"),
                                 "--", "/mcp-operator", "crds"],
                        "ports": [{"containerPort": TARGET_PORT}],
                        "readinessProbe": {
                            "httpGet": {"path": "/healthz", "port": TARGET_PORT},
                            "periodSeconds": 1,
                        },
                    }],
                },
            },
        },
    }))
    .expect("a Deployment")
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": name},
            "ports": [{"port": SERVICE_PORT, "targetPort": TARGET_PORT}],
        },
    }))
    .expect("a Service")
}

/// `GET path` over plain HTTP/1.0 to ip:port: the body, or why not.
async fn http_get(ip: &str, port: u16, path: &str) -> Result<String, String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((ip, port))
            .await
            .map_err(|e| format!("connecting to {ip}:{port}: {e}"))?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut reply = String::new();
        stream
            .read_to_string(&mut reply)
            .await
            .map_err(|e| e.to_string())?;
        let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
        if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
            Ok(body.to_owned())
        } else {
            Err(format!("{ip}:{port}{path} answered {head:?}"))
        }
    };
    tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer from {ip}:{port} within 3s")))
}

/// The backend Deployment Ready, then its Service; returns the Service's ClusterIP and when the
/// Service was created.
async fn serve(client: &Client, namespace: &str, name: &str, image: &str) -> (String, Instant) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    deployments
        .create(&PostParams::default(), &backend(name, image))
        .await
        .unwrap_or_else(|e| panic!("creating Deployment {name}: {}", e2e::describe(&e)));
    eventually(SOON, "the backend Deployment Ready", || async {
        let d = deployments.get(name).await.map_err(|e| e.to_string())?;
        match d.status.and_then(|s| s.ready_replicas) {
            Some(1) => Ok(()),
            other => Err(format!("{other:?} Ready replicas")),
        }
    })
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let created = Instant::now();
    let svc = services
        .create(&PostParams::default(), &service(name))
        .await
        .unwrap_or_else(|e| panic!("creating Service {name}: {}", e2e::describe(&e)));
    let ip = svc
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .expect("the Service has a ClusterIP");
    (ip, created)
}

#[tokio::test]
async fn a_host_process_reaches_a_cluster_ip_service_backed_by_a_pod() {
    let (client, ns) = e2e::setup("svc-host").await;
    let kubeconfig = e2e::kubeconfig_path().await;
    let cluster_dir = kubeconfig.parent().expect("the cluster dir").to_path_buf();
    let node = node(&cluster_dir);
    if let Err(reason) = &node.kube_proxy {
        panic!("ClusterIP Services do not answer on this node: {reason}");
    }
    let scratch = tempfile::tempdir().expect("a temp dir");
    let (repository, tag) = operator_image(&cluster_dir, scratch.path());
    let image = format!("{repository}:{tag}");

    let (ip, created) = serve(&client, ns.name(), "web", &image).await;
    let body = eventually(SOON, "the ClusterIP to answer", || async {
        http_get(&ip, SERVICE_PORT, "/healthz").await
    })
    .await;
    assert_eq!(body.trim(), "ok", "the backend's /healthz through {ip}");
    eprintln!(
        "e2e_services: ClusterIP {ip} answered {:.2}s after the Service was created",
        created.elapsed().as_secs_f64()
    );

    // The answer came through the Service: once it is deleted, the ClusterIP answers no more
    // (while the pod, at its own address, still does).
    let services: Api<Service> = Api::namespaced(client.clone(), ns.name());
    services
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleting the Service");
    eventually(
        SOON,
        "the deleted Service's ClusterIP to stop answering",
        || async {
            match http_get(&ip, SERVICE_PORT, "/healthz").await {
                Ok(body) => Err(format!("still answered {body:?}")),
                Err(_) => Ok(()),
            }
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let pod_ip = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("the backend's pods")
        .items
        .into_iter()
        .find_map(|p| p.status.and_then(|s| s.pod_ip))
        .expect("the backend pod has an IP");
    let body = http_get(&pod_ip, TARGET_PORT, "/healthz")
        .await
        .unwrap_or_else(|e| panic!("the backend pod itself: {e}"));
    assert_eq!(body.trim(), "ok");
}

/// A pod that runs `mcp-operator check-url URL` once; restartPolicy Never.
fn checking_pod(name: &str, image: &str, url: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "check",
                "image": image,
                "imagePullPolicy": "Never",
                "args": ["check-url", "--timeout", "3s", url],
            }],
        },
    }))
    .expect("a Pod")
}

/// Runs a checking pod to its end: Ok(its log) when it succeeded, Err(its log) when it failed.
async fn check_from_a_pod(
    client: &Client,
    cluster_dir: &Path,
    namespace: &str,
    name: &str,
    image: &str,
    url: &str,
) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.create(&PostParams::default(), &checking_pod(name, image, url))
        .await
        .unwrap_or_else(|e| panic!("creating Pod {name}: {}", e2e::describe(&e)));
    let phase = eventually(SOON, "the checking pod to finish", || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        match pod.status.and_then(|s| s.phase).as_deref() {
            Some(phase @ ("Succeeded" | "Failed")) => Ok(phase.to_owned()),
            other => Err(format!("phase {other:?}")),
        }
    })
    .await;
    let log = run(kubectl(cluster_dir).args(["logs", "-n", namespace, name]));
    if phase == "Succeeded" {
        Ok(log)
    } else {
        Err(log)
    }
}

/// Packets the node's rule dropped for trying to leave its bridge (`e2e/node.sh dropped`).
fn dropped_packets(cluster_dir: &Path) -> u64 {
    let out = run(Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/node.sh"))
        .arg("dropped")
        .arg(cluster_dir));
    out.trim()
        .parse()
        .unwrap_or_else(|e| panic!("node.sh dropped printed {out:?}: {e}"))
}

#[tokio::test]
async fn a_pod_reaches_a_cluster_ip_service_and_nothing_beyond_the_bridge() {
    let (client, ns) = e2e::setup("svc-pod").await;
    let kubeconfig = e2e::kubeconfig_path().await;
    let cluster_dir = kubeconfig.parent().expect("the cluster dir").to_path_buf();
    let node = node(&cluster_dir);
    if let Err(reason) = &node.kube_proxy {
        panic!("ClusterIP Services do not answer on this node: {reason}");
    }
    let scratch = tempfile::tempdir().expect("a temp dir");
    let (repository, tag) = operator_image(&cluster_dir, scratch.path());
    let image = format!("{repository}:{tag}");

    let (ip, _) = serve(&client, ns.name(), "web", &image).await;
    eventually(SOON, "the ClusterIP to answer the host", || async {
        http_get(&ip, SERVICE_PORT, "/healthz").await
    })
    .await;
    let url = format!("http://{ip}:{SERVICE_PORT}/healthz");

    // --- another pod on the bridge reaches it through the ClusterIP: forwarded back onto the
    // bridge, the reply coming back through the host.
    let log = check_from_a_pod(&client, &cluster_dir, ns.name(), "client", &image, &url)
        .await
        .unwrap_or_else(|log| panic!("the client pod could not reach {url}:\n{log}"));
    assert!(log.contains(": 200"), "{log}");

    // --- the backend pod reaches its own Service (hairpin): `kubectl exec` of the binary, no
    // shell needed.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let backend = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("the backend's pods")
        .items
        .into_iter()
        .next()
        .expect("a backend pod");
    let backend = backend.metadata.name.expect("a name");
    let out = run(kubectl(&cluster_dir).args([
        "exec",
        "-n",
        ns.name(),
        &backend,
        "--",
        "/mcp-operator",
        "check-url",
        &url,
    ]));
    assert!(out.contains(": 200"), "{out}");

    // --- a Service whose endpoint is off the bridge (TEST-NET-3, through the host's other
    // interfaces): kube-proxy translates, and the node's rule drops the packet rather than
    // forward it beyond the bridge.
    let services: Api<Service> = Api::namespaced(client.clone(), ns.name());
    let outside: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "outside"},
        "spec": {"ports": [{"port": SERVICE_PORT, "targetPort": SERVICE_PORT}]},
    }))
    .expect("a Service");
    let outside = services
        .create(&PostParams::default(), &outside)
        .await
        .expect("creating Service outside");
    let outside_ip = outside
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("a ClusterIP");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "outside", "labels": {"kubernetes.io/service-name": "outside"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["203.0.113.7"]}],
        "ports": [{"port": SERVICE_PORT, "protocol": "TCP"}],
    }))
    .expect("an EndpointSlice");
    slices
        .create(&PostParams::default(), &slice)
        .await
        .expect("creating the EndpointSlice");
    // kube-proxy programs it within its sync period; the host (not forwarded) sees it first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = dropped_packets(&cluster_dir);
    let escaped = check_from_a_pod(
        &client,
        &cluster_dir,
        ns.name(),
        "escape",
        &image,
        &format!("http://{outside_ip}:{SERVICE_PORT}/"),
    )
    .await;
    assert!(escaped.is_err(), "reached 203.0.113.7: {escaped:?}");
    let after = dropped_packets(&cluster_dir);
    assert!(
        after > before,
        "the pod's connection to 203.0.113.7 failed, but the bridge-only rule dropped nothing ({before} -> {after}): {escaped:?}"
    );
}
