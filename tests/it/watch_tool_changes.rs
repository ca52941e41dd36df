//! Watching real servers for `notifications/tools/list_changed` (the controller's refresh
//! trigger): the official Python SDK in the modern era, in the legacy era (behind a front that
//! refuses the modern era, as a legacy-only server would) and over the old SSE transport. A tool
//! added through the fixture's control endpoint must reach the watch; a killed server must end it.

use crate::support;

use std::time::Duration;

use mcp_operator::mcp::{
    EndpointPolicy, Era, ServerConnection, ToolChangeWatch, TransportKind, WatchError, WatchEvent,
    watch_tool_changes,
};
use support::{Fixtures, Server, legacy_front, sdk_control};

/// Long enough for a slow CI machine, short enough that a broken watch fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(10);

fn connection(url: &str) -> ServerConnection {
    mcp_operator::install_crypto_provider();
    let mut conn = ServerConnection::new(url);
    conn.endpoint_policy = EndpointPolicy {
        allow_loopback: true,
    };
    conn.limits.connect_timeout = Duration::from_secs(5);
    conn
}

async fn next_event(watch: &mut ToolChangeWatch) -> WatchEvent {
    tokio::time::timeout(PATIENCE, watch.next())
        .await
        .expect("the watch reports within the patience window")
}

/// Nothing arrives while nothing changes.
async fn assert_quiet(watch: &mut ToolChangeWatch) {
    if let Ok(event) = tokio::time::timeout(Duration::from_millis(500), watch.next()).await {
        panic!("the watch reported {event:?} though nothing changed");
    }
}

/// Adds then removes a tool (each a ToolsChanged), then kills the server (Ended).
async fn changes_arrive_and_a_killed_server_ends_the_watch(
    server: Server,
    control_url: &str,
    mut watch: ToolChangeWatch,
) {
    assert_quiet(&mut watch).await;

    sdk_control(control_url, "add-tool", "added_at_run_time").await;
    assert_eq!(next_event(&mut watch).await, WatchEvent::ToolsChanged);

    sdk_control(control_url, "remove-tool", "added_at_run_time").await;
    assert_eq!(next_event(&mut watch).await, WatchEvent::ToolsChanged);
    assert_quiet(&mut watch).await;

    drop(server);
    match next_event(&mut watch).await {
        WatchEvent::Ended(reason) => {
            eprintln!("ended: {reason}");
            assert!(!reason.is_empty());
            // An ended watch stays ended.
            assert_eq!(watch.next().await, WatchEvent::Ended(reason));
        }
        other => panic!("expected Ended after the server was killed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_era_subscription_reports_changes_and_ends_with_the_server() {
    let server = Fixtures::load().sdk_server(&[]);
    let url = server.url.clone();
    let watch = watch_tool_changes(&connection(&url))
        .await
        .expect("the SDK server pushes tool changes");
    assert_eq!(watch.era(), Era::Modern);
    changes_arrive_and_a_killed_server_ends_the_watch(server, &url, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_session_stream_reports_changes_and_ends_with_the_server() {
    let server = Fixtures::load().sdk_server(&[]);
    let url = server.url.clone();
    let front = legacy_front(&url).await;
    let watch = watch_tool_changes(&connection(&front.url))
        .await
        .expect("the SDK server pushes tool changes to legacy sessions");
    assert_eq!(watch.era(), Era::Legacy);
    let passed = front.passed.lock().unwrap().clone();
    assert_eq!(
        passed,
        ["POST", "POST", "GET"],
        "initialize, notifications/initialized, then the session's GET stream"
    );
    changes_arrive_and_a_killed_server_ends_the_watch(server, &url, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_sse_transport_reports_changes_and_ends_with_the_server() {
    let server = Fixtures::load().sdk_server(&["--sse"]);
    let url = server.url.clone();
    let mut conn = connection(&url);
    conn.transport = TransportKind::Sse;
    let watch = watch_tool_changes(&conn)
        .await
        .expect("the SDK server pushes tool changes over the old transport");
    assert_eq!(watch.era(), Era::Legacy);
    changes_arrive_and_a_killed_server_ends_the_watch(server, &url, watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_or_closing_a_legacy_watch_deletes_its_session() {
    let server = Fixtures::load().sdk_server(&[]);
    let front = legacy_front(&server.url).await;
    let deletes = || {
        front
            .passed
            .lock()
            .unwrap()
            .iter()
            .filter(|m| *m == "DELETE")
            .count()
    };

    let watch = watch_tool_changes(&connection(&front.url)).await.unwrap();
    watch.close().await;
    assert_eq!(deletes(), 1, "close() deletes the session");

    let watch = watch_tool_changes(&connection(&front.url)).await.unwrap();
    drop(watch);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while deletes() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "dropping the watch deletes the session in the background"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_survives_a_server_that_is_reread_meanwhile() {
    // The controller reads the server again on each change while the watch stays open.
    let server = Fixtures::load().sdk_server(&[]);
    let mut watch = watch_tool_changes(&connection(&server.url)).await.unwrap();
    sdk_control(&server.url, "add-tool", "one_more").await;
    assert_eq!(next_event(&mut watch).await, WatchEvent::ToolsChanged);
    let report = mcp_operator::mcp::read_server(&connection(&server.url))
        .await
        .unwrap();
    assert!(report.tools.iter().any(|t| t["name"] == "one_more"));
    sdk_control(&server.url, "add-tool", "and_another").await;
    assert_eq!(next_event(&mut watch).await, WatchEvent::ToolsChanged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_do_not_push_are_refused_without_holding_a_connection() {
    let fixtures = Fixtures::load();

    // The SDK's stateless legacy mode declares tools.listChanged false.
    let stateless = fixtures.sdk_server(&["--stateless"]);
    let front = legacy_front(&stateless.url).await;
    let err = watch_tool_changes(&connection(&front.url))
        .await
        .err()
        .expect("no watch on a stateless legacy server");
    assert!(matches!(err, WatchError::NotPushed(_)), "{err}");
    assert_eq!(err.reason(), "NotPushed");
    assert!(err.to_string().contains("listChanged"), "{err}");

    // The hostile fixture's servers declare `tools: {}`, in both eras.
    let hostile = fixtures.hostile_server();
    for mode in ["ok", "modern"] {
        let url = format!("{}/{mode}/mcp", hostile.url);
        let err = watch_tool_changes(&connection(&url))
            .await
            .err()
            .unwrap_or_else(|| panic!("no watch on hostile mode {mode}"));
        assert!(matches!(err, WatchError::NotPushed(_)), "{mode}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_keeps_the_connection_rules() {
    // Nothing listening.
    let url = format!("http://127.0.0.1:{}/mcp", support::free_port());
    let err = watch_tool_changes(&connection(&url)).await.err().unwrap();
    assert_eq!(err.reason(), "ConnectionRefused", "{err}");

    // The endpoint guard applies: loopback needs the explicit flag.
    let server = Fixtures::load().sdk_server(&[]);
    let mut conn = connection(&server.url);
    conn.endpoint_policy = EndpointPolicy::default();
    let err = watch_tool_changes(&conn).await.err().unwrap();
    assert_eq!(err.reason(), "BlockedEndpoint", "{err}");

    // A server that never answers: the handshake is bounded by the connect timeout.
    let hostile = Fixtures::load().hostile_server();
    let mut conn = connection(&format!("{}/hang/mcp", hostile.url));
    conn.limits.connect_timeout = Duration::from_millis(500);
    let started = std::time::Instant::now();
    let err = watch_tool_changes(&conn).await.err().unwrap();
    assert_eq!(err.reason(), "Timeout", "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));

    // Credentials go with the watch's requests like with a read.
    let guarded = Fixtures::load().sdk_server(&["--bearer", "tok-watch-1"]);
    let err = watch_tool_changes(&connection(&guarded.url))
        .await
        .err()
        .unwrap();
    assert_eq!(err.reason(), "Unauthorized", "{err}");
    let mut conn = connection(&guarded.url);
    conn.credentials.bearer_token = Some(mcp_operator::mcp::SecretValue::new("tok-watch-1"));
    let mut watch = watch_tool_changes(&conn).await.expect("with the token");
    sdk_control(&guarded.url, "add-tool", "behind_a_token").await;
    assert_eq!(next_event(&mut watch).await, WatchEvent::ToolsChanged);
}

/// A minimal modern server whose `subscriptions/listen` stream is scripted: after the
/// acknowledgement it sends `tail` and then holds the stream open.
async fn scripted_listen_server(tail: Vec<Vec<u8>>) -> (String, tokio::task::JoinHandle<()>) {
    use axum::body::Body;
    use axum::http::Response;
    use futures::StreamExt;

    let handler = move |body: axum::body::Bytes| {
        let tail = tail.clone();
        async move {
            let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let id = request["id"].clone();
            match request["method"].as_str() {
                Some("server/discover") => {
                    let answer = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                        "resultType": "complete", "supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {"listChanged": true}},
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "1"}}}});
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Body::from(answer.to_string()))
                        .unwrap()
                }
                _ => {
                    let ack = serde_json::json!({"jsonrpc": "2.0",
                        "method": "notifications/subscriptions/acknowledged",
                        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                                   "notifications": {"toolsListChanged": true}}});
                    let mut frames = vec![format!("event: message\ndata: {ack}\n\n").into_bytes()];
                    frames.extend(tail);
                    let frames = futures::stream::iter(
                        frames
                            .into_iter()
                            .map(|f| Ok::<_, std::io::Error>(bytes::Bytes::from(f))),
                    )
                    .chain(futures::stream::pending());
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(frames))
                        .unwrap()
                }
            }
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/mcp", axum::routing::post(handler));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

const LIST_CHANGED_EVENT: &[u8] = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_cost_nothing_but_one_event_over_the_cap_ends_the_watch() {
    // 50 KB of keep-alive comments against a 4 KiB cap, then a change: still watching.
    let mut tail = vec![b": ping\r\n\r\n".to_vec(); 5_000];
    tail.push(LIST_CHANGED_EVENT.to_vec());
    let (url, server) = scripted_listen_server(tail).await;
    let mut conn = connection(&url);
    conn.limits.max_response_bytes = 4096;
    let mut watch = watch_tool_changes(&conn).await.expect("a scripted watch");
    assert_eq!(next_event(&mut watch).await, WatchEvent::ToolsChanged);
    assert_quiet(&mut watch).await;
    server.abort();

    // One event of 100 KB, sent in pieces: the watch ends instead of buffering it.
    let mut tail = vec![b"event: message\ndata: ".to_vec()];
    tail.extend(vec![vec![b'x'; 1000]; 100]);
    let (url, server) = scripted_listen_server(tail).await;
    let mut conn = connection(&url);
    conn.limits.max_response_bytes = 4096;
    let mut watch = watch_tool_changes(&conn).await.expect("a scripted watch");
    match next_event(&mut watch).await {
        WatchEvent::Ended(reason) => assert!(reason.contains("4096 bytes"), "{reason}"),
        other => panic!("expected Ended, got {other:?}"),
    }
    server.abort();
}
