//! The McpServer reconciler's memory of when each server was last probed and with which inputs,
//! so a status write (which triggers a watch event) does not cause another probe, failures
//! back off, and a failing server's next probe waits in the retry lane ([`Lane`], which the
//! probes' admission reads).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::controller::shared::server_key::ServerKey;

/// Which queue a probe waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A server never read with these inputs, a due refresh or a pushed change.
    FirstRead,
    /// The server's last probe with the same inputs failed.
    Retry,
}

/// When a server was last probed and with which inputs.
#[derive(Debug, Clone)]
struct ProbeMemory {
    inputs: String,
    next_due: Instant,
    failures: u32,
    /// When a pushed change asked for a probe (cleared by a probe that started after it).
    forced_at: Option<Instant>,
}

/// When each server is next due for a probe.
pub struct ProbeSchedule {
    memory: Mutex<HashMap<ServerKey, ProbeMemory>>,
    max_failure_backoff: Duration,
}

impl ProbeSchedule {
    pub fn new(max_failure_backoff: Duration) -> Self {
        ProbeSchedule {
            memory: Mutex::new(HashMap::new()),
            max_failure_backoff,
        }
    }

    /// `None` when the server must be probed now (new inputs, due, or forced); otherwise how
    /// long until it is due.
    pub fn wait_before_probe(&self, key: &ServerKey, inputs: &str) -> Option<Duration> {
        let memory = self.memory.lock().expect("memory lock");
        let m = memory.get(key)?;
        if m.forced_at.is_some() || m.inputs != inputs {
            return None;
        }
        let now = Instant::now();
        (m.next_due > now).then(|| m.next_due - now)
    }

    /// The lane of the server's next probe with `inputs`: a retry when its last probe with the
    /// same inputs failed.
    pub fn lane(&self, key: &ServerKey, inputs: &str) -> Lane {
        match self.memory.lock().expect("memory lock").get(key) {
            Some(m) if m.inputs == inputs && m.failures > 0 => Lane::Retry,
            _ => Lane::FirstRead,
        }
    }

    /// Records a probe that started at `started`; returns the wait until the next one (zero
    /// when a change was pushed after it started: what it read may predate the change).
    pub fn probed(
        &self,
        key: &ServerKey,
        inputs: String,
        succeeded: bool,
        refresh: Duration,
        started: Instant,
    ) -> Duration {
        let mut memory = self.memory.lock().expect("memory lock");
        let forced_at = memory
            .get(key)
            .and_then(|m| m.forced_at)
            .filter(|at| *at > started);
        let failures = match (succeeded, memory.get(key)) {
            (true, _) => 0,
            (false, Some(m)) if m.inputs == inputs => m.failures + 1,
            (false, _) => 1,
        };
        let wait = if succeeded {
            with_jitter(refresh, key)
        } else {
            // 5s, 10s, 20s … up to the cap, never past the refresh interval.
            let backoff = Duration::from_secs(5u64.saturating_mul(1 << (failures - 1).min(10)));
            backoff.min(self.max_failure_backoff).min(refresh)
        };
        memory.insert(
            key.clone(),
            ProbeMemory {
                inputs,
                next_due: Instant::now() + wait,
                failures,
                forced_at,
            },
        );
        if forced_at.is_some() {
            Duration::ZERO
        } else {
            wait
        }
    }

    /// Whether the server has a schedule (a restarted controller remembers none).
    pub fn remembers(&self, key: &ServerKey) -> bool {
        self.memory.lock().expect("memory lock").contains_key(key)
    }

    /// A restarted controller's first memory of a server its status shows read: the next probe
    /// with `inputs` is due after `wait`.
    pub fn resume(&self, key: &ServerKey, inputs: String, wait: Duration) {
        self.memory
            .lock()
            .expect("memory lock")
            .entry(key.clone())
            .or_insert(ProbeMemory {
                inputs,
                next_due: Instant::now() + wait,
                failures: 0,
                forced_at: None,
            });
    }

    /// Makes the next reconcile of the server probe, whatever its inputs (a pushed change).
    pub fn force_probe(&self, key: &ServerKey) {
        if let Some(m) = self.memory.lock().expect("memory lock").get_mut(key) {
            m.forced_at = Some(Instant::now());
        }
    }

    /// Every server with a schedule.
    pub fn keys(&self) -> Vec<ServerKey> {
        self.memory
            .lock()
            .expect("memory lock")
            .keys()
            .cloned()
            .collect()
    }

    pub fn forget(&self, key: &ServerKey) {
        self.memory.lock().expect("memory lock").remove(key);
    }
}

/// The refresh interval less up to 10%, spread by the server's name, so servers applied together
/// are not all probed in the same second.
fn with_jitter(interval: Duration, key: &ServerKey) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        .hash(&mut h);
    let tenth = interval.as_millis() as u64 / 10;
    let cut = if tenth == 0 { 0 } else { h.finish() % tenth };
    interval - Duration::from_millis(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_happen_on_new_inputs_when_due_or_when_forced() {
        let s = ProbeSchedule::new(Duration::from_secs(60));
        let key = ("ns".to_string(), "s".to_string());
        assert_eq!(s.wait_before_probe(&key, "a"), None, "never probed");
        s.probed(
            &key,
            "a".into(),
            true,
            Duration::from_secs(300),
            Instant::now(),
        );
        assert!(s.wait_before_probe(&key, "a").is_some(), "not yet due");
        assert_eq!(s.wait_before_probe(&key, "b"), None, "inputs changed");
        s.force_probe(&key);
        assert_eq!(s.wait_before_probe(&key, "a"), None, "forced");
    }

    #[test]
    fn failures_back_off_up_to_the_cap_and_the_interval() {
        let s = ProbeSchedule::new(Duration::from_secs(60));
        let key = ("ns".to_string(), "s".to_string());
        let refresh = Duration::from_secs(300);
        let waits: Vec<u64> = (0..6)
            .map(|_| {
                s.probed(&key, "a".into(), false, refresh, Instant::now())
                    .as_secs()
            })
            .collect();
        assert_eq!(waits, vec![5, 10, 20, 40, 60, 60]);
        assert_eq!(
            s.probed(
                &key,
                "a".into(),
                false,
                Duration::from_secs(30),
                Instant::now()
            )
            .as_secs(),
            30
        );
        assert!(
            s.probed(&key, "a".into(), true, refresh, Instant::now()) > Duration::from_secs(260)
        );
    }

    #[test]
    fn a_resumed_server_is_due_after_its_wait_unless_its_inputs_changed() {
        let s = ProbeSchedule::new(Duration::from_secs(60));
        let key = ("ns".to_string(), "s".to_string());
        assert!(!s.remembers(&key));
        s.resume(&key, "a".into(), Duration::from_secs(120));
        assert!(s.remembers(&key));
        let wait = s.wait_before_probe(&key, "a").expect("not due yet");
        assert!(wait > Duration::from_secs(110) && wait <= Duration::from_secs(120));
        assert_eq!(
            s.wait_before_probe(&key, "b"),
            None,
            "new inputs: probe now"
        );
        assert_eq!(s.lane(&key, "a"), Lane::FirstRead);
    }

    #[test]
    fn a_failing_server_retries_in_the_retry_lane_until_its_inputs_change_or_it_reads() {
        let s = ProbeSchedule::new(Duration::from_secs(60));
        let key = ("ns".to_string(), "s".to_string());
        let refresh = Duration::from_secs(300);
        assert_eq!(s.lane(&key, "a"), Lane::FirstRead, "never read");
        s.probed(&key, "a".into(), false, refresh, Instant::now());
        assert_eq!(s.lane(&key, "a"), Lane::Retry);
        assert_eq!(
            s.lane(&key, "b"),
            Lane::FirstRead,
            "new inputs are a first read"
        );
        s.probed(&key, "a".into(), true, refresh, Instant::now());
        assert_eq!(s.lane(&key, "a"), Lane::FirstRead, "a refresh after a read");
    }

    #[test]
    fn a_change_pushed_during_a_probe_calls_for_another_one() {
        let s = ProbeSchedule::new(Duration::from_secs(60));
        let key = ("ns".to_string(), "s".to_string());
        let refresh = Duration::from_secs(300);
        s.probed(&key, "a".into(), true, refresh, Instant::now());
        let started = Instant::now() - Duration::from_millis(5);
        s.force_probe(&key); // pushed while the probe that started above ran
        assert_eq!(
            s.probed(&key, "a".into(), true, refresh, started),
            Duration::ZERO
        );
        assert_eq!(s.wait_before_probe(&key, "a"), None, "still forced");
        let after = Instant::now() + Duration::from_millis(5);
        assert!(s.probed(&key, "a".into(), true, refresh, after) > Duration::ZERO);
        assert!(
            s.wait_before_probe(&key, "a").is_some(),
            "the next probe saw the change"
        );
    }

    #[test]
    fn jitter_stays_within_a_tenth() {
        let key = ("ns".to_string(), "s".to_string());
        for _ in 0..100 {
            let d = with_jitter(Duration::from_secs(300), &key);
            assert!(d <= Duration::from_secs(300) && d >= Duration::from_secs(270));
        }
    }
}
