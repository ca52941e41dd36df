//! What every reconciler shares: the client, settings (the field manager of every write), metrics
//! and the event recorder. What only one reconciler needs lives in its own context (the McpServer
//! reconciler's probe schedule and subscriptions, the AgentSpec reconciler's stores).

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::Recorder;

use super::metrics::Metrics;
use crate::mcp::ResponseBudget;

/// Settings from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Allow MCP servers on loopback addresses (tests and the demo).
    pub allow_loopback: bool,
    /// The field manager of every write.
    pub field_manager: String,
    /// The longest wait before re-probing a failing server.
    pub max_failure_backoff: Duration,
    /// The operator's own image, whose binary a stdio McpServer's pods run as their bridge.
    pub bridge_image: Option<String>,
    /// The namespace the operator runs in: a stdio server's NetworkPolicy admits its pods.
    pub operator_namespace: Option<String>,
    /// Probes running at once (each waits on a socket far more than it works).
    pub probe_concurrency: usize,
    /// The bound on MCP response bytes every read and watch holds at once; `None` in unit
    /// tests (only the per-response cap).
    pub response_budget: Option<ResponseBudget>,
    /// The namespace of the kept pins (`--pin-store-namespace`); `None` in unit tests (pins
    /// live in status only).
    pub pin_store_namespace: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            allow_loopback: false,
            field_manager: "mcp-operator".into(),
            max_failure_backoff: Duration::from_secs(60),
            bridge_image: None,
            operator_namespace: None,
            probe_concurrency: 128,
            response_budget: None,
            pin_store_namespace: None,
        }
    }
}

pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub signing: Signing,
}

/// The grants signing keyring as this replica sees it, and how long a deleted AgentSpec's
/// revoked grants are served before its ConfigMap goes.
#[derive(Clone)]
pub struct Signing {
    pub keys: tokio::sync::watch::Receiver<super::signing::KeyringState>,
    pub at: super::signing::KeyringSecret,
    pub revoke_wait: Duration,
}

impl Context {
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Arc<Metrics>,
        recorder: Recorder,
        signing: Signing,
    ) -> Self {
        Context {
            client,
            settings,
            metrics,
            recorder,
            signing,
        }
    }
}
