//! Status conditions in the KEP-1623 shape (`type`, `status` True/False/Unknown,
//! `observedGeneration`, `lastTransitionTime`, `reason`, `message`): the apimachinery
//! [`Condition`] type, the condition types each CRD reports, and [`set_condition`], which keeps
//! `lastTransitionTime` honest. Pure: the controller builds conditions with these and writes them.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{Schema, SchemaGenerator, json_schema};

/// `status` of a condition that holds.
pub const TRUE: &str = "True";
/// `status` of a condition that does not hold.
pub const FALSE: &str = "False";
/// `status` of a condition not yet known.
pub const UNKNOWN: &str = "Unknown";

/// McpServer: the credentials the spec refers to were read from their Secrets.
pub const CREDENTIALS_RESOLVED: &str = "CredentialsResolved";
/// McpServer: the server answered the protocol handshake (or discovery).
pub const REACHABLE: &str = "Reachable";
/// McpServer: the status catalogue is the server's current, complete tool list.
pub const CATALOG_SYNCED: &str = "CatalogSynced";
/// McpServer under pinning: no tool waits for a person's approval.
pub const TOOLS_APPROVED: &str = "ToolsApproved";
/// McpServer, present only while it holds: the spec's credentials go over plain `http://` to
/// an address outside the cluster and this machine, readable on the way (a warning; Ready is
/// left as it is).
pub const CREDENTIALS_OVER_PLAIN_HTTP: &str = "CredentialsOverPlainHttp";
/// Every kind: the object is fully usable.
pub const READY: &str = "Ready";
/// AgentSpec: every referenced server, policy and pattern resolved to a grant set without
/// conflict.
pub const RESOLVED: &str = "Resolved";
/// AgentSpec: every pod injected with its sidecar mounts every Secret and ConfigMap key its
/// grants reference.
pub const PODS_UP_TO_DATE: &str = "PodsUpToDate";

/// The schema of a `conditions` list: the apimachinery condition, one entry per `type`
/// (a list map, so server-side apply merges conditions by type).
pub(crate) fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let condition = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": condition,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Puts `new` into `conditions`, replacing the condition of the same type. The
/// `lastTransitionTime` of the existing condition is kept when `status` did not change, so the
/// time says when the condition last flipped, not when it was last written. Returns true when
/// anything other than that timestamp changed (the caller then has something to write).
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            let changed = *old != new;
            *old = new;
            changed
        }
    }
}

/// Finds the condition of one type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A condition with the given fields; `observedGeneration` is the generation it describes.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { TRUE } else { FALSE }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conditions = vec![];
        assert!(set_condition(
            &mut conditions,
            condition(READY, false, "Timeout", "no answer", Some(1), at(10))
        ));
        // Same status, new message: content changed, time kept.
        assert!(set_condition(
            &mut conditions,
            condition(READY, false, "Timeout", "still no answer", Some(1), at(20))
        ));
        assert_eq!(conditions[0].last_transition_time, at(10));
        // Identical apart from the time: nothing to write.
        assert!(!set_condition(
            &mut conditions,
            condition(READY, false, "Timeout", "still no answer", Some(1), at(30))
        ));
        // Flip: time moves.
        assert!(set_condition(
            &mut conditions,
            condition(READY, true, "Synced", "ok", Some(1), at(40))
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            find(&conditions, READY).unwrap().last_transition_time,
            at(40)
        );
    }
}
