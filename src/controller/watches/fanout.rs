//! One watch of a kind, shared by every reconciler that needs the kind: a reflector store, a
//! fan-out of what changed, and a "listed" signal.
//!
//! ```text
//! apiserver ─watch─► driver ─► store (applied first) ─► broadcast ─► changes() ─► trigger stream A
//!                       │                                        └─► changes() ─► trigger stream B
//!                       └─► listed (true after the first complete list)
//! ```
//!
//! Why not kube-runtime's shared reflector (`reflect_shared` + `subscribe`): its subscribers
//! hear of applied objects only, never of deletions, and an AgentSpec must be re-resolved when
//! the McpServer or McpTenantPolicy it used is deleted. Why not `Store::wait_until_ready` for
//! "listed": in kube-runtime 5.0.0 it wakes only the last of several pollers (see
//! [`super::readiness`]), and the controller's runner already polls its main store; `listed` is
//! a `tokio::sync::watch`, which wakes every waiter.
//!
//! The store keeps objects without their managedFields' field sets ([`drop_field_sets`]).
//!
//! The store is written before a change is broadcast, so a reconcile triggered by a change
//! reads a store that already shows it: each reconciler reads only stores fed by the watches
//! that trigger it. A consumer that falls more than [`BUFFER`] changes behind is not left with
//! a gap: it is handed every object in the store (a resync; reconciles are idempotent).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

/// Changes a consumer may fall behind by before it is resynced from the store.
pub const BUFFER: usize = 1024;

/// What the store keeps of an object's managedFields: who wrote it and when (a restarted
/// controller reads the times), not which fields each wrote: `fieldsV1` is about as large as
/// what it describes (an McpServer's status catalogue, tool by tool), nothing here reads it, and
/// every write is a server-side apply of its own.
fn drop_field_sets<K: kube::Resource>(object: &mut K) {
    for entry in object.meta_mut().managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
    }
}

/// What a consumer hears.
#[derive(Debug, Clone)]
pub enum Change<K> {
    /// Created or changed (also every object of a relist, once the store holds the list).
    Applied(Arc<K>),
    /// Deleted while the watch was up.
    Deleted(Arc<K>),
    /// A complete list replaced the store: objects deleted while the watch was down are gone
    /// from it without a `Deleted`.
    Relisted,
}

/// One kind's shared watch: clone it for every consumer; the driver from [`Watched::new`]
/// keeps it fed.
pub struct Watched<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    changes: broadcast::Sender<Change<K>>,
    listed: watch::Receiver<bool>,
}

impl<K: kube::Resource + Clone + 'static> Clone for Watched<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Watched {
            store: self.store.clone(),
            changes: self.changes.clone(),
            listed: self.listed.clone(),
        }
    }
}

impl<K> Watched<K>
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + Send + Sync,
{
    /// A watch of `api` with `config`, reconnecting with `backoff`, and the future that runs
    /// it: poll that future (and only it) to keep the store and the consumers fed. Take the
    /// consumers' streams before polling it, or they miss what came before.
    pub fn new(
        api: Api<K>,
        config: watcher::Config,
        backoff: impl Backoff + 'static,
    ) -> (Self, BoxFuture<'static, ()>) {
        Self::from_events(
            watcher(api, config)
                .modify(drop_field_sets)
                .backoff(backoff),
        )
    }

    /// The same over any stream of watcher events (the tests feed their own).
    fn from_events(
        events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (store, mut writer) = reflector::store::<K>();
        let (changes, _) = broadcast::channel(BUFFER);
        let (listed_tx, listed) = watch::channel(false);
        let tx = changes.clone();
        let reader = store.clone();
        let driver = events
            .for_each(move |event| {
                // An error is the watcher's to retry (with the backoff); the store stays.
                if let Ok(event) = event {
                    let relisted = matches!(event, watcher::Event::InitDone);
                    writer.apply_watcher_event(&event);
                    for change in changes_of(event, &reader) {
                        // No consumer subscribed (yet, or any more) is not an error.
                        let _ = tx.send(change);
                    }
                    if relisted {
                        listed_tx.send_if_modified(|l| !std::mem::replace(l, true));
                    }
                }
                futures::future::ready(())
            })
            .boxed();
        let watched = Watched {
            store,
            changes,
            listed,
        };
        (watched, driver)
    }

    /// The store the watch keeps.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Resolves once the first complete list is in the store; any number may wait. Never
    /// resolves if the watch stops before listing.
    pub fn listed(&self) -> BoxFuture<'static, ()> {
        let mut listed = self.listed.clone();
        async move {
            let _ = listed.wait_for(|l| *l).await;
        }
        .boxed()
    }

    /// Every change from now on, in order; a consumer that lags is resynced from the store.
    pub fn changes(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        let rx = self.changes.subscribe();
        let store = self.store.clone();
        futures::stream::unfold((rx, store), |(mut rx, store)| async move {
            match rx.recv().await {
                Ok(change) => Some((vec![change], (rx, store))),
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // What was missed may include deletions: say the store is the whole truth.
                    let mut all: Vec<Change<K>> =
                        store.state().into_iter().map(Change::Applied).collect();
                    all.push(Change::Relisted);
                    Some((all, (rx, store)))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
        .flat_map(futures::stream::iter)
    }

    /// Applied objects: a controller's own trigger (it is not called for deleted objects).
    pub fn applied(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.changes().filter_map(|change| {
            futures::future::ready(match change {
                Change::Applied(o) => Some(o),
                Change::Deleted(_) | Change::Relisted => None,
            })
        })
    }

    /// Applied and deleted objects: what a mapper to other objects needs.
    pub fn touched(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.changes().filter_map(|change| {
            futures::future::ready(match change {
                Change::Applied(o) | Change::Deleted(o) => Some(o),
                Change::Relisted => None,
            })
        })
    }
}

/// What consumers hear of one watcher event, once the store has applied it. An applied object
/// is the store's own: the broadcast keeps its last [`BUFFER`] changes whether or not every
/// consumer read them, and a copy of each beside the store's was up to 1,024 more McpServers
/// with their catalogues held for nothing (issue 24).
fn changes_of<K>(event: watcher::Event<K>, store: &Store<K>) -> Vec<Change<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    match event {
        watcher::Event::Apply(o) => {
            let shared = store
                .get(&reflector::ObjectRef::from_obj(&o))
                .unwrap_or_else(|| Arc::new(o));
            vec![Change::Applied(shared)]
        }
        watcher::Event::Delete(o) => vec![Change::Deleted(Arc::new(o))],
        // The store buffers a relist until InitDone; announce it once the store holds it.
        watcher::Event::Init | watcher::Event::InitApply(_) => vec![],
        watcher::Event::InitDone => {
            let mut all: Vec<Change<K>> = store.state().into_iter().map(Change::Applied).collect();
            all.push(Change::Relisted);
            all
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::watcher::Event;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("team-a".into());
        c
    }

    fn feed() -> (
        futures::channel::mpsc::UnboundedSender<watcher::Result<Event<ConfigMap>>>,
        Watched<ConfigMap>,
        BoxFuture<'static, ()>,
    ) {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (watched, driver) = Watched::from_events(rx);
        (tx, watched, driver)
    }

    fn describe(change: &Change<ConfigMap>) -> String {
        match change {
            Change::Applied(o) => format!("applied {}", o.name_any()),
            Change::Deleted(o) => format!("deleted {}", o.name_any()),
            Change::Relisted => "relisted".into(),
        }
    }

    #[tokio::test]
    async fn every_consumer_hears_every_change_after_the_store_has_it() {
        let (tx, watched, driver) = feed();
        let mut a = Box::pin(watched.changes());
        let mut b = Box::pin(watched.touched());
        let store = watched.store();
        let listed = tokio::spawn(watched.listed());
        tokio::spawn(driver);
        for event in [
            Event::Init,
            Event::InitApply(cm("x")),
            Event::InitApply(cm("y")),
            Event::InitDone,
            Event::Apply(cm("z")),
            Event::Delete(cm("x")),
        ] {
            tx.unbounded_send(Ok(event)).unwrap();
        }
        let mut heard = Vec::new();
        for _ in 0..5 {
            let change = a.next().await.unwrap();
            if let Change::Applied(o) = &change
                && o.name_any() == "z"
            {
                // Nothing deletes z later: a consumer that hears of it finds it in the store,
                // the very object the store holds (not a copy of it).
                let stored = store.get(&ObjectRef::from_obj(o.as_ref())).unwrap();
                assert!(Arc::ptr_eq(o, &stored));
            }
            heard.push(describe(&change));
        }
        // The relist is announced whole, once the store holds it; its order is the store's.
        heard[..2].sort();
        assert_eq!(
            heard,
            [
                "applied x",
                "applied y",
                "relisted",
                "applied z",
                "deleted x"
            ]
        );
        let mut touched = Vec::new();
        for _ in 0..4 {
            touched.push(b.next().await.unwrap().name_any());
        }
        touched[..2].sort();
        assert_eq!(
            touched,
            ["x", "y", "z", "x"],
            "deletions reach the mappers too"
        );
        tokio::time::timeout(Duration::from_secs(5), listed)
            .await
            .expect("listed after the first InitDone")
            .unwrap();
        let mut names: Vec<String> = store.state().iter().map(|o| o.name_any()).collect();
        names.sort();
        assert_eq!(names, ["y", "z"]);
    }

    #[tokio::test]
    async fn a_consumer_that_falls_behind_is_resynced_from_the_store() {
        let (tx, watched, driver) = feed();
        let mut slow = Box::pin(watched.changes());
        tokio::spawn(driver);
        tx.unbounded_send(Ok(Event::Apply(cm("gone")))).unwrap();
        tx.unbounded_send(Ok(Event::Delete(cm("gone")))).unwrap();
        for i in 0..(BUFFER + 10) {
            tx.unbounded_send(Ok(Event::Apply(cm(&format!("cm-{}", i % 3)))))
                .unwrap();
        }
        // Let the driver run past the slow consumer's buffer.
        while watched.store().state().len() < 3 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut resync = Vec::new();
        loop {
            let change = slow.next().await.unwrap();
            let relisted = matches!(change, Change::Relisted);
            resync.push(describe(&change));
            if relisted {
                break;
            }
        }
        resync.sort();
        assert_eq!(
            resync,
            ["applied cm-0", "applied cm-1", "applied cm-2", "relisted"],
            "the missed deletion of `gone` is covered by `relisted`: the store is the whole truth"
        );
    }

    #[tokio::test]
    async fn listed_waits_for_the_first_complete_list() {
        let (tx, watched, driver) = feed();
        tokio::spawn(driver);
        tx.unbounded_send(Ok(Event::Init)).unwrap();
        tx.unbounded_send(Ok(Event::InitApply(cm("x")))).unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), watched.listed())
                .await
                .is_err(),
            "a list still coming is not listed"
        );
        tx.unbounded_send(Ok(Event::InitDone)).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watched.listed())
            .await
            .expect("listed");
    }
}
