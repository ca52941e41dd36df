//! The endpoint guard: which addresses the operator may connect to. Link-local and cloud-metadata
//! addresses are always refused (a URL in a namespaced resource must not reach the node's
//! credentials); loopback only when the operator runs with an explicit flag.
//!
//! The guard resolves the host itself and hands the checked addresses to the HTTP client, so a
//! name cannot resolve to one address at check time and another at connect time.

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
    pub url: Url,
    /// The host as written in the URL (for TLS and the Host header).
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
    let (host, addrs) = match url.host() {
        Some(Host::Ipv4(ip)) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V4(ip), port)]),
        Some(Host::Ipv6(ip)) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V6(ip), port)]),
        Some(Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
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
    Ok(CheckedEndpoint {
        url: url.clone(),
        host,
        addrs,
    })
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
    let ip = match ip {
        // An IPv4-mapped IPv6 address reaches the IPv4 host: judge it as that.
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4, policy),
        IpAddr::V6(v6) => refusal_v6(v6, policy),
    }
}

fn refusal_v4(ip: Ipv4Addr, policy: EndpointPolicy) -> Option<&'static str> {
    // Alibaba Cloud's metadata service lives outside link-local.
    if ip == Ipv4Addr::new(100, 100, 100, 200) {
        return Some("a cloud metadata address");
    }
    if ip.is_link_local() {
        return Some("a link-local address (cloud metadata services live there)");
    }
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
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
    // AWS's IPv6 metadata endpoint.
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
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
