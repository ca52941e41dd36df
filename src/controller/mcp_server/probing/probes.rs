//! The probes of McpServers, each run as its own task outside the reconciler's slots: a probe
//! mostly waits on a socket (a hanging server holds it for its whole timeout), and a reconcile
//! slot held for that wait starved every other server. The reconcile starts a probe and
//! returns; the finished probe triggers the server's next reconcile, which takes the result and
//! writes status.
//!
//! - [`Lanes`] (pure): how many probes run at once, and who starts next: a first read (a new
//!   server, new inputs, a due refresh, a pushed change) always before a retry of a server
//!   whose last probe with the same inputs failed, and retries never take more than their share,
//!   so servers that keep failing cannot delay one that has never been read.
//! - [`Book`] (pure but for abort handles): the probe running or finished for each server and
//!   the inputs it was started with. At most one probe runs per server; a result is handed only
//!   to a reconcile with the same inputs, so a probe of an older generation (or older
//!   credentials, annotations, pinning) never decides a newer one's status.
//! - [`Prober`]: the tasks themselves, the gauges, and the trigger back to the reconciler.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::api::mcp_server::McpServer;
use crate::controller::health::metrics::Metrics;
use crate::mcp::{self, Access, Catalog, Era, ReadFailure, ServerConnection, ServerInfo};

use super::schedule::{Lane, ServerKey};

/// Admission of probes (pure): at most `limit` run at once, of which at most `retry_limit`
/// retries; waiting first reads start before waiting retries, each lane in arrival order.
#[derive(Debug)]
pub struct Lanes<T> {
    limit: usize,
    retry_limit: usize,
    running_first: usize,
    running_retries: usize,
    waiting_first: VecDeque<T>,
    waiting_retries: VecDeque<T>,
}

impl<T> Lanes<T> {
    /// `limit` at least 1; `retry_limit` is kept within 1..=limit.
    pub fn new(limit: usize, retry_limit: usize) -> Self {
        let limit = limit.max(1);
        Lanes {
            limit,
            retry_limit: retry_limit.clamp(1, limit),
            running_first: 0,
            running_retries: 0,
            waiting_first: VecDeque::new(),
            waiting_retries: VecDeque::new(),
        }
    }

    fn may_start(&self, lane: Lane) -> bool {
        let running = self.running_first + self.running_retries;
        running < self.limit && (lane == Lane::FirstRead || self.running_retries < self.retry_limit)
    }

    fn start(&mut self, lane: Lane) {
        match lane {
            Lane::FirstRead => self.running_first += 1,
            Lane::Retry => self.running_retries += 1,
        }
    }

    /// A probe arrives: `Some(job)` when it may start now (it then counts as running), `None`
    /// when it waits its turn.
    pub fn arrive(&mut self, lane: Lane, job: T) -> Option<T> {
        let queue_empty = match lane {
            Lane::FirstRead => self.waiting_first.is_empty(),
            // A retry may pass waiting retries never; waiting first reads it cannot pass
            // either, but those only wait when every slot is taken.
            Lane::Retry => self.waiting_retries.is_empty() && self.waiting_first.is_empty(),
        };
        if queue_empty && self.may_start(lane) {
            self.start(lane);
            return Some(job);
        }
        match lane {
            Lane::FirstRead => self.waiting_first.push_back(job),
            Lane::Retry => self.waiting_retries.push_back(job),
        }
        None
    }

    /// A running probe of `lane` ended: the next job to start (it then counts as running).
    pub fn finished(&mut self, lane: Lane) -> Option<(Lane, T)> {
        match lane {
            Lane::FirstRead => self.running_first = self.running_first.saturating_sub(1),
            Lane::Retry => self.running_retries = self.running_retries.saturating_sub(1),
        }
        self.next()
    }

    fn next(&mut self) -> Option<(Lane, T)> {
        if !self.waiting_first.is_empty() && self.may_start(Lane::FirstRead) {
            self.start(Lane::FirstRead);
            return self.waiting_first.pop_front().map(|j| (Lane::FirstRead, j));
        }
        if !self.waiting_retries.is_empty() && self.may_start(Lane::Retry) {
            self.start(Lane::Retry);
            return self.waiting_retries.pop_front().map(|j| (Lane::Retry, j));
        }
        None
    }

    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.running_first + self.running_retries
    }

    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiting_first.len() + self.waiting_retries.len()
    }
}

/// What a reconcile finds for its server in the [`Book`].
#[derive(Debug)]
pub enum Claim<R> {
    /// A probe with the reconcile's inputs finished: its result (taken from the book), and
    /// when it started.
    Finished(R, Instant),
    /// A probe with the reconcile's inputs is still running (or waiting to run).
    Running,
    /// Neither: no probe, or one of other inputs, which was stopped or whose result was dropped.
    Nothing,
}

#[derive(Debug)]
enum State<R> {
    Running(AbortHandle),
    Finished(R),
}

#[derive(Debug)]
struct Entry<R> {
    id: u64,
    inputs: String,
    started: Instant,
    state: State<R>,
}

/// The probe of each server, running or finished, with the inputs it was started with.
#[derive(Debug)]
pub struct Book<R> {
    entries: HashMap<ServerKey, Entry<R>>,
}

impl<R> Default for Book<R> {
    fn default() -> Self {
        Book {
            entries: HashMap::new(),
        }
    }
}

impl<R> Book<R> {
    /// What the reconcile of `key` with `inputs` may use. A probe of other inputs is stale for
    /// it: a running one is aborted, a finished one's result dropped.
    pub fn claim(&mut self, key: &ServerKey, inputs: &str) -> Claim<R> {
        let Some(entry) = self.entries.remove(key) else {
            return Claim::Nothing;
        };
        match entry.state {
            State::Finished(result) if entry.inputs == inputs => {
                Claim::Finished(result, entry.started)
            }
            State::Running(_) if entry.inputs == inputs => {
                self.entries.insert(key.clone(), entry);
                Claim::Running
            }
            State::Running(handle) => {
                handle.abort();
                Claim::Nothing
            }
            State::Finished(_) => Claim::Nothing,
        }
    }

    /// Records a started probe (`id` tells it apart from any later one), replacing (aborting)
    /// whatever the server had.
    pub fn started(&mut self, key: &ServerKey, id: u64, inputs: String, handle: AbortHandle) {
        let entry = Entry {
            id,
            inputs,
            started: Instant::now(),
            state: State::Running(handle),
        };
        if let Some(State::Running(old)) = self.entries.insert(key.clone(), entry).map(|e| e.state)
        {
            old.abort();
        }
    }

    /// Keeps the result of probe `id`; false (result dropped) when that probe is no longer the
    /// server's (it was replaced, claimed as stale, or the server forgotten).
    pub fn finished(&mut self, key: &ServerKey, id: u64, result: R) -> bool {
        match self.entries.get_mut(key) {
            Some(entry) if entry.id == id && matches!(entry.state, State::Running(_)) => {
                entry.state = State::Finished(result);
                true
            }
            _ => false,
        }
    }

    /// Stops and drops whatever the server had.
    pub fn forget(&mut self, key: &ServerKey) {
        if let Some(Entry {
            state: State::Running(handle),
            ..
        }) = self.entries.remove(key)
        {
            handle.abort();
        }
    }

    /// Stops and drops everything (leadership lost, shutdown).
    pub fn clear(&mut self) {
        for (_, entry) in self.entries.drain() {
            if let State::Running(handle) = entry.state {
                handle.abort();
            }
        }
    }
}

/// What a successful probe keeps until a reconcile slot writes its status: the classified
/// catalogue and what status says beside it. Not the raw tool definitions, which parsed take
/// many times their bytes, nor the share of the response budget their bodies held: with many
/// servers read at once, most finished probes wait for a slot (status writes are what bounds
/// the reconciler), and holding their definitions meanwhile was most of the controller's peak
/// memory (issue 24).
#[derive(Debug)]
pub struct Read {
    pub era: Era,
    pub protocol_version: String,
    pub server_info: ServerInfo,
    /// Whether the server pushes `notifications/tools/list_changed`.
    pub pushes_tool_changes: bool,
    /// The smallest `ttlMs` a modern server gave for its tool list.
    pub ttl_ms: Option<u64>,
    pub catalog: Catalog,
}

impl Read {
    /// The catalogue of `report` with `overrides` (the McpServer's `tools.overrides` of the
    /// generation the probe was started for); the report, its definitions and its share of
    /// the response budget are dropped here.
    pub fn new(report: mcp::ServerReport, overrides: &BTreeMap<String, Access>) -> Self {
        let catalog = report.catalog(overrides);
        Read {
            era: report.era,
            protocol_version: report.protocol_version,
            server_info: report.server_info,
            pushes_tool_changes: report.pushes_tool_changes,
            ttl_ms: report.ttl_ms,
            catalog,
        }
    }
}

/// What a probe task hands back: the outcome, and the connection it used (a server that pushes
/// changes gets a subscription over it) with its identity.
pub struct Outcome {
    pub report: Result<Read, ReadFailure>,
    pub conn: ServerConnection,
    pub identity: String,
}

/// A running probe's place among the lanes; given back (the next waiting probe starts) when
/// dropped, however the task ends.
struct Admitted {
    lanes: Arc<Mutex<Lanes<oneshot::Sender<Admitted>>>>,
    lane: Lane,
    armed: bool,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.armed {
            release(&self.lanes, self.lane);
        }
    }
}

/// Gives a slot of `lane` back and hands it to the next waiting probe that is still there (an
/// aborted task's receiver is gone: its turn passes).
fn release(lanes: &Arc<Mutex<Lanes<oneshot::Sender<Admitted>>>>, lane: Lane) {
    let mut next = lanes.lock().expect("lanes lock").finished(lane);
    while let Some((lane, tx)) = next {
        let slot = Admitted {
            lanes: lanes.clone(),
            lane,
            armed: true,
        };
        match tx.send(slot) {
            Ok(()) => return,
            Err(mut unused) => {
                unused.armed = false;
                next = lanes.lock().expect("lanes lock").finished(lane);
            }
        }
    }
}

/// Runs the probes of the leading replica.
pub struct Prober {
    book: Mutex<Book<Outcome>>,
    lanes: Arc<Mutex<Lanes<oneshot::Sender<Admitted>>>>,
    trigger: Mutex<Option<mpsc::Sender<ObjectRef<McpServer>>>>,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
}

impl Prober {
    /// At most `limit` probes at once, a quarter of them retries.
    pub fn new(limit: usize, metrics: Arc<Metrics>) -> Self {
        Prober {
            book: Mutex::new(Book::default()),
            lanes: Arc::new(Mutex::new(Lanes::new(limit, limit.div_ceil(4)))),
            trigger: Mutex::new(None),
            metrics,
            next_id: AtomicU64::new(0),
        }
    }

    /// Finished probes trigger reconciles of a (new) controller run through `trigger`.
    pub fn attach(&self, trigger: mpsc::Sender<ObjectRef<McpServer>>) {
        *self.trigger.lock().expect("trigger lock") = Some(trigger);
    }

    /// Stops every probe (leadership lost, shutdown): the next term decides afresh.
    pub fn detach(&self) {
        *self.trigger.lock().expect("trigger lock") = None;
        self.book.lock().expect("book lock").clear();
    }

    /// See [`Book::claim`].
    pub fn claim(&self, key: &ServerKey, inputs: &str) -> Claim<Outcome> {
        self.book.lock().expect("book lock").claim(key, inputs)
    }

    pub fn forget(&self, key: &ServerKey) {
        self.book.lock().expect("book lock").forget(key);
    }

    /// Starts probing the server in its own task (waiting in `lane` for its turn), its
    /// catalogue classified with `overrides`; the server's reconcile is triggered when it
    /// finished.
    pub fn start(
        self: &Arc<Self>,
        key: &ServerKey,
        inputs: String,
        lane: Lane,
        conn: ServerConnection,
        identity: String,
        overrides: BTreeMap<String, Access>,
    ) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let prober = self.clone();
        let task_key = key.clone();
        // Under the book's lock, so the task cannot finish before the book knows it.
        let mut book = self.book.lock().expect("book lock");
        let task = tokio::spawn(async move {
            let key = task_key;
            let _slot = prober.admission(lane).await;
            let report = {
                let _running = GaugeGuard::new(&prober.metrics.probes_running);
                let started = Instant::now();
                let report = probe_traced(&key, &conn)
                    .await
                    .map(|report| Read::new(report, &overrides));
                prober
                    .metrics
                    .probe_duration
                    .observe(started.elapsed().as_secs_f64());
                report
            };
            let outcome = Outcome {
                report,
                conn,
                identity,
            };
            if !prober
                .book
                .lock()
                .expect("book lock")
                .finished(&key, id, outcome)
            {
                return;
            }
            let trigger = prober.trigger.lock().expect("trigger lock").clone();
            if let Some(trigger) = trigger {
                // Awaited, not tried: a full channel must delay the trigger, never lose it.
                let _ = trigger.send(ObjectRef::new(&key.1).within(&key.0)).await;
            }
        });
        book.started(key, id, inputs, task.abort_handle());
    }

    /// Waits until the probe may run.
    async fn admission(&self, lane: Lane) -> Admitted {
        let (tx, rx) = oneshot::channel();
        let now = self.lanes.lock().expect("lanes lock").arrive(lane, tx);
        if let Some(tx) = now {
            drop(tx);
            return Admitted {
                lanes: self.lanes.clone(),
                lane,
                armed: true,
            };
        }
        let _waiting = GaugeGuard::new(&self.metrics.probes_waiting);
        // The sender lives in the lanes until this probe's turn; it is dropped unsent only if
        // the lanes are, which they are not while the prober lives.
        rx.await.expect("the lanes outlive every probe")
    }
}

/// Counts one in a gauge while alive.
struct GaugeGuard<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> GaugeGuard<'a> {
    fn new(gauge: &'a prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Reads the server, inside a span of its own when tracing is on (`probe <namespace>/<name>`,
/// with its result); the server's requests carry the span's traceparent.
async fn probe_traced(
    key: &ServerKey,
    conn: &ServerConnection,
) -> Result<mcp::ServerReport, ReadFailure> {
    use crate::telemetry::{self, Attribute};
    let span = telemetry::start_internal(
        || format!("probe {}/{}", key.0, key.1),
        || {
            vec![
                Attribute::new("mcp_operator.namespace", key.0.clone()),
                Attribute::new("mcp_operator.server", key.1.clone()),
            ]
        },
    );
    let report = telemetry::within(span.clone(), mcp::read_catalogue(conn)).await;
    if let Some(span) = span {
        span.set(match &report {
            Ok(r) => vec![
                Attribute::new("mcp_operator.probe.result", "ready"),
                Attribute::new("mcp_operator.probe.tools", r.tools.len() as i64),
            ],
            Err(e) => vec![
                Attribute::new("mcp_operator.probe.result", "failed"),
                Attribute::new("mcp_operator.probe.reason", e.error.reason()),
            ],
        });
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ServerKey {
        ("ns".into(), name.into())
    }

    #[test]
    fn probes_start_at_once_up_to_the_limit_then_wait() {
        let mut lanes = Lanes::new(2, 1);
        assert_eq!(lanes.arrive(Lane::FirstRead, "a"), Some("a"));
        assert_eq!(lanes.arrive(Lane::FirstRead, "b"), Some("b"));
        assert_eq!(lanes.arrive(Lane::FirstRead, "c"), None);
        assert_eq!((lanes.running(), lanes.waiting()), (2, 1));
        assert_eq!(
            lanes.finished(Lane::FirstRead),
            Some((Lane::FirstRead, "c"))
        );
        assert_eq!(lanes.finished(Lane::FirstRead), None);
        assert_eq!((lanes.running(), lanes.waiting()), (1, 0));
    }

    #[test]
    fn a_first_read_starts_before_every_waiting_retry() {
        let mut lanes = Lanes::new(2, 2);
        assert!(lanes.arrive(Lane::Retry, "r1").is_some());
        assert!(lanes.arrive(Lane::Retry, "r2").is_some());
        assert_eq!(lanes.arrive(Lane::Retry, "r3"), None);
        assert_eq!(lanes.arrive(Lane::Retry, "r4"), None);
        // Arrives after the waiting retries, starts before them.
        assert_eq!(lanes.arrive(Lane::FirstRead, "new"), None);
        assert_eq!(lanes.finished(Lane::Retry), Some((Lane::FirstRead, "new")));
        assert_eq!(lanes.finished(Lane::Retry), Some((Lane::Retry, "r3")));
        assert_eq!(lanes.finished(Lane::FirstRead), Some((Lane::Retry, "r4")));
    }

    #[test]
    fn retries_never_take_more_than_their_share_so_first_reads_always_find_a_slot() {
        let mut lanes = Lanes::new(4, 1);
        assert!(lanes.arrive(Lane::Retry, "r1").is_some());
        for r in ["r2", "r3", "r4"] {
            assert_eq!(
                lanes.arrive(Lane::Retry, r),
                None,
                "{r} waits: one retry at a time"
            );
        }
        for f in ["f1", "f2", "f3"] {
            assert_eq!(
                lanes.arrive(Lane::FirstRead, f),
                Some(f),
                "{f} starts at once"
            );
        }
        assert_eq!(
            lanes.arrive(Lane::FirstRead, "f4"),
            None,
            "every slot is taken"
        );
        // A first read ending lets the waiting first read in, not a retry (over its share).
        assert_eq!(
            lanes.finished(Lane::FirstRead),
            Some((Lane::FirstRead, "f4"))
        );
        assert_eq!(
            lanes.finished(Lane::FirstRead),
            None,
            "retries stay within their share"
        );
        assert_eq!(lanes.finished(Lane::Retry), Some((Lane::Retry, "r2")));
    }

    #[test]
    fn a_retry_does_not_pass_a_waiting_first_read() {
        let mut lanes = Lanes::new(1, 1);
        assert!(lanes.arrive(Lane::FirstRead, "f1").is_some());
        assert_eq!(lanes.arrive(Lane::FirstRead, "f2"), None);
        assert_eq!(lanes.arrive(Lane::Retry, "r1"), None);
        assert_eq!(
            lanes.finished(Lane::FirstRead),
            Some((Lane::FirstRead, "f2"))
        );
        assert_eq!(lanes.finished(Lane::FirstRead), Some((Lane::Retry, "r1")));
    }

    #[test]
    fn limits_are_kept_sane() {
        let mut lanes = Lanes::new(0, 0);
        assert_eq!(
            lanes.arrive(Lane::Retry, 1),
            Some(1),
            "one probe at least, retries too"
        );
        assert_eq!(lanes.arrive(Lane::FirstRead, 2), None);
    }

    async fn running_task() -> (tokio::task::JoinHandle<()>, AbortHandle) {
        let task = tokio::spawn(futures::future::pending::<()>());
        let handle = task.abort_handle();
        (task, handle)
    }

    #[tokio::test]
    async fn a_result_goes_only_to_a_reconcile_with_the_inputs_it_was_started_with() {
        let mut book: Book<&str> = Book::default();
        let (_task, handle) = running_task().await;
        book.started(&key("s"), 1, "generation-1".into(), handle);
        assert!(matches!(
            book.claim(&key("s"), "generation-1"),
            Claim::Running
        ));
        assert!(book.finished(&key("s"), 1, "read at generation 1"));
        // The spec changed meanwhile: the older probe's result must not decide its status.
        assert!(matches!(
            book.claim(&key("s"), "generation-2"),
            Claim::Nothing
        ));
        assert!(
            matches!(book.claim(&key("s"), "generation-1"), Claim::Nothing),
            "the stale result was dropped, not kept for later"
        );

        let (_task, handle) = running_task().await;
        book.started(&key("s"), 2, "generation-2".into(), handle);
        assert!(book.finished(&key("s"), 2, "read at generation 2"));
        match book.claim(&key("s"), "generation-2") {
            Claim::Finished(result, _) => assert_eq!(result, "read at generation 2"),
            other => panic!("expected the result, got {other:?}"),
        }
        assert!(
            matches!(book.claim(&key("s"), "generation-2"), Claim::Nothing),
            "a result is used once"
        );
    }

    #[tokio::test]
    async fn a_running_probe_of_older_inputs_is_stopped_and_its_late_result_dropped() {
        let mut book: Book<&str> = Book::default();
        let (task, handle) = running_task().await;
        book.started(&key("s"), 1, "old".into(), handle);
        assert!(matches!(book.claim(&key("s"), "new"), Claim::Nothing));
        assert!(
            task.await.unwrap_err().is_cancelled(),
            "the old probe is aborted"
        );
        assert!(
            !book.finished(&key("s"), 1, "late"),
            "its result is not kept"
        );

        // A newer probe replaces an older running one: one probe per server at a time.
        let (older, handle) = running_task().await;
        book.started(&key("s"), 2, "new".into(), handle);
        let (_newer, handle) = running_task().await;
        book.started(&key("s"), 3, "newer".into(), handle);
        assert!(older.await.unwrap_err().is_cancelled());
        assert!(!book.finished(&key("s"), 2, "late"));
        assert!(book.finished(&key("s"), 3, "current"));
    }

    #[tokio::test]
    async fn forgetting_a_server_stops_its_probe() {
        let mut book: Book<&str> = Book::default();
        let (task, handle) = running_task().await;
        book.started(&key("gone"), 1, "i".into(), handle);
        let (other, handle) = running_task().await;
        book.started(&key("other"), 2, "i".into(), handle);
        book.forget(&key("gone"));
        assert!(task.await.unwrap_err().is_cancelled());
        assert!(!book.finished(&key("gone"), 1, "late"));
        book.clear();
        assert!(other.await.unwrap_err().is_cancelled());
    }

    #[tokio::test]
    async fn an_aborted_waiting_probe_passes_its_turn_on() {
        let lanes: Arc<Mutex<Lanes<oneshot::Sender<Admitted>>>> =
            Arc::new(Mutex::new(Lanes::new(1, 1)));
        let take = |lane| {
            let (tx, rx) = oneshot::channel();
            let now = lanes.lock().unwrap().arrive(lane, tx);
            (now.is_some(), rx)
        };
        let (started, _rx) = take(Lane::FirstRead);
        assert!(started);
        let running = Admitted {
            lanes: lanes.clone(),
            lane: Lane::FirstRead,
            armed: true,
        };
        let (_, gone) = take(Lane::FirstRead);
        let (_, waiting) = take(Lane::Retry);
        drop(gone); // its task was aborted while it waited
        drop(running);
        let next = waiting.await.expect("the retry gets the slot");
        assert_eq!(next.lane, Lane::Retry);
        assert_eq!(lanes.lock().unwrap().running(), 1);
        drop(next);
        assert_eq!(lanes.lock().unwrap().running(), 0);
    }
}
