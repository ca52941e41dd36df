//! "Has this store listed yet?", answered to every waiter. Called by the reconcilers that read
//! reflector stores before resolving.
//!
//! Workaround for kube-runtime 5.0.0: `Store::wait_until_ready` polls one `futures` oneshot
//! receiver (`utils/delayed_init.rs`), which keeps only the last poller's waker, so when many
//! reconciles wait on one store at once only one of them wakes and the others sleep forever (a
//! new leader then reconciled 1 of 30 AgentSpecs for its whole term). Here each store is waited
//! on by exactly one poller, inside a `Shared` future that wakes every clone. Removing the
//! workaround once kube-runtime is fixed is one change: `wait` calls the store directly.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::runtime::reflector::Store;

/// Resolves once every store it was built from has received its first list.
#[derive(Clone)]
pub struct Readiness(Shared<BoxFuture<'static, ()>>);

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readiness")
    }
}

/// One store's first list, as a future with a single poller.
pub fn listed<K>(store: &Store<K>) -> BoxFuture<'static, ()>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let store = store.clone();
    // Err means the writer is gone (the watch ended): nothing will ever list, so do not wait.
    async move {
        let _ = store.wait_until_ready().await;
    }
    .boxed()
}

impl Readiness {
    /// Ready when all of `stores` are.
    pub fn all(stores: Vec<BoxFuture<'static, ()>>) -> Self {
        Readiness(
            async move {
                futures::future::join_all(stores).await;
            }
            .boxed()
            .shared(),
        )
    }

    /// Waits until every store has listed; any number of tasks may wait at once.
    pub async fn wait(&self) {
        self.0.clone().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    #[tokio::test]
    async fn every_waiter_wakes_when_the_store_lists() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let readiness = Readiness::all(vec![listed(&store)]);
        let waiters: Vec<_> = (0..16)
            .map(|_| {
                let r = readiness.clone();
                tokio::spawn(async move { r.wait().await })
            })
            .collect();
        // Let every waiter poll before the list lands (the case kube-runtime gets wrong).
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("every waiter wakes")
                .unwrap();
        }
    }
}
