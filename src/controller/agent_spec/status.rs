//! What the status of an AgentSpec should say after one reconcile:
//! pure, from the previous status and what the reconcile found, plus which transitions deserve
//! an event. The reconcilers write the result only when it differs from what is stored.
//!
//! AgentSpec conditions:
//!
//! - `Resolved`: True (reason `Resolved`) when nothing needs a person's attention; otherwise
//!   False with the most important finding's reason (NameCollision, ServerNotFound,
//!   ServerNotReady, DeniedByPolicy, PatternMatchesNothing, RequireApprovalNotOffered, in that
//!   order) and every finding's sentence in the message.
//! - `Ready`: True when the grants are published and nothing blocks the agent (a missing or
//!   unavailable required server, a name collision); otherwise False with the blocking reason.
//!   An optional server that is down, a pattern that matches nothing or a tool a policy denies
//!   leave the agent Ready and show in `Resolved`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::agent_spec::{AgentServerStatus, AgentSpecStatus};
use crate::api::conditions::{READY, RESOLVED, TRUE, condition, find, set_condition};
use crate::controller::shared::ready::ready_change;
use crate::grants::{Finding, Resolution, ServerOutcome};

/// At most this many findings are spelled out in one condition message.
const MESSAGE_FINDINGS: usize = 8;

/// What was published for the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The grants ConfigMap's name.
    pub config_map: String,
    /// The published document's digest.
    pub digest: String,
    /// Tools in the published document.
    pub tools: u32,
}

/// What changed, for events and log lines.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AgentTransitions {
    /// Ready went to False (from True or unknown): reason and message.
    pub became_unready: Option<(String, String)>,
    /// Ready went from False to True.
    pub became_ready: bool,
    /// The published grants changed: a sentence saying how.
    pub grants_changed: Option<String>,
}

/// The AgentSpec's status after this reconcile. `resolution` is the core's verdict (its
/// findings and readiness); `outcomes` the per-server counts of what was actually published
/// (they differ only on a collision, when the colliding tools are withheld).
pub fn next_agent_status(
    previous: Option<&AgentSpecStatus>,
    generation: Option<i64>,
    resolution: &Resolution,
    outcomes: &[ServerOutcome],
    published: &Published,
    now: Time,
) -> (AgentSpecStatus, AgentTransitions) {
    let mut status = previous.cloned().unwrap_or_default();
    let was_ready = find(&status.conditions, READY).map(|c| c.status == TRUE);
    let previous_digest = status.grants_digest.clone();
    let previous_tools = status.granted_tools;
    status.observed_generation = generation;
    status.servers = outcomes
        .iter()
        .map(|o| AgentServerStatus {
            name: o.name.clone(),
            granted_tools: o.granted_tools,
            withheld_by_server: o.withheld_by_server,
            withheld_by_policy: o.withheld_by_policy,
            withheld_by_spec: o.withheld_by_spec,
            awaiting_approval: o.awaiting_approval,
            available: o.available,
            deferred: o.deferred,
        })
        .collect();
    status.grants_config_map = Some(published.config_map.clone());
    status.grants_digest = Some(published.digest.clone());
    status.granted_tools = Some(published.tools);

    let servers = outcomes.len();
    let summary = format!(
        "{} granted from {servers} server{}, published in ConfigMap {}",
        tools(published.tools),
        if servers == 1 { "" } else { "s" },
        published.config_map
    );
    let resolved = match resolution.findings.first() {
        None => condition(
            RESOLVED,
            true,
            "Resolved",
            format!("Every server, policy and pattern resolved: {summary}."),
            generation,
            now.clone(),
        ),
        Some(first) => condition(
            RESOLVED,
            false,
            first.reason.as_str(),
            sentences(&resolution.findings),
            generation,
            now.clone(),
        ),
    };
    set_condition(&mut status.conditions, resolved);

    let blocking: Vec<Finding> = resolution.blocking().cloned().collect();
    let ready = match blocking.first() {
        None => {
            let notes = resolution.findings.len();
            let tail = if notes == 0 {
                String::new()
            } else {
                format!(
                    " {notes} note{} in the Resolved condition.",
                    if notes == 1 { "" } else { "s" }
                )
            };
            condition(
                READY,
                true,
                "Ready",
                format!("{}.{tail}", capitalise(&summary)),
                generation,
                now,
            )
        }
        Some(first) => condition(
            READY,
            false,
            first.reason.as_str(),
            format!("{} Meanwhile {summary}.", sentences(&blocking)),
            generation,
            now,
        ),
    };
    let ready_now = ready.status == TRUE;
    let (reason, message) = (ready.reason.clone(), ready.message.clone());
    set_condition(&mut status.conditions, ready);

    let mut transitions = AgentTransitions::default();
    let change = ready_change(was_ready, ready_now, &reason, &message);
    transitions.became_ready = change.came_back;
    transitions.became_unready = change.went_down;
    if previous_digest.as_deref() != Some(published.digest.as_str()) {
        transitions.grants_changed = Some(match previous_tools {
            Some(before) if previous_digest.is_some() => format!(
                "Grants changed: {} (was {before}), published in ConfigMap {}.",
                tools(published.tools),
                published.config_map
            ),
            _ => format!(
                "Grants published: {} in ConfigMap {}.",
                tools(published.tools),
                published.config_map
            ),
        });
    }
    (status, transitions)
}

fn tools(n: u32) -> String {
    format!("{n} tool{}", if n == 1 { "" } else { "s" })
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The findings' messages as sentences, at most [`MESSAGE_FINDINGS`] of them.
fn sentences(findings: &[Finding]) -> String {
    let mut out: Vec<String> = findings
        .iter()
        .take(MESSAGE_FINDINGS)
        .map(|f| {
            let m = capitalise(f.message.trim_end_matches('.'));
            format!("{m}.")
        })
        .collect();
    if findings.len() > MESSAGE_FINDINGS {
        out.push(format!("And {} more.", findings.len() - MESSAGE_FINDINGS));
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Reason;

    fn at(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    fn outcome(name: &str, granted: u32, available: bool) -> ServerOutcome {
        ServerOutcome {
            name: name.into(),
            prefix: name.into(),
            available,
            optional: false,
            deferred: false,
            granted_tools: granted,
            withheld_by_server: 1,
            withheld_by_policy: 2,
            withheld_by_spec: 3,
            awaiting_approval: 0,
            granted_schema_bytes: 10,
        }
    }

    fn finding(reason: Reason, message: &str, blocking: bool) -> Finding {
        Finding {
            reason,
            server: Some("gh".into()),
            message: message.into(),
            blocking,
        }
    }

    fn resolution(findings: Vec<Finding>) -> Resolution {
        let ready = !findings.iter().any(|f| f.blocking);
        Resolution {
            document: None,
            servers: vec![],
            collisions: vec![],
            findings,
            ready,
        }
    }

    fn published(digest: &str, tools: u32) -> Published {
        Published {
            config_map: "bot-mcp-grants".into(),
            digest: digest.into(),
            tools,
        }
    }

    fn cond<'s>(
        s: &'s AgentSpecStatus,
        t: &str,
    ) -> &'s k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        find(&s.conditions, t).unwrap()
    }

    #[test]
    fn a_clean_resolution_is_resolved_and_ready_with_counts_per_server() {
        let (s, t) = next_agent_status(
            None,
            Some(2),
            &resolution(vec![]),
            &[outcome("gh", 3, true), outcome("fs", 1, true)],
            &published("sha256:a", 4),
            at(1),
        );
        assert_eq!(cond(&s, RESOLVED).status, "True");
        assert_eq!(cond(&s, READY).reason, "Ready");
        assert_eq!(
            cond(&s, READY).message,
            "4 tools granted from 2 servers, published in ConfigMap bot-mcp-grants."
        );
        assert_eq!(cond(&s, READY).observed_generation, Some(2));
        assert_eq!(s.granted_tools, Some(4));
        assert_eq!(s.grants_digest.as_deref(), Some("sha256:a"));
        assert_eq!(s.grants_config_map.as_deref(), Some("bot-mcp-grants"));
        assert_eq!(
            s.servers[0],
            AgentServerStatus {
                name: "gh".into(),
                granted_tools: 3,
                withheld_by_server: 1,
                withheld_by_policy: 2,
                withheld_by_spec: 3,
                awaiting_approval: 0,
                available: true,
                deferred: false
            }
        );
        assert_eq!(
            t.grants_changed.as_deref(),
            Some("Grants published: 4 tools in ConfigMap bot-mcp-grants.")
        );
        assert!(!t.became_ready && t.became_unready.is_none());
    }

    #[test]
    fn non_blocking_findings_leave_the_agent_ready_but_not_resolved() {
        let (s, _) = next_agent_status(
            None,
            Some(1),
            &resolution(vec![
                finding(
                    Reason::PatternMatchesNothing,
                    "allow pattern nope_* matches no tool of McpServer gh",
                    false,
                ),
                finding(
                    Reason::DeniedByPolicy,
                    "tool x of McpServer gh is asked for by name, but McpTenantPolicy p does not permit it",
                    false,
                ),
            ]),
            &[outcome("gh", 1, true)],
            &published("sha256:a", 1),
            at(1),
        );
        let resolved = cond(&s, RESOLVED);
        assert_eq!(resolved.status, "False");
        assert_eq!(
            resolved.reason, "PatternMatchesNothing",
            "the first finding"
        );
        assert!(
            resolved
                .message
                .contains("Allow pattern nope_* matches no tool"),
            "{}",
            resolved.message
        );
        assert!(
            resolved.message.contains("McpTenantPolicy p"),
            "{}",
            resolved.message
        );
        let ready = cond(&s, READY);
        assert_eq!(ready.status, "True");
        assert!(
            ready
                .message
                .ends_with("2 notes in the Resolved condition."),
            "{}",
            ready.message
        );
    }

    #[test]
    fn blocking_findings_make_the_agent_not_ready_and_transitions_are_reported_once() {
        let ok = next_agent_status(
            None,
            Some(1),
            &resolution(vec![]),
            &[outcome("gh", 4, true)],
            &published("sha256:a", 4),
            at(1),
        )
        .0;
        let down = resolution(vec![finding(
            Reason::ServerNotReady,
            "McpServer gh is not ready (Unauthorized); the agent is not ready until it is, or until the McpServer is marked optional",
            true,
        )]);
        let (s, t) = next_agent_status(
            Some(&ok),
            Some(1),
            &down,
            &[outcome("gh", 0, false)],
            &published("sha256:b", 0),
            at(2),
        );
        let ready = cond(&s, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ServerNotReady")
        );
        assert!(
            ready
                .message
                .starts_with("McpServer gh is not ready (Unauthorized)"),
            "{}",
            ready.message
        );
        assert!(
            ready.message.ends_with(
                "Meanwhile 0 tools granted from 1 server, published in ConfigMap bot-mcp-grants."
            ),
            "{}",
            ready.message
        );
        assert_eq!(ready.last_transition_time, at(2));
        assert_eq!(t.became_unready.as_ref().unwrap().0, "ServerNotReady");
        assert_eq!(
            t.grants_changed.as_deref(),
            Some("Grants changed: 0 tools (was 4), published in ConfigMap bot-mcp-grants.")
        );

        // The same again: nothing to say, nothing changed but nothing to write either.
        let (again, t) = next_agent_status(
            Some(&s),
            Some(1),
            &down,
            &[outcome("gh", 0, false)],
            &published("sha256:b", 0),
            at(3),
        );
        assert_eq!(again, s);
        assert_eq!(t, AgentTransitions::default());

        let (back, t) = next_agent_status(
            Some(&s),
            Some(1),
            &resolution(vec![]),
            &[outcome("gh", 4, true)],
            &published("sha256:a", 4),
            at(4),
        );
        assert!(t.became_ready);
        assert_eq!(cond(&back, READY).last_transition_time, at(4));
    }

    #[test]
    fn long_finding_lists_are_cut() {
        let many: Vec<Finding> = (0..12)
            .map(|i| {
                finding(
                    Reason::PatternMatchesNothing,
                    &format!("pattern p{i:02} matches nothing"),
                    false,
                )
            })
            .collect();
        let (s, _) = next_agent_status(
            None,
            None,
            &resolution(many),
            &[],
            &published("d", 0),
            at(1),
        );
        let m = &cond(&s, RESOLVED).message;
        assert!(
            m.contains("Pattern p07 matches nothing.") && !m.contains("p08"),
            "{m}"
        );
        assert!(m.ends_with("And 4 more."), "{m}");
    }
}
