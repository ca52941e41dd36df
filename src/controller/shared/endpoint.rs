//! How a sidecar reaches an McpServer, as the grants document says it: the URL, transport and
//! negotiated protocol, the timeouts and bounds, and every credential and CA bundle as a
//! *reference* to a Secret or ConfigMap key, never a value. The AgentSpec reconciler fills the
//! published document's endpoints with it; the pod webhook projects the keys it references.

use std::collections::BTreeMap;

use crate::api::mcp_server::{McpServer, OAuth2GrantType};
use crate::grants::{Endpoint, GrantsDocument, HeaderReference, OAuth2Reference, TlsReference};

/// How the sidecar reaches an McpServer: everything from its spec and the negotiated protocol
/// from its status. Credentials and CA bundles are references to Secret/ConfigMap keys.
pub fn endpoint(server: &McpServer) -> Endpoint {
    let spec = &server.spec;
    let status = server.status.as_ref();
    // A stdio server's bearer token is the operator's Secret: the sidecars send it like any.
    let credentials = server.credentials();
    let credentials = credentials.as_ref();
    Endpoint {
        // A stdio server's URL is its Service's, from status; a server without one yet is not
        // Ready, so nothing is granted from it.
        url: server.endpoint_url().unwrap_or_default().to_string(),
        transport: spec.transport,
        era: status.and_then(|s| s.era),
        protocol_version: status.and_then(|s| s.protocol_version.clone()),
        bearer_token: credentials
            .and_then(|c| c.bearer_token.as_ref())
            .map(|b| b.secret_key_ref.clone()),
        headers: credentials
            .map(|c| {
                c.headers
                    .iter()
                    .map(|h| HeaderReference {
                        name: h.name.clone(),
                        secret_key_ref: h.value_from.secret_key_ref.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        oauth2: credentials
            .and_then(|c| c.oauth2.as_ref())
            .map(|o| OAuth2Reference {
                token_url: o.token_url.clone(),
                client_id: o.client_id.clone(),
                client_secret: o.client_secret.as_ref().map(|r| r.secret_key_ref.clone()),
                refresh_token: match o.grant_type {
                    OAuth2GrantType::RefreshToken => {
                        o.refresh_token.as_ref().map(|r| r.secret_key_ref.clone())
                    }
                    OAuth2GrantType::ClientCredentials => None,
                },
                scopes: o.scopes.iter().map(|s| s.0.clone()).collect(),
                audience: o.audience.clone(),
                resource: o.resource.clone(),
            }),
        tls: spec.tls.as_ref().map(|tls| TlsReference {
            ca_bundle_secret: tls
                .ca_bundle
                .as_ref()
                .and_then(|c| c.secret_key_ref.clone()),
            ca_bundle_config_map: tls
                .ca_bundle
                .as_ref()
                .and_then(|c| c.config_map_key_ref.clone()),
            insecure_skip_verify: tls.insecure_skip_verify,
        }),
        connect_timeout_ms: millis(spec.timeouts.connect.as_std()),
        call_timeout_ms: millis(spec.timeouts.call.as_std()),
        retry: spec.retry,
        max_tool_pages: Some(spec.discovery.max_tool_pages),
        max_response_bytes: Some(spec.discovery.max_response_bytes),
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Fills the endpoint of every server of the document that exists.
pub fn fill_endpoints(doc: &mut GrantsDocument, servers: &BTreeMap<String, &McpServer>) {
    for grants in &mut doc.servers {
        grants.endpoint = servers.get(&grants.name).map(|s| endpoint(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{full_server, server};
    use serde_json::{Value, json};

    #[test]
    fn endpoints_carry_references_and_limits_never_values() {
        let e = endpoint(&full_server());
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({
                "url": "https://gh.example/mcp", "transport": "sse",
                "era": "legacy", "protocolVersion": "2025-11-25",
                "bearerToken": {"name": "gh-token", "key": "token"},
                "headers": [{"name": "X-Tenant", "secretKeyRef": {"name": "gh-tenant", "key": "id"}}],
                "tls": {"caBundleConfigMap": {"name": "ca", "key": "ca.crt"}, "insecureSkipVerify": false},
                "connectTimeoutMs": 5000, "callTimeoutMs": 60000, "retry": 4,
                "maxToolPages": 100, "maxResponseBytes": 4194304,
            })
        );
        let plain = server(
            "p",
            json!({}),
            json!({"url": "http://p.example/mcp"}),
            Value::Null,
        );
        let e = endpoint(&plain);
        assert_eq!(
            (e.connect_timeout_ms, e.call_timeout_ms, e.retry),
            (10_000, 30_000, 2)
        );
        assert!(e.era.is_none() && e.bearer_token.is_none() && e.tls.is_none());
    }
}
