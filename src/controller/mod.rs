//! The operator: three reconcilers against a real apiserver. Kubernetes plumbing lives here and
//! only here; every decision is a pure function in the reconciler's own folder.
//!
//! ```text
//!  watches (watches.rs)                          reconciler                writes
//!  ───────────────────────────────────────────   ───────────────────────   ─────────────────────────
//!  McpServer ─────────────── main ─────────────┐
//!  McpServer (deletions) ─── forget schedule ──┤
//!  Secret (metadata) ─── McpServers naming it ─┼─► mcp_server/ ──────────► McpServer status (SSA)
//!  ConfigMap (metadata) ─ McpServers naming it ┤     │ mcp::read_server      ConfigMap <s>-mcp-catalog
//!  tools/list_changed (pushed by the server) ──┘     ▼ remote MCP server     Events (Probe)
//!
//!  AgentSpec ────────────── main ──────────────┐
//!  McpServer ─ reflect ─ AgentSpecs naming it ─┤
//!  McpTenantPolicy ─ reflect ─ every AgentSpec ┼─► agent_spec/ ──────────► ConfigMap <a>-mcp-grants
//!  Namespace (metadata) ─ reflect ─ AgentSpecs ┤     │ grants::resolve       AgentSpec status (SSA)
//!  ConfigMap (grants label) ─ reflect ─ owner ─┘     (pure)                  Events (Resolve, Publish)
//!
//!  McpTenantPolicy ──────── main ──────────────┐
//!  Namespace (metadata) ─ reflect ─ every one ─┴─► tenant_policy/ ───────► McpTenantPolicy status
//!                                                                          Events (Evaluate)
//! ```
//!
//! - [`mcp_server`], `agent_spec/`, `tenant_policy/`: one folder per reconciler; each reconcile
//!   gathers its inputs, makes one pure decision (`status::decide`, `input::decide_grants`,
//!   `status::next_policy_status`) and applies it.
//! - `shared/`: what they write alike: status apply, events, owned ConfigMaps published only when
//!   their digest changed, Ready transitions, label selectors.
//! - `watches.rs`: every watch and which reconciles it triggers; `context.rs`: the client,
//!   settings, metrics and recorder every reconciler shares; `error.rs`: start-up errors apart
//!   from reconcile errors (one per kind of write, the `reconciles_total{result}` label).
//! - `health.rs`, `metrics.rs`: /healthz, /readyz and /metrics.
//!
//! Only the leader (a Lease) runs the reconcilers; followers serve health and metrics and wait.

mod agent_spec;
mod context;
mod error;
#[cfg(test)]
mod fixtures;
mod health;
pub mod mcp_server;
mod metrics;
mod shared;
mod tenant_policy;
mod watches;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::ListParams;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::mcp_server::McpServer;
use context::{Context, Settings};
pub use error::StartError;
use metrics::Metrics;

/// Flags of `mcp-operator controller`.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Allow MCP servers on loopback addresses (127.0.0.0/8, ::1): for tests and local demos.
    /// Link-local and cloud-metadata addresses are refused regardless.
    #[arg(long)]
    pub allow_loopback: bool,
    /// Where /healthz, /readyz and /metrics are served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Elect a leader through a Lease, so that only one replica writes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the Lease used for leader election.
    #[arg(long, default_value = "mcp-operator")]
    pub lease_name: String,
    /// Namespace of the Lease (defaults to the pod's namespace, then --watch-namespace, then
    /// `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease (defaults to the pod name, then host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Reconciles running at once: a hanging server occupies one slot, never the others.
    #[arg(long, default_value_t = 32)]
    pub concurrency: u16,
    /// Watch only this namespace (default: every namespace).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Longest wait before re-probing a server that failed.
    #[arg(long, default_value = "60s", value_parser = crate::probe::parse_duration)]
    pub max_failure_backoff: Duration,
    /// What a namespace that no McpTenantPolicy selects may be granted: `allow` (the default:
    /// the McpServer's and the AgentSpec's narrowing alone decide, so a cluster without
    /// policies works out of the box) or `deny` (nothing until a policy selects it).
    #[arg(long, default_value = "allow")]
    pub tenant_default: crate::grants::TenantDefault,
    /// Characters of granted tool schemas per server above which the server is marked deferred
    /// in the grants and the sidecar offers discovery tools instead of every schema.
    #[arg(long, default_value_t = 100_000)]
    pub preload_budget: u64,
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: ControllerArgs) -> Result<(), StartError> {
    let client = Client::try_default().await?;
    check_crds(&client, args.watch_namespace.as_deref()).await?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let bound = health::serve(args.metrics_addr, metrics.clone(), ready.clone()).await?;
    info!(%identity, addr = %bound, "serving /healthz, /readyz and /metrics");

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutting down");
        let _ = stop_tx.send(true);
    });

    let settings = Settings {
        allow_loopback: args.allow_loopback,
        max_failure_backoff: args.max_failure_backoff,
        ..Settings::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "mcp-operator".into(),
            instance: Some(identity.clone()),
        },
    );
    let ctx = Arc::new(Context::new(client.clone(), settings, metrics, recorder));
    // Kept across leadership terms: a replica that leads again remembers when it probed.
    let servers = Arc::new(mcp_server::ServerContext::new(ctx.clone()));

    if !args.leader_election {
        watches::run(ctx, servers, &args, ready, stop_rx).await;
        return Ok(());
    }

    let namespace = args
        .lease_namespace
        .clone()
        .or_else(|| args.watch_namespace.clone())
        .unwrap_or_else(|| "default".into());
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&namespace)
        .with_identity(&identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .map_err(|e| StartError::LeaderElection(e.to_string()))?;
    let (mut leading, lease_task) = manager.watch().await;
    // A follower is ready: it serves and stands by.
    ready.store(true, Ordering::Relaxed);
    let mut stop = stop_rx.clone();
    loop {
        if *stop.borrow() {
            break;
        }
        if !*leading.borrow_and_update() {
            info!(lease = %args.lease_name, %namespace, "waiting to become the leader");
            tokio::select! {
                changed = leading.changed() => {
                    if changed.is_err() { return Err(StartError::LeaderElection("the lease task ended".into())); }
                    continue;
                }
                _ = stop.changed() => break,
            }
        }
        info!(lease = %args.lease_name, %namespace, "became the leader: reconciling");
        // Not ready again until this replica's watches have listed.
        ready.store(false, Ordering::Relaxed);
        let (lost_tx, lost_rx) = watch::channel(false);
        let controllers = watches::run(
            ctx.clone(),
            servers.clone(),
            &args,
            ready.clone(),
            merge_stops(stop_rx.clone(), lost_rx),
        );
        tokio::pin!(controllers);
        loop {
            tokio::select! {
                _ = &mut controllers => break,
                changed = leading.changed() => {
                    if changed.is_err() || !*leading.borrow_and_update() {
                        warn!("lost the leadership: stopping the reconcilers");
                        let _ = lost_tx.send(true);
                    }
                }
            }
        }
        // Standing by again as a follower.
        ready.store(true, Ordering::Relaxed);
    }
    // Dropping the receiver makes the lease task release the lease before it ends.
    drop(leading);
    match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
        Ok(Ok(Ok(_))) => info!("released the lease"),
        Ok(Ok(Err(e))) => warn!("releasing the lease failed: {e}"),
        _ => warn!("releasing the lease did not finish"),
    }
    Ok(())
}

/// Stops when either channel turns true.
fn merge_stops(
    mut a: watch::Receiver<bool>,
    mut b: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            if *a.borrow() || *b.borrow() {
                let _ = tx.send(true);
                return;
            }
            tokio::select! {
                r = a.changed() => if r.is_err() { return },
                r = b.changed() => if r.is_err() { return },
            }
        }
    });
    rx
}

/// Fails early, with the fix, when the CRDs are not installed.
async fn check_crds(client: &Client, namespace: Option<&str>) -> Result<(), StartError> {
    let api: Api<McpServer> = watches::scoped(client, namespace);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(StartError::CrdsMissing(
            "the McpServer resource is unknown to the apiserver; install the CRDs with \
             `mcp-operator crds | kubectl apply -f -` (or the Helm chart)"
                .into(),
        )),
        Err(e) => Err(e.into()),
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "mcp-operator".into());
    format!("{host}-{}", std::process::id())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
