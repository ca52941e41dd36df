//! Resources and prompts through the sidecar, narrowed by the grants: the official Python SDK
//! client (both eras) talks to `mcp-operator sidecar`, which talks to the Python SDK fixture
//! server and server-everything on loopback. What the agent sees is asserted, and, from the
//! fixture server's own record, that a refused read or get never reached it. Subscriptions and
//! list changes come back through the sidecar for granted resources only.

use crate::sidecar_support;
use crate::support;

use serde_json::{Value, json};

use sidecar_support::{RawLegacyAgent, Sidecar, agent, agent_with, grants_for, http, json_of};
use support::Fixtures;

const MODES: [&str; 2] = ["legacy", "auto"];

/// `grants` (one server, from [`grants_for`]) with resource and prompt bounds (null: none):
/// grants/v2.
fn with_bounds(mut grants: Value, resources: Value, prompts: Value) -> Value {
    grants["schemaVersion"] = json!("mcp-operator.dev/grants/v2");
    let server = grants["servers"][0].as_object_mut().unwrap();
    for (key, bounds) in [("resources", resources), ("prompts", prompts)] {
        if !bounds.is_null() {
            server.insert(key.into(), bounds);
        }
    }
    grants
}

async fn upstream_reads(url: &str) -> Vec<String> {
    let mut u = url::Url::parse(url).unwrap();
    u.set_path("/control/reads");
    let v = json_of(http().get(u).send().await.unwrap()).await;
    serde_json::from_value(v["reads"].clone()).unwrap()
}

fn strings(v: &Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_reads_exactly_its_granted_resources_and_prompts_of_the_sdk_server() {
    let server = Fixtures::load().sdk_server(&[]);
    let grants = with_bounds(
        grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await,
        json!([{"allow": ["file:///docs/{name}"]}]),
        json!([{"allow": ["review"]}]),
    );
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([
                {"op": "resources"},
                {"op": "read", "uri": "fs+file:///docs/readme.md"},
                {"op": "read", "uri": "fs+file:///private/keys.txt"},
                {"op": "read", "uri": "file:///docs/readme.md"},
                {"op": "prompts"},
                {"op": "get_prompt", "name": "fs__review", "arguments": {"path": "a.md"}},
                {"op": "get_prompt", "name": "fs__exfiltrate"},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "fs__review"},
                 "argument": {"name": "path", "value": "r"}},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "fs__exfiltrate"},
                 "argument": {"name": "path", "value": "r"}},
                {"op": "complete", "ref": {"type": "ref/resource", "uri": "fs+file:///docs/{name}"},
                 "argument": {"name": "name", "value": "r"}},
                {"op": "list"},
            ]),
        )
        .await;
        let steps = &out["steps"];
        // Only the granted ones are listed, every page read (the server lists one per page),
        // under the server's prefix.
        assert_eq!(
            strings(&steps[0]["resources"]),
            ["fs+file:///docs/guide.md", "fs+file:///docs/readme.md"],
            "{mode}: {out}"
        );
        assert_eq!(
            strings(&steps[0]["templates"]),
            ["fs+file:///docs/{name}"],
            "{mode}: {out}"
        );
        assert_eq!(
            steps[1]["contents"],
            json!([{"uri": "fs+file:///docs/readme.md", "text": "# Read me"}]),
            "{mode}: {out}"
        );
        for refused in [&steps[2], &steps[3]] {
            let message = refused["error"]["message"].as_str().unwrap_or("");
            assert!(
                message.contains("is not granted to this agent"),
                "{mode}: {out}"
            );
            assert_eq!(refused["error"]["code"], -32002, "{mode}: {out}");
        }
        assert_eq!(
            strings(&steps[4]["prompts"]),
            ["fs__review"],
            "{mode}: {out}"
        );
        let messages = &steps[5]["messages"];
        assert_eq!(
            messages[0]["content"]["text"], "review a.md",
            "{mode}: {out}"
        );
        // An embedded resource comes back under the name the agent can ask for.
        assert_eq!(
            messages[1]["content"]["resource"]["uri"], "fs+file:///docs/guide.md",
            "{mode}: {out}"
        );
        assert!(
            steps[6]["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("the prompt \"fs__exfiltrate\" is not granted"),
            "{mode}: {out}"
        );
        assert_eq!(
            steps[7]["values"],
            json!(["readme.md", "guide.md"]),
            "{mode}: {out}"
        );
        assert!(steps[8]["error"].is_object(), "{mode}: {out}");
        assert_eq!(
            steps[9]["values"],
            json!(["readme.md", "guide.md"]),
            "{mode}: {out}"
        );
        assert_eq!(
            strings(&steps[10]["names"]),
            ["fs__read_file"],
            "{mode}: {out}"
        );
    }
    // The server heard only what was granted: never the private file, never the other prompt.
    let reads = upstream_reads(&server.url).await;
    let expected: Vec<String> = [
        "resources/read file:///docs/readme.md",
        "prompts/get review",
    ]
    .iter()
    .chain(&[
        "completion/complete review",
        "completion/complete file:///docs/{name}",
    ])
    .map(|s| s.to_string())
    .collect();
    assert_eq!(reads.len(), 2 * expected.len(), "{reads:?}");
    for r in &reads {
        assert!(
            expected.contains(r),
            "the upstream was asked for {r}: {reads:?}"
        );
    }
    // One audit line per read and get, refused ones too.
    let audit = sidecar.audit();
    let reads_audited: Vec<&Value> = audit
        .iter()
        .filter(|a| a["method"] == "resources/read")
        .collect();
    assert_eq!(reads_audited.len(), 6, "{audit:?}");
    assert_eq!(
        reads_audited
            .iter()
            .filter(|a| a["decision"] == "not_granted")
            .count(),
        4,
        "{audit:?}"
    );
    assert!(
        audit
            .iter()
            .any(|a| a["method"] == "prompts/get" && a["raw"] == "review" && a["outcome"] == "ok"),
        "{audit:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everythings_resources_and_prompts_are_narrowed_through_the_sidecar() {
    let server = Fixtures::load().everything_server();
    let grants = with_bounds(
        grants_for("everything", "ev", &server.url, &["echo"], json!({}), None).await,
        json!([{"allow": ["demo://resource/static/document/*", "demo://resource/dynamic/text/{resourceId}"],
                "deny": ["*instructions*"]}]),
        json!([{"allow": ["simple-prompt", "completable-prompt"]}]),
    );
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([
                {"op": "resources"},
                {"op": "read", "uri": "ev+demo://resource/static/document/architecture.md"},
                {"op": "read", "uri": "ev+demo://resource/static/document/instructions.md"},
                {"op": "read", "uri": "ev+demo://resource/dynamic/text/1"},
                {"op": "read", "uri": "ev+demo://resource/dynamic/blob/1"},
                {"op": "prompts"},
                {"op": "get_prompt", "name": "ev__simple-prompt"},
                {"op": "get_prompt", "name": "ev__args-prompt", "arguments": {"city": "Paris"}},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "ev__completable-prompt"},
                 "argument": {"name": "department", "value": "E"}},
            ]),
        )
        .await;
        let steps = &out["steps"];
        let resources = strings(&steps[0]["resources"]);
        assert!(
            resources.contains(&"ev+demo://resource/static/document/architecture.md".to_string()),
            "{mode}: {out}"
        );
        assert!(
            resources
                .iter()
                .all(|r| r.starts_with("ev+demo://resource/static/document/")
                    && !r.contains("instructions")),
            "{mode}: only granted documents: {out}"
        );
        assert_eq!(
            strings(&steps[0]["templates"]),
            ["ev+demo://resource/dynamic/text/{resourceId}"],
            "{mode}: {out}"
        );
        assert_eq!(
            steps[1]["contents"][0]["uri"], "ev+demo://resource/static/document/architecture.md",
            "{mode}: {out}"
        );
        assert!(
            steps[1]["contents"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{mode}: {out}"
        );
        assert_eq!(steps[2]["error"]["code"], -32002, "{mode}: denied: {out}");
        assert_eq!(
            steps[3]["contents"][0]["uri"], "ev+demo://resource/dynamic/text/1",
            "{mode}: a granted template's URI: {out}"
        );
        assert_eq!(steps[4]["error"]["code"], -32002, "{mode}: {out}");
        let mut prompts = strings(&steps[5]["prompts"]);
        prompts.sort();
        assert_eq!(
            prompts,
            ["ev__completable-prompt", "ev__simple-prompt"],
            "{mode}: {out}"
        );
        assert!(
            steps[6]["messages"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
            "{mode}: {out}"
        );
        assert!(
            steps[7]["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("not granted"),
            "{mode}: {out}"
        );
        assert!(
            strings(&steps[8]["values"])
                .iter()
                .any(|v| v == "Engineering"),
            "{mode}: {out}"
        );
    }
}

/// Initialize (legacy) and server/discover (modern) advertise resources and prompts only when
/// the grants grant some; a v1 document (tools only) reads as granting none.
#[tokio::test(flavor = "multi_thread")]
async fn capabilities_follow_what_is_granted() {
    let server = Fixtures::load().sdk_server(&[]);
    let tools_only = grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await;
    assert_eq!(tools_only["schemaVersion"], "mcp-operator.dev/grants/v1");
    let mut sidecar = Sidecar::start(Some(&tools_only));
    sidecar.wait_ready().await;
    let capabilities = |answer: &Value| answer["result"]["capabilities"].clone();
    let (raw, answer) = RawLegacyAgent::initialize(&sidecar.url, "2025-11-25", json!({})).await;
    assert!(capabilities(&answer).get("resources").is_none(), "{answer}");
    assert!(capabilities(&answer).get("prompts").is_none(), "{answer}");
    // Asked anyway: an empty list, and a read refused without reaching the server.
    let listed = json_of(
        raw.post(json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}}))
            .await,
    )
    .await;
    assert_eq!(listed["result"]["resources"], json!([]), "{listed}");
    let read = json_of(
        raw.post(
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                        "params": {"uri": "fs+file:///docs/readme.md"}}),
        )
        .await,
    )
    .await;
    assert_eq!(read["error"]["code"], -32002, "{read}");
    assert!(upstream_reads(&server.url).await.is_empty());

    let granting = with_bounds(tools_only, json!([{"allow": ["*"]}]), Value::Null);
    sidecar.swap_grants(granting.to_string().as_bytes());
    let discovered = async || {
        let response = http()
            .post(&sidecar.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        json_of(response).await
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let answer = loop {
        let answer = discovered().await;
        if capabilities(&answer).get("resources").is_some() || std::time::Instant::now() > deadline
        {
            break answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // Subscriptions and list changes are relayed (see the tests above), so they are advertised.
    assert_eq!(
        capabilities(&answer)["resources"],
        json!({"subscribe": true, "listChanged": true}),
        "{answer}"
    );
    assert!(capabilities(&answer).get("prompts").is_none(), "{answer}");
    assert_eq!(capabilities(&answer)["completions"], json!({}), "{answer}");
}

async fn control(url: &str, path_and_query: &str) -> Value {
    let mut u = url::Url::parse(url).unwrap();
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    u.set_path(path);
    u.set_query(Some(query).filter(|q| !q.is_empty()));
    let response = if path.starts_with("/control/add") || path.starts_with("/control/update") {
        http().post(u).send().await.unwrap()
    } else {
        http().get(u).send().await.unwrap()
    };
    json_of(response).await
}

/// The agent's subscriptions through the sidecar, against the SDK fixture server in each
/// upstream era, from the Python SDK client in each era: the granted resource it subscribed to
/// comes back updated (under its `<prefix>+<uri>` name), list changes come back, and nothing
/// else does — not an update of a resource it did not subscribe to, not one of a resource it is
/// not granted (the server sends both to the sidecar's session), not one of a resource the
/// grants stopped granting after it subscribed.
#[tokio::test(flavor = "multi_thread")]
async fn granted_resource_updates_and_list_changes_reach_the_agent_and_nothing_else() {
    for upstream in ["legacy", "modern"] {
        let server = Fixtures::load().sdk_server(&[]);
        let grants = with_bounds(
            grants_for(
                "files",
                "fs",
                &server.url,
                &["read_file"],
                json!({"era": upstream}),
                None,
            )
            .await,
            json!([{"allow": ["file:///docs/*"]}]),
            json!([{"allow": ["review"]}]),
        );
        let mut sidecar = Sidecar::start(Some(&grants));
        sidecar.wait_ready().await;
        for mode in MODES {
            let url = server.url.clone();
            let out = agent_with(
                &sidecar.url,
                mode,
                json!([{"op": "watch_resources", "seconds": 3, "unsubscribe": true,
                        "subscribe": ["fs+file:///docs/readme.md", "fs+file:///private/keys.txt"]}]),
                || async move {
                    control(&url, "/control/update-resource?uri=file:///docs/readme.md&text=v2").await;
                    control(&url, "/control/update-resource?uri=file:///docs/guide.md&everyone=1").await;
                    control(&url, "/control/update-resource?uri=file:///private/keys.txt&everyone=1").await;
                    control(&url, &format!("/control/add-resource?uri=file:///docs/{mode}.md&text=x")).await;
                    control(&url, &format!("/control/add-prompt?name=p-{mode}")).await;
                },
            )
            .await;
            let step = &out["steps"][0];
            let context = format!("upstream {upstream}, agent {mode}: {out}");
            if mode == "legacy" {
                assert!(step["subscribed"][0]["error"].is_null(), "{context}");
                assert_eq!(step["subscribed"][1]["error"]["code"], -32002, "{context}");
            } else {
                assert_eq!(
                    step["honored"]["resourceSubscriptions"],
                    json!(["fs+file:///docs/readme.md"]),
                    "{context}"
                );
            }
            let updated = strings(&step["updated"]);
            assert!(!updated.is_empty(), "{context}");
            assert!(
                updated.iter().all(|u| u == "fs+file:///docs/readme.md"),
                "only the subscribed, granted resource: {context}"
            );
            assert!(step["resourcesChanged"].as_u64() >= Some(1), "{context}");
            assert!(step["promptsChanged"].as_u64() >= Some(1), "{context}");
        }
        // The server was asked to subscribe only to what was granted; in the legacy era the last
        // subscriber leaving unsubscribed it (the modern era names the URIs in its listen).
        let log = strings(&control(&server.url, "/control/subscriptions").await["subscriptions"]);
        assert!(
            log.iter().all(|l| !l.contains("private")),
            "{upstream}: {log:?}"
        );
        if upstream == "legacy" {
            assert!(
                log.contains(&"resources/subscribe file:///docs/readme.md".to_string())
                    && log.contains(&"resources/unsubscribe file:///docs/readme.md".to_string()),
                "{log:?}"
            );
        }

        // Granted when subscribed, no longer granted when it changes: the agent hears the list
        // change and never the update.
        let narrower = with_bounds(
            grants_for(
                "files",
                "fs",
                &server.url,
                &["read_file"],
                json!({"era": upstream}),
                None,
            )
            .await,
            json!([{"allow": ["file:///docs/guide.md"]}]),
            json!([{"allow": ["review"]}]),
        );
        let wider = grants.clone();
        for mode in MODES {
            sidecar.swap_grants(wider.to_string().as_bytes());
            tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
            let url = server.url.clone();
            let sidecar_ref = &mut sidecar;
            let narrower = narrower.clone();
            let out = agent_with(
                &sidecar_ref.url.clone(),
                mode,
                json!([{"op": "watch_resources", "seconds": 4,
                        "subscribe": ["fs+file:///docs/readme.md"]}]),
                || async move {
                    sidecar_ref.swap_grants(narrower.to_string().as_bytes());
                    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                    control(
                        &url,
                        "/control/update-resource?uri=file:///docs/readme.md&everyone=1",
                    )
                    .await;
                },
            )
            .await;
            let step = &out["steps"][0];
            let context = format!("upstream {upstream}, agent {mode}: {out}");
            assert!(strings(&step["updated"]).is_empty(), "{context}");
            assert!(step["resourcesChanged"].as_u64() >= Some(1), "{context}");
        }
    }
}

/// server-everything (legacy; its updates come every 5 s to the session that subscribed, once
/// that session calls toggle-subscriber-updates): the agent subscribes and calls the tool
/// through the sidecar, on the one upstream session, and hears the updates of its granted
/// resource; an ungranted one it asks for is refused.
#[tokio::test(flavor = "multi_thread")]
async fn server_everythings_updates_of_a_granted_resource_reach_the_agent() {
    let server = Fixtures::load().everything_server();
    let grants = with_bounds(
        grants_for(
            "everything",
            "ev",
            &server.url,
            &["echo", "toggle-subscriber-updates"],
            json!({}),
            None,
        )
        .await,
        json!([{"allow": ["demo://resource/static/document/*"]}]),
        Value::Null,
    );
    for mode in MODES {
        // A sidecar per agent: the tool toggles the updates of the upstream session.
        let sidecar = Sidecar::start(Some(&grants));
        sidecar.wait_ready().await;
        let granted = "ev+demo://resource/static/document/architecture.md";
        let out = agent(
            &sidecar.url,
            mode,
            json!([{"op": "watch_resources", "seconds": 7, "call": "ev__toggle-subscriber-updates",
                    "subscribe": [granted, "ev+demo://resource/dynamic/text/1"]}]),
        )
        .await;
        let step = &out["steps"][0];
        if mode == "legacy" {
            assert!(step["subscribed"][0]["error"].is_null(), "{mode}: {out}");
            assert_eq!(
                step["subscribed"][1]["error"]["code"], -32002,
                "{mode}: {out}"
            );
        } else {
            assert_eq!(
                step["honored"]["resourceSubscriptions"],
                json!([granted]),
                "{mode}: {out}"
            );
        }
        let updated = strings(&step["updated"]);
        assert!(!updated.is_empty(), "{mode}: {out}");
        assert!(updated.iter().all(|u| u == granted), "{mode}: {out}");
    }
}

/// The prompt digests a person approved, as the controller publishes them under pinning
/// (`promptDigests`): read from the server's own listing, as the controller's probe reads it.
async fn served_prompt_digests(url: &str) -> std::collections::BTreeMap<String, String> {
    use mcp_operator::mcp::{self, EndpointPolicy, ServerConnection};
    let mut conn = ServerConnection::new(url);
    conn.endpoint_policy = EndpointPolicy {
        allow_loopback: true,
    };
    let report = mcp::read_catalogue(&conn)
        .await
        .expect("the fixture server is readable");
    report
        .catalog(&Default::default())
        .prompts
        .into_iter()
        .map(|p| (p.name, p.definition_digest))
        .collect()
}

/// Under pinning a prompt whose definition differs from the approved one is withheld by every
/// door to it — left out of prompts/list, its prompts/get and its completion/complete refused
/// saying why — and none of those requests reaches the server; the approved one is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_prompt_that_changed_is_withheld_from_list_get_and_completion() {
    let server = Fixtures::load().sdk_server(&[]);
    let served = served_prompt_digests(&server.url).await;
    assert_eq!(served.keys().collect::<Vec<_>>(), ["exfiltrate", "review"]);
    let mut grants = with_bounds(
        grants_for("files", "fs", &server.url, &["read_file"], json!({}), None).await,
        Value::Null,
        json!([{"allow": ["*"]}]),
    );
    // `review` approved as served; `exfiltrate` approved at another definition (it changed
    // since); a prompt the server adds later has no approval at all.
    grants["servers"][0]["promptDigests"] = json!({
        "review": served["review"],
        "exfiltrate": format!("sha256:{}", "0".repeat(64)),
    });
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.wait_ready().await;
    support::sdk_control_with(&server.url, "add-prompt", &[("name", "newcomer")]).await;
    for mode in MODES {
        let out = agent(
            &sidecar.url,
            mode,
            json!([
                {"op": "prompts"},
                {"op": "get_prompt", "name": "fs__review", "arguments": {"path": "a.md"}},
                {"op": "get_prompt", "name": "fs__exfiltrate"},
                {"op": "get_prompt", "name": "fs__newcomer"},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "fs__exfiltrate"},
                 "argument": {"name": "path", "value": "r"}},
                {"op": "complete", "ref": {"type": "ref/prompt", "name": "fs__review"},
                 "argument": {"name": "path", "value": "r"}},
            ]),
        )
        .await;
        let steps = &out["steps"];
        assert_eq!(
            strings(&steps[0]["prompts"]),
            ["fs__review"],
            "{mode}: {out}"
        );
        assert_eq!(
            steps[1]["messages"][0]["content"]["text"], "review a.md",
            "{mode}: {out}"
        );
        for (step, why) in [
            (&steps[2], "differs from the definition a person approved"),
            (&steps[3], "differs from the definition a person approved"),
            (&steps[4], "differs from the definition a person approved"),
        ] {
            let message = step["error"]["message"].as_str().unwrap_or("");
            assert!(
                message.contains("is not served") && message.contains(why),
                "{mode}: {out}"
            );
            assert_eq!(step["error"]["code"], -32602, "{mode}: {out}");
        }
        assert_eq!(
            steps[5]["values"],
            json!(["readme.md", "guide.md"]),
            "{mode}: {out}"
        );
    }
    // The server heard only the approved prompt's get and completion, never the others'.
    let reads = upstream_reads(&server.url).await;
    assert_eq!(
        reads,
        ["prompts/get review", "completion/complete review"].repeat(MODES.len()),
        "{reads:?}"
    );
}
