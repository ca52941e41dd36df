//! Runs the real `mcp-operator controller` binary against the e2e control plane, limited to one
//! test's namespace (so tests in parallel never see each other's controller), with its log in a
//! file the test can read.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use mcp_operator::api::mcp_server::McpServer;
use serde_json::Value;

/// A running controller process; killed when dropped.
pub struct Operator {
    child: Option<Child>,
    pub log: PathBuf,
    pub metrics_port: u16,
    _dir: tempfile::TempDir,
}

impl Operator {
    /// Starts `mcp-operator controller` for `namespace` with a short failure backoff.
    pub fn start(kubeconfig: &Path, namespace: &str, identity: &str) -> Operator {
        Operator::start_with(kubeconfig, namespace, identity, &[])
    }

    /// The same with more flags.
    pub fn start_with(
        kubeconfig: &Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
    ) -> Operator {
        Operator::start_with_env(kubeconfig, namespace, identity, extra, &[])
    }

    /// The same with more flags and environment variables (e.g. `OTEL_*`).
    pub fn start_with_env(
        kubeconfig: &Path,
        namespace: &str,
        identity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let metrics_port = crate::support::free_port();
        let mut args = [
            "controller",
            "--allow-loopback",
            "--watch-namespace",
            namespace,
            "--identity",
            identity,
            "--max-failure-backoff",
            "4s",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics_port}"),
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        Operator::spawn(kubeconfig, identity, &args, env, metrics_port)
    }

    /// The value of an unlabelled metric (`mcp_operator_probes_running`), 0 when absent.
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    }

    /// Runs `mcp-operator ARGS` with `KUBECONFIG` and the extra environment, its stderr in
    /// `<name>.log`; `metrics_port` is where the args told it to serve /metrics.
    pub fn spawn(
        kubeconfig: &Path,
        name: &str,
        args: &[String],
        env: &[(&str, &str)],
        metrics_port: u16,
    ) -> Operator {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = dir.path().join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("the controller starts");
        Operator {
            child: Some(child),
            log,
            metrics_port,
            _dir: dir,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no lease release, the standby must wait the lease out.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits (up to `limit`) for the process to exit; returns its exit code.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A tiny HTTP/1.0 GET, enough for /metrics.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

// The waits every e2e test shares, for any kind.
pub use crate::e2e::{condition, eventually, wait_condition};

/// Applies an McpServer from JSON (server-side apply).
pub async fn apply_server(client: &Client, namespace: &str, manifest: Value) -> McpServer {
    let api: Api<McpServer> = Api::namespaced(client.clone(), namespace);
    let server: McpServer = serde_json::from_value(manifest).expect("a valid McpServer manifest");
    api.patch(
        &server.name_any(),
        &PatchParams::apply(crate::e2e::FIELD_MANAGER).force(),
        &Patch::Apply(&server),
    )
    .await
    .expect("the McpServer is accepted")
}

pub fn server_manifest(name: &str, url: &str, spec_extra: Value) -> Value {
    let mut spec = serde_json::json!({"url": url});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    serde_json::json!({
        "apiVersion": "mcp-operator.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": name},
        "spec": spec,
    })
}
