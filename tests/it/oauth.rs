//! OAuth upstreams against a real authorization server (authlib's, tests/fixtures/oauth_issuer.py)
//! and the official Python SDK's server taking only the tokens that issuer's introspection calls
//! active: the controller's read of the server (`mcp::read_server`, what its probes run) with
//! `spec.credentials.oauth2` settings, across token expiry and client-secret rotation; a refused
//! grant's error code; a server that asks for OAuth (RFC 9728) naming its issuer; the token
//! endpoint on a private CA, trusted through spec.tls; and the sidecar binary calling a tool
//! of the server across token expiries. The McpServer's story on the control plane is
//! `e2e_oauth`.

use std::path::Path;
use std::time::{Duration, Instant};

use mcp_operator::mcp::oauth::OAuthSettings;
use mcp_operator::mcp::{self, EndpointPolicy, SecretValue, ServerConnection, TlsSettings};
use serde_json::json;

use crate::sidecar_support::{self, RawLegacyAgent, Sidecar, json_of};
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
    issued_by(&http(), issuer, grant).await
}

/// How many tokens of `grant` the issuer gave, asked with `client` (one that trusts its CA).
async fn issued_by(client: &reqwest::Client, issuer: &Server, grant: &str) -> u64 {
    let body = client
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

/// A client of the issuer over HTTPS, trusting only the test CA at `ca`.
fn https_trusting(ca: &Path) -> reqwest::Client {
    mcp_operator::install_crypto_provider();
    let pem = std::fs::read(ca).unwrap();
    reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(&pem).unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_token_endpoint_is_checked_against_the_servers_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixtures::load();
    let (issuer, ca) = f.oauth_issuer_tls(
        dir.path(),
        &["--client", "agent:s3cret-one", "--rs-secret", RS_SECRET],
    );
    assert!(issuer.url.starts_with("https://"), "{}", issuer.url);
    let server = f.sdk_server(&[
        "--oauth-issuer",
        &issuer.url,
        "--oauth-rs-secret",
        RS_SECRET,
        "--oauth-ca",
        ca.to_str().unwrap(),
    ]);
    let with_tls = |tls: TlsSettings| {
        let mut conn = connection(&server, Some(client_credentials(&issuer, "s3cret-one")));
        conn.tls = tls;
        conn
    };
    let issuer_client = https_trusting(&ca);

    // The system's roots alone do not know the issuer's CA: no token, and no secret sent.
    let failure = mcp::read_server(&with_tls(TlsSettings::default()))
        .await
        .expect_err("the issuer's certificate is not trusted");
    assert_eq!(
        failure.error.reason(),
        "OAuthTokenFailed",
        "{}",
        failure.error
    );
    let text = failure.error.to_string();
    assert!(text.contains("127.0.0.1") && text.contains("TLS"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    assert_eq!(
        issued_by(&issuer_client, &issuer, "client_credentials").await,
        0
    );

    // The server's CA bundle (spec.tls.caBundle) is trusted at the token endpoint too.
    let pem = std::fs::read(&ca).unwrap();
    let report = mcp::read_server(&with_tls(TlsSettings {
        ca_pem: Some(pem),
        insecure_skip_verify: false,
    }))
    .await
    .expect("the server is read with a token from the issuer on the private CA");
    assert!(tool_names(&report).contains(&"read_file".to_string()));
    assert_eq!(
        issued_by(&issuer_client, &issuer, "client_credentials").await,
        1
    );

    // insecureSkipVerify: the token endpoint is not verified either.
    mcp::read_server(&with_tls(TlsSettings {
        ca_pem: None,
        insecure_skip_verify: true,
    }))
    .await
    .expect("insecureSkipVerify reaches the token endpoint");
    assert_eq!(
        issued_by(&issuer_client, &issuer, "client_credentials").await,
        2
    );

    // The sidecar binary, on grants naming the CA bundle's Secret key (as the controller
    // publishes spec.tls), and on grants saying insecureSkipVerify, which it logs.
    let reader = with_tls(TlsSettings {
        ca_pem: Some(std::fs::read(&ca).unwrap()),
        insecure_skip_verify: false,
    });
    let oauth2 = json!({
        "tokenUrl": format!("{}/token", issuer.url), "clientId": "agent",
        "clientSecret": {"name": "upstream-oauth", "key": "client-secret"}, "scopes": ["mcp"],
    });
    for (tls, warned) in [
        (
            json!({"caBundleSecret": {"name": "issuer-ca", "key": "ca.crt"}}),
            false,
        ),
        (json!({"insecureSkipVerify": true}), true),
    ] {
        let extra = json!({"oauth2": oauth2.clone(), "tls": tls});
        let grants =
            sidecar_support::grants_read_with("files", "fs", &reader, &["read_file"], extra).await;
        let sidecar = Sidecar::start(Some(&grants));
        sidecar.write_secret("upstream-oauth", "client-secret", "s3cret-one");
        sidecar.write_secret(
            "issuer-ca",
            "ca.crt",
            &std::fs::read_to_string(&ca).unwrap(),
        );
        sidecar.wait_ready().await;
        let (agent, _) = RawLegacyAgent::initialize(&sidecar.url, "2025-11-25", json!({})).await;
        let answer = json_of(
            agent
                .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "fs__read_file", "arguments": {"path": "/a"}}}))
                .await,
        )
        .await;
        assert!(
            answer["result"].is_object() && answer["result"]["isError"] != true,
            "{answer}\n{}",
            sidecar.log_text()
        );
        let log = sidecar.log_text();
        assert_eq!(log.contains("InsecureTokenEndpoint"), warned, "{log}");
        assert!(!log.contains("s3cret-one"), "the client secret in the log");
    }
}

/// The sidecar binary, on a grants document naming the oauth2 settings and a client-secret file
/// as the kubelet mounts it, calls a tool of the server behind OAuth again and again while its
/// tokens (2 s) expire: every call succeeds, and the issuer was asked for new tokens meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_calls_a_server_behind_oauth_across_token_expiries() {
    let (issuer, server) = issuer_and_server("2");
    let oauth2 = json!({
        "tokenUrl": format!("{}/token", issuer.url), "clientId": "agent",
        "clientSecret": {"name": "upstream-oauth", "key": "client-secret"}, "scopes": ["mcp"],
    });
    let reader = connection(&server, Some(client_credentials(&issuer, "s3cret-one")));
    let grants = sidecar_support::grants_read_with(
        "files",
        "fs",
        &reader,
        &["read_file"],
        json!({"oauth2": oauth2}),
    )
    .await;
    let sidecar = Sidecar::start(Some(&grants));
    sidecar.write_secret("upstream-oauth", "client-secret", "s3cret-one");
    sidecar.wait_ready().await;
    let (agent, _) = RawLegacyAgent::initialize(&sidecar.url, "2025-11-25", json!({})).await;

    let before = issued(&issuer, "client_credentials").await;
    let started = Instant::now();
    let mut calls = 0;
    while started.elapsed() < Duration::from_secs(5) {
        calls += 1;
        let answer = json_of(
            agent
                .post(
                    json!({"jsonrpc": "2.0", "id": 10 + calls, "method": "tools/call",
                    "params": {"name": "fs__read_file", "arguments": {"path": "/a"}}}),
                )
                .await,
        )
        .await;
        assert!(
            answer["result"].is_object() && answer["result"]["isError"] != true,
            "call {calls} at {:?}: {answer}\n{}",
            started.elapsed(),
            sidecar.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let renewed = issued(&issuer, "client_credentials").await - before;
    assert!(
        renewed >= 2,
        "5 s of calls on 2 s tokens took new tokens: {renewed}"
    );
    assert_eq!(
        sidecar_support::upstream_calls(&server.url)
            .await
            .iter()
            .filter(|c| c.as_str() == "read_file")
            .count(),
        calls,
        "every call reached the server once"
    );
    let log = sidecar.log_text();
    assert!(!log.contains("s3cret-one"), "the client secret in the log");
}
