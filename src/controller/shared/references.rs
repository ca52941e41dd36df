//! What an McpServer's spec refers to: every Secret key (the field that names it, and where its
//! value goes: sent to the server, trusted as a CA bundle, or a stdio server's environment) and
//! every ConfigMap. One list, read by the Secret → McpServer index of the watches, by the
//! credential resolution, and by the admission check of who may name a Secret.

use kube::ResourceExt;

use crate::api::mcp_server::{McpServer, McpServerSpec, stdio_token_secret_name};
use crate::core::SecretKeySelector;

/// Where the value of a Secret key an McpServer names goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretUse {
    /// Sent to the server with every request (bearer token, header value).
    Sent,
    /// Trusted as the server's CA bundle.
    CaBundle,
    /// In the environment of a stdio server's process.
    Environment,
}

/// One Secret key an McpServer names, the field that names it and where its value goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretReference<'a> {
    pub field: String,
    pub used: SecretUse,
    pub selector: &'a SecretKeySelector,
}

/// Every Secret key an McpServer's spec names (credentials, TLS, stdio environment), in spec
/// order: the one list both the Secret → McpServer index and the admission check read.
pub fn secret_references(spec: &McpServerSpec) -> Vec<SecretReference<'_>> {
    let mut refs = Vec::new();
    if let Some(creds) = &spec.credentials {
        if let Some(b) = &creds.bearer_token {
            refs.push(SecretReference {
                field: "spec.credentials.bearerToken.secretKeyRef".into(),
                used: SecretUse::Sent,
                selector: &b.secret_key_ref,
            });
        }
        for (i, h) in creds.headers.iter().enumerate() {
            refs.push(SecretReference {
                field: format!("spec.credentials.headers[{i}].valueFrom.secretKeyRef"),
                used: SecretUse::Sent,
                selector: &h.value_from.secret_key_ref,
            });
        }
        if let Some(o) = &creds.oauth2 {
            for (field, r) in [
                ("clientSecret", &o.client_secret),
                ("refreshToken", &o.refresh_token),
            ] {
                if let Some(r) = r {
                    refs.push(SecretReference {
                        field: format!("spec.credentials.oauth2.{field}.secretKeyRef"),
                        // Sent to the token endpoint, and what obtains the server's tokens.
                        used: SecretUse::Sent,
                        selector: &r.secret_key_ref,
                    });
                }
            }
        }
    }
    if let Some(r) = spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_bundle.as_ref())
        .and_then(|c| c.secret_key_ref.as_ref())
    {
        refs.push(SecretReference {
            field: "spec.tls.caBundle.secretKeyRef".into(),
            used: SecretUse::CaBundle,
            selector: r,
        });
    }
    for (i, env) in spec.stdio.iter().flat_map(|s| s.env.iter().enumerate()) {
        if let Some(from) = &env.value_from {
            refs.push(SecretReference {
                field: format!("spec.stdio.env[{i}].valueFrom.secretKeyRef"),
                used: SecretUse::Environment,
                selector: &from.secret_key_ref,
            });
        }
    }
    refs
}

/// Every Secret name an McpServer refers to, sorted, once each (for the Secret → McpServer
/// index: a stdio server's environment Secrets included, harmlessly, as the kubelet reads them;
/// and its token Secret, which the spec does not name: deleting it issues a new token).
pub fn referenced_secrets(server: &McpServer) -> Vec<String> {
    let mut names: Vec<String> = secret_references(&server.spec)
        .into_iter()
        .map(|r| r.selector.name.clone())
        .collect();
    if server.spec.stdio.is_some() {
        names.push(stdio_token_secret_name(&server.name_any()));
    }
    names.sort();
    names.dedup();
    names
}

/// Every ConfigMap name an McpServer refers to (a CA bundle).
pub fn referenced_config_maps(server: &McpServer) -> Vec<String> {
    server
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_bundle.as_ref())
        .and_then(|c| c.config_map_key_ref.as_ref())
        .map(|r| vec![r.name.clone()])
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(value: serde_json::Value) -> McpServer {
        McpServer::new("files", serde_json::from_value(value).unwrap())
    }

    #[test]
    fn every_secret_and_config_map_a_server_names_is_referenced_once() {
        let s = spec(json!({
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
        assert_eq!(referenced_secrets(&s), ["ca", "keys", "shared"]);
        assert!(referenced_config_maps(&s).is_empty());

        let from_config_map = spec(json!({
            "url": "https://a.example/mcp",
            "tls": {"caBundle": {"configMapKeyRef": {"name": "ca", "key": "ca.crt"}}},
        }));
        assert!(referenced_secrets(&from_config_map).is_empty());
        assert_eq!(referenced_config_maps(&from_config_map), ["ca"]);

        let stdio = spec(json!({
            "stdio": {"image": "node:22-slim", "command": ["npx"], "env": [
                {"name": "PLAIN", "value": "x"},
                {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "env-keys", "key": "k"}}},
            ]},
        }));
        assert_eq!(referenced_secrets(&stdio), ["env-keys", "files-mcp-token"]);
        let refs = secret_references(&stdio.spec);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].field, "spec.stdio.env[1].valueFrom.secretKeyRef");
        assert_eq!(refs[0].used, SecretUse::Environment);
        let uses: Vec<(String, SecretUse)> = secret_references(&s.spec)
            .into_iter()
            .map(|r| (r.field, r.used))
            .collect();
        assert_eq!(
            uses,
            [
                (
                    "spec.credentials.bearerToken.secretKeyRef".into(),
                    SecretUse::Sent
                ),
                (
                    "spec.credentials.headers[0].valueFrom.secretKeyRef".into(),
                    SecretUse::Sent
                ),
                (
                    "spec.credentials.headers[1].valueFrom.secretKeyRef".into(),
                    SecretUse::Sent
                ),
                ("spec.tls.caBundle.secretKeyRef".into(), SecretUse::CaBundle),
            ]
        );

        let bare = spec(json!({"url": "http://a.example/mcp"}));
        assert!(referenced_secrets(&bare).is_empty() && referenced_config_maps(&bare).is_empty());

        // A stdio server's token is the operator's Secret, referenced like any credential.
        let stdio = spec(json!({
            "stdio": {"image": "node:22-slim", "command": ["node", "server.js"]},
            "credentials": {"headers": [
                {"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "k"}}},
            ]},
        }));
        assert_eq!(referenced_secrets(&stdio), ["files-mcp-token", "keys"]);
    }
}
