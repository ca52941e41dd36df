//! `mcp-operator import` as a person runs it: a Claude Desktop file in, manifests out, notes on
//! stderr, and the file's literal tokens nowhere in either.

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
