//! The McpServer reconciler's memory of when each server was last probed and with which inputs,
//! so a status write (which triggers a watch event) does not cause another probe, and failures
//! back off.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// (namespace, name)
pub type ServerKey = (String, String);

/// When a server was last probed and with which inputs.
#[derive(Debug, Clone)]
struct ProbeMemory {
    inputs: String,
    next_due: Instant,
    failures: u32,
    forced: bool,
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
        if m.forced || m.inputs != inputs {
            return None;
        }
        let now = Instant::now();
        (m.next_due > now).then(|| m.next_due - now)
    }

    /// Records a probe; returns the wait until the next one.
    pub fn probed(
        &self,
        key: &ServerKey,
        inputs: String,
        succeeded: bool,
        refresh: Duration,
    ) -> Duration {
        let mut memory = self.memory.lock().expect("memory lock");
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
                forced: false,
            },
        );
        wait
    }

    /// Makes the next reconcile of the server probe, whatever its inputs (a pushed change).
    pub fn force_probe(&self, key: &ServerKey) {
        if let Some(m) = self.memory.lock().expect("memory lock").get_mut(key) {
            m.forced = true;
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
        s.probed(&key, "a".into(), true, Duration::from_secs(300));
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
            .map(|_| s.probed(&key, "a".into(), false, refresh).as_secs())
            .collect();
        assert_eq!(waits, vec![5, 10, 20, 40, 60, 60]);
        assert_eq!(
            s.probed(&key, "a".into(), false, Duration::from_secs(30))
                .as_secs(),
            30
        );
        assert!(s.probed(&key, "a".into(), true, refresh) > Duration::from_secs(260));
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
