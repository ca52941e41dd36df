//! The upstream pool: one negotiated connection per (server, credential identity), shared by
//! every concurrent call to that server with that credential. The identity is a digest of the
//! credential files as read for this call, so a rotated Secret opens a new connection (and the
//! old one is closed); a connection that failed is dropped and the next call opens a new one,
//! reading the credential files again.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

use crate::mcp::call::ToolSession;
use crate::mcp::{Era, McpError};

use super::credentials::Resolved;
use super::metrics::{Metrics, server_label};

type Key = (String, String);

/// One key's connection; its mutex makes concurrent first calls share one connect.
#[derive(Default)]
struct Slot {
    session: Mutex<Option<Arc<ToolSession>>>,
}

pub struct Pool {
    slots: std::sync::Mutex<HashMap<Key, Arc<Slot>>>,
    metrics: Arc<Metrics>,
}

impl Pool {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Pool {
            slots: std::sync::Mutex::new(HashMap::new()),
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
        let key = (server.to_string(), resolved.identity.clone());
        let (slot, stale) = {
            let mut slots = self.slots.lock().expect("pool lock");
            // A server has one live credential: connections under an older one are closed.
            let stale: Vec<Arc<Slot>> = slots
                .iter()
                .filter(|((s, id), _)| s == server && *id != resolved.identity)
                .map(|(_, slot)| Arc::clone(slot))
                .collect();
            slots.retain(|(s, id), _| s != server || *id == resolved.identity);
            (Arc::clone(slots.entry(key).or_default()), stale)
        };
        for old in stale {
            if let Some(session) = old.session.lock().await.take() {
                self.closed(server, session);
            }
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
        let key = (server.to_string(), resolved.identity.clone());
        let slot = self.slots.lock().expect("pool lock").get(&key).cloned();
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
        let key = (server.to_string(), resolved.identity.clone());
        let slot = self.slots.lock().expect("pool lock").get(&key).cloned();
        match slot {
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
                .filter(|((s, _), _)| !keep.contains(s))
                .map(|((s, _), slot)| (s.clone(), Arc::clone(slot)))
                .collect();
            slots.retain(|(s, _), _| keep.contains(s));
            gone
        };
        for (server, slot) in gone {
            if let Some(session) = slot.session.lock().await.take() {
                self.closed(&server, session);
            }
        }
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
