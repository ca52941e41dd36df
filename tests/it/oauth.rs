//! OAuth upstreams against a real authorization server (authlib's, tests/fixtures/oauth_issuer.py)
//! and the official Python SDK's server taking only the tokens that issuer's introspection calls
//! active: the controller's read of the server (`mcp::read_server`, what its probes run) with
//! `spec.credentials.oauth2` settings, across token expiry and client-secret rotation; a refused
//! grant's error code; a server that asks for OAuth (RFC 9728) naming its issuer.

use mcp_operator::mcp::oauth::OAuthSettings;
use mcp_operator::mcp::{self, EndpointPolicy, SecretValue, ServerConnection};

use crate::support::{Fixtures, Server};

const RS_SECRET: &str = "rs-s3cret-introspect";

/// An issuer with the confidential client `agent` (secret `s3cret-one`) and the public client
/// `person-app` holding refresh token `rt-s3cret`, and a server behind it.
fn issuer_and_server(expires_in: &str) -> (Server, Server) {
    let f = Fixtures::load();
    let issuer = f.oauth_issuer(&[
        "--client",
        "agent:s3cret-one",
        "--public-client",
        "person-app",
        "--refresh-token",
        "person-app:rt-s3cret",
        "--expires-in",
        expires_in,
        "--rs-secret",
        RS_SECRET,
    ]);
    let server = f.sdk_server(&[
        "--oauth-issuer",
        &issuer.url,
        "--oauth-rs-secret",
        RS_SECRET,
    ]);
    (issuer, server)
}

fn client_credentials(issuer: &Server, secret: &str) -> OAuthSettings {
    OAuthSettings {
        token_url: format!("{}/token", issuer.url),
        client_id: "agent".into(),
        client_secret: Some(SecretValue::new(secret)),
        refresh_token: None,
        scopes: vec!["mcp".into()],
        audience: None,
        resource: None,
    }
}

fn connection(server: &Server, oauth2: Option<OAuthSettings>) -> ServerConnection {
    // The binaries install it at start; reqwest needs one before it builds a client.
    mcp_operator::install_crypto_provider();
    let mut conn = ServerConnection::new(&server.url);
    conn.credentials.oauth2 = oauth2;
    conn.endpoint_policy = EndpointPolicy {
        allow_loopback: true,
    };
    conn
}

fn tool_names(report: &mcp::ServerReport) -> Vec<String> {
    report
        .tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn http() -> reqwest::Client {
    mcp_operator::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn issued(issuer: &Server, grant: &str) -> u64 {
    let body = http()
        .get(format!("{}/control/issued", issuer.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v[grant].as_u64().unwrap()
}

#[tokio::test]
async fn a_server_behind_oauth_is_read_with_one_client_credentials_token_for_many_reads() {
    let (issuer, server) = issuer_and_server("3600");
    let conn = connection(&server, Some(client_credentials(&issuer, "s3cret-one")));
    for _ in 0..3 {
        let report = mcp::read_server(&conn).await.expect("the server is read");
        assert!(tool_names(&report).contains(&"read_file".to_string()));
    }
    assert_eq!(
        issued(&issuer, "client_credentials").await,
        1,
        "one token, cached"
    );
}

#[tokio::test]
async fn reads_go_on_across_token_expiry_and_a_rotated_client_secret() {
    let (issuer, server) = issuer_and_server("2");
    let one = connection(&server, Some(client_credentials(&issuer, "s3cret-one")));
    mcp::read_server(&one).await.expect("first token");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    mcp::read_server(&one)
        .await
        .expect("a new token once the first expired");
    assert!(issued(&issuer, "client_credentials").await >= 2);

    // The client secret is rotated at the issuer, and the Secret then says the new one.
    http()
        .post(format!(
            "{}/control/rotate?client=agent&secret=s3cret-two",
            issuer.url
        ))
        .send()
        .await
        .unwrap();
    let two = connection(&server, Some(client_credentials(&issuer, "s3cret-two")));
    let report = mcp::read_server(&two)
        .await
        .expect("read with the rotated secret");
    assert!(tool_names(&report).contains(&"read_file".to_string()));
}

#[tokio::test]
async fn a_refresh_token_of_a_public_client_obtains_the_tokens() {
    let (issuer, server) = issuer_and_server("3600");
    let settings = OAuthSettings {
        client_id: "person-app".into(),
        client_secret: None,
        refresh_token: Some(SecretValue::new("rt-s3cret")),
        ..client_credentials(&issuer, "unused")
    };
    mcp::read_server(&connection(&server, Some(settings)))
        .await
        .expect("the server is read");
    assert_eq!(issued(&issuer, "refresh_token").await, 1);
}

#[tokio::test]
async fn a_wrong_client_secret_is_refused_with_its_error_code_and_no_secret() {
    let (issuer, server) = issuer_and_server("3600");
    let conn = connection(&server, Some(client_credentials(&issuer, "wrong-s3cret")));
    let failure = mcp::read_server(&conn).await.expect_err("refused");
    assert_eq!(failure.error.reason(), "OAuthTokenRefused");
    let text = failure.error.to_string();
    assert!(text.contains("error invalid_client"), "{text}");
    assert!(text.contains("clientSecret"), "{text}");
    // Neither the secret nor the body's error_description.
    assert!(
        !text.contains("s3cret") && !text.contains("authenticate"),
        "{text}"
    );
}

#[tokio::test]
async fn a_server_asking_for_oauth_names_its_authorization_server() {
    let (issuer, server) = issuer_and_server("3600");
    let failure = mcp::read_server(&connection(&server, None))
        .await
        .expect_err("401");
    assert_eq!(failure.error.reason(), "OAuthRequired", "{}", failure.error);
    let text = failure.error.to_string();
    assert!(text.contains(&issuer.url), "{text}");
    assert!(text.contains("spec.credentials.oauth2"), "{text}");
}
