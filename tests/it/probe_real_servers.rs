//! `mcp-operator probe` against real MCP servers this project did not write: the official Python
//! SDK (both protocol eras, paging with its own cursor, bearer auth, the old SSE transport) and
//! the reference "everything" server.

use crate::support;

use support::{Fixtures, probe};

fn access_of<'a>(doc: &'a serde_json::Value, tool: &str) -> &'a str {
    doc["catalog"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} is in the catalogue"))["access"]
        .as_str()
        .unwrap()
}

#[test]
fn sdk_server_paged_catalogue_is_read_whole_over_the_modern_era() {
    let server = Fixtures::load().sdk_server(&["--tools", "40", "--page-size", "7"]);
    let p = probe(&[&server.url]);
    p.assert_ok();
    assert_eq!(p.doc["era"], "modern");
    assert_eq!(p.doc["protocolVersion"], "2026-07-28");
    assert_eq!(p.doc["serverInfo"]["name"], "mcp-operator-sdk-fixture");
    // 4 named tools + 40 generated, 7 per page.
    assert_eq!(p.tool_count(), 44);
    assert_eq!(p.doc["catalog"]["pagesRead"], 7);
    let names = p.tool_names();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools are sorted by name");
    assert!(names.contains(&"tool_0039".to_string()));
    // Classification from annotations, with MCP's defaults for the unannotated tool.
    assert_eq!(access_of(&p.doc, "read_file"), "read");
    assert_eq!(access_of(&p.doc, "write_file"), "write");
    assert_eq!(access_of(&p.doc, "delete_file"), "destructive");
    let put = p.doc["catalog"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "put_object")
        .unwrap();
    assert_eq!(put["idempotent"], true);
    assert!(
        put["definitionDigest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(
        p.doc["ttlMs"].as_u64().is_some(),
        "modern lists carry ttlMs"
    );
}

#[test]
fn the_same_tools_have_the_same_digest_in_both_transports() {
    let fixtures = Fixtures::load();
    let http = fixtures.sdk_server(&["--tools", "5"]);
    let sse = fixtures.sdk_server(&["--tools", "5", "--sse"]);
    let a = probe(&[&http.url]);
    let b = probe(&["--transport", "sse", &sse.url]);
    a.assert_ok();
    b.assert_ok();
    assert_eq!(b.doc["era"], "legacy");
    assert_eq!(a.tool_count(), 9);
    assert_eq!(a.doc["catalog"]["digest"], b.doc["catalog"]["digest"]);
}

#[test]
fn sdk_server_demanding_a_token_answers_unauthorized_without_it() {
    let server = Fixtures::load().sdk_server(&["--bearer", "tok-3f9a-very-secret"]);
    let p = probe(&[&server.url]);
    p.assert_fails_with("Unauthorized");
    assert!(p.message().contains("401"));

    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let p = probe(&["--bearer-token-file", wrong.to_str().unwrap(), &server.url]);
    p.assert_fails_with("Unauthorized");
    assert!(!p.doc.to_string().contains("not-the-token"));

    let right = dir.path().join("right");
    std::fs::write(&right, "tok-3f9a-very-secret\n").unwrap();
    let p = probe(&["--bearer-token-file", right.to_str().unwrap(), &server.url]);
    p.assert_ok();
    assert_eq!(p.tool_count(), 4);
    assert!(!p.doc.to_string().contains("tok-3f9a-very-secret"));
}

#[test]
fn everything_server_is_read_over_the_legacy_era() {
    let server = Fixtures::load().everything_server();
    let p = probe(&[&server.url]);
    p.assert_ok();
    assert_eq!(p.doc["era"], "legacy");
    assert_eq!(p.doc["serverInfo"]["name"], "mcp-servers/everything");
    let names = p.tool_names();
    for tool in ["echo", "get-sum", "get-tiny-image"] {
        assert!(names.contains(&tool.to_string()), "{tool} in {names:?}");
    }
    assert_eq!(p.tool_count() as usize, names.len());
    assert!(p.tool_count() >= 10);
}

#[test]
fn loopback_is_refused_without_the_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .args(["probe", "http://127.0.0.1:9/mcp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["reason"], "BlockedEndpoint");
}
