//! The McpServer reconciler: resolve credentials; when the server's inputs changed or it is
//! due, start a probe (`mcp::read_server` in its own task, outside the reconcile slots) and
//! return; the finished probe triggers the next reconcile, which takes its result, decides the
//! status in one pure step ([`status::decide`]: conditions, catalogue, under pinning which tools
//! wait for approval, and whether a large catalogue moves to its companion ConfigMap), then
//! applies: the ConfigMap, one event per transition, the status (only when its content
//! changed), metrics.
//!
//! ```text
//!  reconcile_inner
//!   gather   pinning (spec, policies) ─► stdio::workload ─► probing::probe_if_due (credentials,
//!            the probe's plan; see probing) ─► the previous status in full ─► kept pins
//!   decide   status::decide_server (pure: one rule per condition) ─► Decision
//!   apply    catalog_spill (write / remove) ─► Events ─► status (SSA) ─► pinning::store ─► metrics
//! ```
//!
//! - [`credentials`]: Secrets and ConfigMaps → credentials and TLS settings.
//! - [`probing`]: when a server is due ([`probing::schedule`], [`probing::resume`]), the probe
//!   tasks and their lanes ([`probing::probes`]), the connection they use
//!   ([`probing::connection`]), and the `tools/list_changed` subscriptions.
//! - [`pinning`]: whether pinning is on (spec, tenant policies) and the approvals given;
//!   [`pinning::store`]: the pins also kept in the operator's namespace, for a recreated
//!   McpServer.
//! - [`status`]: the pure decision.
//! - [`stdio`]: a stdio server's Deployment and Service ([`stdio::workload`], kube calls),
//!   built and judged by [`stdio::build`] (pure).
//! - The companion ConfigMap of a catalogue too large for status is
//!   [`crate::controller::shared::catalog_spill`] (the AgentSpec reconciler reads it too).

pub(crate) mod credentials;
mod pinning;
mod probing;
mod status;
mod stdio;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::api::conditions::{READY, find};
use crate::api::mcp_server::{McpServer, McpServerStatus};
use crate::api::tenant_policy::McpTenantPolicy;

use super::context::Context;
use super::error::ReconcileError;
use super::health::metrics::ReasonLabels;
use super::health::readiness::Readiness;
use super::shared::catalog_spill;
use super::shared::picking::pinning_required_by;
use super::shared::server_key::{ServerKey, key_of};
use super::shared::{events, status::apply_status};
use catalog_spill::Spilled;
use pinning::store as pin_store;
use probing::probes::Prober;
use probing::{PROBE_RECHECK, Probe, probe_if_due};
use probing::{schedule, subscriptions};
use schedule::ProbeSchedule;
use status::{Decision, Finding, Spill, Transitions};
use stdio::workload;
use subscriptions::Subscriptions;

pub use catalog_spill::decompress as decompress_spilled_catalog;
pub(crate) use stdio::build::WATCH_SELECTOR as WORKLOAD_SELECTOR;
pub(crate) use workload::owner_of as workload_owner;

pub const KIND: &str = "McpServer";

/// What the McpServer reconciler holds besides the shared context: when each server was last
/// probed, the probes running, the open list_changed subscriptions, and this term's stores of
/// the tenant policies and namespaces (a policy may require pinning).
pub struct ServerContext {
    pub base: Arc<Context>,
    schedule: Arc<ProbeSchedule>,
    prober: Arc<Prober>,
    subscriptions: Subscriptions,
    tenancy: Mutex<Option<Tenancy>>,
    /// Per server, the entry of the pin store last written and what it held (its fingerprint):
    /// written again only when it changes.
    pins_written: Mutex<HashMap<ServerKey, (String, String)>>,
}

/// The stores telling which McpTenantPolicies select a server's namespace.
#[derive(Clone)]
pub struct Tenancy {
    pub policies: Store<McpTenantPolicy>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    listed: Readiness,
}

impl Tenancy {
    /// `listed` resolves once both stores have listed.
    pub fn new(
        policies: Store<McpTenantPolicy>,
        namespaces: Store<PartialObjectMeta<Namespace>>,
        listed: Readiness,
    ) -> Self {
        Tenancy {
            policies,
            namespaces,
            listed,
        }
    }

    /// What turns pinning on for `server` (empty: it is off), from stores that have listed.
    pub async fn pinning_required_by(&self, server: &McpServer) -> Vec<String> {
        self.listed.wait().await;
        self.pinning_required_by_now(server)
    }

    /// The same from the stores as they are (the watch mappers call it).
    pub fn pinning_required_by_now(&self, server: &McpServer) -> Vec<String> {
        let namespace = server.namespace().unwrap_or_default();
        let labels = self
            .namespaces
            .get(&ObjectRef::new(&namespace))
            .map(|ns| ns.labels().clone())
            .unwrap_or_default();
        let policies = self.policies.state();
        pinning_required_by(server, policies.iter().map(|p| p.as_ref()), &labels)
    }
}

impl ServerContext {
    /// Makes the server's next reconcile read it again, whatever its refresh interval says.
    pub fn read_again(&self, key: &ServerKey) {
        self.schedule.force_probe(key);
    }

    pub fn new(base: Arc<Context>) -> Self {
        let schedule = Arc::new(ProbeSchedule::new(base.settings.max_failure_backoff));
        let prober = Arc::new(Prober::new(
            base.settings.probe_concurrency,
            base.metrics.clone(),
        ));
        ServerContext {
            base,
            schedule,
            prober,
            subscriptions: Subscriptions::default(),
            tenancy: Mutex::new(None),
            pins_written: Mutex::new(HashMap::new()),
        }
    }

    /// The policy and namespace stores of a (new) controller run.
    pub fn attach_tenancy(&self, tenancy: Tenancy) {
        *self.tenancy.lock().expect("tenancy lock") = Some(tenancy);
    }

    fn tenancy(&self) -> Option<Tenancy> {
        self.tenancy.lock().expect("tenancy lock").clone()
    }

    /// Starts delivering pushed changes and finished probes to a (new) controller run as
    /// reconcile triggers.
    pub fn attach(&self, trigger: mpsc::Sender<ObjectRef<McpServer>>) {
        self.prober.attach(trigger.clone());
        self.subscriptions.attach(trigger);
    }

    /// Stops every probe and closes every subscription (leadership lost, shutdown).
    pub fn detach(&self) {
        self.prober.detach();
        self.subscriptions.detach();
    }

    /// Every server the reconciler remembers.
    pub fn remembered(&self) -> Vec<ServerKey> {
        self.schedule.keys()
    }

    /// Drops everything the reconciler holds for a server that is gone.
    pub fn forget(&self, key: &ServerKey) {
        self.schedule.forget(key);
        self.prober.forget(key);
        self.subscriptions.remove(key);
        self.pins_written.lock().expect("pins lock").remove(key);
        self.base.metrics.set_server(&key.0, &key.1, None);
        self.base
            .metrics
            .set_awaiting_approval(&key.0, &key.1, None);
    }
}

/// Reconciles one McpServer.
pub async fn reconcile(
    server: Arc<McpServer>,
    ctx: Arc<ServerContext>,
) -> Result<Action, ReconcileError> {
    ctx.base
        .metrics
        .time_reconcile(KIND, reconcile_inner(&server, &ctx))
        .await
}

/// On a failed reconcile (an apiserver error): retry soon.
pub fn error_policy(
    server: Arc<McpServer>,
    error: &ReconcileError,
    _ctx: Arc<ServerContext>,
) -> Action {
    warn!(
        mcpserver = %key_of(&server).1,
        namespace = %key_of(&server).0,
        reason = error.reason(),
        "reconcile failed: {error}"
    );
    Action::requeue(Duration::from_secs(10))
}

/// One reconcile, top to bottom: gather what the server says now (when it is due), decide
/// its status in one pure step, apply it.
async fn reconcile_inner(
    server: &McpServer,
    ctx: &ServerContext,
) -> Result<Action, ReconcileError> {
    let key = key_of(server);
    if server.meta().deletion_timestamp.is_some() {
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let gathered = match gather(server, ctx, &key).await? {
        Gather::Wait(action) => return Ok(action),
        Gather::Found(gathered) => gathered,
    };
    let decision = decide_status(server, &key, &gathered);
    if let Err(e) = apply(server, ctx, &decision, gathered.spill_altered).await {
        // What this probe found was not written (a lost lease, an apiserver outage): the next
        // reconcile must read and write again, not wait for the refresh interval with a status
        // that never saw the probe.
        ctx.schedule.force_probe(&key);
        return Err(e);
    }
    keep_pins(server, ctx, &key, &gathered.store_key, &decision).await?;
    record(ctx, &key, &decision.status, &gathered.finding);
    Ok(Action::requeue(gathered.next_wait))
}

/// What the gather step found, when there is something to decide.
struct Gathered {
    finding: Finding,
    /// When the server is next due.
    next_wait: Duration,
    /// Some while pinning is on (with the pins kept in the store, for a recreated server).
    pinning: Option<pinning::Settings>,
    /// The status as last written, a spilled catalogue read back in full.
    previous: Option<McpServerStatus>,
    /// The spilled catalogue's ConfigMap holds something else than status says.
    spill_altered: bool,
    /// Where the pin store keeps this server's pins.
    store_key: String,
    /// A stdio server's URL (its Service's), for status.
    workload_url: Option<String>,
}

enum Gather {
    /// Nothing to decide yet (not due, or a probe is running): requeue so.
    Wait(Action),
    Found(Box<Gathered>),
}

/// Gather: whether pinning is on, a stdio server's workload, what the server says now when it
/// is due, the status as last written, and the pins kept for a server that begins pinning.
async fn gather(
    server: &McpServer,
    ctx: &ServerContext,
    key: &ServerKey,
) -> Result<Gather, ReconcileError> {
    let required_by = match ctx.tenancy() {
        Some(tenancy) => tenancy.pinning_required_by(server).await,
        // Only tests run the reconciler without watches: the spec alone decides.
        None => pinning_required_by(server, [], &Default::default()),
    };
    let mut pinning = pinning::settings(server, required_by);
    // A stdio server first gets its Deployment and Service; until they serve, the status says
    // why, and the server is not contacted.
    let workload = workload::reconcile(server, &ctx.base).await?;
    let url = match &workload {
        Some(observed) => observed.url.clone(),
        None => server.spec.url.clone(),
    };
    let (finding, next_wait) = match workload.as_ref().and_then(|w| w.not_ready.clone()) {
        Some(not_ready) => {
            // Probe as soon as it serves; pod states (an image pull failing) change without
            // the Deployment changing, so look again soon.
            ctx.schedule.force_probe(key);
            (Finding::Workload(not_ready), WORKLOAD_RECHECK)
        }
        None => match probe_if_due(server, ctx, key, pinning.as_ref(), url.as_deref()).await {
            Probe::NotDue(wait) => return Ok(Gather::Wait(Action::requeue(wait))),
            // The finished probe triggers the next reconcile; the requeue is only a safety net.
            Probe::Running => return Ok(Gather::Wait(Action::requeue(PROBE_RECHECK))),
            Probe::Done(finding, next_wait) => (finding, next_wait),
        },
    };
    let (previous, spill_altered) = previous_status_in_full(server, ctx).await?;
    let store_key = pin_store::key(&key.1, &server.spec);
    if let (Some(store), Some(settings), Finding::Read { .. }) =
        (pin_store(ctx), pinning.as_mut(), &finding)
        && previous.as_ref().and_then(|p| p.pinning.as_ref()).is_none()
    {
        settings.kept = store
            .read(&ctx.base.client, &key.0, &store_key)
            .await
            .map_err(ReconcileError::PinStore)?
            .map(|pins| pin_store::catalog_of(&pins));
        if let Some(kept) = &settings.kept {
            info!(namespace = %key.0, mcpserver = %key.1, pins = kept.tools.len(),
                "pinning begins from the pins kept for this name and place, not from what is served");
        }
    }
    Ok(Gather::Found(Box::new(Gathered {
        finding,
        next_wait,
        pinning,
        previous,
        spill_altered,
        store_key,
        workload_url: workload.and_then(|w| w.url),
    })))
}

/// Decide (pure): the status, its transitions and the companion ConfigMap.
fn decide_status(server: &McpServer, key: &ServerKey, gathered: &Gathered) -> Decision {
    status::decide_server(
        &server.spec,
        server.status.as_ref(),
        gathered.previous.as_ref(),
        server.meta().generation,
        &gathered.finding,
        gathered.pinning.as_ref(),
        catalog_spill::config_map_name(&key.1),
        gathered.workload_url.clone(),
        Time(k8s_openapi::jiff::Timestamp::now()),
    )
}

fn pin_store(ctx: &ServerContext) -> Option<pin_store::PinStore> {
    ctx.base
        .settings
        .pin_store_namespace
        .clone()
        .map(|namespace| pin_store::PinStore { namespace })
}

/// Keeps the pins the status now holds in the pin store when they changed, and removes them
/// once pinning is turned off (so turning it on again begins afresh, as it did before the
/// store). Runs after the status write: the store never holds pins the status did not.
async fn keep_pins(
    server: &McpServer,
    ctx: &ServerContext,
    key: &ServerKey,
    store_key: &str,
    decision: &Decision,
) -> Result<(), ReconcileError> {
    let Some(store) = pin_store(ctx) else {
        return Ok(());
    };
    let base = &ctx.base;
    let catalog = match &decision.spill {
        Spill::Write(full) => Some(full),
        _ => decision.status.catalog.as_ref().map(|c| &c.catalog),
    };
    let pins = decision
        .status
        .pinning
        .as_ref()
        .and(catalog)
        .map(pin_store::pins_of);
    match pins {
        Some(pins) => {
            let written = (store_key.to_string(), pin_store::fingerprint(&pins));
            if ctx.pins_written.lock().expect("pins lock").get(key) == Some(&written) {
                return Ok(());
            }
            store
                .write(
                    &base.client,
                    &key.0,
                    store_key,
                    Some(&pins),
                    &base.settings.field_manager,
                )
                .await
                .map_err(ReconcileError::PinStore)?;
            base.metrics.count_write("PinStore");
            ctx.pins_written
                .lock()
                .expect("pins lock")
                .insert(key.clone(), written);
        }
        None if decision.status.pinning.is_none()
            && server.status.as_ref().is_some_and(|s| s.pinning.is_some()) =>
        {
            store
                .write(
                    &base.client,
                    &key.0,
                    store_key,
                    None,
                    &base.settings.field_manager,
                )
                .await
                .map_err(ReconcileError::PinStore)?;
            ctx.pins_written.lock().expect("pins lock").remove(key);
        }
        None => {}
    }
    Ok(())
}

/// How soon a stdio server whose workload does not serve is looked at again.
const WORKLOAD_RECHECK: Duration = Duration::from_secs(10);

/// Writes what the decision says: the companion ConfigMap, the events of its transitions,
/// then the status when it changed. The events go first: a crash before the status write
/// leaves the old status, so the next reconcile sees the transition again and repeats its
/// event (the Event series counts it) rather than losing it.
async fn apply(
    server: &McpServer,
    ctx: &ServerContext,
    decision: &Decision,
    spill_altered: bool,
) -> Result<(), ReconcileError> {
    let base = &ctx.base;
    match &decision.spill {
        Spill::Write(catalog) => {
            if catalog_spill::publish(
                &base.client,
                server,
                catalog,
                &base.settings.field_manager,
                spill_altered,
            )
            .await
            .map_err(ReconcileError::CatalogSpillWrite)?
            {
                base.metrics.count_write("CatalogConfigMap");
            }
            if spill_altered {
                let name = catalog_spill::config_map_name(&server.name_any());
                let note = format!(
                    "ConfigMap {name} did not hold the catalogue status.catalogConfigMapDigest names (someone other than the operator wrote it); it was written again. Grants are never built from an altered catalogue: they leave the server out while one is read."
                );
                events::publish(
                    &base.recorder,
                    &server.object_ref(&()),
                    vec![Event {
                        type_: EventType::Warning,
                        reason: "CatalogConfigMapAltered".into(),
                        note: Some(note),
                        action: "Spill".into(),
                        secondary: None,
                    }],
                )
                .await;
            }
        }
        Spill::Remove => catalog_spill::remove(&base.client, server)
            .await
            .map_err(ReconcileError::CatalogSpillRemove)?,
        Spill::Nothing => {}
    }
    announce(server, base, &decision.transitions).await;
    if server.status.as_ref() != Some(&decision.status) {
        apply_status(
            &base.client,
            server,
            &decision.status,
            &base.settings.field_manager,
        )
        .await
        .map_err(ReconcileError::StatusPatch)?;
        base.metrics.count_write(KIND);
    }
    Ok(())
}

/// The server gauges, and one probe counted by its outcome when a probe ran (a credential
/// failure means the server was never contacted, so it is no probe).
fn record(ctx: &ServerContext, key: &ServerKey, status: &McpServerStatus, finding: &Finding) {
    let reason = record_gauges(ctx, key, status);
    if probe_ran(finding) {
        ctx.base
            .metrics
            .probes
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// The server gauges from its status; returns the Ready reason.
fn record_gauges<'s>(ctx: &ServerContext, key: &ServerKey, status: &'s McpServerStatus) -> &'s str {
    let metrics = &ctx.base.metrics;
    let reason = find(&status.conditions, READY).map_or("Unknown", |c| c.reason.as_str());
    metrics.set_server(
        &key.0,
        &key.1,
        Some((
            reason,
            status.catalog.as_ref().map(|c| c.catalog.tool_count),
        )),
    );
    metrics.set_awaiting_approval(
        &key.0,
        &key.1,
        status.pinning.as_ref().map(|p| p.waiting_count),
    );
    reason
}

/// Whether the finding comes from contacting the server.
fn probe_ran(finding: &Finding) -> bool {
    !matches!(finding, Finding::Credentials(_) | Finding::Workload(_))
}

/// The status as last written, with a spilled catalogue read back from its ConfigMap so the
/// comparison with the new catalogue sees every tool, and whether that ConfigMap was altered
/// by someone else (then it is written again whatever its annotation says). Under pinning the
/// spilled catalogue holds the pins, so failing to read it fails the reconcile (it is retried)
/// rather than mistaking every tool for a new one; a ConfigMap that is gone, unreadable or
/// altered loses them, and pinning begins again from the pins kept in the operator's namespace
/// (else from what the server serves; a warning says so).
async fn previous_status_in_full(
    server: &McpServer,
    ctx: &ServerContext,
) -> Result<(Option<McpServerStatus>, bool), ReconcileError> {
    let Some(mut previous) = server.status.clone() else {
        return Ok((None, false));
    };
    let mut altered = false;
    if previous.catalog_config_map.is_some()
        && let Some(catalog) = previous.catalog.as_mut()
    {
        let (namespace, name) = key_of(server);
        match catalog_spill::read_checked(&ctx.base.client, server).await {
            Ok(Spilled::Catalog(full)) => catalog.catalog = full,
            Err(e) if previous.pinning.is_some() => {
                return Err(ReconcileError::CatalogSpillRead(e));
            }
            Err(_) => {}
            Ok(Spilled::Altered) => {
                altered = true;
                previous.pinning = None;
                warn!(%namespace, mcpserver = %name,
                    config_map = %catalog_spill::config_map_name(&name),
                    "the catalogue ConfigMap does not hold what status.catalogConfigMapDigest \
                     names (someone other than the operator wrote it): grants leave the server \
                     out until it is written again, now");
            }
            Ok(Spilled::Missing) => {
                if previous.pinning.take().is_some() {
                    warn!(%namespace, mcpserver = %name,
                        "the catalogue ConfigMap holding the pins is gone or unreadable: \
                         pinning begins again from the pins kept, or from what the server serves");
                }
            }
        }
    }
    Ok((Some(previous), altered))
}

/// One log line and one event per transition.
async fn announce(server: &McpServer, ctx: &Context, transitions: &Transitions) {
    let (namespace, name) = key_of(server);
    let mut out = Vec::new();
    if let Some((reason, message)) = &transitions.became_unready {
        warn!(%namespace, mcpserver = %name, %reason, "McpServer is not ready: {message}");
        out.push(Event {
            type_: EventType::Warning,
            reason: reason.clone(),
            note: Some(message.clone()),
            action: "Probe".into(),
            secondary: None,
        });
    }
    if transitions.recovered {
        info!(%namespace, mcpserver = %name, "McpServer recovered and is ready");
        out.push(Event {
            type_: EventType::Normal,
            reason: "Recovered".into(),
            note: Some("The server is reachable and its catalogue is read again.".into()),
            action: "Probe".into(),
            secondary: None,
        });
    }
    if let Some(diff) = &transitions.catalog_change {
        let summary = diff.summary();
        info!(%namespace, mcpserver = %name, "catalogue changed: {summary}");
        out.push(Event {
            type_: EventType::Normal,
            reason: "CatalogChanged".into(),
            note: Some(format!("Tools {summary}.")),
            action: "Probe".into(),
            secondary: None,
        });
    }
    if !transitions.started_waiting.is_empty() {
        let named: Vec<String> = transitions
            .started_waiting
            .iter()
            .map(|(tool, what)| format!("{tool} ({what})"))
            .collect();
        let note = format!(
            "Withheld from every agent until a person approves: {}. See status.pinning.waiting.",
            named.join(", ")
        );
        warn!(%namespace, mcpserver = %name, "tools wait for approval: {}", named.join(", "));
        out.push(Event {
            type_: EventType::Warning,
            reason: "ToolsAwaitingApproval".into(),
            note: Some(truncate_note(note)),
            action: "Pin".into(),
            secondary: None,
        });
    }
    if !transitions.released.is_empty() {
        let note = format!(
            "Granted again (approved, or served as pinned): {}.",
            transitions.released.join(", ")
        );
        info!(%namespace, mcpserver = %name, "tools no longer wait for approval: {}",
            transitions.released.join(", "));
        out.push(Event {
            type_: EventType::Normal,
            reason: "ToolsApproved".into(),
            note: Some(truncate_note(note)),
            action: "Pin".into(),
            secondary: None,
        });
    }
    events::publish(&ctx.recorder, &server.object_ref(&()), out).await;
}

/// An Event's note is at most 1 KiB.
fn truncate_note(mut note: String) -> String {
    const MAX: usize = 1000;
    if note.len() > MAX {
        let mut cut = MAX;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push('…');
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::{McpError, ReadFailure, Stage};
    use credentials::CredentialError;

    #[test]
    fn a_credential_failure_is_not_a_probe() {
        let credentials = Finding::Credentials(CredentialError::SecretNotFound {
            namespace: "ns".into(),
            name: "token".into(),
            field: "spec.credentials.bearerToken".into(),
        });
        assert!(!probe_ran(&credentials));
        let refused = Finding::Failed(ReadFailure {
            stage: Stage::Connect,
            error: McpError::ConnectionRefused {
                addr: "10.0.0.1:80".into(),
            },
        });
        assert!(probe_ran(&refused));
    }
}
