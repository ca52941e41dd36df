//! The live tool definitions of every upstream the grants name, kept fresh per server: one
//! refresher task per server reads its whole tool list (the controller's own bounded
//! [`mcp::read_server`]), again when the server pushes `notifications/tools/list_changed`, when
//! its `ttlMs` runs out, or every [`Refresh::fallback`] for a legacy server that pushes nothing.
//! Agent requests never trigger an upstream listing: they read what is here.
//!
//! ```text
//! grants doc ──► reconcile(): one refresher per (server, endpoint) ──► read_server / watch
//!                                                                          │
//!                        Definitions { server → Live } ◄──────────────────┘  + generation bump
//! ```
//!
//! Each definition is kept with its digest (the controller's [`definition_digest`] over the
//! raw upstream JSON), so the rug-pull guard at list and call time compares two strings.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::grants::{Endpoint, GrantsDocument};
use crate::mcp::catalog::definition_digest;
use crate::mcp::{self, EndpointPolicy, WatchEvent};

use super::credentials::CredentialsDir;
use super::metrics::Metrics;

/// One live definition, as the upstream lists it now.
#[derive(Debug)]
pub struct LiveTool {
    pub definition: Map<String, Value>,
    pub digest: String,
}

/// What the sidecar knows of one server's tools.
#[derive(Debug, Clone)]
pub enum Live {
    /// The first read has not finished.
    Reading,
    /// The server's tools by raw name.
    Ready(Arc<HashMap<String, Arc<LiveTool>>>),
    /// The server cannot be read now; the reason is a sentence (never a credential).
    Unavailable(String),
    /// Files it needs (`secrets/<name>/<key>`) cannot be read; the sentence names the first.
    MissingCredentials { sentence: String, keys: Vec<String> },
}

/// How often servers are read again.
#[derive(Debug, Clone, Copy)]
pub struct Refresh {
    /// For a server that gives no `ttlMs` and pushes no changes.
    pub fallback: Duration,
    /// Floor under a server's `ttlMs` (a 0 ms TTL must not mean a busy loop).
    pub min_ttl: Duration,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh {
            fallback: Duration::from_secs(60),
            min_ttl: Duration::from_secs(1),
        }
    }
}

struct Refresher {
    endpoint: Endpoint,
    task: JoinHandle<()>,
}

/// Every server's live tools, and the refreshers keeping them.
pub struct Definitions {
    live: RwLock<HashMap<String, Live>>,
    refreshers: std::sync::Mutex<HashMap<String, Refresher>>,
    /// Bumped whenever any server's tools (or availability) change.
    generation: watch::Sender<u64>,
    credentials: CredentialsDir,
    policy: EndpointPolicy,
    refresh: Refresh,
    metrics: Arc<Metrics>,
}

impl Definitions {
    pub fn new(
        credentials: CredentialsDir,
        policy: EndpointPolicy,
        refresh: Refresh,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Definitions {
            live: RwLock::new(HashMap::new()),
            refreshers: std::sync::Mutex::new(HashMap::new()),
            generation: watch::channel(0).0,
            credentials,
            policy,
            refresh,
            metrics,
        })
    }

    /// What is known of `server` now (Reading for a server not read yet).
    pub fn get(&self, server: &str) -> Live {
        self.live
            .read()
            .expect("definitions lock")
            .get(server)
            .cloned()
            .unwrap_or(Live::Reading)
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Starts a refresher for every available server of `doc` with an endpoint, restarts the
    /// ones whose endpoint changed and stops the ones no longer named.
    pub fn reconcile(self: &Arc<Self>, doc: &GrantsDocument) {
        let mut refreshers = self.refreshers.lock().expect("refreshers lock");
        let wanted: HashMap<&str, &Endpoint> = doc
            .servers
            .iter()
            .filter(|s| s.available)
            .filter_map(|s| s.endpoint.as_ref().map(|e| (s.name.as_str(), e)))
            .collect();
        let mut dropped = false;
        refreshers.retain(|name, r| {
            let keep = wanted.get(name.as_str()) == Some(&&r.endpoint);
            if !keep {
                r.task.abort();
                dropped = true;
                self.live.write().expect("definitions lock").remove(name);
            }
            keep
        });
        for (name, endpoint) in wanted {
            if refreshers.contains_key(name) {
                continue;
            }
            let this = Arc::clone(self);
            let server = name.to_string();
            let ep = endpoint.clone();
            let task = tokio::spawn(async move { this.keep_fresh(server, ep).await });
            refreshers.insert(
                name.to_string(),
                Refresher {
                    endpoint: endpoint.clone(),
                    task,
                },
            );
        }
        if dropped {
            self.generation.send_modify(|g| *g += 1);
        }
    }

    fn set(&self, server: &str, live: Live) {
        let changed = {
            let mut map = self.live.write().expect("definitions lock");
            let same = match (map.get(server), &live) {
                (Some(Live::Ready(a)), Live::Ready(b)) => {
                    a.len() == b.len()
                        && a.iter()
                            .all(|(k, v)| b.get(k).is_some_and(|w| w.digest == v.digest))
                }
                (Some(Live::Unavailable(a)), Live::Unavailable(b)) => a == b,
                (
                    Some(Live::MissingCredentials {
                        sentence: a,
                        keys: x,
                    }),
                    Live::MissingCredentials {
                        sentence: b,
                        keys: y,
                    },
                ) => a == b && x == y,
                (Some(Live::Reading), Live::Reading) => true,
                _ => false,
            };
            map.insert(server.to_string(), live);
            !same
        };
        if changed {
            self.generation.send_modify(|g| *g += 1);
        }
    }

    async fn keep_fresh(self: Arc<Self>, server: String, endpoint: Endpoint) {
        let mut backoff = Duration::from_millis(500);
        let mut watch: Option<mcp::ToolChangeWatch> = None;
        let mut pushes = false;
        loop {
            let resolved = match self.credentials.resolve(&endpoint, self.policy) {
                Ok(r) => r,
                Err(sentence) => {
                    self.record(&server, "CredentialMissing");
                    let keys = self.credentials.missing(&endpoint);
                    if !matches!(self.get(&server), Live::MissingCredentials { sentence: ref s, keys: ref k } if *s == sentence && *k == keys)
                    {
                        tracing::warn!(
                            server,
                            reason = "CredentialMissing",
                            missing = keys.join(","),
                            "server unavailable: {sentence}"
                        );
                    }
                    self.set(&server, Live::MissingCredentials { sentence, keys });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            };
            if pushes && watch.is_none() {
                // Opened before the read, so a change made while reading is not missed.
                watch = mcp::watch_tool_changes(&resolved.conn).await.ok();
            }
            let mut failed = false;
            let wait = match mcp::read_server(&resolved.conn).await {
                Ok(report) => {
                    backoff = Duration::from_millis(500);
                    self.record(&server, "ok");
                    let tools = report
                        .tools
                        .into_iter()
                        .filter_map(|definition| {
                            let name = definition.get("name")?.as_str()?.to_string();
                            let digest = definition_digest(&Value::Object(definition.clone()));
                            Some((name, Arc::new(LiveTool { definition, digest })))
                        })
                        .collect();
                    self.set(&server, Live::Ready(Arc::new(tools)));
                    let first_push = report.pushes_tool_changes && !pushes;
                    pushes = report.pushes_tool_changes;
                    if first_push {
                        continue;
                    }
                    match report.ttl_ms {
                        Some(ms) => Duration::from_millis(ms).max(self.refresh.min_ttl),
                        None => self.refresh.fallback,
                    }
                }
                Err(failure) => {
                    let reason = failure.error.reason();
                    self.unavailable(
                        &server,
                        reason,
                        format!("its tools could not be read: {}", failure.error),
                    );
                    watch = None;
                    failed = true;
                    let wait = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    wait
                }
            };
            match watch.as_mut() {
                Some(w) => {
                    tokio::select! {
                        event = w.next() => {
                            if let WatchEvent::Ended(_) = event {
                                watch = None;
                            }
                        }
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                None if failed => {
                    self.wait_or_rotated(&endpoint, &resolved.identity, wait)
                        .await
                }
                None => tokio::time::sleep(wait).await,
            }
        }
    }

    /// Waits out a backoff, but reads again at once when the credential files change (a
    /// rotated Secret must not wait for the longest backoff).
    async fn wait_or_rotated(&self, endpoint: &Endpoint, identity: &str, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250).min(wait)).await;
            match self.credentials.resolve(endpoint, self.policy) {
                Ok(r) if r.identity != identity => return,
                _ => {}
            }
        }
    }

    fn unavailable(&self, server: &str, reason: &str, sentence: String) {
        self.record(server, reason);
        if !matches!(self.get(server), Live::Unavailable(ref s) if *s == sentence) {
            tracing::warn!(server, reason, "server unavailable: {sentence}");
        }
        self.set(server, Live::Unavailable(sentence));
    }

    fn record(&self, server: &str, result: &str) {
        self.metrics
            .catalog_reads
            .get_or_create(&vec![
                ("server".to_string(), server.to_string()),
                ("result".to_string(), result.to_string()),
            ])
            .inc();
    }

    /// Stops every refresher (shutdown).
    pub fn stop(&self) {
        for (_, r) in self.refreshers.lock().expect("refreshers lock").drain() {
            r.task.abort();
        }
    }
}
