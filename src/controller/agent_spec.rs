//! The AgentSpec reconciler: reads the AgentSpec's McpServers, its namespace's labels and the
//! tenant policies from the controller's stores, converts them (`grants_input`), lets the pure
//! core intersect the planes (`grants::resolve`), publishes the grants ConfigMap when its digest
//! changed (`grants_publish`) and writes status when its content changed (`grants_status`).
//!
//! ```text
//!  [ AgentSpec ] ─watch──────────────────────────┐
//!  [ McpServer ] ─watch─► AgentSpecs naming it ──┤
//!  [ McpTenantPolicy ] ─watch─► every AgentSpec ─┼─► reconcile ─► ConfigMap <name>-mcp-grants
//!  [ Namespace ] ─watch─► AgentSpecs in it ──────┤                status (SSA), Events
//!  [ ConfigMap <name>-mcp-grants ] ─owns─────────┘
//! ```
//!
//! A name collision is not a reason to keep serving grants computed from older inputs (they
//! may hold a tool a policy has since withdrawn): the ConfigMap then holds the current
//! intersection minus every tool whose qualified name collides — neither tool is chosen — and
//! the AgentSpec is not Ready, its message naming both tools.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::agent_spec::{AgentSpec, AgentSpecStatus, grants_config_map_name};
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::McpTenantPolicy;
use crate::core::catalog::Catalog;
use crate::grants::{self, GrantsDocument, TenantDefault};

use super::catalog_spill;
use super::context::{Context, ServerKey};
use super::error::Error;
use super::grants_input::{
    fill_endpoints, policy_input, policy_selects, resolve_input, status_catalog, without_collisions,
};
use super::grants_publish::{self, published_digest};
use super::grants_status::{AgentTransitions, Published, next_agent_status};

pub const KIND: &str = "AgentSpec";

/// What the AgentSpec reconciler reads: the shared context and the stores fed by the very watch
/// streams that trigger it (so a trigger never runs ahead of what the store shows).
pub struct AgentContext {
    pub base: Arc<Context>,
    pub servers: Store<McpServer>,
    pub policies: Store<McpTenantPolicy>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    /// What a namespace no policy selects gets (`--tenant-default`).
    pub tenant_default: TenantDefault,
    /// Characters of granted schema above which a server is deferred (`--preload-budget`).
    pub preload_budget: u64,
    /// Spilled catalogues read back from their ConfigMaps, by server and catalogue digest, so
    /// a thousand AgentSpecs on one large server read its ConfigMap once.
    spilled: Mutex<HashMap<ServerKey, (String, Arc<Catalog>)>>,
}

impl AgentContext {
    pub fn new(
        base: Arc<Context>,
        servers: Store<McpServer>,
        policies: Store<McpTenantPolicy>,
        namespaces: Store<PartialObjectMeta<Namespace>>,
        config_maps: Store<PartialObjectMeta<ConfigMap>>,
        tenant_default: TenantDefault,
        preload_budget: u64,
    ) -> Self {
        AgentContext {
            base,
            servers,
            policies,
            namespaces,
            config_maps,
            tenant_default,
            preload_budget,
            spilled: Mutex::new(HashMap::new()),
        }
    }
}

/// Reconciles one AgentSpec.
pub async fn reconcile(agent: Arc<AgentSpec>, ctx: Arc<AgentContext>) -> Result<Action, Error> {
    ctx.base
        .metrics
        .time_reconcile(KIND, reconcile_inner(&agent, &ctx))
        .await
}

/// On a failed reconcile (an apiserver error): retry soon.
pub fn error_policy(agent: Arc<AgentSpec>, error: &Error, _ctx: Arc<AgentContext>) -> Action {
    warn!(
        agentspec = %agent.name_any(),
        namespace = %agent.namespace().unwrap_or_default(),
        reason = error.reason(),
        "reconcile failed: {error}"
    );
    Action::requeue(Duration::from_secs(10))
}

async fn reconcile_inner(agent: &AgentSpec, ctx: &AgentContext) -> Result<Action, Error> {
    if agent.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Resolving against a store that has not listed yet would publish too little.
    let _ = ctx.servers.wait_until_ready().await;
    let _ = ctx.policies.wait_until_ready().await;
    let _ = ctx.namespaces.wait_until_ready().await;
    let _ = ctx.config_maps.wait_until_ready().await;

    let namespace = agent.namespace().unwrap_or_default();
    let name = agent.name_any();
    let namespace_labels = ctx
        .namespaces
        .get(&ObjectRef::new(&namespace))
        .map(|ns| ns.labels().clone())
        .unwrap_or_default();

    let referenced: BTreeSet<String> = agent.spec.servers.iter().map(|s| s.name.clone()).collect();
    let servers: BTreeMap<String, Arc<McpServer>> = referenced
        .iter()
        .filter_map(|n| {
            let server = ctx.servers.get(&ObjectRef::new(n).within(&namespace))?;
            Some((n.clone(), server))
        })
        .collect();
    let mut spilled: BTreeMap<String, Arc<Catalog>> = BTreeMap::new();
    for (n, server) in &servers {
        if let Some(catalog) = spilled_catalog(ctx, server).await {
            spilled.insert(n.clone(), catalog);
        }
    }
    let with_catalogs: BTreeMap<String, (&McpServer, Option<&Catalog>)> = servers
        .iter()
        .map(|(n, s)| {
            let catalog = spilled
                .get(n)
                .map(|c| c.as_ref())
                .or_else(|| status_catalog(s));
            (n.clone(), (s.as_ref(), catalog))
        })
        .collect();
    let by_name: BTreeMap<String, &McpServer> = servers
        .iter()
        .map(|(n, s)| (n.clone(), s.as_ref()))
        .collect();

    let policies: Vec<_> = ctx
        .policies
        .state()
        .into_iter()
        .filter(|p| policy_selects(p, &namespace_labels))
        .map(|p| policy_input(&p, &referenced, &by_name))
        .collect();
    let input = resolve_input(
        agent,
        &with_catalogs,
        policies,
        ctx.tenant_default,
        ctx.preload_budget,
    );
    let resolution = grants::resolve(&input);
    let (mut doc, outcomes) = match &resolution.document {
        Some(doc) => (doc.clone(), resolution.servers.clone()),
        None => {
            let narrower = grants::resolve(&without_collisions(&input, &resolution.collisions));
            let doc = narrower
                .document
                .unwrap_or_else(|| GrantsDocument::new(Vec::new()));
            (doc, narrower.servers)
        }
    };
    fill_endpoints(&mut doc, &by_name);
    let digest = doc.digest();

    let config_map = grants_config_map_name(&name);
    let cached = ctx
        .config_maps
        .get(&ObjectRef::new(&config_map).within(&namespace))
        .and_then(|cm| published_digest(cm.as_ref()).map(str::to_string));
    let base = &ctx.base;
    if grants_publish::publish(
        &base.client,
        agent,
        &doc,
        &digest,
        cached.as_deref(),
        &base.settings.field_manager,
    )
    .await?
    {
        base.metrics.count_write("GrantsConfigMap");
    }

    let published = Published {
        config_map,
        digest,
        tools: doc.tool_count() as u32,
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let (status, transitions) = next_agent_status(
        agent.status.as_ref(),
        agent.meta().generation,
        &resolution,
        &outcomes,
        &published,
        now,
    );
    if agent.status.as_ref() != Some(&status) {
        write_status(agent, base, &status).await?;
    }
    announce(agent, base, &transitions).await;
    Ok(Action::await_change())
}

/// The full catalogue of a server whose catalogue was spilled to a ConfigMap, from the cache
/// when its digest is unchanged.
async fn spilled_catalog(ctx: &AgentContext, server: &McpServer) -> Option<Arc<Catalog>> {
    let status = server.status.as_ref()?;
    status.catalog_config_map.as_ref()?;
    let digest = status.catalog.as_ref()?.catalog.digest.clone();
    let key = (server.namespace().unwrap_or_default(), server.name_any());
    if let Some((d, catalog)) = ctx.spilled.lock().expect("cache lock").get(&key)
        && *d == digest
    {
        return Some(catalog.clone());
    }
    let catalog = Arc::new(catalog_spill::read(&ctx.base.client, server).await?);
    if catalog.digest != digest {
        // The ConfigMap is ahead of or behind the status: the next status change re-resolves.
        return None;
    }
    ctx.spilled
        .lock()
        .expect("cache lock")
        .insert(key, (digest, catalog.clone()));
    Some(catalog)
}

async fn write_status(
    agent: &AgentSpec,
    ctx: &Context,
    status: &AgentSpecStatus,
) -> Result<(), Error> {
    let api: Api<AgentSpec> =
        Api::namespaced(ctx.client.clone(), &agent.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": AgentSpec::api_version(&()),
        "kind": AgentSpec::kind(&()),
        "status": status,
    });
    api.patch_status(
        &agent.name_any(),
        &PatchParams::apply(&ctx.settings.field_manager).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.metrics.count_write(KIND);
    Ok(())
}

/// One log line and one event per transition.
async fn announce(agent: &AgentSpec, ctx: &Context, transitions: &AgentTransitions) {
    let namespace = agent.namespace().unwrap_or_default();
    let name = agent.name_any();
    let mut events = Vec::new();
    if let Some((reason, message)) = &transitions.became_unready {
        warn!(%namespace, agentspec = %name, %reason, "AgentSpec is not ready: {message}");
        events.push(Event {
            type_: EventType::Warning,
            reason: reason.clone(),
            note: Some(message.clone()),
            action: "Resolve".into(),
            secondary: None,
        });
    }
    if transitions.became_ready {
        info!(%namespace, agentspec = %name, "AgentSpec is ready");
        events.push(Event {
            type_: EventType::Normal,
            reason: "Ready".into(),
            note: Some("Every required server is available and the grants are published.".into()),
            action: "Resolve".into(),
            secondary: None,
        });
    }
    if let Some(change) = &transitions.grants_changed {
        info!(%namespace, agentspec = %name, "{change}");
        events.push(Event {
            type_: EventType::Normal,
            reason: "GrantsPublished".into(),
            note: Some(change.clone()),
            action: "Publish".into(),
            secondary: None,
        });
    }
    ctx.publish_events(&agent.object_ref(&()), events).await;
}

/// The AgentSpecs in `namespace` that use the McpServer `server` (McpServer watch → reconcile).
pub fn using_server(
    agents: &Store<AgentSpec>,
    namespace: Option<&str>,
    server: &str,
) -> Vec<ObjectRef<AgentSpec>> {
    agents
        .state()
        .iter()
        .filter(|a| {
            a.namespace().as_deref() == namespace && a.spec.servers.iter().any(|s| s.name == server)
        })
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// The AgentSpecs in one namespace (Namespace watch → reconcile).
pub fn in_namespace(agents: &Store<AgentSpec>, namespace: &str) -> Vec<ObjectRef<AgentSpec>> {
    agents
        .state()
        .iter()
        .filter(|a| a.namespace().as_deref() == Some(namespace))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Every AgentSpec (McpTenantPolicy watch → reconcile: a policy may select any namespace, and
/// may have stopped selecting one).
pub fn all(agents: &Store<AgentSpec>) -> Vec<ObjectRef<AgentSpec>> {
    agents
        .state()
        .iter()
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}
