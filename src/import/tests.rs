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
        plan(&json!({"settings": {}}), "d", "").unwrap_err(),
        ImportError::UnknownShape
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

fn docs_of(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(text).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} not in {docs:?}"))
}

/// VS Code's documented mcp.json: `servers` with `type`, `inputs` asked of the person.
fn vscode() -> Value {
    json!({
        "inputs": [
            {"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true},
            {"type": "promptString", "id": "project", "description": "Project name", "default": "acme-internal"},
        ],
        "servers": {
            "perplexity": {"type": "stdio", "command": "npx", "args": ["-y", "server-perplexity-ask@0.1.3"],
                           "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}", "LITERAL_TOKEN": GITHUB_TOKEN}},
            "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/",
                       "headers": {"Authorization": "Bearer ${input:perplexity-key}", "X-Project": "${input:project}"}},
            "files": {"type": "stdio", "command": "npx",
                      "args": ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "${workspaceFolder}"],
                      "env": {"HOME_TOKEN": "${env:MY_TOKEN}"}, "envFile": "${workspaceFolder}/.env"},
            "events": {"type": "sse", "url": "https://mcp.example.com/sse", "headers": {"X-Api-Key": API_KEY}},
        }
    })
}

#[test]
fn vscode_inputs_become_secret_keys_named_by_their_description() {
    let plan = plan(&vscode(), "tools", "").unwrap();
    let text = render(&plan);
    let notes = plan.notes.join("\n");
    for secret in [GITHUB_TOKEN, API_KEY, "acme-internal"] {
        assert!(!text.contains(secret), "{secret} in\n{text}");
        assert!(!notes.contains(secret), "{secret} in\n{notes}");
    }
    let docs = docs_of(&text);
    let perplexity = find(&docs, "McpServer", "perplexity");
    assert_eq!(
        perplexity["spec"]["stdio"]["env"][1],
        json!({"name": "PERPLEXITY_API_KEY", "valueFrom": {"secretKeyRef":
            {"name": "perplexity-credentials", "key": "PERPLEXITY_API_KEY"}}})
    );
    assert!(
        text.contains(
            r#"#   PERPLEXITY_API_KEY: env PERPLEXITY_API_KEY (VS Code input "perplexity-key": "Perplexity API Key")"#
        ),
        "{text}"
    );
    let github = find(&docs, "McpServer", "github");
    assert_eq!(github["spec"]["url"], "https://api.githubcopilot.com/mcp/");
    assert_eq!(
        github["spec"]["credentials"]["bearerToken"]["secretKeyRef"]["key"],
        "token"
    );
    assert!(
        text.contains(r#"the X-Project header (VS Code input "project": "Project name"; not a password, so it may also be a plain value; its default was not copied)"#),
        "{text}"
    );
    assert_eq!(
        find(&docs, "McpServer", "events")["spec"]["transport"],
        "sse"
    );
    // `${env:VAR}` is a Secret key; `${workspaceFolder}` is kept and named.
    let files = find(&docs, "McpServer", "files");
    assert_eq!(files["spec"]["stdio"]["args"][2], "${workspaceFolder}");
    assert_eq!(
        files["spec"]["stdio"]["env"][0]["valueFrom"]["secretKeyRef"]["key"],
        "HOME_TOKEN"
    );
    assert!(
        text.contains("HOME_TOKEN: env HOME_TOKEN (from $MY_TOKEN)"),
        "{text}"
    );
    assert!(
        notes.contains("${workspaceFolder} is the editor's variable")
            && notes.contains("envFile ${workspaceFolder}/.env is not read"),
        "{notes}"
    );
    assert!(text.contains("# From servers.files"), "{text}");
}

#[test]
fn claude_code_expansions_keep_their_defaults_out_of_the_output() {
    let doc = json!({"mcpServers": {
        "api": {"type": "http", "url": "${API_BASE_URL:-https://api.example.com}/mcp",
                "headers": {"Authorization": "Bearer ${API_KEY:-sk-ant-default-999}", "X-Team": "${TEAM:-platform-secret-team}"}},
        "db": {"type": "stdio", "command": "npx", "args": ["-y", "@bytebase/dbhub@0.11.5", "--dsn", "${DSN:-postgres://u:hunter2@db/app}"],
               "env": {"MODE": "${MODE:-readonly}"}},
        "internal": {"type": "http", "url": "https://${HOST}/mcp"},
        "with-password": {"type": "http", "url": "${BASE:-https://u:hunter2@mcp.example.com}/mcp"},
    }});
    let plan = plan(&doc, "d", "").unwrap();
    let text = render(&plan);
    let notes = plan.notes.join("\n");
    for secret in [
        "sk-ant-default-999",
        "platform-secret-team",
        "hunter2",
        "readonly",
    ] {
        assert!(
            !text.contains(secret) && !notes.contains(secret),
            "{secret}:\n{text}\n{notes}"
        );
    }
    let docs = docs_of(&text);
    assert_eq!(
        find(&docs, "McpServer", "api")["spec"]["url"],
        "https://api.example.com/mcp"
    );
    assert_eq!(
        find(&docs, "McpServer", "with-password")["spec"]["url"],
        "https://mcp.example.com/mcp"
    );
    assert!(
        text.contains("the bearer token of the Authorization header (from $API_KEY; the file's default was not copied)"),
        "{text}"
    );
    assert_eq!(
        find(&docs, "McpServer", "db")["spec"]["stdio"]["args"][3],
        "$(MCP_IMPORT_ARG_4)"
    );
    assert!(docs.iter().all(|d| d["metadata"]["name"] != "internal"));
    assert!(
        notes.contains(
            r#"server "internal" (McpServer internal): the url takes $HOST from outside the file"#
        ),
        "{notes}"
    );
    assert!(
        notes.contains(
            "written out with the file's defaults (check it: https://api.example.com/mcp)"
        ),
        "{notes}"
    );
}

/// A registry server.json as the 2025-09-29 schema describes it.
fn registry() -> Value {
    json!({
        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json",
        "name": "io.github.example/weather",
        "description": "Weather",
        "version": "1.4.2",
        "packages": [
            {"registryType": "npm", "identifier": "@example/weather-mcp", "version": "1.4.2",
             "transport": {"type": "stdio"},
             "packageArguments": [
                {"type": "positional", "valueHint": "region", "isRequired": true, "description": "Region"},
                {"type": "named", "name": "--api-key", "isSecret": true, "value": API_KEY},
                {"type": "named", "name": "--verbose"},
             ],
             "environmentVariables": [
                {"name": "WEATHER_KEY", "isRequired": true, "isSecret": true, "default": GITHUB_TOKEN, "description": "The API key"},
                {"name": "UNITS", "default": "metric"},
                {"name": "PROXY", "description": "optional proxy"},
             ]},
            {"registryType": "pypi", "identifier": "weather-mcp", "version": "1.4.2", "transport": {"type": "stdio"}},
            {"registryType": "oci", "identifier": "ghcr.io/example/weather", "version": "1.4.2", "transport": {"type": "stdio"}},
            {"registryType": "mcpb", "identifier": "https://example.com/w.mcpb", "version": "1.4.2", "transport": {"type": "stdio"}},
            {"registryType": "npm", "identifier": "weather-http", "version": "1.0.0", "transport": {"type": "streamable-http", "url": "http://localhost:8080/mcp"}},
        ],
        "remotes": [
            {"type": "streamable-http", "url": "https://weather.example.com/mcp",
             "headers": [{"name": "Authorization", "value": "Bearer {token}", "variables": {"token": {"isSecret": true, "description": "Hosted API token"}}},
                         {"name": "X-Key", "isSecret": true, "value": BEARER}]},
            {"type": "sse", "url": "https://{tenant}.weather.example.com/sse"},
        ],
    })
}

#[test]
fn a_registry_server_json_pins_its_packages_and_keeps_its_secrets() {
    let plan = plan(&registry(), "d", "").unwrap();
    let text = render(&plan);
    let notes = plan.notes.join("\n");
    for secret in [API_KEY, GITHUB_TOKEN, BEARER] {
        assert!(
            !text.contains(secret) && !notes.contains(secret),
            "{secret}:\n{text}\n{notes}"
        );
    }
    let docs = docs_of(&text);
    let npm = &find(&docs, "McpServer", "weather-npm")["spec"]["stdio"];
    assert_eq!(npm["command"], json!(["npx"]));
    assert_eq!(npm["image"], "node:22-slim");
    let args = npm["args"].as_array().unwrap();
    assert_eq!(
        args[..2],
        [json!("-y"), json!("@example/weather-mcp@1.4.2")]
    );
    assert_eq!(args[2], "$(MCP_IMPORT_ARG_3)", "{args:?}");
    assert_eq!(args[3], "--api-key");
    assert_eq!(args[4], "$(MCP_IMPORT_ARG_5)");
    assert_eq!(args[5], "--verbose");
    let env = npm["env"].as_array().unwrap();
    assert!(
        env.contains(&json!({"name": "UNITS", "value": "metric"})),
        "{env:?}"
    );
    assert!(env.iter().all(|e| e["name"] != "PROXY"));
    assert!(
        text.contains(r#"WEATHER_KEY: env WEATHER_KEY (server.json environment variable: "The API key" (required, secret, its default was not copied))"#),
        "{text}"
    );
    assert!(
        notes.contains("optional environment variable PROXY is not set"),
        "{notes}"
    );

    let pypi = &find(&docs, "McpServer", "weather-pypi")["spec"]["stdio"];
    assert_eq!(pypi["command"], json!(["uvx"]));
    assert_eq!(pypi["args"], json!(["weather-mcp==1.4.2"]));
    let oci = &find(&docs, "McpServer", "weather-oci")["spec"]["stdio"];
    assert_eq!(oci["image"], "ghcr.io/example/weather:1.4.2");
    assert!(
        notes.contains("set spec.stdio.command to the image's entrypoint"),
        "{notes}"
    );

    let remote = &find(&docs, "McpServer", "weather-remote")["spec"];
    assert_eq!(remote["url"], "https://weather.example.com/mcp");
    assert_eq!(
        remote["credentials"]["bearerToken"]["secretKeyRef"]["key"],
        "token"
    );
    assert_eq!(remote["credentials"]["headers"][0]["name"], "X-Key");
    assert!(text.contains(r#"Hosted API token"#), "{text}");

    assert!(
        notes.contains(r#"registryType "mcpb" is not one import can run"#),
        "{notes}"
    );
    assert!(
        notes.contains("the package serves streamable-http itself"),
        "{notes}"
    );
    assert!(notes.contains("the url is a template"), "{notes}");
    assert!(
        notes.contains("server.json offers 4 ways to run"),
        "{notes}"
    );
    // Nothing is left to fill in the npm server's Secret but its references.
    assert_eq!(
        find(&docs, "Secret", "weather-npm-credentials")["stringData"],
        json!({"WEATHER_KEY": "", "mcp_import_arg_3": "", "mcp_import_arg_5": ""})
    );
}

#[test]
fn one_way_to_run_takes_the_servers_own_name_and_the_api_wrapper_is_read() {
    let doc = json!({"server": {"name": "io.github.example/Time Server", "version": "2.0.0",
        "packages": [{"registryType": "pypi", "identifier": "mcp-server-time", "version": "2025.9.25", "transport": {"type": "stdio"}}]},
        "_meta": {}});
    let plan = plan(&doc, "d", "team-").unwrap();
    let docs = docs_of(&render(&plan));
    let time = find(&docs, "McpServer", "team-time-server");
    assert_eq!(
        time["spec"]["stdio"]["args"],
        json!(["mcp-server-time==2025.9.25"])
    );
    // Pinned: no pin note.
    assert!(
        !plan.notes.join("\n").contains("newest version"),
        "{:?}",
        plan.notes
    );
}

#[test]
fn an_unknown_shape_names_the_three_it_reads() {
    let message = plan(&json!([1, 2]), "d", "").unwrap_err().to_string();
    for shape in [
        "\"mcpServers\"",
        "Claude Code's .mcp.json",
        "\"servers\" object (VS Code's mcp.json)",
        "MCP Registry server.json",
    ] {
        assert!(message.contains(shape), "{message}");
    }
    assert_eq!(
        plan(&json!({"name": "x"}), "d", "").unwrap_err(),
        ImportError::UnknownShape
    );
    assert_eq!(
        plan(
            &json!({"servers": [{"server": registry()}], "metadata": {"count": 1}}),
            "d",
            ""
        )
        .unwrap_err(),
        ImportError::RegistryList
    );
}

proptest! {
    /// A token of a credential's shape (letters and a digit): declared or not, named or not,
    /// in every format.
    #[test]
    fn no_format_prints_an_inline_secret(token in "[A-Za-z]{8,20}[0-9][A-Za-z0-9]{12,20}") {
        for doc in [
            json!({"inputs": [{"type": "promptString", "id": "k", "description": "d", "password": true, "default": token.clone()}],
                   "servers": {"s": {"type": "stdio", "command": "npx", "args": ["p@1.0.0", token.clone()], "env": {"A": token.clone(), "B": "${input:k}"}},
                               "r": {"type": "http", "url": "https://x.example.com/mcp", "headers": {"X-A": token.clone()}}}}),
            json!({"mcpServers": {"s": {"type": "stdio", "command": "uvx", "args": [format!("${{V:-{token}}}")], "env": {"A": format!("${{A:-{token}}}")}}}}),
            json!({"name": "a/b", "packages": [{"registryType": "npm", "identifier": "p", "version": "1.0.0",
                    "environmentVariables": [{"name": "E", "isSecret": true, "value": token.clone()}, {"name": "F", "default": token.clone()}],
                    "packageArguments": [{"type": "positional", "value": token.clone()}]}],
                   "remotes": [{"type": "sse", "url": "https://x.example.com/sse", "headers": [{"name": "H", "value": token.clone()}]},
                               {"type": "streamable-http", "url": format!("https://u:{token}@x.example.com/mcp?api_key={token}")},
                               {"type": "streamable-http", "url": format!("https://x.example.com/{{tenant}}/mcp?api_key={token}")}]}),
        ] {
            let plan = plan(&doc, "ns", "").unwrap();
            let text = render(&plan);
            prop_assert!(!text.contains(&token), "{}", text);
            prop_assert!(!plan.notes.join("\n").contains(&token));
        }
    }
}

#[test]
fn a_vscode_settings_json_is_read_from_its_mcp_object() {
    let doc = json!({"editor.fontSize": 14, "mcp": {
        "inputs": [{"type": "promptString", "id": "key", "description": "Brave key", "password": true}],
        "servers": {"brave": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-brave-search@0.6.2"],
                              "env": {"BRAVE_API_KEY": "${input:key}"}}}}});
    let plan = plan(&doc, "d", "").unwrap();
    let text = render(&plan);
    assert!(
        text.contains(r#"BRAVE_API_KEY: env BRAVE_API_KEY (VS Code input "key": "Brave key")"#),
        "{text}"
    );
    // The editor's own settings are not the import's business.
    assert!(
        !plan.notes.join("\n").contains("fontSize"),
        "{:?}",
        plan.notes
    );
}

#[test]
fn an_input_used_twice_in_one_server_is_one_key_to_fill() {
    let doc = json!({
        "inputs": [{"type": "promptString", "id": "pat", "description": "GitHub token", "password": true}],
        "servers": {"gh": {"type": "stdio", "command": "npx", "args": ["-y", "gh-mcp@1.0.0", "--token=${input:pat}"],
                           "env": {"GITHUB_TOKEN": "${input:pat}", "GH_TOKEN": "${input:pat}", "OTHER": "${input:other}"}}}});
    let plan = plan(&doc, "d", "").unwrap();
    let text = render(&plan);
    let docs = docs_of(&text);
    assert_eq!(
        find(&docs, "Secret", "gh-credentials")["stringData"],
        json!({"mcp_import_arg_3": "", "OTHER": ""}),
        "{text}"
    );
    let env = find(&docs, "McpServer", "gh")["spec"]["stdio"]["env"].clone();
    let keys: Vec<&Value> = env
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["valueFrom"]["secretKeyRef"]["key"])
        .collect();
    assert_eq!(
        keys,
        [
            &json!("mcp_import_arg_3"),
            &json!("mcp_import_arg_3"),
            &json!("mcp_import_arg_3"),
            &json!("OTHER")
        ],
        "{text}"
    );
    assert!(
        text.contains(
            r#"mcp_import_arg_3: argument 3 of the command (VS Code input "pat": "GitHub token"); also env GH_TOKEN; also env GITHUB_TOKEN"#
        ),
        "{text}"
    );
}
