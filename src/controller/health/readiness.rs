//! "Have these stores listed yet?", answered to every waiter. Called by the reconcilers that read
//! reflector stores before resolving.
//!
//! Why not `Store::wait_until_ready`: in kube-runtime 5.0.0 it polls one `futures` oneshot
//! receiver (`utils/delayed_init.rs`), which keeps only the last poller's waker, so when many
//! reconciles wait on one store at once only one of them wakes and the others sleep forever (a
//! new leader then reconciled 1 of 30 AgentSpecs for its whole term). The only poller of a
//! store's own readiness is the controller's runner; everyone else waits on the shared watch's
//! `listed` signal ([`super::fanout::Watched::listed`]), joined here in a `Shared` future that
//! wakes every clone.

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

/// Resolves once every store it was built from has received its first list.
#[derive(Clone)]
pub struct Readiness(Shared<BoxFuture<'static, ()>>);

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readiness")
    }
}

impl Readiness {
    /// Ready when all of `listed` are.
    pub fn all(listed: Vec<BoxFuture<'static, ()>>) -> Self {
        Readiness(
            async move {
                futures::future::join_all(listed).await;
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
    use std::time::Duration;
    use tokio::sync::watch;

    fn signal() -> (watch::Sender<bool>, BoxFuture<'static, ()>) {
        let (tx, mut rx) = watch::channel(false);
        (
            tx,
            async move {
                let _ = rx.wait_for(|l| *l).await;
            }
            .boxed(),
        )
    }

    #[tokio::test]
    async fn every_waiter_wakes_once_every_store_listed() {
        let (a, listed_a) = signal();
        let (b, listed_b) = signal();
        let readiness = Readiness::all(vec![listed_a, listed_b]);
        let waiters: Vec<_> = (0..16)
            .map(|_| {
                let r = readiness.clone();
                tokio::spawn(async move { r.wait().await })
            })
            .collect();
        // Let every waiter poll before the lists land (the case kube-runtime gets wrong).
        tokio::time::sleep(Duration::from_millis(50)).await;
        a.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "one store has not listed yet"
        );
        b.send(true).unwrap();
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("every waiter wakes")
                .unwrap();
        }
    }
}
