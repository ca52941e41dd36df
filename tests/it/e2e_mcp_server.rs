//! The McpServer controller on the real control plane against real MCP servers: what a platform
//! engineer sees with `kubectl get mcp` and `kubectl describe`.

use crate::e2e::{self, secret};
use crate::operator;
use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use mcp_operator::api::mcp_server::McpServer;
use operator::{Operator, apply_server, condition, eventually, server_manifest, wait_condition};
use serde_json::json;
use support::Fixtures;

const SOON: Duration = Duration::from_secs(30);

async fn put_secret(client: &kube::Client, ns: &str, s: &Secret) {
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            s.metadata.name.as_ref().unwrap(),
            &PatchParams::apply(crate::e2e::FIELD_MANAGER).force(),
            &Patch::Apply(s),
        )
        .await
        .unwrap();
}

fn tool_count(s: &McpServer) -> u32 {
    s.status
        .as_ref()
        .and_then(|s| s.catalog.as_ref())
        .map_or(0, |c| c.catalog.tool_count)
}

#[tokio::test]
async fn paged_modern_and_legacy_servers_become_ready_with_complete_catalogues() {
    let (client, ns) = e2e::setup("ready").await;
    let fixtures = Fixtures::load();
    let paged = fixtures.sdk_server(&["--tools", "30", "--page-size", "4"]);
    let everything = fixtures.everything_server();
    let _op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-ready");
    apply_server(
        &client,
        ns.name(),
        server_manifest("paged", &paged.url, json!({})),
    )
    .await;
    apply_server(
        &client,
        ns.name(),
        server_manifest("everything", &everything.url, json!({})),
    )
    .await;
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());

    let s = wait_condition(&api, "paged", "Ready", "True", Some("Ready"), SOON).await;
    let st = s.status.as_ref().unwrap();
    assert_eq!(tool_count(&s), 34, "4 named + 30 generated tools");
    let catalog = &st.catalog.as_ref().unwrap().catalog;
    assert_eq!(catalog.pages_read, 9);
    assert_eq!(catalog.tools.len(), 34);
    assert_eq!(st.protocol_version.as_deref(), Some("2026-07-28"));
    assert!(st.catalog.as_ref().unwrap().last_sync_time.is_some());
    for type_ in ["CredentialsResolved", "Reachable", "CatalogSynced", "Ready"] {
        let c = condition(&s, type_).unwrap();
        assert_eq!(c["status"], "True", "{type_}: {c}");
        assert_eq!(c["observedGeneration"], 1, "{type_}: {c}");
    }

    let s = wait_condition(&api, "everything", "Ready", "True", None, SOON).await;
    assert_eq!(
        s.status.as_ref().unwrap().protocol_version.as_deref(),
        Some("2025-11-25")
    );
    assert!(tool_count(&s) >= 10);
}

#[tokio::test]
async fn secrets_are_resolved_watched_and_never_leaked() {
    let (client, ns) = e2e::setup("secrets").await;
    let token = "tok-7c1e-e2e-secret-value";
    let server = Fixtures::load().sdk_server(&["--bearer", token]);
    let op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-secrets");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest(
            "guarded",
            &server.url,
            json!({"credentials": {"bearerToken": {"secretKeyRef": {"name": "guarded-token", "key": "token"}}}}),
        ),
    )
    .await;

    // No Secret yet: the condition names Secret and key; the server is not contacted.
    let s = wait_condition(
        &api,
        "guarded",
        "CredentialsResolved",
        "False",
        Some("SecretNotFound"),
        SOON,
    )
    .await;
    let msg = condition(&s, "CredentialsResolved").unwrap()["message"].to_string();
    assert!(msg.contains("guarded-token"), "{msg}");
    assert_eq!(condition(&s, "Ready").unwrap()["reason"], "SecretNotFound");

    // The Secret appears with the wrong key: SecretKeyNotFound, naming the key.
    put_secret(&client, ns.name(), &secret("guarded-token", "other", token)).await;
    let s = wait_condition(
        &api,
        "guarded",
        "CredentialsResolved",
        "False",
        Some("SecretKeyNotFound"),
        SOON,
    )
    .await;
    assert!(
        condition(&s, "CredentialsResolved").unwrap()["message"]
            .to_string()
            .contains("token")
    );

    // The right key: Ready without touching the McpServer.
    let generation = s.metadata.generation;
    Api::<Secret>::namespaced(client.clone(), ns.name())
        .delete("guarded-token", &Default::default())
        .await
        .unwrap();
    put_secret(&client, ns.name(), &secret("guarded-token", "token", token)).await;
    let s = wait_condition(&api, "guarded", "Ready", "True", None, SOON).await;
    assert_eq!(s.metadata.generation, generation);
    assert_eq!(tool_count(&s), 4);

    // Rotating to a wrong token re-probes: Unauthorized. Rotating back: Ready.
    put_secret(
        &client,
        ns.name(),
        &secret("guarded-token", "token", "tok-wrong-value"),
    )
    .await;
    wait_condition(
        &api,
        "guarded",
        "Ready",
        "False",
        Some("Unauthorized"),
        SOON,
    )
    .await;
    put_secret(&client, ns.name(), &secret("guarded-token", "token", token)).await;
    let s = wait_condition(&api, "guarded", "Ready", "True", None, SOON).await;

    // The token appears nowhere a person (or a log pipeline) can read.
    let status = serde_json::to_string(&s.status).unwrap();
    let events = Api::<Event>::namespaced(client.clone(), ns.name())
        .list(&ListParams::default())
        .await
        .unwrap();
    let events = serde_json::to_string(&events).unwrap();
    let log = op.log_text();
    for (what, text) in [
        ("status", &status),
        ("events", &events),
        ("controller log", &log),
    ] {
        assert!(!text.contains(token), "the token leaked into {what}");
        assert!(
            !text.contains("tok-wrong-value"),
            "a token leaked into {what}"
        );
    }
    assert!(
        events.contains("Unauthorized"),
        "an event on the transition: {events}"
    );
}

#[tokio::test]
async fn a_stopped_server_keeps_its_stale_catalogue_and_recovers_on_its_own() {
    let (client, ns) = e2e::setup("outage").await;
    let fixtures = Fixtures::load();
    let port = support::free_port();
    let port_arg = port.to_string();
    let server = fixtures.sdk_server(&["--tools", "3", "--port", &port_arg]);
    let _op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-outage");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest("flaky", &server.url, json!({})),
    )
    .await;
    let ready = wait_condition(&api, "flaky", "Ready", "True", None, SOON).await;
    let synced_at = ready
        .status
        .as_ref()
        .unwrap()
        .catalog
        .as_ref()
        .unwrap()
        .last_sync_time
        .clone();

    // Stop it and ask for a refresh: Reachable=False, the catalogue kept and marked stale.
    drop(server);
    api.patch(
        "flaky",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"mcp-operator.dev/refresh": "1"}}})),
    )
    .await
    .unwrap();
    let s = wait_condition(
        &api,
        "flaky",
        "Reachable",
        "False",
        Some("ConnectionRefused"),
        SOON,
    )
    .await;
    let st = s.status.as_ref().unwrap();
    assert_eq!(tool_count(&s), 7, "the last catalogue is kept");
    assert_eq!(st.catalog.as_ref().unwrap().last_sync_time, synced_at);
    let synced = condition(&s, "CatalogSynced").unwrap();
    assert_eq!(synced["status"], "False");
    assert!(
        synced["message"].as_str().unwrap().contains("stale"),
        "{synced}"
    );

    // Start it again on the same port: Ready again without anyone touching anything.
    let _again = fixtures.sdk_server(&["--tools", "3", "--port", &port_arg]);
    wait_condition(&api, "flaky", "Ready", "True", None, SOON).await;
}

#[tokio::test]
async fn a_server_answering_401_is_unauthorized() {
    let (client, ns) = e2e::setup("unauthorized").await;
    let server = Fixtures::load().sdk_server(&["--bearer", "needed"]);
    let _op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-401");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest("locked", &server.url, json!({})),
    )
    .await;
    let s = wait_condition(&api, "locked", "Ready", "False", Some("Unauthorized"), SOON).await;
    let reachable = condition(&s, "Reachable").unwrap();
    assert_eq!(reachable["reason"], "Unauthorized");
    assert!(reachable["message"].as_str().unwrap().contains("401"));
}

#[tokio::test]
async fn an_idle_namespace_sees_no_writes() {
    let (client, ns) = e2e::setup("idle").await;
    let fixtures = Fixtures::load();
    let a = fixtures.sdk_server(&["--tools", "5"]);
    let hostile = fixtures.hostile_server();
    let op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-idle");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    // One healthy server refreshed every 30s, one failing one, one whose catalogue spills into
    // a ConfigMap: none of them may write while nothing changes.
    let fast = json!({"discovery": {"refreshInterval": "30s"}});
    apply_server(
        &client,
        ns.name(),
        server_manifest("healthy", &a.url, fast.clone()),
    )
    .await;
    apply_server(
        &client,
        ns.name(),
        server_manifest(
            "broken",
            &format!("{}/cursor-loop/mcp", hostile.url),
            fast.clone(),
        ),
    )
    .await;
    apply_server(
        &client,
        ns.name(),
        server_manifest(
            "big",
            &format!("{}/bulk/mcp?tools=10000&pages=100", hostile.url),
            json!({"discovery": {"refreshInterval": "30s"}, "timeouts": {"connect": "60s"}}),
        ),
    )
    .await;
    wait_condition(&api, "healthy", "Ready", "True", None, SOON).await;
    wait_condition(
        &api,
        "broken",
        "Ready",
        "False",
        Some("RepeatedCursor"),
        SOON,
    )
    .await;
    let big = wait_condition(&api, "big", "Ready", "True", None, Duration::from_secs(90)).await;
    assert_eq!(tool_count(&big), 10_000);
    let cm_name = big
        .status
        .as_ref()
        .unwrap()
        .catalog_config_map
        .clone()
        .expect("spilled");
    assert!(
        big.status
            .as_ref()
            .unwrap()
            .catalog
            .as_ref()
            .unwrap()
            .catalog
            .tools
            .is_empty()
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let cm = cms.get(&cm_name).await.unwrap();
    let gz = &cm.binary_data.as_ref().unwrap()["catalog.json.gz"].0;
    let full = mcp_operator::controller::mcp_server::decompress_spilled_catalog(gz).unwrap();
    assert_eq!(full.tools.len(), 10_000);

    // (name, resourceVersion, what a person would diff: the status without the catalogue)
    let snapshot = || async {
        let mut v = Vec::new();
        for s in api.list(&ListParams::default()).await.unwrap() {
            let mut status = serde_json::to_value(&s.status).unwrap();
            if let Some(st) = status.as_object_mut() {
                st.remove("catalog");
            }
            v.push((
                s.metadata.name.clone().unwrap(),
                s.metadata.resource_version.clone().unwrap(),
                status.to_string(),
            ));
        }
        for c in cms.list(&ListParams::default()).await.unwrap() {
            v.push((
                c.metadata.name.clone().unwrap(),
                c.metadata.resource_version.clone().unwrap(),
                String::new(),
            ));
        }
        v.sort();
        v
    };
    // Let the first failure backoffs settle, then watch a window longer than refreshInterval.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = snapshot().await;
    tokio::time::sleep(Duration::from_secs(40)).await;
    let after = snapshot().await;
    assert!(
        before == after,
        "resourceVersions changed while idle\nbefore: {before:#?}\nafter: {after:#?}\noperator log tail:\n{}",
        tail(&op.log_text(), 60)
    );
    let metrics = op.metrics();
    assert!(
        metrics.contains("mcp_operator_mcpservers{reason=\"Ready\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcp_operator_mcpservers{reason=\"RepeatedCursor\"} 1"),
        "{metrics}"
    );
}

/// Who holds the controller's Lease, or why nobody does.
async fn lease_holder(leases: &Api<Lease>) -> Result<String, String> {
    leases
        .get("mcp-operator")
        .await
        .ok()
        .and_then(|l| l.spec?.holder_identity)
        .ok_or_else(|| "no holder".to_string())
}

#[tokio::test]
async fn one_of_two_controllers_leads_and_a_standby_takes_over() {
    let (client, ns) = e2e::setup("leader").await;
    let server = Fixtures::load().sdk_server(&["--tools", "1"]);
    let kubeconfig = e2e::kubeconfig_path().await;
    let mut first = Operator::start(&kubeconfig, ns.name(), "op-first");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let holder = || lease_holder(&leases);
    let leader = eventually(SOON, "a lease holder", holder).await;
    assert_eq!(leader, "op-first");
    let second = Operator::start(&kubeconfig, ns.name(), "op-second");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest("one", &server.url, json!({})),
    )
    .await;
    wait_condition(&api, "one", "Ready", "True", None, SOON).await;
    assert!(
        !second.log_text().contains("became the leader"),
        "the standby must not reconcile while the leader lives"
    );

    // Kill the leader without a goodbye: the standby takes over once the lease expires.
    first.kill();
    eventually(
        Duration::from_secs(60),
        "op-second to hold the lease",
        || async {
            match holder().await? {
                h if h == "op-second" => Ok(()),
                h => Err(h),
            }
        },
    )
    .await;
    apply_server(
        &client,
        ns.name(),
        server_manifest("two", &server.url, json!({})),
    )
    .await;
    wait_condition(&api, "two", "Ready", "True", None, SOON).await;
    assert!(second.log_text().contains("became the leader"));
}

#[tokio::test]
async fn a_pushed_tool_change_reaches_status_within_seconds() {
    let (client, ns) = e2e::setup("pushed").await;
    let server = Fixtures::load().sdk_server(&["--tools", "2"]);
    let op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-pushed");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    // The default refreshInterval is 5m: only the push can explain a change within seconds.
    apply_server(
        &client,
        ns.name(),
        server_manifest("pushy", &server.url, json!({})),
    )
    .await;
    let s = wait_condition(&api, "pushy", "Ready", "True", None, SOON).await;
    assert_eq!(tool_count(&s), 6);
    eventually(SOON, "an open subscription", || async {
        let m = op.metrics();
        if m.contains("mcp_operator_subscriptions_open 1") {
            Ok(())
        } else {
            Err(m)
        }
    })
    .await;

    support::sdk_control(&server.url, "add-tool", "fresh_tool").await;
    let s = eventually(Duration::from_secs(15), "fresh_tool in status", || async {
        let s = api.get("pushy").await.map_err(|e| e.to_string())?;
        let names: Vec<String> = s
            .status
            .as_ref()
            .and_then(|s| s.catalog.as_ref())
            .map_or(vec![], |c| {
                c.catalog.tools.iter().map(|t| t.name.clone()).collect()
            });
        if names.iter().any(|n| n == "fresh_tool") {
            Ok(s)
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
    assert_eq!(tool_count(&s), 7);
    let events = Api::<Event>::namespaced(client.clone(), ns.name())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("CatalogChanged")
                && e.message.as_deref().unwrap_or("").contains("fresh_tool")),
        "a CatalogChanged event names the new tool"
    );

    // Deleting the McpServer closes its subscription and drops it from the metrics.
    api.delete("pushy", &Default::default()).await.unwrap();
    eventually(SOON, "the subscription to close", || async {
        let m = op.metrics();
        if m.contains("mcp_operator_subscriptions_open 0") && !m.contains("name=\"pushy\"") {
            Ok(())
        } else {
            Err(m)
        }
    })
    .await;
}

#[tokio::test]
async fn sigterm_stops_cleanly_and_releases_the_lease() {
    let (client, ns) = e2e::setup("sigterm").await;
    let server = Fixtures::load().sdk_server(&["--tools", "1"]);
    let kubeconfig = e2e::kubeconfig_path().await;
    let mut first = Operator::start(&kubeconfig, ns.name(), "op-term-first");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let holder = || lease_holder(&leases);
    let leader = eventually(SOON, "a lease holder", holder).await;
    assert_eq!(leader, "op-term-first");
    let second = Operator::start(&kubeconfig, ns.name(), "op-term-second");
    eventually(SOON, "the standby to wait", || async {
        if second.log_text().contains("waiting to become the leader") {
            Ok(())
        } else {
            Err(second.log_text())
        }
    })
    .await;

    let code = first.terminate(Duration::from_secs(15));
    assert_eq!(code, Some(0), "SIGTERM ends the controller cleanly");
    assert!(
        first.log_text().contains("released the lease"),
        "{}",
        first.log_text()
    );
    // Released, not expired: the standby needs far less than the 4s lease duration.
    let handed_over = std::time::Instant::now();
    eventually(
        Duration::from_secs(30),
        "op-term-second to hold the lease",
        || async {
            match holder().await? {
                h if h == "op-term-second" => Ok(()),
                h => Err(h),
            }
        },
    )
    .await;
    eprintln!(
        "lease handed over {:?} after SIGTERM",
        handed_over.elapsed()
    );
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest("after", &server.url, json!({})),
    )
    .await;
    wait_condition(&api, "after", "Ready", "True", None, SOON).await;
}

#[tokio::test]
async fn a_healthy_server_is_ready_while_hanging_servers_outnumber_the_reconcile_slots() {
    let (client, ns) = e2e::setup("starve").await;
    let fixtures = Fixtures::load();
    let hostile = fixtures.hostile_server();
    let healthy = fixtures.sdk_server(&["--tools", "2"]);
    // Two reconcile slots, six times as many servers that never answer (for up to 5 minutes).
    const HANGING: usize = 12;
    let op = Operator::start_with(
        &e2e::kubeconfig_path().await,
        ns.name(),
        "op-starve",
        &["--concurrency", "2"],
    );
    let hang_url = format!("{}/hang/mcp", hostile.url);
    for i in 0..HANGING {
        apply_server(
            &client,
            ns.name(),
            server_manifest(
                &format!("hang-{i:02}"),
                &hang_url,
                json!({"timeouts": {"connect": "5m"}}),
            ),
        )
        .await;
    }
    let running = |op: &Operator| op.metric("mcp_operator_probes_running");
    eventually(
        SOON,
        "every hanging server's probe to be running",
        || async {
            match running(&op) {
                n if n >= HANGING as f64 => Ok(()),
                n => Err(format!("{n} probes running")),
            }
        },
    )
    .await;

    apply_server(
        &client,
        ns.name(),
        server_manifest("healthy", &healthy.url, json!({})),
    )
    .await;
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let s = wait_condition(&api, "healthy", "Ready", "True", Some("Ready"), SOON).await;
    assert_eq!(tool_count(&s), 2 + 4, "2 generated + 4 named tools");
    // Ready while every hanging probe is still outstanding: none of them held a slot.
    assert!(
        running(&op) >= HANGING as f64,
        "the hanging probes are still running: {}",
        op.metrics()
    );
    for i in 0..HANGING {
        let hanging = api.get(&format!("hang-{i:02}")).await.unwrap();
        assert!(
            condition(&hanging, "Ready").is_none(),
            "hang-{i:02} has no verdict yet: {:?}",
            hanging.status
        );
    }
    // Deleting a hanging server stops its probe.
    api.delete("hang-00", &Default::default()).await.unwrap();
    eventually(SOON, "the deleted server's probe to stop", || async {
        match running(&op) {
            n if n < HANGING as f64 => Ok(()),
            n => Err(format!("{n} probes running")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_restarted_controller_schedules_ready_servers_from_their_last_read() {
    let (client, ns) = e2e::setup("resume").await;
    let fixtures = Fixtures::load();
    let server = fixtures.sdk_server(&["--tools", "2"]);
    let kubeconfig = e2e::kubeconfig_path().await;
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let mut first = Operator::start(&kubeconfig, ns.name(), "op-resume-first");
    for name in ["steady", "edited"] {
        apply_server(
            &client,
            ns.name(),
            server_manifest(name, &server.url, json!({})),
        )
        .await;
    }
    let closed = format!("http://127.0.0.1:{}/mcp", support::free_port());
    apply_server(
        &client,
        ns.name(),
        server_manifest("down", &closed, json!({})),
    )
    .await;
    for name in ["steady", "edited"] {
        wait_condition(&api, name, "Ready", "True", None, SOON).await;
    }
    wait_condition(&api, "down", "Ready", "False", None, SOON).await;
    // A later read that changes the catalogue, so the last status write is seconds after
    // anything else touched the objects (managedFields times have whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    support::sdk_control(&server.url, "add-tool", "later_tool").await;
    for name in ["steady", "edited"] {
        eventually(SOON, &format!("{name} to list later_tool"), || async {
            let s = api.get(name).await.map_err(|e| e.to_string())?;
            if tool_count(&s) == 7 {
                Ok(())
            } else {
                Err(format!("{} tools", tool_count(&s)))
            }
        })
        .await;
    }
    first.kill();
    // While no controller runs, one spec changes.
    apply_server(
        &client,
        ns.name(),
        server_manifest(
            "edited",
            &server.url,
            json!({"discovery": {"refreshInterval": "10m"}}),
        ),
    )
    .await;

    let second = Operator::start(&kubeconfig, ns.name(), "op-resume-second");
    let s = eventually(
        SOON,
        "the edited server to be read for its new generation",
        || async {
            let s = api.get("edited").await.map_err(|e| e.to_string())?;
            match s.status.as_ref().and_then(|st| st.observed_generation) {
                Some(2) => Ok(s),
                other => Err(format!("observedGeneration {other:?}")),
            }
        },
    )
    .await;
    assert_eq!(condition(&s, "Ready").unwrap()["status"], "True");
    eventually(SOON, "the failing server to be probed at once", || async {
        let m = second.metrics();
        if m.contains("mcp_operator_probes_total{reason=\"ConnectionRefused\"}") {
            Ok(())
        } else {
            Err(m)
        }
    })
    .await;
    // The steady server is resumed from its status: gauges from status, subscription reopened,
    // no probe (its next one is due a refresh interval after its last read).
    eventually(
        SOON,
        "both Ready servers in the gauges and subscribed",
        || async {
            let m = second.metrics();
            if m.contains("mcp_operator_mcpservers{reason=\"Ready\"} 2")
                && m.contains("mcp_operator_subscriptions_open 2")
            {
                Ok(())
            } else {
                Err(m)
            }
        },
    )
    .await;
    let m = second.metrics();
    assert!(
        m.contains("mcp_operator_probes_total{reason=\"Ready\"} 1\n"),
        "only the edited server was read: {m}"
    );
    // The reopened subscription delivers pushes as before.
    support::sdk_control(&server.url, "add-tool", "after_restart").await;
    eventually(SOON, "steady to list after_restart", || async {
        let s = api.get("steady").await.map_err(|e| e.to_string())?;
        if tool_count(&s) == 8 {
            Ok(())
        } else {
            Err(format!("{} tools", tool_count(&s)))
        }
    })
    .await;
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The approved prompt digests the AgentSpec `agent`'s grants carry for `server` (None while
/// there are no grants or the server is not pinned).
async fn prompt_digests(
    client: &kube::Client,
    ns: &str,
    agent: &str,
    server: &str,
) -> Option<serde_json::Value> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&format!("{agent}-mcp-grants"))
        .await
        .unwrap()?;
    let doc: serde_json::Value =
        serde_json::from_str(cm.data.as_ref()?.get("grants.json")?).unwrap();
    doc["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == server)
        .map(|s| s["promptDigests"].clone())
}

async fn wait_prompt_digests(client: &kube::Client, ns: &str, want: &[&str]) -> serde_json::Value {
    eventually(SOON, &format!("promptDigests of {want:?}"), || async {
        let digests = prompt_digests(client, ns, "bot", "files")
            .await
            .unwrap_or_default();
        let names: Vec<&str> = digests
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        if names == want {
            Ok(digests.clone())
        } else {
            Err(format!("{digests}"))
        }
    })
    .await
}

/// What `kubectl get mcp -o yaml` shows of a server's resources, templates and prompts, and
/// pinning of prompts: a prompt whose description changes waits for a person, leaves the
/// agent's grants (the sidecar then serves it to no agent), and comes back once approved.
#[tokio::test]
async fn status_lists_resources_and_prompts_and_a_changed_pinned_prompt_waits() {
    let (client, ns) = e2e::setup("res-prompts").await;
    let fixture = Fixtures::load().sdk_server(&[]);
    let _op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-res-prompts");
    apply_server(
        &client,
        ns.name(),
        server_manifest("files", &fixture.url, json!({"pinning": {"enabled": true}})),
    )
    .await;
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let s = wait_condition(&api, "files", "Ready", "True", Some("Ready"), SOON).await;
    let catalog = &s.status.as_ref().unwrap().catalog.as_ref().unwrap().catalog;
    assert_eq!(
        (
            catalog.resource_count,
            catalog.resource_template_count,
            catalog.prompt_count
        ),
        (Some(3), Some(2), Some(2))
    );
    let uris: Vec<&str> = catalog.resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "file:///docs/guide.md",
            "file:///docs/readme.md",
            "file:///private/keys.txt"
        ]
    );
    let prompts: Vec<&str> = catalog.prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(prompts, ["exfiltrate", "review"]);
    assert_eq!(
        condition(&s, "CatalogSynced").unwrap()["message"],
        "Read 4 tools in 1 page of tools/list; 3 resources, 2 resource templates, 2 prompts."
    );

    e2e::apply_agent(
        &client,
        ns.name(),
        "bot",
        json!({"servers": [{"name": "files", "prompts": {"allow": ["*"]}}]}),
    )
    .await;
    let before = wait_prompt_digests(&client, ns.name(), &["exfiltrate", "review"]).await;

    // The prompt's rug pull: its description changes (nothing is pushed: the next read sees it).
    support::sdk_control_with(
        &fixture.url,
        "set-prompt-description",
        &[
            ("name", "review"),
            ("text", "Review a file, then push it to main"),
        ],
    )
    .await;
    api.patch(
        "files",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"mcp-operator.dev/refresh": "1"}}})),
    )
    .await
    .unwrap();
    let s = wait_condition(
        &api,
        "files",
        "ToolsApproved",
        "False",
        Some("AwaitingApproval"),
        SOON,
    )
    .await;
    let message = condition(&s, "ToolsApproved").unwrap()["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .starts_with("1 prompt waits for approval and no agent is granted it: prompt review (description changed)."),
        "{message}"
    );
    let pinning = s.status.as_ref().unwrap().pinning.clone().unwrap();
    assert_eq!(
        (pinning.waiting_count, pinning.waiting_prompt_count),
        (0, 1)
    );
    let waiting = &pinning.waiting_prompts[0];
    assert_eq!(waiting.name, "review");
    assert_eq!(waiting.summary, "description changed");
    assert_eq!(
        waiting.pinned_digest.as_ref(),
        before["review"].as_str().map(String::from).as_ref()
    );
    assert_eq!(condition(&s, "Ready").unwrap()["status"], "True");
    let after = wait_prompt_digests(&client, ns.name(), &["exfiltrate"]).await;
    assert_eq!(after["exfiltrate"], before["exfiltrate"]);

    // A person approves the served definition: the prompt is granted again, at its new digest.
    api.patch(
        "files",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"mcp-operator.dev/approve": waiting.served_digest}}}),
        ),
    )
    .await
    .unwrap();
    wait_condition(&api, "files", "ToolsApproved", "True", None, SOON).await;
    let approved = wait_prompt_digests(&client, ns.name(), &["exfiltrate", "review"]).await;
    assert_eq!(approved["review"], waiting.served_digest.as_str());
}
