//! The upstream pool: one negotiated connection per (server, credential identity), shared by
//! every concurrent call to that server with that credential. The identity is a digest of the
//! credential files as read for this call, so a rotated Secret opens a new connection (and the
//! old one is closed); a connection that failed is dropped and the next call opens a new one,
//! reading the credential files again.

use std::sync::Arc;

use tokio::sync::Mutex;

use crate::mcp::call::ToolSession;
use crate::mcp::{Era, McpError};

use super::credentials::Resolved;
use super::metrics::{Metrics, server_label};

/// A server's connection under one credential identity; its mutex makes concurrent first
/// calls share one connect.
struct Slot {
    identity: String,
    session: Mutex<Option<Arc<ToolSession>>>,
}

impl Slot {
    fn new(identity: &str) -> Arc<Slot> {
        Arc::new(Slot {
            identity: identity.to_string(),
            session: Mutex::new(None),
        })
    }
}

pub struct Pool {
    /// By server: a server has one live credential, so one slot (foldhash: looked up on every
    /// call, by the server's name alone, without building a key).
    slots: std::sync::Mutex<foldhash::HashMap<String, Arc<Slot>>>,
    metrics: Arc<Metrics>,
}

impl Pool {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Pool {
            slots: std::sync::Mutex::new(foldhash::HashMap::default()),
            metrics,
        }
    }

    /// The connection for `server` with the credential in `resolved`, opened if needed.
    pub async fn session(
        &self,
        server: &str,
        resolved: &Resolved,
        era: Option<Era>,
    ) -> Result<Arc<ToolSession>, McpError> {
        let (slot, stale) = {
            let mut slots = self.slots.lock().expect("pool lock");
            match slots.get(server) {
                Some(slot) if slot.identity == resolved.identity => (Arc::clone(slot), None),
                // A server has one live credential: the connection under an older one is
                // closed.
                _ => {
                    let slot = Slot::new(&resolved.identity);
                    let stale = slots.insert(server.to_string(), Arc::clone(&slot));
                    (slot, stale)
                }
            }
        };
        if let Some(old) = stale
            && let Some(session) = old.session.lock().await.take()
        {
            self.closed(server, session);
        }
        let mut current = slot.session.lock().await;
        if let Some(session) = current.as_ref() {
            return Ok(Arc::clone(session));
        }
        // Boxed: opening is rare (once per server and credential) and its future is kilobytes;
        // inline, every call's future would carry that space and be moved with it.
        let session = Arc::new(Box::pin(ToolSession::open(&resolved.conn, era)).await?);
        self.metrics
            .upstream_connects
            .get_or_create(&server_label(server))
            .inc();
        self.metrics
            .upstream_connections
            .get_or_create(&server_label(server))
            .inc();
        *current = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Drops `session` from the pool (when it is still the key's connection): the next call
    /// reconnects.
    pub async fn discard(&self, server: &str, resolved: &Resolved, session: &Arc<ToolSession>) {
        let slot = self.slot(server, resolved);
        if let Some(slot) = slot {
            let mut current = slot.session.lock().await;
            if current.as_ref().is_some_and(|s| Arc::ptr_eq(s, session))
                && let Some(s) = current.take()
            {
                self.closed(server, s);
            }
        }
    }

    /// Whether `session` is still the pool's connection for `server` with this credential (a
    /// watcher on it moves to the new one when not).
    pub async fn is_current(
        &self,
        server: &str,
        resolved: &Resolved,
        session: &Arc<ToolSession>,
    ) -> bool {
        match self.slot(server, resolved) {
            Some(slot) => slot
                .session
                .lock()
                .await
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, session)),
            None => false,
        }
    }

    /// Closes every connection whose server is not in `keep`.
    pub async fn retain_servers(&self, keep: &[String]) {
        let gone: Vec<(String, Arc<Slot>)> = {
            let mut slots = self.slots.lock().expect("pool lock");
            let gone = slots
                .iter()
                .filter(|(s, _)| !keep.contains(s))
                .map(|(s, slot)| (s.clone(), Arc::clone(slot)))
                .collect();
            slots.retain(|s, _| keep.contains(s));
            gone
        };
        for (server, slot) in gone {
            if let Some(session) = slot.session.lock().await.take() {
                self.closed(&server, session);
            }
        }
    }

    /// The server's slot when it is under this credential.
    fn slot(&self, server: &str, resolved: &Resolved) -> Option<Arc<Slot>> {
        let slots = self.slots.lock().expect("pool lock");
        slots
            .get(server)
            .filter(|slot| slot.identity == resolved.identity)
            .cloned()
    }

    fn closed(&self, server: &str, session: Arc<ToolSession>) {
        self.metrics
            .upstream_connections
            .get_or_create(&server_label(server))
            .dec();
        // Deleting a legacy session politely waits on the network: not on the caller's time.
        // Calls still holding the session finish first (the last Arc closes it).
        tokio::spawn(async move {
            if let Ok(session) = Arc::try_unwrap(session) {
                session.close().await;
            }
        });
    }
}
