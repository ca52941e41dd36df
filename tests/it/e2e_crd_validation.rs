//! The CRDs' schema and CEL rules, enforced by a real kube-apiserver: every rule refuses what it
//! should, with a message that says why; the values at the edges, every manifest in
//! `examples/` and what `mcp-operator import` prints for tests/fixtures/import/ are accepted; the apiserver fills in the documented defaults; and the field
//! descriptions `kubectl explain` shows are served.
//!
//! Refusals are dry runs (nothing is stored), sent both the way `kubectl create` sends them
//! (POST) and the way `kubectl apply --server-side` does (an apply patch), each with unknown
//! fields refused (`fieldValidation=Strict`, what kubectl asks for).

use crate::e2e;

use std::time::Duration;

use e2e::{Write, describe};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use mcp_operator::api::{AgentSpec, McpServer, McpServerSpec, McpTenantPolicy};
use serde_json::{Value, json};

const API_VERSION: &str = "mcp-operator.dev/v1alpha1";

/// `patch` merged into `base` the way a JSON merge patch (RFC 7386) is: objects merge
/// recursively, `null` removes a field, anything else replaces.
fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    base.remove(&key);
                } else {
                    merge(base.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (base, patch) => *base = patch,
    }
}

/// A manifest of one of our kinds named `name`, whose spec is a valid minimal spec with
/// `spec_patch` merged in.
fn manifest(kind: &str, name: &str, spec_patch: Value) -> Value {
    let mut spec = match kind {
        "McpServer" => json!({"url": "https://mcp.example.com/mcp"}),
        "AgentSpec" => json!({"servers": [{"name": "files"}]}),
        "McpTenantPolicy" => json!({
            "namespaceSelector": {},
            "rules": [{"servers": {"names": ["files"]}}],
        }),
        other => panic!("not one of our kinds: {other}"),
    };
    merge(&mut spec, spec_patch);
    let mut name = name.to_owned();
    name.truncate(63);
    json!({
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name.trim_end_matches('-')},
        "spec": spec,
    })
}

/// One manifest the apiserver must refuse.
struct Refused {
    case: String,
    manifest: Value,
    /// HTTP status of the refusal: 422 for a schema or CEL rule, 400 for an unknown field.
    code: u16,
    /// Pieces of the apiserver's message, all of which must be in it: the field and the reason.
    expect: Vec<String>,
    /// What a server-side apply must say instead, when it refuses earlier and in other words.
    expect_from_apply: Option<(u16, Vec<String>)>,
}

#[derive(Default)]
struct Cases(Vec<Refused>);

impl Cases {
    fn add(&mut self, kind: &str, case: &str, spec: Value, expect: &[&str]) -> &mut Refused {
        let manifest = manifest(kind, &format!("bad-{case}"), spec);
        self.raw(case, manifest, expect)
    }

    fn server(&mut self, case: &str, spec: Value, expect: &[&str]) -> &mut Refused {
        self.add("McpServer", case, spec, expect)
    }

    fn agent(&mut self, case: &str, spec: Value, expect: &[&str]) -> &mut Refused {
        self.add("AgentSpec", case, spec, expect)
    }

    fn policy(&mut self, case: &str, spec: Value, expect: &[&str]) -> &mut Refused {
        self.add("McpTenantPolicy", case, spec, expect)
    }

    fn raw(&mut self, case: &str, manifest: Value, expect: &[&str]) -> &mut Refused {
        assert!(
            self.0.iter().all(|c| c.case != case),
            "two cases named {case}"
        );
        self.0.push(Refused {
            case: case.to_owned(),
            manifest,
            code: 422,
            expect: expect.iter().map(|s| s.to_string()).collect(),
            expect_from_apply: None,
        });
        self.0.last_mut().expect("just pushed")
    }
}

impl Refused {
    fn code(&mut self, code: u16) -> &mut Self {
        self.code = code;
        self
    }

    fn when_applied(&mut self, code: u16, expect: &[&str]) -> &mut Self {
        self.expect_from_apply = Some((code, expect.iter().map(|s| s.to_string()).collect()));
        self
    }
}

fn long(prefix: &str, len: usize) -> String {
    let mut s = prefix.to_owned();
    while s.len() < len {
        s.push('a');
    }
    s
}

fn secret_ref(name: &str, key: &str) -> Value {
    json!({"secretKeyRef": {"name": name, "key": key}})
}

fn header(name: &str) -> Value {
    json!({"name": name, "valueFrom": secret_ref("api", "key")})
}

const URL_RULE: &str = "url must be an absolute http:// or https:// URL with a host";
const SHOULD_MATCH: &str = "should match";
const TOOL_PATTERN: &str = "'^[A-Za-z0-9_.*?-]+$'";
const TOOL_NAME: &str = "'^[A-Za-z0-9_.-]+$'";
const RESERVED_HEADER: &str = "this header is set by the operator itself";
const NOT_TOOL_NAME_KEY: &str = "tools.overrides keys must be exact tool names";
/// How a server-side apply refuses what it cannot even merge (a value of the wrong type, an
/// unknown field, a list-map key twice): before validation, with HTTP 500.
const TYPED_PATCH: &str = "failed to create typed patch object";
const EXACTLY_ONE_SOURCE: &str = "set exactly one of spec.url (a remote server) or spec.stdio";
const DNS_NAME: &str = "should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?";

/// Every rule of the three CRDs, each broken once (several times where the rule has several
/// ways to be broken).
fn refused_cases() -> Vec<Refused> {
    let mut c = Cases::default();

    // --- McpServer: url
    c.server(
        "url-missing",
        json!({"url": null}),
        &["spec", EXACTLY_ONE_SOURCE],
    );
    // --- McpServer: stdio
    let stdio = || json!({"image": "node:22-slim", "command": ["npx", "-y", "@modelcontextprotocol/server-memory"]});
    c.server(
        "stdio-and-url",
        json!({"stdio": stdio()}),
        &["spec", EXACTLY_ONE_SOURCE],
    );
    c.server(
        "stdio-no-command",
        json!({"url": null, "stdio": {"image": "node:22-slim"}}),
        &["spec.stdio.command", "Required value"],
    );
    c.server(
        "stdio-empty-command",
        json!({"url": null, "stdio": {"image": "node:22-slim", "command": []}}),
        &["spec.stdio.command", "should have at least 1 items"],
    );
    c.server(
        "stdio-no-image",
        json!({"url": null, "stdio": {"command": ["npx"]}}),
        &["spec.stdio.image", "Required value"],
    );
    c.server(
        "stdio-env-value-and-secret",
        json!({"url": null, "stdio": {"image": "i", "command": ["c"], "env": [
            {"name": "TOKEN", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]}}),
        &["spec.stdio.env[0]", "exactly one of value or valueFrom"],
    );
    c.server(
        "stdio-env-neither",
        json!({"url": null, "stdio": {"image": "i", "command": ["c"], "env": [{"name": "TOKEN"}]}}),
        &["spec.stdio.env[0]", "exactly one of value or valueFrom"],
    );
    c.server(
        "stdio-replicas",
        json!({"url": null, "stdio": {"image": "i", "command": ["c"], "replicas": 0}}),
        &[
            "spec.stdio.replicas",
            "should be greater than or equal to 1",
        ],
    );
    c.server(
        "stdio-quantity",
        json!({"url": null, "stdio": {"image": "i", "command": ["c"], "resources": {"limits": {"memory": "lots"}}}}),
        &["spec.stdio.resources.limits.memory", "should match"],
    );
    c.server(
        "stdio-own-bearer-token",
        json!({"url": null, "stdio": stdio(), "credentials": {"bearerToken": {"secretKeyRef": {"name": "t", "key": "k"}}}}),
        &["spec.credentials.bearerToken", "the operator's own"],
    );
    c.server(
        "stdio-non-root-as-root",
        json!({"url": null, "stdio": {"image": "i", "command": ["c"], "securityContext": {"runAsUser": 0, "runAsNonRoot": true}}}),
        &["spec.stdio.securityContext", "runAsNonRoot cannot hold with runAsUser 0"],
    );
    c.server(
        "stdio-over-sse",
        json!({"url": null, "transport": "sse", "stdio": stdio()}),
        &["spec.transport", "served over streamable-http"],
    );
    c.server(
        "stdio-tls",
        json!({"url": null, "stdio": stdio(), "tls": {"insecureSkipVerify": true}}),
        &["spec.tls", "tls applies only to https://"],
    );
    c.raw(
        "stdio-name-not-a-service-name",
        json!({
            "apiVersion": API_VERSION,
            "kind": "McpServer",
            "metadata": {"name": "1.memory"},
            "spec": {"stdio": stdio()},
        }),
        &["a stdio McpServer's name is at most 59"],
    );
    c.server(
        "url-empty",
        json!({"url": ""}),
        &["spec.url", "should be at least 1 chars long"],
    );
    c.server(
        "url-too-long",
        json!({"url": long("https://mcp.example.com/", 2049)}),
        &["spec.url", "Too long", "2048"],
    );
    for (case, url) in [
        ("url-scheme-ftp", "ftp://mcp.example.com/mcp"),
        ("url-scheme-ws", "ws://mcp.example.com/mcp"),
        ("url-scheme-file", "file:///var/run/mcp.sock"),
        ("url-no-scheme", "mcp.example.com/mcp"),
        ("url-no-host", "https:///mcp"),
        ("url-relative", "/mcp"),
        (
            "url-a-command",
            "npx -y @modelcontextprotocol/server-everything",
        ),
    ] {
        c.server(case, json!({"url": url}), &["spec.url", URL_RULE]);
    }
    for (case, url) in [
        (
            "url-user-and-password",
            "https://user:secret@mcp.example.com/mcp",
        ),
        ("url-token-as-user", "https://token@mcp.example.com/mcp"),
        ("url-userinfo-on-http", "http://a:b@127.0.0.1:8080/mcp"),
    ] {
        c.server(
            case,
            json!({"url": url}),
            &["spec.url", "url must not carry credentials"],
        );
    }

    // --- McpServer: transport
    c.server(
        "transport-unknown",
        json!({"transport": "websocket"}),
        &["spec.transport", "Unsupported value: \"websocket\""],
    );
    c.server(
        "transport-wrong-case",
        json!({"transport": "SSE"}),
        &["spec.transport", "Unsupported value: \"SSE\""],
    );

    // --- McpServer: credentials
    c.server(
        "bearer-without-ref",
        json!({"credentials": {"bearerToken": {}}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef",
            "Required value",
        ],
    );
    c.server(
        "secret-ref-without-key",
        json!({"credentials": {"bearerToken": {"secretKeyRef": {"name": "token"}}}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.key",
            "Required value",
        ],
    );
    c.server(
        "secret-ref-without-name",
        json!({"credentials": {"bearerToken": {"secretKeyRef": {"key": "token"}}}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.name",
            "Required value",
        ],
    );
    c.server(
        "secret-name-empty",
        json!({"credentials": {"bearerToken": secret_ref("", "token")}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.name",
            "should be at least 1 chars long",
        ],
    );
    c.server(
        "secret-name-not-dns",
        json!({"credentials": {"bearerToken": secret_ref("My_Secret", "token")}}),
        &["spec.credentials.bearerToken.secretKeyRef.name", DNS_NAME],
    );
    c.server(
        "secret-name-trailing-dash",
        json!({"credentials": {"bearerToken": secret_ref("token-", "token")}}),
        &["spec.credentials.bearerToken.secretKeyRef.name", DNS_NAME],
    );
    c.server(
        "secret-name-too-long",
        json!({"credentials": {"bearerToken": secret_ref(&long("t", 254), "token")}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.name",
            "Too long",
            "253",
        ],
    );
    c.server(
        "secret-key-empty",
        json!({"credentials": {"bearerToken": secret_ref("token", "")}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.key",
            "should be at least 1 chars long",
        ],
    );
    c.server(
        "secret-key-slash",
        json!({"credentials": {"bearerToken": secret_ref("token", "a/b")}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.key",
            SHOULD_MATCH,
        ],
    );
    c.server(
        "secret-key-too-long",
        json!({"credentials": {"bearerToken": secret_ref("token", &long("k", 254))}}),
        &[
            "spec.credentials.bearerToken.secretKeyRef.key",
            "Too long",
            "253",
        ],
    );
    c.server(
        "header-secret-key-empty",
        json!({"credentials": {"headers": [{"name": "X-Api-Key", "valueFrom": secret_ref("api", "")}]}}),
        &["spec.credentials.headers[0].valueFrom.secretKeyRef.key", "should be at least 1 chars long"],
    );
    c.server(
        "header-secret-name-empty",
        json!({"credentials": {"headers": [{"name": "X-Api-Key", "valueFrom": secret_ref("", "key")}]}}),
        &["spec.credentials.headers[0].valueFrom.secretKeyRef.name", "should be at least 1 chars long"],
    );
    c.server(
        "header-without-value",
        json!({"credentials": {"headers": [{"name": "X-Api-Key"}]}}),
        &["spec.credentials.headers[0].valueFrom", "Required value"],
    );
    c.server(
        "header-without-name",
        json!({"credentials": {"headers": [{"valueFrom": secret_ref("api", "key")}]}}),
        &["spec.credentials.headers[0].name", "Required value"],
    );
    c.server(
        "header-value-without-ref",
        json!({"credentials": {"headers": [{"name": "X-Api-Key", "valueFrom": {}}]}}),
        &[
            "spec.credentials.headers[0].valueFrom.secretKeyRef",
            "Required value",
        ],
    );
    c.server(
        "header-name-empty",
        json!({"credentials": {"headers": [header("")]}}),
        &[
            "spec.credentials.headers[0].name",
            "should be at least 1 chars long",
        ],
    );
    for (case, name) in [
        ("header-name-space", "X Api Key"),
        ("header-name-colon", "X-Api-Key:"),
        ("header-name-newline", "X-Api-Key\r\nX-Evil"),
        ("header-name-non-ascii", "X-Clé"),
    ] {
        c.server(
            case,
            json!({"credentials": {"headers": [header(name)]}}),
            &["spec.credentials.headers[0].name", SHOULD_MATCH],
        );
    }
    c.server(
        "header-name-too-long",
        json!({"credentials": {"headers": [header(&long("X-", 129))]}}),
        &["spec.credentials.headers[0].name", "Too long", "128"],
    );
    for name in [
        "Host",
        "content-length",
        "Content-Type",
        "ACCEPT",
        "Connection",
        "Transfer-Encoding",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "mcp-name",
        "Last-Event-ID",
    ] {
        c.server(
            &format!("header-reserved-{}", name.to_ascii_lowercase()),
            json!({"credentials": {"headers": [header(name)]}}),
            &["spec.credentials.headers[0].name", RESERVED_HEADER],
        );
    }
    c.server(
        "header-twice",
        json!({"credentials": {"headers": [header("X-Api-Key"), header("X-Other"), header("X-Api-Key")]}}),
        &["spec.credentials.headers", "must not name the same header twice"],
    );
    c.server(
        "header-twice-other-case",
        json!({"credentials": {"headers": [header("X-Api-Key"), header("x-api-key")]}}),
        &[
            "spec.credentials.headers",
            "must not name the same header twice",
        ],
    );
    c.server(
        "headers-too-many",
        json!({"credentials": {"headers": (0..17).map(|i| header(&format!("X-H{i}"))).collect::<Vec<_>>()}}),
        &["spec.credentials.headers", "Too many", "must have at most 16 items"],
    );
    for (case, name) in [
        ("authorization-with-bearer", "Authorization"),
        ("authorization-lowercase-with-bearer", "authorization"),
    ] {
        c.server(
            case,
            json!({"credentials": {
                "bearerToken": secret_ref("token", "token"),
                "headers": [header(name)],
            }}),
            &[
                "spec.credentials.headers",
                "must not set Authorization when credentials.bearerToken is set",
            ],
        );
    }

    // --- McpServer: tls
    c.server(
        "tls-on-http",
        json!({"url": "http://mcp.example.com/mcp", "tls": {"insecureSkipVerify": true}}),
        &["spec.tls", "tls applies only to https:// URLs"],
    );
    c.server(
        "tls-empty-on-http",
        json!({"url": "http://mcp.example.com/mcp", "tls": {}}),
        &["spec.tls", "tls applies only to https:// URLs"],
    );
    c.server(
        "tls-skip-verify-and-ca",
        json!({"tls": {"insecureSkipVerify": true, "caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}}),
        &["spec.tls", "tls.insecureSkipVerify and tls.caBundle contradict each other"],
    );
    c.server(
        "ca-no-source",
        json!({"tls": {"caBundle": {}}}),
        &[
            "spec.tls.caBundle",
            "exactly one of secretKeyRef or configMapKeyRef",
        ],
    );
    c.server(
        "ca-two-sources",
        json!({"tls": {"caBundle": {
            "secretKeyRef": {"name": "ca", "key": "ca.crt"},
            "configMapKeyRef": {"name": "ca", "key": "ca.crt"},
        }}}),
        &[
            "spec.tls.caBundle",
            "exactly one of secretKeyRef or configMapKeyRef",
        ],
    );
    c.server(
        "ca-configmap-name-not-dns",
        json!({"tls": {"caBundle": {"configMapKeyRef": {"name": "My CA", "key": "ca.crt"}}}}),
        &["spec.tls.caBundle.configMapKeyRef.name", DNS_NAME],
    );
    c.server(
        "ca-configmap-key-empty",
        json!({"tls": {"caBundle": {"configMapKeyRef": {"name": "ca", "key": ""}}}}),
        &[
            "spec.tls.caBundle.configMapKeyRef.key",
            "should be at least 1 chars long",
        ],
    );
    c.server(
        "ca-secret-key-slash",
        json!({"tls": {"caBundle": {"secretKeyRef": {"name": "ca", "key": "certs/ca.crt"}}}}),
        &["spec.tls.caBundle.secretKeyRef.key", SHOULD_MATCH],
    );
    c.server(
        "insecure-skip-verify-not-bool",
        json!({"tls": {"insecureSkipVerify": "yes"}}),
        &["spec.tls.insecureSkipVerify", "must be of type boolean"],
    )
    .when_applied(
        500,
        &[
            TYPED_PATCH,
            ".spec.tls.insecureSkipVerify: expected boolean",
        ],
    );

    // --- McpServer: tools
    for field in ["allow", "deny"] {
        for (case, pattern) in [
            ("space", "read file"),
            ("slash", "files/read"),
            ("class", "read_[ab]"),
            ("braces", "{read,write}_file"),
            ("colon", "files:read"),
        ] {
            c.server(
                &format!("tools-{field}-{case}"),
                json!({"tools": {field: ["ok_*", pattern]}}),
                &[
                    &format!("spec.tools.{field}[1]"),
                    SHOULD_MATCH,
                    TOOL_PATTERN,
                ],
            );
        }
        c.server(
            &format!("tools-{field}-empty-pattern"),
            json!({"tools": {field: [""]}}),
            &[
                &format!("spec.tools.{field}[0]"),
                "should be at least 1 chars long",
            ],
        );
        c.server(
            &format!("tools-{field}-pattern-too-long"),
            json!({"tools": {field: [long("t", 129)]}}),
            &[&format!("spec.tools.{field}[0]"), "Too long", "128"],
        );
        c.server(
            &format!("tools-{field}-too-many"),
            json!({"tools": {field: (0..257).map(|i| format!("t{i}")).collect::<Vec<_>>()}}),
            &[
                &format!("spec.tools.{field}"),
                "Too many",
                "must have at most 256 items",
            ],
        );
    }
    for (case, name) in [
        ("star", "delete_*"),
        ("question-mark", "delete_fil?"),
        ("space", "delete file"),
    ] {
        c.server(
            &format!("tools-require-approval-{case}"),
            json!({"tools": {"requireApproval": [name]}}),
            &["spec.tools.requireApproval[0]", SHOULD_MATCH, TOOL_NAME],
        );
    }
    c.server(
        "tools-require-approval-empty",
        json!({"tools": {"requireApproval": [""]}}),
        &[
            "spec.tools.requireApproval[0]",
            "should be at least 1 chars long",
        ],
    );
    c.server(
        "tools-require-approval-too-long",
        json!({"tools": {"requireApproval": [long("t", 129)]}}),
        &["spec.tools.requireApproval[0]", "Too long", "128"],
    );
    c.server(
        "tools-require-approval-too-many",
        json!({"tools": {"requireApproval": (0..257).map(|i| format!("t{i}")).collect::<Vec<_>>()}}),
        &["spec.tools.requireApproval", "Too many", "must have at most 256 items"],
    );
    for (case, key) in [
        ("star", "write_*".to_owned()),
        ("question-mark", "writ?".to_owned()),
        ("space", "write file".to_owned()),
        ("empty", String::new()),
        ("too-long", long("t", 129)),
    ] {
        c.server(
            &format!("tools-override-key-{case}"),
            json!({"tools": {"overrides": {key: "read"}}}),
            &["spec.tools.overrides", NOT_TOOL_NAME_KEY],
        );
    }
    for value in ["readonly", "Read", "admin"] {
        c.server(
            &format!("tools-override-value-{}", value.to_ascii_lowercase()),
            json!({"tools": {"overrides": {"get_file": value}}}),
            &[
                "spec.tools.overrides.get_file",
                &format!("Unsupported value: \"{value}\""),
            ],
        );
    }
    c.server(
        "tools-overrides-too-many",
        json!({"tools": {"overrides": (0..257)
            .map(|i| (format!("t{i}"), json!("read")))
            .collect::<serde_json::Map<_, _>>()}}),
        &["spec.tools.overrides", "Too many", "256"],
    );

    // --- McpServer: pinning
    let digest = format!("sha256:{}", "a".repeat(64));
    for (case, key) in [
        ("wildcard", "read_*"),
        ("empty", ""),
        ("space", "read file"),
    ] {
        c.server(
            &format!("pinning-approved-key-{case}"),
            json!({"pinning": {"enabled": true, "approved": {key: digest}}}),
            &[
                "spec.pinning.approved",
                "pinning.approved keys must be exact tool names",
            ],
        );
    }
    for (case, value) in [
        ("no-prefix", "a".repeat(64)),
        ("short", "sha256:abc".to_string()),
        ("upper-hex", format!("sha256:{}", "A".repeat(64))),
    ] {
        c.server(
            &format!("pinning-approved-digest-{case}"),
            json!({"pinning": {"approved": {"read_file": value}}}),
            &["spec.pinning.approved.read_file", SHOULD_MATCH],
        );
    }
    c.server(
        "pinning-approved-too-many",
        json!({"pinning": {"approved": (0..257)
            .map(|i| (format!("t{i}"), json!(digest)))
            .collect::<serde_json::Map<_, _>>()}}),
        &["spec.pinning.approved", "Too many", "256"],
    );
    c.server(
        "pinning-enabled-not-bool",
        json!({"pinning": {"enabled": "yes"}}),
        &["spec.pinning.enabled", "must be of type boolean"],
    )
    .when_applied(
        500,
        &[TYPED_PATCH, ".spec.pinning.enabled: expected boolean"],
    );

    // --- McpServer: optional
    c.server(
        "optional-not-bool",
        json!({"optional": "yes"}),
        &["spec.optional", "must be of type boolean"],
    )
    .when_applied(500, &[TYPED_PATCH, ".spec.optional: expected boolean"]);

    // --- McpServer: durations
    for (field, bounds_message) in [
        (
            "connect",
            "timeouts.connect must be more than 0s and at most 5m",
        ),
        ("call", "timeouts.call must be more than 0s and at most 1h"),
    ] {
        for (case, text) in [
            ("no-unit", "10"),
            ("days", "1d"),
            ("negative", "-5s"),
            ("space", "5 m"),
            ("nanoseconds", "10ns"),
            ("exponent", "1e3s"),
            ("leading-dot", ".5s"),
            ("trailing-dot", "5.s"),
            ("word", "soon"),
        ] {
            c.server(
                &format!("timeouts-{field}-{case}"),
                json!({"timeouts": {field: text}}),
                &[&format!("spec.timeouts.{field}"), SHOULD_MATCH],
            );
        }
        c.server(
            &format!("timeouts-{field}-empty"),
            json!({"timeouts": {field: ""}}),
            &[
                &format!("spec.timeouts.{field}"),
                "should be at least 1 chars long",
            ],
        );
        c.server(
            &format!("timeouts-{field}-too-long"),
            json!({"timeouts": {field: "1s".repeat(17)}}),
            &[&format!("spec.timeouts.{field}"), "Too long", "32"],
        );
        c.server(
            &format!("timeouts-{field}-number"),
            json!({"timeouts": {field: 10}}),
            &[&format!("spec.timeouts.{field}"), "must be of type string"],
        )
        .when_applied(
            500,
            &[
                TYPED_PATCH,
                &format!(".spec.timeouts.{field}: expected string"),
            ],
        );
        for (case, text) in [
            ("zero", "0s"),
            ("zero-ms", "0ms"),
            ("zero-compound", "0h0m0s"),
        ] {
            c.server(
                &format!("timeouts-{field}-{case}"),
                json!({"timeouts": {field: text}}),
                &[&format!("spec.timeouts.{field}"), bounds_message],
            );
        }
    }
    // Well-formed but beyond what a duration holds: the rule cannot evaluate and refuses.
    c.server(
        "timeouts-connect-overflow",
        json!({"timeouts": {"connect": "99999999999999999999s"}}),
        &[
            "spec.timeouts.connect",
            "timeouts.connect must be more than 0s and at most 5m",
        ],
    );
    c.server(
        "timeouts-call-overflow-in-parts",
        json!({"timeouts": {"call": "999999h999999h999999h999999h"}}),
        &[
            "spec.timeouts.call",
            "timeouts.call must be more than 0s and at most 1h",
        ],
    );
    c.server(
        "timeouts-call-hours-over-the-guard",
        json!({"timeouts": {"call": "100000h"}}),
        &[
            "spec.timeouts.call",
            "timeouts.call must be more than 0s and at most 1h",
        ],
    );
    c.server(
        "refresh-interval-overflow",
        json!({"discovery": {"refreshInterval": "2562048h"}}),
        &[
            "spec.discovery.refreshInterval",
            "discovery.refreshInterval must be at least 30s",
        ],
    );
    for (case, text) in [
        ("just-over", "5m1ms"),
        ("hour", "1h"),
        ("compound", "4m61s"),
    ] {
        c.server(
            &format!("timeouts-connect-{case}"),
            json!({"timeouts": {"connect": text}}),
            &[
                "spec.timeouts.connect",
                "timeouts.connect must be more than 0s and at most 5m",
            ],
        );
    }
    for (case, text) in [
        ("just-over", "1h0m0.001s"),
        ("two-hours", "2h"),
        ("minutes", "61m"),
    ] {
        c.server(
            &format!("timeouts-call-{case}"),
            json!({"timeouts": {"call": text}}),
            &[
                "spec.timeouts.call",
                "timeouts.call must be more than 0s and at most 1h",
            ],
        );
    }
    c.server(
        "refresh-interval-unit",
        json!({"discovery": {"refreshInterval": "5min"}}),
        &["spec.discovery.refreshInterval", SHOULD_MATCH],
    );
    for (case, text) in [
        ("zero", "0s"),
        ("too-short", "29s"),
        ("just-too-short", "29999ms"),
        ("too-long", "24h1s"),
        ("a-week", "168h"),
    ] {
        c.server(
            &format!("refresh-interval-{case}"),
            json!({"discovery": {"refreshInterval": text}}),
            &[
                "spec.discovery.refreshInterval",
                "discovery.refreshInterval must be at least 30s and at most 24h",
            ],
        );
    }

    // --- McpServer: numbers
    c.server(
        "max-tool-pages-zero",
        json!({"discovery": {"maxToolPages": 0}}),
        &[
            "spec.discovery.maxToolPages",
            "should be greater than or equal to 1",
        ],
    );
    c.server(
        "max-tool-pages-negative",
        json!({"discovery": {"maxToolPages": -1}}),
        &[
            "spec.discovery.maxToolPages",
            "should be greater than or equal to 1",
        ],
    );
    c.server(
        "max-tool-pages-over",
        json!({"discovery": {"maxToolPages": 10001}}),
        &[
            "spec.discovery.maxToolPages",
            "should be less than or equal to 10000",
        ],
    );
    c.server(
        "max-tool-pages-fraction",
        json!({"discovery": {"maxToolPages": 1.5}}),
        &["spec.discovery.maxToolPages", "must be of type integer"],
    );
    c.server(
        "max-tool-pages-string",
        json!({"discovery": {"maxToolPages": "100"}}),
        &["spec.discovery.maxToolPages", "must be of type integer"],
    )
    .when_applied(
        500,
        &[
            TYPED_PATCH,
            ".spec.discovery.maxToolPages: expected numeric",
        ],
    );
    c.server(
        "max-response-bytes-under",
        json!({"discovery": {"maxResponseBytes": 65535}}),
        &[
            "spec.discovery.maxResponseBytes",
            "should be greater than or equal to 65536",
        ],
    );
    c.server(
        "max-response-bytes-over",
        json!({"discovery": {"maxResponseBytes": 67108865}}),
        &[
            "spec.discovery.maxResponseBytes",
            "should be less than or equal to 67108864",
        ],
    );
    c.server(
        "max-response-bytes-quantity",
        json!({"discovery": {"maxResponseBytes": "4Mi"}}),
        &["spec.discovery.maxResponseBytes", "must be of type integer"],
    )
    .when_applied(
        500,
        &[
            TYPED_PATCH,
            ".spec.discovery.maxResponseBytes: expected numeric",
        ],
    );
    c.server(
        "retry-negative",
        json!({"retry": -1}),
        &["spec.retry", "should be greater than or equal to 0"],
    );
    c.server(
        "retry-over",
        json!({"retry": 11}),
        &["spec.retry", "should be less than or equal to 10"],
    );

    // --- McpServer: the whole object
    c.server(
        "unknown-field",
        json!({"urll": "https://mcp.example.com/mcp"}),
        &["unknown field \"spec.urll\""],
    )
    .code(400)
    .when_applied(
        500,
        &[TYPED_PATCH, ".spec.urll: field not declared in schema"],
    );
    c.raw(
        "server-without-spec",
        json!({"apiVersion": API_VERSION, "kind": "McpServer", "metadata": {"name": "bad-no-spec"}}),
        &["spec", "Required value"],
    );

    // --- AgentSpec
    c.agent(
        "servers-missing",
        json!({"servers": null}),
        &["spec.servers", "Required value"],
    );
    c.agent(
        "servers-empty",
        json!({"servers": []}),
        &["spec.servers", "should have at least 1 items"],
    );
    c.agent(
        "servers-too-many",
        json!({"servers": (0..65).map(|i| json!({"name": format!("s{i}")})).collect::<Vec<_>>()}),
        &["spec.servers", "Too many", "must have at most 64 items"],
    );
    c.agent(
        "server-twice",
        json!({"servers": [{"name": "files"}, {"name": "files", "prefix": "other"}]}),
        &["spec.servers[1]", "Duplicate value", "\"files\""],
    )
    // A server-side apply cannot even build its merge of a list map with a key twice.
    .when_applied(
        500,
        &[
            TYPED_PATCH,
            ".spec.servers: duplicate entries for key [name=\"files\"]",
        ],
    );
    c.agent(
        "server-without-name",
        json!({"servers": [{"prefix": "files"}]}),
        &["spec.servers[0].name", "Required value"],
    )
    // An apply patch needs the list map's key to merge by.
    .when_applied(500, &[TYPED_PATCH, ".spec.servers", "name"]);
    c.agent(
        "server-name-empty",
        json!({"servers": [{"name": "", "prefix": "files"}]}),
        &["spec.servers[0].name", "should be at least 1 chars long"],
    );
    c.agent(
        "server-name-not-dns",
        json!({"servers": [{"name": "Files"}]}),
        &["spec.servers[0].name", DNS_NAME],
    );
    c.agent(
        "server-name-underscore",
        json!({"servers": [{"name": "my_files"}]}),
        &["spec.servers[0].name", DNS_NAME],
    );
    c.agent(
        "server-name-too-long",
        json!({"servers": [{"name": long("s", 254), "prefix": "files"}]}),
        &["spec.servers[0].name", "Too long", "253"],
    );
    c.agent(
        "server-name-dotted-without-prefix",
        json!({"servers": [{"name": "files.v2"}]}),
        &[
            "spec.servers[0].name",
            "server files.v2 has a character a tool prefix may not contain",
            "set prefix",
        ],
    );
    c.agent(
        "prefix-separator",
        json!({"servers": [{"name": "files", "prefix": "my__files"}]}),
        &["spec.servers[0].prefix", "prefix must not contain '__'"],
    );
    for (case, prefix) in [
        ("dot", "files.v2"),
        ("space", "my files"),
        ("star", "files*"),
    ] {
        c.agent(
            &format!("prefix-{case}"),
            json!({"servers": [{"name": "files", "prefix": prefix}]}),
            &["spec.servers[0].prefix", SHOULD_MATCH],
        );
    }
    c.agent(
        "prefix-empty",
        json!({"servers": [{"name": "files", "prefix": ""}]}),
        &["spec.servers[0].prefix", "should be at least 1 chars long"],
    );
    c.agent(
        "prefix-too-long",
        json!({"servers": [{"name": "files", "prefix": long("p", 65)}]}),
        &["spec.servers[0].prefix", "Too long", "64"],
    );
    c.agent(
        "prefix-twice",
        json!({"servers": [{"name": "files", "prefix": "f"}, {"name": "other", "prefix": "f"}]}),
        &["spec.servers", "each server needs its own prefix"],
    );
    c.agent(
        "prefix-is-another-servers-name",
        json!({"servers": [{"name": "files"}, {"name": "other", "prefix": "files"}]}),
        &["spec.servers", "each server needs its own prefix"],
    );
    for field in ["allow", "deny"] {
        c.agent(
            &format!("agent-{field}-charset"),
            json!({"servers": [{"name": "files", field: ["read file"]}]}),
            &[
                &format!("spec.servers[0].{field}[0]"),
                SHOULD_MATCH,
                TOOL_PATTERN,
            ],
        );
        c.agent(
            &format!("agent-{field}-empty-pattern"),
            json!({"servers": [{"name": "files", field: [""]}]}),
            &[
                &format!("spec.servers[0].{field}[0]"),
                "should be at least 1 chars long",
            ],
        );
        c.agent(
            &format!("agent-{field}-too-many"),
            json!({"servers": [{"name": "files", field: (0..257).map(|i| format!("t{i}")).collect::<Vec<_>>()}]}),
            &[&format!("spec.servers[0].{field}"), "Too many", "must have at most 256 items"],
        );
    }
    c.agent(
        "agent-require-approval-wildcard",
        json!({"servers": [{"name": "files", "requireApproval": ["delete_*"]}]}),
        &[
            "spec.servers[0].requireApproval[0]",
            SHOULD_MATCH,
            TOOL_NAME,
        ],
    );
    c.agent(
        "agent-require-approval-too-long",
        json!({"servers": [{"name": "files", "requireApproval": [long("t", 129)]}]}),
        &["spec.servers[0].requireApproval[0]", "Too long", "128"],
    );
    for value in ["sometimes", "Destructive", "write"] {
        c.agent(
            &format!("approval-{}", value.to_ascii_lowercase()),
            json!({"approval": value}),
            &["spec.approval", &format!("Unsupported value: \"{value}\"")],
        );
    }
    c.raw(
        "agent-name-too-long-for-its-configmap",
        {
            let mut m = manifest("AgentSpec", "x", json!({}));
            m["metadata"]["name"] = long("agent-", 64).into();
            m
        },
        &["AgentSpec names are at most 63 characters"],
    );
    c.raw(
        "server-name-too-long-for-its-label",
        {
            let mut m = manifest("McpServer", "x", json!({}));
            m["metadata"]["name"] = long("server-", 64).into();
            m
        },
        &["McpServer names are at most 63 characters"],
    );

    // --- McpTenantPolicy
    c.policy(
        "namespace-selector-missing",
        json!({"namespaceSelector": null}),
        &["spec.namespaceSelector", "Required value"],
    );
    c.policy(
        "rules-missing",
        json!({"rules": null}),
        &["spec.rules", "Required value"],
    );
    c.policy(
        "rules-too-many",
        json!({"rules": (0..65).map(|i| json!({"servers": {"names": [format!("s{i}")]}})).collect::<Vec<_>>()}),
        &["spec.rules", "Too many", "must have at most 64 items"],
    );
    c.policy(
        "rule-without-servers",
        json!({"rules": [{"allow": ["read_*"]}]}),
        &["spec.rules[0].servers", "Required value"],
    );
    c.policy(
        "rule-servers-empty",
        json!({"rules": [{"servers": {}}]}),
        &[
            "spec.rules[0].servers",
            "servers must pick servers by names, selector or urls",
        ],
    );
    c.policy(
        "rule-servers-no-names",
        json!({"rules": [{"servers": {"names": []}}]}),
        &[
            "spec.rules[0].servers",
            "servers must pick servers by names, selector or urls",
        ],
    );
    c.policy(
        "rule-servers-no-urls",
        json!({"rules": [{"servers": {"urls": []}}]}),
        &[
            "spec.rules[0].servers",
            "servers must pick servers by names, selector or urls",
        ],
    );
    c.policy(
        "rule-url-with-space",
        json!({"rules": [{"servers": {"urls": ["*.corp.example", "mcp .corp.example"]}}]}),
        &["spec.rules[0].servers.urls[1]", "should match"],
    );
    c.policy(
        "rule-override-wildcard",
        json!({"rules": [{"servers": {"names": ["files"]}, "overrides": {"delete_*": "read"}}]}),
        &["rules[].overrides keys must be exact tool names"],
    );
    c.policy(
        "rule-override-value",
        json!({"rules": [{"servers": {"names": ["files"]}, "overrides": {"wipe": "none"}}]}),
        &["spec.rules[0].overrides.wipe", "Unsupported value"],
    );
    c.policy(
        "rule-server-name-not-dns",
        json!({"rules": [{"servers": {"names": ["files", "Files_Admin"]}}]}),
        &["spec.rules[0].servers.names[1]", DNS_NAME],
    );
    c.policy(
        "rule-server-name-empty",
        json!({"rules": [{"servers": {"names": [""]}}]}),
        &[
            "spec.rules[0].servers.names[0]",
            "should be at least 1 chars long",
        ],
    );
    c.policy(
        "rule-server-name-too-long",
        json!({"rules": [{"servers": {"names": [long("s", 254)]}}]}),
        &["spec.rules[0].servers.names[0]", "Too long", "253"],
    );
    c.policy(
        "rule-server-names-too-many",
        json!({"rules": [{"servers": {"names": (0..257).map(|i| format!("s{i}")).collect::<Vec<_>>()}}]}),
        &["spec.rules[0].servers.names", "Too many", "must have at most 256 items"],
    );
    for field in ["allow", "deny"] {
        c.policy(
            &format!("rule-{field}-charset"),
            json!({"rules": [{"servers": {"names": ["files"]}, field: ["files/*"]}]}),
            &[
                &format!("spec.rules[0].{field}[0]"),
                SHOULD_MATCH,
                TOOL_PATTERN,
            ],
        );
        c.policy(
            &format!("rule-{field}-empty-pattern"),
            json!({"rules": [{"servers": {"names": ["files"]}, field: [""]}]}),
            &[
                &format!("spec.rules[0].{field}[0]"),
                "should be at least 1 chars long",
            ],
        );
    }
    // Resource and prompt patterns: visible ASCII, bounded, on AgentSpec entries and rules.
    for (what, list) in [
        ("resources", "allow"),
        ("resources", "deny"),
        ("prompts", "allow"),
        ("prompts", "deny"),
    ] {
        c.agent(
            &format!("agent-{what}-{list}-space"),
            json!({"servers": [{"name": "files", what: {list: ["file:///my docs/*"]}}]}),
            &[
                &format!("spec.servers[0].{what}.{list}[0]"),
                SHOULD_MATCH,
                "^[!-~]+$",
            ],
        );
        c.agent(
            &format!("agent-{what}-{list}-empty"),
            json!({"servers": [{"name": "files", what: {list: [""]}}]}),
            &[
                &format!("spec.servers[0].{what}.{list}[0]"),
                "should be at least 1 chars long",
            ],
        );
        c.policy(
            &format!("rule-{what}-{list}-space"),
            json!({"rules": [{"servers": {"names": ["files"]}, what: {list: ["a b"]}}]}),
            &[
                &format!("spec.rules[0].{what}.{list}[0]"),
                SHOULD_MATCH,
                "^[!-~]+$",
            ],
        );
    }
    c.agent(
        "agent-resource-pattern-too-long",
        json!({"servers": [{"name": "files", "resources": {"allow": [long("file:///", 2049)]}}]}),
        &["spec.servers[0].resources.allow[0]", "Too long", "2048"],
    );
    c.agent(
        "agent-prompt-pattern-too-long",
        json!({"servers": [{"name": "files", "prompts": {"allow": [long("p", 257)]}}]}),
        &["spec.servers[0].prompts.allow[0]", "Too long", "256"],
    );
    for (field, value) in [("maxAccess", "admin"), ("requireApprovalFor", "everything")] {
        c.policy(
            &format!("rule-{}-enum", field.to_ascii_lowercase()),
            json!({"rules": [{"servers": {"names": ["files"]}, field: value}]}),
            &[
                &format!("spec.rules[0].{field}"),
                &format!("Unsupported value: \"{value}\""),
            ],
        );
    }

    c.0
}

/// What the apiserver answered, checked against one case.
fn check(
    case: &str,
    how: Write,
    code: u16,
    expect: &[String],
    answer: &kube::Result<DynamicObject>,
) -> Option<String> {
    match answer {
        Ok(_) => Some(format!(
            "{case} ({how:?}): accepted, expected a refusal with {expect:?}"
        )),
        Err(kube::Error::Api(status)) => {
            let missing: Vec<_> = expect
                .iter()
                .filter(|e| !status.message.contains(e.as_str()))
                .collect();
            // A rule that cannot evaluate its input says so in CEL's words, not the rule's.
            let cel_failure = CEL_EVALUATION_ERRORS
                .iter()
                .find(|e| status.message.contains(*e));
            if let Some(error) = cel_failure {
                return Some(format!(
                    "{case} ({how:?}): refused by a CEL evaluation error ({error:?}), not by the rule's message: {:?}",
                    status.message
                ));
            }
            (status.code != code || !missing.is_empty()).then(|| {
                format!(
                    "{case} ({how:?}): expected {code} with {expect:?}, got {} {:?} (missing {missing:?})",
                    status.code, status.message
                )
            })
        }
        Err(other) => Some(format!("{case} ({how:?}): {other}")),
    }
}

/// What the apiserver says when a CEL rule fails to evaluate rather than returning false.
const CEL_EVALUATION_ERRORS: [&str; 3] = [
    "type conversion error",
    "no such overload",
    "evaluation error",
];

#[tokio::test]
async fn every_rule_refuses_what_it_should_with_its_message() {
    let (client, ns) = e2e::setup("refusals").await;
    // The minimal manifests the cases start from are valid themselves, so each refusal is the
    // case's doing.
    for kind in ["McpServer", "AgentSpec", "McpTenantPolicy"] {
        let base = manifest(kind, "base", json!({}));
        for how in [Write::Create, Write::ServerSideApply] {
            if let Err(e) = e2e::write(&client, how, &base, Some(ns.name()), true).await {
                panic!("the minimal {kind} is refused ({how:?}): {}", describe(&e));
            }
        }
    }

    let cases = refused_cases();
    let mut wrong = vec![];
    for case in &cases {
        let created = e2e::write(
            &client,
            Write::Create,
            &case.manifest,
            Some(ns.name()),
            true,
        )
        .await;
        wrong.extend(check(
            &case.case,
            Write::Create,
            case.code,
            &case.expect,
            &created,
        ));
        let (code, expect) = case
            .expect_from_apply
            .clone()
            .unwrap_or_else(|| (case.code, case.expect.clone()));
        let applied = e2e::write(
            &client,
            Write::ServerSideApply,
            &case.manifest,
            Some(ns.name()),
            true,
        )
        .await;
        wrong.extend(check(
            &case.case,
            Write::ServerSideApply,
            code,
            &expect,
            &applied,
        ));
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases went wrong:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    eprintln!("{} refusals checked, each both ways", cases.len());
}

/// Values at the very edge of each rule, which must still be accepted.
fn accepted_cases() -> Vec<(&'static str, Value)> {
    let tool_128 = long("t", 128);
    vec![
        (
            "server-minimal",
            manifest("McpServer", "ok-minimal", json!({})),
        ),
        (
            "server-every-field-at-an-edge",
            manifest(
                "McpServer",
                "ok-edges",
                json!({
                    "url": "https://mcp.example.com:8443/v1/mcp?tenant=a&user=b@example.com#frag",
                    "transport": "sse",
                    "credentials": {
                        "bearerToken": secret_ref(&long("t", 253), &long("k", 253)),
                        "headers": (0..16).map(|i| header(&format!("X-H{i}"))).collect::<Vec<_>>(),
                    },
                    "tls": {"caBundle": {"secretKeyRef": {"name": "ca.pem", "key": "_ca-1.crt"}}},
                    "tools": {
                        "allow": (0..256).map(|i| format!("t{i}*")).collect::<Vec<_>>(),
                        "deny": ["?", "*", tool_128.as_str()],
                        "overrides": (0..256)
                            .map(|i| (format!("Tool.{i}_-x"), json!(["read", "write", "destructive"][i % 3])))
                            .collect::<serde_json::Map<_, _>>(),
                        "requireApproval": [tool_128.as_str(), "a", "A.b_c-d"],
                    },
                    "optional": true,
                    "timeouts": {"connect": "5m", "call": "1h"},
                    "discovery": {"maxToolPages": 10000, "maxResponseBytes": 67108864, "refreshInterval": "24h"},
                    "retry": 10,
                }),
            ),
        ),
        (
            "server-lower-edges",
            manifest(
                "McpServer",
                "ok-lower-edges",
                json!({
                    "url": "http://127.0.0.1:18080/mcp",
                    "timeouts": {"connect": "1ms", "call": "0.001s"},
                    "discovery": {"maxToolPages": 1, "maxResponseBytes": 65536, "refreshInterval": "30s"},
                    "retry": 0,
                }),
            ),
        ),
        (
            "server-compound-durations",
            manifest(
                "McpServer",
                "ok-compound-durations",
                json!({
                    "timeouts": {"connect": "4m59s999ms", "call": "59m60s"},
                    "discovery": {"refreshInterval": "23h59m60s"},
                }),
            ),
        ),
        (
            // Digits after a decimal point and long millisecond counts are not mistaken for
            // numbers too large for their unit.
            "server-fractions-and-long-counts",
            manifest(
                "McpServer",
                "ok-fractions-and-long-counts",
                json!({
                    "timeouts": {"connect": "299999ms", "call": "0.9999999h"},
                    "discovery": {"refreshInterval": "1.1234567h"},
                }),
            ),
        ),
        (
            "server-authorization-header-without-bearer",
            manifest(
                "McpServer",
                "ok-authorization-header",
                json!({"credentials": {"headers": [header("Authorization")]}}),
            ),
        ),
        (
            "server-insecure-skip-verify",
            manifest(
                "McpServer",
                "ok-insecure",
                json!({"url": "https://10.0.0.1/mcp", "tls": {"insecureSkipVerify": true}}),
            ),
        ),
        (
            "server-configmap-ca-with-verify-false",
            manifest(
                "McpServer",
                "ok-ca-configmap",
                json!({"tls": {"insecureSkipVerify": false, "caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}}),
            ),
        ),
        (
            "agent-prefixes",
            manifest(
                "AgentSpec",
                "ok-prefixes",
                json!({
                    "servers": [
                        {"name": "files"},
                        {"name": "files.v2", "prefix": "files_v2"},
                        {"name": "other", "prefix": "files-2"},
                        {"name": "x", "prefix": long("P", 64), "allow": ["*"], "deny": ["a?"], "requireApproval": [tool_128.as_str()]},
                        {"name": "y", "resources": {"allow": [long("demo://resource/{id}/", 2048)], "deny": ["*secret*"]},
                         "prompts": {"allow": [long("p", 256), "simple-prompt"]}},
                    ],
                    "approval": "all",
                }),
            ),
        ),
        (
            "agent-64-servers",
            manifest(
                "AgentSpec",
                "ok-64-servers",
                json!({"servers": (0..64).map(|i| json!({"name": format!("s{i}")})).collect::<Vec<_>>(), "approval": "none"}),
            ),
        ),
        ("agent-name-63", {
            let mut m = manifest("AgentSpec", "x", json!({}));
            m["metadata"]["name"] = long("agent-", 63).into();
            m
        }),
        ("server-name-63", {
            let mut m = manifest("McpServer", "x", json!({}));
            m["metadata"]["name"] = long("server-", 63).into();
            m
        }),
        (
            "policy-selectors",
            manifest(
                "McpTenantPolicy",
                "ok-selectors",
                json!({
                    "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
                    "rules": [
                        {"servers": {"selector": {}}, "maxAccess": "read"},
                        {"servers": {"names": ["files"], "selector": {"matchLabels": {"tier": "admin"}}},
                         "allow": ["*"], "deny": ["delete_*"], "maxAccess": "destructive", "requireApprovalFor": "write"},
                    ],
                }),
            ),
        ),
        (
            "policy-no-rules",
            manifest("McpTenantPolicy", "ok-no-rules", json!({"rules": []})),
        ),
    ]
}

#[tokio::test]
async fn values_at_the_edges_are_accepted() {
    let (client, ns) = e2e::setup("edges").await;
    let mut wrong = vec![];
    for (case, manifest) in accepted_cases() {
        for how in [Write::Create, Write::ServerSideApply] {
            if let Err(e) = e2e::write(&client, how, &manifest, Some(ns.name()), true).await {
                wrong.push(format!("{case} ({how:?}): {}", describe(&e)));
            }
        }
    }
    assert!(wrong.is_empty(), "refused:\n{}", wrong.join("\n"));
}

/// True when every field of `wanted` is in `got` with the same value (`got` may have more).
fn contains(got: &Value, wanted: &Value, path: &str, differences: &mut Vec<String>) {
    match (got, wanted) {
        (Value::Object(got), Value::Object(wanted)) => {
            for (key, value) in wanted {
                let path = format!("{path}.{key}");
                match got.get(key) {
                    Some(got) => contains(got, value, &path, differences),
                    None => differences.push(format!("{path} was dropped")),
                }
            }
        }
        (got, wanted) if got != wanted => {
            differences.push(format!("{path}: stored {got}, applied {wanted}"))
        }
        _ => {}
    }
}

/// Every manifest in `examples/` applies as a user would apply it (server-side, unknown fields
/// refused) and is stored as written. The examples' namespace becomes this test's namespace;
/// their cluster-scoped objects are renamed after it and deleted with it.
#[tokio::test]
async fn every_example_is_accepted_as_written() {
    let (client, ns) = e2e::setup("examples").await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/ exists")
        .map(|e| e.expect("examples/ is readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    let mut kinds = std::collections::BTreeSet::new();
    let mut applied = 0;
    for path in &paths {
        for mut document in e2e::yaml_documents(path) {
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let what = format!("{} {kind} {name}", path.display());
            let (resource, scope) = e2e::resource_of(&client, &document).await;
            if kind == "Namespace" {
                // The example's namespace, labels and all, is this test's namespace.
                document["metadata"]["name"] = ns.name().into();
            } else if scope == kube::discovery::Scope::Cluster {
                document["metadata"]["name"] = ns.scoped_name(&name).into();
                ns.delete_later(resource.clone(), &ns.scoped_name(&name));
            }
            let stored = e2e::write(
                &client,
                Write::ServerSideApply,
                &document,
                Some(ns.name()),
                false,
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: refused: {}", describe(&e)));
            if document["apiVersion"] == API_VERSION {
                let stored = serde_json::to_value(&stored).expect("JSON");
                let mut differences = vec![];
                contains(&stored["spec"], &document["spec"], "spec", &mut differences);
                assert!(
                    differences.is_empty(),
                    "{what}: not stored as written: {differences:?}"
                );
                kinds.insert(kind);
            }
            applied += 1;
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["AgentSpec", "McpServer", "McpTenantPolicy"],
        "examples/ should show every kind"
    );
    eprintln!(
        "{applied} example objects from {} files accepted",
        paths.len()
    );
}

/// What `mcp-operator import` prints for each config in tests/fixtures/import/ (a VS Code
/// mcp.json, a Claude Code .mcp.json, a registry server.json) applies as printed, Secrets with
/// their empty keys included, and every McpServer is stored as written. (Named without the
/// word "import", so that `cargo test --test it import` stays off the control plane.)
#[tokio::test]
async fn converted_configs_apply_as_printed() {
    let (client, ns) = e2e::setup("converted").await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/import/ exists")
        .map(|e| e.expect("readable").path())
        .collect();
    paths.sort();
    let mut servers = 0;
    for path in &paths {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-operator"))
            .args(["import", "--namespace", ns.name(), "--prefix"])
            .arg(format!(
                "{}-",
                path.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .split(['.', '-'])
                    .next()
                    .unwrap()
            ))
            .arg(path)
            .output()
            .expect("mcp-operator runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        for document in serde_saphyr::from_multiple::<Value>(&text).expect("YAML") {
            let what = format!(
                "{}: {} {}",
                path.display(),
                document["kind"],
                document["metadata"]["name"]
            );
            let stored = e2e::write(
                &client,
                Write::ServerSideApply,
                &document,
                Some(ns.name()),
                false,
            )
            .await
            .unwrap_or_else(|e| panic!("{what}: refused: {}", describe(&e)));
            if document["apiVersion"] == API_VERSION {
                let stored = serde_json::to_value(&stored).expect("JSON");
                let mut differences = vec![];
                contains(&stored["spec"], &document["spec"], "spec", &mut differences);
                assert!(
                    differences.is_empty(),
                    "{what}: not stored as written: {differences:?}"
                );
                servers += 1;
            }
        }
    }
    // vscode-mcp.json 6, claude-code.mcp.json 5, registry-server.json 5.
    assert_eq!(servers, 16);
}

#[tokio::test]
async fn the_apiserver_fills_in_the_documented_defaults() {
    let (client, ns) = e2e::setup("defaults").await;
    let servers: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let minimal: McpServer = serde_json::from_value(manifest(
        "McpServer",
        "minimal",
        json!({"url": "http://127.0.0.1:18080/mcp"}),
    ))
    .expect("an McpServer");
    // Post the JSON itself: the typed value would send the Rust defaults along.
    let post = |m: Value| {
        let client = client.clone();
        let ns = ns.name().to_owned();
        async move {
            e2e::write(&client, Write::Create, &m, Some(&ns), false)
                .await
                .unwrap_or_else(|e| panic!("creating {}: {}", m["metadata"]["name"], describe(&e)))
        }
    };
    post(manifest(
        "McpServer",
        "minimal",
        json!({"url": "http://127.0.0.1:18080/mcp"}),
    ))
    .await;
    let stored = servers
        .get("minimal")
        .await
        .expect("the McpServer is stored");
    assert_eq!(
        serde_json::to_value(&stored.spec).unwrap(),
        json!({
            "url": "http://127.0.0.1:18080/mcp",
            "transport": "streamable-http",
            "optional": false,
            "timeouts": {"connect": "10s", "call": "30s"},
            "discovery": {"maxToolPages": 100, "maxResponseBytes": 4194304, "refreshInterval": "5m"},
            "retry": 2,
        }),
        "defaults of an McpServer with only a url"
    );
    // The apiserver and the Rust types agree on every default.
    assert_eq!(
        stored.spec, minimal.spec,
        "apiserver defaults vs Rust defaults"
    );

    // A partly written object gets the rest of each defaulted object filled in.
    post(manifest(
        "McpServer",
        "partial",
        json!({
            "timeouts": {"call": "2m"},
            "discovery": {"maxToolPages": 7},
            "tls": {"caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}},
        }),
    ))
    .await;
    let stored = serde_json::to_value(servers.get("partial").await.unwrap().spec).unwrap();
    assert_eq!(stored["timeouts"], json!({"connect": "10s", "call": "2m"}));
    assert_eq!(
        stored["discovery"],
        json!({"maxToolPages": 7, "maxResponseBytes": 4194304, "refreshInterval": "5m"})
    );
    assert_eq!(stored["tls"]["insecureSkipVerify"], false);
    assert!(stored.get("credentials").is_none() && stored.get("tools").is_none());

    post(manifest("AgentSpec", "minimal", json!({}))).await;
    let agent = Api::<AgentSpec>::namespaced(client.clone(), ns.name())
        .get("minimal")
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&agent.spec).unwrap(),
        json!({"servers": [{"name": "files"}], "approval": "destructive"})
    );

    let policy_name = ns.scoped_name("minimal");
    let mut policy = manifest("McpTenantPolicy", "x", json!({}));
    policy["metadata"]["name"] = policy_name.clone().into();
    ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);
    post(policy).await;
    let policy = Api::<McpTenantPolicy>::all(client.clone())
        .get(&policy_name)
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&policy.spec).unwrap(),
        json!({"namespaceSelector": {}, "rules": [{"servers": {"names": ["files"]}}]}),
        "McpTenantPolicy has no defaults to fill in"
    );

    // Written specs round-trip through the Rust types unchanged.
    let spec: McpServerSpec = serde_json::from_value(stored.clone()).unwrap();
    assert_eq!(serde_json::to_value(&spec).unwrap(), stored);
}

/// Status is a subresource with a schema of its own: conditions are a map keyed by type, in the
/// apimachinery shape.
#[tokio::test]
async fn status_conditions_are_checked_too() {
    let (client, ns) = e2e::setup("status").await;
    let servers: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    let server: McpServer =
        serde_json::from_value(manifest("McpServer", "status", json!({}))).unwrap();
    servers
        .create(&PostParams::default(), &server)
        .await
        .unwrap_or_else(|e| panic!("creating the McpServer: {}", describe(&e)));
    let condition = |type_: &str| {
        json!({
            "type": type_, "status": "False", "reason": "Timeout",
            "message": "no answer within 10s", "lastTransitionTime": "2026-01-01T00:00:00Z",
        })
    };
    let params = PatchParams::default();
    let write_status = |conditions: Value| {
        let servers = servers.clone();
        let params = params.clone();
        async move {
            servers
                .patch_status(
                    "status",
                    &params,
                    &Patch::Merge(json!({"status": {"conditions": conditions}})),
                )
                .await
        }
    };
    write_status(json!([condition("Ready"), condition("Reachable")]))
        .await
        .unwrap_or_else(|e| panic!("well-formed conditions refused: {}", describe(&e)));

    let mut without_reason = condition("Ready");
    without_reason.as_object_mut().unwrap().remove("reason");
    let cases = [
        (
            "condition-type-twice",
            json!([condition("Ready"), condition("Ready")]),
            vec!["status.conditions[1]", "Duplicate value"],
        ),
        (
            "condition-without-reason",
            json!([without_reason]),
            vec!["status.conditions[0].reason", "Required value"],
        ),
    ];
    let mut wrong = vec![];
    for (case, conditions, expect) in cases {
        match write_status(conditions).await {
            Ok(_) => wrong.push(format!("{case}: accepted")),
            Err(kube::Error::Api(s))
                if s.code == 422 && expect.iter().all(|e| s.message.contains(e)) => {}
            Err(e) => wrong.push(format!(
                "{case}: expected 422 with {expect:?}, got {}",
                describe(&e)
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `kubectl explain` reads the schema the apiserver publishes: the descriptions must survive
/// the round trip through the CRD and reach the OpenAPI document.
#[tokio::test]
async fn kubectl_explain_has_descriptions_to_show() {
    let client = e2e::client().await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = crds.get("mcpservers.mcp-operator.dev").await.unwrap();
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("a schema"),
    )
    .unwrap();
    let discovery = &schema["properties"]["spec"]["properties"]["discovery"];
    let description = discovery["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("Bounds and schedule of reading the tool catalogue"),
        "spec.discovery description: {description:?}"
    );
    for field in ["maxToolPages", "maxResponseBytes", "refreshInterval"] {
        let text = discovery["properties"][field]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.len() > 20,
            "spec.discovery.{field} description: {text:?}"
        );
    }

    // Every property of every spec, as stored, says what it is.
    fn undocumented(node: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(properties) = node["properties"].as_object() {
            for (name, child) in properties {
                let path = format!("{path}.{name}");
                if child["description"]
                    .as_str()
                    .is_none_or(|d| d.trim().is_empty())
                {
                    out.push(path.clone());
                }
                undocumented(child, &path, out);
            }
        }
        if node["items"].is_object() {
            undocumented(&node["items"], &format!("{path}[]"), out);
        }
    }
    for crd in crds.list(&Default::default()).await.unwrap() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        if !name.ends_with(".mcp-operator.dev") {
            continue;
        }
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .unwrap(),
        )
        .unwrap();
        let mut missing = vec![];
        // LabelSelector's own fields come documented from apimachinery.
        undocumented(&schema["properties"]["spec"], "spec", &mut missing);
        assert!(
            missing.is_empty(),
            "{name}: undocumented fields {missing:?}"
        );
    }

    // The published OpenAPI v3 document, which kubectl explain reads; it follows a CRD change
    // with a short delay.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let request = http::Request::get("/openapi/v3/apis/mcp-operator.dev/v1alpha1")
            .body(vec![])
            .unwrap();
        // Not found until the apiserver has published the group for the first time.
        let document: Value = client.request(request).await.unwrap_or_default();
        let published = document["components"]["schemas"]
            .as_object()
            .and_then(|schemas| {
                schemas
                    .iter()
                    .find(|(name, _)| name.ends_with(".McpServer"))
                    .map(|(_, s)| s.clone())
            })
            .unwrap_or_default();
        let text = published["properties"]["spec"]["properties"]["discovery"]["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if text.contains("Bounds and schedule of reading the tool catalogue") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the published OpenAPI has no description for McpServer spec.discovery: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The schema corpus in `src/api/testdata` against the real apiserver: every manifest of
/// `accepted.yaml` is accepted, every `rejected/*.yaml` is refused with the message its first
/// line (`# expect: ...`) names. Dry-run creates, as `kubectl apply` makes a new object: nothing
/// is stored.
#[tokio::test]
async fn the_schema_corpus_is_accepted_and_refused_with_its_messages() {
    let (client, ns) = e2e::setup("corpus").await;
    let testdata = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api/testdata");
    for document in e2e::yaml_documents(&testdata.join("accepted.yaml")) {
        let name = document["metadata"]["name"].clone();
        e2e::write(&client, Write::Create, &document, Some(ns.name()), true)
            .await
            .unwrap_or_else(|e| panic!("accepted.yaml {name}: refused: {}", describe(&e)));
    }
    let mut paths: Vec<_> = std::fs::read_dir(testdata.join("rejected"))
        .expect("src/api/testdata/rejected exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 30, "{} rejected cases", paths.len());
    let mut wrong = vec![];
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("a readable case");
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be `# expect: ...`", path.display()));
        for document in e2e::yaml_documents(path) {
            match e2e::write(&client, Write::Create, &document, Some(ns.name()), true).await {
                Ok(_) => wrong.push(format!("{}: accepted", path.display())),
                Err(e) if !describe(&e).contains(expect) => wrong.push(format!(
                    "{}: expected {expect:?}, got {}",
                    path.display(),
                    describe(&e)
                )),
                Err(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
