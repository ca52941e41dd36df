//! Tests of the generated CRDs as a whole: the checked-in `crds/` is current, every property is
//! documented, and every validation rule, pattern and default sits where it belongs. These read
//! the schema the apiserver will get, so a rule lost in a refactor fails here, not in a cluster.

use std::path::Path;

use serde_json::Value;

use super::*;
use crate::api::common::{
    DATA_KEY_PATTERN, DNS_SUBDOMAIN_PATTERN, DURATION_OVERFLOW_PATTERN, DURATION_PATTERN,
};

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The openAPIV3Schema of one kind, as JSON.
fn schema(kind: &str) -> Value {
    let crd = crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD of kind {kind}"));
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The sub-schema at a dotted path: `spec.servers[].prefix`, `spec.tools.overrides{}`.
fn at(schema: &Value, path: &str) -> Value {
    let mut node = schema;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, suffix) = match part.find(['[', '{']) {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        node = node
            .pointer(&format!("/properties/{name}"))
            .unwrap_or_else(|| panic!("{path}: no property {name}"));
        for step in suffix.as_bytes().chunks(2) {
            node = match step {
                b"[]" => &node["items"],
                b"{}" => &node["additionalProperties"],
                _ => panic!("{path}: bad step"),
            };
        }
    }
    node.clone()
}

fn rules(node: &Value) -> Vec<(String, String)> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    let message = r["message"]
                        .as_str()
                        .or_else(|| r["messageExpression"].as_str())
                        .unwrap_or_default();
                    (r["rule"].as_str().unwrap().to_owned(), message.to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn checked_in_crds_equal_the_generated_ones() {
    let path = manifest_dir().join("crds/crds.yaml");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == crds_yaml(),
        "{} is stale: regenerate it with `cargo run -- crds > crds/crds.yaml`",
        path.display()
    );
}

#[test]
fn yaml_reads_back_as_the_same_crds() {
    let read: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&crds_yaml()).unwrap();
    assert_eq!(read, crds());
    let kinds: Vec<_> = read.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(kinds, ["McpServer", "AgentSpec", "McpTenantPolicy"]);
}

#[test]
fn names_scopes_and_status_subresources() {
    let crds = crds();
    let expect = [
        ("mcpservers.mcp-operator.dev", "Namespaced", "mcps"),
        ("agentspecs.mcp-operator.dev", "Namespaced", "ags"),
        ("mcptenantpolicies.mcp-operator.dev", "Cluster", "mcptp"),
    ];
    for (crd, (name, scope, short)) in crds.iter().zip(expect) {
        assert_eq!(crd.metadata.name.as_deref(), Some(name));
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.scope, scope);
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_owned()][..])
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["mcp".to_owned()][..])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version.subresources.as_ref().unwrap().status.is_some(),
            "{name}: status subresource"
        );
    }
}

#[test]
fn printer_columns() {
    let columns = |kind: &str| -> Vec<(String, String)> {
        crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap()
            .spec
            .versions[0]
            .additional_printer_columns
            .clone()
            .unwrap()
            .into_iter()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| (c.name, c.json_path))
            .collect()
    };
    let ready = r#".status.conditions[?(@.type=="Ready")].status"#;
    let reason = r#".status.conditions[?(@.type=="Ready")].reason"#;
    let age = ".metadata.creationTimestamp";
    let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        columns("McpServer"),
        own(&[
            ("Ready", ready),
            ("Reason", reason),
            ("Tools", ".status.catalog.toolCount"),
            ("Protocol", ".status.protocolVersion"),
            ("Age", age)
        ])
    );
    assert_eq!(
        columns("AgentSpec"),
        own(&[
            ("Ready", ready),
            ("Tools", ".status.grantedTools"),
            ("ConfigMap", ".status.grantsConfigMap"),
            ("OutOfDate", ".status.pods.outOfDate"),
            ("Age", age)
        ])
    );
    assert_eq!(
        columns("McpTenantPolicy"),
        own(&[
            ("Ready", ready),
            ("Namespaces", ".status.selectedNamespaces"),
            ("Age", age)
        ])
    );
}

/// `kubectl explain` is only useful when every field says what it is.
#[test]
fn every_property_has_a_description() {
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        if let Some(properties) = node["properties"].as_object() {
            for (name, child) in properties {
                let child_path = format!("{path}.{name}");
                let described = child["description"]
                    .as_str()
                    .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    missing.push(child_path.clone());
                }
                walk(child, &child_path, missing);
            }
        }
        if node["items"].is_object() {
            walk(&node["items"], &format!("{path}[]"), missing);
        }
        if node["additionalProperties"].is_object() {
            walk(
                &node["additionalProperties"],
                &format!("{path}{{}}"),
                missing,
            );
        }
    }
    for kind in ["McpServer", "AgentSpec", "McpTenantPolicy"] {
        let mut missing = vec![];
        walk(&schema(kind), kind, &mut missing);
        assert!(
            missing.is_empty(),
            "properties without a description: {missing:?}"
        );
    }
}

/// The apiserver warns about every format it does not know, on every apply.
#[test]
fn only_formats_the_apiserver_knows() {
    fn walk(node: &Value, path: &str, unknown: &mut Vec<String>) {
        if let Some(format) = node["format"].as_str()
            && !["int32", "int64", "date-time", "byte", "double", "float"].contains(&format)
        {
            unknown.push(format!("{path}: {format}"));
        }
        if let Some(properties) = node["properties"].as_object() {
            for (name, child) in properties {
                walk(child, &format!("{path}.{name}"), unknown);
            }
        }
        for key in ["items", "additionalProperties"] {
            if node[key].is_object() {
                walk(&node[key], &format!("{path}.{key}"), unknown);
            }
        }
    }
    for kind in ["McpServer", "AgentSpec", "McpTenantPolicy"] {
        let mut unknown = vec![];
        walk(&schema(kind), kind, &mut unknown);
        assert!(
            unknown.is_empty(),
            "formats the apiserver does not know: {unknown:?}"
        );
    }
}

#[test]
fn descriptions_are_unwrapped() {
    let url = at(&schema("McpServer"), "spec.url")["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!url.contains('\n'), "{url:?}");
    assert!(
        url.starts_with("Endpoint of a remote MCP server"),
        "{url:?}"
    );
}

/// Every CEL rule, where it sits, and a piece of its message. A rule removed or moved fails here.
#[test]
fn cel_rules_sit_where_they_belong() {
    let expected: &[(&str, &str, &str, &str)] = &[
        // McpServer
        (
            "McpServer",
            "spec",
            "self.url.startsWith('https://')",
            "tls applies only to https://",
        ),
        (
            "McpServer",
            "spec.url",
            "url(self).getHostname() != ''",
            "absolute http:// or https:// URL",
        ),
        (
            "McpServer",
            "spec.url",
            "self.startsWith('http://') || self.startsWith('https://')",
            "url must be",
        ),
        (
            "McpServer",
            "spec.url",
            "!self.matches('^[a-zA-Z]+://[^/?#]*@')",
            "must not carry credentials",
        ),
        (
            "McpServer",
            "spec.credentials",
            "h.name.lowerAscii() != 'authorization'",
            "must not set Authorization",
        ),
        (
            "McpServer",
            "spec.credentials.headers",
            "exists_one",
            "same header twice",
        ),
        (
            "McpServer",
            "spec.credentials.headers[].name",
            "'mcp-session-id'",
            "set by the operator itself",
        ),
        (
            "McpServer",
            "spec.tls",
            "has(self.caBundle) && has(self.insecureSkipVerify)",
            "contradict each other",
        ),
        (
            "McpServer",
            "spec.tls.caBundle",
            "has(self.secretKeyRef) != has(self.configMapKeyRef)",
            "exactly one of",
        ),
        (
            "McpServer",
            "spec.tools.overrides",
            "k.matches('^[A-Za-z0-9_.-]{1,128}$')",
            "exact tool names",
        ),
        (
            "McpServer",
            "spec.timeouts.connect",
            "duration(self) <= duration('5m')",
            "timeouts.connect must be",
        ),
        (
            "McpServer",
            "spec.timeouts.connect",
            "duration(self) > duration('0s')",
            "more than 0s",
        ),
        (
            "McpServer",
            "spec.timeouts.call",
            "duration(self) <= duration('1h')",
            "timeouts.call must be",
        ),
        (
            "McpServer",
            "spec.discovery.refreshInterval",
            "duration(self) >= duration('30s')",
            "at least 30s",
        ),
        (
            "McpServer",
            "spec",
            "has(self.url) != has(self.stdio)",
            "exactly one of spec.url",
        ),
        (
            "McpServer",
            "spec",
            "self.transport == 'streamable-http'",
            "served over streamable-http",
        ),
        (
            "McpServer",
            "spec.stdio.env[]",
            "has(self.value) != has(self.valueFrom)",
            "exactly one of value or valueFrom",
        ),
        (
            "McpServer",
            "",
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "Deployment and Service are named <name>-mcp",
        ),
        // AgentSpec
        (
            "AgentSpec",
            "spec.servers",
            "(has(b.prefix) ? b.prefix : b.name) == (has(a.prefix) ? a.prefix : a.name)",
            "its own prefix",
        ),
        (
            "AgentSpec",
            "spec.servers[]",
            "has(self.prefix) || self.name.matches('^[A-Za-z0-9_-]+$')",
            "set prefix",
        ),
        (
            "AgentSpec",
            "spec.servers[].prefix",
            "!self.contains('__')",
            "must not contain '__'",
        ),
        // McpTenantPolicy
        (
            "McpTenantPolicy",
            "spec.rules[].servers",
            "has(self.selector) || (has(self.urls) && size(self.urls) > 0)",
            "by names, selector or urls",
        ),
        (
            "McpTenantPolicy",
            "spec.rules[].overrides",
            "self.all(k, k.matches('^[A-Za-z0-9_.-]{1,128}$'))",
            "rules[].overrides keys must be exact tool names",
        ),
    ];
    for (kind, path, rule, message) in expected {
        let found = rules(&at(&schema(kind), path));
        assert!(
            found
                .iter()
                .any(|(r, m)| r.contains(rule) && m.contains(message)),
            "{kind} {path}: no rule containing {rule:?} with a message containing {message:?}; found {found:?}"
        );
    }
}

/// A duration rule evaluates `duration()` only on text the schema pattern accepts, so a malformed
/// duration gets the pattern's error and not a CEL evaluation error.
#[test]
fn duration_rules_are_guarded_by_the_duration_pattern() {
    let guard = format!(
        "!self.matches('{DURATION_PATTERN}') || (!self.matches('{DURATION_OVERFLOW_PATTERN}') && "
    );
    for path in [
        "spec.timeouts.connect",
        "spec.timeouts.call",
        "spec.discovery.refreshInterval",
    ] {
        let node = at(&schema("McpServer"), path);
        assert_eq!(node["pattern"], DURATION_PATTERN, "{path}");
        for (rule, _) in rules(&node) {
            assert!(rule.starts_with(&guard), "{path}: {rule}");
        }
    }
}

#[test]
fn patterns_and_lengths_sit_where_they_belong() {
    let tool_pattern = r"^[A-Za-z0-9_.*?-]+$";
    let tool_name = r"^[A-Za-z0-9_.-]+$";
    let secret_refs = [
        "spec.credentials.bearerToken.secretKeyRef",
        "spec.credentials.headers[].valueFrom.secretKeyRef",
        "spec.tls.caBundle.secretKeyRef",
        "spec.tls.caBundle.configMapKeyRef",
        "spec.stdio.env[].valueFrom.secretKeyRef",
    ];
    let mut expected: Vec<(&str, String, &str, u64)> = vec![
        ("McpServer", "spec.url".into(), "", 2048),
        ("McpServer", "spec.stdio.image".into(), "", 1024),
        ("McpServer", "spec.stdio.command[]".into(), "", 4096),
        (
            "McpServer",
            "spec.stdio.env[].name".into(),
            r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
            256,
        ),
        (
            "McpServer",
            "spec.credentials.headers[].name".into(),
            r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
            128,
        ),
        ("McpServer", "spec.tools.allow[]".into(), tool_pattern, 128),
        ("McpServer", "spec.tools.deny[]".into(), tool_pattern, 128),
        (
            "McpServer",
            "spec.tools.requireApproval[]".into(),
            tool_name,
            128,
        ),
        (
            "AgentSpec",
            "spec.servers[].name".into(),
            DNS_SUBDOMAIN_PATTERN,
            253,
        ),
        (
            "AgentSpec",
            "spec.servers[].prefix".into(),
            r"^[A-Za-z0-9_-]+$",
            64,
        ),
        (
            "AgentSpec",
            "spec.servers[].allow[]".into(),
            tool_pattern,
            128,
        ),
        (
            "AgentSpec",
            "spec.servers[].deny[]".into(),
            tool_pattern,
            128,
        ),
        (
            "AgentSpec",
            "spec.servers[].requireApproval[]".into(),
            tool_name,
            128,
        ),
        (
            "McpTenantPolicy",
            "spec.rules[].allow[]".into(),
            tool_pattern,
            128,
        ),
        (
            "McpTenantPolicy",
            "spec.rules[].deny[]".into(),
            tool_pattern,
            128,
        ),
        (
            "McpTenantPolicy",
            "spec.rules[].servers.names[]".into(),
            DNS_SUBDOMAIN_PATTERN,
            253,
        ),
    ];
    let resource_pattern = r"^[!-~]+$";
    for (kind, base) in [
        ("AgentSpec", "spec.servers[]"),
        ("McpTenantPolicy", "spec.rules[]"),
    ] {
        for list in ["allow", "deny"] {
            expected.push((
                kind,
                format!("{base}.resources.{list}[]"),
                resource_pattern,
                2048,
            ));
            expected.push((
                kind,
                format!("{base}.prompts.{list}[]"),
                resource_pattern,
                256,
            ));
        }
    }
    for reference in secret_refs {
        expected.push((
            "McpServer",
            format!("{reference}.name"),
            DNS_SUBDOMAIN_PATTERN,
            253,
        ));
        expected.push((
            "McpServer",
            format!("{reference}.key"),
            DATA_KEY_PATTERN,
            253,
        ));
    }
    for (kind, path, pattern, max_length) in expected {
        let node = at(&schema(kind), &path);
        if !pattern.is_empty() {
            assert_eq!(node["pattern"], pattern, "{kind} {path}: pattern");
        }
        assert_eq!(node["minLength"], 1, "{kind} {path}: minLength");
        assert_eq!(node["maxLength"], max_length, "{kind} {path}: maxLength");
    }
}

#[test]
fn enums_and_ranges() {
    let server = schema("McpServer");
    let values = |node: &Value| node["enum"].clone();
    assert_eq!(
        values(&at(&server, "spec.transport")),
        serde_json::json!(["streamable-http", "sse"])
    );
    assert_eq!(
        values(&at(&server, "spec.tools.overrides{}")),
        serde_json::json!(["read", "write", "destructive"])
    );
    assert_eq!(
        values(&at(&server, "status.era")),
        serde_json::json!(["legacy", "modern"])
    );
    assert_eq!(
        values(&at(&schema("AgentSpec"), "spec.approval")),
        serde_json::json!(["none", "destructive", "writes", "all"])
    );
    let policy = schema("McpTenantPolicy");
    for path in ["spec.rules[].maxAccess", "spec.rules[].requireApprovalFor"] {
        let node = at(&policy, path);
        assert_eq!(
            values(&node),
            serde_json::json!(["read", "write", "destructive"]),
            "{path}"
        );
        // The field's own description, not the Access type's.
        let description = node["description"].as_str().unwrap();
        assert!(
            !description.starts_with("How much a tool"),
            "{path}: {description}"
        );
    }
    let range = |path: &str| {
        let node = at(&server, path);
        (
            node["minimum"].as_f64().unwrap(),
            node["maximum"].as_f64().unwrap(),
        )
    };
    assert_eq!(range("spec.discovery.maxToolPages"), (1.0, 10000.0));
    assert_eq!(
        range("spec.discovery.maxResponseBytes"),
        (65536.0, 67108864.0)
    );
    assert_eq!(range("spec.retry"), (0.0, 10.0));
    assert_eq!(range("spec.stdio.replicas"), (1.0, 50.0));
    assert_eq!(
        values(&at(&server, "spec.stdio.imagePullPolicy")),
        serde_json::json!(["Always", "IfNotPresent", "Never"])
    );
}

/// spec.stdio's lists are bounded and env is a list-map keyed by name (the apiserver refuses a
/// name twice); quantities take numbers and strings, as a container's resources do, and read
/// back in Rust either way.
#[test]
fn stdio_lists_and_quantities() {
    let server = schema("McpServer");
    let command = at(&server, "spec.stdio.command");
    assert_eq!(
        (command["minItems"].as_u64(), command["maxItems"].as_u64()),
        (Some(1), Some(64))
    );
    assert_eq!(at(&server, "spec.stdio.args")["maxItems"], 256);
    let env = at(&server, "spec.stdio.env");
    assert_eq!(env["maxItems"], 128);
    assert_eq!(env["x-kubernetes-list-type"], "map");
    assert_eq!(
        env["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    for which in ["requests", "limits"] {
        let quantities = at(&server, &format!("spec.stdio.resources.{which}"));
        assert_eq!(quantities["maxProperties"], 8);
        assert_eq!(
            quantities["additionalProperties"]["x-kubernetes-int-or-string"],
            true
        );
        assert_eq!(
            quantities["additionalProperties"]["pattern"],
            mcp_server::QUANTITY_PATTERN
        );
    }
    let spec: McpServerSpec = serde_json::from_value(serde_json::json!({"stdio": {
        "image": "node:22-slim",
        "command": ["npx"],
        "resources": {"limits": {"cpu": 1, "memory": "1Gi"}, "requests": {"cpu": 0.5}},
    }}))
    .unwrap();
    let stdio = spec.stdio.unwrap();
    let resources = stdio.resources.unwrap();
    assert_eq!(resources.limits["cpu"].0, "1");
    assert_eq!(resources.limits["memory"].0, "1Gi");
    assert_eq!(resources.requests["cpu"].0, "0.5");
    assert_eq!((stdio.replicas, stdio.per_session), (1, false));
    assert!(spec.url.is_none());
}

/// The apiserver applies these defaults; the Rust defaults are the same.
#[test]
fn defaults_sit_where_they_belong() {
    let server = schema("McpServer");
    let expected = [
        ("spec.transport", serde_json::json!("streamable-http")),
        ("spec.optional", serde_json::json!(false)),
        ("spec.retry", serde_json::json!(2)),
        (
            "spec.timeouts",
            serde_json::json!({"connect": "10s", "call": "30s"}),
        ),
        ("spec.timeouts.connect", serde_json::json!("10s")),
        ("spec.timeouts.call", serde_json::json!("30s")),
        (
            "spec.discovery",
            serde_json::json!({"maxToolPages": 100, "maxResponseBytes": 4194304, "refreshInterval": "5m"}),
        ),
        ("spec.discovery.maxToolPages", serde_json::json!(100)),
        (
            "spec.discovery.maxResponseBytes",
            serde_json::json!(4194304),
        ),
        ("spec.discovery.refreshInterval", serde_json::json!("5m")),
        ("spec.tls.insecureSkipVerify", serde_json::json!(false)),
        ("spec.stdio.replicas", serde_json::json!(1)),
        ("spec.stdio.perSession", serde_json::json!(false)),
    ];
    for (path, default) in &expected {
        assert_eq!(&at(&server, path)["default"], default, "McpServer {path}");
    }
    assert_eq!(
        at(&schema("AgentSpec"), "spec.approval")["default"],
        "destructive"
    );

    // A minimal spec read in Rust gets the same values the apiserver would fill in.
    let spec: McpServerSpec =
        serde_json::from_value(serde_json::json!({"url": "http://127.0.0.1:18080/mcp"})).unwrap();
    let written = serde_json::to_value(&spec).unwrap();
    for (path, default) in &expected {
        if let Some(field) = path
            .strip_prefix("spec.")
            .filter(|p| !p.starts_with("tls") && !p.starts_with("stdio"))
        {
            let pointer = format!("/{}", field.replace('.', "/"));
            assert_eq!(
                written.pointer(&pointer),
                Some(default),
                "Rust default of {path}"
            );
        }
    }
    assert_eq!(spec.discovery.refresh_interval.as_std().as_secs(), 300);
}

/// CEL rules are charged against the apiserver's cost budget by the size of what they may touch:
/// every string, list and map under a rule has an upper bound. (LabelSelectors are exempt: no
/// rule iterates over them.)
#[test]
fn everything_a_rule_can_reach_is_bounded() {
    fn check(node: &Value, path: &str, unbounded: &mut Vec<String>) {
        if node["properties"]["matchLabels"].is_object() {
            return; // a LabelSelector
        }
        match node["type"].as_str() {
            Some("string") if node["maxLength"].is_null() && node["enum"].is_null() => {
                unbounded.push(path.to_owned())
            }
            Some("array") if node["maxItems"].is_null() => unbounded.push(path.to_owned()),
            Some("object")
                if node["additionalProperties"].is_object() && node["maxProperties"].is_null() =>
            {
                unbounded.push(path.to_owned())
            }
            _ => {}
        }
        if let Some(properties) = node["properties"].as_object() {
            for (name, child) in properties {
                check(child, &format!("{path}.{name}"), unbounded);
            }
        }
        for key in ["items", "additionalProperties"] {
            if node[key].is_object() {
                check(&node[key], &format!("{path}.{key}"), unbounded);
            }
        }
    }
    fn visit(node: &Value, path: &str, unbounded: &mut Vec<String>) {
        if node["x-kubernetes-validations"].is_array() {
            check(node, path, unbounded);
            return;
        }
        if let Some(properties) = node["properties"].as_object() {
            for (name, child) in properties {
                visit(child, &format!("{path}.{name}"), unbounded);
            }
        }
        for key in ["items", "additionalProperties"] {
            if node[key].is_object() {
                visit(&node[key], &format!("{path}.{key}"), unbounded);
            }
        }
    }
    for kind in ["McpServer", "AgentSpec", "McpTenantPolicy"] {
        let mut unbounded = vec![];
        visit(
            &at(&schema(kind), "spec"),
            &format!("{kind}.spec"),
            &mut unbounded,
        );
        assert!(
            unbounded.is_empty(),
            "unbounded under a CEL rule: {unbounded:?}"
        );
    }
}

#[test]
fn conditions_are_a_list_map_keyed_by_type() {
    for kind in ["McpServer", "AgentSpec", "McpTenantPolicy"] {
        let node = at(&schema(kind), "status.conditions");
        assert_eq!(node["x-kubernetes-list-type"], "map", "{kind}");
        assert_eq!(
            node["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"]),
            "{kind}"
        );
        assert!(at(&schema(kind), "status.conditions[].observedGeneration").is_object());
    }
    let servers = at(&schema("AgentSpec"), "spec.servers");
    assert_eq!(servers["x-kubernetes-list-type"], "map");
    assert_eq!(
        servers["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
}

/// The status catalogue is the probe's catalogue document plus lastSyncTime: one shape.
#[test]
fn status_catalog_is_the_probe_catalog_plus_last_sync_time() {
    let node = at(&schema("McpServer"), "status.catalog");
    let mut names: Vec<_> = node["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "digest",
            "lastSyncTime",
            "overridesDigest",
            "pagesRead",
            "promptCount",
            "prompts",
            "resourceCount",
            "resourceTemplateCount",
            "resourceTemplates",
            "resources",
            "toolCount",
            "tools",
            "unreadLists"
        ]
    );

    let catalog = crate::core::Catalog {
        tool_count: 0,
        digest: "d".into(),
        pages_read: 1,
        overrides_digest: None,
        tools: vec![],
        ..crate::core::Catalog::default()
    };
    let status = mcp_server::CatalogStatus {
        catalog: catalog.clone(),
        last_sync_time: None,
    };
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        serde_json::to_value(&catalog).unwrap()
    );
}

/// The AgentSpec's pod counts: both required once the object is there, never negative, and
/// they read back as written (status is pruned to the schema, so a missing field would vanish).
#[test]
fn agent_spec_status_counts_its_injected_and_out_of_date_pods() {
    let node = at(&schema("AgentSpec"), "status.pods");
    assert_eq!(node["type"], "object");
    let mut required: Vec<&str> = node["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(required, ["injected", "outOfDate"]);
    for field in ["injected", "outOfDate"] {
        let f = &node["properties"][field];
        assert_eq!(f["type"], "integer", "{field}");
        assert_eq!(f["minimum"].as_f64(), Some(0.0), "{field}");
    }
    let status: agent_spec::AgentSpecStatus =
        serde_json::from_value(serde_json::json!({"pods": {"injected": 3, "outOfDate": 1}}))
            .unwrap();
    assert_eq!(
        status.pods,
        Some(agent_spec::AgentPodsStatus {
            injected: 3,
            out_of_date: 1
        })
    );
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        serde_json::json!({"pods": {"injected": 3, "outOfDate": 1}})
    );
}

/// Every example manifest reads as its kind, and names only fields the schema knows (serde
/// would silently ignore a misspelt field; the apiserver would prune it).
#[test]
fn examples_use_only_known_fields() {
    fn known(node: &Value, value: &Value, path: &str, unknown: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                let additional = &node["additionalProperties"];
                for (name, child) in fields {
                    let child_schema = if additional.is_object() {
                        additional
                    } else {
                        &node["properties"][name]
                    };
                    if child_schema.is_null() {
                        unknown.push(format!("{path}.{name}"));
                    } else {
                        known(child_schema, child, &format!("{path}.{name}"), unknown);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    known(&node["items"], item, &format!("{path}[{i}]"), unknown);
                }
            }
            _ => {}
        }
    }
    let dir = manifest_dir().join("examples");
    let mut seen = std::collections::BTreeSet::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for document in documents {
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            let what = format!("{} {kind}", path.display());
            match kind.as_str() {
                "McpServer" => {
                    drop(serde_json::from_value::<McpServer>(document.clone()).expect(&what))
                }
                "AgentSpec" => {
                    drop(serde_json::from_value::<AgentSpec>(document.clone()).expect(&what))
                }
                "McpTenantPolicy" => {
                    drop(serde_json::from_value::<McpTenantPolicy>(document.clone()).expect(&what))
                }
                _ => continue,
            }
            assert_eq!(
                document["apiVersion"], "mcp-operator.dev/v1alpha1",
                "{what}"
            );
            let mut unknown = vec![];
            known(
                &schema(&kind)["properties"]["spec"],
                &document["spec"],
                "spec",
                &mut unknown,
            );
            assert!(unknown.is_empty(), "{what}: unknown fields {unknown:?}");
            seen.insert(kind);
        }
    }
    assert_eq!(
        seen.len(),
        3,
        "examples/ should show every kind, saw {seen:?}"
    );
}

fn testdata() -> std::path::PathBuf {
    manifest_dir().join("src/api/testdata")
}

/// The rejected cases name what they expect, so the apiserver test below can check the message.
fn rejected_cases() -> Vec<(std::path::PathBuf, String)> {
    let mut cases: Vec<_> = std::fs::read_dir(testdata().join("rejected"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let expect = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# expect: "))
                .unwrap_or_else(|| panic!("{}: first line must be `# expect: ...`", path.display()))
                .to_owned();
            (path, expect)
        })
        .collect();
    cases.sort();
    cases
}

#[test]
fn validation_cases_are_well_formed() {
    let cases = rejected_cases();
    assert!(cases.len() >= 30, "{} rejected cases", cases.len());
    for (path, _) in &cases {
        let text = std::fs::read_to_string(path).unwrap();
        let document: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            document["apiVersion"],
            "mcp-operator.dev/v1alpha1",
            "{}",
            path.display()
        );
    }
}
