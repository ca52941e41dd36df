//! Tool-name patterns: the allow/deny lists of every plane (McpServer `tools`, tenant policy
//! rules, AgentSpec servers) are compiled here once per resolution and matched against tool
//! names. Called by [`super::resolve`] only.
//!
//! The syntax is deliberately tiny: `*` matches any run of characters (including none), `?`
//! matches exactly one character, every other character matches itself. No character is special
//! to `*`: it crosses `.`, `/`, `_` and `-` alike. The CRD schema restricts patterns to the
//! tool-name charset (`A-Z a-z 0-9 _ - .`) plus the two wildcards; a pattern with any other
//! character is still accepted here and simply matches only names containing that character.

use std::fmt;
use std::str::Chars;

/// One compiled tool-name pattern.
#[derive(Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    tokens: Vec<Token>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: exactly one character.
    One,
    /// Any other character: itself.
    Literal(char),
}

impl Pattern {
    /// Compiles a pattern. Infallible: every string is a pattern (see the module comment).
    pub fn new(source: &str) -> Self {
        let mut tokens = Vec::with_capacity(source.len());
        for c in source.chars() {
            let token = match c {
                '*' => Token::Star,
                '?' => Token::One,
                c => Token::Literal(c),
            };
            // `**` means the same as `*`; one star keeps the matcher's backtracking simple.
            if !(token == Token::Star && tokens.last() == Some(&Token::Star)) {
                tokens.push(token);
            }
        }
        Pattern {
            source: source.to_string(),
            tokens,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when the pattern has no wildcard, i.e. it names exactly one tool.
    pub fn is_literal(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Literal(_)))
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        if self.is_literal() {
            return self.source == name;
        }
        match_tokens(&self.tokens, name)
    }
}

/// Iterative wildcard matching with a single backtrack point: on a mismatch after a `*`, the star
/// absorbs one more character and matching resumes after it. Linear in practice, O(pattern ×
/// name) at worst, no allocation.
fn match_tokens(tokens: &[Token], name: &str) -> bool {
    let mut t = 0;
    let mut rest: Chars<'_> = name.chars();
    // (token index just after the last `*`, where the star's match currently ends)
    let mut backtrack: Option<(usize, Chars<'_>)> = None;
    loop {
        let mut after = rest.clone();
        let Some(c) = after.next() else {
            return tokens[t..].iter().all(|t| *t == Token::Star);
        };
        match tokens.get(t) {
            Some(Token::Star) => {
                t += 1;
                backtrack = Some((t, rest.clone()));
                continue;
            }
            Some(Token::One) => {
                t += 1;
                rest = after;
                continue;
            }
            Some(Token::Literal(l)) if *l == c => {
                t += 1;
                rest = after;
                continue;
            }
            _ => {}
        }
        match &mut backtrack {
            Some((star_next, star_end)) => {
                // The star takes one more character; `rest` is not empty, so neither is this.
                star_end.next();
                t = *star_next;
                rest = star_end.clone();
            }
            None => return false,
        }
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.source)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// An allow list and a deny list, as every plane writes them: a name passes when no deny
/// pattern matches it (deny wins) and some allow pattern does, or the allow list is empty
/// (empty allow = all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatternSet {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
}

impl PatternSet {
    /// Compiles both lists once.
    pub fn new<A, D>(allow: A, deny: D) -> Self
    where
        A: IntoIterator,
        A::Item: AsRef<str>,
        D: IntoIterator,
        D::Item: AsRef<str>,
    {
        PatternSet {
            allow: allow
                .into_iter()
                .map(|p| Pattern::new(p.as_ref()))
                .collect(),
            deny: deny.into_iter().map(|p| Pattern::new(p.as_ref())).collect(),
        }
    }

    /// The compiled allow patterns, in the order given.
    pub fn allow(&self) -> &[Pattern] {
        &self.allow
    }

    /// The compiled deny patterns, in the order given.
    pub fn deny(&self) -> &[Pattern] {
        &self.deny
    }

    /// Whether `name` passes: not denied, and allowed (an empty allow list allows everything).
    pub fn permits(&self, name: &str) -> bool {
        !self.denies(name) && self.allows(name)
    }

    /// Whether some deny pattern matches `name`.
    pub fn denies(&self, name: &str) -> bool {
        self.deny.iter().any(|p| p.matches(name))
    }

    /// Whether the allow list lets `name` through (ignoring deny): it is empty or a pattern
    /// matches.
    pub fn allows(&self, name: &str) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|p| p.matches(name))
    }

    /// The patterns of both lists that match none of `names`, each once, sorted. Used to report
    /// grant patterns that select nothing.
    pub fn matching_nothing<'n, I>(&self, names: I) -> Unmatched
    where
        I: IntoIterator<Item = &'n str>,
    {
        let mut allow_hit = vec![false; self.allow.len()];
        let mut deny_hit = vec![false; self.deny.len()];
        for name in names {
            for (hit, p) in allow_hit.iter_mut().zip(&self.allow) {
                *hit = *hit || p.matches(name);
            }
            for (hit, p) in deny_hit.iter_mut().zip(&self.deny) {
                *hit = *hit || p.matches(name);
            }
        }
        Unmatched {
            allow: unmatched(&self.allow, &allow_hit),
            deny: unmatched(&self.deny, &deny_hit),
        }
    }
}

fn unmatched(patterns: &[Pattern], hit: &[bool]) -> Vec<String> {
    let mut out: Vec<String> = patterns
        .iter()
        .zip(hit)
        .filter(|(_, hit)| !**hit)
        .map(|(p, _)| p.as_str().to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The patterns of a [`PatternSet`] that matched no name of a given set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unmatched {
    /// Allow patterns that matched nothing, sorted.
    pub allow: Vec<String>,
    /// Deny patterns that matched nothing, sorted.
    pub deny: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(pattern: &str, name: &str) -> bool {
        Pattern::new(pattern).matches(name)
    }

    #[test]
    fn literals_match_only_themselves() {
        assert!(m("get_issue", "get_issue"));
        assert!(!m("get_issue", "get_issues"));
        assert!(!m("get_issue", "get_issu"));
        assert!(!m("get_issue", "Get_issue"));
        assert!(Pattern::new("a.b-c_d").is_literal());
        assert!(!Pattern::new("a*").is_literal());
        assert!(!Pattern::new("a?").is_literal());
    }

    #[test]
    fn star_matches_any_run_including_none_and_crosses_separators() {
        assert!(m("*", ""));
        assert!(m("*", "anything.at/all"));
        assert!(m("get_*", "get_"));
        assert!(m("get_*", "get_issue"));
        assert!(!m("get_*", "list_issues"));
        assert!(m("*issue*", "get_issue_comments"));
        assert!(m("a*b*c", "abc"));
        assert!(m("a*b*c", "a.x/b-y_c"));
        assert!(!m("a*b*c", "a.x/b-y_cd"));
        assert!(m("fs.*", "fs.read.file"));
        assert!(m("*.*", "a.b"));
        assert!(!m("*.*", "ab"));
        assert!(m("a**b", "ab"));
        assert!(m("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaab"));
        assert!(!m("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaa"));
    }

    #[test]
    fn question_mark_matches_exactly_one_character() {
        assert!(m("get_?", "get_a"));
        assert!(!m("get_?", "get_"));
        assert!(!m("get_?", "get_ab"));
        assert!(m("??", "é."));
        assert!(m("?*", "x"));
        assert!(!m("?*", ""));
    }

    #[test]
    fn other_characters_are_literal() {
        assert!(m("a[b]", "a[b]"));
        assert!(!m("a[b]", "ab"));
        assert!(m("a\\*", "a\\bc"));
        assert!(m("^a$", "^a$"));
    }

    #[test]
    fn deny_wins_and_empty_allow_means_all() {
        let all = PatternSet::new(Vec::<String>::new(), ["delete_*"]);
        assert!(all.permits("get_issue"));
        assert!(!all.permits("delete_repo"));

        let some = PatternSet::new(["get_*", "delete_repo"], ["delete_*"]);
        assert!(some.permits("get_issue"));
        assert!(!some.permits("list_issues"));
        assert!(
            !some.permits("delete_repo"),
            "deny wins over an exact allow"
        );

        let nothing = PatternSet::new(["*"], ["*"]);
        assert!(!nothing.permits("x"));
        assert!(PatternSet::default().permits("x"));
    }

    #[test]
    fn reports_patterns_matching_nothing_sorted_once() {
        let set = PatternSet::new(["z*", "get_*", "nope", "nope"], ["delete_*", "x?"]);
        let unmatched = set.matching_nothing(["get_issue", "delete_repo"]);
        assert_eq!(unmatched.allow, ["nope", "z*"]);
        assert_eq!(unmatched.deny, ["x?"]);
        let none = set.matching_nothing([]);
        assert_eq!(none.allow, ["get_*", "nope", "z*"]);
    }

    /// A deliberately naive recursive matcher, the oracle for the fast one.
    fn oracle(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') => (0..=s.len()).any(|i| oracle(&p[1..], &s[i..])),
            Some('?') => !s.is_empty() && oracle(&p[1..], &s[1..]),
            Some(c) => s.first() == Some(c) && oracle(&p[1..], &s[1..]),
        }
    }

    proptest! {
        #[test]
        fn matcher_agrees_with_the_naive_oracle(
            pattern in "[ab.*?]{0,8}",
            name in "[ab.é]{0,10}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let s: Vec<char> = name.chars().collect();
            prop_assert_eq!(Pattern::new(&pattern).matches(&name), oracle(&p, &s));
        }

        #[test]
        fn a_literal_name_is_its_own_pattern(name in "[A-Za-z0-9_.-]{1,20}") {
            prop_assert!(Pattern::new(&name).matches(&name));
            prop_assert!(Pattern::new("*").matches(&name));
        }
    }
}
