//! `mcp-operator sidecar`: the agent's only MCP endpoint. It reads the agent's grants from the
//! mounted grants ConfigMap, offers exactly the granted tools (with the upstreams' live
//! definitions) and checks every call against the grants before anything reaches an upstream.
//! Depends on [`crate::grants`] and [`crate::mcp`] only: no Kubernetes client, no CRD types.
//!
//! ```text
//!            grants_file (poll ..data swap) ──► GrantsState ─┐
//!                                                            ├─► view task ──► View (listing) ──► downstream
//! definitions (one refresher per upstream) ─► Live tools ────┘                   tools/list, list_changed
//!                                                                                      │
//! agent ──► downstream /mcp ──► discovery::call ──► calls (narrow → available → definition → approval → send)
//!                                  │ list_tools, get_tool_info: the View's deferred tools        ▲          │
//!                                  └ call_tool: resolve the target ──────────────────────────────┘          │
//!                                    calls ─► audit line, metrics                upstream pool ◄────────────┘
//!                                                                      (server, credential) credentials (files, read per connect)
//! ```
//!
//! - [`grants_file`]: reads and watches `grants.json` and checks its signature `grants.sig`
//!   (with `--grants-verify-keys`); a bad or unsigned document keeps the last good one, a
//!   missing or revoked one grants nothing.
//! - [`credentials`]: Secret and ConfigMap keys as files, read for every connection.
//! - [`definitions`]: per-upstream live tool definitions (ttlMs, list_changed).
//! - [`listing`]: pure: the grants and the live definitions → what the agent sees.
//! - [`discovery`]: deferred servers' discovery tools (list_tools, get_tool_info, call_tool).
//! - [`calls`]: the call pipeline and the resend rules.
//! - [`resources_prompts`]: resources and prompts, narrowed by the grants' bounds (lists, read,
//!   get, complete, subscribe), named `<prefix>+<uri>` and `<prefix>__<prompt>`.
//! - [`prompt_pins`]: under pinning, a prompt is served only as approved (`promptDigests`).
//! - [`relay`]: the upstreams' resource updates and resource/prompt list changes, relayed for
//!   granted items only.
//! - [`approval`]: asking the agent's client before a gated call (elicitation, both eras).
//! - [`upstream`]: the connection pool.
//! - [`downstream`]: the agent-facing `/mcp` handler, both protocol eras.
//! - [`sessions`]: legacy sessions as sealed ids, so they outlive a restart of the sidecar.
//! - [`audit`], [`metrics`], [`ops`]: the audit line, Prometheus metrics, health and readiness.
//! - [`traces`]: one span per agent request (OTLP export only when `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   is set), the agent's trace context carried to the upstream.

pub mod approval;
pub mod audit;
pub mod calls;
pub mod credentials;
pub mod definitions;
pub mod discovery;
pub mod downstream;
pub mod grants_file;
pub mod listing;
pub mod metrics;
pub mod ops;
pub mod prompt_pins;
pub mod relay;
pub mod resources_prompts;
pub mod sessions;
pub mod streamed;
pub mod traces;
pub mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::mcp::EndpointPolicy;

use self::calls::Calls;
use self::credentials::CredentialsDir;
use self::definitions::{Definitions, Refresh};
use self::downstream::Downstream;
use self::grants_file::{SequenceFile, Trust};
use self::listing::View;
use self::metrics::{Metrics, server_label};
use self::ops::Readiness;
use crate::grants::signature::{Binding, VerifyingKeys};

/// Flags of `mcp-operator sidecar` (the injector and the tests rely on them).
#[derive(clap::Args, Debug, Clone)]
pub struct SidecarArgs {
    /// `grants.json` inside the mounted grants ConfigMap; its directory is watched.
    #[arg(long, env = "MCP_SIDECAR_GRANTS_FILE")]
    pub grants_file: PathBuf,
    /// Where the referenced Secret and ConfigMap keys are mounted: DIR/secrets/<secret>/<key>,
    /// DIR/configmaps/<configmap>/<key>.
    #[arg(long, env = "MCP_SIDECAR_CREDENTIALS_DIR")]
    pub credentials_dir: PathBuf,
    /// The files under --credentials-dir the pod mounts (`secrets/<secret>/<key>`,
    /// comma-separated; empty: none), as the injection laid them out. A key the grants
    /// reference later that is not among them is reported as needing a pod restart.
    #[arg(long, env = "MCP_SIDECAR_MOUNTED_CREDENTIALS", value_delimiter = ',')]
    pub mounted_credentials: Option<Vec<String>>,
    /// Address the agent connects to (`http://<listen>/mcp`). Loopback only unless
    /// --allow-remote-agents.
    #[arg(long, default_value = "127.0.0.1:9500")]
    pub listen: SocketAddr,
    /// Address for /healthz, /readyz and /metrics (they are also served on --listen).
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// The AgentSpec's name, for the audit line.
    #[arg(long, default_value = "agent")]
    pub agent: String,
    /// Let upstream URLs point at loopback addresses (tests, a server in the same Pod).
    #[arg(long)]
    pub allow_loopback: bool,
    /// Accept agents from other machines (listen on a non-loopback address, no Host check).
    #[arg(long)]
    pub allow_remote_agents: bool,
    /// Bytes of upstream answers held at once, over every call and listing: an answer that
    /// does not fit waits its turn (up to 30 s), one that could never fit is refused with
    /// OverResponseBudget. A JSON answer is held once (its bytes pass through); an answer on an
    /// event stream three times (bytes, values, the agent's copy). The default, 64 MiB, passes
    /// one JSON answer at the CRD's maximum maxResponseBytes (64 MiB) and stays inside the
    /// chart's 128Mi sidecar limit with the sidecar's own ~30 MB.
    #[arg(long, default_value_t = DEFAULT_RESPONSE_BUDGET, value_parser = clap::value_parser!(u64).range(1024 * 1024..))]
    pub response_budget: u64,
    /// Largest agent request body, in bytes (at most --request-budget).
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Bytes of agent request bodies held at once, over every request being read or served:
    /// a body that does not fit waits for others to finish (up to 30 s), then is refused with
    /// 503 and Retry-After. The default, 8 MiB, holds two bodies at the default
    /// --max-request-bytes, and with --response-budget keeps the sidecar inside the chart's
    /// 128Mi limit.
    #[arg(long, default_value_t = DEFAULT_REQUEST_BUDGET, value_parser = clap::value_parser!(u64).range(1024..))]
    pub request_budget: u64,
    /// How often a server that gives no ttlMs and pushes no list_changed is read again.
    #[arg(long, default_value = "60s", value_parser = crate::core::duration::parse_duration)]
    pub refresh_interval: Duration,
    /// How long SIGTERM waits for in-flight calls before exiting.
    #[arg(long, default_value = "30s", value_parser = crate::core::duration::parse_duration)]
    pub drain_timeout: Duration,
    /// How long a legacy-era call that needs approval waits for the person's answer.
    #[arg(long, default_value = "120s", value_parser = crate::core::duration::parse_duration)]
    pub approval_timeout: Duration,
    /// How long a modern-era approval request (its requestState) stays good.
    #[arg(long, default_value = "5m", value_parser = crate::core::duration::parse_duration)]
    pub approval_ttl: Duration,
    /// A file whose bytes (at least 32) are the key sealing approval states and legacy session
    /// ids, e.g. a mounted Secret key. Without it the sidecar keeps a key of its own in
    /// --state-dir (made on first start, so a restarted sidecar still knows its agent's
    /// sessions), or, without that either, makes a random key at start.
    #[arg(long, env = "MCP_SIDECAR_APPROVAL_KEY_FILE")]
    pub approval_key_file: Option<PathBuf>,
    /// How long a legacy session stays good after its initialize (e.g. 24h); beyond it the
    /// agent is asked to initialize again (404). Unset: as long as the pod lives.
    #[arg(long, env = "MCP_SIDECAR_SESSION_MAX_AGE")]
    pub session_max_age: Option<crate::core::Duration>,
    /// The operator's public keys, `<key id>:<base64>,…` (the injection passes them): only a
    /// grants document signed by one of them for this pod's AgentSpec is obeyed. Without it
    /// (a sidecar run by hand) grants documents are obeyed unsigned.
    #[arg(long, env = "MCP_SIDECAR_GRANTS_VERIFY_KEYS")]
    pub grants_verify_keys: Option<String>,
    /// The AgentSpec's namespace, which a signed document must name (with
    /// --grants-verify-keys).
    #[arg(long, env = "MCP_SIDECAR_AGENT_NAMESPACE")]
    pub agent_namespace: Option<String>,
    /// The AgentSpec's uid, which a signed document must name (with --grants-verify-keys): a
    /// document of an AgentSpec deleted and created again under the same name is refused.
    #[arg(long, env = "MCP_SIDECAR_AGENT_UID")]
    pub agent_uid: Option<String>,
    /// A directory that outlives a restart of the sidecar (the pod's emptyDir): the highest
    /// grants sequence accepted is kept there, so an older document put back is refused after
    /// a restart too; so are the key sealing session ids and the sessions the agent ended.
    #[arg(long, env = "MCP_SIDECAR_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The oldest grants sequence to obey, even before anything is in --state-dir: the
    /// injection passes the sequence the AgentSpec's status says is published, so an older
    /// signed document put back in the ConfigMap is refused by a brand-new pod too.
    #[arg(long, env = "MCP_SIDECAR_GRANTS_MIN_SEQUENCE")]
    pub grants_min_sequence: Option<u64>,
}

impl SidecarArgs {
    /// Which grants documents this sidecar obeys.
    pub fn trust(&self) -> Result<Trust, SidecarError> {
        let Some(keys) = &self.grants_verify_keys else {
            return Ok(Trust::Unsigned);
        };
        let keys = VerifyingKeys::parse(keys)
            .map_err(|e| SidecarError::GrantsTrust(format!("--grants-verify-keys: {e}")))?;
        let (Some(namespace), Some(uid)) = (&self.agent_namespace, &self.agent_uid) else {
            return Err(SidecarError::GrantsTrust(
                "--grants-verify-keys needs --agent-namespace and --agent-uid: a signed document is bound to its AgentSpec".into(),
            ));
        };
        Ok(Trust::Signed {
            keys,
            binding: Binding {
                namespace: namespace.clone(),
                agent_spec: self.agent.clone(),
                uid: uid.clone(),
            },
            state: self.state_dir.as_deref().map(SequenceFile::in_dir),
            min_sequence: self.grants_min_sequence,
        })
    }
}

/// The default `--response-budget` (see there).
pub const DEFAULT_RESPONSE_BUDGET: u64 = 64 * 1024 * 1024;

/// The default `--request-budget` (see there).
pub const DEFAULT_REQUEST_BUDGET: u64 = 8 * 1024 * 1024;

/// Why the sidecar could not run.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error(
        "refusing to listen on {0}: agents are served on loopback only (pass --allow-remote-agents to change that)"
    )]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("serving agents failed: {0}")]
    Serve(std::io::Error),
    #[error("cannot use the approval key file {path}: {reason}")]
    ApprovalKey { path: PathBuf, reason: String },
    #[error("cannot check the grants' signatures: {0}")]
    GrantsTrust(String),
    #[error(
        "--max-request-bytes={max} is over --request-budget={budget}: such a request could never be read; raise the budget or lower the bound"
    )]
    RequestOverBudget { max: usize, budget: u64 },
}

impl SidecarError {
    pub fn reason(&self) -> &'static str {
        match self {
            SidecarError::NotLoopback(_) => "NotLoopback",
            SidecarError::Bind { .. } => "BindFailed",
            SidecarError::Serve(_) => "ServeFailed",
            SidecarError::ApprovalKey { .. } => "ApprovalKeyInvalid",
            SidecarError::GrantsTrust(_) => "GrantsVerifyKeysInvalid",
            SidecarError::RequestOverBudget { .. } => "RequestOverBudget",
        }
    }
}

/// Runs the sidecar until SIGTERM (or Ctrl-C), then drains in-flight calls.
pub async fn run(args: SidecarArgs) -> Result<(), SidecarError> {
    if !args.listen.ip().is_loopback() && !args.allow_remote_agents {
        return Err(SidecarError::NotLoopback(args.listen));
    }
    if args.max_request_bytes as u64 > args.request_budget {
        return Err(SidecarError::RequestOverBudget {
            max: args.max_request_bytes,
            budget: args.request_budget,
        });
    }
    let traces = crate::telemetry::init("mcp-operator-sidecar");
    let result = serve(args).await;
    traces.shutdown().await;
    result
}

async fn serve(args: SidecarArgs) -> Result<(), SidecarError> {
    let key = match (&args.approval_key_file, &args.state_dir) {
        (Some(path), _) => std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| approval::StateKey::from_bytes(&bytes))
            .map_err(|reason| SidecarError::ApprovalKey {
                path: path.clone(),
                reason,
            })?,
        (None, Some(dir)) => approval::StateKey::kept_in(dir).unwrap_or_else(|reason| {
            tracing::warn!(
                reason = "StateDirUnwritable",
                error = %reason,
                "sealing with a key of this process only: agents' legacy sessions will not survive a restart of the sidecar"
            );
            approval::StateKey::generate()
        }),
        (None, None) => approval::StateKey::generate(),
    };
    let sessions = Arc::new(sessions::Sessions::new(
        key.clone(),
        &args.agent,
        args.session_max_age.as_ref().map(|d| d.as_std()),
        args.state_dir.as_deref(),
    ));
    let trust = args.trust()?;
    match &trust {
        Trust::Unsigned => tracing::warn!(
            reason = "UnsignedGrants",
            "no --grants-verify-keys: grants documents are obeyed without checking their signature; fine for a sidecar run by hand, never for one next to an agent in a cluster (the injected sidecar always has keys)"
        ),
        Trust::Signed { keys, binding, .. } => tracing::info!(
            keys = %keys.ids().join(","),
            namespace = %binding.namespace,
            agentspec = %binding.agent_spec,
            uid = %binding.uid,
            "obeying only grants signed by the operator for this AgentSpec"
        ),
    }
    let metrics = Arc::new(Metrics::new());
    let grants = grants_file::watch_file(args.grants_file.clone(), trust, Arc::clone(&metrics));
    let policy = EndpointPolicy {
        allow_loopback: args.allow_loopback,
    };
    let budget = crate::mcp::ResponseBudget::new(args.response_budget);
    metrics.report_response_budget(&budget, args.response_budget);
    let mut credentials =
        CredentialsDir::new(args.credentials_dir.clone()).with_budget(budget.clone());
    if let Some(mounted) = args.mounted_credentials.clone() {
        credentials = credentials.with_mounted(mounted);
    }
    let definitions = Definitions::new(
        credentials.clone(),
        policy,
        Refresh {
            fallback: args.refresh_interval,
            ..Refresh::default()
        },
        Arc::clone(&metrics),
    );
    let (view_tx, view_rx) = watch::channel(Arc::new(View::default()));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let calls = Arc::new(Calls {
        agent: args.agent.clone(),
        view: view_rx.clone(),
        definitions: Arc::clone(&definitions),
        credentials,
        policy,
        pool: upstream::Pool::new(Arc::clone(&metrics)),
        metrics: Arc::clone(&metrics),
        approvals: approval::Approvals::new(key, args.approval_ttl, args.approval_timeout),
        relay: relay::Relay::default(),
    });
    let readiness = Arc::new(Readiness::new(grants.clone(), view_rx.clone()));
    tokio::spawn(maintain_view(
        grants,
        Arc::clone(&definitions),
        Arc::clone(&calls),
        view_tx,
        Arc::clone(&metrics),
    ));

    let downstream = Downstream::new(
        Arc::clone(&calls),
        view_rx,
        sessions,
        Arc::clone(&metrics),
        downstream::RequestBodies {
            max_bytes: args.max_request_bytes,
            budget: crate::mcp::ResponseBudget::new(args.request_budget),
        },
        !args.allow_remote_agents,
        shutdown_rx.clone(),
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| SidecarError::Bind {
            addr: args.listen,
            error,
        })?;
    let bound = listener.local_addr().map_err(SidecarError::Serve)?;
    let ops_routes = ops::router(Arc::clone(&readiness), Arc::clone(&metrics));
    if let Some(addr) = args.metrics_addr {
        let ops_listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|error| SidecarError::Bind { addr, error })?;
        let routes = ops_routes.clone();
        let stop = shutdown_rx.clone();
        tokio::spawn(async move {
            let _ = downstream::serve(ops_listener, routes, stop).await;
        });
    }
    let router = downstream.router().merge(ops_routes);
    tracing::info!(
        listen = %bound,
        agent = %args.agent,
        grants_file = %args.grants_file.display(),
        "serving agents at http://{bound}/mcp"
    );
    let mut server = tokio::spawn(downstream::serve(listener, router, shutdown_rx));
    tokio::select! {
        served = &mut server => {
            definitions.stop();
            calls.relay.stop();
            return served.map_err(|e| SidecarError::Serve(std::io::Error::other(e)))?.map_err(SidecarError::Serve);
        }
        _ = crate::mcp::serving::terminated() => {}
    }
    tracing::info!("stopping: no new calls, waiting for in-flight calls to finish");
    let _ = shutdown_tx.send(true);
    match tokio::time::timeout(args.drain_timeout, &mut server).await {
        Ok(_) => tracing::info!("in-flight calls finished; stopped"),
        Err(_) => tracing::warn!(
            "in-flight calls did not finish within {:?}; stopping anyway",
            args.drain_timeout
        ),
    }
    definitions.stop();
    calls.relay.stop();
    Ok(())
}

/// Keeps the shared [`View`] equal to what the current grants and live definitions say, and
/// the refreshers and pool in line with the grants.
async fn maintain_view(
    mut grants: watch::Receiver<grants_file::GrantsState>,
    definitions: Arc<Definitions>,
    calls: Arc<Calls>,
    view: watch::Sender<Arc<View>>,
    metrics: Arc<Metrics>,
) {
    let mut live = definitions.subscribe();
    let mut digest: Option<String> = None;
    loop {
        let (current, nothing) = {
            let state = grants.borrow_and_update();
            (state.current.clone(), state.why_nothing())
        };
        let grants_digest = current.as_ref().map(|c| c.digest.clone());
        if grants_digest != digest {
            digest = grants_digest;
            if let Some(loaded) = &current {
                definitions.reconcile(&loaded.doc);
                calls
                    .relay
                    .reconcile(&calls, &loaded.doc, &loaded.narrowing);
                let names: Vec<String> =
                    loaded.doc.servers.iter().map(|s| s.name.clone()).collect();
                calls.pool.retain_servers(&names).await;
            } else {
                calls.relay.stop();
            }
        }
        live.borrow_and_update();
        let mut next = listing::build(current, &|server| definitions.get(server));
        next.nothing_granted = nothing;
        for (server, n) in next.withheld_by_server() {
            metrics
                .definitions_withheld
                .get_or_create(&server_label(&server))
                .set(n);
        }
        let moved = view.borrow().digest != next.digest;
        if moved {
            tracing::info!(
                tools = next.tools.len(),
                not_offered = next.missing.len(),
                "the agent's tool list changed"
            );
        }
        view.send_replace(Arc::new(next));
        tokio::select! {
            changed = grants.changed() => if changed.is_err() { return },
            changed = live.changed() => if changed.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SidecarArgs,
    }

    fn mounted(extra: &[&str]) -> Option<Vec<String>> {
        let base = [
            "sidecar",
            "--grants-file",
            "g.json",
            "--credentials-dir",
            "c",
        ];
        Cli::try_parse_from(base.iter().chain(extra))
            .expect("the flags parse")
            .args
            .mounted_credentials
    }

    /// The injection always passes the flag, empty when the pod mounts no credentials.
    #[test]
    fn mounted_credentials_parse_as_the_injection_writes_them() {
        assert_eq!(mounted(&[]), None);
        let none = mounted(&["--mounted-credentials="]).expect("given");
        assert!(none.iter().all(String::is_empty), "{none:?}");
        assert_eq!(
            mounted(&["--mounted-credentials=secrets/a/k,configmaps/ca/ca.crt"]),
            Some(vec!["secrets/a/k".into(), "configmaps/ca/ca.crt".into()])
        );
    }
}
