use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::api::tenant_policy::McpTenantPolicySpec;

fn server(spec: Value) -> McpServer {
    let mut s = McpServer::new("files", serde_json::from_value(spec).unwrap());
    s.metadata.namespace = Some("team-a".into());
    s
}

fn names(checks: &[SecretToCheck]) -> Vec<&str> {
    checks.iter().map(|c| c.name.as_str()).collect()
}

fn bearer(name: &str, key: &str) -> Value {
    json!({"bearerToken": {"secretKeyRef": {"name": name, "key": key}}})
}

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn tenant() -> UserInfo {
    UserInfo {
        username: Some("tenant-a".into()),
        groups: Some(vec!["system:authenticated".into()]),
        ..Default::default()
    }
}

#[test]
fn on_create_every_secret_the_spec_names_is_checked_once() {
    let s = server(json!({
        "url": "https://a.example/mcp",
        "credentials": {
            "bearerToken": {"secretKeyRef": {"name": "shared", "key": "token"}},
            "headers": [
                {"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "k"}}},
                {"name": "X-Other", "valueFrom": {"secretKeyRef": {"name": "shared", "key": "o"}}},
            ],
        },
        "tls": {"caBundle": {"secretKeyRef": {"name": "ca", "key": "ca.crt"}}},
    }));
    let checks = secrets_to_check(None, &s.spec);
    assert_eq!(names(&checks), ["shared", "keys", "ca"]);
    assert_eq!(checks[0].field, "spec.credentials.bearerToken.secretKeyRef");
    assert_eq!(checks[2].field, "spec.tls.caBundle.secretKeyRef");

    let stdio = server(
        json!({"stdio": {"image": "node:22-slim", "command": ["npx"], "env": [
            {"name": "A", "value": "literal"},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "env", "key": "b"}}},
        ]}}),
    );
    assert_eq!(names(&secrets_to_check(None, &stdio.spec)), ["env"]);

    // A CA bundle from a ConfigMap, and no credentials: nothing to ask.
    let plain = server(json!({"url": "https://a.example/mcp",
        "tls": {"caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}}}));
    assert!(secrets_to_check(None, &plain.spec).is_empty());
}

#[test]
fn on_update_an_admins_existing_reference_does_not_block_other_edits() {
    let old =
        server(json!({"url": "https://a.example/mcp", "credentials": bearer("admin-token", "t")}));
    // Another field edited (the refresh interval, tools, a label elsewhere): nothing to ask.
    let edited = server(
        json!({"url": "https://a.example/mcp", "credentials": bearer("admin-token", "t"),
        "discovery": {"refreshInterval": "10m"}, "tools": {"deny": ["wipe"]}}),
    );
    assert!(secrets_to_check(Some(&old.spec), &edited.spec).is_empty());

    // Another Secret, or another key of the same Secret: a new value sent, so asked.
    let other =
        server(json!({"url": "https://a.example/mcp", "credentials": bearer("other", "t")}));
    assert_eq!(
        names(&secrets_to_check(Some(&old.spec), &other.spec)),
        ["other"]
    );
    let other_key = server(
        json!({"url": "https://a.example/mcp", "credentials": bearer("admin-token", "root")}),
    );
    assert_eq!(
        names(&secrets_to_check(Some(&old.spec), &other_key.spec)),
        ["admin-token"]
    );

    // A header added next to the admin's token: only the new one is asked.
    let added = server(json!({"url": "https://a.example/mcp", "credentials": {
        "bearerToken": {"secretKeyRef": {"name": "admin-token", "key": "t"}},
        "headers": [{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "k"}}}]}}));
    assert_eq!(
        names(&secrets_to_check(Some(&old.spec), &added.spec)),
        ["mine"]
    );
}

#[test]
fn on_update_secrets_are_checked_again_when_their_values_would_go_elsewhere() {
    let old =
        server(json!({"url": "https://a.example/mcp", "credentials": bearer("admin-token", "t")}));
    // The admin's token pointed at another URL: the tenant would read it there.
    let moved = server(
        json!({"url": "https://evil.example/mcp", "credentials": bearer("admin-token", "t")}),
    );
    assert_eq!(
        names(&secrets_to_check(Some(&old.spec), &moved.spec)),
        ["admin-token"]
    );
    // Certificates no longer verified: anyone on the path could read it.
    let unverified = server(
        json!({"url": "https://a.example/mcp", "credentials": bearer("admin-token", "t"),
        "tls": {"insecureSkipVerify": true}}),
    );
    assert_eq!(
        names(&secrets_to_check(Some(&old.spec), &unverified.spec)),
        ["admin-token"]
    );

    // A CA Secret moved into a header: same Secret and key, but now sent.
    let ca = server(json!({"url": "https://a.example/mcp",
        "tls": {"caBundle": {"secretKeyRef": {"name": "ca", "key": "ca.crt"}}}}));
    let sent =
        server(json!({"url": "https://a.example/mcp", "credentials": bearer("ca", "ca.crt")}));
    assert_eq!(names(&secrets_to_check(Some(&ca.spec), &sent.spec)), ["ca"]);

    // A stdio server given another command or image: its environment goes to other code.
    let stdio = |image: &str, command: &str| {
        server(
            json!({"stdio": {"image": image, "command": [command], "env": [
            {"name": "K", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}]}}),
        )
    };
    let base = stdio("node:22-slim", "npx");
    assert!(secrets_to_check(Some(&base.spec), &stdio("node:22-slim", "npx").spec).is_empty());
    assert_eq!(
        names(&secrets_to_check(
            Some(&base.spec),
            &stdio("evil:1", "npx").spec
        )),
        ["env"]
    );
    assert_eq!(
        names(&secrets_to_check(
            Some(&base.spec),
            &stdio("node:22-slim", "sh").spec
        )),
        ["env"]
    );
}

fn with_approvals(annotation: Option<&str>, approved: &[(&str, String)]) -> McpServer {
    let approved: BTreeMap<String, String> = approved
        .iter()
        .map(|(t, d)| (t.to_string(), d.clone()))
        .collect();
    let mut s = server(json!({"url": "https://a.example/mcp", "pinning": {"approved": approved}}));
    if let Some(a) = annotation {
        s.metadata.annotations = Some(BTreeMap::from([(
            APPROVE_ANNOTATION.to_string(),
            a.to_string(),
        )]));
    }
    s
}

#[test]
fn approvals_are_a_right_only_where_a_policy_requires_pinning() {
    let old = with_approvals(None, &[]);
    let new = with_approvals(Some(&digest('a')), &[("write_file", digest('b'))]);
    // No policy picks the server: the owner approves as before.
    assert!(approvals_given(Some(&old), &new, false, false).is_empty());
    // Under a policy: both the annotation's digest and the spec entry are given.
    assert_eq!(
        approvals_given(Some(&old), &new, true, true),
        [
            format!("{APPROVE_ANNOTATION} {}", digest('a')),
            format!("spec.pinning.approved write_file={}", digest('b')),
        ]
    );
    // On CREATE (no old object) the same.
    assert_eq!(approvals_given(None, &new, false, true).len(), 2);
    // Unchanged approvals on another edit: nothing given.
    assert!(approvals_given(Some(&new), &new.clone(), true, true).is_empty());
    // Withdrawn: nothing given.
    assert!(approvals_given(Some(&new), &old, true, true).is_empty());
    // One digest added to the annotation (spaces and commas as the controller reads them).
    let more = with_approvals(
        Some(&format!("{}, {}", digest('a'), digest('c'))),
        &[("write_file", digest('b'))],
    );
    assert_eq!(
        approvals_given(Some(&new), &more, true, true),
        [format!("{APPROVE_ANNOTATION} {}", digest('c'))]
    );
    // An entry of spec.pinning.approved changed to another digest: given.
    let changed = with_approvals(Some(&digest('a')), &[("write_file", digest('d'))]);
    assert_eq!(
        approvals_given(Some(&new), &changed, true, true),
        [format!("spec.pinning.approved write_file={}", digest('d'))]
    );
    // Moved out of the policy's reach in the same request that approves: still given.
    assert_eq!(approvals_given(Some(&old), &new, true, false).len(), 2);
    // Moved into its reach (a label added) carrying approvals given without the right: all
    // of them count.
    assert_eq!(
        approvals_given(Some(&new), &new.clone(), false, true).len(),
        2
    );
    assert!(may_give_approvals(&new));
    assert!(!may_give_approvals(&old));
}

fn policy(name: &str, spec: Value) -> McpTenantPolicy {
    McpTenantPolicy::new(
        name,
        serde_json::from_value::<McpTenantPolicySpec>(spec).unwrap(),
    )
}

#[test]
fn the_policies_requiring_pinning_are_the_controllers_and_not_the_servers_own_spec() {
    let mut s = server(json!({"url": "https://a.example/mcp", "pinning": {"enabled": true}}));
    s.metadata.labels = Some(BTreeMap::from([("tier".to_string(), "prod".to_string())]));
    let policies = [
        policy(
            "by-name",
            json!({"namespaceSelector": {}, "rules": [
            {"servers": {"names": ["files"]}, "requirePinning": true}]}),
        ),
        policy(
            "by-label",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "rules": [
            {"servers": {"selector": {"matchLabels": {"tier": "prod"}}}, "requirePinning": true}]}),
        ),
        policy(
            "not-pinning",
            json!({"namespaceSelector": {}, "rules": [
            {"servers": {"names": ["files"]}}]}),
        ),
        policy(
            "other-server",
            json!({"namespaceSelector": {}, "rules": [
            {"servers": {"names": ["other"]}, "requirePinning": true}]}),
        ),
    ];
    let team_a = BTreeMap::from([("team".to_string(), "a".to_string())]);
    assert_eq!(
        pinning_policies(&s, policies.iter(), &team_a),
        ["McpTenantPolicy/by-label", "McpTenantPolicy/by-name"]
    );
    assert_eq!(
        pinning_policies(&s, policies.iter(), &BTreeMap::new()),
        ["McpTenantPolicy/by-name"]
    );
    // The server's own spec.pinning.enabled alone: the owner approves.
    assert!(pinning_policies(&s, policies[2..].iter(), &team_a).is_empty());
}

#[test]
fn refusals_name_the_secret_the_field_the_permission_and_what_to_do() {
    let message = secrets_refusal(
        &tenant(),
        "team-a",
        &[SecretToCheck {
            name: "admin-token".into(),
            field: "spec.credentials.bearerToken.secretKeyRef".into(),
        }],
    );
    assert_eq!(
        message,
        "user \"tenant-a\" may not get Secret \"admin-token\" in namespace \"team-a\" (named by \
         spec.credentials.bearerToken.secretKeyRef): the operator would read it on your behalf. \
         Ask for get on it, or have someone who may read it create or change this McpServer"
    );
    assert!(!message.contains("exist"), "{message}");

    let given: Vec<String> = (0..7).map(|i| format!("approval {i}")).collect();
    let message = approvals_refusal(
        &tenant(),
        "team-a",
        "files",
        &["McpTenantPolicy/platform".into()],
        &given,
        "mcp-operator-pin-approver",
    );
    for part in [
        "user \"tenant-a\" may not approve tool or prompt definitions of McpServer \"files\" in namespace \"team-a\"",
        "approval 4 and 2 more",
        "McpTenantPolicy/platform requires pinning for it",
        "the verb approve on mcpservers/approval (group mcp-operator.dev)",
        "ClusterRole mcp-operator-pin-approver",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert!(!message.contains("approval 5"), "{message}");
}

#[test]
fn the_review_asks_for_the_requests_user_exactly() {
    let user = UserInfo {
        username: Some("alice".into()),
        groups: Some(vec!["devs".into(), "system:authenticated".into()]),
        uid: Some("u-1".into()),
        extra: Some(BTreeMap::from([(
            "scopes".to_string(),
            vec!["a".to_string()],
        )])),
    };
    let review = review_for(&user, get_secret("team-a", "token"));
    assert_eq!(
        serde_json::to_value(&review.spec).unwrap(),
        json!({
            "user": "alice",
            "groups": ["devs", "system:authenticated"],
            "uid": "u-1",
            "extra": {"scopes": ["a"]},
            "resourceAttributes": {"group": "", "resource": "secrets", "verb": "get",
                                   "namespace": "team-a", "name": "token"},
        })
    );
    let approve = serde_json::to_value(approve_pins("team-a", "files")).unwrap();
    assert_eq!(
        approve,
        json!({"group": "mcp-operator.dev", "resource": "mcpservers", "subresource": "approval",
               "verb": "approve", "namespace": "team-a", "name": "files"})
    );
}
