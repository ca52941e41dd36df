//! The chart's PrometheusRule as Prometheus reads it: `promtool check rules` accepts it, and
//! `promtool test rules` shows the alerts firing once their condition has held for its `for`,
//! not before, with the labels and annotations the person on call reads. promtool is built from
//! the Prometheus Go module by `e2e/promtool.sh` (cached like helm).
//!
//! ```text
//! helm template --set metrics.prometheusRule.enabled=true ─► spec.groups ─► rules.yaml
//!                                                   promtool check rules ◄─┤
//!                       promtool test rules (series in, alerts expected) ◄─┘
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `bash e2e/SCRIPT ARGS` in the repository; panics with its output when it fails.
fn script(name: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join("e2e").join(name))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("bash e2e/{name}: {e}"));
    assert!(
        out.status.success(),
        "e2e/{name} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The chart's rule groups (PrometheusRule `spec`), written as a Prometheus rules file.
fn rules_file(dir: &Path) -> PathBuf {
    let text = script(
        "helm.sh",
        &[
            "template",
            "mcp-operator",
            "charts/mcp-operator",
            "--namespace",
            "mcp-operator",
            "--skip-crds",
            "--show-only",
            "templates/prometheusrule.yaml",
            "--set",
            "metrics.prometheusRule.enabled=true",
        ],
    );
    let rule: Value = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("the PrometheusRule is YAML: {e}\n{text}"));
    assert_eq!(rule["kind"], "PrometheusRule");
    let path = dir.join("rules.yaml");
    // JSON is YAML: what promtool reads.
    std::fs::write(&path, json!({"groups": rule["spec"]["groups"]}).to_string())
        .expect("writing the rules file");
    path
}

#[test]
fn promtool_accepts_the_charts_rules() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let rules = rules_file(dir.path());
    let out = script(
        "promtool.sh",
        &["check", "rules", rules.to_str().expect("a path")],
    );
    assert!(out.contains("SUCCESS: 5 rules found"), "{out}");
}

#[test]
fn the_alerts_fire_after_their_condition_holds_and_not_before() {
    let dir = tempfile::tempdir().expect("a temp dir");
    rules_file(dir.path());
    let not_ready = json!({
        "exp_labels": {"severity": "warning", "reason": "Unreachable"},
        "exp_annotations": {
            "summary": "1 McpServer(s) not Ready (Unreachable)",
            "description": "kubectl get mcpservers -A shows which; their Ready condition says why.",
        },
    });
    let denials = json!({
        "exp_labels": {"severity": "info", "namespace": "team-a", "pod": "agent-1"},
        "exp_annotations": {
            "summary": "team-a/agent-1 keeps calling tools it is not granted",
            "description": "Its audit lines (kubectl logs -c mcp-sidecar) name the tools; widen its AgentSpec or fix the agent.",
        },
    });
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                // One server Unreachable for 20 minutes beside three Ready ones: the alert is
                // pending for the chart's 10 minutes, then fires for that reason only.
                "interval": "1m",
                "input_series": [
                    {"series": "mcp_operator_mcpservers{reason=\"Unreachable\"}", "values": "1x20"},
                    {"series": "mcp_operator_mcpservers{reason=\"Ready\"}", "values": "3x20"},
                ],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "McpServerNotReady", "exp_alerts": []},
                    {"eval_time": "12m", "alertname": "McpServerNotReady", "exp_alerts": [not_ready]},
                ],
            },
            {
                // agent-1 is refused a call a second, agent-2 one a minute (under the chart's
                // 0.1/s): only agent-1 alerts, after 5 minutes of it.
                "interval": "1m",
                "input_series": [
                    {"series": "mcp_sidecar_tool_calls_total{decision=\"not_granted\",namespace=\"team-a\",pod=\"agent-1\"}", "values": "0+60x20"},
                    {"series": "mcp_sidecar_tool_calls_total{decision=\"not_granted\",namespace=\"team-a\",pod=\"agent-2\"}", "values": "0+1x20"},
                    {"series": "mcp_sidecar_tool_calls_total{decision=\"allowed\",namespace=\"team-a\",pod=\"agent-2\"}", "values": "0+600x20"},
                ],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": "McpSidecarDenialsRising", "exp_alerts": []},
                    {"eval_time": "12m", "alertname": "McpSidecarDenialsRising", "exp_alerts": [denials]},
                ],
            },
        ],
    });
    let file = dir.path().join("tests.yaml");
    std::fs::write(&file, tests.to_string()).expect("writing the rule tests");
    let out = script(
        "promtool.sh",
        &["test", "rules", file.to_str().expect("a path")],
    );
    assert!(out.contains("SUCCESS"), "{out}");
}
