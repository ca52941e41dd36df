//! The operator as users run it, in real pods: `helm install --wait` of charts/mcp-operator on
//! the e2e node (e2e/node.sh: a kubelet, containerd and runc), from the image e2e/image.sh built
//! out of the release binary. `helm test` passes (its hook pod reaches the operator through the
//! metrics Service's ClusterIP, so it needs the node's kube-proxy), and fails once no replica is
//! left. Two replicas elect a leader through their Lease; the leader makes the McpServer example
//! Ready against an MCP server on the node's address, and a stdio McpServer (server-memory in the
//! Node image, the bridge from the chart's own image) Ready at its ClusterIP; `kubectl logs` is
//! JSON; deleting the leader's pod hands the Lease to another replica, which reconciles; a SIGKILLed
//! leader's container is restarted by the kubelet and reconciling goes on.
//!
//! ```text
//!  scripts/test.sh: cluster.sh up ─► node.sh up ─► image.sh operator (release) ─► this test
//!                                                    MCP_E2E_OPERATOR_IMAGE=<tarball>
//!  helm install --wait ─► Deployment (2 pods on bridge mcpnodeN) ─► Lease ◄─ leader
//!       leader ──HTTP──► sdk_server.py on the node IP (10.244.N.1, not loopback: the
//!                        in-cluster guard refuses 127.0.0.1 and must accept this)
//!       kubernetes Service 10.0.0.1:443 ──DNAT on the bridge──► apiserver 127.0.0.1
//! ```
//!
//! The node needs root. Without it (or when it cannot start) this test fails with the reason.

use crate::e2e;
use crate::operator;
use crate::sidecar_support;
use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, ListParams, Patch, PatchParams, PostParams};
use mcp_operator::api::agent_spec::{AgentSpec, grants_config_map_name};
use mcp_operator::api::mcp_server::McpServer;
use mcp_operator::api::tenant_policy::McpTenantPolicy;
use operator::{apply_server, eventually, server_manifest, wait_condition};
use serde_json::Value;
use support::Fixtures;

const CHART: &str = "charts/mcp-operator";
const SOON: Duration = Duration::from_secs(60);
/// The namespace label the injection test's McpTenantPolicy selects.
const TENANT_LABEL: &str = "mcp-operator.dev/e2e-tenant";

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The node of the shared control plane (`CLUSTER_DIR/node/env`).
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) ip: String,
    pub(crate) containerd: String,
    pub(crate) crictl: PathBuf,
    /// kube-proxy's mode when ClusterIP Services answer on this node, else why they do not.
    pub(crate) kube_proxy: Result<String, String>,
    /// The pause image's reference, as the node's containerd has it (for pods whose only
    /// container must do nothing).
    pub(crate) pause_image: String,
}

/// The node scripts/test.sh started, or one started here for this test binary (its watchdog
/// takes it down when this process exits). Any reason it cannot run becomes the failure.
pub(crate) fn node(cluster_dir: &Path) -> Node {
    if let Ok(reason) = std::env::var("MCP_E2E_NODE_UNAVAILABLE") {
        panic!("no e2e node, so no real pods: {reason}");
    }
    let env_file = cluster_dir.join("node/env");
    // Tests of several modules ask at once: one starts the node, the others wait for it.
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _starting = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    if !env_file.exists() {
        let out = Command::new("bash")
            .arg(repo().join("e2e/node.sh"))
            .arg("up")
            .arg(cluster_dir)
            .env("E2E_OWNER_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .output()
            .expect("bash runs e2e/node.sh");
        assert!(
            out.status.success(),
            "no e2e node, so no real pods: `e2e/node.sh up` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let vars = read_env(&env_file);
    let paths = Command::new("bash")
        .arg(repo().join("e2e/node.sh"))
        .arg("paths")
        .output()
        .expect("node.sh paths");
    let paths = String::from_utf8_lossy(&paths.stdout).to_string();
    let crictl = paths
        .lines()
        .find_map(|l| l.strip_prefix("CRICTL="))
        .expect("node.sh paths names crictl");
    let pause_image = image_reference(Path::new(
        paths
            .lines()
            .find_map(|l| l.strip_prefix("PAUSE_IMAGE="))
            .expect("node.sh paths names the pause image"),
    ));
    let kube_proxy = match vars.get("E2E_NODE_KUBE_PROXY") {
        Some(mode) => Ok(mode.clone()),
        None => Err(vars
            .get("E2E_NODE_KUBE_PROXY_UNAVAILABLE")
            .cloned()
            .unwrap_or_else(|| format!("{} names no kube-proxy", env_file.display()))),
    };
    Node {
        ip: vars["E2E_NODE_IP"].clone(),
        containerd: vars["E2E_NODE_CONTAINERD"].clone(),
        crictl: PathBuf::from(crictl),
        kube_proxy,
        pause_image,
    }
}

/// What every real-node test stands on: its namespace, the node, and the operator image in the
/// node's containerd. The test holds [`ONE_RELEASE`] before asking for it and installs the
/// chart itself (timed, or watching a tenant's namespace).
pub(crate) struct OnNode {
    pub(crate) client: kube::Client,
    pub(crate) ns: e2e::TestNamespace,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) cluster_dir: PathBuf,
    pub(crate) node: Node,
    /// Where image tarballs are packed (kept while the test may import more).
    pub(crate) scratch: tempfile::TempDir,
    pub(crate) repository: String,
    pub(crate) tag: String,
}

impl OnNode {
    /// What most of a test uses: its client, namespace, cluster dir and node.
    pub(crate) fn parts(&self) -> (&kube::Client, &e2e::TestNamespace, &Path, &Node) {
        (&self.client, &self.ns, &self.cluster_dir, &self.node)
    }

    /// The chart, installed into the test's namespace from its operator image.
    pub(crate) fn install_chart(&self) -> (Uninstall, String) {
        install_chart(&self.ns, &self.repository, &self.tag, &self.kubeconfig)
    }
}

pub(crate) async fn on_node(test: &str) -> OnNode {
    let (client, ns) = e2e::setup(test).await;
    let kubeconfig = e2e::kubeconfig_path().await;
    let cluster_dir = kubeconfig.parent().expect("the cluster dir").to_path_buf();
    let node = node(&cluster_dir);
    let scratch = tempfile::tempdir().expect("a temp dir");
    let (repository, tag) = operator_image(&cluster_dir, scratch.path());
    OnNode {
        client,
        ns,
        kubeconfig,
        cluster_dir,
        node,
        scratch,
        repository,
        tag,
    }
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The operator image in the node's containerd: the tarball scripts/test.sh built from the
/// release binary, else one packed here from this test's own build. Returns (repository, tag).
pub(crate) fn operator_image(cluster_dir: &Path, scratch: &Path) -> (String, String) {
    let tarball = match std::env::var_os("MCP_E2E_OPERATOR_IMAGE").filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => {
            let tarball = scratch.join("operator-image.tar");
            run(Command::new("bash")
                .arg(repo().join("e2e/image.sh"))
                .arg("operator")
                .arg(&tarball)
                .arg(env!("CARGO_BIN_EXE_mcp-operator")));
            tarball
        }
    };
    import_image(cluster_dir, &tarball)
}

/// The Node image of `e2e/image.sh node` (Node 22, the pinned stdio servers, the TypeScript SDK
/// client), packed here and loaded into the node's containerd. Returns (repository, tag).
pub(crate) fn node_image(cluster_dir: &Path, scratch: &Path) -> (String, String) {
    let tarball = scratch.join("node-image.tar");
    run(Command::new("bash")
        .arg(repo().join("e2e/image.sh"))
        .arg("node")
        .arg(&tarball));
    import_image(cluster_dir, &tarball)
}

/// Loads a docker-save tarball into the node's containerd; returns its (repository, tag).
fn import_image(cluster_dir: &Path, tarball: &Path) -> (String, String) {
    let manifest = run(Command::new("tar")
        .arg("-xOf")
        .arg(tarball)
        .arg("manifest.json"));
    let manifest: Value = serde_json::from_str(&manifest).expect("manifest.json");
    let reference = manifest[0]["RepoTags"][0]
        .as_str()
        .expect("a tagged image")
        .to_owned();
    run(Command::new("bash")
        .arg(repo().join("e2e/node.sh"))
        .arg("import")
        .arg(cluster_dir)
        .arg(tarball));
    let (repository, tag) = reference.rsplit_once(':').expect("repository:tag");
    (repository.to_owned(), tag.to_owned())
}

/// Runs a command, panicking with its output when it fails; returns its stdout.
pub(crate) fn run(command: &mut Command) -> String {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn kubectl(cluster_dir: &Path) -> Command {
    let mut command = Command::new(cluster_dir.join("bin/kubectl"));
    command
        .arg("--kubeconfig")
        .arg(cluster_dir.join("kubeconfig"));
    command
}

/// The host pid of a pod's first container, from the node's CRI.
pub(crate) fn container_pid(node: &Node, pod: &Pod) -> u32 {
    let id = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .unwrap_or_else(|| panic!("pod {} has no container", pod.name_any()));
    let id = id.trim_start_matches("containerd://");
    let inspect = run(Command::new(&node.crictl)
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", node.containerd))
        .args(["inspect", id]));
    let inspect: Value = serde_json::from_str(&inspect).expect("crictl inspect prints JSON");
    inspect["info"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid in crictl inspect {id}")) as u32
}

/// The real user of a host process and whether its root file system is mounted read-only.
fn process_identity(pid: u32) -> (String, bool) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .expect("a Uid line")
        .to_owned();
    let mounts =
        std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("/proc/PID/mountinfo");
    let root_ro = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&"/"))
        .is_some_and(|f| f[5].split(',').any(|o| o == "ro"));
    (uid, root_ro)
}

pub(crate) async fn running_pods(pods: &Api<Pod>, selector: &str) -> Result<Vec<Pod>, String> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| e.to_string())?;
    let ready: Vec<Pod> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(pod_ready)
        .collect();
    Ok(ready)
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// One release at a time in this binary: each is cluster-wide (two operators would reconcile
/// the same objects, and both webhooks would answer for labelled pods).
pub(crate) static ONE_RELEASE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn the_chart_runs_on_a_real_node_and_fails_over() {
    // Dropped last: the release is uninstalled before the next test installs its own.
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("node-chart").await;
    let (client, ns, cluster_dir, node) = on.parts();

    let started = Instant::now();
    let (_uninstall, fullname) = on.install_chart();
    eprintln!(
        "e2e_node: helm install --wait took {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // --- two replicas run as the chart says: non-root, read-only root, probes passing.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns.name());
    let deployment = deployments.get(&fullname).await.expect("the Deployment");
    let status = deployment.status.clone().unwrap_or_default();
    assert_eq!(
        status.ready_replicas,
        Some(2),
        "helm --wait left {status:?}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let selector = format!("app.kubernetes.io/instance={}", ns.name());
    let ready = running_pods(&pods, &selector).await.expect("pods");
    assert_eq!(ready.len(), 2, "two Ready pods");
    for pod in &ready {
        let spec = pod.spec.as_ref().expect("a spec");
        assert_eq!(spec.node_name.as_deref(), Some(node.ip.as_str()));
        let container = &spec.containers[0];
        assert!(container.liveness_probe.is_some() && container.readiness_probe.is_some());
        // What the kernel says, not what the spec asks for.
        let (uid, root_ro) = process_identity(container_pid(node, pod));
        assert_eq!(uid, "65532", "{} runs as uid {uid}", pod.name_any());
        assert!(
            root_ro,
            "{}: the root file system is writable",
            pod.name_any()
        );
    }

    // --- one leads.
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let names: Vec<String> = ready.iter().map(|p| p.name_any()).collect();
    let leader = eventually(SOON, "a replica to hold the Lease", || async {
        match lease_holder(&leases, &fullname).await {
            Some(h) if names.contains(&h) => Ok(h),
            other => Err(format!("holder {other:?}, pods {names:?}")),
        }
    })
    .await;
    let standby = names
        .iter()
        .find(|n| **n != leader)
        .expect("a standby")
        .clone();

    // --- the McpServer example becomes Ready through the in-cluster controller. The fixture
    // listens on the node's bridge address: the pods reach it there, and it is not loopback, so
    // the endpoint guard (no --allow-loopback in the chart) lets it through...
    let fixtures = Fixtures::load();
    let upstream = fixtures.sdk_server(&["--host", &node.ip]);
    assert!(upstream.url.contains(&node.ip), "{}", upstream.url);
    let mut example = e2e::yaml_documents(&repo().join("examples/mcpserver-local.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "McpServer")
        .expect("the example McpServer");
    example["metadata"]["namespace"] = ns.name().into();
    example["spec"]["url"] = upstream.url.clone().into();
    let name = example["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    apply_server(client, ns.name(), example).await;
    let servers: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    wait_condition(&servers, &name, "Ready", "True", None, SOON).await;
    // ...while 127.0.0.1 (the operator's own pod) stays refused.
    apply_server(
        client,
        ns.name(),
        server_manifest("loopback", "http://127.0.0.1:9/mcp", serde_json::json!({})),
    )
    .await;
    let refused = wait_condition(&servers, "loopback", "Ready", "False", None, SOON).await;
    let message =
        operator::condition(&refused, "Ready").expect("a Ready condition")["message"].to_string();
    assert!(message.contains("loopback"), "refused for: {message}");

    // --- a stdio McpServer under the chart: its pods take the bridge from the image the chart
    // deploys (--bridge-image), and the in-cluster controller reaches it at its ClusterIP.
    let (node_repository, node_tag) = node_image(cluster_dir, on.scratch.path());
    apply_server(
        client,
        ns.name(),
        serde_json::json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "memory"},
            "spec": {"stdio": {
                "image": format!("{node_repository}:{node_tag}"),
                "imagePullPolicy": "Never",
                "command": ["node", "/opt/mcp/servers/node_modules/@modelcontextprotocol/server-memory/dist/index.js"],
            }},
        }),
    )
    .await;
    let memory = wait_condition(
        &servers,
        "memory",
        "Ready",
        "True",
        Some("Ready"),
        Duration::from_secs(120),
    )
    .await;
    let memory_status = memory.status.expect("a status");
    assert_eq!(
        memory_status
            .catalog
            .expect("a catalogue")
            .catalog
            .tool_count,
        9,
        "server-memory's nine tools"
    );
    let bridge_image = deployments
        .get("memory-mcp")
        .await
        .expect("the stdio server's Deployment")
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.init_containers)
        .and_then(|c| c.first().and_then(|c| c.image.clone()));
    assert_eq!(bridge_image, Some(format!("{}:{}", on.repository, on.tag)));

    // --- kubectl logs: JSON lines, the leader saying it leads.
    let logs = run(kubectl(cluster_dir).args(["logs", "-n", ns.name(), &leader]));
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the leader logged nothing");
    for line in &lines {
        let parsed: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(parsed.is_object(), "{line}");
    }
    assert!(
        logs.contains("became the leader"),
        "the leader's log: {logs}"
    );

    // --- the leader's pod deleted: another replica takes the Lease and reconciles. That is the
    // standby or the ReplicaSet's replacement pod, whichever asks first (both are real
    // candidates; on this node the replacement is often up within two seconds).
    let deleted = Instant::now();
    run(kubectl(cluster_dir).args(["delete", "pod", "-n", ns.name(), &leader, "--wait=false"]));
    let mut holder = None;
    while deleted.elapsed() < SOON {
        holder = lease_holder(&leases, &fullname).await;
        if holder.as_ref().is_some_and(|h| *h != leader) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let Some(new_leader) = holder.clone().filter(|h| *h != leader) else {
        let logs = kubectl(cluster_dir)
            .args(["logs", "-n", ns.name(), &standby, "--tail=40"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let lease = leases.get(&fullname).await.map(|l| l.spec);
        panic!(
            "no other replica took the Lease within {SOON:?} of deleting {leader}; lease {lease:?}\n--- {standby}:\n{logs}"
        );
    };
    // A fresh replacement may take the Lease before its readiness probe passes.
    eventually(SOON, "the new leader to be a Ready replica", || async {
        let live = running_pods(&pods, &selector).await?;
        if live.iter().any(|p| p.name_any() == new_leader) {
            Ok(())
        } else {
            Err(format!("{new_leader} is not among the Ready pods"))
        }
    })
    .await;
    eprintln!(
        "e2e_node: {} {new_leader} leads {:.1}s after the leader's pod was deleted",
        if new_leader == standby {
            "the standby"
        } else {
            "the replacement"
        },
        deleted.elapsed().as_secs_f64()
    );
    let mut second = server_manifest("after-failover", &upstream.url, serde_json::json!({}));
    second["metadata"]["namespace"] = ns.name().into();
    apply_server(client, ns.name(), second).await;
    wait_condition(&servers, "after-failover", "Ready", "True", None, SOON).await;
    let logs = run(kubectl(cluster_dir).args(["logs", "-n", ns.name(), &new_leader]));
    assert!(
        logs.contains("became the leader"),
        "the new leader's log: {logs}"
    );
    eventually(SOON, "two Ready replicas again", || async {
        let ready = running_pods(&pods, &selector).await?;
        let fresh = ready.iter().any(|p| !names.contains(&p.name_any()));
        if ready.len() == 2 && fresh {
            Ok(())
        } else {
            Err(format!("{} Ready", ready.len()))
        }
    })
    .await;

    // --- a crash: SIGKILL of the (new) leader's process, no chance to release the Lease. The
    // kubelet restarts the container (its probes pass again) and reconciling goes on.
    let ready = running_pods(&pods, &selector).await.expect("pods");
    let leader_pod = ready
        .iter()
        .find(|p| p.name_any() == new_leader)
        .expect("the new leader's pod");
    let pid = container_pid(node, leader_pod);
    let killed = Instant::now();
    run(Command::new("kill").args(["-KILL", &pid.to_string()]));
    eventually(SOON, "the killed container restarted and Ready", || async {
        let pod = pods.get(&new_leader).await.map_err(|e| e.to_string())?;
        let restarts = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .map(|c| c.restart_count)
            .unwrap_or(0);
        let ready = running_pods(&pods, &selector).await?.len();
        if restarts >= 1 && ready == 2 {
            Ok(())
        } else {
            Err(format!("{restarts} restarts, {ready} Ready"))
        }
    })
    .await;
    eprintln!(
        "e2e_node: the killed leader's container restarted and Ready in {:.1}s",
        killed.elapsed().as_secs_f64()
    );
    let mut third = server_manifest("after-crash", &upstream.url, serde_json::json!({}));
    third["metadata"]["namespace"] = ns.name().into();
    apply_server(client, ns.name(), third).await;
    wait_condition(
        &servers,
        "after-crash",
        "Ready",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    eprintln!(
        "e2e_node: reconciling again {:.1}s after the leader's SIGKILL",
        killed.elapsed().as_secs_f64()
    );
}

/// `helm test` of the chart: its hook pod reaches the operator through the metrics Service's
/// ClusterIP (kube-proxy on the node) and finds /readyz and /metrics answering; once no replica
/// is left, it fails and says so.
#[tokio::test]
async fn helm_test_passes_while_the_operator_answers_and_fails_once_it_does_not() {
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("node-helm-test").await;
    let (client, ns, cluster_dir, node) = on.parts();
    if let Err(reason) = &node.kube_proxy {
        panic!("helm test needs ClusterIP Services, which this node has not: {reason}");
    }
    let (_uninstall, fullname) = on.install_chart();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let selector = format!("app.kubernetes.io/instance={}", ns.name());

    let tested = Instant::now();
    let (passed, out) = helm_test(ns.name(), &on.kubeconfig);
    assert!(passed && out.contains("Phase:          Succeeded"), "{out}");
    eprintln!(
        "e2e_node: helm test passed in {:.1}s",
        tested.elapsed().as_secs_f64()
    );

    // --- with no replica left, `helm test` fails and says so.
    run(kubectl(cluster_dir).args([
        "scale",
        "deployment",
        "-n",
        ns.name(),
        &fullname,
        "--replicas=0",
    ]));
    eventually(SOON, "no replica left", || async {
        let left = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} pods"))
        }
    })
    .await;
    let (passed, out) = helm_test(ns.name(), &on.kubeconfig);
    assert!(!passed && out.contains("Failed"), "{out}");
}

/// `helm test` of the release: whether it passed, and what helm said.
fn helm_test(release: &str, kubeconfig: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .arg(repo().join("e2e/helm.sh"))
        .args(["test", release, "--namespace", release, "--timeout", "2m"])
        .env("KUBECONFIG", kubeconfig)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .expect("bash runs e2e/helm.sh");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// `helm install --wait` of the chart on the locally built image, as a release named after the
/// test's namespace and installed in it (so its ClusterRole, ClusterRoleBinding and webhook
/// configuration names are unique, and are deleted with the namespace). Limited to that
/// namespace (its controller and its webhook): the other e2e tests run their own controllers on
/// the same control plane at the same time, and a cluster-wide one would reconcile their
/// servers and admit their pods. Returns the guard that uninstalls it, pass or fail, and the
/// release's full name.
pub(crate) fn install_chart(
    ns: &e2e::TestNamespace,
    repository: &str,
    tag: &str,
    kubeconfig: &Path,
) -> (Uninstall, String) {
    install_chart_watching(ns, ns.name(), repository, tag, kubeconfig)
}

/// [`install_chart`] into `ns`, limited to the namespace `watch` (a tenant's, apart from the
/// operator's own).
fn install_chart_watching(
    ns: &e2e::TestNamespace,
    watch: &str,
    repository: &str,
    tag: &str,
    kubeconfig: &Path,
) -> (Uninstall, String) {
    let release = ns.name();
    run(Command::new("bash")
        .arg(repo().join("e2e/helm.sh"))
        .args(["install", release, CHART, "--namespace", release])
        .args(["--skip-crds", "--wait", "--timeout", "3m"])
        .args(["--set", &format!("image.repository={repository}")])
        .args(["--set", &format!("image.tag={tag}")])
        .args(["--set", "image.pullPolicy=Never"])
        .args(["--set", &format!("controller.watchNamespace={watch}")])
        .env("KUBECONFIG", kubeconfig)
        .current_dir(repo()));
    let uninstall = Uninstall {
        release: release.to_owned(),
        namespace: release.to_owned(),
        kubeconfig: kubeconfig.to_path_buf(),
    };
    let fullname = format!("{release}-mcp-operator");
    ns.delete_later(ApiResource::erase::<ClusterRole>(&()), &fullname);
    ns.delete_later(ApiResource::erase::<ClusterRoleBinding>(&()), &fullname);
    ns.delete_later(
        ApiResource::erase::<ClusterRole>(&()),
        &format!("{fullname}-pin-approver"),
    );
    ns.delete_later(
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        &fullname,
    );
    ns.delete_later(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        &fullname,
    );
    (uninstall, fullname)
}

/// `helm uninstall --wait` of the test's release when dropped (also on a panic).
pub(crate) struct Uninstall {
    release: String,
    namespace: String,
    kubeconfig: PathBuf,
}

impl Drop for Uninstall {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .arg("90")
            .arg("bash")
            .arg(repo().join("e2e/helm.sh"))
            .args(["uninstall", &self.release, "--namespace", &self.namespace])
            .args(["--wait", "--ignore-not-found"])
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null())
            .output();
    }
}

/// The agent in the node image (e2e/image.sh node): tests/fixtures/ts_client.mjs, the official
/// TypeScript SDK client; the image's entrypoint is node.
pub(crate) const TS_CLIENT: &str = "/opt/mcp/agent/ts_client.mjs";

/// The modern-era agent in the node image: tests/fixtures/modern_client.mjs.
pub(crate) const MODERN_CLIENT: &str = "/opt/mcp/agent/modern_client.mjs";

/// What a pod's container has logged so far (empty while it has not started).
pub(crate) fn container_log(
    cluster_dir: &Path,
    namespace: &str,
    pod: &str,
    container: &str,
) -> String {
    kubectl(cluster_dir)
        .args(["logs", "-n", namespace, pod, "-c", container])
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Waits until AgentSpec `agent` counts `(injected, out_of_date)` pods and its PodsUpToDate
/// condition has `status`; returns the condition.
async fn pods_up_to_date(
    specs: &Api<AgentSpec>,
    agent: &str,
    what: &str,
    counts: (u32, u32),
    status: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    eventually(SOON, what, || async {
        let spec = specs.get(agent).await.map_err(|e| e.to_string())?;
        let spec_status = spec.status.unwrap_or_default();
        let pods = spec_status.pods.clone().unwrap_or_default();
        let condition = spec_status
            .conditions
            .iter()
            .find(|c| c.type_ == mcp_operator::api::conditions::PODS_UP_TO_DATE)
            .cloned();
        match condition {
            Some(c) if (pods.injected, pods.out_of_date) == counts && c.status == status => Ok(c),
            other => Err(format!("pods {pods:?}, condition {other:?}")),
        }
    })
    .await
}

/// Waits for a pod with `restartPolicy: Never` to end; returns its phase (Succeeded or Failed).
pub(crate) async fn pod_finished(pods: &Api<Pod>, name: &str, within: Duration) -> String {
    eventually(within, &format!("the pod {name} to finish"), || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        match pod.status.and_then(|s| s.phase).as_deref() {
            Some(p @ ("Succeeded" | "Failed")) => Ok(p.to_owned()),
            other => Err(format!("phase {other:?}")),
        }
    })
    .await
}

/// The image reference a docker-save tarball is tagged with.
fn image_reference(tarball: &Path) -> String {
    let manifest = run(Command::new("tar")
        .arg("-xOf")
        .arg(tarball)
        .arg("manifest.json"));
    let manifest: Value = serde_json::from_str(&manifest).expect("manifest.json");
    manifest[0]["RepoTags"][0]
        .as_str()
        .expect("a tagged image")
        .to_owned()
}

/// `kubectl port-forward` to a pod's port on 127.0.0.1; stopped when dropped.
struct PortForward {
    child: std::process::Child,
    url: String,
}

impl PortForward {
    fn start(cluster_dir: &Path, namespace: &str, pod: &str, port: u16) -> PortForward {
        use std::io::BufRead;
        let mut child = kubectl(cluster_dir)
            .args(["port-forward", "-n", namespace, "--address", "127.0.0.1"])
            .arg(format!("pod/{pod}"))
            .arg(format!(":{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kubectl port-forward starts");
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        stdout
            .read_line(&mut line)
            .expect("kubectl port-forward prints where it listens");
        // It prints a line per connection: keep reading, or it dies on a closed pipe.
        std::thread::spawn(move || for _ in stdout.lines() {});
        // "Forwarding from 127.0.0.1:41234 -> 9500"
        let local = line
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("kubectl port-forward said {line:?}"))
            .to_owned();
        PortForward {
            child,
            url: format!("http://{local}/mcp"),
        }
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the pod is Ready (its containers and the injected sidecar all pass their probes).
pub(crate) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A Pod manifest labelled for injection (or not, with `agent` None).
pub(crate) fn agent_pod(name: &str, agent: Option<&str>, container: Value, restart: &str) -> Pod {
    let labels = match agent {
        Some(a) => serde_json::json!({ mcp_operator::inject::AGENT_LABEL: a }),
        None => serde_json::json!({}),
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": restart, "containers": [container],
                 "terminationGracePeriodSeconds": 2},
    }))
    .expect("a pod")
}

/// Sidecar injection in real pods: the chart's webhook (served by both replicas, TLS it issued
/// itself) injects the sidecar into a pod labelled with the example AgentSpec; the kubelet
/// starts it first, mounts the grants ConfigMap and exactly the referenced Secret key; an agent
/// container started after it reaches it at MCP_SERVER_URL: the official TypeScript SDK client
/// (the node image) lists exactly its grants, calls a granted tool, is refused one that is not
/// granted, and gets list_changed and narrower grants when a tenant policy changes while it
/// runs; the audit lines are in `kubectl logs`. The official Python SDK client, through
/// `kubectl port-forward`, sees the last good grants survive a deleted ConfigMap and the
/// sidecar name a Secret the pod does not mount. A copy of the pod whose sidecar predates the
/// grants is refused; re-admission of a current one adds nothing, an unlabelled pod is
/// untouched, and a label naming no AgentSpec is refused with its name.
#[tokio::test]
async fn a_labelled_pod_gets_its_sidecar_and_calls_exactly_its_granted_tools() {
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("node-inject").await;
    let (client, ns, cluster_dir, node) = on.parts();
    let operator_image = format!("{}:{}", on.repository, on.tag);
    let pause_image = node.pause_image.clone();

    let started = Instant::now();
    let (_uninstall, fullname) = on.install_chart();
    eprintln!(
        "e2e_node: helm install --wait (with the injection webhook) took {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // --- the operator's own TLS: one Secret, its CA in the webhook configuration.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    eventually(SOON, "the caBundle is the webhook Secret's CA", || async {
        let secret = secrets
            .get_opt(&format!("{fullname}-webhook-tls"))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no webhook Secret")?;
        let ca = secret
            .data
            .unwrap_or_default()
            .remove("ca.crt")
            .ok_or("no ca.crt")?;
        let config = configs.get(&fullname).await.map_err(|e| e.to_string())?;
        let bundle = config.webhooks.unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .clone();
        if bundle.as_ref() == Some(&ca) {
            Ok(())
        } else {
            Err("caBundle differs".to_string())
        }
    })
    .await;

    // --- the examples, against MCP servers on the node's address: `files` (no credentials) and
    // `files-admin` (a bearer token in the Secret files-admin-token).
    let fixtures = Fixtures::load();
    let files = fixtures.sdk_server(&["--host", &node.ip]);
    let admin = fixtures.sdk_server(&["--host", &node.ip, "--bearer", "demo-token"]);
    let mut objects = e2e::yaml_documents(&repo().join("examples/mcpserver-local.yaml"));
    objects.extend(e2e::yaml_documents(
        &repo().join("examples/mcpserver-local-bearer.yaml"),
    ));
    for mut object in objects {
        object["metadata"]["namespace"] = ns.name().into();
        match (object["kind"].as_str(), object["metadata"]["name"].as_str()) {
            (Some("McpServer"), Some("files")) => object["spec"]["url"] = files.url.clone().into(),
            (Some("McpServer"), Some("files-admin")) => {
                object["spec"]["url"] = admin.url.clone().into()
            }
            _ => {}
        }
        e2e::apply(client, &object, ns.name()).await;
    }
    let mut agent_spec = e2e::yaml_documents(&repo().join("examples/agentspec.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "AgentSpec")
        .expect("the example AgentSpec");
    // The remote example needs the internet; the two local servers are the story here.
    agent_spec["spec"]["servers"]
        .as_array_mut()
        .expect("servers")
        .retain(|s| s["name"] != "remote-example");
    let agent = agent_spec["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    e2e::write(
        client,
        e2e::Write::ServerSideApply,
        &agent_spec,
        Some(ns.name()),
        false,
    )
    .await
    .unwrap_or_else(|e| panic!("applying the AgentSpec: {}", e2e::describe(&e)));
    let specs: Api<AgentSpec> = Api::namespaced(client.clone(), ns.name());
    e2e::wait_condition(&specs, &agent, "Ready", "True", None, SOON).await;
    let grants_name = grants_config_map_name(&agent);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let grants: Value = serde_json::from_str(
        &config_maps
            .get(&grants_name)
            .await
            .expect("the grants ConfigMap")
            .data
            .unwrap()["grants.json"],
    )
    .expect("grants.json");
    let mut granted: Vec<String> = grants["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .map(|t| t["qualifiedName"].as_str().unwrap().to_owned())
        .collect();
    granted.sort();
    assert!(
        granted.contains(&"files__read_file".to_string()),
        "{granted:?}"
    );
    assert!(
        !granted.contains(&"files__write_file".to_string()),
        "{granted:?}"
    );

    // --- a labelled agent pod: the injected spec, as the apiserver stored it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let pause =
        serde_json::json!({"name": "agent", "image": pause_image, "imagePullPolicy": "Never"});
    let created = pods
        .create(
            &PostParams::default(),
            &agent_pod("agent", Some(&agent), pause.clone(), "Always"),
        )
        .await
        .unwrap_or_else(|e| panic!("creating the agent pod: {}", e2e::describe(&e)));
    let spec = created.spec.clone().expect("a spec");
    let init = spec.init_containers.clone().unwrap_or_default();
    assert_eq!(init.len(), 1, "one injected sidecar: {init:?}");
    let sidecar = &init[0];
    assert_eq!(sidecar.name, mcp_operator::inject::SIDECAR_CONTAINER);
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
    assert_eq!(sidecar.image.as_deref(), Some(operator_image.as_str()));
    assert!(sidecar.startup_probe.is_some());
    let security = sidecar
        .security_context
        .clone()
        .expect("a security context");
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    let volumes = spec.volumes.clone().unwrap_or_default();
    let grants_volume = volumes
        .iter()
        .find(|v| v.name == mcp_operator::inject::GRANTS_VOLUME)
        .expect("the grants volume");
    assert_eq!(
        grants_volume.config_map.as_ref().map(|c| c.name.as_str()),
        Some(grants_name.as_str())
    );
    let projected = volumes
        .iter()
        .find(|v| v.name == mcp_operator::inject::CREDENTIALS_VOLUME)
        .and_then(|v| v.projected.clone())
        .expect("the credentials volume");
    let mounted: Vec<String> = projected
        .sources
        .unwrap_or_default()
        .iter()
        .filter_map(|s| s.secret.as_ref())
        .flat_map(|s| s.items.clone().unwrap_or_default())
        .map(|i| i.path)
        .collect();
    assert_eq!(mounted, ["secrets/files-admin-token/token"]);
    let env = spec.containers[0].env.clone().unwrap_or_default();
    assert!(
        env.iter().any(|e| e.name == "MCP_SERVER_URL"
            && e.value.as_deref() == Some("http://127.0.0.1:9500/mcp")),
        "{env:?}"
    );

    // --- the kubelet runs it: the sidecar first, Ready once its grants are loaded and its
    // servers' tools read; then the agent.
    let admitted = Instant::now();
    let running = loop {
        let pod = pods.get("agent").await.expect("the agent pod");
        if pod_ready(&pod) {
            break pod;
        }
        if admitted.elapsed() > Duration::from_secs(90) {
            let logs = kubectl(cluster_dir)
                .args(["logs", "-n", ns.name(), "agent", "-c", "mcp-sidecar"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            panic!(
                "the agent pod is not Ready after 90s: {:?}\n--- the sidecar's log:\n{logs}",
                pod.status
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "e2e_node: the injected agent pod was Ready {:.1}s after admission",
        admitted.elapsed().as_secs_f64()
    );
    let statuses = running.status.clone().unwrap_or_default();
    let sidecar_status = statuses
        .init_container_statuses
        .unwrap_or_default()
        .into_iter()
        .find(|s| s.name == mcp_operator::inject::SIDECAR_CONTAINER)
        .expect("the sidecar's status");
    assert!(sidecar_status.ready && sidecar_status.started == Some(true));
    assert_eq!(sidecar_status.restart_count, 0, "{sidecar_status:?}");

    // --- an agent nobody here wrote, in the pod: the official TypeScript SDK client from the
    // node image, started by the kubelet after its injected sidecar and pointed at it through
    // `$(MCP_SERVER_URL)`. It lists, calls a granted tool, is refused one that is not granted,
    // then waits for list_changed while the tenant policy below narrows its grants, lists
    // again and tries a tool the policy took away. Its one JSON line is in `kubectl logs`.
    let node_image = {
        let (repository, tag) = node_image(cluster_dir, on.scratch.path());
        format!("{repository}:{tag}")
    };
    let steps = serde_json::json!([
        {"op": "list"},
        {"op": "call", "name": "files__read_file", "arguments": {"path": "/notes"}},
        {"op": "call", "name": "files__write_file", "arguments": {"path": "/notes"}},
        {"op": "wait_list_changed", "timeout": 60, "trigger": true},
        {"op": "call", "name": "admin__write_file", "arguments": {"path": "/notes"}},
    ]);
    let ts_agent = serde_json::json!({
        "name": "agent", "image": node_image, "imagePullPolicy": "Never",
        "args": [TS_CLIENT, "$(MCP_SERVER_URL)", steps.to_string()],
    });
    pods.create(
        &PostParams::default(),
        &agent_pod("ts-agent", Some(&agent), ts_agent, "Never"),
    )
    .await
    .unwrap_or_else(|e| panic!("creating the TypeScript agent: {}", e2e::describe(&e)));
    let listening = Instant::now();
    loop {
        let log = container_log(cluster_dir, ns.name(), "ts-agent", "agent");
        if log.contains(r#"{"listening":true}"#) {
            break;
        }
        if listening.elapsed() > Duration::from_secs(90) {
            let sidecar = container_log(cluster_dir, ns.name(), "ts-agent", "mcp-sidecar");
            panic!(
                "the TypeScript agent never waited for list_changed: {:?}\n--- agent:\n{log}\n--- sidecar:\n{sidecar}",
                pods.get("ts-agent").await.map(|p| p.status)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // --- a platform engineer caps files-admin at read for this namespace while the agent is
    // connected: the operator republishes the grants, the kubelet updates the running pod's
    // ConfigMap volume, the sidecar narrows and tells the agent (list_changed).
    Api::<Namespace>::all(client.clone())
        .patch(
            ns.name(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {TENANT_LABEL: ns.name()}}})),
        )
        .await
        .expect("labelling the namespace");
    let policy_name = ns.scoped_name("admin-read-only");
    ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);
    let policy: McpTenantPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpTenantPolicy",
        "metadata": {"name": policy_name},
        "spec": {"namespaceSelector": {"matchLabels": {TENANT_LABEL: ns.name()}},
                 "rules": [{"servers": {"names": ["files-admin"]}, "maxAccess": "read"},
                           {"servers": {"names": ["files"]}}]},
    }))
    .expect("a policy");
    let applied = Instant::now();
    Api::<McpTenantPolicy>::all(client.clone())
        .patch(
            &policy_name,
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&policy),
        )
        .await
        .expect("applying the policy");
    let phase = pod_finished(&pods, "ts-agent", Duration::from_secs(90)).await;
    let narrowed_in = applied.elapsed();
    let log = container_log(cluster_dir, ns.name(), "ts-agent", "agent");
    assert_eq!(phase, "Succeeded", "the TypeScript agent failed:\n{log}");
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
    let mut listed = sidecar_support::names(&steps[0]);
    listed.sort();
    assert_eq!(listed, granted, "the agent lists exactly its grants: {out}");
    assert_eq!(steps[1]["isError"], false, "the granted call: {out}");
    assert!(
        !steps[1]["text"].as_str().unwrap_or_default().is_empty(),
        "the granted call's result: {out}"
    );
    assert_eq!(steps[2]["isError"], true, "{out}");
    assert!(
        steps[2]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("is not granted to this agent"),
        "the sidecar's refusal: {out}"
    );
    assert_eq!(steps[3]["changed"], true, "no list_changed: {out}");
    let mut narrowed = sidecar_support::names(&steps[3]);
    narrowed.sort();
    assert!(
        !narrowed.contains(&"admin__write_file".to_string())
            && narrowed.contains(&"admin__read_file".to_string())
            && narrowed.iter().all(|n| granted.contains(n)),
        "after the policy: {narrowed:?} (before: {granted:?})"
    );
    assert!(
        steps[4]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("is not granted to this agent"),
        "a tool the policy took away: {out}"
    );
    eprintln!(
        "e2e_node: a tenant policy narrowed the running pod's tools (kubelet volume update, list_changed to the in-pod agent) within {:.1}s",
        narrowed_in.as_secs_f64()
    );

    // --- the host-side official Python SDK client, through `kubectl port-forward` to the
    // first agent pod's sidecar: what a long-lived agent sees as the cluster changes under it.
    let forward = PortForward::start(cluster_dir, ns.name(), "agent", 9500);
    // The kubelet updates each pod's ConfigMap volume on that pod's own sync: this pod's
    // sidecar obeys the narrowed grants once its volume has them.
    eventually(
        Duration::from_secs(150),
        "the first agent pod narrowed too",
        || async {
            let out =
                sidecar_support::agent(&forward.url, "auto", serde_json::json!([{"op": "list"}]))
                    .await;
            let mut listed = sidecar_support::names(&out["steps"][0]);
            listed.sort();
            if listed == narrowed {
                Ok(())
            } else {
                Err(format!("{listed:?}"))
            }
        },
    )
    .await;

    // --- the grants ConfigMap deleted by hand: the running agent keeps its last good grants
    // (the kubelet leaves the volume as it was) and the operator writes the ConfigMap again.
    let before = config_maps
        .get(&grants_name)
        .await
        .expect("the grants ConfigMap")
        .metadata
        .uid;
    config_maps
        .delete(&grants_name, &Default::default())
        .await
        .expect("deleting the grants ConfigMap");
    eventually(
        SOON,
        "the operator restores the grants ConfigMap",
        || async {
            match config_maps.get_opt(&grants_name).await {
                Ok(Some(cm)) if cm.metadata.uid != before => Ok(()),
                other => Err(format!("{:?}", other.map(|c| c.map(|c| c.metadata.uid)))),
            }
        },
    )
    .await;
    let out =
        sidecar_support::agent(&forward.url, "auto", serde_json::json!([{"op": "list"}])).await;
    let mut still = sidecar_support::names(&out["steps"][0]);
    still.sort();
    assert_eq!(still, narrowed, "{out}");

    // --- a rotated Secret: files-admin's upstream comes back expecting a new bearer token and
    // the token is changed in its Secret. The kubelet updates the running pod's projected
    // volume; the sidecar reads the file again for its next connection, and calls work again.
    // The new upstream answers the old token with 401, so calls that succeed prove the old
    // token is no longer sent.
    const ROTATED: &str = "rotated-7f3c-token";
    let admin_port = admin
        .url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("the upstream's port")
        .to_owned();
    drop(admin);
    let rotated_admin = fixtures.sdk_server(&[
        "--host",
        &node.ip,
        "--port",
        &admin_port,
        "--bearer",
        ROTATED,
    ]);
    secrets
        .patch(
            "files-admin-token",
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "files-admin-token"},
                "stringData": {"token": ROTATED},
            })),
        )
        .await
        .expect("rotating the token");
    let rotated = Instant::now();
    let read_admin = serde_json::json!([
        {"op": "call", "name": "admin__read_file", "arguments": {"path": "/notes"}},
    ]);
    loop {
        let out = sidecar_support::agent(&forward.url, "auto", read_admin.clone()).await;
        if out["steps"][0]["isError"] == false {
            break;
        }
        assert!(
            rotated.elapsed() < Duration::from_secs(150),
            "calls to files-admin never worked with the rotated token: {out}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "e2e_node: the rotated Secret reached the sidecar through the kubelet; calls work again {:.1}s after the rotation",
        rotated.elapsed().as_secs_f64()
    );
    let refused = sidecar_support::upstream_unauthorized(&rotated_admin.url).await;
    for era in ["legacy", "auto"] {
        let out = sidecar_support::agent(&forward.url, era, read_admin.clone()).await;
        assert_eq!(
            out["steps"][0]["isError"], false,
            "a call after the rotation ({era}) was refused by the upstream: {out}"
        );
    }
    assert_eq!(
        sidecar_support::upstream_unauthorized(&rotated_admin.url).await,
        refused,
        "once the rotated token was read, a request still came with the old one"
    );
    eprintln!(
        "e2e_node: the upstream refused {refused} request(s) without the new token before the rotation reached the sidecar, none after"
    );

    // --- drift: the McpServer `files` now sends a header from a new Secret. The running pod
    // does not mount it (volumes are fixed at admission); the sidecar says which key and that
    // the pod must be restarted, and never sends the call without it.
    let key_secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "files-api-key"},
        "stringData": {"key": "k-123"},
    }))
    .expect("a secret");
    secrets
        .create(&PostParams::default(), &key_secret)
        .await
        .expect("creating the Secret");
    Api::<McpServer>::namespaced(client.clone(), ns.name())
        .patch(
            "files",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"credentials": {"headers": [
                {"name": "X-Api-Key", "valueFrom": {"secretKeyRef": {"name": "files-api-key", "key": "key"}}},
            ]}}})),
        )
        .await
        .expect("adding a header to files");
    let drifted = Instant::now();
    let said = loop {
        let out =
            sidecar_support::agent(&forward.url, "legacy", serde_json::json!([{"op": "list"}]))
                .await;
        let instructions = out["instructions"].as_str().unwrap_or_default().to_owned();
        if instructions.contains("files-api-key") {
            break instructions;
        }
        assert!(
            drifted.elapsed() < Duration::from_secs(60),
            "the sidecar never named the unmounted Secret: {out}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(said.contains("restart the pod"), "{said}");
    assert!(!said.contains("k-123"), "the Secret's value leaked: {said}");
    eprintln!(
        "e2e_node: the sidecar named the Secret the running pod does not mount {:.1}s after the McpServer changed",
        drifted.elapsed().as_secs_f64()
    );
    // ...and the AgentSpec's status counts the pod out of date, naming it and the key.
    let stale = pods_up_to_date(
        &specs,
        &agent,
        "the AgentSpec counts the pod out of date",
        (1, 1),
        "False",
    )
    .await;
    assert_eq!(stale.reason, "PodsOutOfDate");
    assert!(
        stale
            .message
            .contains("Pod agent lacks Secret files-api-key key key")
            && stale.message.contains("restart it"),
        "{}",
        stale.message
    );
    assert!(!stale.message.contains("k-123"), "{}", stale.message);
    drop(forward);
    let logs = run(kubectl(cluster_dir).args([
        "logs",
        "-n",
        ns.name(),
        "ts-agent",
        "-c",
        mcp_operator::inject::SIDECAR_CONTAINER,
    ]));
    let audit: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "mcp_sidecar::audit")
        .collect();
    // One line per call: files__read_file (granted) and files__write_file (refused) were each
    // called once, by the first client.
    let lines_of = |tool: &str| -> Vec<(String, String)> {
        audit
            .iter()
            .filter(|l| l["fields"]["tool"] == tool)
            .map(|l| {
                let f = &l["fields"];
                (
                    f["decision"].as_str().unwrap_or_default().to_owned(),
                    f["outcome"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        lines_of("files__read_file"),
        [("allowed".to_string(), "ok".to_string())],
        "the granted call's audit lines in:\n{logs}"
    );
    assert_eq!(
        lines_of("files__write_file"),
        [("not_granted".to_string(), "refused".to_string())],
        "the refused call's audit lines in:\n{logs}"
    );
    assert!(
        audit.iter().all(|l| l["fields"]["agent"] == agent.as_str()),
        "audit lines name the agent: {audit:?}"
    );
    for secret in ["demo-token", ROTATED, "k-123"] {
        assert!(
            !logs.contains(secret),
            "a Secret's value ({secret}) leaked into the sidecar's log"
        );
    }

    // --- a copy of the pod, whose sidecar was built for the grants before the drift, is not
    // taken for injected: its mcp-sidecar is not the one the operator injects now.
    let copy = |pod: &Pod, name: &str| -> Pod {
        let mut again = serde_json::to_value(pod).expect("JSON");
        again["metadata"] = serde_json::json!({
            "name": name,
            "labels": pod.metadata.labels,
            "annotations": pod.metadata.annotations,
        });
        again.as_object_mut().unwrap().remove("status");
        again["spec"].as_object_mut().unwrap().remove("nodeName");
        serde_json::from_value(again).expect("a pod")
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let stale = pods
        .create(&dry, &copy(&created, "agent-stale"))
        .await
        .expect_err("a copy with an out-of-date sidecar is refused");
    let message = e2e::describe(&stale);
    assert!(
        message.contains("the pod brings its own mcp-sidecar container")
            && message.contains("remove it from the pod spec and the operator injects it"),
        "refused with: {message}"
    );
    // The injected sidecar, as the pod runs it.
    let rs = created.spec.clone().expect("a spec");
    let init = rs.init_containers.clone().unwrap_or_default();
    assert_eq!(init.len(), 1);
    // The injected sidecar obeys only grants the operator signed for this AgentSpec: both
    // keys of the keyring, the namespace and uid, its own state volume (mounted nowhere else).
    let args = init[0].args.clone().unwrap_or_default();
    let keys = args
        .iter()
        .find_map(|a| a.strip_prefix("--grants-verify-keys="))
        .expect("the sidecar is given the verifying keys");
    assert_eq!(keys.split(',').count(), 2, "{keys}");
    assert!(
        args.iter()
            .any(|a| a.starts_with("--agent-uid=") && a.len() > 12),
        "{args:?}"
    );
    assert!(
        rs.containers.iter().all(|c| c
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != "mcp-sidecar-state")),
        "only the sidecar mounts its state"
    );
    let names: Vec<String> = rs
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .filter(|n| n.starts_with("mcp-"))
        .collect();
    assert_eq!(
        names,
        ["mcp-grants", "mcp-sidecar-state", "mcp-credentials"]
    );
    let urls = rs.containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.name == "MCP_SERVER_URL")
        .count();
    assert_eq!(urls, 1);

    // --- an unlabelled pod is untouched; a label naming no AgentSpec is refused by name.
    let plain = pods
        .create(&dry, &agent_pod("plain", None, pause.clone(), "Always"))
        .await
        .unwrap_or_else(|e| panic!("an unlabelled pod: {}", e2e::describe(&e)));
    let ps = plain.spec.expect("a spec");
    assert!(ps.init_containers.unwrap_or_default().is_empty());
    assert!(ps.containers[0].env.is_none());
    assert!(
        !plain
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(mcp_operator::inject::INJECTED_ANNOTATION)
    );
    let refused = pods
        .create(
            &dry,
            &agent_pod("ghostly", Some("ghost-agent"), pause.clone(), "Always"),
        )
        .await
        .expect_err("a pod naming a missing AgentSpec is refused");
    let message = e2e::describe(&refused);
    assert!(
        message.contains("ghost-agent") && message.contains("does not exist"),
        "refused with: {message}"
    );

    // --- the out-of-date pod recreated, as the condition says: admitted now, it mounts the new
    // key, and the AgentSpec counts no pod out of date (the finished probe-agent is not counted).
    pods.delete("agent", &Default::default())
        .await
        .expect("deleting the out-of-date pod");
    eventually(SOON, "the out-of-date pod gone", || async {
        match pods.get_opt("agent").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.map(|p| p.metadata.uid)))),
        }
    })
    .await;
    let recreated = pods
        .create(
            &PostParams::default(),
            &agent_pod("agent", Some(&agent), pause.clone(), "Always"),
        )
        .await
        .unwrap_or_else(|e| panic!("recreating the agent pod: {}", e2e::describe(&e)));
    let recorded = recreated.annotations()[mcp_operator::inject::MOUNTS_ANNOTATION].clone();
    assert!(
        recorded.contains("secrets/files-api-key/key")
            && recorded.contains("secrets/files-admin-token/token"),
        "{recorded}"
    );
    let fresh = pods_up_to_date(
        &specs,
        &agent,
        "the AgentSpec counts no pod out of date",
        (1, 0),
        "True",
    )
    .await;
    assert_eq!(fresh.reason, "UpToDate");

    // --- re-admission of an injected pod, as the apiserver stored it, adds nothing (a dry run
    // passes both webhooks too).
    let readmitted = pods
        .create(&dry, &copy(&recreated, "agent-again"))
        .await
        .unwrap_or_else(|e| panic!("re-admitting: {}", e2e::describe(&e)));
    let rs = readmitted.spec.expect("a spec");
    assert_eq!(rs.init_containers.unwrap_or_default().len(), 1);
    let names: Vec<String> = rs
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .filter(|n| n.starts_with("mcp-"))
        .collect();
    assert_eq!(
        names,
        ["mcp-grants", "mcp-sidecar-state", "mcp-credentials"]
    );
    let urls = rs.containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.name == "MCP_SERVER_URL")
        .count();
    assert_eq!(urls, 1);
}

/// `kubectl --as <user>` with `manifest` (JSON) on stdin when given; returns whether it
/// succeeded and what it printed (stdout, then stderr): what the user sees.
fn kubectl_as(
    cluster_dir: &Path,
    user: &str,
    args: &[&str],
    manifest: Option<&Value>,
) -> (bool, String) {
    use std::io::Write as _;
    let mut child = kubectl(cluster_dir)
        .arg(format!("--as={user}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(manifest) = manifest {
        stdin
            .write_all(manifest.to_string().as_bytes())
            .expect("writing the manifest to kubectl");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("kubectl runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A tenant with a namespaced Role (pods, their ephemeral containers, nothing else) tries to
/// get around the sidecar the way `kubectl` lets them, and the webhook refuses each attempt with
/// a message that says why and what to do: the agent container mounting the credentials, a pod
/// bringing its own mcp-sidecar, hostNetwork, `kubectl debug` with a container mounting the
/// credentials or targeting the sidecar, taking the label off a running agent, `kubectl exec`,
/// `cp` and `attach` into the sidecar and into a stdio server's container. Their ordinary
/// agent pod, as the apiserver stores it after every admission plugin, is admitted, and so are
/// a debugging container that targets the agent and an exec into the agent's own container.
#[tokio::test]
async fn a_tenant_cannot_get_around_the_sidecar() {
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("node-admission").await;
    let (client, ns, cluster_dir, node) = on.parts();
    let pause_image = node.pause_image.clone();
    let (_uninstall, fullname) = on.install_chart();

    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    let validations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    eventually(
        SOON,
        "the validating caBundle is the webhook Secret's CA",
        || async {
            let ca = secrets
                .get_opt(&format!("{fullname}-webhook-tls"))
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no webhook Secret")?
                .data
                .unwrap_or_default()
                .remove("ca.crt")
                .ok_or("no ca.crt")?;
            let config = validations
                .get(&fullname)
                .await
                .map_err(|e| e.to_string())?;
            let bundle = config.webhooks.unwrap_or_default()[0]
                .client_config
                .ca_bundle
                .clone();
            if bundle.as_ref() == Some(&ca) {
                Ok(())
            } else {
                Err("caBundle differs".to_string())
            }
        },
    )
    .await;

    // The platform's side: an McpServer whose bearer token is in a Secret, an AgentSpec using
    // it (the injected pod mounts that key in mcp-credentials), and the tenant's Role.
    let namespace = ns.name();
    for object in [
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "files-token", "namespace": namespace},
            "stringData": {"token": "not-for-the-agent"},
        }),
        serde_json::json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "files", "namespace": namespace},
            "spec": {
                // Optional, so the sidecar is ready (and the agent runs) while it is down.
                "optional": true,
                "url": "http://files.example/mcp",
                "credentials": {"bearerToken": {"secretKeyRef": {"name": "files-token", "key": "token"}}},
            },
        }),
        serde_json::json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
            "metadata": {"name": "bot", "namespace": namespace},
            "spec": {"servers": [{"name": "files"}]},
        }),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "tenant", "namespace": namespace},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"],
                 "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
                 "verbs": ["get", "update", "patch"]},
                {"apiGroups": [""], "resources": ["pods/exec", "pods/attach"],
                 "verbs": ["get", "create"]},
            ],
        }),
        // A stdio server of the platform's with a Secret in its environment: its pod holds
        // that Secret and the token the sidecars send (the server need not run for this: the
        // exec is judged before the kubelet is asked).
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "memory-key", "namespace": namespace},
            "stringData": {"key": "not-for-the-tenant"},
        }),
        serde_json::json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "memory", "namespace": namespace},
            "spec": {"stdio": {
                "image": pause_image, "command": ["/pause"],
                "env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "memory-key", "key": "key"}}}],
            }},
        }),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "tenant", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant@example"}],
        }),
    ] {
        e2e::apply(client, &object, namespace).await;
    }
    let tenant = "tenant@example";
    let pod = |name: &str, spec: Value| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {mcp_operator::inject::AGENT_LABEL: "bot"}},
            "spec": spec,
        })
    };
    let agent =
        serde_json::json!({"name": "agent", "image": pause_image, "imagePullPolicy": "Never"});
    let create = |manifest: &Value| {
        kubectl_as(
            cluster_dir,
            tenant,
            &["create", "-n", namespace, "-f", "-"],
            Some(manifest),
        )
    };
    // Where two of the operator's validating webhooks both refuse a request (the pod check and
    // the Secret guard judge the same mount), the apiserver reports whichever answered first:
    // any of the alternatives is the refusal the tenant may see.
    let refused = |what: &str, (ok, said): (bool, String), alternatives: &[(&str, &str)]| {
        eprintln!("e2e_node: {what}: the tenant sees: {}", said.trim());
        assert!(!ok, "{what} must be refused: {said}");
        assert!(
            alternatives
                .iter()
                .any(|(webhook, message)| said.contains(&format!(
                    "admission webhook \"{webhook}\" denied the request"
                )) && said.contains(message)),
            "{what}: {said}"
        );
    };
    const GUARD: (&str, &str) = (
        "secrets.pods.validate.mcp-operator.dev",
        "only the injected MCP sidecar may mount it",
    );

    // --- the tenant's ordinary agent pod: injected, and admitted as stored; its sidecar obeys
    // no signed document older than the one published when it was admitted, even before its
    // state holds one (a document put back in the ConfigMap is refused by a brand-new pod).
    let specs: Api<AgentSpec> = Api::namespaced(client.clone(), namespace);
    let published = eventually(
        SOON,
        "the AgentSpec's published grants sequence",
        || async {
            specs
                .get("bot")
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|s| s.grants_sequence)
                .ok_or_else(|| "no status.grantsSequence yet".to_string())
        },
    )
    .await;
    let (ok, said) = create(&pod(
        "agent",
        serde_json::json!({"containers": [agent], "terminationGracePeriodSeconds": 2}),
    ));
    assert!(ok, "the ordinary agent pod is admitted: {said}");

    // --- the agent container mounts the credentials the sidecar gets.
    let mut mounting = agent.clone();
    mounting["volumeMounts"] =
        serde_json::json!([{"name": "mcp-credentials", "mountPath": "/creds"}]);
    refused(
        "the agent container mounting mcp-credentials",
        create(&pod(
            "mounting",
            serde_json::json!({"containers": [mounting]}),
        )),
        &[
            (
                "pods.validate.mcp-operator.dev",
                "the container \"agent\" mounts the volume \"mcp-credentials\", which only the MCP sidecar may mount",
            ),
            GUARD,
        ],
    );

    // --- its own mcp-sidecar, which would skip the injection.
    refused(
        "a pod bringing its own mcp-sidecar",
        create(&pod(
            "own-sidecar",
            serde_json::json!({
                "initContainers": [{"name": "mcp-sidecar", "image": pause_image,
                                    "imagePullPolicy": "Never", "restartPolicy": "Always"}],
                "containers": [agent],
            }),
        )),
        &[(
            "inject.mcp-operator.dev",
            "differs from the one the operator injects now): the mcp-sidecar container is the operator's; remove it from the pod spec",
        )],
    );

    // --- hostNetwork: the sidecar's 127.0.0.1 listener would be the node's (refused by the
    // injection already; the validation would refuse it as stored).
    refused(
        "a hostNetwork pod",
        create(&pod(
            "host",
            serde_json::json!({"hostNetwork": true, "containers": [agent]}),
        )),
        &[("inject.mcp-operator.dev", "the pod sets hostNetwork: true")],
    );

    // --- kubectl debug on the running agent: a container mounting the credentials, through
    // the ephemeralcontainers subresource, and one sharing the sidecar's processes.
    let debug_patch = serde_json::json!({"spec": {"ephemeralContainers": [{
        "name": "debugger", "image": pause_image, "imagePullPolicy": "Never",
        "volumeMounts": [{"name": "mcp-credentials", "mountPath": "/creds"}],
    }]}});
    refused(
        "an ephemeral container mounting mcp-credentials",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "patch",
                "pod",
                "agent",
                "-n",
                namespace,
                "--subresource=ephemeralcontainers",
                "--type=strategic",
                "-p",
                &debug_patch.to_string(),
            ],
            None,
        ),
        &[
            (
                "pods.validate.mcp-operator.dev",
                "the ephemeral container \"debugger\" mounts the volume \"mcp-credentials\"",
            ),
            GUARD,
        ],
    );
    refused(
        "kubectl debug --target=mcp-sidecar",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "debug",
                "agent",
                "-n",
                namespace,
                "--image",
                &pause_image,
                "--image-pull-policy=Never",
                "--target=mcp-sidecar",
                "--container=peek",
            ],
            None,
        ),
        &[
            (
                "pods.validate.mcp-operator.dev",
                "the ephemeral container \"peek\" targets the mcp-sidecar container",
            ),
            GUARD,
        ],
    );
    let (ok, said) = kubectl_as(
        cluster_dir,
        tenant,
        &[
            "debug",
            "agent",
            "-n",
            namespace,
            "--image",
            &pause_image,
            "--image-pull-policy=Never",
            "--target=agent",
            "--container=look",
        ],
        None,
    );
    assert!(
        ok,
        "a debugging container targeting the agent is admitted: {said}"
    );

    // --- the label taken off (or changed on) the running agent.
    refused(
        "removing the agent label",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "label",
                "pod",
                "agent",
                "-n",
                namespace,
                "mcp-operator.dev/agent-",
            ],
            None,
        ),
        &[(
            "pods.validate.mcp-operator.dev",
            "the label mcp-operator.dev/agent cannot be added, changed or removed on an existing pod (it was \"bot\", the update makes it absent)",
        )],
    );
    let (ok, said) = kubectl_as(
        cluster_dir,
        tenant,
        &[
            "annotate",
            "pod",
            "agent",
            "-n",
            namespace,
            "note=still-updatable",
        ],
        None,
    );
    assert!(ok, "other updates of the agent pod are admitted: {said}");

    // --- exec, cp and attach into the sidecar, which holds the credentials and the state it
    // trusts; the agent's own container stays open to them.
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_condition(&pods, "agent", "Ready", "True", None, SOON).await;
    let floor: u64 = pods
        .get("agent")
        .await
        .expect("the agent pod")
        .spec
        .and_then(|s| s.init_containers)
        .into_iter()
        .flatten()
        .find(|c| c.name == "mcp-sidecar")
        .and_then(|c| c.args)
        .into_iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--grants-min-sequence=").map(str::to_owned))
        .expect("the sidecar has --grants-min-sequence")
        .parse()
        .expect("a number");
    let now = specs
        .get("bot")
        .await
        .unwrap()
        .status
        .unwrap()
        .grants_sequence
        .unwrap();
    assert!(
        (published..=now).contains(&floor),
        "the sidecar's floor {floor} is the published sequence of its admission ({published}..={now})"
    );
    const CONNECT: &str = "connect.pods.validate.mcp-operator.dev";
    refused(
        "kubectl exec into the mcp-sidecar",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "exec",
                "agent",
                "-n",
                namespace,
                "-c",
                "mcp-sidecar",
                "--",
                "/mcp-operator",
                "--version",
            ],
            None,
        ),
        &[(
            CONNECT,
            "exec into the mcp-sidecar container is refused: it holds the agent's MCP credentials",
        )],
    );
    let copied = on.scratch.path().join("copied");
    refused(
        "kubectl cp from the mcp-sidecar",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "cp",
                "-c",
                "mcp-sidecar",
                &format!("{namespace}/agent:/var/run/mcp-credentials"),
                copied.to_str().expect("a UTF-8 path"),
            ],
            None,
        ),
        &[(CONNECT, "exec into the mcp-sidecar container is refused")],
    );
    assert!(!copied.exists(), "nothing was copied out of the sidecar");
    refused(
        "kubectl attach to the mcp-sidecar",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "attach",
                "agent",
                "-n",
                namespace,
                "-c",
                "mcp-sidecar",
                "--pod-running-timeout=10s",
            ],
            None,
        ),
        &[(CONNECT, "attach to the mcp-sidecar container is refused")],
    );
    let (ok, said) = kubectl_as(
        cluster_dir,
        tenant,
        &[
            "exec", "agent", "-n", namespace, "-c", "agent", "--", "/pause", "-v",
        ],
        None,
    );
    assert!(
        ok,
        "exec into the agent's own container is admitted: {said}"
    );
    assert!(said.contains("pause"), "{said}");

    // --- exec into the stdio server's container, which has its Secret in its environment.
    let stdio_pod = eventually(SOON, "the stdio server's pod to exist", || async {
        pods.list(&ListParams::default().labels("mcp-operator.dev/mcpserver=memory"))
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .map(|p| p.name_any())
            .next()
            .ok_or_else(|| "no pod yet".to_string())
    })
    .await;
    refused(
        "kubectl exec into a stdio server's container",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "exec", &stdio_pod, "-n", namespace, "-c", "server", "--", "/pause", "-v",
            ],
            None,
        ),
        &[(
            CONNECT,
            "exec into the container \"server\" is refused: it holds the Secret \"memory-key\", the credential of the McpServer \"memory\"",
        )],
    );
    // The other doors to the same container: no container named (the only one is judged), and
    // attach.
    refused(
        "kubectl exec into a stdio server's pod, no container named",
        kubectl_as(
            cluster_dir,
            tenant,
            &["exec", &stdio_pod, "-n", namespace, "--", "/pause", "-v"],
            None,
        ),
        &[(CONNECT, "exec into the container \"server\" is refused")],
    );
    refused(
        "kubectl attach to a stdio server's container",
        kubectl_as(
            cluster_dir,
            tenant,
            &[
                "attach",
                &stdio_pod,
                "-n",
                namespace,
                "-c",
                "server",
                "--pod-running-timeout=10s",
            ],
            None,
        ),
        &[(CONNECT, "attach to the container \"server\" is refused")],
    );

    let names: Vec<String> = pods
        .list(&ListParams::default().labels(mcp_operator::inject::AGENT_LABEL))
        .await
        .expect("listing pods")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names, ["agent"], "no refused agent pod was stored");

    // --- the agent pod copied whole, its sidecar's --grants-min-sequence lowered to 0 (the
    // door to obeying an older signed document in a new pod): the injection raises it back.
    let mut copied = serde_json::to_value(pods.get("agent").await.expect("the agent pod")).unwrap();
    let spec = copied["spec"].as_object_mut().expect("a spec");
    for field in ["nodeName", "ephemeralContainers", "priority"] {
        spec.remove(field);
    }
    for c in spec["initContainers"]
        .as_array_mut()
        .expect("init containers")
    {
        if c["name"] == "mcp-sidecar" {
            for a in c["args"].as_array_mut().expect("args") {
                if a.as_str()
                    .is_some_and(|a| a.starts_with("--grants-min-sequence="))
                {
                    *a = "--grants-min-sequence=0".into();
                }
            }
        }
    }
    let copy = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "copied", "namespace": namespace,
                     "labels": {mcp_operator::inject::AGENT_LABEL: "bot"}},
        "spec": copied["spec"],
    });
    let (ok, said) = create(&copy);
    assert!(
        ok,
        "the copied pod is admitted, with its floor raised: {said}"
    );
    let floor: u64 = pods
        .get("copied")
        .await
        .expect("the copied pod")
        .spec
        .and_then(|s| s.init_containers)
        .into_iter()
        .flatten()
        .find(|c| c.name == "mcp-sidecar")
        .and_then(|c| c.args)
        .into_iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--grants-min-sequence=").map(str::to_owned))
        .expect("the copied sidecar has --grants-min-sequence")
        .parse()
        .expect("a number");
    assert!(
        floor >= published,
        "the copied sidecar's floor {floor} was raised to the published sequence ({published})"
    );
}

/// The tenant policy as a control, told once on the real node against the chart's in-cluster
/// controller: a platform caps the server `files` at read for a tenant's namespace (and denies
/// deletes on servers labelled tier=admin); the tenant — a user with a namespaced Role over its
/// McpServers, AgentSpecs, ConfigMaps and Pods, nothing else — runs an agent pod and then tries,
/// one after the other, to widen what it may call: an override that lowers `write_file` to read,
/// the label that picks the permissive rule, the grants ConfigMap edited by hand, and at last
/// deleting its AgentSpec while the agent keeps running. The agent (the official Python SDK
/// client through `kubectl port-forward` to its injected sidecar) never lists or calls more than
/// `read_file`, the operator says why in the AgentSpec's status and an Event, and the delete
/// leaves the running agent with nothing callable.
#[tokio::test]
async fn a_tenant_cannot_widen_what_its_running_agent_may_call() {
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("node-story").await;
    let (client, ns, cluster_dir, node) = on.parts();
    let tenant_ns = e2e::TestNamespace::create(client, "node-story-tenant").await;
    let namespace = tenant_ns.name();
    let pause_image = node.pause_image.clone();
    let (_uninstall, _fullname) =
        install_chart_watching(ns, namespace, &on.repository, &on.tag, &on.kubeconfig);

    // --- the platform's side: the server, the policy, the tenant's Role.
    let fixtures = Fixtures::load();
    let files = fixtures.sdk_server(&["--host", &node.ip]);
    Api::<Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {TENANT_LABEL: namespace}}})),
        )
        .await
        .expect("labelling the tenant's namespace");
    let policy_name = tenant_ns.scoped_name("files-read-only");
    tenant_ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);
    for (object, ns) in [
        (
            serde_json::json!({
                "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpTenantPolicy",
                "metadata": {"name": policy_name},
                "spec": {"namespaceSelector": {"matchLabels": {TENANT_LABEL: namespace}},
                         "rules": [{"servers": {"names": ["files"]}, "maxAccess": "read"},
                                   {"servers": {"selector": {"matchLabels": {"tier": "admin"}}},
                                    "deny": ["delete_*"], "requireApprovalFor": "read"}]},
            }),
            None,
        ),
        (
            serde_json::json!({
                "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
                "metadata": {"name": "files", "namespace": namespace},
                "spec": {"url": files.url},
            }),
            Some(namespace),
        ),
    ] {
        e2e::write(client, e2e::Write::ServerSideApply, &object, ns, false)
            .await
            .unwrap_or_else(|e| panic!("applying {object}: {}", e2e::describe(&e)));
    }
    const TENANT: &str = "story-tenant@example";
    e2e::grant_role(
        client,
        namespace,
        "tenant",
        TENANT,
        serde_json::json!([
            {"apiGroups": ["mcp-operator.dev"], "resources": ["mcpservers", "agentspecs"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps", "pods"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["get", "create"]},
        ]),
    )
    .await;
    let tenant = |args: &[&str], manifest: Option<&Value>| {
        let mut all = vec!["-n", namespace];
        all.extend_from_slice(args);
        let (ok, said) = kubectl_as(cluster_dir, TENANT, &all, manifest);
        assert!(ok, "the tenant's kubectl {args:?}: {said}");
        said
    };

    // --- the tenant's agent: its AgentSpec and a pod labelled for it.
    tenant(
        &["apply", "-f", "-"],
        Some(&serde_json::json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
            "metadata": {"name": "bot"},
            "spec": {"servers": [{"name": "files"}]},
        })),
    );
    let specs: Api<AgentSpec> = Api::namespaced(client.clone(), namespace);
    let granted_tools = |spec: &AgentSpec| spec.status.as_ref().and_then(|s| s.granted_tools);
    eventually(SOON, "the AgentSpec's grants published", || async {
        let spec = specs.get("bot").await.map_err(|e| e.to_string())?;
        match granted_tools(&spec) {
            Some(1) => Ok(()),
            other => Err(format!("granted {other:?}: {:?}", spec.status)),
        }
    })
    .await;
    let agent = serde_json::to_value(agent_pod(
        "agent",
        Some("bot"),
        serde_json::json!({"name": "agent", "image": pause_image, "imagePullPolicy": "Never"}),
        "Always",
    ))
    .expect("a pod manifest");
    tenant(&["create", "-f", "-"], Some(&agent));
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_condition(&pods, "agent", "Ready", "True", None, SOON).await;
    let forward = PortForward::start(cluster_dir, namespace, "agent", 9500);
    let only_read = || async {
        let out = sidecar_support::agent(
            &forward.url,
            "auto",
            serde_json::json!([
                {"op": "list"},
                {"op": "call", "name": "files__write_file", "arguments": {"path": "/notes"}},
            ]),
        )
        .await;
        let listed = sidecar_support::names(&out["steps"][0]);
        assert_eq!(
            listed,
            ["files__read_file"],
            "the agent lists only read_file: {out}"
        );
        assert_eq!(out["steps"][1]["isError"], true, "{out}");
        assert!(
            out["steps"][1]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("is not granted to this agent"),
            "write_file is refused by the sidecar: {out}"
        );
    };
    only_read().await;

    // --- 1. an override that lowers write_file to read: not applied under the policy, and
    // the AgentSpec says why.
    tenant(
        &[
            "patch",
            "mcpserver",
            "files",
            "--type=merge",
            "-p",
            r#"{"spec": {"tools": {"overrides": {"write_file": "read", "put_object": "read"}}}}"#,
        ],
        None,
    );
    let said = eventually(
        SOON,
        "the AgentSpec to say the override is not applied",
        || async {
            let spec = specs.get("bot").await.map_err(|e| e.to_string())?;
            let text = serde_json::to_string(&spec.status).unwrap_or_default();
            if text.contains("OverrideNotApplied") {
                Ok(text)
            } else {
                Err(text)
            }
        },
    )
    .await;
    eprintln!("e2e_node: story 1, the override: the AgentSpec's status says: {said}");
    only_read().await;

    // --- 2. the label that picks the permissive rule: rules bound, they do not add up.
    tenant(&["label", "mcpserver", "files", "tier=admin"], None);
    // The rule the label picks is seen (it adds its approval to read_file) and adds no tool.
    let grants_name = grants_config_map_name("bot");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    eventually(SOON, "the labelled rule bounding files too", || async {
        let cm = config_maps
            .get(&grants_name)
            .await
            .map_err(|e| e.to_string())?;
        let doc: Value = serde_json::from_str(&cm.data.unwrap_or_default()["grants.json"])
            .map_err(|e| e.to_string())?;
        let tools = doc["servers"][0]["tools"].clone();
        match tools.as_array().map(Vec::as_slice) {
            Some([only])
                if only["qualifiedName"] == "files__read_file"
                    && only["requiresApproval"] == true =>
            {
                Ok(())
            }
            _ => Err(format!("{tools}")),
        }
    })
    .await;
    assert_eq!(
        granted_tools(&specs.get("bot").await.unwrap()),
        Some(1),
        "a label never widens the grants"
    );
    only_read().await;

    // --- 3. the grants ConfigMap edited by hand: write_file added as the tenant would. The
    // sidecar never obeys it (not signed), the operator puts it back and says so.
    let cm = config_maps
        .get(&grants_name)
        .await
        .expect("the grants ConfigMap");
    let original = cm.data.clone().unwrap_or_default()["grants.json"].clone();
    let mut widened: Value = serde_json::from_str(&original).expect("grants.json");
    let mut write = widened["servers"][0]["tools"][0].clone();
    write["qualifiedName"] = "files__write_file".into();
    write["name"] = "write_file".into();
    write["access"] = "write".into();
    widened["servers"][0]["tools"]
        .as_array_mut()
        .expect("tools")
        .push(write);
    let patch = serde_json::json!({"data": {"grants.json": widened.to_string()}});
    tenant(
        &[
            "patch",
            "configmap",
            &grants_name,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    let edited = Instant::now();
    let restored = eventually(SOON, "the signed grants put back", || async {
        let now = config_maps
            .get(&grants_name)
            .await
            .map_err(|e| e.to_string())?;
        let json = now.data.unwrap_or_default()["grants.json"].clone();
        if json == original {
            Ok(edited.elapsed())
        } else {
            Err("still the tenant's edit".to_string())
        }
    })
    .await;
    let tampered = eventually(SOON, "a GrantsTampered event", || async {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), namespace);
        events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("GrantsTampered"))
            .and_then(|e| e.note)
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    eprintln!(
        "e2e_node: story 3, the hand edit: put back {:.1}s later; the Event says: {tampered}",
        restored.as_secs_f64()
    );
    // Whether or not the kubelet delivered the edit to the pod meanwhile, the sidecar obeys
    // only what the operator signed.
    for _ in 0..5 {
        only_read().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // --- 4. the AgentSpec deleted while its agent runs: the signed revoked grants reach the
    // running pod, which then has nothing callable, saying why.
    tenant(&["delete", "agentspec", "bot", "--wait=false"], None);
    let deleted = Instant::now();
    let revoked = eventually(
        Duration::from_secs(180),
        "the running agent's grants revoked",
        || async {
            let out = sidecar_support::agent(
                &forward.url,
                "auto",
                serde_json::json!([
                    {"op": "list"},
                    {"op": "call", "name": "files__read_file", "arguments": {"path": "/notes"}},
                ]),
            )
            .await;
            let text = out["steps"][1]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if sidecar_support::names(&out["steps"][0]).is_empty() && text.contains("revoked") {
                Ok(text)
            } else {
                Err(format!("{out}"))
            }
        },
    )
    .await;
    eprintln!(
        "e2e_node: story 4, the delete: the running agent had nothing callable {:.1}s later; a call is answered: {revoked}",
        deleted.elapsed().as_secs_f64()
    );
    // The finalizer lets the AgentSpec go once the revocation has had its time (while the
    // operator still runs: after the uninstall nobody would remove it).
    eventually(Duration::from_secs(180), "the AgentSpec gone", || async {
        match specs.get_opt("bot").await {
            Ok(None) => Ok(()),
            other => Err(format!(
                "{:?}",
                other.map(|s| s.map(|s| s.metadata.finalizers))
            )),
        }
    })
    .await;
}
