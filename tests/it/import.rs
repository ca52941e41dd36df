//! `mcp-operator import` as a person runs it: a Claude Desktop file, a VS Code mcp.json, a
//! Claude Code .mcp.json or a registry server.json in (tests/fixtures/import/), manifests out,
//! notes on stderr, the file's literal tokens nowhere in either, and every McpServer one the CRD
//! takes.

use std::process::Command;

use serde_json::Value;

const TOKEN: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
const BEARER: &str = "sk-ant-api03-Zk2v9QwErTy";

#[test]
fn a_claude_desktop_file_becomes_manifests_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("claude_desktop_config.json");
    std::fs::write(
        &file,
        serde_json::json!({
            "mcpServers": {
                "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                           "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": TOKEN}},
                "remote": {"url": "https://mcp.example.com/mcp", "type": "http",
                           "headers": {"Authorization": format!("Bearer {BEARER}")}},
                "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"],
                           "cwd": "/tmp"},
            },
            "globalShortcut": "Ctrl+Space",
        })
        .to_string(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .args(["import", "--namespace", "tools", "--prefix", "desk-"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    for secret in [TOKEN, BEARER] {
        assert!(!stdout.contains(secret) && !stderr.contains(secret));
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let kinds: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = [
        ("McpServer", "desk-github"),
        ("Secret", "desk-github-credentials"),
        ("McpServer", "desk-memory"),
        ("McpServer", "desk-remote"),
        ("Secret", "desk-remote-credentials"),
    ];
    assert_eq!(
        kinds,
        expect.map(|(k, n)| (k.to_string(), n.to_string())).to_vec()
    );
    assert!(docs.iter().all(|d| d["metadata"]["namespace"] == "tools"));
    assert!(
        stderr.contains(r#"top-level field "globalShortcut" is not imported"#),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"field "cwd" is not imported"#),
        "{stderr}"
    );
    assert!(
        stderr.contains("Secret desk-remote-credentials needs values for: token"),
        "{stderr}"
    );
}

#[test]
fn a_file_that_is_not_a_config_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.json");
    std::fs::write(&file, "{\"token\": \"ghp_abcdef1234567890abcdef\",").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .arg("import")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("the file is not JSON"), "{stderr}");
    assert!(!stderr.contains("ghp_abcdef"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// Every McpServer `import` prints is one the CRD takes: it reads as the CRD type, names only
/// fields the CRD's schema knows (the apiserver would prune the rest), and a stdio one has a
/// spec.stdio the controller can run (an image, a command, each env entry a value or a Secret
/// key, a name that fits its `<name>-mcp` Service). Returns how many are stdio servers.
fn assert_the_crd_takes(docs: &[Value]) -> usize {
    fn unknown_fields(node: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (name, child) in fields {
                    let schema = if node["additionalProperties"].is_object() {
                        &node["additionalProperties"]
                    } else {
                        &node["properties"][name]
                    };
                    if schema.is_null() {
                        out.push(format!("{path}.{name}"));
                    } else {
                        unknown_fields(schema, child, &format!("{path}.{name}"), out);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    unknown_fields(&node["items"], item, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let crd = serde_json::to_value(
        mcp_operator::api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "McpServer")
            .unwrap(),
    )
    .unwrap();
    let spec_schema =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut stdio_servers = 0;
    for doc in docs.iter().filter(|d| d["kind"] == "McpServer") {
        let server: mcp_operator::api::McpServer =
            serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{e}: {doc}"));
        let mut unknown = vec![];
        unknown_fields(spec_schema, &doc["spec"], "spec", &mut unknown);
        assert!(unknown.is_empty(), "{unknown:?} in {doc}");
        assert_ne!(
            server.spec.url.is_some(),
            server.spec.stdio.is_some(),
            "{doc}"
        );
        if let Some(stdio) = &server.spec.stdio {
            stdio_servers += 1;
            assert!(
                !stdio.command.is_empty() && !stdio.image.is_empty(),
                "{doc}"
            );
            for env in &stdio.env {
                assert_ne!(env.value.is_some(), env.value_from.is_some(), "{env:?}");
            }
            let name = server.metadata.name.as_deref().unwrap();
            assert!(
                name.len() <= 59 && name.starts_with(|c: char| c.is_ascii_lowercase()),
                "{name}"
            );
        }
    }
    // Each Secret key an McpServer names is one a printed Secret has.
    for doc in docs.iter().filter(|d| d["kind"] == "McpServer") {
        let text = doc.to_string();
        for (at, _) in text.match_indices("\"secretKeyRef\"") {
            let tail = &text[at..];
            let field = |f: &str| {
                let start = tail.find(&format!("\"{f}\":\"")).unwrap() + f.len() + 4;
                tail[start..start + tail[start..].find('"').unwrap()].to_string()
            };
            let (secret, key) = (field("name"), field("key"));
            assert!(
                docs.iter().any(|d| d["kind"] == "Secret"
                    && d["metadata"]["name"] == secret.as_str()
                    && d["stringData"].get(&key).is_some()),
                "{secret}/{key} of {doc} is printed by no Secret"
            );
        }
    }
    stdio_servers
}

#[test]
fn printed_servers_are_mcp_servers_the_crd_takes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    std::fs::write(
        &file,
        serde_json::json!({"mcpServers": {
            "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                       "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": TOKEN, "LOG_LEVEL": "debug"}},
            "brave": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-brave-search", format!("--api-key={TOKEN}")]},
            "time": {"command": "uvx", "args": ["mcp-server-time"]},
            "1password": {"command": "/usr/local/bin/op-mcp"},
            "remote": {"url": "https://mcp.example.com/mcp", "headers": {"X-Api-Key": TOKEN}},
        }})
        .to_string(),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .arg("import")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let stdio_servers = assert_the_crd_takes(&docs);
    assert_eq!(stdio_servers, 4);
}

fn import(file: &std::path::Path) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .args(["import", "--namespace", "tools"])
        .arg(file)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{stderr}");
    (stdout, stderr)
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
}

fn names(docs: &[Value], kind: &str) -> Vec<String> {
    docs.iter()
        .filter(|d| d["kind"] == kind)
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// The values in the fixtures that are, or may be, credentials: inline tokens, defaults of
/// `${VAR:-…}` and of inputs.
const FIXTURE_SECRETS: [&str; 6] = [
    "a8f5f167f44f4964e6c998dee827110c",
    "BSAkq9zXw2LpT7mN4vR8",
    "analytics",
    "s3cretpw",
    "1201234",
    "demo-key-0000000000",
];

/// Imports a fixture file, asserting first that none of its credentials is printed, and
/// returns the manifests, standard output and standard error.
fn import_fixture(name: &str) -> (Vec<Value>, String, String) {
    let (stdout, stderr) = import(&fixture(name));
    for secret in FIXTURE_SECRETS {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{name} printed {secret}"
        );
    }
    let docs = serde_saphyr::from_multiple(&stdout).unwrap();
    (docs, stdout, stderr)
}

#[test]
fn a_vscode_mcp_json_becomes_manifests_with_its_inputs_as_secret_keys() {
    let (docs, stdout, stderr) = import_fixture("vscode-mcp.json");
    assert_eq!(
        names(&docs, "McpServer"),
        [
            "fetch",
            "github",
            "legacy-sse",
            "memory",
            "perplexity",
            "postgres"
        ]
    );
    assert_eq!(assert_the_crd_takes(&docs), 4);
    assert!(
        stdout.contains(r#"token: the bearer token of the Authorization header (VS Code input "github_pat": "GitHub Personal Access Token"), without "Bearer ""#),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "Secret postgres-credentials needs values for: PGPASSWORD, SENTRY_DSN, mcp_import_arg_3"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("envFile ${workspaceFolder}/.env is not read"),
        "{stderr}"
    );
}

#[test]
fn a_claude_code_mcp_json_expands_what_it_may_and_keeps_the_rest_in_secrets() {
    let (docs, stdout, stderr) = import_fixture("claude-code.mcp.json");
    assert_eq!(
        names(&docs, "McpServer"),
        ["airtable", "api-server", "asana", "db", "sentry"]
    );
    assert_eq!(assert_the_crd_takes(&docs), 2);
    assert!(
        stdout.contains("url: https://api.example.com/mcp"),
        "{stdout}"
    );
    assert!(
        stderr.contains(r#"server "internal" (McpServer internal): the url takes $INTERNAL_HOST from outside the file"#),
        "{stderr}"
    );
}

#[test]
fn a_registry_server_json_becomes_one_pinned_server_per_way_to_run_it() {
    let (docs, stdout, stderr) = import_fixture("registry-server.json");
    assert_eq!(
        names(&docs, "McpServer"),
        [
            "weather-npm",
            "weather-pypi",
            "weather-oci",
            "weather-remote",
            "weather-remote-2"
        ]
    );
    assert_eq!(assert_the_crd_takes(&docs), 3);
    assert!(
        stdout.contains("- \"@example/weather-mcp@1.4.2\""),
        "{stdout}"
    );
    assert!(stdout.contains("- weather-mcp==1.4.2"), "{stdout}");
    assert!(
        stdout.contains("image: example/weather-mcp:1.4.2"),
        "{stdout}"
    );
    assert!(!stderr.contains("newest version"), "{stderr}");
    assert!(
        stderr.contains("server.json offers 5 ways to run"),
        "{stderr}"
    );
}

#[test]
fn a_file_of_no_known_shape_is_refused_naming_the_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("settings.json");
    std::fs::write(
        &file,
        r#"{"editor.fontSize": 14, "token": "ghp_abcdef1234567890abcdef"}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
        .arg("import")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("\"mcpServers\"")
            && stderr.contains("VS Code's mcp.json")
            && stderr.contains("server.json"),
        "{stderr}"
    );
    assert!(!stderr.contains("ghp_abcdef"), "{stderr}");
    assert!(out.stdout.is_empty());
}
