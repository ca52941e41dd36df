//! One `tools/list_changed` subscription per McpServer whose server pushes changes. Each lives in
//! its own task: a pushed change, or the subscription ending, forces a new probe of that server
//! through the normal reconcile. Ended subscriptions reopen with backoff; a reopened one also
//! forces a probe, since changes made while it was down were never pushed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use crate::api::mcp_server::McpServer;
use crate::mcp::{ServerConnection, WatchError, WatchEvent, watch_tool_changes};

use super::schedule::{ProbeSchedule, ServerKey};
use crate::controller::health::metrics::Metrics;

const MAX_BACKOFF: Duration = Duration::from_secs(60);

struct Entry {
    identity: String,
    task: JoinHandle<()>,
}

/// The open subscriptions of the leading replica.
#[derive(Default)]
pub struct Subscriptions {
    entries: Mutex<HashMap<ServerKey, Entry>>,
    trigger: Mutex<Option<mpsc::Sender<ObjectRef<McpServer>>>>,
}

impl Subscriptions {
    /// Starts delivering triggers to a (new) controller run.
    pub fn attach(&self, trigger: mpsc::Sender<ObjectRef<McpServer>>) {
        *self.trigger.lock().expect("subscriptions lock") = Some(trigger);
    }

    /// Closes every subscription (leadership lost, shutdown).
    pub fn detach(&self) {
        *self.trigger.lock().expect("subscriptions lock") = None;
        for (_, entry) in self.entries.lock().expect("subscriptions lock").drain() {
            entry.task.abort();
        }
    }

    /// Holds a subscription for the server, opened after `delay`; a different `identity`
    /// (URL, credentials) replaces the old one.
    pub fn ensure(
        &self,
        key: &ServerKey,
        identity: &str,
        conn: ServerConnection,
        schedule: Arc<ProbeSchedule>,
        metrics: Arc<Metrics>,
        delay: Duration,
    ) {
        let Some(trigger) = self.trigger.lock().expect("subscriptions lock").clone() else {
            return;
        };
        let mut entries = self.entries.lock().expect("subscriptions lock");
        if let Some(existing) = entries.get(key)
            && existing.identity == identity
            && !existing.task.is_finished()
        {
            return;
        }
        if let Some(old) = entries.remove(key) {
            old.task.abort();
        }
        let key_owned = key.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            hold(key_owned, conn, trigger, schedule, metrics).await
        });
        entries.insert(
            key.clone(),
            Entry {
                identity: identity.to_string(),
                task,
            },
        );
    }

    pub fn remove(&self, key: &ServerKey) {
        if let Some(entry) = self.entries.lock().expect("subscriptions lock").remove(key) {
            entry.task.abort();
        }
    }
}

/// Decrements the open-subscriptions gauge however the task ends (aborts included).
struct OpenGauge(Arc<Metrics>);

impl OpenGauge {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.subscriptions_open.inc();
        OpenGauge(metrics)
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.subscriptions_open.dec();
    }
}

async fn hold(
    key: ServerKey,
    conn: ServerConnection,
    trigger: mpsc::Sender<ObjectRef<McpServer>>,
    schedule: Arc<ProbeSchedule>,
    metrics: Arc<Metrics>,
) {
    let (namespace, name) = (key.0.clone(), key.1.clone());
    let reprobe = || {
        schedule.force_probe(&key);
        let _ = trigger.try_send(ObjectRef::new(&name).within(&namespace));
    };
    let mut backoff = Duration::from_secs(1);
    let mut first = true;
    loop {
        match watch_tool_changes(&conn).await {
            Ok(mut watch) => {
                let _open = OpenGauge::new(metrics.clone());
                let opened = Instant::now();
                if !first {
                    // Whatever changed while we were not subscribed was never pushed.
                    reprobe();
                }
                debug!(%namespace, mcpserver = %name, "subscribed to tools/list_changed");
                loop {
                    match watch.next().await {
                        WatchEvent::ToolsChanged => {
                            info!(%namespace, mcpserver = %name, "the server pushed tools/list_changed");
                            reprobe();
                        }
                        WatchEvent::Ended(why) => {
                            info!(%namespace, mcpserver = %name, "tools/list_changed subscription ended: {why}");
                            reprobe();
                            break;
                        }
                        // A tool watch is never sent these (it asks for tool changes only).
                        WatchEvent::PromptsChanged
                        | WatchEvent::ResourcesChanged
                        | WatchEvent::ResourceUpdated(_) => {}
                    }
                }
                if opened.elapsed() > MAX_BACKOFF {
                    backoff = Duration::from_secs(1);
                }
            }
            Err(WatchError::NotPushed(_)) => return,
            Err(WatchError::Failed(e)) => {
                debug!(%namespace, mcpserver = %name, reason = e.reason(), "subscribing failed: {e}");
            }
        }
        first = false;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
