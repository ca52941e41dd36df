//! The operator: three reconcilers against a real apiserver. Kubernetes plumbing lives here and
//! only here; every decision is a pure function in the reconciler's own folder.
//!
//! ```text
//!  watches (watches/)                             reconciler                writes
//!  ───────────────────────────────────────────   ───────────────────────   ─────────────────────────
//!  McpServer ─────────────── main ─────────────┐
//!  McpServer (deletions) ─── forget schedule ──┤
//!  Secret (metadata) ─── McpServers naming it ─┼─► mcp_server/ ──────────► McpServer status (SSA)
//!  ConfigMap (metadata) ─ McpServers naming it ┤     │ mcp::read_server      ConfigMap <s>-mcp-catalog
//!  Deployment (metadata, label) ─ its owner ───┤     │                       Deployment, Service <s>-mcp (stdio)
//!  tools/list_changed (pushed by the server) ──┤     ▼ remote MCP server     Events (Probe, Pin)
//!  a finished probe (its own task) ────────────┤       (probes run outside the reconcile slots)
//!  McpTenantPolicy, Namespace ─ reflect ─ those┘       core::pinning (pure)
//!    whose pinning requirement changed
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
//!   They are peers: none imports another (the `layering` test checks it).
//! - `shared/`: what they write and read alike: status apply, events, owned ConfigMaps published
//!   only when their digest changed, Ready transitions, label selectors and rule picking, the
//!   spilled catalogue, the grants endpoint, `ServerKey`.
//! - `watches/`: every watch and which reconciles it triggers (`fanout.rs`: one watch per kind,
//!   shared); `context.rs`: the client, settings, metrics and recorder every reconciler shares;
//!   `error.rs`: start-up errors apart from reconcile errors (one per kind of write, the
//!   `reconciles_total{result}` label).
//! - `health/`: /healthz, /readyz (`readiness.rs`: every watch listed) and /metrics
//!   (`metrics.rs`).
//! - `leader.rs`: the Lease; `signing.rs`: the grants signing keyring.
//!
//! - `webhook/`: the sidecar-injection admission webhook and its TLS certificate; served by
//!   every replica (the decision itself is [`crate::inject`], pure).
//!
//! Only the leader (a Lease) runs the reconcilers; followers serve health, metrics and the
//! webhook, and wait.

mod agent_spec;
mod context;
mod error;
#[cfg(test)]
mod fixtures;
mod health;
mod leader;
pub mod mcp_server;
mod shared;
mod signing;
mod tenant_policy;
mod watches;
mod webhook;

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
// The webhook names it as `super::metrics`.
use health::metrics;
use metrics::Metrics;
pub use webhook::WebhookArgs;

/// The default `--response-budget`: 128 MiB, two responses at the CRD's 64 MiB maximum, within
/// the chart's 512Mi limit with room for parsing and the controller's own caches.
pub const DEFAULT_RESPONSE_BUDGET: u64 = 128 * 1024 * 1024;

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
    /// How long a standby waits on an unrenewed Lease before taking over (whole seconds, at
    /// least 2s). The leader renews every second and stops writing a second before its
    /// lease could be taken, so a crashed leader is replaced within this time plus a second.
    #[arg(long, default_value = "4s", value_parser = parse_lease_duration)]
    pub lease_duration: Duration,
    /// Reconciles running at once, per kind. An McpServer's probe runs outside these slots.
    #[arg(long, default_value_t = 32)]
    pub concurrency: u16,
    /// McpServer probes running at once: a probe mostly waits on its server (a hanging one
    /// for its whole timeout), so this is above --concurrency. A quarter of it at most goes to
    /// retries of failing servers; first reads start before retries. Each probe buffers at
    /// most its server's maxResponseBytes. 128, not more: with 1,000 McpServers starting
    /// together, 512 probes mid-read held 131 MiB at peak against 79 MiB, and were no faster
    /// (the apiserver's status writes bound the time); with 30 % of them hanging the healthy
    /// ones are still Ready within 1.1 x of a clean run (bench/controller.sh HOSTILE=30).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..))]
    pub probe_concurrency: u16,
    /// Watch only this namespace (default: every namespace).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// The operator's own image: a stdio McpServer's pods copy the `mcp-operator` binary from
    /// it and run it as their bridge. Without it stdio McpServers are not run (their status
    /// says so). The Helm chart sets it to the image it deploys.
    #[arg(long, env = "MCP_OPERATOR_BRIDGE_IMAGE")]
    pub bridge_image: Option<String>,
    /// Longest wait before re-probing a server that failed.
    #[arg(long, default_value = "60s", value_parser = crate::core::duration::parse_duration)]
    pub max_failure_backoff: Duration,
    /// What a namespace that no McpTenantPolicy selects may be granted: `allow` (the default:
    /// the McpServer's and the AgentSpec's narrowing alone decide, so a cluster without
    /// policies works out of the box) or `deny` (nothing until a policy selects it).
    #[arg(long, default_value = "allow")]
    pub tenant_default: crate::grants::TenantDefault,
    /// Bytes of MCP response bodies held at once, over every server read and watched: a body
    /// that does not fit waits for others to finish. Keep it well under the memory limit (a
    /// held byte costs about two to three in memory once parsed) and at least the largest
    /// spec.discovery.maxResponseBytes in use (at most 64 MiB), or such servers fail with
    /// ResponseBudgetExceeded.
    #[arg(long, default_value_t = DEFAULT_RESPONSE_BUDGET, value_parser = clap::value_parser!(u64).range(1024 * 1024..))]
    pub response_budget: u64,
    /// Characters of granted tool schemas per server above which the server is marked deferred
    /// in the grants and the sidecar offers discovery tools instead of every schema.
    #[arg(long, default_value_t = 100_000)]
    pub preload_budget: u64,
    /// Where the pins of pinned McpServers are also kept (a ConfigMap per tenant namespace,
    /// `mcp-pins-<namespace>`), so that a deleted and recreated McpServer keeps them; default:
    /// the Lease's namespace (the operator's own, where tenants cannot write).
    #[arg(long)]
    pub pin_store_namespace: Option<String>,
    /// The Secret, in the operator's namespace, holding the keys that sign every grants
    /// document (created by the leader when absent; rotate it with `kubectl annotate secret
    /// <name> mcp-operator.dev/rotate=now`). The chart names it `<release>-grants-signing`.
    #[arg(long, default_value = signing::DEFAULT_SIGNING_SECRET)]
    pub signing_secret: String,
    /// How long a deleted AgentSpec's revoked grants are served before its ConfigMap goes,
    /// unless no pod of the AgentSpec runs: long enough for the kubelet to refresh the mounted
    /// ConfigMap in every pod (its sync period, a minute by default, plus its cache).
    #[arg(long, default_value = "70s", value_parser = crate::core::duration::parse_duration)]
    pub revoke_wait: Duration,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// Runs the controller until SIGTERM or SIGINT: connect, check the CRDs, serve health and the
/// webhook on every replica, then reconcile while leading.
pub async fn run(args: ControllerArgs) -> Result<(), StartError> {
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    // Every write of the reconcilers passes the fence: none is sent once this replica's lease
    // may have expired. The Lease itself is written through a client without it.
    let fence = if args.leader_election {
        leader::Fence::closed()
    } else {
        leader::Fence::open()
    };
    let (client, lease_client) = connect(&identity, &fence).await?;
    check_crds(&client, args.watch_namespace.as_deref()).await?;
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let bound = health::serve(args.metrics_addr, metrics.clone(), ready.clone()).await?;
    info!(%identity, addr = %bound, "serving /healthz, /readyz and /metrics");
    let namespace = args
        .lease_namespace
        .clone()
        .or_else(|| args.watch_namespace.clone())
        .unwrap_or_else(|| "default".into());
    let signing = read_signing_keys(&args, &namespace, &lease_client);
    // Every replica answers admissions, leader or not; its client is not fenced.
    if let Some(addr) = args.webhook.webhook_addr {
        let bound = webhook::start(
            &args.webhook,
            addr,
            lease_client.clone(),
            namespace.clone(),
            metrics.clone(),
            signing.clone(),
        )
        .await
        .map_err(StartError::Webhook)?;
        info!(addr = %bound, "serving the sidecar-injection webhook (HTTPS /inject)");
    }
    let stop = stop_on_signal();
    let ctx = reconcile_context(&args, &identity, &namespace, client, metrics, signing);
    // Kept across leadership terms: a replica that leads again remembers when it probed.
    let servers = Arc::new(mcp_server::ServerContext::new(ctx.clone()));
    let reconcilers = Reconcilers {
        ctx,
        servers,
        args: args.clone(),
        ready,
    };
    if !args.leader_election {
        reconcilers.run(stop).await;
        return Ok(());
    }
    let elector = leader::Elector {
        api: Api::namespaced(lease_client, &namespace),
        name: args.lease_name.clone(),
        identity,
        timing: leader::Timing::for_duration(args.lease_duration),
        fence,
    };
    reconcilers
        .lead_while_elected(elector, &namespace, stop)
        .await
}

/// The reconciling client (behind the write fence) and the Lease's own client (without it),
/// both naming this replica in their User-Agent.
async fn connect(
    identity: &str,
    fence: &Arc<leader::Fence>,
) -> Result<(Client, Client), StartError> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    // Every request names this replica, so the apiserver's audit log tells replicas apart.
    let user_agent = http::HeaderValue::from_str(&format!(
        "mcp-operator/{} ({identity})",
        env!("CARGO_PKG_VERSION")
    ))
    .unwrap_or_else(|_| http::HeaderValue::from_static("mcp-operator"));
    let named = tower::util::MapRequestLayer::new(move |mut request: http::Request<_>| {
        request
            .headers_mut()
            .insert(http::header::USER_AGENT, user_agent.clone());
        request
    });
    let client = kube::client::ClientBuilder::try_from(config.clone())?
        .with_layer(&named)
        .with_layer(&leader::FenceLayer(fence.clone()))
        .build();
    let lease_client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&named)
        .build();
    Ok((client, lease_client))
}

/// Every replica reads the signing keyring (the webhook injects its public keys); only the
/// leader writes it.
fn read_signing_keys(
    args: &ControllerArgs,
    namespace: &str,
    lease_client: &Client,
) -> context::Signing {
    let at = signing::KeyringSecret {
        namespace: namespace.to_string(),
        name: args.signing_secret.clone(),
    };
    context::Signing {
        keys: signing::watch_keyring(lease_client.clone(), at.clone()),
        at,
        revoke_wait: args.revoke_wait,
    }
}

/// A channel that turns true on SIGTERM or SIGINT.
fn stop_on_signal() -> watch::Receiver<bool> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutting down");
        let _ = stop_tx.send(true);
    });
    stop_rx
}

/// What every reconciler shares: the fenced client, the settings from the flags, the metrics
/// and the event recorder naming this replica.
fn reconcile_context(
    args: &ControllerArgs,
    identity: &str,
    namespace: &str,
    client: Client,
    metrics: Arc<Metrics>,
    signing: context::Signing,
) -> Arc<Context> {
    let settings = Settings {
        allow_loopback: args.allow_loopback,
        max_failure_backoff: args.max_failure_backoff,
        bridge_image: args.bridge_image.clone(),
        operator_namespace: Some(namespace.to_string()),
        probe_concurrency: usize::from(args.probe_concurrency),
        response_budget: Some(crate::mcp::ResponseBudget::new(args.response_budget)),
        pin_store_namespace: Some(
            args.pin_store_namespace
                .clone()
                .unwrap_or_else(|| namespace.to_string()),
        ),
        ..Settings::default()
    };
    metrics
        .response_budget_bytes
        .set(args.response_budget as i64);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "mcp-operator".into(),
            instance: Some(identity.to_string()),
        },
    );
    Arc::new(Context::new(client, settings, metrics, recorder, signing))
}

/// The reconcilers of this replica, run for one leadership term at a time.
struct Reconcilers {
    ctx: Arc<Context>,
    servers: Arc<mcp_server::ServerContext>,
    args: ControllerArgs,
    /// /readyz: a follower is ready; a leader once its watches have listed.
    ready: Arc<AtomicBool>,
}

impl Reconcilers {
    /// Runs every watch and reconciler until `stop` turns true.
    async fn run(&self, stop: watch::Receiver<bool>) {
        let (ctx, servers, ready) = (self.ctx.clone(), self.servers.clone(), self.ready.clone());
        watches::run(ctx, servers, &self.args, ready, stop).await;
    }

    /// Stands by while another replica leads, reconciles while this one does, until `stop`;
    /// then the elector closes the fence and releases the Lease.
    async fn lead_while_elected(
        self,
        elector: leader::Elector,
        namespace: &str,
        stop_rx: watch::Receiver<bool>,
    ) -> Result<(), StartError> {
        let lease = self.args.lease_name.clone();
        let (leading_tx, mut leading) = watch::channel(false);
        let (may_lead_tx, may_lead_rx) = watch::channel(true);
        let election = tokio::spawn(elector.run(leading_tx, may_lead_rx, stop_rx.clone()));
        // A follower is ready: it serves and stands by.
        self.ready.store(true, Ordering::Relaxed);
        let mut stop = stop_rx.clone();
        let this = Arc::new(self);
        loop {
            if *stop.borrow() {
                break;
            }
            if !*leading.borrow_and_update() {
                info!(%lease, %namespace, "waiting to become the leader");
                tokio::select! {
                    changed = leading.changed() => {
                        if changed.is_err() { return Err(StartError::LeaderElection("the lease task ended".into())); }
                        continue;
                    }
                    _ = stop.changed() => break,
                }
            }
            info!(%lease, %namespace, "became the leader: reconciling");
            this.lead_one_term(&mut leading, &may_lead_tx, &stop_rx)
                .await;
        }
        // The elector closes the fence, then releases the Lease.
        if tokio::time::timeout(Duration::from_secs(5), election)
            .await
            .is_err()
        {
            warn!("releasing the lease did not finish");
        }
        Ok(())
    }

    /// One leadership term: reconcile until the leadership is lost or `stop`, then wait for
    /// the term's reconcilers to finish before the elector may lead again.
    async fn lead_one_term(
        self: &Arc<Self>,
        leading: &mut watch::Receiver<bool>,
        may_lead: &watch::Sender<bool>,
        stop_rx: &watch::Receiver<bool>,
    ) {
        // Not ready again until this replica's watches have listed.
        self.ready.store(false, Ordering::Relaxed);
        let (lost_tx, lost_rx) = watch::channel(false);
        let mut term = tokio::spawn({
            let this = self.clone();
            let stop = merge_stops(stop_rx.clone(), lost_rx);
            async move { this.run(stop).await }
        });
        loop {
            tokio::select! {
                _ = &mut term => break,
                changed = leading.changed() => {
                    if changed.is_err() || !*leading.borrow_and_update() {
                        if !*stop_rx.borrow() {
                            warn!("lost the leadership: stopping the reconcilers");
                        }
                        let _ = lost_tx.send(true);
                        break;
                    }
                }
            }
        }
        // One term at a time: the elector neither renews nor takes the Lease until this term's
        // reconcilers are gone, and a reconciler stuck in its shutdown is cut off rather than
        // left holding the Lease without reconciling.
        let _ = may_lead.send(false);
        if !term.is_finished()
            && tokio::time::timeout(TERM_SHUTDOWN, &mut term)
                .await
                .is_err()
        {
            warn!(
                "the reconcilers did not stop within {}s: aborting them",
                TERM_SHUTDOWN.as_secs()
            );
            term.abort();
            let _ = term.await;
        }
        let _ = may_lead.send(true);
        // Standing by again as a follower.
        self.ready.store(true, Ordering::Relaxed);
    }
}

/// How long a term's reconcilers get to finish their in-flight work once leadership is lost.
const TERM_SHUTDOWN: Duration = Duration::from_secs(10);

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

fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let d = crate::core::duration::parse_duration(text)?;
    if d < Duration::from_secs(2) || d.subsec_nanos() != 0 {
        return Err(format!(
            "the lease duration must be whole seconds and at least 2s, not {text}"
        ));
    }
    Ok(d)
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
