//! An answer checked as it arrives, for a result too big to hold whole: an incremental JSON
//! validator (the grammar, UTF-8, escapes and surrogate pairs, nesting: what
//! `serde_json::from_slice::<Value>` would refuse, bar a number's range) that also follows the
//! JSON-RPC envelope — which bytes are the `result` object's, our request's `id` and the
//! `jsonrpc` version at the top, and the result's own `isError` and `resultType`.
//!
//! ```text
//! chunk ─► AnswerScan::feed ─► the part of the chunk inside the result (its closing brace held)
//! end   ─► AnswerScan::finish(id) ─► ResultEnd { isError, resultType, members } or why not
//! ```
//!
//! Pure: no I/O, no allocation per byte (only the few small values it keeps are copied).

/// How deep containers nest at most (serde_json's own limit: what an agent parsing with it
/// accepts).
pub const MAX_DEPTH: usize = 127;

/// Values of the envelope kept to be judged at the end are short; a longer one is wrong.
const KEPT_VALUE_MAX: usize = 256;

/// What a finished answer's result said of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultEnd {
    /// `isError: true`.
    pub is_error: bool,
    /// The value of `resultType`, when it is a string.
    pub result_type: Option<String>,
    /// Whether the result object has any member.
    pub has_members: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Object,
    Array,
}

/// What the grammar expects next, outside a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    FirstValueOrEnd,
    FirstKeyOrEnd,
    Key,
    Colon,
    CommaOrEnd,
    Nothing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Number {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpDigits,
}

impl Number {
    fn may_end(self) -> bool {
        matches!(
            self,
            Number::Zero | Number::Int | Number::Frac | Number::ExpDigits
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    Backslash,
    /// `\u` and `left` hex digits to come; `high`: this is the low half of a pair.
    Hex {
        left: u8,
        value: u16,
        low: bool,
    },
    /// After a high surrogate: `\` must come, then `u`.
    PairBackslash,
    PairU,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    None,
    Str {
        key: bool,
        escape: Escape,
        /// UTF-8 continuation bytes still due, and the range the next one must be in.
        utf8_left: u8,
        next_lo: u8,
        next_hi: u8,
    },
    Num(Number),
    Literal {
        word: &'static [u8],
        at: u8,
    },
}

/// Which member of the envelope (depth 1) or of the result (depth 2) a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Jsonrpc,
    Id,
    Result,
    Forbidden,
    IsError,
    ResultType,
    Other,
}

/// The incremental scan of one answer.
#[derive(Debug)]
pub struct AnswerScan {
    stack: Vec<Container>,
    expect: Expect,
    token: Token,
    /// Bytes fed so far.
    offset: u64,
    /// The first fault found; nothing is read after it.
    fault: Option<String>,
    /// The key being read (at depth 1, or 2 inside the result), while short.
    key: Vec<u8>,
    key_escaped: bool,
    /// What the member whose value is being read names.
    member: Option<Member>,
    /// A value being kept (jsonrpc, id, isError, resultType) and the depth it started at.
    kept: Option<(Member, usize, Vec<u8>)>,
    jsonrpc: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
    is_error: Option<Vec<u8>>,
    result_type: Option<Vec<u8>>,
    /// Where the result object opened and closed (its braces' offsets).
    result_open: Option<u64>,
    result_close: Option<u64>,
    result_members: usize,
    /// Something an answer passed through must not have (a second result, an error or method
    /// member, escapes in the keys that are judged): the reason.
    unusual: Option<&'static str>,
}

impl Default for AnswerScan {
    fn default() -> Self {
        AnswerScan {
            stack: Vec::new(),
            expect: Expect::Value,
            token: Token::None,
            offset: 0,
            fault: None,
            key: Vec::new(),
            key_escaped: false,
            member: None,
            kept: None,
            jsonrpc: None,
            id: None,
            is_error: None,
            result_type: None,
            result_open: None,
            result_close: None,
            result_members: 0,
            unusual: None,
        }
    }
}

impl AnswerScan {
    /// Whether the answer so far can be passed on as it comes: valid, usual, and inside its
    /// result object (which has not closed yet).
    pub fn inside_result(&self) -> bool {
        self.fault.is_none()
            && self.unusual.is_none()
            && self.result_open.is_some()
            && self.result_close.is_none()
    }

    /// Whether nothing wrong was found so far (invalid JSON, or something an answer passed on
    /// must not have).
    pub fn sound(&self) -> bool {
        self.fault.is_none() && self.unusual.is_none()
    }

    /// Reads `chunk`; returns the part of it that lies inside the result object (from its
    /// opening brace, up to but not including its closing brace, which the caller holds until
    /// the answer is judged). After a fault, nothing more is read.
    pub fn feed(&mut self, chunk: &[u8]) -> std::ops::Range<usize> {
        let base = self.offset;
        let mut i = 0;
        while i < chunk.len() && self.fault.is_none() {
            i += self.step(chunk, i);
        }
        self.offset = base + chunk.len() as u64;
        let end_abs = base + chunk.len() as u64;
        let Some(open) = self.result_open else {
            return 0..0;
        };
        let from = open.max(base);
        let to = self.result_close.unwrap_or(end_abs).min(end_abs);
        if to <= from {
            return 0..0;
        }
        (from - base) as usize..(to - base) as usize
    }

    /// The answer ended: the result's facts when it is a JSON-RPC 2.0 answer to request `id`
    /// with an object result and nothing unusual; otherwise why not.
    pub fn finish(mut self, id: u64) -> Result<ResultEnd, String> {
        if let Some(fault) = self.fault.take() {
            return Err(fault);
        }
        if let Token::Num(n) = self.token
            && n.may_end()
            && self.stack.is_empty()
        {
            self.token = Token::None;
            self.expect = Expect::Nothing;
        }
        if self.expect != Expect::Nothing || self.token != Token::None {
            return Err("the answer ended before its JSON did".into());
        }
        if let Some(why) = self.unusual {
            return Err(why.into());
        }
        if self.jsonrpc.as_deref() != Some(b"\"2.0\"") {
            return Err("the answer is not JSON-RPC 2.0".into());
        }
        let id_ok = match self
            .id
            .as_deref()
            .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
        {
            Some(serde_json::Value::Number(n)) => n.as_u64() == Some(id),
            Some(serde_json::Value::String(s)) => s == id.to_string(),
            _ => false,
        };
        if !id_ok {
            return Err("the answer does not answer the call (another id)".into());
        }
        if self.result_close.is_none() {
            return Err("the answer has no result object".into());
        }
        Ok(ResultEnd {
            is_error: self.is_error.as_deref() == Some(b"true"),
            result_type: self
                .result_type
                .as_deref()
                .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
                .and_then(|v| v.as_str().map(str::to_string)),
            has_members: self.result_members > 0,
        })
    }

    fn fail(&mut self, why: impl Into<String>) -> usize {
        self.fault = Some(format!(
            "the answer is not valid JSON at byte {}: {}",
            self.offset,
            why.into()
        ));
        1
    }

    /// Reads from `chunk[i..]`: one byte, or a run of plain string bytes. Returns how many.
    fn step(&mut self, chunk: &[u8], i: usize) -> usize {
        let b = chunk[i];
        match self.token {
            Token::Str {
                escape: Escape::None,
                utf8_left: 0,
                key,
                ..
            } if b != b'"' && b != b'\\' && (0x20..0x80).contains(&b) => {
                // A run of plain bytes: the bulk of a big answer.
                let run = chunk[i..]
                    .iter()
                    .position(|&c| c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c))
                    .unwrap_or(chunk.len() - i);
                if key {
                    self.key_bytes(&chunk[i..i + run]);
                }
                self.keep_bytes(&chunk[i..i + run]);
                self.offset += run as u64;
                return run;
            }
            _ => {}
        }
        self.byte(b);
        self.offset += 1;
        1
    }

    fn byte(&mut self, b: u8) {
        match self.token {
            Token::Str { .. } => self.string_byte(b),
            Token::Num(n) => self.number_byte(n, b),
            Token::Literal { word, at } => {
                self.keep_bytes(&[b]);
                if word[at as usize] != b {
                    self.fail("not a literal");
                } else if at as usize + 1 == word.len() {
                    self.token = Token::None;
                    self.value_done();
                } else {
                    self.token = Token::Literal { word, at: at + 1 };
                }
            }
            Token::None => self.structure(b),
        }
    }

    fn structure(&mut self, b: u8) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            return;
        }
        if matches!(b, b':' | b',')
            || b == b'"' && matches!(self.expect, Expect::FirstKeyOrEnd | Expect::Key)
        {
            // Inside a kept value (an id that is an object, say): kept whole, to be judged.
            self.keep_bytes(&[b]);
        }
        match self.expect {
            Expect::Value | Expect::FirstValueOrEnd => {
                if b == b']' && self.expect == Expect::FirstValueOrEnd {
                    self.close(Container::Array);
                } else {
                    self.value_start(b);
                }
            }
            Expect::FirstKeyOrEnd | Expect::Key => match b {
                b'"' => {
                    self.key.clear();
                    self.key_escaped = false;
                    self.token = Token::Str {
                        key: true,
                        escape: Escape::None,
                        utf8_left: 0,
                        next_lo: 0,
                        next_hi: 0,
                    };
                }
                b'}' if self.expect == Expect::FirstKeyOrEnd => self.close(Container::Object),
                _ => {
                    self.fail("a key must come");
                }
            },
            Expect::Colon => {
                if b == b':' {
                    self.expect = Expect::Value;
                } else {
                    self.fail("':' must come");
                }
            }
            Expect::CommaOrEnd => match (b, self.stack.last()) {
                (b',', Some(Container::Object)) => self.expect = Expect::Key,
                (b',', Some(Container::Array)) => self.expect = Expect::Value,
                (b'}', Some(Container::Object)) => self.close(Container::Object),
                (b']', Some(Container::Array)) => self.close(Container::Array),
                _ => {
                    self.fail("',' or the container's end must come");
                }
            },
            Expect::Nothing => {
                self.fail("something follows the answer");
            }
        }
    }

    /// The depth of the object a key at this point belongs to, and whether it is the result.
    fn in_result_object(&self) -> bool {
        self.stack.len() == 2 && self.result_open.is_some() && self.result_close.is_none()
    }

    fn value_start(&mut self, b: u8) {
        let depth = self.stack.len();
        // The member of the envelope or the result this value belongs to, when judged.
        if let Some(member) = self.member.take() {
            match member {
                Member::Result => {
                    if b == b'{' {
                        self.result_open = Some(self.offset);
                    } else {
                        self.unusual = Some("the answer's result is not an object");
                    }
                }
                Member::Jsonrpc | Member::Id | Member::IsError | Member::ResultType => {
                    self.kept = Some((member, depth, Vec::new()));
                }
                Member::Forbidden | Member::Other => {}
            }
        }
        self.keep_bytes(&[b]);
        match b {
            b'{' | b'[' => {
                if depth >= MAX_DEPTH {
                    self.fail("nested too deep");
                    return;
                }
                let (container, expect) = if b == b'{' {
                    (Container::Object, Expect::FirstKeyOrEnd)
                } else {
                    (Container::Array, Expect::FirstValueOrEnd)
                };
                self.stack.push(container);
                self.expect = expect;
            }
            b'"' => {
                self.token = Token::Str {
                    key: false,
                    escape: Escape::None,
                    utf8_left: 0,
                    next_lo: 0,
                    next_hi: 0,
                }
            }
            b'-' => self.token = Token::Num(Number::Minus),
            b'0' => self.token = Token::Num(Number::Zero),
            b'1'..=b'9' => self.token = Token::Num(Number::Int),
            b't' => {
                self.token = Token::Literal {
                    word: b"true",
                    at: 1,
                }
            }
            b'f' => {
                self.token = Token::Literal {
                    word: b"false",
                    at: 1,
                }
            }
            b'n' => {
                self.token = Token::Literal {
                    word: b"null",
                    at: 1,
                }
            }
            _ => {
                self.fail("a value must come");
            }
        }
    }

    fn close(&mut self, container: Container) {
        if self.stack.last() != Some(&container) {
            self.fail("a container closes that did not open");
            return;
        }
        if container == Container::Object && self.in_result_object() {
            self.result_close = Some(self.offset);
        }
        self.keep_bytes(&[if container == Container::Object {
            b'}'
        } else {
            b']'
        }]);
        self.stack.pop();
        self.value_done();
    }

    /// A value ended (the stack is back at its parent's depth).
    fn value_done(&mut self) {
        self.expect = if self.stack.is_empty() {
            Expect::Nothing
        } else {
            Expect::CommaOrEnd
        };
        if let Some((member, depth, _)) = &self.kept
            && *depth == self.stack.len()
        {
            let member = *member;
            let (_, _, bytes) = self.kept.take().expect("a kept value");
            let bytes = (bytes.len() <= KEPT_VALUE_MAX).then_some(bytes);
            match member {
                Member::Jsonrpc => self.jsonrpc = bytes,
                Member::Id => self.id = bytes,
                Member::IsError => self.is_error = bytes,
                Member::ResultType => self.result_type = bytes,
                _ => {}
            }
        }
    }

    fn key_done(&mut self) {
        self.expect = Expect::Colon;
        // The closing quote was read as one of the key's bytes.
        self.key.pop();
        let depth = self.stack.len();
        let judged = depth == 1 || self.in_result_object();
        if !judged {
            return;
        }
        let member = if self.key.len() > 16 {
            Member::Other
        } else if depth == 1 {
            match self.key.as_slice() {
                b"jsonrpc" => Member::Jsonrpc,
                b"id" => Member::Id,
                b"result" => Member::Result,
                b"error" | b"method" => Member::Forbidden,
                _ => Member::Other,
            }
        } else {
            self.result_members += 1;
            match self.key.as_slice() {
                b"isError" => Member::IsError,
                b"resultType" => Member::ResultType,
                _ => Member::Other,
            }
        };
        if self.key_escaped {
            self.unusual = Some("a key of the answer holds escapes");
        }
        match member {
            Member::Forbidden => self.unusual = Some("the answer is an error or a request"),
            Member::Result if self.result_open.is_some() => {
                self.unusual = Some("the answer has two results")
            }
            _ => {}
        }
        self.member = Some(member);
    }

    fn key_bytes(&mut self, bytes: &[u8]) {
        // Long enough to tell a longer key from every judged name, with its closing quote.
        if self.key.len() <= 17 {
            self.key.extend_from_slice(&bytes[..bytes.len().min(18)]);
        }
    }

    fn keep_bytes(&mut self, bytes: &[u8]) {
        if let Some((_, _, kept)) = &mut self.kept
            && kept.len() <= KEPT_VALUE_MAX
        {
            kept.extend_from_slice(&bytes[..bytes.len().min(KEPT_VALUE_MAX + 1)]);
        }
    }

    fn string_byte(&mut self, b: u8) {
        let Token::Str {
            key,
            escape,
            utf8_left,
            next_lo,
            next_hi,
        } = self.token
        else {
            return;
        };
        if key {
            self.key_bytes(&[b]);
        }
        self.keep_bytes(&[b]);
        let set = |this: &mut Self, escape: Escape, utf8_left: u8, next_lo: u8, next_hi: u8| {
            this.token = Token::Str {
                key,
                escape,
                utf8_left,
                next_lo,
                next_hi,
            };
        };
        if utf8_left > 0 {
            if b < next_lo || b > next_hi {
                self.fail("invalid UTF-8");
            } else {
                set(self, escape, utf8_left - 1, 0x80, 0xBF);
            }
            return;
        }
        match escape {
            Escape::None => match b {
                b'"' => {
                    self.token = Token::None;
                    if key {
                        self.key_done();
                    } else {
                        self.value_done();
                    }
                }
                b'\\' => {
                    if key {
                        self.key_escaped = true;
                    }
                    set(self, Escape::Backslash, 0, 0, 0);
                }
                0x00..=0x1F => {
                    self.fail("a control character in a string");
                }
                0x20..=0x7F => {}
                0xC2..=0xDF => set(self, escape, 1, 0x80, 0xBF),
                0xE0 => set(self, escape, 2, 0xA0, 0xBF),
                0xE1..=0xEC | 0xEE..=0xEF => set(self, escape, 2, 0x80, 0xBF),
                0xED => set(self, escape, 2, 0x80, 0x9F),
                0xF0 => set(self, escape, 3, 0x90, 0xBF),
                0xF1..=0xF3 => set(self, escape, 3, 0x80, 0xBF),
                0xF4 => set(self, escape, 3, 0x80, 0x8F),
                _ => {
                    self.fail("invalid UTF-8");
                }
            },
            Escape::Backslash => match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    set(self, Escape::None, 0, 0, 0)
                }
                b'u' => set(
                    self,
                    Escape::Hex {
                        left: 4,
                        value: 0,
                        low: false,
                    },
                    0,
                    0,
                    0,
                ),
                _ => {
                    self.fail("an invalid escape");
                }
            },
            Escape::Hex { left, value, low } => {
                let Some(digit) = (b as char).to_digit(16) else {
                    self.fail("an invalid \\u escape");
                    return;
                };
                let value = (value << 4) | digit as u16;
                if left > 1 {
                    set(
                        self,
                        Escape::Hex {
                            left: left - 1,
                            value,
                            low,
                        },
                        0,
                        0,
                        0,
                    );
                } else if low {
                    if (0xDC00..=0xDFFF).contains(&value) {
                        set(self, Escape::None, 0, 0, 0);
                    } else {
                        self.fail("a lone surrogate in a \\u escape");
                    }
                } else if (0xDC00..=0xDFFF).contains(&value) {
                    self.fail("a lone surrogate in a \\u escape");
                } else if (0xD800..=0xDBFF).contains(&value) {
                    set(self, Escape::PairBackslash, 0, 0, 0);
                } else {
                    set(self, Escape::None, 0, 0, 0);
                }
            }
            Escape::PairBackslash => {
                if b == b'\\' {
                    set(self, Escape::PairU, 0, 0, 0);
                } else {
                    self.fail("a lone surrogate in a \\u escape");
                }
            }
            Escape::PairU => {
                if b == b'u' {
                    set(
                        self,
                        Escape::Hex {
                            left: 4,
                            value: 0,
                            low: true,
                        },
                        0,
                        0,
                        0,
                    );
                } else {
                    self.fail("a lone surrogate in a \\u escape");
                }
            }
        }
    }

    fn number_byte(&mut self, n: Number, b: u8) {
        let next = match (n, b) {
            (Number::Minus, b'0') => Some(Number::Zero),
            (Number::Minus, b'1'..=b'9') => Some(Number::Int),
            (Number::Int, b'0'..=b'9') => Some(Number::Int),
            (Number::Zero | Number::Int, b'.') => Some(Number::Dot),
            (Number::Dot | Number::Frac, b'0'..=b'9') => Some(Number::Frac),
            (Number::Zero | Number::Int | Number::Frac, b'e' | b'E') => Some(Number::Exp),
            (Number::Exp, b'+' | b'-') => Some(Number::ExpSign),
            (Number::Exp | Number::ExpSign | Number::ExpDigits, b'0'..=b'9') => {
                Some(Number::ExpDigits)
            }
            _ => None,
        };
        match next {
            Some(next) => {
                self.keep_bytes(&[b]);
                self.token = Token::Num(next);
            }
            None if n.may_end() => {
                // The number ended; this byte belongs to what follows it.
                self.token = Token::None;
                self.value_done();
                self.structure(b);
            }
            None => {
                self.fail("an invalid number");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scan_in(doc: &[u8], cuts: &[usize]) -> (AnswerScan, Vec<u8>) {
        let mut scan = AnswerScan::default();
        let mut inside = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&doc.len())) {
            let cut = cut.clamp(at, doc.len());
            let chunk = &doc[at..cut];
            let range = scan.feed(chunk);
            inside.extend_from_slice(&chunk[range]);
            at = cut;
        }
        (scan, inside)
    }

    /// Whether the scan found `doc` to be one whole JSON document.
    fn valid(doc: &[u8], cuts: &[usize]) -> bool {
        let (scan, _) = scan_in(doc, cuts);
        scan.fault.is_none()
            && (scan.expect == Expect::Nothing && scan.token == Token::None
                || matches!(scan.token, Token::Num(n) if n.may_end() && scan.stack.is_empty()))
    }

    #[test]
    fn the_result_is_told_apart_and_its_closing_brace_held() {
        let doc = br#"{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"}"}],"isError":true,"resultType":"complete"},"id":7}"#;
        for cut in 0..doc.len() {
            let (scan, inside) = scan_in(doc, &[cut]);
            assert_eq!(
                inside,
                br#"{"content":[{"type":"text","text":"}"}],"isError":true,"resultType":"complete""#
            );
            assert_eq!(
                scan.finish(7),
                Ok(ResultEnd {
                    is_error: true,
                    result_type: Some("complete".into()),
                    has_members: true,
                })
            );
        }
    }

    #[test]
    fn what_is_not_our_answer_says_why() {
        let cases: &[(&[u8], &str)] = &[
            (br#"{"jsonrpc":"2.0","id":8,"result":{}}"#, "another id"),
            (
                br#"{"jsonrpc":"1.0","id":7,"result":{}}"#,
                "not JSON-RPC 2.0",
            ),
            (br#"{"jsonrpc":"2.0","id":7,"result":[]}"#, "not an object"),
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{},"error":{}}"#,
                "an error or a request",
            ),
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{},"result":{}}"#,
                "two results",
            ),
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{"is\u0045rror":true}}"#,
                "escapes",
            ),
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{"a":1}"#,
                "ended before",
            ),
            (
                br#"{"jsonrpc":"2.0","id":7,"result":{"a":01}}"#,
                "not valid JSON",
            ),
            (br#"{"jsonrpc":"2.0","id":7,"result":{"a":1}} x"#, "follows"),
            (br#"{"jsonrpc":"2.0","id":7}"#, "no result"),
        ];
        for (doc, why) in cases {
            let (scan, _) = scan_in(doc, &[]);
            let got = scan.finish(7).expect_err("refused");
            assert!(got.contains(why), "{}: {got}", String::from_utf8_lossy(doc));
        }
        let (scan, _) = scan_in(br#"{"id":"7","jsonrpc":"2.0","result":{}}"#, &[3]);
        assert_eq!(
            scan.finish(7).map(|e| e.has_members),
            Ok(false),
            "a string id names the call too"
        );
    }

    #[test]
    fn nesting_stops_where_serde_json_stops() {
        for depth in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1] {
            let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let serde = serde_json::from_slice::<serde_json::Value>(doc.as_bytes()).is_ok();
            assert_eq!(valid(doc.as_bytes(), &[]), serde, "depth {depth}");
        }
    }

    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            (-1e6f64..1e6).prop_map(|f| format!("{f:e}")),
            "\\PC{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just(r#""\ud83d\ude00 \u00e9\n""#.to_string()),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[ {} ]", v.join(" ,"))),
                prop::collection::vec(("[a-z]{0,3}", inner), 0..4).prop_map(|v| {
                    let members: Vec<String> =
                        v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest! {
        /// Split anywhere, a document is valid for the scan exactly when serde_json parses it
        /// into values — also after a byte of it is changed, cut or doubled.
        #[test]
        fn the_scan_agrees_with_serde_json(
            text in json_text(),
            cuts in prop::collection::vec(0usize..200, 0..4),
            edit in 0usize..3,
            at in 0usize..200,
            byte in any::<u8>(),
        ) {
            let mut doc = text.into_bytes();
            if !doc.is_empty() {
                let at = at % doc.len();
                match edit {
                    0 => doc[at] = byte,
                    1 => { doc.truncate(at); }
                    _ => { let b = doc[at]; doc.insert(at, b); }
                }
            }
            let mut cuts = cuts;
            cuts.sort_unstable();
            let parsed = serde_json::from_slice::<serde_json::Value>(&doc);
            // A number too big for f64 is serde_json's refusal, not the grammar's: an agent
            // whose parser refuses it gets an answer it cannot read, and nothing more.
            prop_assume!(!parsed.as_ref().is_err_and(|e| e.to_string().contains("out of range")));
            let serde = parsed.is_ok();
            prop_assert_eq!(valid(&doc, &cuts), serde, "{}", String::from_utf8_lossy(&doc));
        }

        /// Whatever the chunks, the result's bytes are the same, and they are the result's
        /// JSON but its closing brace.
        #[test]
        fn the_results_bytes_do_not_depend_on_the_chunks(
            text in json_text(),
            cuts in prop::collection::vec(0usize..300, 0..5),
        ) {
            let doc = format!(r#"{{"jsonrpc":"2.0","id":3,"result":{{"x":{text}}}}}"#);
            let mut cuts = cuts;
            cuts.sort_unstable();
            let (scan, inside) = scan_in(doc.as_bytes(), &cuts);
            prop_assert_eq!(
                String::from_utf8(inside).unwrap(),
                format!(r#"{{"x":{text}"#)
            );
            prop_assert!(scan.finish(3).is_ok());
        }
    }
}
