//! Wires the AgentSpec and McpTenantPolicy reconcilers to their watches and runs them until
//! `stop`, beside the McpServer reconciler (`run_controllers` in the module root starts this).
//!
//! ```text
//!  AgentSpec controller (namespaced kinds scoped by --watch-namespace)
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

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tracing::warn;

use crate::api::agent_spec::AgentSpec;
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::McpTenantPolicy;

use super::context::Context;
use super::{ControllerArgs, agent_spec, grants_publish, scoped, tenant_policy};

/// Runs both reconcilers until `stop` turns true.
pub async fn run(ctx: Arc<Context>, args: ControllerArgs, stop: watch::Receiver<bool>) {
    futures::join!(
        run_agent_specs(ctx.clone(), &args, stop.clone()),
        run_policies(ctx, &args, stop)
    );
}

async fn run_agent_specs(
    ctx: Arc<Context>,
    args: &ControllerArgs,
    mut stop: watch::Receiver<bool>,
) {
    let client = ctx.client.clone();
    let ns = args.watch_namespace.as_deref();
    let controller = Controller::new(
        scoped::<AgentSpec>(&client, ns),
        watcher::Config::default().any_semantic(),
    )
    .with_config(controller::Config::default().concurrency(args.concurrency));
    let agents = controller.store();

    let (servers, servers_writer) = reflector::store::<McpServer>();
    let server_events = watcher(scoped::<McpServer>(&client, ns), watcher::Config::default())
        .default_backoff()
        .reflect(servers_writer)
        .touched_objects();
    let (policies, policies_writer) = reflector::store::<McpTenantPolicy>();
    let policy_events = watcher(
        Api::<McpTenantPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
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
    .default_backoff()
    .reflect(namespaces_writer)
    .touched_objects();
    let (config_maps, config_maps_writer) = reflector::store::<PartialObjectMeta<ConfigMap>>();
    let config_map_events = watcher(
        scoped::<PartialObjectMeta<ConfigMap>>(&client, ns),
        watcher::Config::default().labels(&grants_publish::selector()),
    )
    .default_backoff()
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

async fn run_policies(ctx: Arc<Context>, args: &ControllerArgs, mut stop: watch::Receiver<bool>) {
    let client = ctx.client.clone();
    let controller = Controller::new(
        Api::<McpTenantPolicy>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .with_config(controller::Config::default().concurrency(args.concurrency));
    let policies = controller.store();
    let (namespaces, namespaces_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_events = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(namespaces_writer)
    .touched_objects();
    let policy_ctx = Arc::new(tenant_policy::PolicyContext {
        base: ctx,
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
