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
//!  [ ConfigMap <name>-mcp-grants ] ─owns─────────┤
//!  [ Pod labelled mcp-operator.dev/agent ] ──────┘   status.pods: which injected pods lack a
//!    (metadata) ─► the AgentSpec it names             key the grants reference (inject::drift)
//! ```
//!
//! Signed, and revoked on delete: every published ConfigMap carries `grants.sig`
//! ([`crate::grants::signature`]) by the keyring's current key, and is compared by content
//! ([`publish::judge`]); a hand edit is put back at once with a Warning `GrantsTampered`. The
//! finalizer [`FINALIZER`] holds a deleted AgentSpec until its revoked document has been
//! served: published at once, then kept until no pod of the AgentSpec runs or `--revoke-wait`
//! has passed (the kubelet refreshes a mounted ConfigMap within about a minute); then the
//! ConfigMap is removed and the finalizer with it.
//!
//! A name collision is not a reason to keep serving grants computed from older inputs (they
//! may hold a tool a policy has since withdrawn): the ConfigMap then holds the current
//! intersection minus every tool whose qualified name collides — neither tool is chosen — and
//! the AgentSpec is not Ready, its message naming both tools.

pub(crate) mod input;
pub(crate) mod publish;
mod status;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::agent_spec::{AgentSpec, grants_config_map_name};
use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::McpTenantPolicy;
use crate::core::Catalog;
use crate::grants::signature::Keyring;
use crate::grants::{GrantsDocument, TenantDefault};

use super::health::readiness::Readiness;

use super::context::{Context, Signing};
use super::error::ReconcileError;
use super::shared::catalog_spill;
use super::shared::picking::policy_selects;
use super::shared::server_key::{ServerKey, key_of};
use super::shared::{events, status::apply_status};
use input::{Grants, decide_grants, policy_input, resolve_input, status_catalog};
use status::{AgentTransitions, Published, next_agent_status};

/// The finalizer that makes deleting an AgentSpec revoke its grants first.
pub const FINALIZER: &str = "mcp-operator.dev/revoke-grants";

/// What this controller last published or checked for one AgentSpec's grants ConfigMap: while
/// the ConfigMap's resourceVersion is unchanged, it is not read again.
#[derive(Clone, Debug)]
struct Memo {
    uid: String,
    resource_version: Option<String>,
    digest: String,
    key_id: String,
    sequence: u64,
}

pub const KIND: &str = "AgentSpec";

/// What the AgentSpec reconciler reads: the shared context and the stores fed by the very watch
/// streams that trigger it (so a trigger never runs ahead of what the store shows).
pub struct AgentContext {
    pub base: Arc<Context>,
    pub servers: Store<McpServer>,
    pub policies: Store<McpTenantPolicy>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    /// The opted-in pods' metadata (labelled mcp-operator.dev/agent, not finished).
    pub pods: Store<PartialObjectMeta<Pod>>,
    /// Every store above has received its first list.
    stores_listed: Readiness,
    /// What a namespace no policy selects gets (`--tenant-default`).
    pub tenant_default: TenantDefault,
    /// Characters of granted schema above which a server is deferred (`--preload-budget`).
    pub preload_budget: u64,
    /// Spilled catalogues read back from their ConfigMaps, so a thousand AgentSpecs on one
    /// large server read its ConfigMap once.
    spilled: SpilledCatalogs,
    /// The grants ConfigMaps published or checked, by (namespace, AgentSpec).
    published: Mutex<HashMap<(String, String), Memo>>,
}

/// The stores the AgentSpec reconciler reads, fed by the watches that trigger it.
pub struct Stores {
    pub servers: Store<McpServer>,
    pub policies: Store<McpTenantPolicy>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Every ConfigMap's metadata; the reconciler looks up its own grants ConfigMaps by name.
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    /// The metadata of the pods opted into injection that have not finished.
    pub pods: Store<PartialObjectMeta<Pod>>,
    /// Resolves once every store above has received its first list.
    pub listed: Readiness,
}

impl AgentContext {
    pub fn new(
        base: Arc<Context>,
        stores: Stores,
        tenant_default: TenantDefault,
        preload_budget: u64,
    ) -> Self {
        AgentContext {
            base,
            stores_listed: stores.listed,
            servers: stores.servers,
            policies: stores.policies,
            namespaces: stores.namespaces,
            config_maps: stores.config_maps,
            pods: stores.pods,
            tenant_default,
            preload_budget,
            spilled: SpilledCatalogs::default(),
            published: Mutex::new(HashMap::new()),
        }
    }
}

/// Reconciles one AgentSpec.
pub async fn reconcile(
    agent: Arc<AgentSpec>,
    ctx: Arc<AgentContext>,
) -> Result<Action, ReconcileError> {
    ctx.base
        .metrics
        .time_reconcile(KIND, reconcile_inner(&agent, &ctx))
        .await
}

/// On a failed reconcile (an apiserver error): retry soon.
pub fn error_policy(
    agent: Arc<AgentSpec>,
    error: &ReconcileError,
    _ctx: Arc<AgentContext>,
) -> Action {
    warn!(
        agentspec = %agent.name_any(),
        namespace = %agent.namespace().unwrap_or_default(),
        reason = error.reason(),
        "reconcile failed: {error}"
    );
    Action::requeue(Duration::from_secs(10))
}

async fn reconcile_inner(agent: &AgentSpec, ctx: &AgentContext) -> Result<Action, ReconcileError> {
    if agent.meta().deletion_timestamp.is_some() && !has_finalizer(agent) {
        return Ok(Action::await_change());
    }
    // Resolving against a store that has not listed yet would publish too little.
    ctx.stores_listed.wait().await;
    let keyring = signing_keys(&ctx.base.signing).await?;
    if agent.meta().deletion_timestamp.is_some() {
        return revoke(agent, ctx, &keyring).await;
    }
    // Before anything is published: a delete from now on revokes.
    if !has_finalizer(agent) {
        finalizer_patch(&ctx.base.client, agent, true)
            .await
            .map_err(ReconcileError::Finalizer)?;
    }

    // Gather: the AgentSpec's servers (with spilled catalogues read back) and its namespace.
    let namespace = agent.namespace().unwrap_or_default();
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

    // Decide, off the async workers: one tenant's patterns can cost seconds of CPU at the CRD's
    // maxima, and those threads also serve /healthz, renew the Lease and run other reconciles.
    let grants = off_the_async_workers(|| decide(agent, ctx, &referenced, &servers, &spilled));

    // Apply: the ConfigMap, then the events, then the status.
    let published = publish(agent, ctx, &grants, &keyring).await?;
    let pods = pod_drift(agent, ctx, &grants);
    let (status, transitions) = next_agent_status(
        agent.status.as_ref(),
        agent.meta().generation,
        &grants.resolution,
        &published,
        &pods,
        Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let base = &ctx.base;
    // The events go out before the status that records their transitions: a crash in between
    // leaves the old status, so the next reconcile sees the transition again and repeats the
    // event (the Event series counts it) instead of losing it.
    announce(agent, base, &transitions).await;
    if agent.status.as_ref() != Some(&status) {
        apply_status(&base.client, agent, &status, &base.settings.field_manager)
            .await
            .map_err(ReconcileError::StatusPatch)?;
        base.metrics.count_write(KIND);
    }
    Ok(Action::await_change())
}

/// Runs CPU-heavy work where it cannot stall the runtime's other tasks: on a multi-threaded
/// runtime (the controller's) the worker hands its queue to another thread first.
fn off_the_async_workers<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// The pure step: converts what was gathered into the core's input and lets it decide.
fn decide(
    agent: &AgentSpec,
    ctx: &AgentContext,
    referenced: &BTreeSet<String>,
    servers: &BTreeMap<String, Arc<McpServer>>,
    spilled: &BTreeMap<String, Arc<Catalog>>,
) -> Grants {
    let namespace = agent.namespace().unwrap_or_default();
    let namespace_labels = ctx
        .namespaces
        .get(&ObjectRef::new(&namespace))
        .map(|ns| ns.labels().clone())
        .unwrap_or_default();
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
        .map(|p| policy_input(&p, referenced, &by_name))
        .collect();
    let input = resolve_input(
        agent,
        &with_catalogs,
        policies,
        ctx.tenant_default,
        ctx.preload_budget,
    );
    decide_grants(&input, &by_name)
}

/// Which of the agent's injected pods lack a key the grants reference: the same references the
/// webhook projects into a new pod (every existing server's endpoint).
fn pod_drift(agent: &AgentSpec, ctx: &AgentContext, grants: &Grants) -> crate::inject::PodDrift {
    let namespace = agent.namespace();
    let current = crate::inject::References::of(
        grants
            .document
            .servers
            .iter()
            .filter_map(|s| s.endpoint.as_ref()),
    );
    let pods = ctx.pods.state();
    crate::inject::drift(
        &agent.name_any(),
        &current,
        pods.iter()
            .filter(|p| p.metadata.namespace == namespace)
            .map(|p| &p.metadata),
    )
}

/// Publishes the grants ConfigMap, signed, unless it already holds exactly that; says what it
/// holds. A ConfigMap someone else changed is put back with a Warning `GrantsTampered`.
async fn publish(
    agent: &AgentSpec,
    ctx: &AgentContext,
    grants: &Grants,
    keyring: &Keyring,
) -> Result<Published, ReconcileError> {
    let namespace = agent.namespace().unwrap_or_default();
    let config_map = grants_config_map_name(&agent.name_any());
    let (document, too_large) = publish::publishable(&grants.document);
    let intent = publish::Intent::new(&document, true);
    let cached = ctx
        .config_maps
        .get(&ObjectRef::new(&config_map).within(&namespace))
        .and_then(|cm| cm.resource_version());
    let memo = ctx.memo(agent);
    let checked = memo.as_ref().is_some_and(|m| {
        cached.is_some()
            && m.resource_version == cached
            && m.digest == intent.digest
            && m.key_id == keyring.current.id()
    });
    let mut sequence = memo.as_ref().map(|m| m.sequence);
    if !checked {
        let publication = publish_signed(agent, ctx, &intent, keyring, memo.as_ref()).await?;
        sequence = Some(publication.sequence);
        if let Some(message) = &publication.tampered {
            warn!(%namespace, agentspec = %agent.name_any(), reason = "GrantsTampered", "{message}");
            events::publish(
                &ctx.base.recorder,
                &agent.object_ref(&()),
                vec![Event {
                    type_: EventType::Warning,
                    reason: "GrantsTampered".into(),
                    note: Some(message.clone()),
                    action: "Publish".into(),
                    secondary: None,
                }],
            )
            .await;
        }
    }
    Ok(Published {
        config_map,
        digest: intent.digest.clone(),
        tools: document.tool_count() as u32,
        too_large,
        sequence,
    })
}

/// One [`publish::publish`], remembered.
async fn publish_signed(
    agent: &AgentSpec,
    ctx: &AgentContext,
    intent: &publish::Intent<'_>,
    keyring: &Keyring,
    memo: Option<&Memo>,
) -> Result<publish::Publication, ReconcileError> {
    let base = &ctx.base;
    let publication = publish::publish(
        &base.client,
        agent,
        intent,
        keyring,
        memo.map(|m| m.sequence),
        &base.settings.field_manager,
    )
    .await
    .map_err(ReconcileError::GrantsConfigMap)?;
    if publication.written {
        base.metrics.count_write("GrantsConfigMap");
    }
    ctx.remember(
        agent,
        Memo {
            uid: agent.uid().unwrap_or_default(),
            resource_version: publication.resource_version.clone(),
            digest: intent.digest.clone(),
            key_id: keyring.current.id().to_string(),
            sequence: publication.sequence,
        },
    );
    Ok(publication)
}

impl AgentContext {
    fn key(agent: &AgentSpec) -> (String, String) {
        (agent.namespace().unwrap_or_default(), agent.name_any())
    }

    /// What was last published for this AgentSpec (this uid: a recreated one starts afresh).
    fn memo(&self, agent: &AgentSpec) -> Option<Memo> {
        let memos = self.published.lock().expect("memo lock");
        memos
            .get(&Self::key(agent))
            .filter(|m| Some(&m.uid) == agent.uid().as_ref())
            .cloned()
    }

    fn remember(&self, agent: &AgentSpec, memo: Memo) {
        let mut memos = self.published.lock().expect("memo lock");
        memos.insert(Self::key(agent), memo);
    }

    fn forget(&self, agent: &AgentSpec) {
        let mut memos = self.published.lock().expect("memo lock");
        memos.remove(&Self::key(agent));
    }
}

/// The keyring to sign with: waits a little for a replica that has just started (or a keyring
/// the leader is creating), then fails the reconcile with the reason (it is retried).
async fn signing_keys(signing: &Signing) -> Result<Arc<Keyring>, ReconcileError> {
    let mut keys = signing.keys.clone();
    let waited = tokio::time::timeout(
        Duration::from_secs(10),
        keys.wait_for(|k| k.keyring().is_some()),
    )
    .await;
    if let Ok(Ok(state)) = waited
        && let Some(keyring) = state.keyring()
    {
        return Ok(keyring.clone());
    }
    let state = signing.keys.borrow().clone();
    Err(ReconcileError::SigningKeys(
        state
            .problem(&signing.at.namespace, &signing.at.name)
            .unwrap_or_else(|| "the grants signing keys are not loaded".into()),
    ))
}

fn has_finalizer(agent: &AgentSpec) -> bool {
    agent.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds or removes [`FINALIZER`], testing the list it edits (a concurrent change fails the
/// patch, and the reconcile is retried).
async fn finalizer_patch(
    client: &kube::Client,
    agent: &AgentSpec,
    add: bool,
) -> Result<(), kube::Error> {
    let finalizers = agent.finalizers();
    let ops = match (add, finalizers.iter().position(|f| f == FINALIZER)) {
        (true, Some(_)) | (false, None) => return Ok(()),
        (true, None) if finalizers.is_empty() => serde_json::json!([
            {"op": "test", "path": "/metadata/uid", "value": agent.uid()},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
        (true, None) => serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
        (false, Some(i)) => serde_json::json!([
            {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]),
    };
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("a JSON patch");
    let api: kube::Api<AgentSpec> =
        kube::Api::namespaced(client.clone(), &agent.namespace().unwrap_or_default());
    match api
        .patch(
            &agent.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone already: nothing holds it.
        Err(kube::Error::Api(s)) if s.code == 404 && !add => Ok(()),
        Err(e) => Err(e),
    }
}

/// The pods of this AgentSpec that have not finished (labelled for it, or injected for it).
fn running_pods(agent: &AgentSpec, ctx: &AgentContext) -> usize {
    let name = agent.name_any();
    let namespace = agent.namespace();
    ctx.pods
        .state()
        .iter()
        .filter(|p| p.metadata.namespace == namespace)
        .filter(|p| of_pod(p).iter().any(|r| r.name == name))
        .count()
}

/// A deleted AgentSpec: publish the signed revoked document, serve it until no pod of the
/// AgentSpec runs or `--revoke-wait` has passed, then remove the ConfigMap and the finalizer.
async fn revoke(
    agent: &AgentSpec,
    ctx: &AgentContext,
    keyring: &Keyring,
) -> Result<Action, ReconcileError> {
    let namespace = agent.namespace().unwrap_or_default();
    let name = agent.name_any();
    // The store may still hold the AgentSpec a moment after an earlier reconcile removed its
    // ConfigMap and finalizer (the ConfigMap's deletion queues this one): publishing again would
    // leave a revoked ConfigMap that nothing owns or removes. Only the apiserver knows (a list
    // by name: the controller's RBAC lists AgentSpecs, and gets them only with the webhook).
    let current = kube::Api::<AgentSpec>::namespaced(ctx.base.client.clone(), &namespace)
        .list(&kube::api::ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .map_err(ReconcileError::Finalizer)?;
    if !current.items.iter().any(has_finalizer) {
        return Ok(Action::await_change());
    }
    let revoked = GrantsDocument::revoked();
    let intent = publish::Intent::new(&revoked, false);
    let memo = ctx.memo(agent);
    let publication = publish_signed(agent, ctx, &intent, keyring, memo.as_ref()).await?;
    let wait = ctx.base.signing.revoke_wait;
    if publication.written {
        info!(%namespace, agentspec = %name, sequence = publication.sequence, "the AgentSpec is being deleted: published its revoked grants");
        events::publish(
            &ctx.base.recorder,
            &agent.object_ref(&()),
            vec![Event {
                type_: EventType::Normal,
                reason: "GrantsRevoked".into(),
                note: Some(format!(
                    "The AgentSpec is being deleted: its grants ConfigMap holds a signed revoked document, so its running agents can call nothing once the kubelet refreshes their volume. The ConfigMap goes when no pod of the AgentSpec runs, or after {}s.",
                    wait.as_secs()
                )),
                action: "Revoke".into(),
                secondary: None,
            }],
        )
        .await;
    }
    let served_for = publication
        .revoked_at
        .as_deref()
        .and_then(|at| at.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|at| {
            let since = k8s_openapi::jiff::Timestamp::now().duration_since(at);
            Duration::try_from(since).unwrap_or_default()
        })
        .unwrap_or_default();
    let pods = running_pods(agent, ctx);
    if pods > 0 && served_for < wait {
        // A pod's end triggers a reconcile too (the pod watch).
        let left = wait - served_for;
        return Ok(Action::requeue(left.min(Duration::from_secs(5))));
    }
    let base = &ctx.base;
    publish::remove(&base.client, agent)
        .await
        .map_err(ReconcileError::GrantsConfigMap)?;
    finalizer_patch(&base.client, agent, false)
        .await
        .map_err(ReconcileError::Finalizer)?;
    ctx.forget(agent);
    info!(%namespace, agentspec = %name, pods, served_s = served_for.as_secs(), "revoked grants served: removed the grants ConfigMap and the finalizer");
    Ok(Action::await_change())
}

/// The full catalogue of a server whose catalogue was spilled to a ConfigMap, from the cache
/// when its digest is unchanged.
async fn spilled_catalog(ctx: &AgentContext, server: &McpServer) -> Option<Arc<Catalog>> {
    let status = server.status.as_ref()?;
    status.catalog_config_map.as_ref()?;
    // Under pinning the same served catalogue can differ in which tools wait, and with
    // tools.overrides in how they are classified: the content key follows both (the status's
    // catalogue has no tools, but keeps the overrides' digest).
    let digest = match &status.pinning {
        Some(p) => p.content_key.clone(),
        None => crate::core::pinning::content_key(&status.catalog.as_ref()?.catalog),
    };
    let key = key_of(server);
    if let Some(catalog) = ctx.spilled.get(&key, &digest) {
        return Some(catalog);
    }
    // Only the catalogue the status's digest names: a tenant may edit the ConfigMap.
    let catalog = match catalog_spill::read_checked(&ctx.base.client, server).await {
        Ok(catalog_spill::Spilled::Catalog(catalog)) => Arc::new(catalog),
        Ok(catalog_spill::Spilled::Altered) => {
            let (namespace, name) = key_of(server);
            warn!(%namespace, mcpserver = %name,
                "the catalogue ConfigMap was altered by someone other than the operator: the server is left out of grants until it is written again");
            return None;
        }
        Ok(catalog_spill::Spilled::Missing) | Err(_) => return None,
    };
    if crate::core::pinning::content_key(&catalog) != digest {
        // The ConfigMap is ahead of or behind the status: the next status change re-resolves.
        return None;
    }
    ctx.spilled.insert(key, digest, catalog.clone(), |k| {
        ctx.servers
            .get(&ObjectRef::new(&k.1).within(&k.0))
            .is_some()
    });
    Some(catalog)
}

/// Spilled catalogues by server and catalogue digest. Entries of servers that no longer exist
/// are dropped whenever a catalogue is added, so the cache holds at most the live servers.
#[derive(Default)]
struct SpilledCatalogs(Mutex<HashMap<ServerKey, (String, Arc<Catalog>)>>);

impl SpilledCatalogs {
    fn get(&self, key: &ServerKey, digest: &str) -> Option<Arc<Catalog>> {
        let cache = self.0.lock().expect("cache lock");
        let (d, catalog) = cache.get(key)?;
        (d == digest).then(|| catalog.clone())
    }

    fn insert(
        &self,
        key: ServerKey,
        digest: String,
        catalog: Arc<Catalog>,
        exists: impl Fn(&ServerKey) -> bool,
    ) {
        let mut cache = self.0.lock().expect("cache lock");
        cache.retain(|k, _| exists(k));
        cache.insert(key, (digest, catalog));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().expect("cache lock").len()
    }
}

/// One log line and one event per transition.
async fn announce(agent: &AgentSpec, ctx: &Context, transitions: &AgentTransitions) {
    let namespace = agent.namespace().unwrap_or_default();
    let name = agent.name_any();
    let mut out = Vec::new();
    if let Some((reason, message)) = &transitions.became_unready {
        warn!(%namespace, agentspec = %name, %reason, "AgentSpec is not ready: {message}");
        out.push(Event {
            type_: EventType::Warning,
            reason: reason.clone(),
            note: Some(message.clone()),
            action: "Resolve".into(),
            secondary: None,
        });
    }
    if transitions.became_ready {
        info!(%namespace, agentspec = %name, "AgentSpec is ready");
        out.push(Event {
            type_: EventType::Normal,
            reason: "Ready".into(),
            note: Some("Every required server is available and the grants are published.".into()),
            action: "Resolve".into(),
            secondary: None,
        });
    }
    if let Some(message) = &transitions.pods_out_of_date {
        warn!(%namespace, agentspec = %name, "pods must be restarted: {message}");
        out.push(Event {
            type_: EventType::Warning,
            reason: "PodsOutOfDate".into(),
            note: Some(message.clone()),
            action: "Resolve".into(),
            secondary: None,
        });
    }
    if let Some(change) = &transitions.grants_changed {
        info!(%namespace, agentspec = %name, "{change}");
        out.push(Event {
            type_: EventType::Normal,
            reason: "GrantsPublished".into(),
            note: Some(change.clone()),
            action: "Publish".into(),
            secondary: None,
        });
    }
    events::publish(&ctx.recorder, &agent.object_ref(&()), out).await;
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

/// The AgentSpecs a pod opted into: the one its label names and the one it was injected for
/// (they differ only when someone relabelled the pod; both may need recounting).
pub fn of_pod(pod: &PartialObjectMeta<Pod>) -> Vec<ObjectRef<AgentSpec>> {
    let namespace = pod.namespace().unwrap_or_default();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    if let Some(l) = pod.labels().get(crate::inject::AGENT_LABEL) {
        names.insert(l);
    }
    if let Some(a) = pod.annotations().get(crate::inject::INJECTED_ANNOTATION) {
        names.insert(a);
    }
    names
        .into_iter()
        .filter(|n| !n.is_empty())
        .map(|n| ObjectRef::new(n).within(&namespace))
        .collect()
}

/// The AgentSpec a grants ConfigMap belongs to by its name (`<agentspec>-mcp-grants`): a
/// ConfigMap whose owner reference and labels were edited away still reaches its AgentSpec.
pub fn of_config_map(
    agents: &Store<AgentSpec>,
    config_map: &PartialObjectMeta<ConfigMap>,
) -> Vec<ObjectRef<AgentSpec>> {
    let name = config_map.name_any();
    // A server's spilled catalogue, written again (by the operator after someone altered it):
    // the AgentSpecs naming the server read it back.
    if let Some(server) = catalog_spill::server_of_config_map(&name) {
        return using_server(agents, config_map.namespace().as_deref(), server);
    }
    let Some(agent) = name.strip_suffix(crate::api::agent_spec::GRANTS_CONFIG_MAP_SUFFIX) else {
        return vec![];
    };
    let reference = ObjectRef::new(agent).within(&config_map.namespace().unwrap_or_default());
    if agents.get(&reference).is_some() {
        vec![reference]
    } else {
        vec![]
    }
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

#[cfg(test)]
mod tests {
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    use super::*;
    use crate::controller::fixtures::agent;

    fn store_of(agents: Vec<AgentSpec>) -> Store<AgentSpec> {
        let (reader, mut writer) = reflector::store();
        for a in agents {
            writer.apply_watcher_event(&watcher::Event::Apply(a));
        }
        reader
    }

    fn named(name: &str, namespace: &str, servers: &[&str]) -> AgentSpec {
        let mut a = agent(json!({
            "servers": servers.iter().map(|s| json!({"name": s})).collect::<Vec<_>>()
        }));
        a.metadata.name = Some(name.into());
        a.metadata.namespace = Some(namespace.into());
        a.metadata.uid = Some(format!("uid-{namespace}-{name}"));
        a
    }

    fn names(refs: Vec<ObjectRef<AgentSpec>>) -> Vec<String> {
        let mut names: Vec<String> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_server_change_reaches_the_agents_in_its_namespace_that_name_it() {
        let agents = store_of(vec![
            named("a", "team-a", &["gh", "jira"]),
            named("b", "team-a", &["jira"]),
            named("c", "team-b", &["gh"]),
        ]);
        assert_eq!(
            names(using_server(&agents, Some("team-a"), "gh")),
            ["team-a/a"]
        );
        assert_eq!(
            names(using_server(&agents, Some("team-a"), "jira")),
            ["team-a/a", "team-a/b"]
        );
        assert!(using_server(&agents, Some("team-c"), "gh").is_empty());
    }

    #[test]
    fn a_namespace_change_reaches_the_agents_in_it_and_a_policy_change_all() {
        let agents = store_of(vec![
            named("a", "team-a", &["gh"]),
            named("b", "team-a", &[]),
            named("c", "team-b", &["gh"]),
        ]);
        assert_eq!(
            names(in_namespace(&agents, "team-a")),
            ["team-a/a", "team-a/b"]
        );
        assert!(in_namespace(&agents, "other").is_empty());
        assert_eq!(names(all(&agents)).len(), 3);
    }

    #[test]
    fn a_grants_config_map_reaches_its_agent_spec_by_name_even_without_its_owner() {
        let agents = store_of(vec![named("bot", "team-a", &["gh"])]);
        let cm = |name: &str, namespace: &str| {
            let mut m = PartialObjectMeta::<ConfigMap>::default();
            m.metadata.name = Some(name.into());
            m.metadata.namespace = Some(namespace.into());
            m
        };
        assert_eq!(
            names(of_config_map(&agents, &cm("bot-mcp-grants", "team-a"))),
            ["team-a/bot"]
        );
        assert!(of_config_map(&agents, &cm("bot-mcp-grants", "team-b")).is_empty());
        assert!(of_config_map(&agents, &cm("other-mcp-grants", "team-a")).is_empty());
        assert!(of_config_map(&agents, &cm("bot", "team-a")).is_empty());
    }

    #[test]
    fn the_spilled_catalogue_cache_forgets_deleted_servers() {
        let cache = SpilledCatalogs::default();
        let key = |n: &str| ("team-a".to_string(), n.to_string());
        let catalog = Arc::new(crate::controller::fixtures::catalog());
        cache.insert(key("big"), "d1".into(), catalog.clone(), |_| true);
        assert!(cache.get(&key("big"), "d1").is_some());
        assert!(
            cache.get(&key("big"), "d2").is_none(),
            "another digest is a miss"
        );
        // "big" was deleted: adding another server's catalogue drops it.
        cache.insert(key("other"), "d3".into(), catalog, |k| k.1 != "big");
        assert!(cache.get(&key("big"), "d1").is_none());
        assert_eq!(cache.len(), 1);
    }
}
