use proptest::prelude::*;
use serde_json::json;

use super::*;

const GITHUB_TOKEN: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const API_KEY: &str = "BSAkq9zXw2LpT7mN4vR8";
const BEARER: &str = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.abc123";

/// Claude Desktop's documented shapes, Cursor's remote shape, and a VS Code-style `type`.
fn real_world() -> Value {
    json!({"mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
        },
        "github": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": GITHUB_TOKEN},
        },
        "brave-search": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-brave-search", format!("--api-key={API_KEY}")],
            "env": {"BRAVE_API_KEY": "${BRAVE_API_KEY}", "LOG_LEVEL": "info"},
        },
        "Linear (remote)": {
            "url": "https://mcp.linear.app/sse",
            "type": "sse",
            "headers": {"Authorization": format!("Bearer {BEARER}"), "X-Api-Key": "$LINEAR_KEY"},
        },
        "notion": {
            "url": format!("https://mcp.notion.com/mcp?api_key={API_KEY}&region=eu"),
            "transport": "streamable-http",
            "disabled": false,
            "autoApprove": ["search"],
        },
        "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=Europe/Paris"]},
    }})
}

fn planned() -> (Plan, String) {
    let plan = plan(&real_world(), "tools", "team-").unwrap();
    let text = render(&plan);
    (plan, text)
}

#[test]
fn literal_tokens_appear_nowhere_in_the_output() {
    let (plan, text) = planned();
    let notes = plan.notes.join("\n");
    for token in [GITHUB_TOKEN, API_KEY, BEARER] {
        assert!(!text.contains(token), "{token} in\n{text}");
        assert!(!notes.contains(token), "{token} in notes\n{notes}");
    }
}

#[test]
fn manifests_parse_and_say_what_to_fill_in() {
    let (_, text) = planned();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} not in\n{text}"))
            .clone()
    };
    let github = find("McpServer", "team-github");
    assert_eq!(github["metadata"]["namespace"], "tools");
    assert_eq!(
        github["spec"]["stdio"]["env"][0],
        json!({"name": "GITHUB_PERSONAL_ACCESS_TOKEN", "valueFrom": {"secretKeyRef":
            {"name": "team-github-credentials", "key": "GITHUB_PERSONAL_ACCESS_TOKEN"}}})
    );
    assert_eq!(github["spec"]["stdio"]["image"], "node:22-slim");
    assert_eq!(
        find("Secret", "team-github-credentials")["stringData"],
        json!({"GITHUB_PERSONAL_ACCESS_TOKEN": ""})
    );
    assert!(
        text.contains(
            "#   GITHUB_PERSONAL_ACCESS_TOKEN: env GITHUB_PERSONAL_ACCESS_TOKEN (the file's value)"
        ),
        "{text}"
    );

    let brave = find("McpServer", "team-brave-search");
    let stdio = &brave["spec"]["stdio"];
    assert_eq!(stdio["args"][2], "--api-key=$(MCP_IMPORT_ARG_3)");
    assert!(
        stdio["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "LOG_LEVEL", "value": "info"}))
    );
    assert!(
        text.contains("BRAVE_API_KEY: env BRAVE_API_KEY (from $BRAVE_API_KEY)"),
        "{text}"
    );

    let linear = find("McpServer", "team-linear-remote");
    assert_eq!(linear["spec"]["url"], "https://mcp.linear.app/sse");
    assert_eq!(linear["spec"]["transport"], "sse");
    assert_eq!(
        linear["spec"]["credentials"]["bearerToken"]["secretKeyRef"],
        json!({"name": "team-linear-remote-credentials", "key": "token"})
    );
    assert_eq!(
        linear["spec"]["credentials"]["headers"][0]["name"],
        "X-Api-Key"
    );

    let notion = find("McpServer", "team-notion");
    assert_eq!(
        notion["spec"]["url"],
        "https://mcp.notion.com/mcp?region=eu"
    );

    let files = find("McpServer", "team-filesystem");
    assert_eq!(files["spec"]["stdio"]["args"][2], "/Users/me/Desktop");
    assert!(
        docs.iter()
            .all(|d| d["metadata"]["name"] != "team-filesystem-credentials")
    );
    assert_eq!(
        find("McpServer", "team-time")["spec"]["stdio"]["command"],
        json!(["uvx"])
    );
}

#[test]
fn unknown_fields_are_reported_not_dropped_silently() {
    let (plan, _) = planned();
    let notes = plan.notes.join("\n");
    assert!(
        notes.contains(
            r#"server "notion" (McpServer team-notion): field "autoApprove" is not imported"#
        ),
        "{notes}"
    );
    assert!(
        notes.contains(r#"field "disabled" is not imported"#),
        "{notes}"
    );
    assert!(
        notes.contains("api_key look like credentials; removed from the URL"),
        "{notes}"
    );
}

#[test]
fn a_document_without_servers_is_refused() {
    assert_eq!(
        plan(&json!({"servers": {}}), "d", "").unwrap_err(),
        ImportError::NoServers
    );
}

#[test]
fn names_are_dns_labels_and_clashes_get_numbers() {
    assert_eq!(dns_label("Linear (remote)", 63), "linear-remote");
    assert_eq!(dns_label("---", 63), "server");
    assert_eq!(dns_label(&"a".repeat(100), 63).len(), 63);
    let names = names_for(
        &["My Server".into(), "my-server".into(), "my_server".into()],
        "",
    );
    let mut got: Vec<&String> = names.values().collect();
    got.sort();
    assert_eq!(got, ["my-server", "my-server-2", "my-server-3"]);
    // Sorted keys decide who gets the plain name: the same file gives the same names.
    assert_eq!(names["My Server"], "my-server");
}

proptest! {
    #[test]
    fn every_name_is_a_unique_dns_label(keys in proptest::collection::vec(".{0,80}", 1..12), prefix in "[a-z-]{0,10}") {
        let names = names_for(&keys, &prefix);
        let unique: BTreeSet<&String> = names.values().collect();
        prop_assert_eq!(unique.len(), names.len());
        for name in names.values() {
            prop_assert!(!name.is_empty() && name.len() <= 59);
            prop_assert!(name.starts_with(|c: char| c.is_ascii_lowercase()), "{name}");
            prop_assert!(name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
            prop_assert!(!name.starts_with('-') && !name.ends_with('-'));
        }
    }

    #[test]
    fn a_credential_never_reaches_the_output(
        token in "[A-Za-z0-9]{24,40}",
        header in "[A-Z][a-z]{2,8}(-[A-Z][a-z]{2,8})?",
        var in "[A-Z]{1,6}_(TOKEN|KEY|SECRET|PASSWORD)",
    ) {
        let doc = json!({"mcpServers": {
            "remote": {"url": "https://x.example.com/mcp", "headers": {header.clone(): token.clone(), "Authorization": format!("Bearer {token}")}},
            "local": {"command": "npx", "args": ["srv", token.clone(), format!("--flag={token}")], "env": {var.clone(): token.clone()}},
        }});
        let plan = plan(&doc, "ns", "").unwrap();
        let text = render(&plan);
        prop_assert!(!text.contains(&token), "{}", text);
        prop_assert!(!plan.notes.join("\n").contains(&token));
    }
}

#[test]
fn package_runners_without_an_exact_version_are_named_with_how_to_pin_them() {
    let unpinned = |command: &str, args: &[&str]| {
        unpinned_package(
            command,
            &args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        unpinned("npx", &["-y", "@modelcontextprotocol/server-memory"]).as_deref(),
        Some("@modelcontextprotocol/server-memory")
    );
    assert_eq!(
        unpinned("npx", &["-y", "pkg@latest"]).as_deref(),
        Some("pkg@latest")
    );
    assert_eq!(unpinned("npx", &["pkg@^1.2"]).as_deref(), Some("pkg@^1.2"));
    assert_eq!(unpinned("npx", &["-y", "@scope/pkg@2026.8.31"]), None);
    assert_eq!(unpinned("/usr/bin/npx", &["pkg@1.2.3"]), None);
    assert_eq!(
        unpinned("uvx", &["mcp-server-time", "--local-timezone=Europe/Paris"]).as_deref(),
        Some("mcp-server-time")
    );
    assert_eq!(unpinned("uvx", &["mcp-server-time==2025.9.25"]), None);
    assert_eq!(
        unpinned(
            "uvx",
            &["--from", "mcp-server-git==1.0.0", "mcp-server-git"]
        ),
        None
    );
    assert_eq!(
        unpinned("pipx", &["run", "mcp-server-fetch"]).as_deref(),
        Some("mcp-server-fetch")
    );
    assert_eq!(unpinned("node", &["server.js"]), None);

    let (plan, _) = planned();
    let notes = plan.notes.join("\n");
    assert!(
        notes.contains("@modelcontextprotocol/server-github at its newest version")
            && notes.contains("@modelcontextprotocol/server-github@1.2.3"),
        "{notes}"
    );
    assert!(notes.contains("mcp-server-time==1.2.3"), "{notes}");
}
