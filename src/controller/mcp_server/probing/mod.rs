//! Reading an McpServer: when it is due, the probe tasks that read it outside the reconcile
//! slots, and the subscriptions of servers that push `tools/list_changed`. The reconcile's
//! gather step comes down here once ([`probe_if_due`]) and goes back up with what the server
//! said, or that it is not due or being read:
//!
//! ```text
//!  probe_if_due ─► credentials::resolve ─► probes.claim, schedule ─► plan::next_step (pure)
//!       ├─ take_result: schedule.probed, subscriptions, the Finding
//!       ├─ resume_after_restart: schedule.resume, subscriptions
//!       └─ start: connection ─► probes.start
//! ```
//!
//! - [`plan`]: the one next step of a reconcile's read, and when a read server is due (pure).
//! - [`connection`]: the McpServer → `ServerConnection` mapping (pure).
//! - [`schedule`]: when each server is next due for a probe, and in which [`schedule::Lane`].
//! - [`probes`]: the probe tasks, their lanes, and which result a reconcile may use.
//! - [`resume`]: after a restart, when the status says a server was last read (pure).
//! - [`subscriptions`]: one `tools/list_changed` subscription per server that pushes.

pub mod connection;
pub mod plan;
pub mod probes;
pub mod resume;
pub mod schedule;
pub mod subscriptions;

use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use tracing::debug;

use super::credentials;
use super::status::Finding;
use super::{ServerContext, pinning, record_gauges};
use crate::api::mcp_server::{APPROVE_ANNOTATION, McpServer, REFRESH_ANNOTATION};
use crate::controller::shared::catalog_spill;
use crate::controller::shared::server_key::ServerKey;
use plan::{ProbeState, Step};
use probes::Claim;

/// How long a reconcile waiting for its server's probe sleeps at most: the probe's own
/// trigger normally comes first.
pub const PROBE_RECHECK: Duration = Duration::from_secs(60);

/// What the gather step found: the server is not due yet (wait this long), its probe is
/// running, or what reading it found and when it is next due.
pub enum Probe {
    NotDue(Duration),
    Running,
    Done(Finding, Duration),
}

/// Resolves the credentials and, when the server is due (new inputs, the refresh interval
/// passed, or a pushed change), starts a probe, or takes the result of the one that finished.
/// Gathers the facts; [`plan::next_step`] decides what to do with them.
pub async fn probe_if_due(
    server: &McpServer,
    ctx: &ServerContext,
    key: &ServerKey,
    pinning: Option<&pinning::Settings>,
    url: Option<&str>,
) -> Probe {
    let required_by = pinning
        .map(|p| p.required_by.as_slice())
        .unwrap_or_default();
    let resolved = credentials::resolve(&ctx.base.client, &key.0, server).await;
    let inputs = probe_inputs(
        server,
        resolved.as_ref().ok().map(|r| r.digest.as_str()),
        required_by,
    );
    let (probe, finished) = match ctx.prober.claim(key, &inputs) {
        Claim::Finished(outcome, started) => (ProbeState::Finished, Some((outcome, started))),
        Claim::Running => (ProbeState::Running, None),
        Claim::Nothing => (ProbeState::Nothing, None),
    };
    let remembered = ctx.schedule.remembers(key);
    let known = plan::Known {
        probe,
        remembered,
        last_read: match (&resolved, remembered, probe) {
            (Ok(r), false, ProbeState::Nothing) => {
                resumable_read(server, ctx, required_by, &r.references_changed).await
            }
            _ => None,
        },
        credentials_resolved: resolved.is_ok(),
        wait_before_probe: ctx.schedule.wait_before_probe(key, &inputs),
    };
    let url = url.unwrap_or_default();
    match (plan::next_step(&known), finished, resolved) {
        (Step::TakeResult, Some((outcome, started)), _) => {
            take_result(server, ctx, key, inputs, outcome, started)
        }
        (Step::WaitForProbe, ..) => Probe::Running,
        (Step::Resume(read), _, Ok(resolved)) => Probe::NotDue(resume_after_restart(
            server, ctx, key, inputs, read, url, resolved,
        )),
        (Step::NotDue(wait), ..) => Probe::NotDue(wait),
        // Nothing to contact: decided here, in the slot.
        (Step::CredentialsFailed, _, Err(e)) => {
            let refresh = server.spec.discovery.refresh_interval.as_std();
            let wait = ctx
                .schedule
                .probed(key, inputs, false, refresh, Instant::now());
            Probe::Done(Finding::Credentials(e), wait)
        }
        (Step::StartProbe, _, Ok(resolved)) => {
            let (conn, identity) = connect(server, ctx, url, resolved);
            let lane = ctx.schedule.lane(key, &inputs);
            let overrides = server
                .spec
                .tools
                .as_ref()
                .map(|t| t.overrides.clone())
                .unwrap_or_default();
            ctx.prober
                .start(key, inputs, lane, conn, identity, overrides);
            Probe::Running
        }
        (step, ..) => unreachable!("plan step {step:?} without what it needs"),
    }
}

/// When a restarted controller may say the server was last read ([`resume::last_read`]). A
/// spilled catalogue someone else wrote while no controller ran is not resumed from: the server
/// is read, and its ConfigMap written again, at once.
async fn resumable_read(
    server: &McpServer,
    ctx: &ServerContext,
    required_by: &[String],
    references_changed: &[Option<k8s_openapi::jiff::Timestamp>],
) -> Option<k8s_openapi::jiff::Timestamp> {
    let field_manager = &ctx.base.settings.field_manager;
    let spilled = server
        .status
        .as_ref()
        .is_some_and(|s| s.catalog_config_map.is_some());
    if spilled
        && catalog_spill::written_by_others_now(&ctx.base.client, server, field_manager).await
    {
        return None;
    }
    resume::last_read(server, field_manager, required_by, references_changed)
}

/// Keeps (or opens, `after` from now) the server's `tools/list_changed` subscription.
fn subscribe(
    ctx: &ServerContext,
    key: &ServerKey,
    identity: &str,
    conn: crate::mcp::ServerConnection,
    after: Duration,
) {
    ctx.subscriptions.ensure(
        key,
        identity,
        conn,
        ctx.schedule.clone(),
        ctx.base.metrics.clone(),
        after,
    );
}

/// The connection a probe or subscription uses, and its identity (what the pool keys it by).
fn connect(
    server: &McpServer,
    ctx: &ServerContext,
    url: &str,
    resolved: credentials::Resolved,
) -> (crate::mcp::ServerConnection, String) {
    let identity = connection::identity(&server.spec, url, &resolved.digest);
    let conn = connection::connection(
        &server.spec,
        url,
        resolved,
        ctx.base.settings.allow_loopback,
        ctx.base.settings.response_budget.clone(),
    );
    (conn, identity)
}

/// What a finished probe found: the finding and when the server is next due, its
/// subscription opened or closed; a read that gave way in a full response budget is tried
/// again soon, with nothing written.
fn take_result(
    server: &McpServer,
    ctx: &ServerContext,
    key: &ServerKey,
    inputs: String,
    outcome: probes::Outcome,
    started: Instant,
) -> Probe {
    let spec = &server.spec;
    let refresh = spec.discovery.refresh_interval.as_std();
    if let Some(budget) = &ctx.base.settings.response_budget {
        ctx.base
            .metrics
            .response_budget_high_water_bytes
            .set(budget.high_water() as i64);
    }
    let probes::Outcome {
        report,
        conn,
        identity,
    } = outcome;
    match report {
        Ok(report) => {
            let refresh = plan::refresh_after(report.ttl_ms, refresh);
            let wait = ctx.schedule.probed(key, inputs, true, refresh, started);
            if report.pushes_tool_changes {
                subscribe(ctx, key, &identity, conn, Duration::ZERO);
            } else {
                ctx.subscriptions.remove(key);
            }
            let finding = Finding::Read {
                era: report.era,
                protocol_version: report.protocol_version,
                server_info: report.server_info,
                catalog: Box::new(report.catalog),
            };
            Probe::Done(finding, wait)
        }
        // Other servers' responses filled the budget: nothing is wrong with this one, so
        // nothing is written and the read is tried again soon (still due).
        Err(failure)
            if matches!(
                failure.error,
                crate::mcp::McpError::ResponseBudgetBusy { .. }
            ) =>
        {
            Probe::NotDue(busy_retry(key))
        }
        Err(failure) => {
            let wait = ctx.schedule.probed(key, inputs, false, refresh, started);
            Probe::Done(Finding::Failed(failure), wait)
        }
    }
}

/// A restarted controller's first reconcile of a server whose status it may trust (see
/// [`resume`]): the next probe is scheduled from the last read instead of at once, the gauges
/// come from status, and the subscription of a server that pushes changes opens again, spread
/// out like the probes. Returns the wait until the probe.
fn resume_after_restart(
    server: &McpServer,
    ctx: &ServerContext,
    key: &ServerKey,
    inputs: String,
    read: k8s_openapi::jiff::Timestamp,
    url: &str,
    resolved: credentials::Resolved,
) -> Duration {
    let refresh = server.spec.discovery.refresh_interval.as_std();
    // A read "in the future" (clock skew) counts as just now.
    let since = Duration::try_from(k8s_openapi::jiff::Timestamp::now().duration_since(read))
        .unwrap_or(Duration::ZERO);
    let wait = resume::wait_after_restart(since, refresh, key);
    ctx.schedule.resume(key, inputs, wait);
    if let Some(status) = &server.status {
        record_gauges(ctx, key, status);
    }
    let (conn, identity) = connect(server, ctx, url, resolved);
    let after = resume::spread(key, refresh.min(resume::SUBSCRIBE_SPREAD));
    subscribe(ctx, key, &identity, conn, after);
    debug!(namespace = %key.0, mcpserver = %key.1, ?wait,
        "resumed from status after a restart: next probe scheduled from the last read");
    wait
}

/// When to read again a server whose read gave way to others in a full response budget: one
/// to two seconds, spread by the server's name so those refused together do not come back
/// together.
fn busy_retry(key: &ServerKey) -> Duration {
    let mut h = Sha256::new();
    h.update(key.0.as_bytes());
    h.update(b"/");
    h.update(key.1.as_bytes());
    h.update(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos()
            .to_be_bytes(),
    );
    let digest = h.finalize();
    let spread = u64::from(u16::from_be_bytes([digest[0], digest[1]])) % 1000;
    Duration::from_millis(1000 + spread)
}

/// What, when changed, calls for a new probe: the spec, the refresh and approve annotations,
/// what turns pinning on, and the resolved credential values (as a digest). An approval thus
/// reads the server again and applies to what it serves at that moment.
fn probe_inputs(
    server: &McpServer,
    credentials_digest: Option<&str>,
    pinning_required_by: &[String],
) -> String {
    let mut h = Sha256::new();
    h.update(server.meta().generation.unwrap_or_default().to_be_bytes());
    for annotation in [REFRESH_ANNOTATION, APPROVE_ANNOTATION] {
        h.update(
            server
                .annotations()
                .get(annotation)
                .map(String::as_str)
                .unwrap_or("")
                .as_bytes(),
        );
        h.update(b"\0");
    }
    for by in pinning_required_by {
        h.update(by.as_bytes());
        h.update(b"\0");
    }
    h.update(credentials_digest.unwrap_or("unresolved").as_bytes());
    hex::encode(h.finalize())
}
