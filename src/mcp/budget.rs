//! The response budget: one process-wide bound on the bytes of MCP response bodies held at once,
//! so that many servers answering at their `maxResponseBytes` cannot together take the
//! controller past its memory limit (issue 9, item 10). The per-response cap bounds one body;
//! this bounds their sum.
//!
//! ```text
//!  ResponseBudget (total, shared)            one per process (the controller's flag)
//!    └── Allowance                           one per read of a server, or per event of a
//!          take(n) as bytes arrive ──►       long-lived stream; what it took is held until
//!          drop / release() ──► given back   it is dropped (a read: with its report)
//! ```
//!
//! Rules:
//! - **Wait, not fail, while the budget is busy.** A body that does not fit waits its turn
//!   (first come, first served), so twenty servers answering 60 MB at once are read a few at a
//!   time instead of all buffering. A small take (at most [`SMALL_TAKE`]: a handshake, a chunk)
//!   that fits goes ahead of the queue, so small servers never wait behind big answers.
//! - **The wait is not the server's.** [`within`] bounds a step by a deadline that does not
//!   count the time its allowance spent waiting for the budget, so a server is not reported as
//!   timing out because other servers' answers filled the budget. One wait lasts at most
//!   [`MAX_WAIT`]; then the read gives way ([`McpError::ResponseBudgetBusy`]).
//! - **Never wait forever.** What one allowance would hold beyond the whole budget is refused at
//!   once ([`McpError::OverResponseBudget`]). And because an allowance holds what it read while it
//!   waits for more, every byte in use can end up held by waiters: then nobody can go on, so the
//!   newest waiter that holds something is refused ([`McpError::ResponseBudgetBusy`]) and gives its
//!   bytes back; the caller tries again later. Only a true deadlock refuses anyone.
//! - **Given back on every path.** What an allowance holds lives in the budget's own books, not
//!   in the future that asked: a dropped (cancelled, timed out) wait leaves the queue, and
//!   dropping the allowance gives back everything it took.
//!
//! The high-water mark of bytes in use is kept, for metrics and tests.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::McpError;

/// A take this small that fits is granted at once, even while bigger ones wait.
pub const SMALL_TAKE: u64 = 64 * 1024;

/// The longest one take waits for room before its read gives way.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// The shared bound on response bytes held at once. Cloning shares it.
#[derive(Clone)]
pub struct ResponseBudget {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ResponseBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBudget")
            .field("total", &self.inner.total)
            .field("in_use", &self.in_use())
            .finish()
    }
}

struct Inner {
    total: u64,
    max_wait: Duration,
    next_id: AtomicU64,
    books: Mutex<Books>,
}

/// Who holds what, and who waits for what.
#[derive(Default)]
struct Books {
    in_use: u64,
    high_water: u64,
    /// Bytes held per allowance (only allowances that hold something).
    /// (foldhash: looked up several times per call; the keys are our own counters.)
    held: foldhash::HashMap<u64, u64>,
    queue: VecDeque<Waiter>,
    /// Allowances refused to break a deadlock: what they read is no longer counted, so they may
    /// take nothing more (their read has failed).
    refused: HashSet<u64>,
}

struct Waiter {
    /// This wait (one `take` call).
    wait: u64,
    allowance: u64,
    need: u64,
    answer: oneshot::Sender<Answer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Granted,
    /// Refused to break a deadlock.
    Busy,
}

impl ResponseBudget {
    /// A budget of `total` bytes (at least 1).
    pub fn new(total: u64) -> Self {
        Self::waiting_at_most(total, MAX_WAIT)
    }

    /// A budget whose takes wait at most `max_wait` (tests; everyone else: [`MAX_WAIT`]).
    pub fn waiting_at_most(total: u64, max_wait: Duration) -> Self {
        ResponseBudget {
            inner: Arc::new(Inner {
                total: total.max(1),
                max_wait,
                next_id: AtomicU64::new(1),
                books: Mutex::new(Books::default()),
            }),
        }
    }

    pub fn total(&self) -> u64 {
        self.inner.total
    }

    /// Bytes held right now.
    pub fn in_use(&self) -> u64 {
        self.inner.books().in_use
    }

    /// The most bytes ever held at once.
    pub fn high_water(&self) -> u64 {
        self.inner.books().high_water
    }

    /// A new, empty allowance drawing on this budget.
    pub fn allowance(&self) -> Allowance {
        Allowance {
            budget: Some(self.clone()),
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            clock: Mutex::default(),
        }
    }
}

impl Inner {
    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        // The books are consistent after every statement that touches them; a panic elsewhere
        // while the lock was held leaves nothing half-done.
        self.books.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Books {
    fn grant(&mut self, allowance: u64, bytes: u64) {
        *self.held.entry(allowance).or_default() += bytes;
        self.in_use += bytes;
        self.high_water = self.high_water.max(self.in_use);
    }

    fn give_back(&mut self, allowance: u64) {
        if let Some(bytes) = self.held.remove(&allowance) {
            self.in_use -= bytes;
        }
    }

    /// Grants what fits, first come first served; then, if nobody can go on, refuses one waiter.
    fn settle(&mut self, total: u64) {
        loop {
            while let Some(head) = self.queue.front() {
                if self.in_use + head.need > total {
                    break;
                }
                let head = self.queue.pop_front().expect("the head exists");
                self.grant(head.allowance, head.need);
                // A waiter gone since it asked leaves its grant in the books, where dropping
                // its allowance gives it back.
                let _ = head.answer.send(Answer::Granted);
            }
            if self.queue.is_empty() {
                return;
            }
            // The head does not fit. Someone who is not waiting will give bytes back, unless
            // every byte in use is held by waiters.
            let mut waiting: Vec<u64> = self.queue.iter().map(|w| w.allowance).collect();
            waiting.sort_unstable();
            waiting.dedup();
            let held_by_waiters: u64 = waiting
                .iter()
                .map(|a| self.held.get(a).copied().unwrap_or(0))
                .sum();
            if held_by_waiters < self.in_use {
                return;
            }
            // A deadlock: refuse the newest waiter that holds something, with every other wait
            // of its allowance, and give its bytes back.
            let Some(victim) = self
                .queue
                .iter()
                .rev()
                .find(|w| self.held.get(&w.allowance).is_some_and(|&h| h > 0))
                .map(|w| w.allowance)
            else {
                // Nothing held by anyone, so the head fits (a wait over the total is refused
                // before it queues) and was granted above. Not reached.
                return;
            };
            let (refused, kept): (VecDeque<Waiter>, VecDeque<Waiter>) =
                self.queue.drain(..).partition(|w| w.allowance == victim);
            self.queue = kept;
            for waiter in refused {
                let _ = waiter.answer.send(Answer::Busy);
            }
            self.give_back(victim);
            self.refused.insert(victim);
        }
    }
}

/// What one read (or one event of a long-lived stream) holds of the budget. Not shared between
/// reads; dropping it gives everything back. [`Allowance::unlimited`] draws on nothing (the
/// probe, the sidecar).
pub struct Allowance {
    budget: Option<ResponseBudget>,
    id: u64,
    clock: Mutex<WaitClock>,
}

/// How long an allowance has waited for room, over all its takes (several may wait at once).
#[derive(Default)]
struct WaitClock {
    waited: Duration,
    waiting: usize,
    since: Option<Instant>,
}

impl std::fmt::Debug for Allowance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allowance")
            .field("held", &self.held())
            .finish()
    }
}

impl Allowance {
    /// An allowance bound by nothing but the per-response cap.
    pub fn unlimited() -> Self {
        Allowance {
            budget: None,
            id: 0,
            clock: Mutex::default(),
        }
    }

    /// The time this allowance has spent waiting for room, the wait under way included.
    pub fn waited(&self) -> Duration {
        let clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        clock.waited + clock.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    fn clock(&self, starts: bool) {
        let mut clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        if starts {
            clock.waiting += 1;
            clock.since.get_or_insert_with(Instant::now);
        } else {
            clock.waiting -= 1;
            if clock.waiting == 0
                && let Some(since) = clock.since.take()
            {
                clock.waited += since.elapsed();
            }
        }
    }

    /// Bytes this allowance holds.
    pub fn held(&self) -> u64 {
        self.budget.as_ref().map_or(0, |b| {
            b.inner.books().held.get(&self.id).copied().unwrap_or(0)
        })
    }

    /// Takes `bytes` more, waiting while the budget is busy. Cancel-safe: a dropped wait leaves
    /// the queue (and whatever was granted stays with the allowance until it is dropped).
    pub async fn take(&self, bytes: u64) -> Result<(), McpError> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        if bytes == 0 {
            return Ok(());
        }
        let inner = &budget.inner;
        let wait = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let answer = {
            let mut books = inner.books();
            if books.refused.contains(&self.id) {
                return Err(McpError::ResponseBudgetBusy {
                    budget: inner.total,
                });
            }
            let held = books.held.get(&self.id).copied().unwrap_or(0);
            if held.saturating_add(bytes) > inner.total {
                return Err(McpError::OverResponseBudget {
                    budget: inner.total,
                    pages_read: 0,
                });
            }
            let may_pass = books.queue.is_empty() || bytes <= SMALL_TAKE;
            if may_pass && books.in_use + bytes <= inner.total {
                books.grant(self.id, bytes);
                return Ok(());
            }
            let (tx, rx) = oneshot::channel();
            books.queue.push_back(Waiter {
                wait,
                allowance: self.id,
                need: bytes,
                answer: tx,
            });
            books.settle(inner.total);
            rx
        };
        let guard = LeaveQueue {
            inner,
            wait,
            allowance: self,
        };
        self.clock(true);
        let answer = tokio::time::timeout(inner.max_wait, answer).await;
        drop(guard);
        match answer {
            Ok(Ok(Answer::Granted)) => Ok(()),
            Ok(Ok(Answer::Busy) | Err(_)) | Err(_) => Err(McpError::ResponseBudgetBusy {
                budget: inner.total,
            }),
        }
    }

    /// The whole budget this allowance draws on (None: unlimited).
    pub fn budget_total(&self) -> Option<u64> {
        self.budget.as_ref().map(|b| b.inner.total)
    }

    /// Gives back everything held (a long-lived stream, once an event has been handled).
    pub fn release(&self) {
        self.hold_at_most(0);
    }

    /// Gives back what is held beyond `bytes` (a long-lived stream holds only the event it is
    /// still reading).
    pub fn hold_at_most(&self, bytes: u64) {
        if let Some(budget) = &self.budget {
            let mut books = budget.inner.books();
            let held = books.held.get(&self.id).copied().unwrap_or(0);
            if held <= bytes {
                return;
            }
            if bytes == 0 {
                books.held.remove(&self.id);
            } else {
                books.held.insert(self.id, bytes);
            }
            books.in_use -= held - bytes;
            books.settle(budget.inner.total);
        }
    }
}

impl Drop for Allowance {
    fn drop(&mut self) {
        self.release();
        if let Some(budget) = &self.budget {
            budget.inner.books().refused.remove(&self.id);
        }
    }
}

/// Charges one answer whose length is not announced (a call's event stream, a chunked body) as
/// it arrives, so that many partial answers cannot fill the budget between them and all wait:
/// its first [`SMALL_TAKE`] bytes chunk by chunk (a small answer, a progress line), then, once it
/// grows past that, at once what it may still grow to (its cap, within the whole budget). A
/// reader that has its reservation never waits again, so it finishes and gives room back; the
/// others wait holding at most `SMALL_TAKE` each. [`done`](Self::done) gives back what the
/// answer did not use. A call cannot be read again — its server may have run it — so for a call
/// this takes the place of the budget's last resort (refusing the newest waiter), which only a
/// crowd of waiters holding `SMALL_TAKE` each could still reach.
///
/// One server's reservations are bounded by its [`ReservationShare`]: an untrusted server that
/// sends 64 KiB of each answer and then drips the rest reserves at most its share, and other
/// servers' answers still find room.
#[derive(Debug)]
pub struct UnannouncedAnswer {
    /// What it may grow to; None: charged chunk by chunk, never ahead (a read that can be
    /// tried again, the controller's).
    cap: Option<u64>,
    received: u64,
    held: u64,
    share: Option<ReservationShare>,
    /// This answer's part of its server's share, while it holds a reservation.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// How much of the budget one server's answers may reserve ahead at once: half the budget, or
/// one answer's whole reach when that is more. Cloning shares it (one per server connection).
#[derive(Clone, Debug)]
pub struct ReservationShare(Arc<tokio::sync::Semaphore>, u64);

impl ReservationShare {
    /// The share of a server whose answers may reach `cap` bytes, within `budget`.
    pub fn of(budget: &ResponseBudget, cap: u64) -> Self {
        let total = budget.total();
        let bytes = (total / 2).max(cap.min(total));
        let permits = usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        ReservationShare(Arc::new(tokio::sync::Semaphore::new(permits)), bytes)
    }

    /// Bytes of the share not reserved now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }

    /// Whether both are the same share (one server's).
    pub fn same_as(&self, other: &ReservationShare) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl UnannouncedAnswer {
    /// An answer of at most `cap` bytes (the server's maxResponseBytes), reserved ahead within
    /// its server's `share`.
    pub fn reserving(cap: u64, share: Option<ReservationShare>) -> Self {
        UnannouncedAnswer {
            cap: Some(cap),
            received: 0,
            held: 0,
            share,
            permit: None,
        }
    }

    /// A body charged only as its chunks arrive.
    pub fn chunk_by_chunk() -> Self {
        UnannouncedAnswer {
            cap: None,
            received: 0,
            held: 0,
            share: None,
            permit: None,
        }
    }

    /// Waits for `bytes` of the server's share (at most the budget's longest wait,
    /// [`MAX_WAIT`], then the read gives way with [`McpError::ServerShareBusy`]).
    async fn reserve_share(&mut self, allowance: &Allowance, bytes: u64) -> Result<(), McpError> {
        let Some(share) = &self.share else {
            return Ok(());
        };
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let busy = || McpError::ServerShareBusy { share: share.1 };
        let longest = allowance
            .budget
            .as_ref()
            .map_or(MAX_WAIT, |b| b.inner.max_wait);
        let permit =
            tokio::time::timeout(longest, Arc::clone(&share.0).acquire_many_owned(permits))
                .await
                .map_err(|_| busy())?
                .map_err(|_| busy())?;
        self.permit = Some(permit);
        Ok(())
    }

    /// Charges `bytes` that arrived to `allowance` (waiting for room as [`Allowance::take`]).
    pub async fn arrived(&mut self, allowance: &Allowance, bytes: u64) -> Result<(), McpError> {
        self.received += bytes;
        if self.received <= self.held {
            return Ok(());
        }
        let need = self.received - self.held;
        let take = match self.cap {
            Some(cap) if self.received > SMALL_TAKE => {
                let reach = allowance.budget_total().map_or(cap, |total| cap.min(total));
                if self.permit.is_none() {
                    self.reserve_share(allowance, reach).await?;
                }
                need.max(reach.saturating_sub(self.held))
            }
            _ => need,
        };
        allowance.take(take).await?;
        self.held += take;
        Ok(())
    }

    /// A stream's events so far are handled (notifications passed on): only the `pending` bytes
    /// of the event still being read stay held, so a long call's progress lines never add up to
    /// a reservation, and a big notification's reservation goes back once it is handled. While
    /// a big event is still being read (more than [`SMALL_TAKE`] pending) its reservation stays.
    pub fn handled_up_to(&mut self, allowance: &Allowance, pending: u64) {
        if pending > SMALL_TAKE || pending >= self.received {
            return;
        }
        let give_back = self.held.saturating_sub(pending);
        allowance.hold_at_most(allowance.held().saturating_sub(give_back));
        self.received = pending;
        self.held = pending;
        self.permit = None;
    }

    /// The answer is whole: what it reserved beyond its bytes goes back (and nothing else the
    /// allowance holds), and so does its part of the server's share.
    pub fn done(&mut self, allowance: &Allowance) {
        let unused = self.held.saturating_sub(self.received);
        if unused > 0 {
            allowance.hold_at_most(allowance.held().saturating_sub(unused));
        }
        self.permit = None;
    }
}

/// Takes a wait out of the queue when the future waiting on it is dropped (a no-op once it was
/// answered), and stops its allowance's clock.
struct LeaveQueue<'a> {
    inner: &'a Inner,
    wait: u64,
    allowance: &'a Allowance,
}

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        self.allowance.clock(false);
        let mut books = self.inner.books();
        let before = books.queue.len();
        books.queue.retain(|w| w.wait != self.wait);
        if books.queue.len() != before {
            books.settle(self.inner.total);
        }
    }
}

/// Runs `step` within `limit`, not counting the time `allowance` spends waiting for the
/// budget: `None` once the limit passed.
pub async fn within<T>(
    limit: Duration,
    allowance: &Allowance,
    step: impl Future<Output = T>,
) -> Option<T> {
    let started = Instant::now();
    tokio::pin!(step);
    loop {
        let deadline = started + limit + allowance.waited();
        tokio::select! {
            done = &mut step => return Some(done),
            () = tokio::time::sleep_until(deadline) => {
                if Instant::now() >= started + limit + allowance.waited() {
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn reason(r: Result<(), McpError>) -> &'static str {
        match r {
            Ok(()) => "Granted",
            Err(e) => e.reason(),
        }
    }

    /// 32 answers of 1 MiB arriving 16 KiB at a time, all at once, through a 4 MiB budget.
    async fn many_unannounced_answers(charge: fn() -> UnannouncedAnswer) -> Vec<&'static str> {
        const MIB: u64 = 1024 * 1024;
        let budget = ResponseBudget::new(4 * MIB);
        let readers: Vec<_> = (0..32)
            .map(|_| {
                let allowance = budget.allowance();
                tokio::spawn(async move {
                    let mut answer = charge();
                    for _ in 0..64 {
                        answer.arrived(&allowance, 16 * 1024).await?;
                        tokio::task::yield_now().await;
                    }
                    answer.done(&allowance);
                    assert_eq!(allowance.held(), MIB, "an answer holds its bytes, no more");
                    Ok::<(), McpError>(())
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for r in readers {
            outcomes.push(reason(r.await.unwrap()));
        }
        assert!(budget.high_water() <= 4 * MIB);
        assert_eq!(budget.in_use(), 0);
        outcomes
    }

    #[tokio::test]
    async fn answers_of_unannounced_length_that_reserve_ahead_all_finish_within_the_budget() {
        let outcomes =
            many_unannounced_answers(|| UnannouncedAnswer::reserving(1024 * 1024, None)).await;
        assert!(outcomes.iter().all(|o| *o == "Granted"), "{outcomes:?}");
        // Charged chunk by chunk, the same answers fill the budget between them, all partial,
        // and the budget's last resort refuses some: what a call must not suffer.
        let outcomes = many_unannounced_answers(UnannouncedAnswer::chunk_by_chunk).await;
        assert!(outcomes.contains(&"ResponseBudgetBusy"), "{outcomes:?}");
    }

    #[tokio::test]
    async fn one_servers_dripping_answers_reserve_at_most_its_share_and_others_find_room() {
        const MIB: u64 = 1024 * 1024;
        let budget = ResponseBudget::new(8 * MIB);
        let cap = 2 * MIB;
        let dripper = ReservationShare::of(&budget, cap);
        let other = ReservationShare::of(&budget, cap);
        assert_eq!(dripper.available() as u64, 4 * MIB, "half the budget");
        // Two answers of the dripping server pass 64 KiB and stop there: they reserve its share.
        let mut dripping = Vec::new();
        for _ in 0..2 {
            let allowance = budget.allowance();
            let mut answer = UnannouncedAnswer::reserving(cap, Some(dripper.clone()));
            answer.arrived(&allowance, SMALL_TAKE + 1).await.unwrap();
            dripping.push((allowance, answer));
        }
        assert_eq!(dripper.available(), 0);
        // A third waits for its server's share, holding nothing of the budget meanwhile.
        let allowance = budget.allowance();
        let share = dripper.clone();
        let third = tokio::spawn(async move {
            let mut answer = UnannouncedAnswer::reserving(cap, Some(share));
            answer
                .arrived(&allowance, SMALL_TAKE + 1)
                .await
                .map(|()| (allowance, answer))
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !third.is_finished(),
            "the dripping server's third answer waits"
        );
        // Another server's big answer reserves and finishes meanwhile.
        let allowance = budget.allowance();
        let mut answer = UnannouncedAnswer::reserving(cap, Some(other.clone()));
        answer.arrived(&allowance, SMALL_TAKE + 1).await.unwrap();
        answer.arrived(&allowance, MIB).await.unwrap();
        answer.done(&allowance);
        assert_eq!(allowance.held(), SMALL_TAKE + 1 + MIB);
        assert_eq!(
            other.available() as u64,
            4 * MIB,
            "its share back once it is whole"
        );
        // One dripping answer ends (its call timed out): the third goes on.
        drop(dripping.pop());
        let (_allowance, _answer) = third.await.unwrap().unwrap();
        assert!(budget.high_water() <= 8 * MIB);
    }

    #[tokio::test]
    async fn an_answer_that_waits_for_its_servers_share_too_long_says_so() {
        let budget = ResponseBudget::waiting_at_most(8 * 1024 * 1024, Duration::from_millis(50));
        let share = ReservationShare::of(&budget, 4 * 1024 * 1024);
        let holder = budget.allowance();
        let mut dripping = UnannouncedAnswer::reserving(4 * 1024 * 1024, Some(share.clone()));
        dripping.arrived(&holder, SMALL_TAKE + 1).await.unwrap();
        let allowance = budget.allowance();
        let mut waiting = UnannouncedAnswer::reserving(4 * 1024 * 1024, Some(share));
        let e = waiting
            .arrived(&allowance, SMALL_TAKE + 1)
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "ServerShareBusy");
        assert!(
            e.to_string().contains("4194304 bytes of --response-budget")
                && e.to_string().contains("sending its answers slowly"),
            "{e}"
        );
        assert_eq!(allowance.held(), 0, "it took nothing of the budget");
    }

    #[tokio::test]
    async fn an_answer_gives_back_its_unused_reservation_and_a_streams_handled_events() {
        let budget = ResponseBudget::new(1024 * 1024);
        let allowance = budget.allowance();
        allowance.take(10).await.unwrap();
        let mut answer = UnannouncedAnswer::reserving(512 * 1024, None);
        // Progress lines: charged as they come, given back once handled.
        answer.arrived(&allowance, 1000).await.unwrap();
        answer.handled_up_to(&allowance, 100);
        assert_eq!(allowance.held(), 10 + 100);
        // The answer grows past SMALL_TAKE: its cap is reserved at once, then all but its bytes
        // given back when it is whole (and nothing the allowance held before).
        answer.arrived(&allowance, SMALL_TAKE).await.unwrap();
        assert_eq!(allowance.held(), 10 + 512 * 1024);
        answer.arrived(&allowance, 1000).await.unwrap();
        answer.handled_up_to(&allowance, SMALL_TAKE + 1000);
        assert_eq!(
            allowance.held(),
            10 + 512 * 1024,
            "a reservation stays while its big event is read"
        );
        answer.done(&allowance);
        assert_eq!(allowance.held(), 10 + 100 + SMALL_TAKE + 1000);
        // A big notification, handled: its reservation goes back; the next one reserves again.
        let allowance = budget.allowance();
        let mut stream = UnannouncedAnswer::reserving(512 * 1024, None);
        stream.arrived(&allowance, SMALL_TAKE + 1).await.unwrap();
        assert_eq!(allowance.held(), 512 * 1024);
        stream.handled_up_to(&allowance, 10);
        assert_eq!(allowance.held(), 10);
        stream.arrived(&allowance, SMALL_TAKE).await.unwrap();
        assert_eq!(allowance.held(), 512 * 1024);
        // Within a budget smaller than the cap, the reservation is the whole budget.
        let small = ResponseBudget::new(200 * 1024);
        let allowance = small.allowance();
        let mut answer = UnannouncedAnswer::reserving(1024 * 1024, None);
        answer.arrived(&allowance, SMALL_TAKE + 1).await.unwrap();
        assert_eq!(allowance.held(), 200 * 1024);
        let e = answer.arrived(&allowance, 200 * 1024).await.unwrap_err();
        assert_eq!(e.reason(), "ResponseBudgetExceeded");
    }

    #[tokio::test]
    async fn what_fits_is_granted_at_once_and_given_back_on_drop() {
        let budget = ResponseBudget::new(100);
        let a = budget.allowance();
        a.take(60).await.unwrap();
        a.take(40).await.unwrap();
        assert_eq!((budget.in_use(), a.held()), (100, 100));
        drop(a);
        assert_eq!(budget.in_use(), 0);
        assert_eq!(budget.high_water(), 100);
    }

    #[tokio::test]
    async fn more_than_the_whole_budget_is_refused_at_once_with_the_reason() {
        let budget = ResponseBudget::new(100);
        let a = budget.allowance();
        assert_eq!(reason(a.take(101).await), "ResponseBudgetExceeded");
        a.take(70).await.unwrap();
        let e = a.take(31).await.unwrap_err();
        assert_eq!(e.reason(), "ResponseBudgetExceeded");
        assert!(e.to_string().contains("100 bytes"), "{e}");
        assert_eq!(budget.in_use(), 70, "a refusal takes nothing");
    }

    #[tokio::test]
    async fn a_body_that_does_not_fit_waits_until_another_gives_back() {
        let budget = ResponseBudget::new(100);
        let a = budget.allowance();
        a.take(80).await.unwrap();
        let b = budget.allowance();
        let waiting = tokio::spawn(async move { b.take(50).await.map(|()| b) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "b must wait while a holds 80 of 100"
        );
        drop(a);
        let b = waiting.await.unwrap().unwrap();
        assert_eq!((budget.in_use(), b.held()), (50, 50));
        assert_eq!(budget.high_water(), 80);
    }

    #[tokio::test]
    async fn a_small_take_that_fits_goes_ahead_of_a_big_one_waiting() {
        let budget = ResponseBudget::new(1024 * 1024);
        let a = budget.allowance();
        a.take(600 * 1024).await.unwrap();
        let big = budget.allowance();
        let waiting = tokio::spawn(async move { big.take(500 * 1024).await.map(|()| big) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let small = budget.allowance();
        tokio::time::timeout(Duration::from_millis(100), small.take(SMALL_TAKE))
            .await
            .expect("a handshake does not wait behind a big answer")
            .unwrap();
        drop((a, small));
        let big = waiting.await.unwrap().unwrap();
        assert_eq!(big.held(), 500 * 1024);
    }

    #[tokio::test]
    async fn a_step_is_not_timed_while_its_allowance_waits_for_room() {
        let budget = ResponseBudget::new(100);
        let holder = budget.allowance();
        holder.take(100).await.unwrap();
        let reader = budget.allowance();
        let step = async {
            reader.take(50).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            "read"
        };
        let release = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(holder);
        };
        // 300 ms waiting for room, then 50 ms of reading: within 150 ms of the server's time.
        let (done, ()) = tokio::join!(within(Duration::from_millis(150), &reader, step), release);
        assert_eq!(done, Some("read"));
        assert!(reader.waited() >= Duration::from_millis(300));
        // Without a wait, the limit holds.
        let slow = within(
            Duration::from_millis(50),
            &reader,
            tokio::time::sleep(Duration::from_millis(400)),
        );
        assert_eq!(slow.await, None);
    }

    #[tokio::test]
    async fn one_wait_lasts_at_most_the_longest_wait() {
        let budget = ResponseBudget::waiting_at_most(100, Duration::from_millis(100));
        let holder = budget.allowance();
        holder.take(100).await.unwrap();
        let reader = budget.allowance();
        let e = reader.take(50).await.unwrap_err();
        assert_eq!(e.reason(), "ResponseBudgetBusy");
        assert!(reader.waited() >= Duration::from_millis(100));
        assert_eq!((budget.in_use(), reader.held()), (100, 0));
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_the_queue_and_takes_nothing() {
        let budget = ResponseBudget::new(100);
        let a = budget.allowance();
        a.take(90).await.unwrap();
        let b = budget.allowance();
        let timed_out = tokio::time::timeout(Duration::from_millis(10), b.take(50)).await;
        assert!(timed_out.is_err());
        assert_eq!(b.held(), 0);
        // Nobody is queued before c, so c's small take is granted at once.
        let c = budget.allowance();
        c.take(10).await.unwrap();
        assert_eq!(budget.in_use(), 100);
    }

    #[tokio::test]
    async fn when_every_holder_waits_the_newest_is_refused_and_the_others_go_on() {
        let budget = ResponseBudget::new(100);
        let a = budget.allowance();
        let b = budget.allowance();
        a.take(50).await.unwrap();
        b.take(40).await.unwrap();
        let a_more = tokio::spawn(async move { a.take(30).await.map(|()| a) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !a_more.is_finished(),
            "a waits: b holds 40 and is still reading"
        );
        // b now waits too: every byte in use is held by a waiter; b, the newest, is refused.
        let e = b.take(30).await.unwrap_err();
        assert_eq!(e.reason(), "ResponseBudgetBusy");
        assert!(e.to_string().contains("100 bytes"), "{e}");
        assert_eq!(b.held(), 0, "the refused allowance gave its bytes back");
        let a = a_more.await.unwrap().unwrap();
        assert_eq!(a.held(), 80);
        assert_eq!(budget.in_use(), 80);
    }

    #[tokio::test]
    async fn release_gives_back_and_lets_the_stream_go_on() {
        let budget = ResponseBudget::new(10);
        let events = budget.allowance();
        for _ in 0..100 {
            events.take(8).await.unwrap();
            events.release();
        }
        assert_eq!(budget.in_use(), 0);
        assert_eq!(budget.high_water(), 8);
    }

    #[tokio::test]
    async fn holding_at_most_gives_back_the_excess_to_whoever_waits() {
        let budget = ResponseBudget::new(10);
        let stream = budget.allowance();
        stream.take(10).await.unwrap();
        let other = budget.allowance();
        let waiting = tokio::spawn(async move { other.take(6).await.map(|()| other) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        stream.hold_at_most(4);
        let other = waiting.await.unwrap().unwrap();
        assert_eq!((stream.held(), other.held(), budget.in_use()), (4, 6, 10));
        stream.hold_at_most(8);
        assert_eq!(stream.held(), 4, "holding at most never takes more");
    }

    #[tokio::test]
    async fn an_unlimited_allowance_takes_anything() {
        let a = Allowance::unlimited();
        a.take(u64::MAX).await.unwrap();
        assert_eq!(a.held(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Readers take chunks at random, some are cancelled midway, some give back per event:
        /// each read ends (granted, refused over budget, or refused busy), the budget is never
        /// exceeded, and everything is given back at the end.
        #[test]
        fn never_exceeded_never_stuck_always_given_back(
            total in 1u64..200,
            readers in proptest::collection::vec(
                (proptest::collection::vec(1u64..80, 1..12), any::<bool>(), 0u64..5),
                1..12,
            ),
        ) {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .unwrap();
            runtime.block_on(async {
                // Units of 40 KiB: some takes are small enough to pass the queue, some are not.
                const UNIT: u64 = 40 * 1024;
                let budget = ResponseBudget::new(total * UNIT);
                let tasks: Vec<_> = readers
                    .into_iter()
                    .map(|(chunks, per_event, cancel_after)| {
                        let budget = budget.clone();
                        tokio::spawn(async move {
                            let allowance = budget.allowance();
                            for (i, chunk) in chunks.into_iter().enumerate() {
                                let take = allowance.take(chunk * UNIT);
                                let taken = if cancel_after > 0 && i as u64 == cancel_after {
                                    match tokio::time::timeout(Duration::from_millis(1), take).await {
                                        Ok(r) => r,
                                        Err(_) => return "Cancelled",
                                    }
                                } else {
                                    take.await
                                };
                                assert!(budget.in_use() <= budget.total());
                                match taken {
                                    Ok(()) => {}
                                    Err(e) => return e.reason(),
                                }
                                tokio::task::yield_now().await;
                                if per_event {
                                    allowance.release();
                                }
                            }
                            "Read"
                        })
                    })
                    .collect();
                for task in tasks {
                    let ended = tokio::time::timeout(Duration::from_secs(10), task)
                        .await
                        .expect("no reader waits forever")
                        .unwrap();
                    assert!(
                        ["Read", "Cancelled", "ResponseBudgetExceeded", "ResponseBudgetBusy"]
                            .contains(&ended),
                        "{ended}"
                    );
                }
                assert!(budget.high_water() <= total * UNIT);
                assert_eq!(budget.in_use(), 0);
            });
        }
    }
}
