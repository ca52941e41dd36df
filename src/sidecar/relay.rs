//! What the upstreams push about resources and prompts, relayed to the agent for granted
//! items only: `notifications/resources/updated` for a resource the agent subscribed to and is
//! granted now (its URI renamed `<prefix>+<uri>`), `notifications/resources/list_changed` and
//! `notifications/prompts/list_changed` from a server that grants it resources or prompts.
//! (A change of the grants themselves is noticed by the agent's stream, in
//! [`super::downstream`].)
//!
//! ```text
//! agent subscribes  legacy resources/subscribe, modern subscriptions/listen resourceSubscriptions
//!     └─► Calls::subscription: granted? ─► Relay: (server, uri) → subscribers
//!           first / last subscriber ─► upstream: legacy resources/subscribe|unsubscribe on the
//!                                      pooled connection; modern: the watcher listens again
//! one watcher per server granting resources or prompts
//!     pooled connection ─► ToolSession::watch (legacy: the session's GET stream; modern: its
//!     own subscriptions/listen naming the subscribed URIs) ─► Relayed ─► broadcast
//! each agent stream (legacy GET, modern listen) ─► its subscription? granted now? ─► renamed
//! ```
//!
//! The legacy watch uses the pooled connection because a legacy server sends a session's
//! updates on that session's stream only, and some servers (server-everything) start them from
//! a tool call on the same session. The watcher follows the pool: when the pooled connection is
//! replaced (a failure, a rotated credential) it opens the stream on the new one and subscribes
//! again. Subscriptions live in this process: a restarted sidecar forgets them (the agent's
//! session survives, its subscriptions do not).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;

use crate::grants::{Endpoint, GrantsDocument};
use crate::mcp::{Era, Interest, WatchError, WatchEvent};

use super::calls::{Calls, Reply};
use super::resources_prompts::{ListKind, Narrowing};

/// What an upstream pushed, named as it named it (raw URIs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relayed {
    ResourceUpdated { server: String, uri: String },
    ResourcesChanged { server: String },
    PromptsChanged { server: String },
}

/// One server's watcher task, and what it was started for.
struct Watcher {
    endpoint: Endpoint,
    kinds: Kinds,
    task: JoinHandle<()>,
    /// Told when the server's set of subscribed URIs changed (a modern watch listens again).
    resubscribe: Arc<Notify>,
    /// Counts the watches opened, so a subscriber can wait for the one that names its URI.
    opened: watch::Receiver<u64>,
}

/// Which lists of a server the agent is granted items of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kinds {
    resources: bool,
    prompts: bool,
}

/// The agents' resource subscriptions and the watchers that feed them.
pub struct Relay {
    events: broadcast::Sender<Relayed>,
    /// (server, raw URI) → who subscribed: a legacy session id, or a modern listen's key.
    subscribed: Mutex<HashMap<(String, String), HashSet<String>>>,
    watchers: Mutex<HashMap<String, Watcher>>,
}

impl Default for Relay {
    fn default() -> Self {
        Relay {
            events: broadcast::channel(256).0,
            subscribed: Mutex::new(HashMap::new()),
            watchers: Mutex::new(HashMap::new()),
        }
    }
}

impl Relay {
    /// A receiver of everything the watchers relay from now on.
    pub fn events(&self) -> broadcast::Receiver<Relayed> {
        self.events.subscribe()
    }

    /// Records `who`'s subscription; true when nobody had subscribed to it before.
    fn add(&self, who: &str, server: &str, uri: &str) -> bool {
        let mut subscribed = self.subscribed.lock().expect("relay lock");
        let subscribers = subscribed
            .entry((server.to_string(), uri.to_string()))
            .or_default();
        let first = subscribers.is_empty();
        subscribers.insert(who.to_string());
        first
    }

    /// Drops `who`'s subscription; true when it was the last one.
    fn remove(&self, who: &str, server: &str, uri: &str) -> bool {
        let mut subscribed = self.subscribed.lock().expect("relay lock");
        let key = (server.to_string(), uri.to_string());
        let Some(subscribers) = subscribed.get_mut(&key) else {
            return false;
        };
        if !subscribers.remove(who) {
            return false;
        }
        let last = subscribers.is_empty();
        if last {
            subscribed.remove(&key);
        }
        last
    }

    /// Whether `who` subscribed to `server`'s `uri`.
    pub fn subscribes(&self, who: &str, server: &str, uri: &str) -> bool {
        self.subscribed
            .lock()
            .expect("relay lock")
            .get(&(server.to_string(), uri.to_string()))
            .is_some_and(|s| s.contains(who))
    }

    /// The URIs of `server` someone subscribed to, sorted.
    fn uris_of(&self, server: &str) -> Vec<String> {
        let mut uris: Vec<String> = self
            .subscribed
            .lock()
            .expect("relay lock")
            .keys()
            .filter(|(s, _)| s == server)
            .map(|(_, u)| u.clone())
            .collect();
        uris.sort();
        uris
    }

    /// Asks `server`'s modern watch to listen again with the current URIs, and waits (at most
    /// `limit`) until it does, so an update sent right after the agent subscribed is heard.
    async fn resubscribe(&self, server: &str, limit: Duration) {
        let opened = self
            .watchers
            .lock()
            .expect("relay lock")
            .get(server)
            .map(|w| {
                w.resubscribe.notify_one();
                w.opened.clone()
            });
        if let Some(mut opened) = opened {
            let seen = *opened.borrow_and_update();
            let _ = tokio::time::timeout(limit, opened.wait_for(|n| *n > seen)).await;
        }
    }

    /// Starts a watcher for every available server of `doc` granting resources or prompts,
    /// restarts those whose endpoint or grants changed, stops the rest.
    pub fn reconcile(&self, calls: &Arc<Calls>, doc: &GrantsDocument, narrowing: &Narrowing) {
        let wanted: HashMap<String, (Endpoint, Kinds)> = doc
            .servers
            .iter()
            .filter(|s| s.available)
            .filter_map(|s| {
                let kinds = Kinds {
                    resources: narrowing.server_grants(&s.name, ListKind::Resources),
                    prompts: narrowing.server_grants(&s.name, ListKind::Prompts),
                };
                let endpoint = s.endpoint.clone()?;
                (kinds.resources || kinds.prompts).then(|| (s.name.clone(), (endpoint, kinds)))
            })
            .collect();
        let mut watchers = self.watchers.lock().expect("relay lock");
        watchers.retain(|server, w| {
            let keep = wanted
                .get(server)
                .is_some_and(|(e, k)| *e == w.endpoint && *k == w.kinds);
            if !keep {
                w.task.abort();
            }
            keep
        });
        for (server, (endpoint, kinds)) in wanted {
            if watchers.contains_key(&server) {
                continue;
            }
            let resubscribe = Arc::new(Notify::new());
            let (opened_tx, opened) = watch::channel(0);
            let task = tokio::spawn(relay_server(
                Arc::clone(calls),
                server.clone(),
                endpoint.clone(),
                kinds,
                Arc::clone(&resubscribe),
                opened_tx,
            ));
            watchers.insert(
                server,
                Watcher {
                    endpoint,
                    kinds,
                    task,
                    resubscribe,
                    opened,
                },
            );
        }
    }

    /// Stops every watcher (shutdown).
    pub fn stop(&self) {
        for (_, w) in self.watchers.lock().expect("relay lock").drain() {
            w.task.abort();
        }
    }
}

impl Calls {
    /// Records (or drops) `who`'s subscription to the resource the agent names `qualified`,
    /// once it is found granted, and tells the upstream when `who` is its first (or last)
    /// subscriber. `Err` is the agent's answer: not granted (nothing sent), or what the
    /// upstream answered.
    pub async fn subscription(
        &self,
        who: &str,
        qualified: &str,
        subscribe: bool,
    ) -> Result<(), Reply> {
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let mut params = Map::new();
        params.insert("uri".into(), Value::String(qualified.to_string()));
        let found = {
            let view = Arc::clone(&self.view.borrow());
            view.grants.as_ref().and_then(|g| {
                let (surface, uri) = g.narrowing.resource(qualified).ok()?;
                let endpoint = g
                    .doc
                    .servers
                    .iter()
                    .find(|s| s.name == surface.server && s.available)?
                    .endpoint
                    .clone()?;
                Some((surface.server.clone(), uri.to_string(), endpoint))
            })
        };
        let Some((server, uri, endpoint)) = found else {
            // Refused (or the server is unavailable) with the same answer a read gets.
            return match self.resource_request(method, params).await {
                Reply::Result(_) => Ok(()),
                refused => Err(refused),
            };
        };
        let changed = if subscribe {
            self.relay.add(who, &server, &uri)
        } else {
            self.relay.remove(who, &server, &uri)
        };
        if !changed {
            return Ok(());
        }
        if self.upstream_era(&server, &endpoint).await == Some(Era::Modern) {
            let limit = Duration::from_millis(endpoint.connect_timeout_ms.max(1));
            self.relay.resubscribe(&server, limit).await;
            return Ok(());
        }
        match self.resource_request(method, params).await {
            Reply::Result(_) => Ok(()),
            failed => {
                if subscribe {
                    self.relay.remove(who, &server, &uri);
                }
                Err(failed)
            }
        }
    }

    /// Drops every subscription of `who` (a legacy session ended, a modern listen closed),
    /// unsubscribing upstream what nobody else wants, in the background.
    pub fn forget_subscriber(self: &Arc<Self>, who: &str) {
        let mine: Vec<(String, String)> = self
            .relay
            .subscribed
            .lock()
            .expect("relay lock")
            .iter()
            .filter(|(_, subscribers)| subscribers.contains(who))
            .map(|(key, _)| key.clone())
            .collect();
        if mine.is_empty() {
            return;
        }
        let calls = Arc::clone(self);
        let who = who.to_string();
        tokio::spawn(async move {
            for (server, uri) in mine {
                let view = Arc::clone(&calls.view.borrow());
                let qualified = view
                    .grants
                    .as_ref()
                    .and_then(|g| g.narrowing.granted_resource(&server, &uri));
                match qualified {
                    Some(q) => {
                        let _ = calls.subscription(&who, &q, false).await;
                    }
                    // No longer granted: the upstream keeps a subscription nobody hears.
                    None => {
                        calls.relay.remove(&who, &server, &uri);
                    }
                }
            }
        });
    }

    /// The era of `server`'s pooled connection (opened if needed).
    async fn upstream_era(&self, server: &str, endpoint: &Endpoint) -> Option<Era> {
        let resolved = self.credentials.resolve(endpoint, self.policy).ok()?;
        let session = self
            .pool
            .session(server, &resolved, endpoint.era)
            .await
            .ok()?;
        Some(session.era)
    }
}

/// How often a watcher checks that the pool still uses the connection it watches.
const POOL_CHECK: Duration = Duration::from_secs(2);
/// How long a server that pushes nothing is left alone before it is asked again.
const NOT_PUSHED_PAUSE: Duration = Duration::from_secs(300);

/// Keeps one server's notification stream open on its pooled connection and relays what it
/// carries, until aborted.
async fn relay_server(
    calls: Arc<Calls>,
    server: String,
    endpoint: Endpoint,
    kinds: Kinds,
    resubscribe: Arc<Notify>,
    opened: watch::Sender<u64>,
) {
    let mut backoff = Duration::from_millis(500);
    let mut lost = false;
    loop {
        let (mut watch, session, resolved) =
            match open_watch(&calls, &server, &endpoint, kinds).await {
                Ok(open) => open,
                Err(WatchError::NotPushed(why)) => {
                    tracing::info!(
                        server,
                        "the server's resource and prompt changes are not relayed: {why}"
                    );
                    tokio::select! {
                        _ = resubscribe.notified() => {}
                        _ = tokio::time::sleep(NOT_PUSHED_PAUSE) => {}
                    }
                    continue;
                }
                Err(WatchError::Failed(e)) => {
                    tracing::debug!(
                        server,
                        reason = e.reason(),
                        "watching the server failed: {e}"
                    );
                    lost = true;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            };
        opened.send_modify(|n| *n += 1);
        let uris = calls.relay.uris_of(&server);
        if session.era == Era::Legacy {
            // A new connection knows none of the agents' subscriptions.
            for uri in &uris {
                let id = session.next_request_id();
                let mut params = Map::new();
                params.insert("uri".into(), json!(uri));
                let _ = session
                    .request(id, "resources/subscribe", &params, None)
                    .await;
            }
        }
        if lost {
            // What changed while nothing was watching was never pushed.
            let missed = uris
                .into_iter()
                .map(|uri| Relayed::ResourceUpdated {
                    server: server.clone(),
                    uri,
                })
                .chain(kinds.resources.then(|| Relayed::ResourcesChanged {
                    server: server.clone(),
                }))
                .chain(kinds.prompts.then(|| Relayed::PromptsChanged {
                    server: server.clone(),
                }));
            for event in missed {
                let _ = calls.relay.events.send(event);
            }
        }
        lost = true;
        let opened_at = tokio::time::Instant::now();
        loop {
            tokio::select! {
                event = watch.next() => {
                    let relayed = match event {
                        WatchEvent::ResourceUpdated(uri) => Relayed::ResourceUpdated { server: server.clone(), uri },
                        WatchEvent::ResourcesChanged => Relayed::ResourcesChanged { server: server.clone() },
                        WatchEvent::PromptsChanged => Relayed::PromptsChanged { server: server.clone() },
                        WatchEvent::ToolsChanged => continue,
                        WatchEvent::Ended(why) => {
                            tracing::debug!(server, "the server's notification stream ended: {why}");
                            break;
                        }
                    };
                    let _ = calls.relay.events.send(relayed);
                }
                _ = resubscribe.notified(), if session.era == Era::Modern => {
                    lost = false;
                    break;
                }
                _ = tokio::time::sleep(POOL_CHECK) => {
                    if !calls.pool.is_current(&server, &resolved, &session).await {
                        break;
                    }
                }
            }
        }
        if !lost || opened_at.elapsed() >= POOL_CHECK {
            backoff = Duration::from_millis(500);
        } else {
            // A stream the server ends at once is not opened again in a busy loop.
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }
}

type Opened = (
    crate::mcp::ToolChangeWatch,
    Arc<crate::mcp::call::ToolSession>,
    super::credentials::Resolved,
);

/// The server's pooled connection and a watch on it, asking for what `kinds` grants (and, in
/// the modern era, the subscribed URIs), within the endpoint's connect timeout.
async fn open_watch(
    calls: &Calls,
    server: &str,
    endpoint: &Endpoint,
    kinds: Kinds,
) -> Result<Opened, WatchError> {
    let failed = |why: String| WatchError::Failed(crate::mcp::McpError::ProtocolError(why));
    let resolved = calls
        .credentials
        .resolve(endpoint, calls.policy)
        .map_err(failed)?;
    let session = calls
        .pool
        .session(server, &resolved, endpoint.era)
        .await
        .map_err(WatchError::Failed)?;
    let interest = Interest {
        tools: false,
        prompts: kinds.prompts,
        resources: kinds.resources,
        resource_uris: match session.era {
            Era::Modern => calls.relay.uris_of(server),
            Era::Legacy => Vec::new(),
        },
    };
    let limit = Duration::from_millis(endpoint.connect_timeout_ms.max(1));
    let watch = tokio::time::timeout(limit, session.watch(interest))
        .await
        .map_err(|_| {
            failed(format!(
                "opening the notification stream took over {limit:?}"
            ))
        })??;
    Ok((watch, session, resolved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_and_last_subscriber_are_told_apart() {
        let relay = Relay::default();
        assert!(relay.add("a", "fs", "file:///x"));
        assert!(!relay.add("b", "fs", "file:///x"));
        assert!(!relay.add("a", "fs", "file:///x"));
        assert!(relay.add("a", "fs", "file:///y"));
        assert!(relay.subscribes("b", "fs", "file:///x"));
        assert!(!relay.subscribes("b", "fs", "file:///y"));
        assert!(!relay.subscribes("a", "other", "file:///x"));
        assert_eq!(relay.uris_of("fs"), ["file:///x", "file:///y"]);
        assert!(!relay.remove("a", "fs", "file:///x"));
        assert!(!relay.remove("a", "fs", "file:///x"), "removed once");
        assert!(relay.remove("b", "fs", "file:///x"));
        assert_eq!(relay.uris_of("fs"), ["file:///y"]);
    }
}
