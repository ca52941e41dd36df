//! The McpServer → connection mapping: what `mcp::read_server` and the list_changed watch are
//! given for one McpServer, from its spec and its resolved credentials. Pure.

use crate::api::mcp_server::McpServerSpec;
use crate::core::Limits;
use crate::mcp::{EndpointPolicy, ResponseBudget, ServerConnection};

use crate::controller::mcp_server::credentials::Resolved;

/// How to reach the server the spec describes at `url` (spec.url, or a stdio server's Service),
/// with the credentials resolved for it; its responses draw on the controller's `budget`.
pub fn connection(
    spec: &McpServerSpec,
    url: &str,
    resolved: Resolved,
    allow_loopback: bool,
    budget: Option<ResponseBudget>,
) -> ServerConnection {
    ServerConnection {
        url: url.to_string(),
        transport: spec.transport,
        credentials: resolved.credentials,
        tls: resolved.tls,
        limits: Limits {
            connect_timeout: spec.timeouts.connect.as_std(),
            max_tool_pages: spec.discovery.max_tool_pages,
            max_response_bytes: spec.discovery.max_response_bytes,
        },
        endpoint_policy: EndpointPolicy { allow_loopback },
        budget,
        // The controller's reads never reserve ahead (they can be tried again).
        reservations: None,
    }
}

/// What, when it changes, calls for a new list_changed subscription: URL, transport and the
/// resolved credential values (as their digest).
pub fn identity(spec: &McpServerSpec, url: &str, credentials_digest: &str) -> String {
    format!("{url}\0{:?}\0{credentials_digest}", spec.transport)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::core::Transport;
    use crate::mcp::{Credentials, SecretValue, TlsSettings};

    fn resolved() -> Resolved {
        Resolved {
            credentials: Credentials {
                bearer_token: Some(SecretValue::new("t")),
                headers: vec![("X-Key".into(), SecretValue::new("k"))],
                oauth2: None,
            },
            tls: TlsSettings {
                ca_pem: Some(b"PEM".to_vec()),
                insecure_skip_verify: false,
            },
            digest: "d1".into(),
            references_changed: Vec::new(),
        }
    }

    #[test]
    fn the_spec_and_resolved_credentials_become_the_connection() {
        let spec: McpServerSpec = serde_json::from_value(json!({
            "url": "https://mcp.example.com/mcp",
            "transport": "sse",
            "timeouts": {"connect": "1m30s"},
            "discovery": {"maxToolPages": 7, "maxResponseBytes": 65536},
        }))
        .unwrap();
        let conn = connection(&spec, "https://mcp.example.com/mcp", resolved(), true, None);
        assert_eq!(conn.url, "https://mcp.example.com/mcp");
        assert_eq!(conn.transport, Transport::Sse);
        assert_eq!(conn.limits.connect_timeout, Duration::from_secs(90));
        assert_eq!(conn.limits.max_tool_pages, 7);
        assert_eq!(conn.limits.max_response_bytes, 65536);
        assert!(conn.endpoint_policy.allow_loopback);
        assert_eq!(conn.credentials.bearer_token.unwrap().expose(), "t");
        assert_eq!(conn.credentials.headers[0].0, "X-Key");
        assert_eq!(conn.tls.ca_pem.as_deref(), Some(&b"PEM"[..]));
    }

    #[test]
    fn defaults_are_the_documented_limits_and_loopback_follows_the_flag() {
        let spec: McpServerSpec =
            serde_json::from_value(json!({"url": "http://mcp.example.com/mcp"})).unwrap();
        let conn = connection(&spec, "http://mcp.example.com/mcp", resolved(), false, None);
        let defaults = Limits::default();
        assert_eq!(conn.transport, Transport::StreamableHttp);
        assert_eq!(conn.limits.connect_timeout, defaults.connect_timeout);
        assert_eq!(conn.limits.max_tool_pages, defaults.max_tool_pages);
        assert_eq!(conn.limits.max_response_bytes, defaults.max_response_bytes);
        assert!(!conn.endpoint_policy.allow_loopback);
    }

    #[test]
    fn the_identity_changes_with_url_transport_or_credentials() {
        let spec: McpServerSpec = serde_json::from_value(json!({"url": "http://a/mcp"})).unwrap();
        let mut sse = spec.clone();
        sse.transport = Transport::Sse;
        let a = "http://a/mcp";
        let base = identity(&spec, a, "d1");
        assert_eq!(base, identity(&spec, a, "d1"));
        for other in [
            identity(&sse, a, "d1"),
            identity(&spec, "http://b/mcp", "d1"),
            identity(&spec, a, "d2"),
        ] {
            assert_ne!(base, other);
        }
    }
}
