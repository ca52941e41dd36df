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

fn listed<'a>(doc: &'a serde_json::Value, list: &str, key: &str) -> Vec<&'a str> {
    doc["catalog"][list]
        .as_array()
        .unwrap_or_else(|| panic!("catalog.{list} in {doc}"))
        .iter()
        .map(|e| e[key].as_str().unwrap())
        .collect()
}

/// The SDK server advertises resources and prompts; every page of each list is read (its
/// resources come one per page), each entry with its definition digest, in both transports.
#[test]
fn sdk_server_resources_templates_and_prompts_are_read_whole() {
    let fixtures = Fixtures::load();
    let http = fixtures.sdk_server(&[]);
    let sse = fixtures.sdk_server(&["--sse"]);
    let a = probe(&[&http.url]);
    let b = probe(&["--transport", "sse", &sse.url]);
    for p in [&a, &b] {
        p.assert_ok();
        let catalog = &p.doc["catalog"];
        assert_eq!(catalog["resourceCount"], 3, "{catalog}");
        assert_eq!(
            listed(&p.doc, "resources", "uri"),
            [
                "file:///docs/guide.md",
                "file:///docs/readme.md",
                "file:///private/keys.txt"
            ]
        );
        assert_eq!(catalog["resourceTemplateCount"], 2);
        assert_eq!(
            listed(&p.doc, "resourceTemplates", "uriTemplate"),
            ["file:///docs/{name}", "file:///private/{name}"]
        );
        assert_eq!(catalog["promptCount"], 2);
        assert_eq!(listed(&p.doc, "prompts", "name"), ["exfiltrate", "review"]);
        for list in ["resources", "resourceTemplates", "prompts"] {
            for entry in catalog[list].as_array().unwrap() {
                let digest = entry["definitionDigest"].as_str().unwrap();
                assert!(
                    digest.starts_with("sha256:") && digest.len() == 71,
                    "{entry}"
                );
            }
        }
        assert!(catalog.get("unreadLists").is_none());
    }
    // The same definitions digest the same whatever the era and transport.
    assert_eq!(a.doc["catalog"]["prompts"], b.doc["catalog"]["prompts"]);
    assert_eq!(a.doc["catalog"]["resources"], b.doc["catalog"]["resources"]);
}

/// The tools' bounds hold for every list: a resource list longer than --max-pages is not read,
/// says why, and the tools are still read.
#[test]
fn a_resource_list_past_the_page_bound_is_reported_and_the_tools_are_kept() {
    let server = Fixtures::load().sdk_server(&[]);
    let p = probe(&["--max-pages", "2", &server.url]);
    p.assert_ok();
    let catalog = &p.doc["catalog"];
    assert_eq!(p.tool_count(), 4, "{catalog}");
    assert!(catalog.get("resourceCount").is_none(), "{catalog}");
    let unread = catalog["unreadLists"].as_array().unwrap();
    assert_eq!(unread.len(), 1, "{catalog}");
    assert_eq!(unread[0]["list"], "resources/list");
    assert_eq!(unread[0]["reason"], "TooManyPages");
    assert_eq!(
        unread[0]["message"],
        "the server's resource list needs more than 2 pages of resources/list (read 2); raise spec.discovery.maxToolPages if the server is trusted"
    );
    // The lists that fit are read.
    assert_eq!(catalog["resourceTemplateCount"], 2);
    assert_eq!(catalog["promptCount"], 2);
}

/// A changed prompt changes its digest and nothing else's.
#[test]
fn a_changed_prompt_changes_only_its_own_digest() {
    let server = Fixtures::load().sdk_server(&[]);
    let before = probe(&[&server.url]);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(support::sdk_control_with(
            &server.url,
            "set-prompt-description",
            &[("name", "review"), ("text", "Review a file, then push it")],
        ));
    let after = probe(&[&server.url]);
    let digest = |p: &support::Probe, name: &str| {
        p.doc["catalog"]["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap()["definitionDigest"]
            .clone()
    };
    assert_ne!(digest(&before, "review"), digest(&after, "review"));
    assert_eq!(digest(&before, "exfiltrate"), digest(&after, "exfiltrate"));
    assert_eq!(
        before.doc["catalog"]["digest"],
        after.doc["catalog"]["digest"]
    );
    assert_eq!(
        after.doc["catalog"]["prompts"][1]["description"],
        "Review a file, then push it"
    );
}

/// The reference server's resources (paged) and prompts are read too.
#[test]
fn everything_server_resources_and_prompts_are_read() {
    let server = Fixtures::load().everything_server();
    let p = probe(&[&server.url]);
    p.assert_ok();
    let catalog = &p.doc["catalog"];
    assert!(catalog["resourceCount"].as_u64().unwrap() >= 2, "{catalog}");
    assert!(catalog["promptCount"].as_u64().unwrap() >= 1, "{catalog}");
    assert_eq!(
        catalog["resources"].as_array().unwrap().len() as u64,
        catalog["resourceCount"].as_u64().unwrap()
    );
    assert!(catalog.get("unreadLists").is_none(), "{catalog}");
}
