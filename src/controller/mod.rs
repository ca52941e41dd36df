//! The operator: reconciles McpServers against a real apiserver. Kubernetes plumbing lives here
//! and only here; decisions are made by pure code (`server_status`, `core::catalog`).
//!
//! ```text
//!  [ Secret ] ─metadata watch─┐            ┌─► mcp::read_server ─► remote MCP server
//!  [ McpServer ] ─watch───────┼─► reconcile┤
//!  list_changed (push) ───────┘            └─► status (SSA), companion ConfigMap, Events
//! ```
//!
//! Only the leader (a Lease) runs the reconcilers; followers serve health and metrics and wait.

pub mod agent_spec;
pub mod catalog_spill;
pub mod context;
pub mod credentials;
pub mod error;
pub mod grants_controllers;
pub mod grants_input;
pub mod grants_publish;
pub mod grants_selector;
pub mod grants_status;
mod health;
pub mod mcp_server;
pub mod metrics;
pub mod server_status;
pub mod subscriptions;
pub mod tenant_policy;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::mcp_server::McpServer;
use context::{Context, Settings};
use error::Error;
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
pub async fn run(args: ControllerArgs) -> Result<(), Error> {
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

    if !args.leader_election {
        ready.store(true, Ordering::Relaxed);
        run_controllers(ctx, &args, stop_rx).await;
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
        .map_err(|e| Error::LeaderElection(e.to_string()))?;
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
                    if changed.is_err() { return Err(Error::LeaderElection("the lease task ended".into())); }
                    continue;
                }
                _ = stop.changed() => break,
            }
        }
        info!(lease = %args.lease_name, %namespace, "became the leader: reconciling");
        let (lost_tx, lost_rx) = watch::channel(false);
        let controllers =
            run_controllers(ctx.clone(), &args, merge_stops(stop_rx.clone(), lost_rx));
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

/// An Api over every namespace, or the one the controller is limited to.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn run_controllers(
    ctx: Arc<Context>,
    args: &ControllerArgs,
    mut stop: watch::Receiver<bool>,
) {
    let client = ctx.client.clone();
    let ns = args.watch_namespace.as_deref();
    let grants = tokio::spawn(grants_controllers::run(
        ctx.clone(),
        args.clone(),
        stop.clone(),
    ));
    let servers: Api<McpServer> = scoped(&client, ns);
    // The controller is not called for deleted objects: drop what we hold for them here.
    let deletions = tokio::spawn(forget_deleted_servers(servers.clone(), ctx.clone()));
    let controller = Controller::new(servers, watcher::Config::default().any_semantic())
        .with_config(controller::Config::default().concurrency(args.concurrency));
    let store = controller.store();
    let secrets = watcher(
        scoped::<PartialObjectMeta<Secret>>(&client, ns),
        watcher::Config::default(),
    )
    .touched_objects();
    let config_maps = watcher(
        scoped::<PartialObjectMeta<ConfigMap>>(&client, ns),
        watcher::Config::default(),
    )
    .touched_objects();
    // Servers that push tools/list_changed trigger their own reconcile through this channel.
    let (trigger_tx, trigger_rx) = tokio::sync::mpsc::channel(1024);
    ctx.subscriptions.attach(trigger_tx);
    let pushed = futures::stream::unfold(trigger_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let secret_store = store.clone();
    let cm_store = store.clone();
    controller
        .watches_stream(secrets, move |secret| {
            referencing(&secret_store, &secret, credentials::referenced_secrets)
        })
        .watches_stream(config_maps, move |cm| {
            referencing(&cm_store, &cm, credentials::referenced_config_maps)
        })
        .reconcile_on(pushed)
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(mcp_server::reconcile, mcp_server::error_policy, ctx.clone())
        .for_each(|result| async move {
            match result {
                Err(controller::Error::ObjectNotFound(_)) | Ok(_) => {}
                Err(other) => warn!("controller: {other}"),
            }
        })
        .await;
    deletions.abort();
    ctx.subscriptions.detach();
    if let Err(e) = grants.await {
        warn!("the AgentSpec and McpTenantPolicy reconcilers failed: {e}");
    }
    info!("reconcilers stopped");
}

/// Forgets the schedule, subscription and metrics of every McpServer that is deleted, including
/// those deleted while the watch was down (absent from the relist).
async fn forget_deleted_servers(servers: Api<McpServer>, ctx: Arc<Context>) {
    let mut listed = std::collections::HashSet::new();
    let mut events = watcher(servers, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Delete(server)) => {
                mcp_server::forget(&ctx, &mcp_server::key_of(&server));
            }
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(server)) => {
                listed.insert(mcp_server::key_of(&server));
            }
            Ok(watcher::Event::InitDone) => {
                for key in ctx.schedule.keys() {
                    if !listed.contains(&key) {
                        mcp_server::forget(&ctx, &key);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The McpServers in the object's namespace that refer to it by name.
fn referencing<K: kube::Resource>(
    store: &kube::runtime::reflector::Store<McpServer>,
    object: &K,
    names: fn(&crate::api::mcp_server::McpServerSpec) -> Vec<String>,
) -> Vec<ObjectRef<McpServer>> {
    let namespace = object.meta().namespace.clone();
    let name = object.meta().name.clone().unwrap_or_default();
    store
        .state()
        .iter()
        .filter(|s| s.namespace() == namespace && names(&s.spec).contains(&name))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// Fails early, with the fix, when the CRDs are not installed.
async fn check_crds(client: &Client, namespace: Option<&str>) -> Result<(), Error> {
    let api: Api<McpServer> = scoped(client, namespace);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(Error::CrdsMissing(
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
