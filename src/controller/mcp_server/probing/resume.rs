//! What a restarted controller takes from an McpServer's status instead of probing every server
//! in its first second: when a Ready server was last read, so that its next probe is due one
//! refresh interval after that read (spread out when that time has passed). Pure.
//!
//! Only a status that can be trusted for it counts: Ready, written for the current generation,
//! for what turns pinning on now and for the spec's tools.overrides, and nothing a probe depends on changed after that write,
//! neither the object by anyone else (an annotation asking for a refresh or approving a tool)
//! nor a Secret or ConfigMap it names. Any doubt means a probe at once, as before.
//!
//! The read time is the later of `catalog.lastSyncTime` and the controller's last status write
//! (its managedFields entry): every status write follows a probe, and a Ready status is written
//! only after a read. Reads that changed nothing wrote nothing, so the true last read may be
//! later; scheduling from the earlier time errs towards probing sooner.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::api::conditions::{READY, TRUE, find};
use crate::api::mcp_server::McpServer;
use crate::controller::shared::server_key::ServerKey;
use crate::core::catalog::overrides_digest;

/// When the status says the server was last read, if a restarted controller may schedule its
/// next probe from there. `field_manager` is the controller's own; `pinning_required_by` what
/// turns pinning on for the server now; `references_changed` when each Secret and ConfigMap
/// the spec names last changed (None: unknown).
pub fn last_read(
    server: &McpServer,
    field_manager: &str,
    pinning_required_by: &[String],
    references_changed: &[Option<Timestamp>],
) -> Option<Timestamp> {
    let status = server.status.as_ref()?;
    let generation = server.meta().generation;
    let ready = find(&status.conditions, READY)?;
    if status.observed_generation != generation
        || ready.status != TRUE
        || ready.observed_generation != generation
    {
        return None;
    }
    let shown = status
        .pinning
        .as_ref()
        .map(|p| p.required_by.as_slice())
        .unwrap_or_default();
    if shown != pinning_required_by {
        return None;
    }
    // A catalogue classified with other overrides than the spec's (one written before the
    // served access was kept beside them, or while the controller was away) is read again.
    let overrides = server
        .spec
        .tools
        .as_ref()
        .map(|t| overrides_digest(&t.overrides))
        .unwrap_or_default();
    if status
        .catalog
        .as_ref()
        .and_then(|c| c.catalog.overrides_digest.clone())
        != overrides
    {
        return None;
    }
    let fields = server.meta().managed_fields.as_deref().unwrap_or_default();
    let ours = |f: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
        f.manager.as_deref() == Some(field_manager) && f.subresource.as_deref() == Some("status")
    };
    let written = fields
        .iter()
        .filter(|f| ours(f))
        .filter_map(|f| f.time.as_ref().map(|t| t.0))
        .max()?;
    // Times have whole seconds: a change in the same second as the write may be after it.
    let changed_since = |t: Option<Timestamp>| t.is_none_or(|t| t >= written);
    if fields
        .iter()
        .filter(|f| !ours(f))
        .any(|f| changed_since(f.time.as_ref().map(|t| t.0)))
        || references_changed.iter().any(|t| changed_since(*t))
    {
        return None;
    }
    let synced = status
        .catalog
        .as_ref()
        .and_then(|c| c.last_sync_time.as_ref())
        .map(|t| t.0);
    Some(synced.map_or(written, |s| s.max(written)))
}

/// At most this long a restarted controller spreads the probes of servers already due.
pub const RESUME_SPREAD: Duration = Duration::from_secs(60);

/// Over this long a restarted controller spreads reopening the subscriptions of resumed
/// servers (a handshake each, no listing).
pub const SUBSCRIBE_SPREAD: Duration = Duration::from_secs(10);

/// Where in `[0, window)` a server's spread-out start falls: by its name, so the same servers
/// are spread the same way each time.
pub fn spread(key: &ServerKey, window: Duration) -> Duration {
    use std::hash::{Hash, Hasher};
    let millis = window.as_millis() as u64;
    if millis == 0 {
        return Duration::ZERO;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    Duration::from_millis(h.finish() % millis)
}

/// How long after a restart the next probe of a server last read `since` ago waits: the rest
/// of its refresh interval, or, when that has passed, a spread-out wait of at most a minute
/// (or the interval, when shorter).
pub fn wait_after_restart(since: Duration, refresh: Duration, key: &ServerKey) -> Duration {
    match refresh.checked_sub(since) {
        Some(rest) if !rest.is_zero() => rest,
        _ => spread(key, refresh.min(RESUME_SPREAD)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{catalog, ready_status, server};
    use serde_json::{Value, json};

    const MANAGER: &str = "mcp-operator";

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn time(secs: i64) -> Value {
        json!(at(secs).to_string())
    }

    /// Generation 2, Ready for generation 2, last written by the controller at `written`,
    /// created by `kubectl` at 0.
    fn ready_server(written: i64, synced: Option<i64>) -> McpServer {
        let mut status = ready_status(&catalog());
        status["observedGeneration"] = json!(2);
        status["conditions"][0]["observedGeneration"] = json!(2);
        if let Some(s) = synced {
            status["catalog"]["lastSyncTime"] = time(s);
        }
        let mut s = server(
            "s",
            json!({}),
            json!({"url": "https://a.example/mcp"}),
            status,
        );
        s.metadata.generation = Some(2);
        s.metadata.managed_fields = Some(
            serde_json::from_value(json!([
                {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": time(0)},
                {"manager": MANAGER, "operation": "Apply", "apiVersion": "v1",
                 "subresource": "status", "time": time(written)},
            ]))
            .unwrap(),
        );
        s
    }

    #[test]
    fn a_ready_status_written_after_every_other_change_gives_its_read_time() {
        assert_eq!(
            last_read(&ready_server(100, None), MANAGER, &[], &[]),
            Some(at(100))
        );
        assert_eq!(
            last_read(&ready_server(100, Some(40)), MANAGER, &[], &[Some(at(50))]),
            Some(at(100)),
            "the write is the later read"
        );
        // A catalogue synced after the write's second (same write, finer clock) counts.
        assert_eq!(
            last_read(&ready_server(100, Some(101)), MANAGER, &[], &[]),
            Some(at(101))
        );
    }

    #[test]
    fn any_doubt_means_a_probe_at_once() {
        let required = ["spec.pinning.enabled".to_string()];
        let mut other_generation = ready_server(100, None);
        other_generation.metadata.generation = Some(3);
        let mut not_ready = ready_server(100, None);
        not_ready.status.as_mut().unwrap().conditions[0].status = "False".into();
        let mut never_written = ready_server(100, None);
        never_written
            .metadata
            .managed_fields
            .as_mut()
            .unwrap()
            .retain(|f| f.manager.as_deref() != Some(MANAGER));
        let mut annotated_later = ready_server(100, None);
        annotated_later.metadata.managed_fields.as_mut().unwrap()[0].time = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(150)),
        );
        let mut annotated_same_second = ready_server(100, None);
        annotated_same_second
            .metadata
            .managed_fields
            .as_mut()
            .unwrap()[0]
            .time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
            100,
        )));
        let mut no_status = ready_server(100, None);
        no_status.status = None;
        let none: &[String] = &[];
        let probe_at_once =
            |what: &str, s: &McpServer, required: &[String], refs: &[Option<Timestamp>]| {
                assert_eq!(last_read(s, MANAGER, required, refs), None, "{what}");
            };
        probe_at_once("the spec changed", &other_generation, none, &[]);
        probe_at_once("not Ready", &not_ready, none, &[]);
        probe_at_once("no status write of ours", &never_written, none, &[]);
        probe_at_once(
            "changed by someone after the write",
            &annotated_later,
            none,
            &[],
        );
        probe_at_once(
            "changed in the write's second",
            &annotated_same_second,
            none,
            &[],
        );
        probe_at_once("no status", &no_status, none, &[]);
        let fresh = ready_server(100, None);
        probe_at_once("pinning turned on since", &fresh, &required, &[]);
        probe_at_once("a Secret changed since", &fresh, none, &[Some(at(120))]);
        probe_at_once("a Secret of unknown age", &fresh, none, &[None]);
        // A catalogue classified before the served access was kept (or with other overrides)
        // is read again, so no status holds an override's access where the served one belongs.
        let mut overridden = ready_server(100, None);
        overridden.spec.tools =
            Some(serde_json::from_value(json!({"overrides": {"delete_file": "read"}})).unwrap());
        probe_at_once(
            "overrides the catalogue was not built with",
            &overridden,
            none,
            &[],
        );
        let built_with_them = crate::core::catalog::overrides_digest(
            &overridden.spec.tools.as_ref().unwrap().overrides,
        );
        overridden
            .status
            .as_mut()
            .unwrap()
            .catalog
            .as_mut()
            .unwrap()
            .catalog
            .overrides_digest = built_with_them;
        assert_eq!(
            last_read(&overridden, MANAGER, none, &[]),
            Some(at(100)),
            "the same overrides: trusted"
        );
        assert_eq!(
            last_read(&ready_server(100, None), "another-manager", &[], &[]),
            None,
            "only this controller's writes count"
        );
    }

    #[test]
    fn a_recent_read_waits_out_its_interval_and_overdue_ones_spread_over_a_minute() {
        let refresh = Duration::from_secs(300);
        let key = ("ns".to_string(), "s".to_string());
        assert_eq!(
            wait_after_restart(Duration::from_secs(100), refresh, &key),
            Duration::from_secs(200)
        );
        let waits: Vec<Duration> = (0..200)
            .map(|i| {
                let key = ("ns".to_string(), format!("s{i}"));
                wait_after_restart(Duration::from_secs(3600), refresh, &key)
            })
            .collect();
        assert!(waits.iter().all(|w| *w < RESUME_SPREAD));
        let in_first_second = waits
            .iter()
            .filter(|w| **w < Duration::from_secs(1))
            .count();
        assert!(
            in_first_second < 20,
            "{in_first_second} of 200 in the first second"
        );
        let latest = waits.iter().max().unwrap();
        assert!(
            *latest > Duration::from_secs(50),
            "spread over the minute: {latest:?}"
        );
        // A short interval is the window.
        let short = Duration::from_secs(10);
        assert!(wait_after_restart(Duration::from_secs(60), short, &key) < short);
    }
}
