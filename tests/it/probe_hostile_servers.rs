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
