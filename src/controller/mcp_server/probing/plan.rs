//! The pure plan of one reconcile's read of its server: from what the reconcile knows (is a
//! probe with these inputs finished or running, may a restarted controller trust the status,
//! do the credentials resolve, is the server due), the one next step; and from a finished
//! read, when the server is next due. The reconcile gathers the facts, asks here, and acts.
//!
//! ```text
//!  probe finished with these inputs ─────────────────────────────► TakeResult
//!  probe running ────────────────────────────────────────────────► WaitForProbe
//!  never read since start, status trusted (resume::last_read) ───► Resume(last read)
//!  not due (schedule) ───────────────────────────────────────────► NotDue(wait)
//!  credentials do not resolve ───────────────────────────────────► CredentialsFailed
//!  otherwise ────────────────────────────────────────────────────► StartProbe
//! ```

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// Where the server's probe with this reconcile's inputs stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeState {
    Finished,
    Running,
    /// No probe, or one of other inputs.
    Nothing,
}

/// What the reconcile gathered before deciding.
#[derive(Clone, Debug)]
pub struct Known {
    pub probe: ProbeState,
    /// The schedule has this server (it was read, or resumed, since the controller started).
    pub remembered: bool,
    /// When the status says the server was last read with these inputs, if the status may be
    /// trusted ([`super::resume::last_read`]; only asked when the credentials resolve).
    pub last_read: Option<Timestamp>,
    pub credentials_resolved: bool,
    /// The schedule's wait until the server is due; None when it is due now.
    pub wait_before_probe: Option<Duration>,
}

/// The one next step of the read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A probe with these inputs finished: take its result and decide the status.
    TakeResult,
    /// One is running: its end triggers the next reconcile.
    WaitForProbe,
    /// A restarted controller's first look at a server whose status it trusts: schedule the
    /// next probe from the last read instead of reading at once.
    Resume(Timestamp),
    /// Not due yet: look again after this long.
    NotDue(Duration),
    /// Nothing to contact: the credentials decide the status, the server is not read.
    CredentialsFailed,
    /// Read the server now.
    StartProbe,
}

/// The next step, from what is known. Pure.
pub fn next_step(known: &Known) -> Step {
    match known.probe {
        ProbeState::Finished => return Step::TakeResult,
        ProbeState::Running => return Step::WaitForProbe,
        ProbeState::Nothing => {}
    }
    if !known.remembered
        && known.credentials_resolved
        && let Some(read) = known.last_read
    {
        return Step::Resume(read);
    }
    if let Some(wait) = known.wait_before_probe {
        return Step::NotDue(wait);
    }
    if !known.credentials_resolved {
        return Step::CredentialsFailed;
    }
    Step::StartProbe
}

/// How long after a successful read the server is due again: a modern server's `ttlMs` says
/// how long its list stays fresh, honoured within [30 s, `refresh_interval`]; without it, the
/// interval.
pub fn refresh_after(ttl_ms: Option<u64>, refresh_interval: Duration) -> Duration {
    ttl_ms
        .map(|ttl| Duration::from_millis(ttl).clamp(Duration::from_secs(30), refresh_interval))
        .unwrap_or(refresh_interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(probe: ProbeState) -> Known {
        Known {
            probe,
            remembered: true,
            last_read: None,
            credentials_resolved: true,
            wait_before_probe: None,
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn a_finished_or_running_probe_comes_first() {
        for (probe, step) in [
            (ProbeState::Finished, Step::TakeResult),
            (ProbeState::Running, Step::WaitForProbe),
        ] {
            let mut k = known(probe);
            k.remembered = false;
            k.last_read = Some(at(1));
            k.credentials_resolved = false;
            k.wait_before_probe = Some(Duration::from_secs(9));
            assert_eq!(next_step(&k), step);
        }
    }

    #[test]
    fn a_restarted_controller_resumes_only_servers_it_has_not_seen_with_good_credentials() {
        let mut k = known(ProbeState::Nothing);
        k.remembered = false;
        k.last_read = Some(at(5));
        assert_eq!(next_step(&k), Step::Resume(at(5)));
        k.remembered = true;
        assert_eq!(next_step(&k), Step::StartProbe, "seen since the start: due");
        k.remembered = false;
        k.credentials_resolved = false;
        assert_eq!(next_step(&k), Step::CredentialsFailed);
        k.credentials_resolved = true;
        k.last_read = None;
        assert_eq!(
            next_step(&k),
            Step::StartProbe,
            "status not trusted: read now"
        );
    }

    #[test]
    fn a_server_not_due_waits_even_with_broken_credentials() {
        let mut k = known(ProbeState::Nothing);
        k.wait_before_probe = Some(Duration::from_secs(42));
        k.credentials_resolved = false;
        assert_eq!(next_step(&k), Step::NotDue(Duration::from_secs(42)));
        k.wait_before_probe = None;
        assert_eq!(next_step(&k), Step::CredentialsFailed);
    }

    #[test]
    fn a_modern_servers_ttl_is_honoured_within_thirty_seconds_and_the_interval() {
        let interval = Duration::from_secs(300);
        assert_eq!(refresh_after(None, interval), interval);
        assert_eq!(
            refresh_after(Some(1_000), interval),
            Duration::from_secs(30)
        );
        assert_eq!(
            refresh_after(Some(60_000), interval),
            Duration::from_secs(60)
        );
        assert_eq!(refresh_after(Some(3_600_000), interval), interval);
    }
}
