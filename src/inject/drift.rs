//! Which injected pods are out of date: a pod's projected volume of Secret and ConfigMap keys
//! is fixed when it is admitted, so a key its AgentSpec's grants reference later is not in it
//! until the pod is recreated. Pure: admission records what a pod mounts in the annotation
//! [`MOUNTS_ANNOTATION`] (names and keys only, never a value); the AgentSpec reconciler hands
//! the pods' metadata and the grants' current references to [`drift`] and reports the result in
//! the AgentSpec's status.
//!
//! ```text
//!  pod annotations                                   AgentSpec's grants now
//!  mcp-operator.dev/injected: bot                    References::of(endpoints)
//!  mcp-operator.dev/mounted-credentials:                 │
//!    secrets/tok/token                                   ▼
//!          └──────────────────────► drift ◄──── secrets/tok/token, secrets/api/key
//!                                     │
//!                                     ▼
//!                  injected: 1, out of date: pod bot-1 lacks Secret api key key
//! ```

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{INJECTED_ANNOTATION, References};

/// The annotation an injected pod carries: every file its projected volume holds, as
/// `secrets/<name>/<key>` and `configmaps/<name>/<key>`, comma-separated (neither object
/// names nor keys can hold a comma). Empty when the grants referenced nothing.
pub const MOUNTS_ANNOTATION: &str = "mcp-operator.dev/mounted-credentials";

/// The annotation's value for a pod mounting exactly `refs`.
pub fn mounts_annotation(refs: &References) -> String {
    refs.paths().join(",")
}

/// One Secret or ConfigMap key a pod would need to mount.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    pub name: String,
    pub key: String,
}

impl Key {
    /// Its file under the credentials directory, as the annotation lists it.
    pub fn path(&self) -> String {
        let dir = match self.kind {
            "Secret" => "secrets",
            _ => "configmaps",
        };
        format!("{dir}/{}/{}", self.name, self.key)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} key {}", self.kind, self.name, self.key)
    }
}

impl References {
    /// Every referenced key, Secrets first, each sorted by name and key.
    pub fn keys(&self) -> Vec<Key> {
        let mut out = Vec::new();
        for (kind, map) in [("Secret", &self.secrets), ("ConfigMap", &self.config_maps)] {
            for (name, keys) in map {
                for key in keys {
                    out.push(Key {
                        kind,
                        name: name.clone(),
                        key: key.clone(),
                    });
                }
            }
        }
        out
    }
}

/// One injected pod that does not mount every key the grants reference now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfDate {
    pub pod: String,
    /// What it lacks, in [`References::keys`] order.
    pub missing: Vec<Key>,
}

/// What the injected pods of one AgentSpec mount compared with what its grants reference.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodDrift {
    /// Pods injected for the AgentSpec that are not being deleted.
    pub injected: u32,
    /// Those among them lacking a key, sorted by pod name.
    pub out_of_date: Vec<OutOfDate>,
}

/// Compares the pods injected for `agent` (by their [`INJECTED_ANNOTATION`]) with the keys
/// `current` references. Pods injected for another AgentSpec, not injected, or being deleted
/// are not counted. A pod without [`MOUNTS_ANNOTATION`] was admitted before admission recorded
/// its mounts: nothing it mounts is known, so it lacks every referenced key (recreating it
/// records them, and is what a pod lacking one needs anyway).
pub fn drift<'a>(
    agent: &str,
    current: &References,
    pods: impl IntoIterator<Item = &'a ObjectMeta>,
) -> PodDrift {
    let wanted = current.keys();
    let mut result = PodDrift::default();
    for pod in pods {
        let annotations = pod.annotations.as_ref();
        let injected_for = annotations.and_then(|a| a.get(INJECTED_ANNOTATION));
        if injected_for.map(String::as_str) != Some(agent) || pod.deletion_timestamp.is_some() {
            continue;
        }
        result.injected += 1;
        let mounted: BTreeSet<&str> = annotations
            .and_then(|a| a.get(MOUNTS_ANNOTATION))
            .map(|v| v.split(',').filter(|p| !p.is_empty()).collect())
            .unwrap_or_default();
        let missing: Vec<Key> = wanted
            .iter()
            .filter(|k| !mounted.contains(k.path().as_str()))
            .cloned()
            .collect();
        if !missing.is_empty() {
            result.out_of_date.push(OutOfDate {
                pod: pod.name.clone().unwrap_or_default(),
                missing,
            });
        }
    }
    result.out_of_date.sort_by(|a, b| a.pod.cmp(&b.pod));
    result
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn refs(secrets: &[(&str, &str)], config_maps: &[(&str, &str)]) -> References {
        let mut r = References::default();
        for (n, k) in secrets {
            r.secrets
                .entry(n.to_string())
                .or_default()
                .insert(k.to_string());
        }
        for (n, k) in config_maps {
            r.config_maps
                .entry(n.to_string())
                .or_default()
                .insert(k.to_string());
        }
        r
    }

    fn pod(name: &str, agent: Option<&str>, mounts: Option<&str>) -> ObjectMeta {
        let mut annotations = BTreeMap::new();
        if let Some(a) = agent {
            annotations.insert(INJECTED_ANNOTATION.to_string(), a.to_string());
        }
        if let Some(m) = mounts {
            annotations.insert(MOUNTS_ANNOTATION.to_string(), m.to_string());
        }
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team-a".into()),
            annotations: Some(annotations),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_mounting_every_referenced_key_is_up_to_date() {
        let now = refs(&[("tok", "token")], &[("ca", "ca.crt")]);
        let pods = [pod("bot-1", Some("bot"), Some(&mounts_annotation(&now)))];
        assert_eq!(
            drift("bot", &now, &pods),
            PodDrift {
                injected: 1,
                out_of_date: vec![]
            }
        );
    }

    #[test]
    fn a_key_referenced_after_admission_makes_the_pod_out_of_date_and_is_named() {
        let then = refs(&[("tok", "token")], &[]);
        let now = refs(&[("tok", "token"), ("api", "key")], &[("ca", "ca.crt")]);
        let pods = [
            pod("bot-2", Some("bot"), Some(&mounts_annotation(&then))),
            pod("bot-1", Some("bot"), Some(&mounts_annotation(&now))),
        ];
        let d = drift("bot", &now, &pods);
        assert_eq!(d.injected, 2);
        assert_eq!(d.out_of_date.len(), 1);
        assert_eq!(d.out_of_date[0].pod, "bot-2");
        let said: Vec<String> = d.out_of_date[0]
            .missing
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(said, ["Secret api key key", "ConfigMap ca key ca.crt"]);
    }

    #[test]
    fn a_key_no_longer_referenced_changes_nothing() {
        // Mounting more than the grants need is harmless: the sidecar reads only what they name.
        let then = refs(&[("tok", "token"), ("old", "k")], &[]);
        let now = refs(&[("tok", "token")], &[]);
        let pods = [pod("bot-1", Some("bot"), Some(&mounts_annotation(&then)))];
        assert!(drift("bot", &now, &pods).out_of_date.is_empty());
    }

    #[test]
    fn only_pods_injected_for_this_agent_and_not_being_deleted_count() {
        let now = refs(&[("tok", "token")], &[]);
        let mut leaving = pod("bot-3", Some("bot"), Some(""));
        leaving.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
        ));
        let pods = [
            pod("other-1", Some("other"), Some("")),
            pod("plain", None, None),
            leaving,
            pod("bot-1", Some("bot"), Some("")),
        ];
        let d = drift("bot", &now, &pods);
        assert_eq!(d.injected, 1);
        assert_eq!(d.out_of_date.len(), 1);
        assert_eq!(d.out_of_date[0].pod, "bot-1");
    }

    #[test]
    fn a_pod_that_recorded_no_mounts_lacks_every_referenced_key() {
        let now = refs(&[("tok", "token")], &[]);
        let pods = [pod("bot-1", Some("bot"), None)];
        let d = drift("bot", &now, &pods);
        assert_eq!(d.out_of_date[0].missing.len(), 1);
        // ...and grants that reference nothing need nothing mounted.
        assert!(
            drift("bot", &References::default(), &pods)
                .out_of_date
                .is_empty()
        );
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9.-]{0,6}"
    }

    fn references() -> impl Strategy<Value = References> {
        (
            prop::collection::vec((name(), name()), 0..5),
            prop::collection::vec((name(), name()), 0..5),
        )
            .prop_map(|(s, c)| {
                let s: Vec<(&str, &str)> =
                    s.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                let c: Vec<(&str, &str)> =
                    c.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                refs(&s, &c)
            })
    }

    proptest! {
        /// A pod is out of date exactly when the grants reference a key it did not mount, and
        /// what it lacks is exactly that difference.
        #[test]
        fn missing_is_exactly_what_the_grants_reference_beyond_the_mounts(
            then in references(),
            now in references(),
        ) {
            let pods = [pod("bot-1", Some("bot"), Some(&mounts_annotation(&then)))];
            let d = drift("bot", &now, &pods);
            let mounted: BTreeSet<String> = then.paths().into_iter().collect();
            let expected: Vec<String> = now
                .keys()
                .iter()
                .map(Key::path)
                .filter(|p| !mounted.contains(p))
                .collect();
            let missing: Vec<String> = d
                .out_of_date
                .iter()
                .flat_map(|o| o.missing.iter().map(Key::path))
                .collect();
            prop_assert_eq!(&missing, &expected);
            prop_assert_eq!(d.out_of_date.is_empty(), expected.is_empty());
            // The annotation lists the same files the projected volume holds.
            prop_assert_eq!(
                now.keys().iter().map(Key::path).collect::<Vec<_>>(),
                now.paths()
            );
        }
    }
}
