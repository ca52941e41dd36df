//! `mcp-operator probe` against our hostile fixture: every listing rule of DESIGN §4 step 2 and
//! every failure reason, each ending in a precise reason, a non-zero exit and no echoed body.

use crate::support;

use support::{Fixtures, Server, probe};

fn hostile() -> Server {
    Fixtures::load().hostile_server()
}

fn mode(server: &Server, mode: &str) -> String {
    format!("{}/{mode}/mcp", server.url)
}

#[test]
fn well_behaved_modes_are_read_whole() {
    let s = hostile();
    let p = probe(&[&mode(&s, "ok")]);
    p.assert_ok();
    assert_eq!(p.doc["era"], "legacy");
    assert_eq!(p.tool_count(), 6);
    assert_eq!(p.doc["catalog"]["pagesRead"], 3);

    let p = probe(&[&mode(&s, "sse-response")]);
    p.assert_ok();
    assert_eq!(p.tool_count(), 6);

    let p = probe(&[&mode(&s, "modern")]);
    p.assert_ok();
    assert_eq!(p.doc["era"], "modern");
    assert_eq!(p.doc["protocolVersion"], "2026-07-28");
}

#[test]
fn an_empty_string_cursor_is_a_cursor_not_the_end() {
    let s = hostile();
    let p = probe(&[&mode(&s, "empty-cursor")]);
    p.assert_ok();
    assert_eq!(p.tool_count(), 4);
    assert_eq!(p.doc["catalog"]["pagesRead"], 2);
}

#[test]
fn paging_rules_fail_the_listing_as_a_whole() {
    let s = hostile();
    let p = probe(&[&mode(&s, "cursor-loop")]);
    p.assert_fails_with("RepeatedCursor");
    assert!(p.message().contains("pages read: 3"), "{}", p.message());

    let p = probe(&["--max-pages", "25", &mode(&s, "endless-pages")]);
    p.assert_fails_with("TooManyPages");
    assert!(p.message().contains("25"), "{}", p.message());
    assert!(p.doc.get("catalog").is_none(), "never a partial catalogue");

    let p = probe(&[&mode(&s, "dup-same-page")]);
    p.assert_fails_with("DuplicateTool");
    assert!(p.message().contains("\"alpha\""), "{}", p.message());

    let p = probe(&[&mode(&s, "dup-across-pages")]);
    p.assert_fails_with("DuplicateTool");
    assert!(p.message().contains("pages 1 and 2"), "{}", p.message());

    let p = probe(&[&mode(&s, "invalid-name")]);
    p.assert_fails_with("InvalidToolName");
}

#[test]
fn error_and_malformed_pages_are_protocol_errors_naming_the_page() {
    let s = hostile();
    for m in ["error-page", "malformed", "malformed-tools"] {
        let p = probe(&[&mode(&s, m)]);
        p.assert_fails_with("ProtocolError");
        assert!(p.message().contains("page 2"), "{m}: {}", p.message());
        assert!(
            p.message().contains("pages read: 1"),
            "{m}: {}",
            p.message()
        );
    }
}

#[test]
fn bodies_over_the_cap_are_refused_in_json_and_sse() {
    let s = hostile();
    for m in ["huge", "huge-sse"] {
        let p = probe(&[&mode(&s, m)]);
        p.assert_fails_with("ResponseTooLarge");
        assert!(p.message().contains("4194304"), "{}", p.message());
    }
}

#[test]
fn servers_that_never_finish_hit_the_deadline() {
    let s = hostile();
    for (m, what) in [
        ("hang", "connecting"),
        ("hang-list", "listing"),
        ("sse-endless", "listing"),
        ("slow-pages", "listing"),
    ] {
        let p = probe(&["--connect-timeout", "2s", &mode(&s, m)]);
        p.assert_fails_with("Timeout");
        assert!(p.message().contains(what), "{m}: {}", p.message());
        assert!(p.message().contains("2s"), "{m}: {}", p.message());
    }
    let p = probe(&["--connect-timeout", "2500ms", &mode(&s, "slow-pages")]);
    assert!(p.message().contains("pages read: 2"), "{}", p.message());
}

#[test]
fn auth_failures_are_named_and_never_echo_the_body_or_the_credential() {
    let s = hostile();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "tok-d41d8cd98f").unwrap();
    for (m, reason) in [("unauthorized", "Unauthorized"), ("forbidden", "Forbidden")] {
        let p = probe(&[
            "--bearer-token-file",
            token.to_str().unwrap(),
            "--header",
            "X-Api-Key: key-0cc175b9c0",
            &mode(&s, m),
        ]);
        p.assert_fails_with(reason);
        let everything = format!("{}{}", p.doc, p.stderr);
        assert!(!everything.contains("SECRET-BODY-TEXT"), "{everything}");
        assert!(!everything.contains("tok-d41d8cd98f"), "{everything}");
        assert!(!everything.contains("key-0cc175b9c0"), "{everything}");
    }
}

#[test]
fn things_that_are_not_mcp_say_so() {
    let s = hostile();
    let p = probe(&[&mode(&s, "html")]);
    p.assert_fails_with("NotMcp");
    assert!(p.message().contains("HTML"), "{}", p.message());

    let p = probe(&[&mode(&s, "not-found")]);
    p.assert_fails_with("NotMcp");
    assert!(p.message().contains("404"), "{}", p.message());
}

#[test]
fn network_failures_have_their_own_reasons() {
    let port = support::free_port();
    let p = probe(&[&format!("http://127.0.0.1:{port}/mcp")]);
    p.assert_fails_with("ConnectionRefused");

    let p = probe(&["http://no-such-host.invalid/mcp"]);
    p.assert_fails_with("DNSFailure");

    let p = probe(&["http://169.254.169.254/latest/meta-data/"]);
    p.assert_fails_with("BlockedEndpoint");
}

#[test]
fn tls_needs_a_trusted_ca_and_takes_a_custom_one() {
    let dir = tempfile::tempdir().unwrap();
    let (s, ca) = Fixtures::load().hostile_server_tls(dir.path());
    let url = mode(&s, "ok");
    assert!(url.starts_with("https://"));

    let p = probe(&[&url]);
    p.assert_fails_with("TLSError");
    assert!(p.message().contains("caBundle"), "{}", p.message());

    let p = probe(&["--ca-file", ca.to_str().unwrap(), &url]);
    p.assert_ok();
    assert_eq!(p.tool_count(), 6);

    let p = probe(&["--insecure-skip-verify", &url]);
    p.assert_ok();
}

#[test]
fn tls_to_a_plain_http_port_is_a_tls_error_that_says_so() {
    let server = Fixtures::load().sdk_server(&[]);
    let url = server.url.replacen("http://", "https://", 1);
    let p = probe(&[&url]);
    p.assert_fails_with("TLSError");
    assert!(
        p.message().contains("did not answer in TLS") && p.message().contains("http://"),
        "{}",
        p.message()
    );
}

#[test]
fn the_old_sse_transport_works_against_our_fixture_too() {
    let s = hostile();
    let url = format!("{}/legacy-sse-transport/sse", s.url);
    let p = probe(&["--transport", "sse", &url]);
    p.assert_ok();
    assert_eq!(p.doc["era"], "legacy");
    assert!(p.tool_count() > 0);
}

/// A server that offers HTTP/2 by TLS ALPN is read over HTTP/2: a front that accepts only h2
/// (on the test CA's certificate) and hands each request to the Python SDK's server over
/// HTTP/1.1, counting the HTTP/2 requests it served.
#[test]
fn a_server_that_offers_http2_is_read_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = support::make_test_ca(dir.path());
    let backend = Fixtures::load().sdk_server(&[]);
    let front = http2_front::start(dir.path(), &backend.url);

    let p = probe(&["--ca-file", ca.to_str().unwrap(), &front.url]);
    p.assert_ok();
    let direct = probe(&[&backend.url]);
    direct.assert_ok();
    assert_eq!(p.tool_count(), direct.tool_count());
    assert!(
        front.http2_requests() >= 2,
        "the probe's requests (at least initialize and tools/list) went over HTTP/2: {}",
        front.http2_requests()
    );
}

mod http2_front {
    use std::net::TcpListener;
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper::body::Incoming;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    pub struct Front {
        pub url: String,
        served: Arc<AtomicUsize>,
    }

    impl Front {
        pub fn http2_requests(&self) -> usize {
            self.served.load(Ordering::SeqCst)
        }
    }

    /// Serves `https://127.0.0.1:<port>/mcp` with `dir`'s server.pem and server.key (from
    /// `make_test_ca`), offering only h2, in front of `backend` (an http:// URL).
    pub fn start(dir: &Path, backend: &str) -> Front {
        let certs = CertificateDer::pem_file_iter(dir.join("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend: hyper::Uri = backend.parse().unwrap();
        let authority = backend.authority().unwrap().clone();
        let served = Arc::new(AtomicUsize::new(0));
        let counted = served.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                    .build_http::<Incoming>();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let (acceptor, client, authority, counted) = (
                        acceptor.clone(),
                        client.clone(),
                        authority.clone(),
                        counted.clone(),
                    );
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(move |request| {
                            let (client, authority, counted) =
                                (client.clone(), authority.clone(), counted.clone());
                            async move { forward(request, &client, authority, &counted).await }
                        });
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            });
        });
        Front {
            url: format!("https://127.0.0.1:{port}/mcp"),
            served,
        }
    }

    type Client = hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Incoming,
    >;

    async fn forward(
        request: hyper::Request<Incoming>,
        client: &Client,
        authority: hyper::http::uri::Authority,
        counted: &AtomicUsize,
    ) -> Result<
        hyper::Response<http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>>,
        String,
    > {
        if request.version() == hyper::Version::HTTP_2 {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        let (mut head, body) = request.into_parts();
        let mut uri = head.uri.clone().into_parts();
        uri.scheme = Some(hyper::http::uri::Scheme::HTTP);
        uri.authority = Some(authority);
        head.uri = hyper::Uri::from_parts(uri).map_err(|e| e.to_string())?;
        head.version = hyper::Version::HTTP_11;
        let response = client
            .request(hyper::Request::from_parts(head, body))
            .await
            .map_err(|e| e.to_string())?;
        Ok(response.map(|body| body.boxed()))
    }
}
