//! Leader election through a `coordination.k8s.io` Lease, and the write fence that keeps a
//! replica from writing once its lease may have expired. Called by `controller::run`; the fence
//! sits in the kube client's service stack, so every write of every reconciler passes it.
//!
//! ```text
//!   Elector ──get / create / patch (resourceVersion precondition)──► Lease
//!      │ renewal sent at T succeeded
//!      ▼
//!   Fence: writes allowed until T + duration − margin ◄── FenceLayer in the kube Client
//!      │                                                   (POST/PUT/PATCH/DELETE refused after)
//!      ▼
//!   leading: watch::Sender<bool> ──► controller::run starts / stops the reconcilers
//! ```
//!
//! The rules are client-go's, on monotonic clocks: a standby counts a Lease as expired only once
//! its record has not changed for `leaseDurationSeconds` *on the standby's own clock*. The standby
//! cannot observe a renewal before it was sent, so a renewal the leader sent at local time T
//! cannot be taken over before T + duration, whatever the wall clocks say. The leader therefore
//! sends writes only until T + duration − margin, and abandons a write still unanswered then. A paused leader wakes past that instant and writes
//! nothing; a leader that cannot reach the apiserver stops writing at the same instant, before
//! any standby may lead. Writes the leader sent inside its window can still sit queued in a
//! paused apiserver; the standby's count therefore runs only over prompt answers and starts
//! over after a slow or failed read, so the queue is worked through before it takes over
//! ([`unchanged_for`]). A clean shutdown releases the Lease (empty holder), which a standby
//! takes at its next look instead of waiting for expiry.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// Until when this replica may write, on the monotonic clock.
#[derive(Debug)]
pub struct Fence {
    epoch: Instant,
    /// Microseconds after `epoch` before which writes are allowed; 0: closed; `u64::MAX`: always
    /// open (leader election off).
    until_micros: AtomicU64,
}

impl Fence {
    /// A fence that allows nothing until a lease is held.
    pub fn closed() -> Arc<Self> {
        Arc::new(Fence {
            epoch: Instant::now(),
            until_micros: AtomicU64::new(0),
        })
    }

    /// A fence that always allows writes: for a single replica run without leader election.
    pub fn open() -> Arc<Self> {
        Arc::new(Fence {
            epoch: Instant::now(),
            until_micros: AtomicU64::new(u64::MAX),
        })
    }

    /// Whether a write may be sent now.
    pub fn permits_writes(&self) -> bool {
        self.micros(Instant::now()) < self.until_micros.load(Ordering::Acquire)
    }

    /// How long writes stay allowed; None when the fence is always open.
    fn remaining(&self) -> Option<Duration> {
        let until = self.until_micros.load(Ordering::Acquire);
        if until == u64::MAX {
            return None;
        }
        let now = self.micros(Instant::now());
        Some(Duration::from_micros(until.saturating_sub(now)))
    }

    /// Allows writes until `until` (never shortens a later deadline already set by a newer
    /// renewal: renewals complete in order, but be safe).
    fn extend_to(&self, until: Instant) {
        let until = self.micros(until).max(1);
        self.until_micros.fetch_max(until, Ordering::AcqRel);
    }

    /// Stops writes at once.
    fn close(&self) {
        self.until_micros.store(0, Ordering::Release);
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX - 1)
    }
}

/// The error a fenced write gets: the request never left this process.
#[derive(Debug, thiserror::Error)]
#[error(
    "not writing: this replica does not hold a valid lease (or it expired before the apiserver answered)"
)]
pub struct NotLeading;

/// A tower layer that refuses every write request while the fence is closed.
#[derive(Clone, Debug)]
pub struct FenceLayer(pub Arc<Fence>);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// The service [`FenceLayer`] makes.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: Arc<Fence>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower::Service<http::Request<B>> for Fenced<S>
where
    S: tower::Service<http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if is_write(request.method()) && !self.fence.permits_writes() {
            return Box::pin(std::future::ready(Err(NotLeading.into())));
        }
        let write = is_write(request.method());
        let response = self.inner.call(request);
        let fence = self.fence.clone();
        Box::pin(async move {
            if !write {
                return response.await.map_err(Into::into);
            }
            // A write still unanswered when the lease may expire is abandoned (the connection is
            // dropped): an apiserver that queued it while restarting must not apply it after a
            // standby took over. A renewal meanwhile extends the wait.
            tokio::pin!(response);
            loop {
                let Some(left) = fence.remaining() else {
                    return response.await.map_err(Into::into);
                };
                if left.is_zero() {
                    return Err(NotLeading.into());
                }
                if let Ok(answer) = tokio::time::timeout(left, &mut response).await {
                    return answer.map_err(Into::into);
                }
            }
        })
    }
}

fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// Timing of the election.
#[derive(Clone, Debug)]
pub struct Timing {
    /// `leaseDurationSeconds`: how long a standby waits on an unchanged record.
    pub duration: Duration,
    /// How often the leader renews.
    pub renew_every: Duration,
    /// How often a standby looks at the Lease.
    pub retry_every: Duration,
    /// Writes stop this long before the lease could be taken over.
    pub margin: Duration,
}

impl Timing {
    /// The timing for a lease of `duration`: renewed four times per duration, and writes sent
    /// only in its first half. The margin is what a write that passed the fence may spend on
    /// its way to the apiserver (a connection to open, a starved process or apiserver) and
    /// still arrive before a standby may take over; a quarter of the duration was seen to be
    /// too little on two shared cores under the fault suite's load.
    pub fn for_duration(duration: Duration) -> Self {
        Timing {
            duration,
            renew_every: duration / 4,
            retry_every: duration / 8,
            margin: duration / 2,
        }
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing::for_duration(Duration::from_secs(4))
    }
}

/// What the Lease says, reduced to what the decision needs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    duration: Duration,
}

/// The next step, given the Lease's record and how long it has been unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// We hold it: renew.
    Renew,
    /// Nobody holds it (released, or expired on our clock): take it.
    Take,
    /// Someone else holds it and it has not expired.
    Follow,
}

fn decide(record: &Record, me: &str, unchanged_for: Duration, may_lead: bool) -> Step {
    match record.holder.as_deref() {
        Some(holder) if holder == me => {
            if may_lead {
                Step::Renew
            } else {
                Step::Follow
            }
        }
        holder => {
            let vacant = holder.is_none_or(str::is_empty) || unchanged_for >= record.duration;
            if vacant && may_lead {
                Step::Take
            } else {
                Step::Follow
            }
        }
    }
}

/// How long the Lease's record has been seen unchanged, on this replica's clock, after a look
/// that sent its read at `asked` and had the answer at `answered`: the record's version, or
/// None when the read failed.
///
/// Only an apiserver that answers within `prompt` counts the time: a slow answer (or a failed
/// read, which forgets the observation) means requests were queued in between — a paused apiserver,
/// a stalled etcd — and writes the holder sent inside its window may still be queued behind
/// ours. Those are applied when the apiserver resumes, in any order with ours, so the count
/// starts over there: a standby takes the Lease only after a whole duration of prompt answers,
/// by which time the apiserver has worked through what was queued (and a holder that is still
/// alive has renewed).
fn unchanged_for(
    observed: &mut Option<(String, Instant)>,
    version: Option<&str>,
    asked: Instant,
    answered: Instant,
    prompt: Duration,
) -> Duration {
    let Some(version) = version else {
        *observed = None;
        return Duration::ZERO;
    };
    let prompt = answered.saturating_duration_since(asked) <= prompt;
    match observed {
        Some((seen, since)) if seen == version && prompt => {
            answered.saturating_duration_since(*since)
        }
        _ => {
            *observed = Some((version.to_string(), answered));
            Duration::ZERO
        }
    }
}

/// Runs the election for one replica.
pub struct Elector {
    /// The Lease's namespace, through a client that is not fenced (the Lease is how the fence
    /// opens).
    pub api: Api<Lease>,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// Timing.
    pub timing: Timing,
    /// The fence to open while the lease is held.
    pub fence: Arc<Fence>,
}

impl Elector {
    /// Elects until `stop` turns true, then releases the Lease if held. `leading` says whether
    /// this replica leads; `may_lead` false keeps it from taking or renewing (its previous term's
    /// reconcilers have not stopped yet).
    pub async fn run(
        self,
        leading: watch::Sender<bool>,
        may_lead: watch::Receiver<bool>,
        mut stop: watch::Receiver<bool>,
    ) {
        // (resourceVersion, when we first saw it)
        let mut observed: Option<(String, Instant)> = None;
        // The resourceVersion our own last write of the Lease returned.
        let mut own: Option<String> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            let may = *may_lead.borrow();
            let started = Instant::now();
            let leads = self.step(&mut observed, &mut own, may).await;
            if *leading.borrow() != leads {
                let _ = leading.send(leads);
            }
            // Counted from the start of this look, so a slow apiserver does not stretch the time
            // between two renewals past the write window.
            let wait = if leads {
                self.timing.renew_every
            } else {
                self.timing.retry_every
            }
            .saturating_sub(started.elapsed());
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => {}
            }
        }
        let held = self.fence.permits_writes();
        self.fence.close();
        let _ = leading.send(false);
        if held {
            self.release().await;
        }
    }

    /// One look at the Lease; true when this replica holds it afterwards (and the fence is
    /// open).
    async fn step(
        &self,
        observed: &mut Option<(String, Instant)>,
        own: &mut Option<String>,
        may_lead: bool,
    ) -> bool {
        // While we lead, renew on the version our last write returned without reading the
        // Lease first: one round trip instead of two inside the write window. A conflict (someone
        // else wrote it) or an error sends the next look through a read.
        if may_lead
            && self.fence.permits_writes()
            && let Some(version) = own.take()
        {
            return self.write(&version, 0, false, observed, own).await || self.still_valid();
        }
        let asked = Instant::now();
        let lease = match self.api.get_opt(&self.name).await {
            Ok(lease) => lease,
            Err(e) => {
                debug!(lease = %self.name, "reading the Lease failed: {e}");
                unchanged_for(observed, None, asked, Instant::now(), Duration::ZERO);
                return self.still_valid();
            }
        };
        let Some(lease) = lease else {
            return may_lead && self.create().await;
        };
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        // Prompt: within the standby's own look period.
        let unchanged_for = unchanged_for(
            observed,
            Some(&version),
            asked,
            Instant::now(),
            self.timing.retry_every,
        );
        let spec = lease.spec.unwrap_or_default();
        let record = Record {
            holder: spec.holder_identity.clone(),
            duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(1).max(1)).unwrap_or(1),
            ),
        };
        match decide(&record, &self.identity, unchanged_for, may_lead) {
            Step::Renew => {
                self.write(
                    &version,
                    spec.lease_transitions.unwrap_or(0),
                    false,
                    observed,
                    own,
                )
                .await
                    || self.still_valid()
            }
            Step::Take => {
                self.write(
                    &version,
                    spec.lease_transitions.unwrap_or(0) + 1,
                    true,
                    observed,
                    own,
                )
                .await
            }
            Step::Follow => {
                if record.holder.as_deref() != Some(self.identity.as_str()) {
                    // Someone else holds it: whatever we thought, we write nothing more.
                    self.fence.close();
                }
                false
            }
        }
    }

    /// Whether the lease from the last successful renewal still covers writes; closes the fence
    /// when it does not.
    fn still_valid(&self) -> bool {
        let valid = self.fence.permits_writes();
        if !valid {
            self.fence.close();
        }
        valid
    }

    async fn create(&self) -> bool {
        let sent = Instant::now();
        let lease: Lease = match serde_json::from_value(json!({
            "metadata": {"name": self.name},
            "spec": self.spec_json(0, true),
        })) {
            Ok(lease) => lease,
            Err(e) => {
                warn!("building the Lease failed: {e}");
                return false;
            }
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => {
                self.granted(sent);
                true
            }
            Err(e) => {
                debug!(lease = %self.name, "creating the Lease failed: {e}");
                false
            }
        }
    }

    /// Renews (or takes) the Lease at `version`; the precondition makes a concurrent change by
    /// another replica a conflict instead of a silent overwrite.
    async fn write(
        &self,
        version: &str,
        transitions: i32,
        take: bool,
        observed: &mut Option<(String, Instant)>,
        own: &mut Option<String>,
    ) -> bool {
        let sent = Instant::now();
        let patch = json!({
            "metadata": {"resourceVersion": version},
            "spec": self.spec_json(transitions, take),
        });
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(lease) => {
                own.clone_from(&lease.metadata.resource_version);
                *observed = lease.metadata.resource_version.map(|v| (v, sent));
                self.granted(sent);
                true
            }
            Err(e) => {
                debug!(lease = %self.name, "writing the Lease failed: {e}");
                false
            }
        }
    }

    fn granted(&self, sent: Instant) {
        let until = sent + self.timing.duration.saturating_sub(self.timing.margin);
        self.fence.extend_to(until);
    }

    fn spec_json(&self, transitions: i32, take: bool) -> serde_json::Value {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let mut spec = json!({
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.timing.duration.as_secs().max(1),
            "renewTime": now,
        });
        if take {
            spec["acquireTime"] = json!(now);
            spec["leaseTransitions"] = json!(transitions);
        }
        spec
    }

    /// Gives the Lease up so a standby takes it at once. Only while we still hold it: the
    /// precondition is the holder, checked by reading first.
    async fn release(&self) {
        let lease = match self.api.get_opt(&self.name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(e) => {
                warn!("releasing the lease failed: {e}");
                return;
            }
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref());
        if holder != Some(self.identity.as_str()) {
            return;
        }
        let patch = json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": null, "leaseDurationSeconds": 1},
        });
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => info!("released the lease"),
            Err(e) => warn!("releasing the lease failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, secs: u64) -> Record {
        Record {
            holder: holder.map(str::to_string),
            duration: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_healthy_leader_renews_well_inside_its_write_window() {
        for secs in [2, 4, 15, 60] {
            let t = Timing::for_duration(Duration::from_secs(secs));
            let window = t.duration - t.margin;
            // Two renewals fit in the window, so one slow or failed renewal does not close the
            // fence; and half the duration is left for a write already on its way.
            assert!(t.renew_every * 2 <= window, "{secs}s: {t:?}");
            assert!(t.margin * 2 >= t.duration, "{secs}s: {t:?}");
            assert!(t.retry_every < t.renew_every, "{secs}s: {t:?}");
        }
    }

    #[test]
    fn the_holder_renews_only_while_it_may_lead() {
        let r = record(Some("me"), 4);
        assert_eq!(decide(&r, "me", Duration::ZERO, true), Step::Renew);
        assert_eq!(
            decide(&r, "me", Duration::from_secs(60), true),
            Step::Renew,
            "our own record, however old"
        );
        assert_eq!(decide(&r, "me", Duration::ZERO, false), Step::Follow);
    }

    #[test]
    fn another_holder_is_followed_until_its_record_is_unchanged_for_its_duration() {
        let r = record(Some("other"), 4);
        assert_eq!(
            decide(&r, "me", Duration::from_millis(3999), true),
            Step::Follow
        );
        assert_eq!(decide(&r, "me", Duration::from_secs(4), true), Step::Take);
        assert_eq!(
            decide(&r, "me", Duration::from_secs(4), false),
            Step::Follow
        );
    }

    #[test]
    fn the_count_starts_over_after_a_slow_answer_or_a_failed_read() {
        let prompt = Duration::from_millis(500);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut observed = None;
        assert_eq!(
            unchanged_for(&mut observed, Some("7"), at(0), at(10), prompt),
            Duration::ZERO
        );
        assert_eq!(
            unchanged_for(&mut observed, Some("7"), at(4000), at(4010), prompt),
            Duration::from_millis(4000),
            "prompt answers count the time from the first sight"
        );
        // The apiserver paused for 15 s: the read sent at 4.5 s is answered at 19.5 s with the
        // same record. Writes the holder sent before its window closed may still be queued.
        assert_eq!(
            unchanged_for(&mut observed, Some("7"), at(4500), at(19_500), prompt),
            Duration::ZERO,
            "a slow answer starts the count over"
        );
        assert_eq!(
            unchanged_for(&mut observed, Some("7"), at(20_000), at(20_010), prompt),
            Duration::from_millis(510)
        );
        assert_eq!(
            unchanged_for(&mut observed, Some("8"), at(21_000), at(21_010), prompt),
            Duration::ZERO,
            "a changed record starts the count over"
        );
        assert_eq!(
            unchanged_for(&mut observed, Some("8"), at(25_000), at(25_010), prompt),
            Duration::from_millis(4000)
        );
        assert_eq!(
            unchanged_for(&mut observed, None, at(26_000), at(26_010), prompt),
            Duration::ZERO
        );
        assert_eq!(
            unchanged_for(&mut observed, Some("8"), at(27_000), at(27_010), prompt),
            Duration::ZERO,
            "a failed read forgets what was seen before it"
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        for r in [record(None, 1), record(Some(""), 1)] {
            assert_eq!(decide(&r, "me", Duration::ZERO, true), Step::Take);
            assert_eq!(decide(&r, "me", Duration::ZERO, false), Step::Follow);
        }
    }

    #[test]
    fn the_fence_opens_until_the_deadline_and_closes() {
        let fence = Fence::closed();
        assert!(!fence.permits_writes());
        fence.extend_to(Instant::now() + Duration::from_secs(60));
        assert!(fence.permits_writes());
        fence.extend_to(Instant::now());
        assert!(
            fence.permits_writes(),
            "an older deadline never shortens a newer one"
        );
        fence.close();
        assert!(!fence.permits_writes());
        fence.extend_to(Instant::now() - Duration::from_millis(1));
        assert!(
            !fence.permits_writes(),
            "a deadline already past allows nothing"
        );
        assert!(Fence::open().permits_writes());
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_writes_and_lets_reads_through() {
        use tower::{Layer, Service, ServiceExt};
        let fence = Fence::closed();
        let inner = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>("sent")
        });
        let mut svc = FenceLayer(fence.clone()).layer(inner);
        let request = |method: http::Method| {
            http::Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/x/configmaps")
                .body(())
                .unwrap()
        };
        for method in [
            http::Method::POST,
            http::Method::PATCH,
            http::Method::PUT,
            http::Method::DELETE,
        ] {
            let err = svc
                .ready()
                .await
                .unwrap()
                .call(request(method.clone()))
                .await;
            assert!(err.unwrap_err().is::<NotLeading>(), "{method}");
        }
        let read = svc
            .ready()
            .await
            .unwrap()
            .call(request(http::Method::GET))
            .await;
        assert_eq!(read.unwrap(), "sent");
        fence.extend_to(Instant::now() + Duration::from_secs(60));
        let write = svc
            .ready()
            .await
            .unwrap()
            .call(request(http::Method::PATCH))
            .await;
        assert_eq!(write.unwrap(), "sent");
    }

    #[tokio::test]
    async fn a_write_unanswered_when_the_lease_ends_is_abandoned() {
        use tower::{Layer, Service, ServiceExt};
        let fence = Fence::closed();
        fence.extend_to(Instant::now() + Duration::from_millis(200));
        let never = tower::service_fn(|_: http::Request<()>| async {
            std::future::pending::<Result<&str, std::convert::Infallible>>().await
        });
        let mut svc = FenceLayer(fence).layer(never);
        let request = http::Request::builder()
            .method(http::Method::PATCH)
            .uri("/api/v1/namespaces/x/configmaps/y")
            .body(())
            .unwrap();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            svc.ready().await.unwrap().call(request),
        )
        .await
        .expect("the write is abandoned at the lease's end, not awaited forever");
        assert!(answer.unwrap_err().is::<NotLeading>());
    }
}
