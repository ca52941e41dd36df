//! Data-plane faults on the real node: an agent pod (the official TypeScript SDK client, a
//! legacy-era session) calls a granted, non-idempotent tool once every 200 ms through its
//! injected sidecar while, one after the other, the sidecar is SIGKILLed, OOM-killed (its
//! memory cgroup's limit lowered under a 4 MiB request), killed while its grants change, and the
//! kubelet is restarted. After each, the agent's calls succeed again on the same session without
//! it reconnecting; the upstream fixture ran no call twice and every call the agent saw succeed
//! exactly once; every call that reached a sidecar that was back succeeded (the others found
//! nothing listening: the kubelet's restart back-off decides for how long). How long the agent
//! saw errors around each fault is printed (`fault figures:`), never asserted as a time.
//!
//! ```text
//! agent pod ─ ts_client.mjs loop ─► 127.0.0.1:9500 mcp-sidecar (native sidecar) ─► files (SDK fixture, node IP)
//!     faults: kill -9 <sidecar pid> · memory.limit_in_bytes + 4 MiB POST (nsenter) · kill -9 + AgentSpec patch
//!             · kubelet SIGTERM and started again with its own command line
//! ```
//!
//! Also: the operator's webhook replicas SIGKILLed again and again during a burst of labelled
//! pod creations — every pod stored has its sidecar, the others are refused with the reason.
//!
//! Left: the Python SDK client in a pod (the node image has no Python; the loopback tests in
//! `sidecar_restarts` run it), and containerd restarted.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcp_operator::api::agent_spec::AgentSpec;
use serde_json::{Value, json};

use crate::e2e;
use crate::e2e_node::{
    Node, ONE_RELEASE, TS_CLIENT, agent_pod, container_log, container_pid, install_chart, kubectl,
    node, node_image, operator_image, pod_finished, pod_ready, run, running_pods,
};
use crate::operator::eventually;
use crate::sidecar_support::{http, json_of};
use crate::support::Fixtures;

const SIDECAR: &str = mcp_operator::inject::SIDECAR_CONTAINER;

/// The sidecar container of `pod`: its container id and restart count.
async fn sidecar_status(pods: &Api<Pod>, pod: &str) -> (String, i32, bool) {
    let pod = pods.get(pod).await.expect("the agent pod");
    let status = pod
        .status
        .and_then(|s| s.init_container_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|s| s.name == SIDECAR)
        .expect("the sidecar's status");
    (
        status
            .container_id
            .unwrap_or_default()
            .trim_start_matches("containerd://")
            .to_string(),
        status.restart_count,
        status.ready,
    )
}

/// The host pid of a container, from the node's CRI.
fn pid_of(node: &Node, container: &str) -> u32 {
    let inspect = run(Command::new(&node.crictl)
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", node.containerd))
        .args(["inspect", container]));
    let inspect: Value = serde_json::from_str(&inspect).expect("crictl inspect prints JSON");
    inspect["info"]["pid"].as_u64().expect("a pid") as u32
}

/// Waits until the sidecar has restarted `after` times and is ready again; returns how long.
async fn back(pods: &Api<Pod>, pod: &str, restarts: i32) -> Duration {
    let since = Instant::now();
    loop {
        let (_, count, ready) = sidecar_status(pods, pod).await;
        if count >= restarts && ready {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(90),
            "the sidecar is not back after 90s (restarts {count})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Calls the agent has logged so far (`{"call": i, "ok": …}` lines).
fn calls_logged(cluster_dir: &Path, ns: &str, pod: &str) -> Vec<Value> {
    container_log(cluster_dir, ns, pod, "agent")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("call").is_some())
        .collect()
}

/// Waits until the agent has made `n` more calls than `from`.
async fn calls_after(cluster_dir: &Path, ns: &str, pod: &str, from: usize, n: usize) -> usize {
    let since = Instant::now();
    loop {
        let logged = calls_logged(cluster_dir, ns, pod).len();
        if logged >= from + n {
            return logged;
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the agent made {logged} calls, waited for {}",
            from + n
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The kubelet of the node: SIGTERM, then started again with the same command line (as a
/// supervisor restarts it), its log appended where node.sh keeps it.
fn restart_kubelet(cluster_dir: &Path) {
    let pids = std::fs::read_to_string(cluster_dir.join("node/pids")).expect("node/pids");
    let pid = pids
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(n, _)| *n == "kubelet")
        .filter_map(|(_, p)| p.trim().parse::<u32>().ok())
        .rfind(|p| Path::new(&format!("/proc/{p}")).exists())
        .expect("a running kubelet");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("its command line");
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    run(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let since = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the kubelet did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(cluster_dir.join("node/logs/kubelet.log"))
        .expect("the kubelet log");
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("the kubelet starts again");
    // node.sh takes it down with the node.
    let mut pids_file = std::fs::OpenOptions::new()
        .append(true)
        .open(cluster_dir.join("node/pids"))
        .unwrap();
    use std::io::Write as _;
    writeln!(pids_file, "kubelet {}", child.id()).unwrap();
    std::mem::forget(child);
}

/// Lowers the sidecar's memory limit to a little above what it uses, then sends it a 4 MiB
/// request (it reads a body whole, up to --max-request-bytes): the kernel's OOM killer ends it,
/// as it would a sidecar whose limit is too low. Returns what the memory cgroup said.
fn oom_kill(pid: u32) -> String {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroups");
    let path = cgroups
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        })
        .expect("a memory cgroup (v1)");
    let dir = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
    let usage: u64 = std::fs::read_to_string(dir.join("memory.usage_in_bytes"))
        .expect("memory.usage_in_bytes")
        .trim()
        .parse()
        .unwrap();
    let limit = usage + 1024 * 1024;
    std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())
        .expect("lowering memory.limit_in_bytes");
    let body = dir.join("..").join("oom-body");
    let _ = body;
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(4 * 1024 * 1024 - 16));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), big).unwrap();
    let _ = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["curl", "-s", "-m", "10", "-o", "/dev/null", "-X", "POST"])
        .args(["-H", "content-type: application/json"])
        .arg("--data-binary")
        .arg(format!("@{}", file.path().display()))
        .arg("http://127.0.0.1:9500/mcp")
        .stdin(Stdio::null())
        .output()
        .expect("nsenter and curl run");
    let failcnt = std::fs::read_to_string(dir.join("memory.failcnt")).unwrap_or_default();
    format!(
        "usage {usage} B, limit set to {limit} B, failcnt {}",
        failcnt.trim()
    )
}

/// Windows of consecutive failed calls: (first index, last index, ms from the first failure to
/// the next success).
fn error_windows(calls: &[Value]) -> Vec<(usize, usize, u64)> {
    let mut windows = vec![];
    let mut i = 0;
    while i < calls.len() {
        if calls[i]["ok"] == true {
            i += 1;
            continue;
        }
        let start = i;
        while i < calls.len() && calls[i]["ok"] != true {
            i += 1;
        }
        let end_at = calls
            .get(i)
            .and_then(|c| c["at"].as_u64())
            .unwrap_or_else(|| calls[i - 1]["at"].as_u64().unwrap());
        windows.push((start, i - 1, end_at - calls[start]["at"].as_u64().unwrap()));
    }
    windows
}

#[tokio::test]
async fn an_agent_keeps_calling_through_sidecar_kills_an_oom_kill_and_a_kubelet_restart() {
    let _one = ONE_RELEASE.lock().await;
    let (client, ns) = e2e::setup("node-faults").await;
    let kubeconfig = e2e::kubeconfig_path().await;
    let cluster_dir = kubeconfig.parent().expect("the cluster dir").to_path_buf();
    let node = node(&cluster_dir);
    let scratch = tempfile::tempdir().expect("a temp dir");
    let (repository, tag) = operator_image(&cluster_dir, scratch.path());
    let (_uninstall, _fullname) = install_chart(&ns, &repository, &tag, &kubeconfig);
    let node_image = {
        let (repository, tag) = node_image(&cluster_dir, scratch.path());
        format!("{repository}:{tag}")
    };

    let files = Fixtures::load().sdk_server(&["--host", &node.ip]);
    let server = json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
        "metadata": {"name": "files", "namespace": ns.name()},
        "spec": {"url": files.url},
    });
    e2e::write(
        &client,
        e2e::Write::ServerSideApply,
        &server,
        Some(ns.name()),
        false,
    )
    .await
    .unwrap_or_else(|e| panic!("applying the McpServer: {}", e2e::describe(&e)));
    let spec = json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
        "metadata": {"name": "looper", "namespace": ns.name()},
        "spec": {"approval": "none", "servers": [{"name": "files", "allow": ["write_file"]}]},
    });
    e2e::write(
        &client,
        e2e::Write::ServerSideApply,
        &spec,
        Some(ns.name()),
        false,
    )
    .await
    .unwrap_or_else(|e| panic!("applying the AgentSpec: {}", e2e::describe(&e)));
    let specs: Api<AgentSpec> = Api::namespaced(client.clone(), ns.name());
    e2e::wait_condition(
        &specs,
        "looper",
        "Ready",
        "True",
        None,
        Duration::from_secs(60),
    )
    .await;

    // ~60 s of calls, one every 200 ms, each printed as it ends.
    let count = 300;
    let steps = json!([{"op": "loop", "name": "files__write_file", "arguments": {"path": "/loop"},
                        "numbered": true, "count": count, "intervalMs": 200, "timeout": 5, "log": true}]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    pods.create(
        &PostParams::default(),
        &agent_pod(
            "looper",
            Some("looper"),
            json!({"name": "agent", "image": node_image, "imagePullPolicy": "Never",
                   "args": [TS_CLIENT, "$(MCP_SERVER_URL)", steps.to_string()]}),
            "Never",
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("creating the agent pod: {}", e2e::describe(&e)));
    eventually(Duration::from_secs(90), "the agent pod Ready", || async {
        let pod = pods.get("looper").await.map_err(|e| e.to_string())?;
        if pod_ready(&pod) {
            Ok(())
        } else {
            Err(format!("{:?}", pod.status))
        }
    })
    .await;
    let mut seen = calls_after(&cluster_dir, ns.name(), "looper", 0, 10).await;
    let mut faults: Vec<(String, usize, Duration)> = vec![];

    // 1. SIGKILL.
    let (container, restarts, _) = sidecar_status(&pods, "looper").await;
    let pid = pid_of(&node, &container);
    run(Command::new("kill").args(["-KILL", &pid.to_string()]));
    let took = back(&pods, "looper", restarts + 1).await;
    faults.push(("sidecar SIGKILLed".into(), seen, took));
    seen = calls_after(&cluster_dir, ns.name(), "looper", seen, 15).await;

    // 2. OOM kill.
    let (container, restarts, _) = sidecar_status(&pods, "looper").await;
    let pid = pid_of(&node, &container);
    let said = oom_kill(pid);
    let took = back(&pods, "looper", restarts + 1).await;
    let reason = pods
        .get("looper")
        .await
        .unwrap()
        .status
        .and_then(|s| s.init_container_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|s| s.name == SIDECAR)
        .and_then(|s| s.last_state)
        .and_then(|s| s.terminated)
        .map(|t| t.reason.unwrap_or_default())
        .unwrap_or_default();
    eprintln!("fault figures: OOM kill: {said}; the kubelet reports {reason:?}");
    faults.push((format!("sidecar OOM-killed ({reason})"), seen, took));
    seen = calls_after(&cluster_dir, ns.name(), "looper", seen, 15).await;

    // 3. A grants update landing while the sidecar restarts: read_file granted too.
    let (container, restarts, _) = sidecar_status(&pods, "looper").await;
    let pid = pid_of(&node, &container);
    run(Command::new("kill").args(["-KILL", &pid.to_string()]));
    specs
        .patch(
            "looper",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"servers": [{"name": "files", "allow": ["write_file", "read_file"]}]}})),
        )
        .await
        .expect("patching the AgentSpec");
    let took = back(&pods, "looper", restarts + 1).await;
    faults.push((
        "sidecar SIGKILLed during a grants update".into(),
        seen,
        took,
    ));
    seen = calls_after(&cluster_dir, ns.name(), "looper", seen, 15).await;

    // 4. The kubelet restarted while the agent calls.
    let since = Instant::now();
    restart_kubelet(&cluster_dir);
    eventually(Duration::from_secs(60), "the node Ready again", || async {
        let out = kubectl(&cluster_dir)
            .args([
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if text.split_whitespace().all(|s| s == "True") && !text.is_empty() {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    faults.push(("kubelet restarted".into(), seen, since.elapsed()));

    // The rest of the loop, then the whole output.
    let status = pod_finished(&pods, "looper", Duration::from_secs(120)).await;
    let log = container_log(&cluster_dir, ns.name(), "looper", "agent");
    let out: Value = log
        .lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(|v| v.get("steps").is_some())
        })
        .unwrap_or_else(|| panic!("the agent printed no result ({status}): {log}"));
    let calls = out["steps"][0]["calls"]
        .as_array()
        .expect("the loop's calls")
        .clone();
    assert_eq!(calls.len(), count, "{out}");

    // Nothing ran twice; every call the agent saw succeed ran exactly once.
    let mut u = url::Url::parse(&files.url).unwrap();
    u.set_path("/control/call-args");
    let ran = json_of(http().get(u).send().await.unwrap()).await;
    let mut numbers = std::collections::BTreeSet::new();
    for c in ran["calls"].as_array().unwrap() {
        if let Some(n) = c["arguments"]["n"].as_u64() {
            assert!(numbers.insert(n), "call {n} ran twice");
        }
    }
    for (i, c) in calls.iter().enumerate() {
        if c["ok"] == true {
            assert!(
                numbers.contains(&(i as u64)),
                "call {i} succeeded but never ran"
            );
        }
    }

    // Errors only around the faults, and the calls after the last fault all succeed.
    let windows = error_windows(&calls);
    for (label, at, took) in &faults {
        let window = windows
            .iter()
            .find(|(s, e, _)| *e + 1 >= *at && *s <= at + 30);
        match window {
            Some((s, e, ms)) => eprintln!(
                "fault figures: {label}: calls {s}..={e} failed ({} calls), the agent saw errors for {ms} ms; the sidecar was back (Ready) {:.1}s after the fault",
                e - s + 1,
                took.as_secs_f64()
            ),
            None => eprintln!(
                "fault figures: {label}: no call failed; back (Ready) after {:.1}s",
                took.as_secs_f64()
            ),
        }
    }
    // While the sidecar is down the agent's calls find nothing listening ("fetch failed"): the
    // kubelet's restart back-off (it grows with each crash of the container) decides how long,
    // not the sidecar. Every call that reaches a sidecar that is back succeeds: in each window
    // at most one call (the one in flight at the kill) failed otherwise.
    for (s, e, _) in &windows {
        assert!(
            faults
                .iter()
                .any(|(_, at, _)| *e + 1 >= *at && *s <= at + 30),
            "calls {s}..={e} failed away from any fault: {:?}",
            &calls[*s..=*e]
        );
        let answered: Vec<&Value> = calls[*s..=*e]
            .iter()
            .filter(|c| !c["error"].as_str().unwrap_or("").contains("fetch failed"))
            .collect();
        assert!(
            answered.len() <= 1,
            "calls {s}..={e}: a sidecar that was back answered with an error: {answered:?}"
        );
    }
    let last_fault = faults.last().map(|(_, at, _)| *at).unwrap();
    assert!(
        calls[(last_fault + 30).min(calls.len())..]
            .iter()
            .all(|c| c["ok"] == true),
        "a call after recovery failed: {out}"
    );
    let errors: std::collections::BTreeSet<&str> =
        calls.iter().filter_map(|c| c["error"].as_str()).collect();
    eprintln!(
        "fault figures: {} calls, {} failed, upstream ran {}; errors the agent saw: {errors:?}",
        calls.len(),
        calls.iter().filter(|c| c["ok"] != true).count(),
        numbers.len()
    );
    let sidecar_log = container_log(&cluster_dir, ns.name(), "looper", SIDECAR);
    assert!(
        sidecar_log.contains("tools=2") || sidecar_log.contains("\"tools\":2"),
        "the restarted sidecar never offered the updated grants:\n{sidecar_log}"
    );
}

/// The operator's webhook replicas (both serve admission) SIGKILLed one after the other, again
/// and again, while 4 clients create 40 labelled pods: every pod the apiserver stores carries
/// the operator's sidecar — failurePolicy Fail refuses the creations no replica answered, with
/// the apiserver's reason — and once a replica is back a creation is admitted again. How many
/// were admitted and refused, and for what, is printed.
#[tokio::test]
async fn webhook_replicas_killed_during_a_burst_never_let_a_pod_in_without_its_sidecar() {
    let _one = ONE_RELEASE.lock().await;
    let (client, ns) = e2e::setup("webhook-kills").await;
    let kubeconfig = e2e::kubeconfig_path().await;
    let cluster_dir = kubeconfig.parent().expect("the cluster dir").to_path_buf();
    let node = node(&cluster_dir);
    let scratch = tempfile::tempdir().expect("a temp dir");
    let (repository, tag) = operator_image(&cluster_dir, scratch.path());
    let image = format!("{repository}:{tag}");
    let (_uninstall, _fullname) = install_chart(&ns, &repository, &tag, &kubeconfig);
    for object in [
        // Optional and unreachable: the pods need not run, only be admitted.
        json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "files", "namespace": ns.name()},
            "spec": {"url": "http://files.example/mcp", "optional": true},
        }),
        json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
            "metadata": {"name": "bot", "namespace": ns.name()},
            "spec": {"servers": [{"name": "files"}]},
        }),
    ] {
        e2e::write(
            &client,
            e2e::Write::ServerSideApply,
            &object,
            Some(ns.name()),
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("applying {object}: {}", e2e::describe(&e)));
    }
    let specs: Api<AgentSpec> = Api::namespaced(client.clone(), ns.name());
    eventually(
        Duration::from_secs(60),
        "the AgentSpec's grants published",
        || async {
            specs
                .get("bot")
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|s| s.grants_sequence)
                .map(|_| ())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let replicas = format!("app.kubernetes.io/instance={}", ns.name());
    let container = json!({"name": "agent", "image": image, "imagePullPolicy": "Never",
                           "command": ["/mcp-operator", "--version"]});

    // The killer: every 1.5 s, SIGKILL the container of one Ready replica (the kubelet
    // restarts it, with its back-off), until the burst is over.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (done, pods, node) = (done.clone(), pods.clone(), node.clone());
        let replicas = replicas.clone();
        tokio::spawn(async move {
            let mut kills = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(ready) = running_pods(&pods, &replicas).await
                    && let Some(victim) = ready.get(kills as usize % ready.len().max(1))
                {
                    let pid = container_pid(&node, victim);
                    if Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status()
                        .is_ok()
                    {
                        kills += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
            kills
        })
    };
    let started = Instant::now();
    let mut creators = Vec::new();
    for c in 0..4 {
        let (pods, container) = (pods.clone(), container.clone());
        creators.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for i in 0..10 {
                let name = format!("burst-{c}-{i}");
                let pod = agent_pod(&name, Some("bot"), container.clone(), "Never");
                results.push((name, pods.create(&PostParams::default(), &pod).await));
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            results
        }));
    }
    let mut admitted = 0;
    let mut refused: std::collections::BTreeMap<String, u32> = Default::default();
    for creator in creators {
        for (name, result) in creator.await.expect("a creator") {
            match result {
                Ok(pod) => {
                    admitted += 1;
                    let has_sidecar = pod
                        .spec
                        .and_then(|s| s.init_containers)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.name == SIDECAR);
                    assert!(has_sidecar, "the pod {name} was stored without its sidecar");
                }
                Err(e) => {
                    let said = e2e::describe(&e);
                    let class = if said.contains("failed calling webhook") {
                        "no replica answered (failed calling webhook)"
                    } else if said.contains("denied the request") {
                        "refused by the webhook"
                    } else {
                        "other"
                    };
                    assert_ne!(class, "other", "the pod {name}: {said}");
                    *refused.entry(class.to_string()).or_default() += 1;
                }
            }
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let kills = killer.await.expect("the killer");
    assert!(
        kills > 0,
        "no webhook replica was killed during the burst: nothing was tried"
    );
    let burst = started.elapsed();
    // What the apiserver holds, read back: no labelled pod without the sidecar.
    let stored = pods
        .list(&kube::api::ListParams::default().labels(mcp_operator::inject::AGENT_LABEL))
        .await
        .expect("listing the pods");
    for pod in &stored.items {
        let spec = pod.spec.as_ref().expect("a spec");
        assert!(
            spec.init_containers
                .iter()
                .flatten()
                .any(|c| c.name == SIDECAR),
            "{:?} is stored without its sidecar",
            pod.metadata.name
        );
    }
    assert_eq!(
        stored.items.len(),
        admitted,
        "every stored pod was one the apiserver admitted"
    );
    // Back: a replica Ready again admits (and injects) the next pod.
    let recovered = Instant::now();
    eventually(
        Duration::from_secs(180),
        "a pod admitted after the kills",
        || async {
            let pod = agent_pod("after", Some("bot"), container.clone(), "Never");
            match pods.create(&PostParams::default(), &pod).await {
                Ok(p) => {
                    let injected = p
                        .spec
                        .and_then(|s| s.init_containers)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.name == SIDECAR);
                    assert!(
                        injected,
                        "the pod after the kills was stored without its sidecar"
                    );
                    Ok(())
                }
                Err(e) => Err(e2e::describe(&e)),
            }
        },
    )
    .await;
    eprintln!(
        "fault figures: webhook replicas SIGKILLed {kills} times over a {:.1}s burst of 40 labelled pod creations: {admitted} admitted, each with its sidecar; refused: {refused:?}; the next creation was admitted {:.1}s after the burst",
        burst.as_secs_f64(),
        recovered.elapsed().as_secs_f64()
    );
}
