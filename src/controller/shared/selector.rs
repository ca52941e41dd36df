//! Label selectors as McpTenantPolicies use them: `namespaceSelector` picks tenants by their
//! Namespace's labels, `rules[].servers.selector` picks McpServers by theirs. Pure: the
//! reconcilers call [`matches`] with labels from their stores.
//!
//! The CRD schema cannot check a selector's operators, so a selector can be invalid at run time
//! (an unknown operator, `In` without values, `Exists` with values). Kubernetes itself refuses
//! such selectors; here the caller decides what an invalid one means (see `tenant_policy` and
//! `grants_input`: both fail closed) and the policy's status says what is wrong.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector cannot be evaluated: a sentence naming the offending requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSelector(pub String);

impl std::fmt::Display for InvalidSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a selector without evaluating it.
pub fn validate(selector: &LabelSelector) -> Result<(), InvalidSelector> {
    matches(selector, &BTreeMap::new()).map(|_| ())
}

/// Whether `labels` satisfy every requirement of `selector` (`{}` selects everything), with the
/// semantics of Kubernetes' `metav1.LabelSelectorAsSelector`.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSelector> {
    let mut selected = true;
    for (key, value) in selector.match_labels.iter().flatten() {
        check_key(key)?;
        check_value(key, value)?;
        selected &= labels.get(key) == Some(value);
    }
    for req in selector.match_expressions.iter().flatten() {
        check_key(&req.key)?;
        let values = req.values.as_deref().unwrap_or_default();
        for value in values {
            check_value(&req.key, value)?;
        }
        let value = labels.get(&req.key);
        let holds = match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "the requirement on {:?} uses {} without values",
                    req.key, req.operator
                )));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(InvalidSelector(format!(
                    "the requirement on {:?} uses {} with values; it takes none",
                    req.key, req.operator
                )));
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err(InvalidSelector(format!(
                    "the requirement on {:?} has operator {other:?}; use In, NotIn, Exists or \
                     DoesNotExist",
                    req.key
                )));
            }
        };
        selected &= holds;
    }
    Ok(selected)
}

/// A label key as Kubernetes accepts it: an optional DNS-subdomain prefix and `/`, then a name
/// of 1–63 characters. A selector naming an impossible key would select nothing, silently.
fn check_key(key: &str) -> Result<(), InvalidSelector> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    if prefix_ok && !name.is_empty() && is_label_name(name) {
        Ok(())
    } else {
        Err(InvalidSelector(format!(
            "{key:?} is not a valid label key: an optional DNS subdomain and '/', then 1-63 \
             characters of A-Z a-z 0-9 - _ . that begin and end with a letter or digit"
        )))
    }
}

/// A label value: empty, or 1–63 characters like a key's name part.
fn check_value(key: &str, value: &str) -> Result<(), InvalidSelector> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(InvalidSelector(format!(
            "the value {value:?} for {key:?} is not a valid label value: at most 63 characters \
             of A-Z a-z 0-9 - _ . that begin and end with a letter or digit"
        )))
    }
}

fn is_label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::labels;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn req(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn expressions(reqs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(reqs),
            match_labels: None,
        }
    }

    #[test]
    fn impossible_keys_and_values_are_invalid_not_silently_selecting_nothing() {
        for key in [
            "",
            "-team",
            "team-",
            "a b",
            "/team",
            "Example.com/team",
            "example.com/",
            &"k".repeat(64),
            &format!("{}/team", "p".repeat(254)),
        ] {
            let s = LabelSelector {
                match_labels: Some(labels(&[(key, "a")])),
                match_expressions: None,
            };
            let err = matches(&s, &labels(&[(key, "a")])).unwrap_err();
            assert!(err.0.contains("not a valid label key"), "{key:?}: {err}");
            assert!(
                validate(&expressions(vec![req(key, "Exists", &[])])).is_err(),
                "{key:?} in an expression"
            );
        }
        for key in [
            "team",
            "example.com/team",
            "a.b-c_d",
            "kubernetes.io/metadata.name",
        ] {
            let s = LabelSelector {
                match_labels: Some(labels(&[(key, "a")])),
                match_expressions: None,
            };
            assert_eq!(matches(&s, &labels(&[(key, "a")])), Ok(true), "{key:?}");
        }
        for value in ["-a", "a b", &"v".repeat(64)] {
            let s = LabelSelector {
                match_labels: Some(labels(&[("team", value)])),
                match_expressions: None,
            };
            assert!(validate(&s).is_err(), "{value:?}");
            assert!(validate(&expressions(vec![req("team", "In", &[value])])).is_err());
        }
        let empty_value = LabelSelector {
            match_labels: Some(labels(&[("team", "")])),
            match_expressions: None,
        };
        assert_eq!(matches(&empty_value, &labels(&[("team", "")])), Ok(true));
    }

    #[test]
    fn the_empty_selector_selects_everything() {
        assert_eq!(matches(&LabelSelector::default(), &labels(&[])), Ok(true));
        assert_eq!(
            matches(&LabelSelector::default(), &labels(&[("a", "b")])),
            Ok(true)
        );
    }

    #[test]
    fn match_labels_must_all_hold() {
        let s = LabelSelector {
            match_labels: Some(labels(&[("team", "a"), ("tier", "prod")])),
            match_expressions: None,
        };
        assert_eq!(
            matches(&s, &labels(&[("team", "a"), ("tier", "prod"), ("x", "y")])),
            Ok(true)
        );
        assert_eq!(matches(&s, &labels(&[("team", "a")])), Ok(false));
        assert_eq!(
            matches(&s, &labels(&[("team", "b"), ("tier", "prod")])),
            Ok(false)
        );
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let team_in = expressions(vec![req("team", "In", &["a", "b"])]);
        assert_eq!(matches(&team_in, &labels(&[("team", "b")])), Ok(true));
        assert_eq!(matches(&team_in, &labels(&[("team", "c")])), Ok(false));
        assert_eq!(matches(&team_in, &labels(&[])), Ok(false));

        let not_in = expressions(vec![req("team", "NotIn", &["a"])]);
        assert_eq!(matches(&not_in, &labels(&[])), Ok(true), "absent key");
        assert_eq!(matches(&not_in, &labels(&[("team", "a")])), Ok(false));

        let exists = expressions(vec![req("team", "Exists", &[])]);
        assert_eq!(matches(&exists, &labels(&[("team", "")])), Ok(true));
        assert_eq!(matches(&exists, &labels(&[])), Ok(false));

        let absent = expressions(vec![req("team", "DoesNotExist", &[])]);
        assert_eq!(matches(&absent, &labels(&[])), Ok(true));
        assert_eq!(matches(&absent, &labels(&[("team", "a")])), Ok(false));

        let mut both = expressions(vec![req("tier", "In", &["prod"])]);
        both.match_labels = Some(labels(&[("team", "a")]));
        assert_eq!(
            matches(&both, &labels(&[("team", "a"), ("tier", "prod")])),
            Ok(true)
        );
        assert_eq!(
            matches(&both, &labels(&[("team", "a"), ("tier", "dev")])),
            Ok(false)
        );
    }

    #[test]
    fn invalid_selectors_are_reported_not_guessed() {
        for (s, word) in [
            (expressions(vec![req("team", "in", &["a"])]), "operator"),
            (expressions(vec![req("team", "In", &[])]), "without values"),
            (
                expressions(vec![req("team", "Exists", &["a"])]),
                "takes none",
            ),
        ] {
            let err = matches(&s, &labels(&[("team", "a")])).unwrap_err();
            assert!(err.0.contains(word), "{err}");
            assert!(err.0.contains("team"), "{err}");
            assert_eq!(validate(&s), Err(err));
        }
        // Invalid even when an earlier requirement already fails.
        let s = expressions(vec![req("x", "In", &["1"]), req("team", "Bogus", &[])]);
        assert!(matches(&s, &labels(&[])).is_err());
    }
}
