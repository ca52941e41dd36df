//! The McpServer reconciler: resolve credentials, probe the server through `mcp::read_server`
//! when its inputs changed or it is due, write status (and the companion ConfigMap of a large
//! catalogue) only when their content changed, and publish an event on each transition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::api::mcp_server::{McpServer, McpServerStatus, REFRESH_ANNOTATION};
use crate::mcp::{self, EndpointPolicy, Limits, ServerConnection};

use super::catalog_spill;
use super::context::{Context, ServerKey};
use super::credentials;
use super::error::Error;
use super::server_status::{Finding, Transitions, next_status};

pub const KIND: &str = "McpServer";

/// Reconciles one McpServer.
pub async fn reconcile(server: Arc<McpServer>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics
        .time_reconcile(KIND, reconcile_inner(&server, &ctx))
        .await
}

/// On a failed reconcile (an apiserver error): retry soon.
pub fn error_policy(server: Arc<McpServer>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(
        mcpserver = %key_of(&server).1,
        namespace = %key_of(&server).0,
        reason = error.reason(),
        "reconcile failed: {error}"
    );
    Action::requeue(Duration::from_secs(10))
}

/// Drops everything the controller holds for a server that is gone.
pub fn forget(ctx: &Context, key: &ServerKey) {
    ctx.schedule.forget(key);
    ctx.subscriptions.remove(key);
    ctx.metrics.set_server(&key.0, &key.1, None);
}

pub fn key_of(server: &McpServer) -> ServerKey {
    (server.namespace().unwrap_or_default(), server.name_any())
}

async fn reconcile_inner(server: &McpServer, ctx: &Context) -> Result<Action, Error> {
    let key = key_of(server);
    if server.meta().deletion_timestamp.is_some() {
        forget(ctx, &key);
        return Ok(Action::await_change());
    }
    let spec = &server.spec;
    let refresh = spec.discovery.refresh_interval.as_std();
    let resolved = credentials::resolve(&ctx.client, &key.0, spec).await;
    let inputs = probe_inputs(server, resolved.as_ref().ok().map(|r| r.digest.as_str()));
    if let Some(wait) = ctx.schedule.wait_before_probe(&key, &inputs) {
        return Ok(Action::requeue(wait));
    }

    let (finding, next_wait) = match resolved {
        Err(e) => {
            let wait = ctx.schedule.probed(&key, inputs, false, refresh);
            (Finding::Credentials(e), wait)
        }
        Ok(resolved) => {
            let conn = ServerConnection {
                url: spec.url.clone(),
                transport: spec.transport,
                credentials: resolved.credentials,
                tls: resolved.tls,
                limits: Limits {
                    connect_timeout: spec.timeouts.connect.as_std(),
                    max_tool_pages: spec.discovery.max_tool_pages,
                    max_response_bytes: spec.discovery.max_response_bytes,
                },
                endpoint_policy: EndpointPolicy {
                    allow_loopback: ctx.settings.allow_loopback,
                },
            };
            let identity = format!("{}\0{:?}\0{}", spec.url, spec.transport, resolved.digest);
            let probe_started = Instant::now();
            let outcome = mcp::read_server(&conn).await;
            ctx.metrics
                .probe_duration
                .observe(probe_started.elapsed().as_secs_f64());
            match outcome {
                Ok(report) => {
                    // A modern server says how long its list stays fresh: honour it, within
                    // [30s, refreshInterval].
                    let refresh = report
                        .ttl_ms
                        .map(|ttl| {
                            Duration::from_millis(ttl).clamp(Duration::from_secs(30), refresh)
                        })
                        .unwrap_or(refresh);
                    let wait = ctx.schedule.probed(&key, inputs, true, refresh);
                    if report.pushes_tool_changes {
                        ctx.subscriptions.ensure(
                            &key,
                            &identity,
                            conn.clone(),
                            ctx.schedule.clone(),
                            ctx.metrics.clone(),
                        );
                    } else {
                        ctx.subscriptions.remove(&key);
                    }
                    let overrides = spec
                        .tools
                        .as_ref()
                        .map(|t| t.overrides.clone())
                        .unwrap_or_default();
                    let finding = Finding::Read {
                        era: report.era,
                        protocol_version: report.protocol_version.clone(),
                        server_info: report.server_info.clone(),
                        catalog: report.catalog(&overrides),
                    };
                    (finding, wait)
                }
                Err(failure) => {
                    let wait = ctx.schedule.probed(&key, inputs, false, refresh);
                    (Finding::Failed(failure), wait)
                }
            }
        }
    };

    let previous = previous_status_in_full(server, ctx).await;
    let insecure = spec.tls.as_ref().is_some_and(|t| t.insecure_skip_verify);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let (mut status, transitions) = next_status(
        previous.as_ref(),
        server.meta().generation,
        &finding,
        insecure,
        now,
    );

    // Large catalogues live in the companion ConfigMap; status keeps counts and digest.
    let mut spilled = false;
    if let Some(catalog) = status.catalog.as_mut()
        && catalog_spill::too_large_for_status(&catalog.catalog)
    {
        if catalog_spill::publish(
            &ctx.client,
            server,
            &catalog.catalog,
            &ctx.settings.field_manager,
        )
        .await?
        {
            ctx.metrics.count_write("CatalogConfigMap");
        }
        catalog.catalog.tools.clear();
        status.catalog_config_map = Some(catalog_spill::config_map_name(&key.1));
        spilled = true;
    }
    if !spilled
        && server
            .status
            .as_ref()
            .is_some_and(|s| s.catalog_config_map.is_some())
    {
        catalog_spill::remove(&ctx.client, server).await?;
        status.catalog_config_map = None;
    }

    if server.status.as_ref() != Some(&status) {
        write_status(server, ctx, &status).await?;
    }
    let ready = crate::api::conditions::find(&status.conditions, crate::api::conditions::READY);
    ctx.metrics.set_server(
        &key.0,
        &key.1,
        Some((
            ready.map_or("Unknown", |c| c.reason.as_str()),
            status.catalog.as_ref().map(|c| c.catalog.tool_count),
        )),
    );
    ctx.metrics
        .probes
        .get_or_create(&super::metrics::ReasonLabels {
            reason: ready.map_or("Unknown", |c| c.reason.as_str()).to_string(),
        })
        .inc();
    announce(server, ctx, &transitions).await;
    Ok(Action::requeue(next_wait))
}

/// What, when changed, calls for a new probe: the spec, the refresh annotation and the resolved
/// credential values (as a digest).
fn probe_inputs(server: &McpServer, credentials_digest: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(server.meta().generation.unwrap_or_default().to_be_bytes());
    h.update(
        server
            .annotations()
            .get(REFRESH_ANNOTATION)
            .map(String::as_str)
            .unwrap_or("")
            .as_bytes(),
    );
    h.update(b"\0");
    h.update(credentials_digest.unwrap_or("unresolved").as_bytes());
    hex::encode(h.finalize())
}

/// The status as last written, with a spilled catalogue read back from its ConfigMap so the
/// comparison with the new catalogue sees every tool.
async fn previous_status_in_full(server: &McpServer, ctx: &Context) -> Option<McpServerStatus> {
    let mut previous = server.status.clone()?;
    if previous.catalog_config_map.is_some()
        && let Some(catalog) = previous.catalog.as_mut()
        && let Some(full) = catalog_spill::read(&ctx.client, server).await
    {
        catalog.catalog = full;
    }
    Some(previous)
}

async fn write_status(
    server: &McpServer,
    ctx: &Context,
    status: &McpServerStatus,
) -> Result<(), Error> {
    let (namespace, name) = key_of(server);
    let api: Api<McpServer> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({
        "apiVersion": McpServer::api_version(&()),
        "kind": McpServer::kind(&()),
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(&ctx.settings.field_manager).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    ctx.metrics.count_write(KIND);
    Ok(())
}

/// One log line and one event per transition.
async fn announce(server: &McpServer, ctx: &Context, transitions: &Transitions) {
    let (namespace, name) = key_of(server);
    let mut events = Vec::new();
    if let Some((reason, message)) = &transitions.became_unready {
        warn!(%namespace, mcpserver = %name, %reason, "McpServer is not ready: {message}");
        events.push(Event {
            type_: EventType::Warning,
            reason: reason.clone(),
            note: Some(message.clone()),
            action: "Probe".into(),
            secondary: None,
        });
    }
    if transitions.recovered {
        info!(%namespace, mcpserver = %name, "McpServer recovered and is ready");
        events.push(Event {
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
        events.push(Event {
            type_: EventType::Normal,
            reason: "CatalogChanged".into(),
            note: Some(format!("Tools {summary}.")),
            action: "Probe".into(),
            secondary: None,
        });
    }
    ctx.publish_events(&server.object_ref(&()), events).await;
}
