//! The bounds on talking to one server, and every default in one place: the CRD's field
//! defaults (`spec.timeouts`, `spec.discovery`, `spec.retry`), the probe's flags and
//! [`Limits::default`] all read these constants, so they cannot drift apart.

use std::time::Duration;

/// Default limit for connecting and the handshake, and again for the whole listing.
pub const DEFAULT_CONNECT_TIMEOUT: &str = "10s";
/// Default limit for one tool call made by the sidecar.
pub const DEFAULT_CALL_TIMEOUT: &str = "30s";
/// Default most `tools/list` pages read in one listing.
pub const DEFAULT_MAX_TOOL_PAGES: u32 = 100;
/// Default largest single response accepted from a server, in bytes (4 MiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;
/// Default interval between catalogue reads when nothing else triggers one.
pub const DEFAULT_REFRESH_INTERVAL: &str = "5m";
/// Default number of resends of a read-only or idempotent call that failed in transit.
pub const DEFAULT_RETRY: u32 = 2;

/// Bounds on one connection and listing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Applies to the handshake, and again to the whole listing.
    pub connect_timeout: Duration,
    pub max_tool_pages: u32,
    pub max_response_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: super::Duration::from_static(DEFAULT_CONNECT_TIMEOUT).as_std(),
            max_tool_pages: DEFAULT_MAX_TOOL_PAGES,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limits_are_the_documented_defaults() {
        let limits = Limits::default();
        assert_eq!(limits.connect_timeout, Duration::from_secs(10));
        assert_eq!(limits.max_tool_pages, 100);
        assert_eq!(limits.max_response_bytes, 4 * 1024 * 1024);
    }
}
