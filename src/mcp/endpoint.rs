//! The endpoint guard: which addresses the operator may connect to. Link-local and cloud-metadata
//! addresses are always refused (a URL in a namespaced resource must not reach the node's
//! credentials); loopback only when the operator runs with an explicit flag.
//!
//! The guard normalises the host once (the `url` crate has already lowercased it and applied
//! IDNA; a trailing dot is dropped here, an IPv4-mapped IPv6 address becomes the IPv4 address),
//! resolves it itself and hands the checked addresses to the HTTP client for exactly that host,
//! which is also the host of the URL every request is sent to: a name cannot resolve to one
//! address at check time and another at connect time. An IPv6 address that carries an IPv4
//! address (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo) is judged as that IPv4
//! address too.
//!
//! ```text
//!  http://Metadata.Google.Internal./x ─► url crate: lowercase, IDNA ─► normalise: trim "."
//!      ─► metadata name?  ─► resolve ─► every address judged (embedded IPv4 as IPv4)
//!      ─► CheckedEndpoint { url: http://metadata.google.internal/x, host, addrs }  (pinned)
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::{Host, Url};

use super::error::McpError;

/// Addresses the guard lets through.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointPolicy {
    /// Allow 127.0.0.0/8 and ::1 (tests, the demo, a sidecar-local server).
    pub allow_loopback: bool,
}

/// A URL whose host has been resolved and checked.
#[derive(Debug, Clone)]
pub struct CheckedEndpoint {
    /// The URL with its host normalised: requests go here, so the HTTP client never looks
    /// up another spelling of the name than the one pinned to `addrs`.
    pub url: Url,
    /// The URL's host, normalised (for TLS, the Host header and the pin).
    pub host: String,
    pub addrs: Vec<SocketAddr>,
}

impl CheckedEndpoint {
    /// `host:port` for messages: never the path or query, which may carry tokens.
    pub fn display_addr(&self) -> String {
        match self.url.port_or_known_default() {
            Some(port) => format!("{}:{}", self.host, port),
            None => self.host.clone(),
        }
    }
}

/// Parses an http(s) URL; the message never echoes the URL's query or user info.
pub fn parse_url(raw: &str) -> Result<Url, McpError> {
    let url = Url::parse(raw).map_err(|e| McpError::InvalidUrl(format!("{e}")))?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(McpError::InvalidUrl(format!(
                "the scheme must be http or https, not {other:?}"
            )));
        }
    }
    if url.host().is_none() {
        return Err(McpError::InvalidUrl("the URL has no host".into()));
    }
    Ok(url)
}

/// Resolves the URL's host and refuses it if any address it resolves to is not allowed.
pub async fn check(url: &Url, policy: EndpointPolicy) -> Result<CheckedEndpoint, McpError> {
    let port = url
        .port_or_known_default()
        .ok_or_else(|| McpError::InvalidUrl("the URL has no port".into()))?;
    let url = normalise(url)?;
    let (host, addrs) = match url.host() {
        Some(Host::Ipv4(ip)) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V4(ip), port)]),
        Some(Host::Ipv6(ip)) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V6(ip), port)]),
        Some(Host::Domain(name)) => {
            let name = name.to_owned();
            if is_metadata_name(&name) {
                return Err(blocked(&name, "a cloud metadata service"));
            }
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                .await
                .map_err(|_| McpError::DnsFailure { host: name.clone() })?
                .collect();
            if found.is_empty() {
                return Err(McpError::DnsFailure { host: name });
            }
            (name, found)
        }
        None => return Err(McpError::InvalidUrl("the URL has no host".into())),
    };
    for addr in &addrs {
        if let Some(why) = refusal(addr.ip(), policy) {
            return Err(blocked(&host, why));
        }
    }
    Ok(CheckedEndpoint { url, host, addrs })
}

/// The URL with its host in the one spelling the guard judges and the client connects to:
/// without trailing dots (`evil.example.` is `evil.example`, which DNS answers alike) and an
/// IPv4-mapped IPv6 address as its IPv4 address (where a socket connects anyway). Case and
/// IDNA are the `url` crate's (it parses http(s) hosts to lowercase ASCII).
fn normalise(url: &Url) -> Result<Url, McpError> {
    let mut url = url.clone();
    let host = match url.host() {
        Some(Host::Domain(name)) => {
            let trimmed = name.trim_end_matches('.');
            if trimmed.is_empty() {
                return Err(McpError::InvalidUrl("the URL's host is empty".into()));
            }
            (trimmed != name).then(|| trimmed.to_owned())
        }
        Some(Host::Ipv6(ip)) => ip.to_ipv4_mapped().map(|v4| v4.to_string()),
        Some(Host::Ipv4(_)) => None,
        None => return Err(McpError::InvalidUrl("the URL has no host".into())),
    };
    if let Some(host) = host {
        url.set_host(Some(&host))
            .map_err(|e| McpError::InvalidUrl(format!("the URL's host: {e}")))?;
    }
    Ok(url)
}

/// The IPv4 address an IPv6 address carries, for the forms that reach that IPv4 host (or its
/// network, through a translator or relay).
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let last = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    match s {
        // ::a.b.c.d, IPv4-compatible (deprecated), but not :: or ::1.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 || lo > 1 => Some(last),
        // ::ffff:0:a.b.c.d, IPv4-translated (SIIT).
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(last),
        // 64:ff9b::a.b.c.d, the well-known NAT64 prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last),
        // 2002:AABB:CCDD::/48, 6to4.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))),
        // 2001:0::/32, Teredo: the client's address is the last 32 bits, inverted.
        [0x2001, 0, ..] => Some(Ipv4Addr::from(!u32::from(last))),
        _ => None,
    }
}

fn blocked(host: &str, why: &str) -> McpError {
    McpError::BlockedEndpoint(format!(
        "refusing to connect to {host}: it is {why}, which MCP servers may not use"
    ))
}

fn is_metadata_name(name: &str) -> bool {
    matches!(
        name,
        "metadata.google.internal"
            | "metadata.goog"
            | "metadata"
            | "instance-data"
            | "instance-data.ec2.internal"
    )
}

/// Why an address is refused, or `None` when it is allowed.
fn refusal(ip: IpAddr, policy: EndpointPolicy) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4, policy),
        // An IPv6 address carrying an IPv4 address reaches that IPv4 host: judged as both.
        IpAddr::V6(v6) => match embedded_ipv4(v6) {
            Some(v4) if v6.to_ipv4_mapped().is_some() => refusal_v4(v4, policy),
            Some(v4) => refusal_v4(v4, policy).or_else(|| refusal_v6(v6, policy)),
            None => refusal_v6(v6, policy),
        },
    }
}

fn refusal_v4(ip: Ipv4Addr, policy: EndpointPolicy) -> Option<&'static str> {
    // Alibaba Cloud's metadata service and Azure's WireServer (which serves the VM's
    // extensions and their settings) live outside link-local.
    if ip == Ipv4Addr::new(100, 100, 100, 200) || ip == Ipv4Addr::new(168, 63, 129, 16) {
        return Some("a cloud metadata address");
    }
    if ip.is_link_local() {
        return Some("a link-local address (cloud metadata services live there)");
    }
    // 0.0.0.0/8 is "this network": Linux connects 0.0.0.0 to the local host.
    if ip.octets()[0] == 0 || ip.is_broadcast() || ip.is_multicast() {
        return Some("not a unicast address");
    }
    if ip.is_loopback() && !policy.allow_loopback {
        return Some(
            "a loopback address (allowed only when the operator runs with --allow-loopback)",
        );
    }
    None
}

fn refusal_v6(ip: Ipv6Addr, policy: EndpointPolicy) -> Option<&'static str> {
    const METADATA: [Ipv6Addr; 3] = [
        // AWS's IPv6 instance metadata service and its DNS resolver.
        Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254),
        Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0023),
        // Google Cloud's IPv6 metadata server.
        Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254),
    ];
    if METADATA.contains(&ip) {
        return Some("a cloud metadata address");
    }
    if (ip.segments()[0] & 0xffc0) == 0xfe80 {
        return Some("a link-local address (cloud metadata services live there)");
    }
    if ip.is_unspecified() || ip.is_multicast() {
        return Some("not a unicast address");
    }
    if ip.is_loopback() && !policy.allow_loopback {
        return Some(
            "a loopback address (allowed only when the operator runs with --allow-loopback)",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: EndpointPolicy = EndpointPolicy {
        allow_loopback: false,
    };
    const LOOPBACK: EndpointPolicy = EndpointPolicy {
        allow_loopback: true,
    };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_and_link_local_are_always_refused() {
        for addr in [
            "169.254.169.254",
            "169.254.1.1",
            "100.100.100.200",
            "fd00:ec2::254",
            "fd00:ec2::23",
            "168.63.129.16",
            "fd20:ce::254",
            "fe80::1",
            "::ffff:169.254.169.254",
        ] {
            assert!(
                refusal(ip(addr), LOOPBACK).is_some(),
                "{addr} must be refused"
            );
        }
    }

    #[test]
    fn loopback_needs_the_flag() {
        for addr in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(
                refusal(ip(addr), STRICT).is_some(),
                "{addr} refused by default"
            );
            assert!(
                refusal(ip(addr), LOOPBACK).is_none(),
                "{addr} allowed with the flag"
            );
        }
    }

    #[test]
    fn ordinary_addresses_pass() {
        for addr in ["10.0.0.5", "192.168.1.10", "93.184.216.34", "2001:db8::1"] {
            assert!(refusal(ip(addr), STRICT).is_none(), "{addr} allowed");
        }
    }

    #[test]
    fn an_ipv4_address_inside_an_ipv6_address_is_judged_as_the_ipv4_address() {
        for (form, addr) in [
            ("mapped", "::ffff:169.254.169.254"),
            ("compatible", "::169.254.169.254"),
            ("translated", "::ffff:0:169.254.169.254"),
            ("NAT64", "64:ff9b::169.254.169.254"),
            ("6to4", "2002:a9fe:a9fe::1"),
            // The client's address inverted: !169.254.169.254 = 86.1.86.1 = 5601:5601.
            ("Teredo", "2001:0:4136:e378:8000:63bf:5601:5601"),
            ("Azure through NAT64", "64:ff9b::168.63.129.16"),
        ] {
            assert!(
                refusal(ip(addr), LOOPBACK).is_some(),
                "{form} {addr} must be refused"
            );
        }
        for (form, addr) in [
            ("compatible", "::127.0.0.1"),
            ("NAT64", "64:ff9b::7f00:1"),
            ("6to4", "2002:7f00:1::"),
        ] {
            assert!(
                refusal(ip(addr), STRICT).is_some(),
                "{form} loopback {addr} refused by default"
            );
        }
        // An ordinary address of each form passes.
        for addr in [
            "64:ff9b::93.184.216.34",
            "2002:5db8:d822::1",
            "::ffff:10.0.0.5",
        ] {
            assert!(refusal(ip(addr), STRICT).is_none(), "{addr} allowed");
        }
        assert_eq!(
            embedded_ipv4(ip6("::1")),
            None,
            "::1 is loopback, not 0.0.0.1"
        );
        assert_eq!(embedded_ipv4(ip6("::")), None);
        assert_eq!(embedded_ipv4(ip6("2001:db8::1")), None);
    }

    fn ip6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn this_network_is_not_an_address_to_connect_to() {
        for addr in ["0.0.0.0", "0.1.2.3", "::ffff:0.0.0.0", "::"] {
            assert!(refusal(ip(addr), LOOPBACK).is_some(), "{addr} refused");
        }
    }

    /// The URL the client sends to carries exactly the host the guard judged and pinned.
    fn normalised_host(raw: &str) -> String {
        let url = normalise(&parse_url(raw).unwrap()).unwrap();
        url.host_str().unwrap().to_owned()
    }

    #[test]
    fn the_host_is_normalised_once_in_the_url_itself() {
        assert_eq!(normalised_host("http://evil.example./mcp"), "evil.example");
        assert_eq!(normalised_host("http://evil.example../mcp"), "evil.example");
        assert_eq!(normalised_host("http://EVIL.Example/mcp"), "evil.example");
        assert_eq!(
            normalised_host("http://bücher.example./mcp"),
            "xn--bcher-kva.example"
        );
        // Numeric hosts in any spelling are IPv4 addresses before the guard sees them.
        assert_eq!(
            normalised_host("http://169.254.169.254./"),
            "169.254.169.254"
        );
        assert_eq!(normalised_host("http://0xa9fea9fe/"), "169.254.169.254");
        assert_eq!(normalised_host("http://2852039166/"), "169.254.169.254");
        assert_eq!(
            normalised_host("http://[::ffff:a9fe:a9fe]/"),
            "169.254.169.254"
        );
        assert_eq!(
            normalised_host("http://[64:ff9b::a9fe:a9fe]/"),
            "[64:ff9b::a9fe:a9fe]"
        );
        assert!(normalise(&parse_url("http://./").unwrap()).is_err());
    }

    #[tokio::test]
    async fn a_trailing_dot_is_pinned_and_requested_without_it() {
        let url = parse_url("http://LocalHost.:9/mcp?x=1").unwrap();
        let checked = check(&url, LOOPBACK).await.unwrap();
        assert_eq!(checked.host, "localhost");
        assert_eq!(checked.url.host_str(), Some("localhost"));
        assert_eq!(checked.url.as_str(), "http://localhost:9/mcp?x=1");
        assert!(checked.addrs.iter().all(|a| a.ip().is_loopback()));
        let refused = check(&url, STRICT).await.unwrap_err();
        assert_eq!(refused.reason(), "BlockedEndpoint");
    }

    #[tokio::test]
    async fn metadata_names_with_a_trailing_dot_or_capitals_are_refused() {
        for raw in [
            "http://metadata.google.internal./computeMetadata/v1/",
            "http://METADATA.google.internal/",
            "http://[::ffff:169.254.169.254]/latest/",
            "http://[fd00:ec2::254]/latest/",
        ] {
            let err = check(&parse_url(raw).unwrap(), LOOPBACK).await.unwrap_err();
            assert_eq!(err.reason(), "BlockedEndpoint", "{raw}");
        }
    }

    #[test]
    fn urls_must_be_http() {
        assert!(parse_url("ftp://example.com/mcp").is_err());
        assert!(parse_url("file:///etc/passwd").is_err());
        assert!(parse_url("https://example.com/mcp").is_ok());
    }

    #[tokio::test]
    async fn metadata_host_names_are_refused_without_resolving() {
        let url = parse_url("http://metadata.google.internal/computeMetadata/v1/").unwrap();
        let err = check(&url, LOOPBACK).await.unwrap_err();
        assert_eq!(err.reason(), "BlockedEndpoint");
    }

    #[tokio::test]
    async fn a_literal_metadata_address_is_refused() {
        let url = parse_url("http://169.254.169.254/latest/meta-data/").unwrap();
        let err = check(&url, LOOPBACK).await.unwrap_err();
        assert_eq!(err.reason(), "BlockedEndpoint");
        assert!(err.to_string().contains("link-local"));
    }
}
