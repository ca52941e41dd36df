//! Every watch the controller starts, and which reconciles each one triggers. The three
//! reconcilers run side by side until `stop` (leadership lost, or shutdown).
//!
//! ```text
//!  McpServer controller (namespaced kinds scoped by --watch-namespace)
//!    McpServer ─────────────── main watch, store = the McpServers the mappers search
//!    McpServer ─────────────── deletions: forget the schedule, subscription and gauges
//!    Secret (metadata) ─────── McpServers in its namespace naming it
//!    ConfigMap (metadata) ──── McpServers in its namespace naming it (CA bundles)
//!    tools/list_changed ────── the server that pushed it
//!    McpTenantPolicy ─reflect─► store ─► McpServers whose pinning requirement changed
//!    Namespace (metadata) ─reflect─► store ─► the same, in that namespace
//!  AgentSpec controller
//!    AgentSpec ─────────────── main watch, store = the AgentSpecs the mappers search
//!    McpServer ─reflect─► store ─► AgentSpecs in its namespace naming it
//!    McpTenantPolicy ─reflect─► store ─► every AgentSpec                 (cluster-wide)
//!    Namespace (metadata) ─reflect─► store ─► AgentSpecs in it
//!    ConfigMap (metadata, grants label) ─reflect─► store ─► owner AgentSpec
//!  McpTenantPolicy controller (cluster-wide)
//!    McpTenantPolicy ───────── main watch
//!    Namespace (metadata) ─reflect─► store ─► every policy
//! ```
//!
//! Each reconciler reads only stores fed by its own trigger streams: when a change triggers a
//! reconcile, the store already shows it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::api::agent_spec::AgentSpec;
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::McpTenantPolicy;

use super::context::Context;
use super::mcp_server::{self, ServerContext, Tenancy};
use super::readiness::{Readiness, listed};
use super::{ControllerArgs, agent_spec, tenant_policy};

/// Says the replica is ready once every reconciler's main watch has listed its kind: only then
/// are its watches really started.
#[derive(Clone)]
pub struct Started {
    ready: Arc<AtomicBool>,
    waiting: Arc<AtomicUsize>,
}

impl Started {
    /// Turns `ready` true once `reconcilers` main watches have listed.
    pub fn new(ready: Arc<AtomicBool>, reconcilers: usize) -> Self {
        Started {
            ready,
            waiting: Arc::new(AtomicUsize::new(reconcilers)),
        }
    }

    /// Marks one reconciler's main watch as listed.
    fn listed(&self) {
        if self.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.ready.store(true, Ordering::Relaxed);
        }
    }

    /// A controller over its own watch of `api`, whose first list marks one reconciler as
    /// listed. The controller's store is polled by nobody but the controller: kube-runtime
    /// 5.0.0's `Store::wait_until_ready` wakes only the last of several pollers, and the
    /// controller's runner is one of them (see `readiness`), so a second waiter could leave
    /// either this replica unready or the reconciler never started.
    fn controller<K>(&self, api: Api<K>, config: watcher::Config) -> Controller<K>
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: std::hash::Hash + Eq + Clone + Default + Send + Sync + Unpin,
    {
        let (reader, writer) = reflector::store::<K>();
        let started = self.clone();
        let mut first = true;
        let stream = watcher(api, config)
            .backoff(Reconnect::new())
            .reflect(writer)
            .inspect(move |event| {
                if first && matches!(event, Ok(watcher::Event::InitDone)) {
                    first = false;
                    started.listed();
                }
            })
            .applied_objects();
        Controller::for_stream(stream, reader)
    }
}

/// Runs the three reconcilers until `stop` turns true; `ready` turns true once their main
/// watches have listed.
pub async fn run(
    ctx: Arc<Context>,
    servers: Arc<ServerContext>,
    args: &ControllerArgs,
    ready: Arc<AtomicBool>,
    stop: watch::Receiver<bool>,
) {
    let started = Started::new(ready, 3);
    futures::join!(
        run_servers(servers, args, &started, stop.clone()),
        run_agent_specs(ctx.clone(), args, &started, stop.clone()),
        run_policies(ctx, args, &started, stop)
    );
    info!("reconcilers stopped");
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

async fn run_servers(
    ctx: Arc<ServerContext>,
    args: &ControllerArgs,
    started: &Started,
    mut stop: watch::Receiver<bool>,
) {
    let client = ctx.base.client.clone();
    let ns = args.watch_namespace.as_deref();
    let servers: Api<McpServer> = scoped(&client, ns);
    // The controller is not called for deleted objects: drop what we hold for them here.
    let deletions = tokio::spawn(forget_deleted_servers(servers.clone(), ctx.clone()));
    let controller = started
        .controller(servers, watcher::Config::default().any_semantic())
        .with_config(controller::Config::default().concurrency(args.concurrency))
        .trigger_backoff(Reconnect::new());
    let store = controller.store();
    let secrets = watcher(
        scoped::<PartialObjectMeta<Secret>>(&client, ns),
        watcher::Config::default(),
    )
    .backoff(Reconnect::new())
    .touched_objects();
    let config_maps = watcher(
        scoped::<PartialObjectMeta<ConfigMap>>(&client, ns),
        watcher::Config::default(),
    )
    .backoff(Reconnect::new())
    .touched_objects();
    // Servers that push tools/list_changed trigger their own reconcile through this channel.
    let (trigger_tx, trigger_rx) = tokio::sync::mpsc::channel(1024);
    ctx.attach(trigger_tx);
    let pushed = futures::stream::unfold(trigger_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    // Policies and namespace labels decide whether a policy requires pinning for a server.
    let (policies, policies_writer) = reflector::store::<McpTenantPolicy>();
    let policy_events = watcher(
        Api::<McpTenantPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(Reconnect::new())
    .reflect(policies_writer)
    .touched_objects();
    let (namespaces, namespaces_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_config = match ns {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    let namespace_events = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        namespace_config,
    )
    .backoff(Reconnect::new())
    .reflect(namespaces_writer)
    .touched_objects();
    let tenancy = Tenancy::new(policies, namespaces);
    ctx.attach_tenancy(tenancy.clone());
    let secret_store = store.clone();
    let cm_store = store.clone();
    let (policy_store, namespace_store) = (store.clone(), store.clone());
    let (policy_tenancy, namespace_tenancy) = (tenancy.clone(), tenancy);
    controller
        .watches_stream(secrets, move |secret| {
            referencing(&secret_store, &secret, mcp_server::referenced_secrets)
        })
        .watches_stream(config_maps, move |cm| {
            referencing(&cm_store, &cm, mcp_server::referenced_config_maps)
        })
        .watches_stream(policy_events, move |_: McpTenantPolicy| {
            pinning_changed(&policy_store, &policy_tenancy, None)
        })
        .watches_stream(
            namespace_events,
            move |namespace: PartialObjectMeta<Namespace>| {
                pinning_changed(
                    &namespace_store,
                    &namespace_tenancy,
                    Some(&namespace.name_any()),
                )
            },
        )
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
    ctx.detach();
}

/// Forgets the schedule, subscription and metrics of every McpServer that is deleted, including
/// those deleted while the watch was down (absent from the relist).
async fn forget_deleted_servers(servers: Api<McpServer>, ctx: Arc<ServerContext>) {
    let mut listed = std::collections::HashSet::new();
    let mut events = watcher(servers, watcher::Config::default().any_semantic())
        .backoff(Reconnect::new())
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Delete(server)) => {
                ctx.forget(&mcp_server::key_of(&server));
            }
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitApply(server)) => {
                listed.insert(mcp_server::key_of(&server));
            }
            Ok(watcher::Event::InitDone) => {
                for key in ctx.remembered() {
                    if !listed.contains(&key) {
                        ctx.forget(&key);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The McpServers (in `namespace`, or all) whose status does not show what now turns pinning
/// on for them: a policy or a namespace's labels changed it.
fn pinning_changed(
    store: &kube::runtime::reflector::Store<McpServer>,
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

async fn run_agent_specs(
    ctx: Arc<Context>,
    args: &ControllerArgs,
    started: &Started,
    mut stop: watch::Receiver<bool>,
) {
    let client = ctx.client.clone();
    let ns = args.watch_namespace.as_deref();
    let controller = started
        .controller(
            scoped::<AgentSpec>(&client, ns),
            watcher::Config::default().any_semantic(),
        )
        .with_config(controller::Config::default().concurrency(args.concurrency))
        .trigger_backoff(Reconnect::new());
    let agents = controller.store();

    let (servers, servers_writer) = reflector::store::<McpServer>();
    let server_events = watcher(scoped::<McpServer>(&client, ns), watcher::Config::default())
        .backoff(Reconnect::new())
        .reflect(servers_writer)
        .touched_objects();
    let (policies, policies_writer) = reflector::store::<McpTenantPolicy>();
    let policy_events = watcher(
        Api::<McpTenantPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(Reconnect::new())
    .reflect(policies_writer)
    .touched_objects();
    let (namespaces, namespaces_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_config = match ns {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    let namespace_events = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        namespace_config,
    )
    .backoff(Reconnect::new())
    .reflect(namespaces_writer)
    .touched_objects();
    let (config_maps, config_maps_writer) = reflector::store::<PartialObjectMeta<ConfigMap>>();
    let config_map_events = watcher(
        scoped::<PartialObjectMeta<ConfigMap>>(&client, ns),
        watcher::Config::default().labels(&agent_spec::publish::selector()),
    )
    .backoff(Reconnect::new())
    .reflect(config_maps_writer)
    .touched_objects();

    let agent_ctx = Arc::new(agent_spec::AgentContext::new(
        ctx,
        servers,
        policies,
        namespaces,
        config_maps,
        args.tenant_default,
        args.preload_budget,
    ));
    let (for_servers, for_policies, for_namespaces) = (agents.clone(), agents.clone(), agents);
    controller
        .watches_stream(server_events, move |server: McpServer| {
            agent_spec::using_server(
                &for_servers,
                server.namespace().as_deref(),
                &server.name_any(),
            )
        })
        .watches_stream(policy_events, move |_: McpTenantPolicy| {
            agent_spec::all(&for_policies)
        })
        .watches_stream(
            namespace_events,
            move |namespace: PartialObjectMeta<Namespace>| {
                agent_spec::in_namespace(&for_namespaces, &namespace.name_any())
            },
        )
        .owns_stream(config_map_events)
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(agent_spec::reconcile, agent_spec::error_policy, agent_ctx)
        .for_each(|result| async move { log_failure(agent_spec::KIND, result) })
        .await;
}

async fn run_policies(
    ctx: Arc<Context>,
    args: &ControllerArgs,
    started: &Started,
    mut stop: watch::Receiver<bool>,
) {
    let client = ctx.client.clone();
    let controller = started
        .controller(
            Api::<McpTenantPolicy>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .with_config(controller::Config::default().concurrency(args.concurrency))
        .trigger_backoff(Reconnect::new());
    let policies = controller.store();
    let (namespaces, namespaces_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_events = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(Reconnect::new())
    .reflect(namespaces_writer)
    .touched_objects();
    let policy_ctx = Arc::new(tenant_policy::PolicyContext {
        base: ctx,
        namespaces_listed: Readiness::all(vec![listed(&namespaces)]),
        namespaces,
    });
    controller
        .watches_stream(namespace_events, move |_: PartialObjectMeta<Namespace>| {
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
        .await;
}

fn log_failure<T, E: std::fmt::Display>(
    kind: &str,
    result: Result<T, controller::Error<E, watcher::Error>>,
) {
    match result {
        Ok(_) | Err(controller::Error::ObjectNotFound(_)) => {}
        Err(e) => warn!("{kind} controller: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;
    use serde_json::json;

    use super::*;
    use crate::controller::fixtures::server;

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
    fn ready_only_once_every_main_watch_has_listed() {
        let ready = Arc::new(AtomicBool::new(false));
        let started = Started::new(ready.clone(), 3);
        started.listed();
        started.listed();
        assert!(
            !ready.load(Ordering::Relaxed),
            "one watch has not listed yet"
        );
        started.listed();
        assert!(ready.load(Ordering::Relaxed));
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
                mcp_server::referenced_secrets
            )),
            ["a"]
        );
        assert!(
            referencing(
                &store,
                &secret("gh-token", "team-c"),
                mcp_server::referenced_secrets
            )
            .is_empty()
        );
        assert!(
            referencing(
                &store,
                &secret("gh-token", "team-a"),
                mcp_server::referenced_config_maps
            )
            .is_empty()
        );
    }
}
