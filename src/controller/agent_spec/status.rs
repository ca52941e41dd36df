//! What the status of an AgentSpec should say after one reconcile:
//! pure, from the previous status and what the reconcile found, plus which transitions deserve
//! an event. The reconcilers write the result only when it differs from what is stored.
//!
//! AgentSpec conditions:
//!
//! - `Resolved`: True (reason `Resolved`) when nothing needs a person's attention; otherwise
//!   False with the most important finding's reason (NameCollision, ServerNotFound,
//!   ServerNotReady, DeniedByPolicy, PatternMatchesNothing, RequireApprovalNotOffered,
//!   AwaitingApproval, OverrideNotApplied, in that order) and every finding's sentence in the
//!   message.
//! - `Ready`: True when the grants are published and nothing blocks the agent (a missing or
//!   unavailable required server, a name collision); otherwise False with the blocking reason.
//!   An optional server that is down, a pattern that matches nothing or a tool a policy denies
//!   leave the agent Ready and show in `Resolved`.
//! - `PodsUpToDate`: True when every pod injected with the agent's sidecar mounts every Secret
//!   and ConfigMap key the grants reference; otherwise False (reason `PodsOutOfDate`) naming
//!   the pods, what each lacks, and that they must be restarted. It leaves `Ready` alone: the
//!   grants are published, and pods created from now on mount everything.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::publish::MAX_GRANTS_BYTES;
use crate::api::agent_spec::{AgentPodsStatus, AgentServerStatus, AgentSpecStatus};
use crate::api::conditions::{
    Condition, PODS_UP_TO_DATE, READY, RESOLVED, TRUE, condition, find, set_condition,
};
use crate::controller::shared::ready::ready_change;
use crate::grants::{Finding, Resolution, ServerOutcome};
use crate::inject::PodDrift;

/// At most this many findings are spelled out in one condition message.
const MESSAGE_FINDINGS: usize = 8;
/// At most this many out-of-date pods are named in one condition message.
const MESSAGE_PODS: usize = 8;

/// What was published for the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The grants ConfigMap's name.
    pub config_map: String,
    /// The published document's digest.
    pub digest: String,
    /// Tools in the published document.
    pub tools: u32,
    /// The resolved grants did not fit in a ConfigMap: their size in bytes. What was published
    /// instead grants no tools (fail closed).
    pub too_large: Option<usize>,
    /// The sequence the published document is signed with.
    pub sequence: Option<u64>,
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
    /// PodsUpToDate went to False (from True or unknown): its message.
    pub pods_out_of_date: Option<String>,
}

/// What the status says of one server: the counts of what was published.
fn server_status(o: &ServerOutcome) -> AgentServerStatus {
    AgentServerStatus {
        name: o.name.clone(),
        granted_tools: o.granted_tools,
        withheld_by_server: o.withheld_by_server,
        withheld_by_policy: o.withheld_by_policy,
        withheld_by_spec: o.withheld_by_spec,
        awaiting_approval: o.awaiting_approval,
        available: o.available,
        deferred: o.deferred,
    }
}

/// The AgentSpec's status after this reconcile. `resolution` is the core's verdict: its
/// findings, readiness and the per-server counts of what is published (a collision's tools
/// withheld).
pub fn next_agent_status(
    previous: Option<&AgentSpecStatus>,
    generation: Option<i64>,
    resolution: &Resolution,
    published: &Published,
    pods: &PodDrift,
    now: Time,
) -> (AgentSpecStatus, AgentTransitions) {
    let mut status = previous.cloned().unwrap_or_default();
    let was_ready = find(&status.conditions, READY).map(|c| c.status == TRUE);
    let pods_were_up_to_date = find(&status.conditions, PODS_UP_TO_DATE).map(|c| c.status == TRUE);
    let previous_digest = status.grants_digest.clone();
    let previous_tools = status.granted_tools;
    status.observed_generation = generation;
    let outcomes = &resolution.servers;
    status.servers = outcomes.iter().map(server_status).collect();
    status.grants_config_map = Some(published.config_map.clone());
    status.grants_digest = Some(published.digest.clone());
    status.grants_sequence = published.sequence;
    status.granted_tools = Some(published.tools);

    let summary = published_summary(outcomes.len(), published);
    set_condition(
        &mut status.conditions,
        resolved_condition(resolution, &summary, generation, now.clone()),
    );
    let ready = ready_condition(resolution, published, &summary, generation, now.clone());
    let ready_now = ready.status == TRUE;
    let (reason, message) = (ready.reason.clone(), ready.message.clone());
    set_condition(&mut status.conditions, ready);

    status.pods = Some(AgentPodsStatus {
        injected: pods.injected,
        out_of_date: pods.out_of_date.len() as u32,
    });
    let pods_condition = pods_condition(pods, generation, now);
    let pods_out_of_date = (pods_condition.status != TRUE && pods_were_up_to_date != Some(false))
        .then(|| pods_condition.message.clone());
    set_condition(&mut status.conditions, pods_condition);

    let mut transitions = AgentTransitions {
        pods_out_of_date,
        ..Default::default()
    };
    let change = ready_change(was_ready, ready_now, &reason, &message);
    transitions.became_ready = change.came_back;
    transitions.became_unready = change.went_down;
    transitions.grants_changed = grants_changed(previous_digest, previous_tools, published);
    (status, transitions)
}

/// "N tools granted from M servers, published in ConfigMap C": what both conditions tell.
fn published_summary(servers: usize, published: &Published) -> String {
    format!(
        "{} granted from {servers} server{}, published in ConfigMap {}",
        tools(published.tools),
        if servers == 1 { "" } else { "s" },
        published.config_map
    )
}

/// Resolved: true when every server, policy and pattern resolved; else the first finding's
/// reason, with every finding told.
fn resolved_condition(
    resolution: &Resolution,
    summary: &str,
    generation: Option<i64>,
    now: Time,
) -> Condition {
    match resolution.findings.first() {
        None => condition(
            RESOLVED,
            true,
            "Resolved",
            format!("Every server, policy and pattern resolved: {summary}."),
            generation,
            now,
        ),
        Some(first) => condition(
            RESOLVED,
            false,
            first.reason.as_str(),
            sentences(&resolution.findings),
            generation,
            now,
        ),
    }
}

/// Ready: false on grants too large to publish (they outrank everything else: the agent has
/// no tools at all), else on the first blocking finding; true otherwise, pointing at the notes.
fn ready_condition(
    resolution: &Resolution,
    published: &Published,
    summary: &str,
    generation: Option<i64>,
    now: Time,
) -> Condition {
    if let Some(bytes) = published.too_large {
        return condition(
            READY,
            false,
            "GrantsTooLarge",
            format!(
                "The resolved grants are {bytes} bytes, more than a ConfigMap holds \
                 ({MAX_GRANTS_BYTES} bytes for the document): ConfigMap {} grants no tools until \
                 they fit (fail closed). Grant fewer tools: narrower allow patterns, or the \
                 servers split across AgentSpecs.",
                published.config_map
            ),
            generation,
            now,
        );
    }
    let blocking: Vec<Finding> = resolution.blocking().cloned().collect();
    match blocking.first() {
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
                format!("{}.{tail}", capitalise(summary)),
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
    }
}

/// The Event's sentence when the published digest changed (a first publication says so).
fn grants_changed(
    previous_digest: Option<String>,
    previous_tools: Option<u32>,
    published: &Published,
) -> Option<String> {
    if previous_digest.as_deref() == Some(published.digest.as_str()) {
        return None;
    }
    Some(match previous_tools {
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
    })
}

/// PodsUpToDate: which injected pods lack a key the grants reference, and what to do.
fn pods_condition(
    pods: &PodDrift,
    generation: Option<i64>,
    now: Time,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let injected = pods.injected;
    let count = |n: u32| format!("{n} pod{}", if n == 1 { "" } else { "s" });
    if pods.out_of_date.is_empty() {
        let message = match injected {
            0 => "No pod runs this agent's sidecar.".to_string(),
            1 => "The pod running this agent's sidecar mounts every key the grants reference."
                .to_string(),
            n => format!(
                "All {} running this agent's sidecar mount every key the grants reference.",
                count(n)
            ),
        };
        return condition(PODS_UP_TO_DATE, true, "UpToDate", message, generation, now);
    }
    let stale = pods.out_of_date.len() as u32;
    let mut named: Vec<String> = pods
        .out_of_date
        .iter()
        .take(MESSAGE_PODS)
        .map(|p| {
            let missing: Vec<String> = p.missing.iter().map(|k| k.to_string()).collect();
            format!("pod {} lacks {}", p.pod, missing.join(", "))
        })
        .collect();
    if pods.out_of_date.len() > MESSAGE_PODS {
        let more = pods.out_of_date.len() - MESSAGE_PODS;
        named.push(format!(
            "and {more} more pod{}",
            if more == 1 { "" } else { "s" }
        ));
    }
    let message = format!(
        "{stale} of {} injected for this agent {} not mount keys the grants now reference \
         (a pod's volumes are fixed when it is created), so the sidecar cannot reach the servers \
         that need them: restart {} (delete {}, or roll out the workload that owns {}). {}.",
        count(injected),
        if stale == 1 { "does" } else { "do" },
        if stale == 1 { "it" } else { "them" },
        if stale == 1 { "the pod" } else { "the pods" },
        if stale == 1 { "it" } else { "them" },
        capitalise(&named.join("; ")),
    );
    condition(
        PODS_UP_TO_DATE,
        false,
        "PodsOutOfDate",
        message,
        generation,
        now,
    )
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
    use crate::grants::{Reason, ServerOutcome};

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

    fn resolution(findings: Vec<Finding>, servers: &[ServerOutcome]) -> Resolution {
        let ready = !findings.iter().any(|f| f.blocking);
        Resolution {
            document: crate::grants::GrantsDocument::new(vec![]),
            servers: servers.to_vec(),
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
            too_large: None,
            sequence: Some(7),
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
            &resolution(vec![], &[outcome("gh", 3, true), outcome("fs", 1, true)]),
            &published("sha256:a", 4),
            &PodDrift::default(),
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
    fn grants_too_large_to_publish_make_the_agent_not_ready_and_say_what_to_do() {
        let mut too_large = published("sha256:empty", 0);
        too_large.too_large = Some(1_400_000);
        let (s, t) = next_agent_status(
            None,
            Some(1),
            &resolution(vec![], &[outcome("gh", 3000, true)]),
            &too_large,
            &PodDrift::default(),
            at(1),
        );
        let ready = cond(&s, READY);
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "GrantsTooLarge");
        assert!(ready.message.contains("1400000 bytes"), "{}", ready.message);
        assert!(
            ready.message.contains("grants no tools"),
            "{}",
            ready.message
        );
        assert!(
            ready.message.contains("Grant fewer tools"),
            "{}",
            ready.message
        );
        assert_eq!(s.granted_tools, Some(0));
        assert_eq!(
            t.became_unready.as_ref().map(|(reason, _)| reason.as_str()),
            Some("GrantsTooLarge")
        );
    }

    #[test]
    fn non_blocking_findings_leave_the_agent_ready_but_not_resolved() {
        let (s, _) = next_agent_status(
            None,
            Some(1),
            &resolution(
                vec![
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
                ],
                &[outcome("gh", 1, true)],
            ),
            &published("sha256:a", 1),
            &PodDrift::default(),
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
            &resolution(vec![], &[outcome("gh", 4, true)]),
            &published("sha256:a", 4),
            &PodDrift::default(),
            at(1),
        )
        .0;
        let down = resolution(
            vec![finding(
                Reason::ServerNotReady,
                "McpServer gh is not ready (Unauthorized); the agent is not ready until it is, or until the McpServer is marked optional",
                true,
            )],
            &[outcome("gh", 0, false)],
        );
        let (s, t) = next_agent_status(
            Some(&ok),
            Some(1),
            &down,
            &published("sha256:b", 0),
            &PodDrift::default(),
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
            &published("sha256:b", 0),
            &PodDrift::default(),
            at(3),
        );
        assert_eq!(again, s);
        assert_eq!(t, AgentTransitions::default());

        let (back, t) = next_agent_status(
            Some(&s),
            Some(1),
            &resolution(vec![], &[outcome("gh", 4, true)]),
            &published("sha256:a", 4),
            &PodDrift::default(),
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
            &resolution(many, &[]),
            &published("d", 0),
            &PodDrift::default(),
            at(1),
        );
        let m = &cond(&s, RESOLVED).message;
        assert!(
            m.contains("Pattern p07 matches nothing.") && !m.contains("p08"),
            "{m}"
        );
        assert!(m.ends_with("And 4 more."), "{m}");
    }

    fn out_of_date(pod: &str, secret: &str) -> crate::inject::drift::OutOfDate {
        crate::inject::drift::OutOfDate {
            pod: pod.into(),
            missing: vec![crate::inject::drift::Key {
                kind: "Secret",
                name: secret.into(),
                key: "key".into(),
            }],
        }
    }

    fn with_pods(
        previous: Option<&AgentSpecStatus>,
        pods: &PodDrift,
        t: i64,
    ) -> (AgentSpecStatus, AgentTransitions) {
        next_agent_status(
            previous,
            Some(1),
            &resolution(vec![], &[outcome("gh", 4, true)]),
            &published("sha256:a", 4),
            pods,
            at(t),
        )
    }

    #[test]
    fn out_of_date_pods_are_counted_named_and_told_to_restart_without_touching_ready() {
        let (ok, t) = with_pods(
            None,
            &PodDrift {
                injected: 2,
                out_of_date: vec![],
            },
            1,
        );
        assert_eq!(
            ok.pods,
            Some(AgentPodsStatus {
                injected: 2,
                out_of_date: 0
            })
        );
        let up = cond(&ok, PODS_UP_TO_DATE);
        assert_eq!(
            (up.status.as_str(), up.reason.as_str()),
            ("True", "UpToDate")
        );
        assert_eq!(
            up.message,
            "All 2 pods running this agent's sidecar mount every key the grants reference."
        );
        assert!(t.pods_out_of_date.is_none());

        let stale = PodDrift {
            injected: 2,
            out_of_date: vec![out_of_date("bot-7d9", "files-api-key")],
        };
        let (s, t) = with_pods(Some(&ok), &stale, 2);
        assert_eq!(s.pods.as_ref().unwrap().out_of_date, 1);
        let c = cond(&s, PODS_UP_TO_DATE);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "PodsOutOfDate")
        );
        assert_eq!(
            c.message,
            "1 of 2 pods injected for this agent does not mount keys the grants now reference \
             (a pod's volumes are fixed when it is created), so the sidecar cannot reach the \
             servers that need them: restart it (delete the pod, or roll out the workload that \
             owns it). Pod bot-7d9 lacks Secret files-api-key key key."
        );
        assert_eq!(c.last_transition_time, at(2));
        assert_eq!(t.pods_out_of_date.as_deref(), Some(c.message.as_str()));
        assert_eq!(
            cond(&s, READY).status,
            "True",
            "the grants are still published"
        );

        // Told once; the pod recreated, it is up to date again.
        let (again, t) = with_pods(Some(&s), &stale, 3);
        assert_eq!(again, s);
        assert!(t.pods_out_of_date.is_none());
        let (back, _) = with_pods(
            Some(&again),
            &PodDrift {
                injected: 2,
                out_of_date: vec![],
            },
            4,
        );
        assert_eq!(back.pods.as_ref().unwrap().out_of_date, 0);
        assert_eq!(cond(&back, PODS_UP_TO_DATE).status, "True");
    }

    #[test]
    fn many_out_of_date_pods_are_cut_and_no_pods_is_up_to_date() {
        let many = PodDrift {
            injected: 12,
            out_of_date: (0..10)
                .map(|i| out_of_date(&format!("bot-{i:02}"), "s"))
                .collect(),
        };
        let (s, _) = with_pods(None, &many, 1);
        let m = &cond(&s, PODS_UP_TO_DATE).message;
        assert!(
            m.starts_with("10 of 12 pods injected for this agent do not mount"),
            "{m}"
        );
        assert!(m.contains("restart them (delete the pods"), "{m}");
        assert!(
            m.contains("pod bot-07 lacks Secret s key key") && !m.contains("bot-08"),
            "{m}"
        );
        assert!(m.ends_with("; and 2 more pods."), "{m}");

        let (none, _) = with_pods(None, &PodDrift::default(), 1);
        let c = cond(&none, PODS_UP_TO_DATE);
        assert_eq!(
            (c.status.as_str(), c.message.as_str()),
            ("True", "No pod runs this agent's sidecar.")
        );
        assert_eq!(
            none.pods,
            Some(AgentPodsStatus {
                injected: 0,
                out_of_date: 0
            })
        );
    }
}
