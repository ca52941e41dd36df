//! Whether one reconcile moved an object's Ready condition: the transitions that deserve an
//! event and a log line. An object seen for the first time that is not ready counts as going
//! down (someone should hear why); one that starts ready is no news.

/// How the Ready condition moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadyChange {
    /// It went (or started) not ready: (reason, message).
    pub went_down: Option<(String, String)>,
    /// It was not ready and is ready again.
    pub came_back: bool,
}

/// The move from `was_ready` (None: no Ready condition yet) to `ready_now`.
pub fn ready_change(
    was_ready: Option<bool>,
    ready_now: bool,
    reason: &str,
    message: &str,
) -> ReadyChange {
    match (was_ready, ready_now) {
        (Some(false), true) => ReadyChange {
            went_down: None,
            came_back: true,
        },
        (Some(true) | None, false) => ReadyChange {
            went_down: Some((reason.to_string(), message.to_string())),
            came_back: false,
        },
        _ => ReadyChange::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_going_down_and_coming_back_are_news() {
        assert!(ready_change(Some(false), true, "Ready", "ok").came_back);
        assert_eq!(
            ready_change(None, false, "Unreachable", "down").went_down,
            Some(("Unreachable".into(), "down".into()))
        );
        assert!(
            ready_change(Some(true), false, "X", "y")
                .went_down
                .is_some()
        );
        assert_eq!(
            ready_change(None, true, "Ready", "ok"),
            ReadyChange::default()
        );
        assert_eq!(
            ready_change(Some(true), true, "Ready", "ok"),
            ReadyChange::default()
        );
        assert_eq!(
            ready_change(Some(false), false, "X", "y"),
            ReadyChange::default()
        );
    }
}
