//! Tool-name patterns: the allow/deny lists of every plane (McpServer `tools`, tenant policy
//! rules, AgentSpec servers) are compiled here once per resolution and matched against tool
//! names. Called by [`super::resolve`] only.
//!
//! The syntax is deliberately tiny: `*` matches any run of characters (including none), `?`
//! matches exactly one character, every other character matches itself. No character is special
//! to `*`: it crosses `.`, `/`, `_` and `-` alike. The CRD schema restricts patterns to the
//! tool-name charset (`A-Z a-z 0-9 _ - .`) plus the two wildcards; a pattern with any other
//! character is still accepted here and simply matches only names containing that character.
//!
//! Cost is bounded because a tenant writes these lists: one AgentSpec may carry 256 patterns of
//! 128 characters against a server with 10,000 tools. So a wildcard pattern is compiled into a
//! bit-parallel automaton (one bit per pattern position, a handful of word operations per name
//! character, never backtracking): matching is linear in the name whatever the pattern. Literal
//! patterns (most of them, in practice) are one hash lookup per name for the whole list.

use std::collections::HashSet;
use std::fmt;

/// Longest pattern, in tokens, the automaton holds in one `u128` state word. Longer patterns
/// (the CRD forbids them; the core stays total) fall back to a multi-word state.
const WORD_BITS: usize = 128;

/// One compiled tool-name pattern.
#[derive(Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    matcher: Matcher,
}

#[derive(Clone, PartialEq, Eq)]
enum Matcher {
    /// No wildcard: the pattern names exactly one tool.
    Literal,
    /// A wildcard pattern as a position automaton.
    Automaton(Automaton),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: exactly one character.
    One,
    /// Any other character: itself.
    Literal(char),
}

/// The position automaton of a wildcard pattern (Shift-And, extended with `*`).
///
/// Tokens `t_0 … t_{k-1}` (`**` collapsed to `*`). Bit `i` of the state is set when the name read
/// so far can be matched by `t_0 ..= t_i`. A literal or `?` token at `i` is entered from bit
/// `i - 1` (or from the start, for `i = 0`) by a character it accepts; a `*` token at `i` is
/// entered without consuming (from bit `i - 1`) and then keeps itself on any character. The name
/// matches when bit `k - 1` is set at the end.
#[derive(Clone, PartialEq, Eq)]
struct Automaton {
    /// The literal text before the first wildcard: a name that does not start with it cannot
    /// match, and a byte comparison says so long before the automaton would.
    prefix: String,
    /// The literal text after the last wildcard, likewise.
    suffix: String,
    /// Characters a matching name has at least (every token but `*` takes one).
    min_chars: usize,
    /// Whether the pattern has a `*` (else a match has exactly `min_chars` characters).
    has_star: bool,
    /// Number of tokens, ≥ 1.
    len: usize,
    /// State words per bit set: `len.div_ceil(128)`.
    words: usize,
    /// Bits of `*` tokens, `words` words.
    stars: Vec<u128>,
    /// Bits of `?` tokens: they accept every character.
    any: Vec<u128>,
    /// For each ASCII character, the bits of the literal tokens equal to it (`128 × words`).
    ascii: Vec<u128>,
    /// Literal tokens outside ASCII, with their bits (rare: the CRD forbids them).
    other: Vec<(char, Vec<u128>)>,
}

impl Pattern {
    /// Compiles a pattern. Infallible: every string is a pattern (see the module comment).
    pub fn new(source: &str) -> Self {
        let matcher = if source.contains(['*', '?']) {
            Matcher::Automaton(Automaton::new(source))
        } else {
            Matcher::Literal
        };
        Pattern {
            source: source.to_string(),
            matcher,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when the pattern has no wildcard, i.e. it names exactly one tool.
    pub fn is_literal(&self) -> bool {
        matches!(self.matcher, Matcher::Literal)
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        match &self.matcher {
            Matcher::Literal => self.source == name,
            Matcher::Automaton(a) => a.matches(name),
        }
    }
}

impl Automaton {
    fn new(source: &str) -> Self {
        let mut tokens: Vec<Token> = Vec::with_capacity(source.len());
        for c in source.chars() {
            let token = match c {
                '*' => Token::Star,
                '?' => Token::One,
                c => Token::Literal(c),
            };
            // `**` means the same as `*`; the automaton relies on never two in a row.
            if !(token == Token::Star && tokens.last() == Some(&Token::Star)) {
                tokens.push(token);
            }
        }
        let literal_run = |tokens: &mut dyn Iterator<Item = &Token>| -> String {
            tokens
                .map_while(|t| match t {
                    Token::Literal(c) => Some(*c),
                    _ => None,
                })
                .collect()
        };
        let prefix = literal_run(&mut tokens.iter());
        let suffix: String = literal_run(&mut tokens.iter().rev())
            .chars()
            .rev()
            .collect();
        let min_chars = tokens.iter().filter(|t| **t != Token::Star).count();
        let has_star = tokens.contains(&Token::Star);
        let len = tokens.len();
        let words = len.div_ceil(WORD_BITS).max(1);
        let mut stars = vec![0u128; words];
        let mut any = vec![0u128; words];
        let mut ascii = vec![0u128; 128 * words];
        let mut other: Vec<(char, Vec<u128>)> = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            let (w, bit) = (i / WORD_BITS, 1u128 << (i % WORD_BITS));
            match token {
                Token::Star => stars[w] |= bit,
                Token::One => any[w] |= bit,
                Token::Literal(c) if c.is_ascii() => ascii[(*c as usize) * words + w] |= bit,
                Token::Literal(c) => match other.iter_mut().find(|(o, _)| o == c) {
                    Some((_, bits)) => bits[w] |= bit,
                    None => {
                        let mut bits = vec![0u128; words];
                        bits[w] |= bit;
                        other.push((*c, bits));
                    }
                },
            }
        }
        Automaton {
            prefix,
            suffix,
            min_chars,
            has_star,
            len,
            words,
            stars,
            any,
            ascii,
            other,
        }
    }

    /// The bits of tokens accepting `c` (literal `c` or `?`), word `w`.
    fn accepting(&self, c: char, w: usize) -> u128 {
        let literal = if c.is_ascii() {
            self.ascii[(c as usize) * self.words + w]
        } else {
            self.other
                .iter()
                .find(|(o, _)| *o == c)
                .map_or(0, |(_, bits)| bits[w])
        };
        literal | self.any[w]
    }

    fn matches(&self, name: &str) -> bool {
        // Cheap necessary conditions first: most names a pattern does not match fail here.
        if !name.starts_with(&self.prefix) || !name.ends_with(&self.suffix) {
            return false;
        }
        // Tool names are ASCII, where bytes are characters; count only when they are not.
        let chars = if name.is_ascii() {
            name.len()
        } else {
            name.chars().count()
        };
        if chars < self.min_chars || (!self.has_star && chars != self.min_chars) {
            return false;
        }
        if self.words == 1 {
            return self.matches_one_word(name);
        }
        // Multi-word state: the same steps, carrying the shifted-out bit between words.
        let mut state = vec![0u128; self.words];
        let mut next = vec![0u128; self.words];
        // Start: a leading `*` is entered without consuming.
        state[0] = self.stars[0] & 1;
        let mut at_start = true;
        for c in name.chars() {
            let mut carry = u128::from(at_start);
            for w in 0..self.words {
                let shifted = (state[w] << 1) | carry;
                carry = state[w] >> (WORD_BITS - 1);
                next[w] = (shifted & self.accepting(c, w)) | (state[w] & self.stars[w]);
            }
            close_over_stars(&mut next, &self.stars);
            std::mem::swap(&mut state, &mut next);
            at_start = false;
            if state.iter().all(|w| *w == 0) {
                return false;
            }
        }
        let last = self.len - 1;
        state[last / WORD_BITS] & (1u128 << (last % WORD_BITS)) != 0
    }

    fn matches_one_word(&self, name: &str) -> bool {
        let stars = self.stars[0];
        let mut state = stars & 1;
        let mut at_start = 1u128;
        for c in name.chars() {
            let entered = ((state << 1) | at_start) & self.accepting(c, 0);
            let next = entered | (state & stars);
            // A `*` right after a newly reached position is reached too (never two in a row).
            state = next | ((next << 1) & stars);
            at_start = 0;
            if state == 0 {
                return false;
            }
        }
        state & (1u128 << (self.len - 1)) != 0
    }
}

/// Adds the `*` positions reachable without consuming from the positions in `state`.
fn close_over_stars(state: &mut [u128], stars: &[u128]) {
    let mut carry = 0u128;
    for w in 0..state.len() {
        let shifted = (state[w] << 1) | carry;
        carry = state[w] >> (WORD_BITS - 1);
        state[w] |= shifted & stars[w];
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

/// One list of patterns, compiled for matching many names: the literal patterns in one hash
/// set, the wildcard ones as automata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PatternList {
    patterns: Vec<Pattern>,
    literals: HashSet<String>,
    wildcards: Vec<usize>,
}

impl PatternList {
    fn new<I>(sources: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let patterns: Vec<Pattern> = sources
            .into_iter()
            .map(|p| Pattern::new(p.as_ref()))
            .collect();
        let literals = patterns
            .iter()
            .filter(|p| p.is_literal())
            .map(|p| p.source.clone())
            .collect();
        // A wildcard pattern written twice is matched once.
        let mut seen = HashSet::new();
        let wildcards = patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.is_literal() && seen.insert(p.source.as_str()))
            .map(|(i, _)| i)
            .collect();
        PatternList {
            patterns,
            literals,
            wildcards,
        }
    }

    fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    fn any_matches(&self, name: &str) -> bool {
        self.literals.contains(name)
            || self
                .wildcards
                .iter()
                .any(|&i| self.patterns[i].matches(name))
    }

    /// The patterns that match none of `names`, each once, sorted. A pattern stops being tried
    /// once it matched a name, so the cost falls as patterns are found.
    fn matching_nothing<'n, I>(&self, names: I) -> Vec<String>
    where
        I: IntoIterator<Item = &'n str>,
    {
        let mut unmatched_literals: HashSet<&str> =
            self.literals.iter().map(String::as_str).collect();
        let mut unmatched_wildcards: Vec<usize> = self.wildcards.clone();
        for name in names {
            if unmatched_literals.is_empty() && unmatched_wildcards.is_empty() {
                break;
            }
            unmatched_literals.remove(name);
            unmatched_wildcards.retain(|&i| !self.patterns[i].matches(name));
        }
        let mut out: Vec<String> = unmatched_literals
            .into_iter()
            .map(str::to_string)
            .chain(
                unmatched_wildcards
                    .into_iter()
                    .map(|i| self.patterns[i].source.clone()),
            )
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// An allow list and a deny list, as every plane writes them: a name passes when no deny
/// pattern matches it (deny wins) and some allow pattern does, or the allow list is empty
/// (empty allow = all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatternSet {
    allow: PatternList,
    deny: PatternList,
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
            allow: PatternList::new(allow),
            deny: PatternList::new(deny),
        }
    }

    /// The compiled allow patterns, in the order given.
    pub fn allow(&self) -> &[Pattern] {
        &self.allow.patterns
    }

    /// The compiled deny patterns, in the order given.
    pub fn deny(&self) -> &[Pattern] {
        &self.deny.patterns
    }

    /// Whether `name` passes: not denied, and allowed (an empty allow list allows everything).
    pub fn permits(&self, name: &str) -> bool {
        !self.denies(name) && self.allows(name)
    }

    /// Whether some deny pattern matches `name`.
    pub fn denies(&self, name: &str) -> bool {
        self.deny.any_matches(name)
    }

    /// Whether the allow list lets `name` through (ignoring deny): it is empty or a pattern
    /// matches.
    pub fn allows(&self, name: &str) -> bool {
        self.allow.is_empty() || self.allow.any_matches(name)
    }

    /// The patterns of both lists that match none of `names`, each once, sorted. Used to report
    /// grant patterns that select nothing.
    pub fn matching_nothing<'n, I>(&self, names: I) -> Unmatched
    where
        I: IntoIterator<Item = &'n str>,
        I::IntoIter: Clone,
    {
        let names = names.into_iter();
        Unmatched {
            allow: self.allow.matching_nothing(names.clone()),
            deny: self.deny.matching_nothing(names),
        }
    }
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

    /// A dynamic-programming matcher, the oracle for long patterns (the naive one is
    /// exponential in the number of stars).
    fn dp_oracle(p: &[char], s: &[char]) -> bool {
        // m[j] = p[..i] matches s[..j]
        let mut m = vec![false; s.len() + 1];
        m[0] = true;
        for &pc in p {
            let mut next = vec![false; s.len() + 1];
            match pc {
                '*' => {
                    let mut any = false;
                    for j in 0..=s.len() {
                        any = any || m[j];
                        next[j] = any;
                    }
                }
                _ => {
                    for j in 1..=s.len() {
                        next[j] = m[j - 1] && (pc == '?' || s[j - 1] == pc);
                    }
                }
            }
            m = next;
        }
        m[s.len()]
    }

    #[test]
    fn patterns_longer_than_one_state_word_match() {
        // 200 tokens: the multi-word automaton.
        let long = format!("{}*{}", "a?".repeat(60), "b".repeat(79));
        let name = format!("{}xyz{}", "ab".repeat(60), "b".repeat(79));
        assert!(m(&long, &name));
        assert!(!m(&long, &name[..name.len() - 1]));
        let stars = "*a".repeat(100);
        assert!(m(&stars, &"a".repeat(100)));
        assert!(m(&stars, &"ba".repeat(100)));
        assert!(!m(&stars, &"a".repeat(99)));
    }

    #[test]
    fn hostile_lists_cost_linear_work_and_stay_exact() {
        // The shape that made the backtracking matcher quadratic per name, at the CRD maxima.
        let patterns: Vec<String> = (0..256)
            .map(|i| format!("{}{}", "*a".repeat(60), i % 10))
            .collect();
        let set = PatternSet::new(&patterns, Vec::<String>::new());
        let names: Vec<String> = (0..40).map(|i| format!("{}{i}", "a".repeat(120))).collect();
        for name in &names {
            let expected = patterns.iter().any(|p| {
                dp_oracle(
                    &p.chars().collect::<Vec<_>>(),
                    &name.chars().collect::<Vec<_>>(),
                )
            });
            assert_eq!(set.allows(name), expected, "{name}");
        }
        let unmatched = set.matching_nothing(names.iter().map(String::as_str));
        assert!(unmatched.allow.is_empty(), "{:?}", unmatched.allow);
    }

    proptest! {
        #[test]
        fn long_patterns_agree_with_the_dp_oracle(
            pattern in "[ab*?]{100,300}",
            name in "[ab]{0,300}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let s: Vec<char> = name.chars().collect();
            prop_assert_eq!(Pattern::new(&pattern).matches(&name), dp_oracle(&p, &s));
        }

        #[test]
        fn sets_agree_with_pattern_by_pattern_matching(
            allow in proptest::collection::vec("[ab*?]{0,5}", 0..6),
            deny in proptest::collection::vec("[ab*?]{0,5}", 0..4),
            names in proptest::collection::vec("[ab]{0,6}", 0..8),
        ) {
            let set = PatternSet::new(&allow, &deny);
            for name in &names {
                let allowed = allow.is_empty() || allow.iter().any(|p| m(p, name));
                let denied = deny.iter().any(|p| m(p, name));
                prop_assert_eq!(set.permits(name), allowed && !denied);
            }
            let unmatched = set.matching_nothing(names.iter().map(String::as_str));
            let mut expected: Vec<String> = allow
                .iter()
                .filter(|p| !names.iter().any(|n| m(p, n)))
                .cloned()
                .collect();
            expected.sort();
            expected.dedup();
            prop_assert_eq!(unmatched.allow, expected);
        }

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
