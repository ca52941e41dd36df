//! What the status of an McpTenantPolicy should say after one reconcile: pure, from the previous
//! status, how many namespaces the policy selects and what is wrong with its selectors. The
//! reconciler writes the result only when it differs from what is stored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::conditions::{READY, condition, set_condition};
use crate::api::tenant_policy::McpTenantPolicyStatus;

/// The McpTenantPolicy's status: how many namespaces it selects, and Ready, False with reason
/// InvalidSelector when a selector cannot be evaluated (`problems` say which and what follows).
pub fn next_policy_status(
    previous: Option<&McpTenantPolicyStatus>,
    generation: Option<i64>,
    selected: u32,
    problems: &[String],
    now: Time,
) -> McpTenantPolicyStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    status.selected_namespaces = Some(selected);
    let namespaces = format!(
        "{selected} namespace{}",
        if selected == 1 { "" } else { "s" }
    );
    let ready = if problems.is_empty() {
        condition(
            READY,
            true,
            "Ready",
            format!("The policy is in force in {namespaces}."),
            generation,
            now,
        )
    } else {
        condition(
            READY,
            false,
            "InvalidSelector",
            format!(
                "{} The policy is in force in {namespaces}.",
                problems.join(" ")
            ),
            generation,
            now,
        )
    };
    set_condition(&mut status.conditions, ready);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::find;

    fn at(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn policy_status_counts_namespaces_and_reports_invalid_selectors() {
        let s = next_policy_status(None, Some(1), 3, &[], at(1));
        assert_eq!(s.selected_namespaces, Some(3));
        let ready = find(&s.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.message.as_str()),
            ("True", "The policy is in force in 3 namespaces.")
        );
        assert_eq!(
            next_policy_status(Some(&s), Some(1), 3, &[], at(5)),
            s,
            "unchanged"
        );

        let bad = next_policy_status(
            Some(&s),
            Some(2),
            1,
            &["namespaceSelector: bad.".into()],
            at(6),
        );
        let ready = find(&bad.conditions, READY).unwrap();
        assert_eq!(ready.reason, "InvalidSelector");
        assert_eq!(
            ready.message,
            "namespaceSelector: bad. The policy is in force in 1 namespace."
        );
        assert_eq!(bad.observed_generation, Some(2));
    }
}
