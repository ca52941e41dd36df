//! Resources and prompts: how their grants are written (per server, a conjunction of allow/deny
//! pattern bounds, [`PatternBound`]), compiled once per grants generation ([`Bounds`]) and
//! matched at call time, and how the agent names them (the qualified URI and prompt name).
//! [`super::resolve`] writes the bounds; the sidecar compiles and checks them.
//!
//! ```text
//! AgentSpec servers[].resources/prompts ─┐
//! every picking policy rule's ones ──────┴─► ServerGrants.resources/prompts: [PatternBound] (all must permit)
//!                                                       │ Bounds::new (per grants generation)
//!                        uri / template / prompt name ──┴─► Bounds::permits
//! ```
//!
//! Unlike tools, an empty (or absent) allow list grants **nothing**: resources and prompts were
//! never granted before, so the safe reading of "no patterns" is none, on every plane. A server
//! with no bounds grants nothing; with bounds, a name is granted when every bound's allow list
//! matches it and no bound's deny list does (rules bound, they do not add up).
//!
//! Patterns are the tool patterns of [`super::pattern`] (`*` any run, `?` one character), matched
//! against a resource's URI, a resource template's `uriTemplate`, or a prompt's name. In a
//! resource pattern a URI-template expression `{…}` counts as `*`, so writing a template's own
//! text (`test://static/resource/{id}`) grants the template and the URIs it expands to. Note
//! that `?` is a wildcard, which also matches a literal `?` in a URI.
//!
//! The agent sees a resource as `<prefix>+<uri>` (and a template as `<prefix>+<uriTemplate>`).
//! A prefix is letters, digits, `_` and `-` (the CRD's rule), never `+`, so the first `+` splits
//! the qualified URI back into prefix and URI: reversible, and two (prefix, URI) pairs never
//! give the same string. `+` was chosen because `<prefix>+<scheme>:` is again a URI scheme
//! (RFC 3986 allows `+` in schemes), so clients that check the URI's syntax accept it when the
//! prefix is letters, digits and `-` starting with a letter. Prompts are named like tools,
//! `<prefix>__<name>`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::pattern::PatternSet;
use crate::core::Catalog;

/// Separates the server's prefix from the resource URI the agent sees.
pub const URI_SEPARATOR: char = '+';

/// One plane's allow and deny patterns for a server's resources or prompts.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatternBound {
    /// Patterns granted; empty grants nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Patterns never granted, whatever allow says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl PatternBound {
    /// True when this bound grants nothing at all (no allow pattern).
    pub fn grants_nothing(&self) -> bool {
        self.allow.is_empty()
    }

    /// The bound with its lists sorted and deduplicated, so equal bounds compare equal.
    pub fn normalized(&self) -> PatternBound {
        let mut allow = self.allow.clone();
        allow.sort();
        allow.dedup();
        let mut deny = self.deny.clone();
        deny.sort();
        deny.dedup();
        PatternBound { allow, deny }
    }
}

/// What kind of name a [`Bounds`] matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Resource URIs and URI templates: `{…}` in a pattern counts as `*`.
    Resource,
    /// Prompt names: patterns as written.
    Prompt,
}

/// A server's bounds compiled for matching many names; built once per grants generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    sets: Vec<PatternSet>,
}

impl Bounds {
    /// Compiles `bounds`. A bound without an allow pattern makes the whole set grant nothing.
    pub fn new(bounds: &[PatternBound], kind: Kind) -> Self {
        if bounds.iter().any(PatternBound::grants_nothing) {
            return Bounds::default();
        }
        let compile = |patterns: &[String]| -> Vec<String> {
            patterns
                .iter()
                .map(|p| match kind {
                    Kind::Resource => template_as_wildcards(p),
                    Kind::Prompt => p.clone(),
                })
                .collect()
        };
        Bounds {
            sets: bounds
                .iter()
                .map(|b| PatternSet::new(compile(&b.allow), compile(&b.deny)))
                .collect(),
        }
    }

    /// True when nothing can be granted (no bounds).
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// Whether `name` is granted: there are bounds and every one permits it.
    pub fn permits(&self, name: &str) -> bool {
        !self.sets.is_empty() && self.sets.iter().all(|s| s.permits(name))
    }
}

/// Under pinning, the prompts of `catalog` that `bounds` grant and that do not wait for
/// approval, each with its approved digest; None when the bounds grant no prompt (the document
/// then carries nothing of prompts).
pub fn pinned_prompts(
    catalog: &Catalog,
    bounds: &[PatternBound],
) -> Option<BTreeMap<String, String>> {
    let compiled = Bounds::new(bounds, Kind::Prompt);
    if compiled.is_empty() {
        return None;
    }
    Some(
        catalog
            .prompts
            .iter()
            .filter(|p| p.awaiting_approval.is_none() && compiled.permits(&p.name))
            .map(|p| (p.name.clone(), p.definition_digest.clone()))
            .collect(),
    )
}

/// A resource pattern with every URI-template expression `{…}` replaced by `*`.
fn template_as_wildcards(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut in_expression = false;
    for c in pattern.chars() {
        match (c, in_expression) {
            ('{', false) => {
                in_expression = true;
                out.push('*');
            }
            ('}', true) => in_expression = false,
            (_, true) => {}
            (c, false) => out.push(c),
        }
    }
    // An unclosed `{` is a literal brace after all.
    if in_expression {
        return pattern.to_string();
    }
    out
}

/// `<prefix>+<uri>`: the URI the agent sees for a server's resource (or template).
pub fn qualified_uri(prefix: &str, uri: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 1 + uri.len());
    out.push_str(prefix);
    out.push(URI_SEPARATOR);
    out.push_str(uri);
    out
}

/// The prefix and upstream URI a qualified URI stands for; None when it has no `+` or an empty
/// prefix.
pub fn split_qualified_uri(qualified: &str) -> Option<(&str, &str)> {
    let (prefix, uri) = qualified.split_once(URI_SEPARATOR)?;
    (!prefix.is_empty()).then_some((prefix, uri))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bound(allow: &[&str], deny: &[&str]) -> PatternBound {
        PatternBound {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn nothing_is_granted_without_an_allow_pattern() {
        assert!(!Bounds::new(&[], Kind::Prompt).permits("greet"));
        assert!(!Bounds::new(&[bound(&[], &[])], Kind::Prompt).permits("greet"));
        let one_empty = [bound(&["*"], &[]), bound(&[], &["x"])];
        assert!(Bounds::new(&one_empty, Kind::Prompt).is_empty());
        assert!(!Bounds::new(&one_empty, Kind::Prompt).permits("greet"));
    }

    #[test]
    fn every_bound_must_permit_and_deny_wins() {
        let bounds = Bounds::new(
            &[
                bound(&["file:///docs/*"], &[]),
                bound(&["file:///*"], &["*secret*"]),
            ],
            Kind::Resource,
        );
        assert!(bounds.permits("file:///docs/a.md"));
        assert!(
            !bounds.permits("file:///docs/secret.md"),
            "a deny of any bound"
        );
        assert!(
            !bounds.permits("file:///etc/passwd"),
            "not in the first bound"
        );
        assert!(!bounds.permits("http://x/docs/a.md"));
    }

    #[test]
    fn a_template_pattern_grants_the_template_and_what_it_expands_to() {
        let bounds = Bounds::new(
            &[bound(&["test://static/resource/{id}"], &[])],
            Kind::Resource,
        );
        assert!(bounds.permits("test://static/resource/{id}"));
        assert!(bounds.permits("test://static/resource/7"));
        assert!(!bounds.permits("test://static/other/7"));
        // In prompt names a brace is just a character.
        let prompts = Bounds::new(&[bound(&["a{b}"], &[])], Kind::Prompt);
        assert!(prompts.permits("a{b}") && !prompts.permits("ax"));
        assert_eq!(template_as_wildcards("x://{a}/{+b}/c"), "x://*/*/c");
        assert_eq!(template_as_wildcards("x://{open"), "x://{open");
    }

    #[test]
    fn a_qualified_uri_splits_at_its_first_plus() {
        assert_eq!(qualified_uri("gh", "file:///a+b"), "gh+file:///a+b");
        assert_eq!(
            split_qualified_uri("gh+file:///a+b"),
            Some(("gh", "file:///a+b"))
        );
        assert_eq!(split_qualified_uri("file:///a"), None);
        assert_eq!(split_qualified_uri("+file:///a"), None);
    }

    proptest! {
        /// Reversible for every prefix the CRD allows and every URI.
        #[test]
        fn the_uri_scheme_is_reversible(prefix in "[A-Za-z0-9_-]{1,64}", uri in any::<String>()) {
            let qualified = qualified_uri(&prefix, &uri);
            prop_assert_eq!(split_qualified_uri(&qualified), Some((prefix.as_str(), uri.as_str())));
        }

        /// Two different (prefix, URI) pairs never give one qualified URI.
        #[test]
        fn the_uri_scheme_never_collides(
            a in ("[A-Za-z0-9_-]{1,8}", "[a-z+:/_-]{0,12}"),
            b in ("[A-Za-z0-9_-]{1,8}", "[a-z+:/_-]{0,12}"),
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(qualified_uri(&a.0, &a.1), qualified_uri(&b.0, &b.1));
        }

        /// The conjunction is exactly "every bound permits".
        #[test]
        fn bounds_are_the_conjunction_of_their_sets(
            sets in proptest::collection::vec(
                (proptest::collection::vec("[ab*?]{1,3}", 1..3), proptest::collection::vec("[ab*?]{1,3}", 0..2)),
                1..4,
            ),
            name in "[ab]{0,4}",
        ) {
            let written: Vec<PatternBound> = sets
                .iter()
                .map(|(allow, deny)| PatternBound { allow: allow.clone(), deny: deny.clone() })
                .collect();
            let each = written.iter().all(|b| PatternSet::new(&b.allow, &b.deny).permits(&name));
            prop_assert_eq!(Bounds::new(&written, Kind::Prompt).permits(&name), each);
        }
    }
}
