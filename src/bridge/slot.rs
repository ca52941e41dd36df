//! Keeps one child running: starts it, and when it dies starts it again after a backoff that
//! grows while it keeps dying young and resets once it has stayed up. Requests wait for the
//! child that is ready (up to a bound) instead of failing during a restart, so the request
//! after a crash works.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::child::{self, Child, Spec};

/// A child that stayed up this long is healthy: its next death restarts it at once.
const HEALTHY_AFTER: Duration = Duration::from_secs(10);
/// The longest wait between two starts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a stopping child gets to exit after its stdin closes, before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The wait before the next start after `failures` deaths in a row of a young child.
pub fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let millis = 100u64.saturating_mul(1 << (failures - 1).min(12));
    Duration::from_millis(millis).min(MAX_BACKOFF)
}

/// Where the child is in its life.
#[derive(Clone)]
pub enum State {
    Starting,
    Ready(Arc<Child>),
    /// Dead; restarting after a backoff. The reason is for the client and /readyz.
    Restarting {
        reason: String,
    },
    Stopped,
}

/// One supervised child.
pub struct Slot {
    state: watch::Receiver<State>,
    stop: watch::Sender<bool>,
    /// The child's notifications (tools/list_changed …), across restarts.
    pub notes: broadcast::Sender<Value>,
    restarts: Arc<std::sync::atomic::AtomicU32>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Slot {
    /// Starts supervising a child that is offered `protocol_version` at `initialize`.
    pub fn start(spec: Spec, protocol_version: String) -> Arc<Slot> {
        let (state_tx, state) = watch::channel(State::Starting);
        let (stop, stop_rx) = watch::channel(false);
        let (notes, _) = broadcast::channel(64);
        let restarts = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let task = tokio::spawn(supervise(
            spec,
            protocol_version,
            state_tx,
            stop_rx,
            notes.clone(),
            Arc::clone(&restarts),
        ));
        Arc::new(Slot {
            state,
            stop,
            notes,
            restarts,
            task: std::sync::Mutex::new(Some(task)),
        })
    }

    /// A slot that supervises nothing (stays Starting): for unit tests of the handlers.
    #[cfg(test)]
    pub fn detached() -> Arc<Slot> {
        let (state_tx, state) = watch::channel(State::Starting);
        std::mem::forget(state_tx);
        let (stop, _) = watch::channel(false);
        let (notes, _) = broadcast::channel(1);
        Arc::new(Slot {
            state,
            stop,
            notes,
            restarts: Arc::new(std::sync::atomic::AtomicU32::new(0)),
            task: std::sync::Mutex::new(None),
        })
    }

    /// The ready, living child, waiting up to `limit` for a start or restart to finish.
    pub async fn ready(&self, limit: Duration) -> Result<Arc<Child>, String> {
        let mut state = self.state.clone();
        let waited = tokio::time::timeout(
            limit,
            // A child found dead is not handed out while its exit is being noticed.
            state.wait_for(|s| match s {
                State::Ready(child) => child.is_alive(),
                State::Stopped => true,
                _ => false,
            }),
        )
        .await;
        match waited {
            Ok(Ok(s)) => match &*s {
                State::Ready(child) => Ok(Arc::clone(child)),
                _ => Err("the bridge is stopping".into()),
            },
            _ => Err(match &*self.state.borrow() {
                State::Restarting { reason } => format!(
                    "the server process is not running ({reason}); still restarting after {limit:?}"
                ),
                _ => format!("the server process did not finish starting within {limit:?}"),
            }),
        }
    }

    /// The current state, for /readyz.
    pub fn state(&self) -> State {
        self.state.borrow().clone()
    }

    /// How many times the child was started again after dying.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the child (stdin closed, killed after [`STOP_GRACE`]) and waits for it.
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().expect("task lock").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

async fn supervise(
    spec: Spec,
    protocol_version: String,
    state: watch::Sender<State>,
    mut stop: watch::Receiver<bool>,
    notes: broadcast::Sender<Value>,
    restarts: Arc<std::sync::atomic::AtomicU32>,
) {
    let label = spec.label();
    let mut failures = 0u32;
    loop {
        if *stop.borrow() {
            break;
        }
        let _ = state.send(State::Starting);
        let started = Instant::now();
        let begun = tokio::select! {
            begun = Child::start(&spec, &protocol_version, notes.clone()) => begun,
            _ = stop.wait_for(|s| *s) => break,
        };
        let reason = match begun {
            Ok((child, mut process)) => {
                let _ = state.send(State::Ready(Arc::clone(&child)));
                let exited = tokio::select! {
                    status = process.wait() => Some(status),
                    _ = stop.wait_for(|s| *s) => None,
                };
                let Some(status) = exited else {
                    child::stop(&child, &mut process, STOP_GRACE).await;
                    tracing::info!(child = %label, pid = child.pid, "stopped the server process");
                    break;
                };
                child.fail_all();
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                tracing::warn!(child = %label, pid = child.pid, %status, "the server process exited");
                format!("it exited: {status}")
            }
            Err(e) => {
                tracing::warn!(child = %label, error = %e, "the server process did not start");
                e.to_string()
            }
        };
        failures = if started.elapsed() >= HEALTHY_AFTER {
            1
        } else {
            failures + 1
        };
        let wait = backoff(failures);
        let _ = state.send(State::Restarting {
            reason: reason.clone(),
        });
        tracing::info!(child = %label, ?wait, "restarting the server process");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let _ = state.send(State::Stopped);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_then_caps() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(1600));
        assert_eq!(backoff(20), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
