//! Pod validation, the pure part of `/validate/pods`: what a labelled pod may not do because it
//! would get around its MCP sidecar. The validating webhook runs after every mutation, so it
//! judges the pod as it will be stored; the injection itself (`decide`) refuses a pod that
//! brings its own sidecar with the same comparison ([`sidecar_difference`]).
//!
//! ```text
//!  CREATE  (the final pod)                      UPDATE and pods/ephemeralcontainers
//!  ─────────────────────────────────────        ──────────────────────────────────────────
//!  hostNetwork / hostPID /                      the label mcp-operator.dev/agent: as it was
//!    shareProcessNamespace: refused             (not added, changed or removed)
//!  initContainers mcp-sidecar ══ what the       the mcp-sidecar image: as it was
//!    injection builds now (expected_sidecar)    a new ephemeral container: no sidecar volume,
//!  no other container mounts SIDECAR_VOLUMES      not targeting the mcp-sidecar container
//! ```
//!
//! UPDATE judges only what changed: a pod admitted before this webhook existed keeps being
//! updatable (finalizers, annotations) even if it would be refused today.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod, VolumeMount};
use serde_json::Value;

use super::{
    AGENT_LABEL, CREDENTIALS_VOLUME, GRANTS_VOLUME, GrantsTrust, MIN_SEQUENCE_ARG, References,
    Refusal, SIDECAR_CONTAINER, STATE_VOLUME, SidecarSettings,
};

/// Every volume only the sidecar may mount: the grants, the credentials, and the state in
/// which it keeps the newest grants it accepted (an emptyDir: another container writing there
/// could make it accept a replayed document).
pub const SIDECAR_VOLUMES: [&str; 3] = [GRANTS_VOLUME, CREDENTIALS_VOLUME, STATE_VOLUME];

/// Where the ServiceAccount admission plugin mounts the pod's token in every container,
/// including an injected one when it runs again after the injection.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Fields of a container the apiserver's defaulting fills in after the injection; they do not
/// change what the sidecar runs or sees.
const FILLED_IN_LATER: [&str; 3] = [
    "terminationMessagePath",
    "terminationMessagePolicy",
    "resizePolicy",
];

/// The sidecar the injection would add now, for the same inputs as `decide`.
pub fn expected_sidecar(
    agent: &str,
    refs: &References,
    trust: &GrantsTrust,
    settings: &SidecarSettings,
) -> Container {
    super::sidecar_container(agent, refs, trust, settings)
}

/// The first field (a JSON name) in which a pod's `mcp-sidecar` container differs from the one
/// the operator injects, or `None` when it is the operator's. Exact, except where admission
/// after the injection adds to it harmlessly: defaulted fields ([`FILLED_IN_LATER`], probe
/// defaults), resources a LimitRange adds, and the ServiceAccount token mounted read-only.
/// Anything that changes what runs (image, command, args, env, lifecycle hooks, security
/// context) or what it reads (another mount) is a difference.
pub fn sidecar_difference(actual: &Container, expected: &Container) -> Option<String> {
    let object = |c: &Container| match serde_json::to_value(c).expect("a container serialises") {
        Value::Object(map) => map,
        _ => unreachable!("a container serialises to an object"),
    };
    let (actual, expected) = (object(actual), object(expected));
    for (field, wanted) in &expected {
        let found = actual.get(field);
        let same = match field.as_str() {
            "startupProbe" | "readinessProbe" | "livenessProbe" | "resources" => {
                found.is_some_and(|f| covers(f, wanted))
            }
            "volumeMounts" => found.is_some_and(|f| same_mounts(f, wanted)),
            "args" => found.is_some_and(|f| same_args(f, wanted) != Args::Different),
            _ => found == Some(wanted),
        };
        if !same {
            return Some(field.clone());
        }
    }
    actual
        .keys()
        .find(|f| !expected.contains_key(*f) && !FILLED_IN_LATER.contains(&f.as_str()))
        .cloned()
}

/// How a sidecar's args compare with the injection's.
#[derive(Debug, PartialEq)]
enum Args {
    Same,
    /// Alike but for `--grants-min-sequence`, which is absent or lower than the injection's
    /// now: the AgentSpec's grants were published (again) since it was set, or it was lowered
    /// by hand. The validations admit it (a pod created with its AgentSpec races the first
    /// publication); the injection, which every labelled pod passes first, raises it
    /// ([`floor_behind`]).
    FloorBehind,
    Different,
}

/// Whether a sidecar that [`sidecar_difference`] finds alike carries a lower (or no)
/// `--grants-min-sequence` than the injection would set now.
pub fn floor_behind(actual: &Container, expected: &Container) -> bool {
    let args = |c: &Container| serde_json::to_value(&c.args).unwrap_or(Value::Null);
    same_args(&args(actual), &args(expected)) == Args::FloorBehind
}

/// The args, alike but for `--grants-min-sequence`: higher than the injection's or equal is
/// [`Args::Same`] (a higher floor only ever refuses more), lower or absent
/// [`Args::FloorBehind`].
fn same_args(found: &Value, wanted: &Value) -> Args {
    let parse = |v: &Value| serde_json::from_value::<Vec<String>>(v.clone()).ok();
    let (Some(found), Some(wanted)) = (parse(found), parse(wanted)) else {
        return Args::Different;
    };
    fn split(args: &[String]) -> (Option<Option<u64>>, Vec<&String>) {
        let floor = args
            .iter()
            .find_map(|a| a.strip_prefix(MIN_SEQUENCE_ARG))
            .map(|n| n.parse::<u64>().ok());
        let rest = args
            .iter()
            .filter(|a| !a.starts_with(MIN_SEQUENCE_ARG))
            .collect();
        (floor, rest)
    }
    let ((found_floor, found_rest), (wanted_floor, wanted_rest)) = (split(&found), split(&wanted));
    if found_rest != wanted_rest {
        return Args::Different;
    }
    match (found_floor, wanted_floor) {
        (None, None) => Args::Same,
        (Some(Some(f)), Some(Some(w))) if f >= w => Args::Same,
        (Some(Some(_)) | None, Some(Some(_))) => Args::FloorBehind,
        (Some(Some(_)), None) => Args::Same,
        _ => Args::Different,
    }
}

/// Whether `found` holds everything `wanted` does (objects may have more keys; arrays the
/// same length, element by element).
fn covers(found: &Value, wanted: &Value) -> bool {
    match (found, wanted) {
        (Value::Object(f), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| f.get(k).is_some_and(|fv| covers(fv, wv))),
        (Value::Array(f), Value::Array(w)) => {
            f.len() == w.len() && f.iter().zip(w).all(|(fv, wv)| covers(fv, wv))
        }
        _ => found == wanted,
    }
}

/// Every mount the operator set, as set; besides them only the ServiceAccount token, read-only
/// (a mount of anything else could put other files where the sidecar reads its grants).
fn same_mounts(found: &Value, wanted: &Value) -> bool {
    let parse = |v: &Value| serde_json::from_value::<Vec<VolumeMount>>(v.clone()).ok();
    let (Some(found), Some(wanted)) = (parse(found), parse(wanted)) else {
        return false;
    };
    wanted.iter().all(|w| found.contains(w))
        && found.iter().filter(|f| !wanted.contains(f)).all(|f| {
            f.mount_path.trim_end_matches('/') == SERVICE_ACCOUNT_DIR && f.read_only == Some(true)
        })
}

/// A labelled pod being created, as it will be stored: refused if it would get around its
/// sidecar. `expected` is [`expected_sidecar`] for the AgentSpec its label names.
pub fn on_create(pod: &Pod, expected: &Container) -> Result<(), Refusal> {
    let spec = pod.spec.clone().unwrap_or_default();
    refuse_host_namespaces(pod)?;
    refuse_sidecar_mounts(pod, &BTreeSet::new())?;
    let sidecar = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == SIDECAR_CONTAINER)
        .ok_or(Refusal::MissingSidecar)?;
    match sidecar_difference(sidecar, expected) {
        None => Ok(()),
        Some(field) => Err(Refusal::OwnSidecar { field }),
    }
}

/// Refuses a pod that shares the node's network (the sidecar's 127.0.0.1 listener would be the
/// node's) or processes between containers (another container could read the sidecar's files
/// through /proc). The injection refuses these too, before it adds anything: with hostNetwork
/// the apiserver would give the sidecar's port a hostPort, and the pod would be told its
/// sidecar is not the operator's.
pub fn refuse_host_namespaces(pod: &Pod) -> Result<(), Refusal> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    if spec.host_network == Some(true) {
        return Err(Refusal::HostNetwork);
    }
    for (field, set) in [
        ("hostPID", spec.host_pid),
        ("shareProcessNamespace", spec.share_process_namespace),
    ] {
        if set == Some(true) {
            return Err(Refusal::SharedProcesses { field });
        }
    }
    Ok(())
}

/// A change to a pod that is or was labelled (the apiserver sends it if either the old or the
/// new pod matches the webhook's objectSelector), including a new ephemeral container.
pub fn on_update(old: &Pod, new: &Pod) -> Result<(), Refusal> {
    let label = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(AGENT_LABEL))
            .cloned()
    };
    let (was, now) = (label(old), label(new));
    if was != now {
        return Err(Refusal::LabelChanged { was, now });
    }
    let image = |p: &Pod| {
        p.spec
            .as_ref()?
            .init_containers
            .as_ref()?
            .iter()
            .find(|c| c.name == SIDECAR_CONTAINER)
            .map(|c| c.image.clone().unwrap_or_default())
    };
    if let (Some(was), Some(now)) = (image(old), image(new))
        && was != now
    {
        return Err(Refusal::SidecarImageChanged { was, now });
    }
    // Ephemeral containers are only ever added: the ones the pod had are judged by the
    // update that added them.
    let existing: BTreeSet<String> = old
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    let only_new = |name: &str| !existing.contains(name);
    for c in new
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| only_new(&c.name))
    {
        if c.target_container_name.as_deref() == Some(SIDECAR_CONTAINER) {
            return Err(Refusal::DebugsSidecar {
                container: c.name.clone(),
            });
        }
    }
    refuse_sidecar_mounts(new, &existing)
}

/// Refuses the first container other than the sidecar that mounts one of its volumes, skipping
/// the ephemeral containers named in `old_ephemeral`.
fn refuse_sidecar_mounts(pod: &Pod, old_ephemeral: &BTreeSet<String>) -> Result<(), Refusal> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let mounted = |kind: &'static str, name: &str, mounts: Option<&Vec<VolumeMount>>| {
        mounts
            .into_iter()
            .flatten()
            .find(|m| SIDECAR_VOLUMES.contains(&m.name.as_str()))
            .map(|m| Refusal::SidecarVolumeMounted {
                kind,
                container: name.to_owned(),
                volume: m.name.clone(),
            })
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.name != SIDECAR_CONTAINER)
        .map(|c| ("init container", &c.name, c.volume_mounts.as_ref()));
    let regular = spec
        .containers
        .iter()
        .map(|c| ("container", &c.name, c.volume_mounts.as_ref()));
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .filter(|c| !old_ephemeral.contains(&c.name))
        .map(|c| ("ephemeral container", &c.name, c.volume_mounts.as_ref()));
    match init
        .chain(regular)
        .chain(ephemeral)
        .find_map(|(kind, name, mounts)| mounted(kind, name, mounts))
    {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
