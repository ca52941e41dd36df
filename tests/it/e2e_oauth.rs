//! A server behind OAuth on the real control plane: the controller process, an McpServer with
//! `spec.credentials.oauth2`, the authlib issuer (tests/fixtures/oauth_issuer.py) and the SDK
//! server checking its tokens, as a platform engineer sees it with `kubectl get mcp`,
//! `kubectl describe` and the controller's log. The token cache, TLS to the token endpoint and
//! the sidecar are tests/it/oauth.rs.

use crate::e2e::{self, secret};
use crate::operator::{Operator, apply_server, condition, server_manifest, wait_condition};
use crate::support::{Fixtures, Server};

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use mcp_operator::api::mcp_server::McpServer;
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(30);
const RS_SECRET: &str = "rs-s3cret-e2e-introspect";
/// The client secrets: the first, the one after rotation, and a mistyped one.
const FIRST: &str = "cs-e2e-first-7f3a";
const SECOND: &str = "cs-e2e-second-91bc";
const WRONG: &str = "cs-e2e-typo-d04e";

async fn put_client_secret(client: &kube::Client, ns: &str, value: &str) {
    let s: Secret = secret("upstream-oauth", "client-secret", value);
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            "upstream-oauth",
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&s),
        )
        .await
        .unwrap();
}

async fn issuer_get(issuer: &Server, what: &str) -> Value {
    mcp_operator::install_crypto_provider();
    let body = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/control/{what}", issuer.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

fn tool_names(s: &McpServer) -> Vec<String> {
    s.status
        .as_ref()
        .and_then(|s| s.catalog.as_ref())
        .map(|c| c.catalog.tools.iter().map(|t| t.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_server_behind_oauth_goes_ready_is_refused_a_wrong_secret_and_recovers_on_rotation() {
    let (client, ns) = e2e::setup("oauth").await;
    let f = Fixtures::load();
    let issuer = f.oauth_issuer(&[
        "--client",
        &format!("agent:{FIRST}"),
        "--rs-secret",
        RS_SECRET,
    ]);
    let server = f.sdk_server(&[
        "--oauth-issuer",
        &issuer.url,
        "--oauth-rs-secret",
        RS_SECRET,
    ]);
    let op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-oauth");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    put_client_secret(&client, ns.name(), FIRST).await;
    let oauth2 = json!({"credentials": {"oauth2": {
        "tokenUrl": format!("{}/token", issuer.url), "grantType": "client_credentials",
        "clientId": "agent", "scopes": ["mcp"],
        "clientSecret": {"secretKeyRef": {"name": "upstream-oauth", "key": "client-secret"}},
    }}});
    apply_server(
        &client,
        ns.name(),
        server_manifest("behind-oauth", &server.url, oauth2),
    )
    .await;

    // 1. Ready, with the catalogue the server lists to a token holder.
    let s = wait_condition(&api, "behind-oauth", "Ready", "True", None, SOON).await;
    let tools = tool_names(&s);
    assert!(tools.contains(&"read_file".to_string()), "{tools:?}");
    assert_eq!(tools.len(), 4, "{tools:?}");
    assert_eq!(issuer_get(&issuer, "issued").await["client_credentials"], 1);

    // 2. The issuer rotates the client's secret; the Secret is updated with a typo: refused,
    //    with only the RFC 6749 error code.
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!(
            "{}/control/rotate?client=agent&secret={SECOND}",
            issuer.url
        ))
        .send()
        .await
        .unwrap();
    put_client_secret(&client, ns.name(), WRONG).await;
    let s = wait_condition(
        &api,
        "behind-oauth",
        "Reachable",
        "False",
        Some("OAuthTokenRefused"),
        SOON,
    )
    .await;
    let message = condition(&s, "Reachable").unwrap()["message"].to_string();
    assert!(message.contains("error invalid_client"), "{message}");
    assert!(message.contains("clientSecret"), "{message}");
    assert_eq!(
        condition(&s, "Ready").unwrap()["status"],
        "False",
        "{:?}",
        condition(&s, "Ready")
    );

    // 3. The right secret in the Secret: Ready again, without touching the McpServer.
    put_client_secret(&client, ns.name(), SECOND).await;
    let s = wait_condition(&api, "behind-oauth", "Ready", "True", None, SOON).await;
    assert_eq!(s.metadata.generation, Some(1));
    assert_eq!(tool_names(&s).len(), 4);

    // No secret, no token and nothing of the issuer's refusal body (its error_description)
    // in the status, the events or the controller's log.
    let tokens: Vec<String> =
        serde_json::from_value(issuer_get(&issuer, "tokens").await["tokens"].take()).unwrap();
    assert!(tokens.len() >= 2, "{tokens:?}");
    let status = serde_json::to_string(&s.status).unwrap();
    let events = serde_json::to_string(
        &Api::<Event>::namespaced(client.clone(), ns.name())
            .list(&ListParams::default())
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(events.contains("OAuthTokenRefused"), "an event: {events}");
    let log = op.log_text();
    for (what, text) in [("status", &status), ("events", &events), ("log", &log)] {
        for leak in [FIRST, SECOND, WRONG, RS_SECRET] {
            assert!(!text.contains(leak), "a client secret in the {what}");
        }
        for token in &tokens {
            assert!(
                !text.contains(token.as_str()),
                "an access token in the {what}"
            );
        }
        assert!(
            !text.contains("cannot authenticate with methods"),
            "the issuer's error_description in the {what}"
        );
    }
}

#[tokio::test]
async fn a_server_asking_for_oauth_is_oauth_required_naming_its_authorization_server() {
    let (client, ns) = e2e::setup("oauth-required").await;
    let f = Fixtures::load();
    let issuer = f.oauth_issuer(&["--rs-secret", RS_SECRET]);
    let server = f.sdk_server(&[
        "--oauth-issuer",
        &issuer.url,
        "--oauth-rs-secret",
        RS_SECRET,
    ]);
    let _op = Operator::start(&e2e::kubeconfig_path().await, ns.name(), "op-oauth-req");
    let api: Api<McpServer> = Api::namespaced(client.clone(), ns.name());
    apply_server(
        &client,
        ns.name(),
        server_manifest("asks-oauth", &server.url, json!({})),
    )
    .await;
    let s = wait_condition(
        &api,
        "asks-oauth",
        "Reachable",
        "False",
        Some("OAuthRequired"),
        SOON,
    )
    .await;
    let message = condition(&s, "Reachable").unwrap()["message"].to_string();
    assert!(message.contains(&issuer.url), "{message}");
    assert!(message.contains("spec.credentials.oauth2"), "{message}");
    assert_eq!(condition(&s, "Ready").unwrap()["reason"], "OAuthRequired");
}
