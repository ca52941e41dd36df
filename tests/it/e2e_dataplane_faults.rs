//! Data-plane faults on the real node: agent pods call a granted, non-idempotent tool once every
//! 200 ms through their injected sidecars while the sidecar is SIGKILLed, OOM-killed (its memory
//! cgroup's limit lowered under a 4 MiB request), killed while its grants change, stopped
//! (SIGSTOP) until its liveness probe fails and the kubelet restarts it, and while the kubelet
//! and containerd are restarted. The agents speak both eras: the official TypeScript SDK client
//! (a legacy session) and a modern-era (2026-07-28) Node agent (tests/fixtures/modern_client.mjs:
//! the pinned TypeScript SDK speaks only the legacy eras and the node image has no Python).
//!
//! Judged as a user would: at most the calls in flight while the sidecar was gone fail, every
//! call sent once the sidecar serves again succeeds (the agent never reconnects: the legacy
//! client keeps its session, the modern one has none), the upstream fixture ran no call twice
//! and every call the agent saw succeed exactly once. How long the agent saw errors and how
//! soon after the sidecar's restart its first call succeeded are printed (`fault figures:`),
//! never asserted as times.
//!
//! ```text
//! agent pod ─ ts_client.mjs | modern_client.mjs loop ─► 127.0.0.1:9500 mcp-sidecar (native sidecar) ─► files (SDK fixture, node IP)
//!     faults: kill -9 <sidecar pid> · memory.limit_in_bytes + 4 MiB POST (nsenter) · kill -9 + AgentSpec patch
//!             · kill -STOP (liveness probe fails, the kubelet restarts it)
//!             · kubelet, containerd: SIGTERM and started again with their own command lines
//! ```
//!
//! The time the sidecar serves again is its own log line ("serving agents at …"), against the
//! agents' wall clock (`t` of each call): the node, its pods and this test share one machine.
//!
//! Also: the operator's webhook replicas SIGKILLed again and again during a burst of labelled
//! pod creations — every pod stored has its sidecar, the others are refused with the reason.
//!
//! Left: the Python SDK client in a pod (the node image has no Python; the loopback tests in
//! `sidecar_restarts` run it in both eras).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcp_operator::api::agent_spec::AgentSpec;
use serde_json::{Value, json};

use crate::e2e;
use crate::e2e_node::{
    MODERN_CLIENT, Node, ONE_RELEASE, TS_CLIENT, Uninstall, agent_pod, container_log,
    container_pid, kubectl, node_image, on_node, pod_finished, pod_ready, run, running_pods,
};
use crate::operator::eventually;
use crate::sidecar_support::{http, json_of};
use crate::support::{Fixtures, Server};

const SIDECAR: &str = mcp_operator::inject::SIDECAR_CONTAINER;

/// The sidecar container of `pod`: its container id, restart count and readiness.
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

/// Milliseconds since the epoch: the clock the agents' calls (`t`) and the sidecar's log share.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64
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

/// A process of the node (`kubelet`, `containerd`, as e2e/node.sh names them in node/pids):
/// SIGTERM, then started again with the same command line (as a supervisor restarts it), its
/// log appended where node.sh keeps it, its pid added for node.sh to take down with the node.
fn restart_node_process(cluster_dir: &Path, name: &str) {
    let pids = std::fs::read_to_string(cluster_dir.join("node/pids")).expect("node/pids");
    let pid = pids
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(n, _)| *n == name)
        .filter_map(|(_, p)| p.trim().parse::<u32>().ok())
        .rfind(|p| Path::new(&format!("/proc/{p}")).exists())
        .unwrap_or_else(|| panic!("a running {name}"));
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
            "{name} did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(cluster_dir.join(format!("node/logs/{name}.log")))
        .unwrap_or_else(|e| panic!("the {name} log: {e}"));
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{name} starts again: {e}"));
    let mut pids_file = std::fs::OpenOptions::new()
        .append(true)
        .open(cluster_dir.join("node/pids"))
        .unwrap();
    use std::io::Write as _;
    writeln!(pids_file, "{name} {}", child.id()).unwrap();
    std::mem::forget(child);
}

/// Waits until the node's CRI answers and the node reports Ready.
async fn node_back(bench: &Bench) {
    eventually(Duration::from_secs(60), "the node Ready again", || async {
        let cri = Command::new(&bench.node.crictl)
            .arg("--runtime-endpoint")
            .arg(format!("unix://{}", bench.node.containerd))
            .args(["ps", "-q"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if !cri.status.success() {
            return Err(format!(
                "crictl ps: {}",
                String::from_utf8_lossy(&cri.stderr)
            ));
        }
        let out = kubectl(&bench.cluster_dir)
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

/// What every fault test stands on: the chart installed, the node image imported, the files
/// fixture listening on the node's IP, and the AgentSpec `looper` granting its write_file, Ready.
struct Bench {
    ns: e2e::TestNamespace,
    cluster_dir: PathBuf,
    node: Node,
    node_image: String,
    files: Server,
    pods: Api<Pod>,
    specs: Api<AgentSpec>,
    _uninstall: Uninstall,
    _scratch: tempfile::TempDir,
}

async fn bench(test: &str) -> Bench {
    let on = on_node(test).await;
    let (client, ns, cluster_dir, node) = on.parts();
    let (uninstall, _fullname) = on.install_chart();
    let node_image = {
        let (repository, tag) = node_image(cluster_dir, on.scratch.path());
        format!("{repository}:{tag}")
    };
    let files = Fixtures::load().sdk_server(&["--host", &node.ip]);
    for object in [
        json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "files", "namespace": ns.name()},
            "spec": {"url": files.url},
        }),
        json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
            "metadata": {"name": "looper", "namespace": ns.name()},
            "spec": {"approval": "none", "servers": [{"name": "files", "allow": ["write_file"]}]},
        }),
    ] {
        e2e::apply(client, &object, ns.name()).await;
    }
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
    Bench {
        pods: Api::namespaced(client.clone(), ns.name()),
        specs,
        ns: on.ns,
        cluster_dir: on.cluster_dir,
        node: on.node,
        node_image,
        files,
        _uninstall: uninstall,
        _scratch: on.scratch,
    }
}

/// The agent in a pod, and the era it speaks.
#[derive(Clone, Copy, Debug)]
enum Agent {
    /// The official TypeScript SDK client: a legacy session (2025-11-25).
    TypeScriptLegacy,
    /// tests/fixtures/modern_client.mjs: 2026-07-28, no session.
    NodeModern,
}

impl Agent {
    fn script(self) -> &'static str {
        match self {
            Agent::TypeScriptLegacy => TS_CLIENT,
            Agent::NodeModern => MODERN_CLIENT,
        }
    }
}

/// Starts the agent pod `pod` (labelled for `looper`): `count` calls of files__write_file, one
/// every 200 ms, numbered and on a path of its own (the upstream counts each pod's calls apart);
/// waits until it is Ready and has made 10 calls.
async fn start_agent(bench: &Bench, pod: &str, agent: Agent, count: usize) {
    let steps = json!([{"op": "loop", "name": "files__write_file", "arguments": {"path": format!("/loop-{pod}")},
                        "numbered": true, "count": count, "intervalMs": 200, "timeout": 5, "log": true}]);
    bench
        .pods
        .create(
            &PostParams::default(),
            &agent_pod(
                pod,
                Some("looper"),
                json!({"name": "agent", "image": bench.node_image, "imagePullPolicy": "Never",
                       "args": [agent.script(), "$(MCP_SERVER_URL)", steps.to_string()]}),
                "Never",
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("creating the agent pod {pod}: {}", e2e::describe(&e)));
    eventually(
        Duration::from_secs(90),
        &format!("the agent pod {pod} Ready"),
        || async {
            let p = bench.pods.get(pod).await.map_err(|e| e.to_string())?;
            if pod_ready(&p) {
                Ok(())
            } else {
                Err(format!("{:?}", p.status))
            }
        },
    )
    .await;
    calls_after(&bench.cluster_dir, bench.ns.name(), pod, 0, 10).await;
}

/// One fault as a pod's agent lived it: from when it began to when the sidecar served again
/// (`served`: None when the sidecar kept running through it), all on the wall clock in ms.
struct Fault {
    label: String,
    pod: String,
    from: u64,
    served: Option<u64>,
    /// From the fault to the kubelet reporting the sidecar (or the node) Ready again.
    ready_after: Duration,
}

/// A fault that ends a pod's sidecar, begun: its pid and restart count before it.
struct Ending {
    pod: String,
    pid: u32,
    restarts: i32,
    from: u64,
    since: Instant,
}

impl Ending {
    async fn begin(bench: &Bench, pod: &str) -> Ending {
        let (container, restarts, _) = sidecar_status(&bench.pods, pod).await;
        Ending {
            pod: pod.to_string(),
            pid: pid_of(&bench.node, &container),
            restarts,
            from: now_ms(),
            since: Instant::now(),
        }
    }

    fn signal(&self, signal: &str) {
        run(Command::new("kill").args([&format!("-{signal}"), &self.pid.to_string()]));
    }

    /// Waits until the kubelet has restarted the sidecar and reports it Ready; when the new one
    /// logged that it serves agents is the fault's end.
    async fn back(self, bench: &Bench, label: &str) -> Fault {
        loop {
            let (_, count, ready) = sidecar_status(&bench.pods, &self.pod).await;
            if count > self.restarts && ready {
                break;
            }
            assert!(
                self.since.elapsed() < Duration::from_secs(120),
                "{label}: the sidecar of {} is not back after 120s (restarts {count})",
                self.pod
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Fault {
            label: label.to_string(),
            served: Some(serving_since(bench, &self.pod)),
            pod: self.pod,
            from: self.from,
            ready_after: self.since.elapsed(),
        }
    }
}

/// When the pod's current sidecar began serving agents, from its JSON log's timestamp.
fn serving_since(bench: &Bench, pod: &str) -> u64 {
    let log = container_log(&bench.cluster_dir, bench.ns.name(), pod, SIDECAR);
    let line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("serving agents at"))
        })
        .unwrap_or_else(|| panic!("the restarted sidecar of {pod} never said it serves:\n{log}"));
    let at: k8s_openapi::jiff::Timestamp = line["timestamp"]
        .as_str()
        .expect("a timestamp")
        .parse()
        .expect("an RFC 3339 timestamp");
    at.as_millisecond() as u64
}

/// A fault of the node under every pod (the kubelet, containerd restarted): over once the node
/// is Ready again; a sidecar it restarted after all is judged as one that was killed.
async fn node_fault(bench: &Bench, pods: &[&str], label: &str, fault: impl FnOnce()) -> Vec<Fault> {
    let mut before = vec![];
    for pod in pods {
        before.push(sidecar_status(&bench.pods, pod).await.1);
    }
    let (from, since) = (now_ms(), Instant::now());
    fault();
    node_back(bench).await;
    let ready_after = since.elapsed();
    let mut faults = vec![];
    for (pod, restarts) in pods.iter().zip(before) {
        let (_, now, _) = sidecar_status(&bench.pods, pod).await;
        faults.push(Fault {
            label: if now > restarts {
                format!("{label} (the sidecar was restarted)")
            } else {
                label.to_string()
            },
            pod: pod.to_string(),
            from,
            served: (now > restarts).then(|| serving_since(bench, pod)),
            ready_after,
        });
    }
    faults
}

/// Waits for the agent pod to end; its calls, from its last line.
async fn finished_calls(bench: &Bench, pod: &str, count: usize) -> Vec<Value> {
    let status = pod_finished(&bench.pods, pod, Duration::from_secs(180)).await;
    let log = container_log(&bench.cluster_dir, bench.ns.name(), pod, "agent");
    let out: Value = log
        .lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(|v| v.get("steps").is_some())
        })
        .unwrap_or_else(|| panic!("the agent of {pod} printed no result ({status}): {log}"));
    let calls = out["steps"][0]["calls"]
        .as_array()
        .expect("the loop's calls")
        .clone();
    assert_eq!(calls.len(), count, "{pod}: {out}");
    calls
}

/// Judges one agent's calls across its faults (see the module comment) and prints the figures.
async fn judge(bench: &Bench, pod: &str, agent: Agent, count: usize, faults: &[Fault]) {
    let calls = finished_calls(bench, pod, count).await;
    let t = |c: &Value| c["t"].as_u64().expect("each call's wall clock");
    let end = |c: &Value| t(c) + c["ms"].as_u64().expect("each call's duration");

    // Nothing ran twice; every call the agent saw succeed ran exactly once.
    let mut u = url::Url::parse(&bench.files.url).unwrap();
    u.set_path("/control/call-args");
    let ran = json_of(http().get(u).send().await.unwrap()).await;
    let path = format!("/loop-{pod}");
    let mut numbers = std::collections::BTreeSet::new();
    for c in ran["calls"].as_array().unwrap() {
        if c["arguments"]["path"] == path.as_str()
            && let Some(n) = c["arguments"]["n"].as_u64()
        {
            assert!(numbers.insert(n), "{pod}: call {n} ran twice");
        }
    }
    for (i, c) in calls.iter().enumerate() {
        if c["ok"] == true {
            assert!(
                numbers.contains(&(i as u64)),
                "{pod}: call {i} succeeded but never ran"
            );
        }
    }

    // A call may fail only when it was in flight while a sidecar was gone: begun before that
    // sidecar served again, ended after the fault began. Every call sent after it serves again
    // succeeds.
    let faults: Vec<&Fault> = faults.iter().filter(|f| f.pod == pod).collect();
    for (i, c) in calls.iter().enumerate() {
        if c["ok"] == true {
            continue;
        }
        assert!(
            faults
                .iter()
                .any(|f| f.served.is_some_and(|s| t(c) <= s && end(c) >= f.from)),
            "{pod} ({agent:?}): call {i} failed outside any sidecar outage: {c}"
        );
    }
    for f in &faults {
        let window: Vec<usize> = (0..calls.len())
            .filter(|&i| calls[i]["ok"] != true)
            .filter(|&i| {
                f.served
                    .is_some_and(|s| t(&calls[i]) <= s && end(&calls[i]) >= f.from)
            })
            .collect();
        let Some(served) = f.served else {
            eprintln!(
                "fault figures: {pod} ({agent:?}): {}: no call failed; the node Ready again after {:.1}s",
                f.label,
                f.ready_after.as_secs_f64()
            );
            continue;
        };
        // The first good answer after the outage began: after its first failed call (an OOM
        // kill lands some calls after `from`, once the 4 MiB request fills the cgroup).
        let outage = window.first().map_or(f.from, |&i| t(&calls[i]));
        let first_ok_after = calls
            .iter()
            .find(|c| c["ok"] == true && t(c) >= outage)
            .unwrap_or_else(|| panic!("{pod}: no call succeeded after {}", f.label));
        assert!(
            calls.iter().filter(|c| t(c) > served).count() >= 5,
            "{pod}: too few calls after {} to judge",
            f.label
        );
        let errors_ms = window
            .first()
            .map_or(0, |&i| end(first_ok_after).saturating_sub(t(&calls[i])));
        let errors: std::collections::BTreeSet<&str> = window
            .iter()
            .filter_map(|&i| calls[i]["error"].as_str())
            .map(|e| e.split(':').next().unwrap_or(e))
            .collect();
        eprintln!(
            "fault figures: {pod} ({agent:?}): {}: {} calls failed{}, the agent saw errors for {errors_ms} ms; the sidecar served again {:.1}s after the fault (Ready {:.1}s), the agent's first good answer {} ms after it served; errors {errors:?}",
            f.label,
            window.len(),
            match (window.first(), window.last()) {
                (Some(a), Some(b)) => format!(" ({a}..={b})"),
                _ => String::new(),
            },
            (served.saturating_sub(f.from)) as f64 / 1000.0,
            f.ready_after.as_secs_f64(),
            end(first_ok_after) as i64 - served as i64,
        );
    }
    eprintln!(
        "fault figures: {pod} ({agent:?}): {} calls, {} failed, upstream ran {}",
        calls.len(),
        calls.iter().filter(|c| c["ok"] != true).count(),
        numbers.len()
    );
}

#[tokio::test]
async fn an_agent_keeps_calling_through_sidecar_kills_an_oom_kill_and_a_kubelet_restart() {
    let _one = ONE_RELEASE.lock().await;
    let bench = bench("node-faults").await;
    let (pod, agent, count) = ("looper", Agent::TypeScriptLegacy, 300);
    start_agent(&bench, pod, agent, count).await;
    let mut faults = vec![];
    let (cluster_dir, ns) = (&bench.cluster_dir, bench.ns.name());
    let mut seen = calls_after(cluster_dir, ns, pod, 0, 10).await;

    // 1. SIGKILL.
    let ending = Ending::begin(&bench, pod).await;
    ending.signal("KILL");
    faults.push(ending.back(&bench, "sidecar SIGKILLed").await);
    seen = calls_after(cluster_dir, ns, pod, seen, 15).await;

    // 2. OOM kill.
    let ending = Ending::begin(&bench, pod).await;
    let said = oom_kill(ending.pid);
    let fault = ending.back(&bench, "sidecar OOM-killed").await;
    let reason = last_termination(&bench.pods, pod).await;
    eprintln!("fault figures: OOM kill: {said}; the kubelet reports {reason:?}");
    faults.push(Fault {
        label: format!("sidecar OOM-killed ({reason})"),
        ..fault
    });
    seen = calls_after(cluster_dir, ns, pod, seen, 15).await;

    // 3. A grants update landing while the sidecar restarts: read_file granted too.
    let ending = Ending::begin(&bench, pod).await;
    ending.signal("KILL");
    bench
        .specs
        .patch(
            "looper",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"servers": [{"name": "files", "allow": ["write_file", "read_file"]}]}})),
        )
        .await
        .expect("patching the AgentSpec");
    faults.push(
        ending
            .back(&bench, "sidecar SIGKILLed during a grants update")
            .await,
    );
    calls_after(cluster_dir, ns, pod, seen, 15).await;

    // 4. The kubelet restarted while the agent calls.
    faults.extend(
        node_fault(&bench, &[pod], "kubelet restarted", || {
            restart_node_process(cluster_dir, "kubelet")
        })
        .await,
    );

    judge(&bench, pod, agent, count, &faults).await;
    let sidecar_log = container_log(cluster_dir, ns, pod, SIDECAR);
    assert!(
        sidecar_log.contains("tools=2") || sidecar_log.contains("\"tools\":2"),
        "the restarted sidecar never offered the updated grants:\n{sidecar_log}"
    );
}

/// Why the kubelet last ended the pod's sidecar (`OOMKilled`, `Error`).
async fn last_termination(pods: &Api<Pod>, pod: &str) -> String {
    pods.get(pod)
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
        .unwrap_or_default()
}

/// The modern era (2026-07-28) through the sidecar: no session to keep, every request says its
/// version; after a SIGKILL and an OOM kill its calls succeed again as soon as the sidecar serves.
#[tokio::test]
async fn a_modern_era_agent_keeps_calling_through_a_sidecar_kill_and_an_oom_kill() {
    let _one = ONE_RELEASE.lock().await;
    let bench = bench("modern-faults").await;
    let (pod, agent, count) = ("modern", Agent::NodeModern, 200);
    start_agent(&bench, pod, agent, count).await;
    let (cluster_dir, ns) = (&bench.cluster_dir, bench.ns.name());
    let mut faults = vec![];
    let seen = calls_after(cluster_dir, ns, pod, 0, 10).await;

    let ending = Ending::begin(&bench, pod).await;
    ending.signal("KILL");
    faults.push(ending.back(&bench, "sidecar SIGKILLed").await);
    calls_after(cluster_dir, ns, pod, seen, 15).await;

    let ending = Ending::begin(&bench, pod).await;
    let said = oom_kill(ending.pid);
    let fault = ending.back(&bench, "sidecar OOM-killed").await;
    let reason = last_termination(&bench.pods, pod).await;
    eprintln!("fault figures: OOM kill ({pod}): {said}; the kubelet reports {reason:?}");
    faults.push(Fault {
        label: format!("sidecar OOM-killed ({reason})"),
        ..fault
    });

    judge(&bench, pod, agent, count, &faults).await;
}

/// Both eras side by side, each agent in its pod: containerd restarted while they call (the
/// shims keep the containers running: no call fails), then both sidecars stopped (SIGSTOP) so
/// their liveness probes fail and the kubelet restarts them — the calls sent to a stopped
/// sidecar time out or are cut, every call after it serves again succeeds.
#[tokio::test]
async fn agents_of_both_eras_keep_calling_through_a_containerd_restart_and_a_liveness_restart() {
    let _one = ONE_RELEASE.lock().await;
    let bench = bench("node-restarts").await;
    let count = 400;
    let agents = [
        ("legacy", Agent::TypeScriptLegacy),
        ("modern", Agent::NodeModern),
    ];
    for (pod, agent) in agents {
        start_agent(&bench, pod, agent, count).await;
    }
    let pods: Vec<&str> = agents.iter().map(|(p, _)| *p).collect();
    let mut faults = node_fault(&bench, &pods, "containerd restarted", || {
        restart_node_process(&bench.cluster_dir, "containerd")
    })
    .await;
    for pod in &pods {
        let seen = calls_logged(&bench.cluster_dir, bench.ns.name(), pod).len();
        calls_after(&bench.cluster_dir, bench.ns.name(), pod, seen, 10).await;
    }

    let mut endings = vec![];
    for pod in &pods {
        endings.push(Ending::begin(&bench, pod).await);
    }
    for ending in &endings {
        ending.signal("STOP");
    }
    for ending in endings {
        let fault = ending
            .back(&bench, "sidecar stopped, restarted by its liveness probe")
            .await;
        faults.push(fault);
    }
    for (pod, _) in agents {
        let reason = last_termination(&bench.pods, pod).await;
        let events = run(kubectl(&bench.cluster_dir).args([
            "get",
            "events",
            "-n",
            bench.ns.name(),
            "--field-selector",
            &format!("involvedObject.name={pod}"),
            "-o",
            "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
        ]));
        // The kubelet's own word that the probe, not something else, ended it.
        assert!(
            events.contains("Liveness probe failed"),
            "{pod}: no failed liveness probe among its events:\n{events}"
        );
        eprintln!("fault figures: liveness ({pod}): the kubelet reports {reason:?}");
    }

    for (pod, agent) in agents {
        judge(&bench, pod, agent, count, &faults).await;
    }
}

/// The operator's webhook replicas (both serve admission) SIGKILLed one after the other, again
/// and again, while 4 clients create 40 labelled pods: every pod the apiserver stores carries
/// the operator's sidecar — failurePolicy Fail refuses the creations no replica answered, with
/// the apiserver's reason — and once a replica is back a creation is admitted again. How many
/// were admitted and refused, and for what, is printed.
#[tokio::test]
async fn webhook_replicas_killed_during_a_burst_never_let_a_pod_in_without_its_sidecar() {
    let _one = ONE_RELEASE.lock().await;
    let on = on_node("webhook-kills").await;
    let (client, ns, _, node) = on.parts();
    let image = format!("{}:{}", on.repository, on.tag);
    let (_uninstall, _fullname) = on.install_chart();
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
        e2e::apply(client, &object, ns.name()).await;
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
