//! Which McpServers a McpTenantPolicy rule picks: by name, by labels (`servers.selector`), and,
//! when `servers.urls` is set, only at a URL the platform names. Pure: the AgentSpec reconciler
//! (what the rules bound) and the McpServer reconciler (which rules require pinning) both call
//! [`pick`], so both read a rule the same way.
//!
//! ```text
//!  rule.servers { names, selector, urls }
//!        │ names ∋ server name  ∨  selector matches its labels   (or neither given: urls alone)
//!        │ ∧ urls (when set): some pattern matches spec.url       (stdio: no spec.url, never)
//!        ▼
//!  picked: the rule bounds the server
//! ```
//!
//! Why urls: a tenant names its McpServers and labels them, so a rule that picks by name or
//! label picks whatever the tenant makes match. Under rules that bound (a match only narrows)
//! that cannot widen the grants, but it cannot keep a server out of a permissive rule either;
//! the URL says what the server *is*, and a URL pattern keeps a rule's permission to the hosts
//! the platform means.
//!
//! A URL pattern is `[scheme://]host[:port][/path]`, compared part by part with the parsed URL,
//! never as one string (so `*.corp.example` cannot match `https://evil.example/x.corp.example`
//! or `https://mcp.corp.example.evil.example`): the host pattern with the URL's host
//! (lower-cased, without user part or port), the port pattern with the URL's port (the scheme's
//! default when it names none), the path pattern with the whole path. A part the pattern leaves
//! out accepts anything. `*` matches any run of characters, `?` one.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::mcp_server::McpServer;
use crate::api::tenant_policy::{McpTenantPolicy, ServerSelector};
use crate::controller::shared::selector;
use crate::grants::Pattern;

/// Whether a policy applies to a namespace with these labels. An invalid namespaceSelector
/// selects every namespace (fail closed).
pub fn policy_selects(
    policy: &McpTenantPolicy,
    namespace_labels: &BTreeMap<String, String>,
) -> bool {
    selector::matches(&policy.spec.namespace_selector, namespace_labels).unwrap_or(true)
}

/// Whether a rule picks a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    Picked,
    NotPicked,
    /// Only the rule's label selector could pick it, and the selector cannot be evaluated (the
    /// policy's status says why). Callers fail closed: the rule's bounds hold for the server,
    /// but the rule does not let it in.
    Unknown,
}

/// Whether a rule's `servers` picks the McpServer `name` (`server`: None when it does not
/// exist). A missing server is picked by name only, and never by a rule with urls: it has no
/// URL.
pub fn pick(servers: &ServerSelector, name: &str, server: Option<&McpServer>) -> Pick {
    if !servers.urls.is_empty() {
        let url = server.and_then(|s| s.spec.url.as_deref());
        if !url.is_some_and(|url| servers.urls.iter().any(|p| url_matches(p, url))) {
            return Pick::NotPicked;
        }
        if servers.names.is_empty() && servers.selector.is_none() {
            return Pick::Picked;
        }
    }
    if servers.names.iter().any(|n| n == name) {
        return Pick::Picked;
    }
    match (&servers.selector, server) {
        (Some(s), Some(server)) => match selector::matches(s, server.labels()) {
            Ok(true) => Pick::Picked,
            Ok(false) => Pick::NotPicked,
            Err(_) => Pick::Unknown,
        },
        _ => Pick::NotPicked,
    }
}

/// Whether a `servers.urls` pattern matches a URL. An unparseable URL matches nothing.
pub fn url_matches(pattern: &str, url: &str) -> bool {
    let Ok(url) = url::Url::parse(url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let pattern = UrlPattern::parse(pattern);
    let glob = |p: &str, text: &str| Pattern::new(p).matches(text);
    pattern.scheme.is_none_or(|s| glob(&s, url.scheme()))
        && glob(&pattern.host, &host.to_ascii_lowercase())
        && pattern.port.is_none_or(|p| {
            url.port_or_known_default()
                .is_some_and(|port| glob(p, &port.to_string()))
        })
        && pattern.path.is_none_or(|p| glob(p, url.path()))
}

/// Why a `servers.urls` pattern can never match, if it cannot: a sentence for the policy's
/// status. The CRD schema already limits the characters.
pub fn check_url_pattern(pattern: &str) -> Result<(), String> {
    let parsed = UrlPattern::parse(pattern);
    if parsed.host.is_empty() {
        return Err(format!(
            "the urls pattern {pattern:?} names no host; write a host such as \
             mcp.corp.example or *.corp.example, optionally with a scheme, port and path"
        ));
    }
    if let Some(port) = parsed.port
        && (port.is_empty()
            || !port
                .chars()
                .all(|c| c.is_ascii_digit() || c == '*' || c == '?'))
    {
        return Err(format!(
            "the urls pattern {pattern:?} has port {port:?}; a port is digits (or * and ?)"
        ));
    }
    Ok(())
}

/// A `servers.urls` pattern split into the parts a URL is compared by.
struct UrlPattern<'p> {
    scheme: Option<String>,
    host: String,
    port: Option<&'p str>,
    path: Option<&'p str>,
}

impl<'p> UrlPattern<'p> {
    fn parse(pattern: &'p str) -> Self {
        let (scheme, rest) = match pattern.split_once("://") {
            Some((scheme, rest)) => (Some(scheme.to_ascii_lowercase()), rest),
            None => (None, pattern),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        // A port follows the last ':' unless it is inside an IPv6 literal's brackets.
        let (host, port) = match authority.rfind(':') {
            Some(i) if !authority[i..].contains(']') => {
                (&authority[..i], Some(&authority[i + 1..]))
            }
            _ => (authority, None),
        };
        UrlPattern {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path,
        }
    }
}

/// What [`pinning_required_by`] says when the server's own spec turns pinning on.
pub const PINNING_BY_SPEC: &str = "spec.pinning.enabled";

/// What turns pinning on for `server`: its spec, and every policy that selects its namespace
/// (an invalid namespaceSelector selects every namespace: fail closed) with any rule that
/// requires pinning and picks the server (by name, labels or URL, as the grants read it; a
/// rule whose label selector cannot be evaluated counts as picking it: fail closed). One such
/// rule is enough, whatever the policy's other rules say. The McpServer reconciler turns
/// pinning on with it; the admission check asks it who may approve.
pub fn pinning_required_by<'a>(
    server: &McpServer,
    policies: impl IntoIterator<Item = &'a McpTenantPolicy>,
    namespace_labels: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut by = Vec::new();
    if server.spec.pinning.as_ref().is_some_and(|p| p.enabled) {
        by.push(PINNING_BY_SPEC.to_string());
    }
    let name = server.name_any();
    let mut policies: Vec<String> = policies
        .into_iter()
        .filter(|p| policy_selects(p, namespace_labels))
        .filter(|p| {
            p.spec.rules.iter().any(|rule| {
                rule.require_pinning && pick(&rule.servers, &name, Some(server)) != Pick::NotPicked
            })
        })
        .map(|p| format!("McpTenantPolicy/{}", p.name_any()))
        .collect();
    policies.sort();
    by.extend(policies);
    by
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{labels, policy, server};
    use serde_json::{Value, json};

    fn selector(v: Value) -> ServerSelector {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn policies_select_namespaces_and_invalid_selectors_fail_closed() {
        let team_a = policy(
            "p",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "rules": []}),
        );
        assert!(policy_selects(&team_a, &labels(&[("team", "a")])));
        assert!(!policy_selects(&team_a, &labels(&[("team", "b")])));
        let broken = policy(
            "p",
            json!({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "in", "values": ["a"]}]}, "rules": []}),
        );
        assert!(policy_selects(&broken, &labels(&[("team", "b")])));
    }

    #[test]
    fn a_host_pattern_matches_the_host_and_nothing_around_it() {
        for (pattern, url, matches) in [
            ("mcp.corp.example", "https://mcp.corp.example/mcp", true),
            ("mcp.corp.example", "http://mcp.corp.example:8080/", true),
            ("MCP.Corp.Example", "https://mcp.corp.example/mcp", true),
            ("mcp.corp.example", "https://MCP.CORP.EXAMPLE/mcp", true),
            ("*.corp.example", "https://a.b.corp.example/mcp", true),
            ("*.corp.example", "https://corp.example/mcp", false),
            (
                "*.corp.example",
                "https://mcp.corp.example.evil.example/mcp",
                false,
            ),
            (
                "*.corp.example",
                "https://evil.example/x.corp.example",
                false,
            ),
            (
                "*.corp.example",
                "https://evil.example/?u=a.corp.example",
                false,
            ),
            (
                "mcp.corp.example",
                "https://mcp.corp.example.evil.example/",
                false,
            ),
            ("mcp-?.corp.example", "https://mcp-1.corp.example/", true),
            ("mcp-?.corp.example", "https://mcp-12.corp.example/", false),
            ("10.0.0.*", "http://10.0.0.7:9000/mcp", true),
            ("mcp.corp.example", "not a url", false),
        ] {
            assert_eq!(url_matches(pattern, url), matches, "{pattern} vs {url}");
        }
    }

    #[test]
    fn scheme_port_and_path_narrow_when_given() {
        for (pattern, url, matches) in [
            (
                "https://mcp.corp.example",
                "https://mcp.corp.example/any/path",
                true,
            ),
            (
                "https://mcp.corp.example",
                "http://mcp.corp.example/mcp",
                false,
            ),
            (
                "mcp.corp.example:8443",
                "https://mcp.corp.example:8443/mcp",
                true,
            ),
            (
                "mcp.corp.example:8443",
                "https://mcp.corp.example/mcp",
                false,
            ),
            ("mcp.corp.example:443", "https://mcp.corp.example/mcp", true),
            (
                "https://mcp.corp.example/mcp",
                "https://mcp.corp.example/mcp",
                true,
            ),
            (
                "https://mcp.corp.example/mcp",
                "https://mcp.corp.example/mcp/x",
                false,
            ),
            (
                "https://mcp.corp.example/team-a/*",
                "https://mcp.corp.example/team-a/mcp",
                true,
            ),
            (
                "https://mcp.corp.example/team-a/*",
                "https://mcp.corp.example/team-b/mcp",
                false,
            ),
            (
                "http*://*.corp.example/*",
                "http://x.corp.example/mcp",
                true,
            ),
        ] {
            assert_eq!(url_matches(pattern, url), matches, "{pattern} vs {url}");
        }
    }

    #[test]
    fn patterns_that_cannot_match_are_explained() {
        assert!(check_url_pattern("*.corp.example").is_ok());
        assert!(check_url_pattern("https://mcp.corp.example:84*/mcp").is_ok());
        let no_host = check_url_pattern("https:///mcp").unwrap_err();
        assert!(no_host.contains("names no host"), "{no_host}");
        let port = check_url_pattern("mcp.corp.example:https").unwrap_err();
        assert!(port.contains("a port is digits"), "{port}");
    }

    #[test]
    fn urls_restrict_names_and_labels_and_alone_pick_by_url() {
        let corp = server(
            "files",
            json!({"tier": "admin"}),
            json!({"url": "https://files.corp.example/mcp"}),
            Value::Null,
        );
        let elsewhere = server(
            "files",
            json!({"tier": "admin"}),
            json!({"url": "https://files.evil.example/mcp"}),
            Value::Null,
        );
        let stdio = server(
            "files",
            json!({"tier": "admin"}),
            json!({"stdio": {"image": "x", "command": ["x"]}}),
            Value::Null,
        );
        let by_name = selector(json!({"names": ["files"]}));
        let by_label = selector(json!({"selector": {"matchLabels": {"tier": "admin"}}}));
        let name_and_url = selector(json!({"names": ["files"], "urls": ["*.corp.example"]}));
        let label_and_url = selector(
            json!({"selector": {"matchLabels": {"tier": "admin"}}, "urls": ["*.corp.example"]}),
        );
        let url_only = selector(json!({"urls": ["*.corp.example"]}));

        let picked = |rule: &ServerSelector, name: &str, server: Option<&McpServer>| {
            pick(rule, name, server) == Pick::Picked
        };
        for s in [&corp, &elsewhere, &stdio] {
            assert!(picked(&by_name, "files", Some(s)));
            assert!(picked(&by_label, "files", Some(s)));
        }
        for rule in [&name_and_url, &label_and_url, &url_only] {
            assert!(picked(rule, "files", Some(&corp)), "{rule:?}");
            assert!(!picked(rule, "files", Some(&elsewhere)), "{rule:?}");
            assert!(
                !picked(rule, "files", Some(&stdio)),
                "stdio has no URL: {rule:?}"
            );
            assert!(!picked(rule, "files", None), "a missing server has no URL");
        }
        assert!(!picked(&url_only, "other", Some(&elsewhere)));
        assert!(picked(&by_name, "files", None), "a missing server by name");
        assert!(!picked(&by_label, "files", None));
        assert!(
            !picked(&name_and_url, "other", Some(&corp)),
            "the name must match too"
        );
        let invalid = selector(
            json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}}),
        );
        assert_eq!(pick(&invalid, "files", Some(&corp)), Pick::Unknown);
        let invalid_elsewhere = selector(json!({
            "selector": {"matchExpressions": [{"key": "tier", "operator": "Bogus"}]},
            "urls": ["*.corp.example"],
        }));
        assert_eq!(
            pick(&invalid_elsewhere, "files", Some(&elsewhere)),
            Pick::NotPicked,
            "the URL decides before the selector is needed"
        );
    }

    fn pinned_server(spec: Value, labels: Value) -> McpServer {
        server("files", labels, spec, Value::Null)
    }

    #[test]
    fn pinning_is_required_by_the_spec_or_a_policy_that_picks_the_server() {
        let plain = pinned_server(json!({"url": "http://x/mcp"}), json!({}));
        let none: Vec<McpTenantPolicy> = Vec::new();
        assert!(pinning_required_by(&plain, none.iter(), &BTreeMap::new()).is_empty());
        let on = pinned_server(
            json!({"url": "http://x/mcp", "pinning": {"enabled": true}}),
            json!({}),
        );
        assert_eq!(
            pinning_required_by(&on, none.iter(), &BTreeMap::new()),
            vec![PINNING_BY_SPEC]
        );
    }

    #[test]
    fn a_policy_requires_pinning_for_the_servers_its_rules_pick() {
        let labelled = pinned_server(json!({"url": "http://x/mcp"}), json!({"tier": "prod"}));
        let ns = labels(&[("team", "a")]);
        let policies = [
            policy(
                "by-label",
                json!({"namespaceSelector": {"matchLabels": {"team": "a"}},
                       "rules": [{"servers": {"selector": {"matchLabels": {"tier": "prod"}}},
                                  "requirePinning": true}]}),
            ),
            policy(
                "by-name",
                json!({"namespaceSelector": {}, "rules": [
                    {"servers": {"names": ["other"]}, "requirePinning": true},
                    {"servers": {"names": ["files"]}}]}),
            ),
            policy(
                "other-tenant",
                json!({"namespaceSelector": {"matchLabels": {"team": "b"}},
                       "rules": [{"servers": {"names": ["files"]}, "requirePinning": true}]}),
            ),
            policy(
                "broken-selector",
                json!({"namespaceSelector": {"matchExpressions": [{"key": "k", "operator": "Bogus"}]},
                       "rules": [{"servers": {"names": ["files"]}, "requirePinning": true}]}),
            ),
        ];
        assert_eq!(
            pinning_required_by(&labelled, policies.iter(), &ns),
            vec![
                "McpTenantPolicy/broken-selector",
                "McpTenantPolicy/by-label"
            ]
        );
    }

    #[test]
    fn pinning_follows_urls_and_an_unreadable_server_selector_pins() {
        let corp = pinned_server(json!({"url": "https://files.corp.example/mcp"}), json!({}));
        let elsewhere = pinned_server(json!({"url": "https://files.evil.example/mcp"}), json!({}));
        let ns = BTreeMap::new();
        let policies = [
            policy(
                "corp-hosts",
                json!({"namespaceSelector": {}, "rules": [
                    {"servers": {"urls": ["*.corp.example"]}, "requirePinning": true}]}),
            ),
            policy(
                "unreadable",
                json!({"namespaceSelector": {}, "rules": [
                    {"servers": {"selector": {"matchExpressions": [{"key": "k", "operator": "Bogus"}]}},
                     "requirePinning": true}]}),
            ),
            policy(
                "files-on-corp",
                json!({"namespaceSelector": {}, "rules": [
                    {"servers": {"names": ["files"], "urls": ["*.corp.example"]},
                     "requirePinning": true}]}),
            ),
        ];
        assert_eq!(
            pinning_required_by(&corp, policies.iter(), &ns),
            vec![
                "McpTenantPolicy/corp-hosts",
                "McpTenantPolicy/files-on-corp",
                "McpTenantPolicy/unreadable"
            ]
        );
        assert_eq!(
            pinning_required_by(&elsewhere, policies.iter(), &ns),
            vec!["McpTenantPolicy/unreadable"]
        );
    }
}
