//! Every watch the controller starts, and which reconciles each one triggers: one watch per
//! kind, shared by the reconcilers that need it ([`fanout`]). The three
//! reconcilers run side by side until `stop` (leadership lost, or shutdown).
//!
//! ```text
//!  watch (one per kind)              McpServer reconciler   AgentSpec reconciler     McpTenantPolicy reconciler
//!  McpServer ──────────────────────► main; deletions ─────► AgentSpecs in its namespace naming it
//!                                    forget their state     (store: the servers it reads)
//!  AgentSpec ────────────────────────────────────────────► main
//!  McpTenantPolicy ──────────────────────────────────────► every AgentSpec (store) ► main
//!  Namespace (metadata, all) ────────────────────────────► AgentSpecs in it (store) ► every policy (store)
//!  ConfigMap (metadata) ────────────► servers naming it ──► owner AgentSpec (store: its grants ConfigMaps)
//!                                     (CA bundles)
//!  Secret (metadata) ───────────────► servers naming it
//!  Deployment (metadata, by label) ─► its owner (a stdio server's workload)
//!  Pod (metadata, opted in) ─────────────────────────────► the AgentSpec it names (status.pods)
//!  tools/list_changed ──────────────► the server that pushed it
//!  McpTenantPolicy, Namespace ──────► servers whose pinning requirement changed
//! ```
//!
//! McpServer, AgentSpec, ConfigMap and Pod watches are scoped by --watch-namespace; policies and
//! namespaces are cluster-wide. Each reconciler reads only stores fed by the watches that
//! trigger it, and a store is written before its change is told: when a change triggers a
//! reconcile, the store already shows it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::agent_spec::AgentSpec;
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::McpTenantPolicy;

use super::context::Context;
mod fanout;

use super::health::readiness::Readiness;
use super::mcp_server::{self, ServerContext, Tenancy};
use super::shared::server_key::key_of;
use super::shared::{catalog_spill, references};
use super::{ControllerArgs, agent_spec, tenant_policy};
use fanout::{Change, Watched};

/// Runs the three reconcilers until `stop` turns true; `ready` turns true once every watch has
/// listed. One watch per kind, shared by the reconcilers that need it ([`fanout`]).
pub async fn run(
    ctx: Arc<Context>,
    servers: Arc<ServerContext>,
    args: &ControllerArgs,
    ready: Arc<AtomicBool>,
    stop: watch::Receiver<bool>,
) {
    let client = ctx.client.clone();
    let (watches, drivers) = Watches::open(&client, args.watch_namespace.as_deref());
    let all_listed = futures::future::join_all([
        watches.servers.listed(),
        watches.agents.listed(),
        watches.policies.listed(),
        watches.namespaces.listed(),
        watches.config_maps.listed(),
        watches.pods.listed(),
    ]);
    // Every consumer subscribes here, before any driver runs, so none misses a change.
    let reconcilers = futures::future::join3(
        run_servers(servers, args, &watches, stop.clone()),
        run_agent_specs(ctx.clone(), args, &watches, stop.clone()),
        run_policies(ctx.clone(), args, &watches, stop.clone()),
    );
    let drivers = futures::future::join_all(drivers);
    // The leader creates the signing keyring when there is none and rotates it when asked.
    let keeper = tokio::spawn(super::signing::keep(
        client.clone(),
        ctx.signing.at.clone(),
        ctx.signing.keys.clone(),
        stop.clone(),
    ));
    let readiness = async move {
        all_listed.await;
        ready.store(true, Ordering::Relaxed);
        futures::future::pending::<()>().await
    };
    tokio::select! {
        biased;
        _ = reconcilers => {}
        _ = drivers => {}
        _ = readiness => {}
    }
    keeper.abort();
    info!("reconcilers stopped");
}

/// The shared watch of every kind a reconciler reads, but Secrets (only the McpServer
/// reconciler wants them, and only as triggers).
struct Watches {
    servers: Watched<McpServer>,
    agents: Watched<AgentSpec>,
    policies: Watched<McpTenantPolicy>,
    namespaces: Watched<PartialObjectMeta<Namespace>>,
    config_maps: Watched<PartialObjectMeta<ConfigMap>>,
    pods: Watched<PartialObjectMeta<Pod>>,
}

impl Watches {
    /// Every shared watch, and the drivers that feed them (each to be polled until the end).
    fn open(client: &Client, ns: Option<&str>) -> (Self, [BoxFuture<'static, ()>; 6]) {
        let any = || watcher::Config::default().any_semantic();
        let (server_watch, d1) =
            Watched::new(scoped::<McpServer>(client, ns), any(), Reconnect::new());
        let (agent_watch, d2) =
            Watched::new(scoped::<AgentSpec>(client, ns), any(), Reconnect::new());
        let (policy_watch, d3) = Watched::new(
            Api::<McpTenantPolicy>::all(client.clone()),
            any(),
            Reconnect::new(),
        );
        // Every namespace even under --watch-namespace: policies are cluster-wide.
        let (namespace_watch, d4) = Watched::new(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
            Reconnect::new(),
        );
        // CA bundles of McpServers, and the AgentSpecs' own grants ConfigMaps.
        let (config_map_watch, d5) = Watched::new(
            scoped::<PartialObjectMeta<ConfigMap>>(client, ns),
            watcher::Config::default(),
            Reconnect::new(),
        );
        // Only pods opted into injection are cached, and only until they finish (a finished pod
        // leaves the watch): the AgentSpecs count their out-of-date pods.
        let (pod_watch, d6) = Watched::new(
            scoped::<PartialObjectMeta<Pod>>(client, ns),
            watcher::Config::default()
                .labels(crate::inject::AGENT_LABEL)
                .fields("status.phase!=Succeeded,status.phase!=Failed"),
            Reconnect::new(),
        );
        let watches = Watches {
            servers: server_watch,
            agents: agent_watch,
            policies: policy_watch,
            namespaces: namespace_watch,
            config_maps: config_map_watch,
            pods: pod_watch,
        };
        (watches, [d1, d2, d3, d4, d5, d6])
    }
}

/// How a watch waits before trying again after an error. kube-runtime's default grows to 30 s
/// and resets only after 120 s without an error, and the controller's trigger backoff is one
/// for all its watches: after an apiserver restart (every watch answered 410 Expired) the
/// controller stayed blind for minutes. Here every watch has its own, capped at 2 s and reset
/// after 10 s of health, so the controller sees again within seconds of the apiserver
/// answering, at the cost of a few requests per second per watch while it does not.
struct Reconnect {
    next: std::time::Duration,
    last: Option<std::time::Instant>,
}

impl Reconnect {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(250);
    const MAX: std::time::Duration = std::time::Duration::from_secs(2);
    const HEALTHY: std::time::Duration = std::time::Duration::from_secs(10);

    fn new() -> Self {
        Reconnect {
            next: Self::FIRST,
            last: None,
        }
    }
}

impl Iterator for Reconnect {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<std::time::Duration> {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|at| now.duration_since(at) > Self::HEALTHY)
        {
            self.next = Self::FIRST;
        }
        self.last = Some(now);
        let wait = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(wait)
    }
}

impl kube::runtime::utils::Backoff for Reconnect {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// An Api over every namespace, or the one the controller is limited to.
pub(super) fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The McpServer reconciler, subscribed to its watches now, running when polled.
fn run_servers(
    ctx: Arc<ServerContext>,
    args: &ControllerArgs,
    w: &Watches,
    mut stop: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let client = ctx.base.client.clone();
    let store = w.servers.store();
    // The controller is not called for deleted objects: drop what we hold for them here.
    let deletions = tokio::spawn(forget_deleted_servers(
        w.servers.changes(),
        store.clone(),
        ctx.clone(),
    ));
    let controller = Controller::for_shared_stream(w.servers.applied(), store.clone())
        .with_config(controller::Config::default().concurrency(args.concurrency));
    let secrets = watcher(
        scoped::<PartialObjectMeta<Secret>>(&client, args.watch_namespace.as_deref()),
        watcher::Config::default(),
    )
    .backoff(Reconnect::new())
    .touched_objects();
    // A stdio server's Deployment: its availability decides whether the server is contacted.
    // Only the operator's own, by label; as metadata, since the reconcile reads it anyway
    // (every change, status included, moves its resourceVersion).
    let deployments = watcher(
        scoped::<PartialObjectMeta<Deployment>>(&client, args.watch_namespace.as_deref()),
        watcher::Config::default().labels(mcp_server::WORKLOAD_SELECTOR),
    )
    .backoff(Reconnect::new())
    .touched_objects();
    let pushed = pushed_changes(&ctx);
    let tenancy = server_tenancy(&ctx, w);
    let secret_store = store.clone();
    let cm_store = store.clone();
    let spill_ctx = ctx.clone();
    let (policy_store, namespace_store) = (store.clone(), store);
    let (policy_tenancy, namespace_tenancy) = (tenancy.clone(), tenancy);
    let run = controller
        .watches_stream(secrets, move |secret| {
            referencing(&secret_store, &secret, references::referenced_secrets)
        })
        .watches_stream(deployments, |deployment| {
            mcp_server::workload_owner(&deployment)
        })
        .watches_shared_stream(w.config_maps.touched(), move |cm| {
            let mut servers =
                referencing(&cm_store, cm.as_ref(), references::referenced_config_maps);
            servers.extend(spill_altered(&spill_ctx, &cm_store, &cm));
            servers
        })
        .watches_shared_stream(w.policies.touched(), move |_| {
            pinning_changed(&policy_store, &policy_tenancy, None)
        })
        .watches_shared_stream(w.namespaces.touched(), move |namespace| {
            pinning_changed(
                &namespace_store,
                &namespace_tenancy,
                Some(&namespace.name_any()),
            )
        })
        .reconcile_on(pushed)
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(mcp_server::reconcile, mcp_server::error_policy, ctx.clone())
        .for_each(|result| async move { log_failure(mcp_server::KIND, result) });
    async move {
        run.await;
        deletions.abort();
        ctx.detach();
    }
    .boxed()
}

/// Servers that push tools/list_changed trigger their own reconcile through this channel.
fn pushed_changes(ctx: &ServerContext) -> impl Stream<Item = ObjectRef<McpServer>> + use<> {
    let (trigger_tx, trigger_rx) = tokio::sync::mpsc::channel(1024);
    ctx.attach(trigger_tx);
    futures::stream::unfold(trigger_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    })
}

/// Policies and namespace labels decide whether a policy requires pinning for a server.
fn server_tenancy(ctx: &ServerContext, w: &Watches) -> Tenancy {
    let tenancy = Tenancy::new(
        w.policies.store(),
        w.namespaces.store(),
        Readiness::all(vec![w.policies.listed(), w.namespaces.listed()]),
    );
    ctx.attach_tenancy(tenancy.clone());
    tenancy
}

/// Forgets the schedule, subscription and metrics of every McpServer that is deleted, including
/// those deleted while the watch was down (absent from the relist).
async fn forget_deleted_servers(
    changes: impl Stream<Item = Change<McpServer>> + Send + 'static,
    store: Store<McpServer>,
    ctx: Arc<ServerContext>,
) {
    let mut changes = std::pin::pin!(changes);
    while let Some(change) = changes.next().await {
        match change {
            Change::Deleted(server) => ctx.forget(&key_of(&server)),
            Change::Relisted => {
                let listed: std::collections::HashSet<_> =
                    store.state().iter().map(|s| key_of(s)).collect();
                for key in ctx.remembered() {
                    if !listed.contains(&key) {
                        ctx.forget(&key);
                    }
                }
            }
            Change::Applied(_) => {}
        }
    }
}

/// The McpServers (in `namespace`, or all) whose status does not show what now turns pinning
/// on for them: a policy or a namespace's labels changed it.
fn pinning_changed(
    store: &Store<McpServer>,
    tenancy: &Tenancy,
    namespace: Option<&str>,
) -> Vec<ObjectRef<McpServer>> {
    store
        .state()
        .iter()
        .filter(|s| namespace.is_none_or(|ns| s.namespace().as_deref() == Some(ns)))
        .filter(|s| {
            let shown = s
                .status
                .as_ref()
                .and_then(|st| st.pinning.as_ref())
                .map(|p| p.required_by.clone())
                .unwrap_or_default();
            shown != tenancy.pinning_required_by_now(s)
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// The McpServers in the object's namespace that refer to it by name.
fn referencing<K: kube::Resource>(
    store: &kube::runtime::reflector::Store<McpServer>,
    object: &K,
    names: fn(&McpServer) -> Vec<String>,
) -> Vec<ObjectRef<McpServer>> {
    let namespace = object.meta().namespace.clone();
    let name = object.meta().name.clone().unwrap_or_default();
    store
        .state()
        .iter()
        .filter(|s| s.namespace() == namespace && names(s).contains(&name))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// The server whose spilled catalogue's ConfigMap someone other than the operator wrote: it is
/// read again now (its reconcile judges the ConfigMap and writes it again), not at its next
/// refresh. Grants never took the altered one's word meanwhile.
fn spill_altered(
    ctx: &ServerContext,
    store: &Store<McpServer>,
    config_map: &PartialObjectMeta<ConfigMap>,
) -> Option<ObjectRef<McpServer>> {
    let name = config_map.name_any();
    let server = catalog_spill::server_of_config_map(&name)?;
    let reference = ObjectRef::new(server).within(&config_map.namespace().unwrap_or_default());
    let spilled_here = store.get(&reference).is_some_and(|s| {
        s.status
            .as_ref()
            .and_then(|s| s.catalog_config_map.as_deref())
            == Some(name.as_str())
    });
    if !spilled_here
        || !catalog_spill::written_by_others(&config_map.metadata, &ctx.base.settings.field_manager)
    {
        return None;
    }
    ctx.read_again(&(
        reference.namespace.clone().unwrap_or_default(),
        server.to_string(),
    ));
    Some(reference)
}

/// The AgentSpec reconciler, subscribed to its watches now, running when polled.
fn run_agent_specs(
    ctx: Arc<Context>,
    args: &ControllerArgs,
    w: &Watches,
    mut stop: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let agents = w.agents.store();
    let resign = super::signing::current_key_changes(ctx.signing.keys.clone());
    let controller = Controller::for_shared_stream(w.agents.applied(), agents.clone())
        .with_config(controller::Config::default().concurrency(args.concurrency));
    let agent_ctx = Arc::new(agent_spec::AgentContext::new(
        ctx,
        agent_spec::Stores {
            servers: w.servers.store(),
            policies: w.policies.store(),
            namespaces: w.namespaces.store(),
            config_maps: w.config_maps.store(),
            pods: w.pods.store(),
            listed: Readiness::all(vec![
                w.servers.listed(),
                w.policies.listed(),
                w.namespaces.listed(),
                w.config_maps.listed(),
                w.pods.listed(),
            ]),
        },
        args.tenant_default,
        args.preload_budget,
    ));
    let (for_servers, for_policies, for_namespaces) =
        (agents.clone(), agents.clone(), agents.clone());
    let for_config_maps = agents;
    controller
        .watches_shared_stream(w.servers.touched(), move |server| {
            agent_spec::using_server(
                &for_servers,
                server.namespace().as_deref(),
                &server.name_any(),
            )
        })
        .watches_shared_stream(w.policies.touched(), move |_| {
            agent_spec::all(&for_policies)
        })
        .watches_shared_stream(w.namespaces.touched(), move |namespace| {
            agent_spec::in_namespace(&for_namespaces, &namespace.name_any())
        })
        // Only the grants ConfigMaps name an AgentSpec as their owner; by name too, so that one
        // whose owner reference was edited away is still put back.
        .owns_shared_stream(w.config_maps.touched())
        .watches_shared_stream(w.config_maps.touched(), move |cm| {
            agent_spec::of_config_map(&for_config_maps, &cm)
        })
        // A new current signing key: every grants ConfigMap is signed again.
        .reconcile_all_on(resign)
        .watches_shared_stream(w.pods.touched(), |pod| agent_spec::of_pod(&pod))
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(agent_spec::reconcile, agent_spec::error_policy, agent_ctx)
        .for_each(|result| async move { log_failure(agent_spec::KIND, result) })
        .boxed()
}

/// The McpTenantPolicy reconciler, subscribed to its watches now, running when polled.
fn run_policies(
    ctx: Arc<Context>,
    args: &ControllerArgs,
    w: &Watches,
    mut stop: watch::Receiver<bool>,
) -> BoxFuture<'static, ()> {
    let policies = w.policies.store();
    let controller = Controller::for_shared_stream(w.policies.applied(), policies.clone())
        .with_config(controller::Config::default().concurrency(args.concurrency));
    let policy_ctx = Arc::new(tenant_policy::PolicyContext {
        base: ctx,
        namespaces_listed: Readiness::all(vec![w.namespaces.listed()]),
        namespaces: w.namespaces.store(),
    });
    controller
        .watches_shared_stream(w.namespaces.touched(), move |_| {
            tenant_policy::all(&policies)
        })
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(
            tenant_policy::reconcile,
            tenant_policy::error_policy,
            policy_ctx,
        )
        .for_each(|result| async move { log_failure(tenant_policy::KIND, result) })
        .boxed()
}

/// Logs what the controller's runner reports, but a failed reconcile: its reconciler's
/// `error_policy` logged that already, with the object and the reason (two warnings per
/// failure and retry made a 30 s outage of 150 objects 738 lines).
fn log_failure<T, E: std::fmt::Display>(
    kind: &str,
    result: Result<T, controller::Error<E, watcher::Error>>,
) {
    match result {
        Ok(_)
        | Err(controller::Error::ObjectNotFound(_))
        | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(e) => warn!("{kind} controller: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;
    use serde_json::json;

    use super::*;
    use crate::controller::fixtures::server;
    use kube::runtime::reflector;

    #[test]
    fn reconnect_waits_grow_to_two_seconds_and_start_over() {
        let mut b = Reconnect::new();
        let waits: Vec<std::time::Duration> = (0..6).map(|_| b.next().unwrap()).collect();
        assert_eq!(
            waits,
            [250, 500, 1000, 2000, 2000, 2000].map(std::time::Duration::from_millis)
        );
        kube::runtime::utils::Backoff::reset(&mut b);
        assert_eq!(b.next(), Some(std::time::Duration::from_millis(250)));
    }

    #[test]
    fn a_secret_change_reaches_the_servers_in_its_namespace_naming_it() {
        let (store, mut writer) = reflector::store();
        let token = |secret: &str| {
            json!({"url": "https://a.example/mcp", "credentials": {
                "bearerToken": {"secretKeyRef": {"name": secret, "key": "token"}}}})
        };
        let mut other_ns = server("c", json!({}), token("gh-token"), json!(null));
        other_ns.metadata.namespace = Some("team-b".into());
        for s in [
            server("a", json!({}), token("gh-token"), json!(null)),
            server("b", json!({}), token("other"), json!(null)),
            other_ns,
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(s));
        }
        let secret = |name: &str, namespace: &str| {
            let mut s = Secret::default();
            s.metadata.name = Some(name.into());
            s.metadata.namespace = Some(namespace.into());
            s
        };
        let names = |refs: Vec<ObjectRef<McpServer>>| -> Vec<String> {
            refs.into_iter().map(|r| r.name).collect()
        };
        assert_eq!(
            names(referencing(
                &store,
                &secret("gh-token", "team-a"),
                references::referenced_secrets
            )),
            ["a"]
        );
        assert!(
            referencing(
                &store,
                &secret("gh-token", "team-c"),
                references::referenced_secrets
            )
            .is_empty()
        );
        assert!(
            referencing(
                &store,
                &secret("gh-token", "team-a"),
                references::referenced_config_maps
            )
            .is_empty()
        );
    }
}
