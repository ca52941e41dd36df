//! Tool results passed through as the server sent them: the sidecar checks a `tools/call`
//! answer (JSON-RPC 2.0, our request's id, a result object, whether it is `isError` or asks
//! for input) and hands the result's bytes on to the agent under the agent's own id, without
//! parsing it into values and writing it out again. A big answer is then held once, as bytes,
//! and what it holds of the response budget is given back when the agent has it.
//!
//! ```text
//! upstream body ─ serde_json: valid, envelope borrowed ─ scan: the result's flags ─┬ RawResult { bytes, span, isError, resultType }
//!                                                                                 └ anything unusual: None (the caller parses it)
//! RawResult ─► chunks: {"jsonrpc":"2.0","id":<agent's>,"result": │ the server's bytes │ }
//! ```

use std::sync::Arc;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::budget::Allowance;

/// A `tools/call` result object, kept as the server's bytes.
#[derive(Clone)]
pub struct RawResult {
    body: Bytes,
    start: usize,
    end: usize,
    /// `isError: true`.
    pub is_error: bool,
    /// The value of `resultType`, when it is a string.
    pub result_type: Option<String>,
    /// What the answer holds of the response budget (given back when the last clone goes).
    held: Option<Arc<Allowance>>,
}

impl std::fmt::Debug for RawResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawResult")
            .field("bytes", &(self.end - self.start))
            .field("is_error", &self.is_error)
            .field("result_type", &self.result_type)
            .finish()
    }
}

impl PartialEq for RawResult {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl RawResult {
    /// The result in `body` when it is the answer to request `id`: valid JSON, a JSON-RPC 2.0
    /// response (not a batch, not a request) whose `result` is an object. Anything else (an
    /// error answer, a batch, another id, escapes in the envelope's keys) is None, for the
    /// caller's general path.
    pub fn of_answer(body: Bytes, id: u64) -> Option<RawResult> {
        // serde_json reads the whole answer once: it is valid (grammar and UTF-8), and its
        // envelope's members are borrowed (keys decoded: an escaped key is the key it spells).
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None; // a batch, or not an object
        }
        let envelope: Envelope<'_> = serde_json::from_slice(&body).ok()?;
        if envelope.method.0 || envelope.error.0 || envelope.jsonrpc.as_deref() != Some("2.0") {
            return None;
        }
        if !is_id(envelope.id?.get().as_bytes(), id) {
            return None;
        }
        let result = envelope.result?.get();
        let start = result.as_ptr() as usize - body.as_ptr() as usize;
        let end = start + result.len();
        let text = |(start, end): (usize, usize)| &body[start..end];
        if body[start] != b'{' {
            return None;
        }
        let (mut is_error, mut result_type) = (None, None);
        members(&body, start, |key, span| {
            let slot = match key {
                b"isError" => &mut is_error,
                b"resultType" => &mut result_type,
                _ => return Some(()),
            };
            slot.replace(span).is_none().then_some(())
        })?;
        Some(RawResult {
            is_error: is_error.is_some_and(|span| text(span) == b"true"),
            result_type: result_type
                .and_then(|span| serde_json::from_slice::<String>(text(span)).ok()),
            body,
            start,
            end,
            held: None,
        })
    }

    /// A result that was parsed (an answer the general path read: one [`of_answer`](Self::of_answer)
    /// did not take), written out once to go on as bytes.
    pub fn of_map(result: &Map<String, Value>) -> RawResult {
        let body = Bytes::from(serde_json::to_vec(result).expect("JSON serialises"));
        RawResult {
            end: body.len(),
            body,
            start: 0,
            is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
            result_type: result
                .get("resultType")
                .and_then(Value::as_str)
                .map(str::to_string),
            held: None,
        }
    }

    /// Keeps `allowance` (what the answer took of the response budget) until the result is
    /// dropped: after the agent's response body has been written out.
    pub fn holding(mut self, allowance: Arc<Allowance>) -> Self {
        self.held = Some(allowance);
        self
    }

    /// The result object's JSON text, exactly as the server sent it.
    pub fn json(&self) -> &[u8] {
        &self.body[self.start..self.end]
    }

    /// The result parsed (a reply that must be changed, or framed where raw bytes cannot go).
    pub fn to_map(&self) -> Map<String, Value> {
        serde_json::from_slice(self.json()).unwrap_or_default()
    }

    /// The JSON-RPC response carrying this result as the agent's request `id` (its JSON
    /// text), with `"resultType": "complete"` put first when `complete` and the server gave
    /// none. Only the envelope is new: the server's bytes are shared, not copied.
    pub fn response_chunks(&self, id: &Value, complete: bool) -> Vec<Bytes> {
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        head.extend_from_slice(&serde_json::to_vec(id).expect("an id serialises"));
        head.extend_from_slice(b",\"result\":");
        let mut chunks = Vec::with_capacity(3);
        if complete && self.result_type.is_none() {
            // `{` … `}`: insert the member after the brace.
            let inner = &self.body[self.start + 1..self.end];
            let empty = inner.iter().all(|b| b" \t\r\n}".contains(b));
            head.extend_from_slice(b"{\"resultType\":\"complete\"");
            if empty {
                head.extend_from_slice(b"}");
                chunks.push(Bytes::from(head));
            } else {
                head.push(b',');
                chunks.push(Bytes::from(head));
                chunks.push(self.body.slice(self.start + 1..self.end));
            }
        } else {
            chunks.push(Bytes::from(head));
            chunks.push(self.body.slice(self.start..self.end));
        }
        chunks.push(Bytes::from_static(b"}"));
        chunks
    }
}

/// What [`RawResult::of_answer`] reads of an answer's envelope, borrowed from its bytes. A
/// member that appears twice makes the whole unreadable (serde refuses it): the caller's
/// general path, which decides which copy counts.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    /// A request, not an answer.
    #[serde(default)]
    method: Present,
    /// An error answer (even `"error": null` beside a result).
    #[serde(default)]
    error: Present,
}

/// Whether a member is there at all, whatever its value (`null` included).
#[derive(Default)]
struct Present(bool);

impl<'de> serde::Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Present(true))
    }
}

/// Calls `each` with every member of the object starting at `at` (after whitespace): its key's
/// bytes and its value's span, until `each` says None. A key with escapes makes the whole None
/// (the caller's general path reads it decoded). `body` is valid JSON.
fn members(
    body: &[u8],
    at: usize,
    mut each: impl FnMut(&[u8], (usize, usize)) -> Option<()>,
) -> Option<()> {
    let mut i = skip_ws(body, at);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(body, i);
        match body.get(i)? {
            b'}' => return Some(()),
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(body, i)?;
        let key = &body[i + 1..key_end - 1];
        if memchr::memchr(b'\\', key).is_some() {
            return None;
        }
        // Valid JSON: after the key come whitespace, a colon, whitespace, the value.
        i = skip_ws(body, skip_ws(body, key_end) + 1);
        let end = value_end(body, i)?;
        each(key, (i, end))?;
        i = end;
    }
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while i < body.len() && matches!(body[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// The index after the string that starts (with its quote) at `i`.
fn string_end(body: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = j + memchr::memchr2(b'"', b'\\', body.get(j..)?)?;
        if body[k] == b'\\' {
            j = k + 2;
        } else {
            return Some(k + 1);
        }
    }
}

/// The index after the (valid) value that starts at `i`.
fn value_end(body: &[u8], i: usize) -> Option<usize> {
    match body.get(i)? {
        b'"' => string_end(body, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match body.get(j)? {
                    b'"' => {
                        j = string_end(body, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        // A number or a literal: up to the next delimiter.
        _ => Some(
            body[i..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                .map_or(body.len(), |n| i + n),
        ),
    }
}

/// Whether the JSON text `raw` is our request id: the number, or its digits as a string
/// (spelt as `id.to_string()` spells them; any other spelling is the general path's to read).
fn is_id(raw: &[u8], id: u64) -> bool {
    let digits = raw
        .strip_prefix(b"\"")
        .and_then(|r| r.strip_suffix(b"\""))
        .unwrap_or(raw);
    let canonical =
        digits.iter().all(u8::is_ascii_digit) && (digits == b"0" || !digits.starts_with(b"0"));
    canonical
        && std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            == Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(text: &str, id: u64) -> Option<RawResult> {
        RawResult::of_answer(Bytes::from(text.to_string()), id)
    }

    fn response(r: &RawResult, id: Value, complete: bool) -> Value {
        let bytes: Vec<u8> = r.response_chunks(&id, complete).concat();
        serde_json::from_slice(&bytes).expect("the response is JSON")
    }

    #[test]
    fn the_result_passes_under_the_agents_id() {
        let r = raw(
            r#" {"id": 7, "result": {"content": [{"type":"text","text":"a \"}\" b"}], "isError": true}, "jsonrpc":"2.0"} "#,
            7,
        )
        .expect("an answer");
        assert!(r.is_error);
        assert_eq!(
            response(&r, json!("agent-1"), false),
            json!({"jsonrpc": "2.0", "id": "agent-1",
                   "result": {"content": [{"type": "text", "text": "a \"}\" b"}], "isError": true}})
        );
        assert_eq!(
            response(&r, json!(3), true)["result"]["resultType"],
            "complete"
        );
        let empty = raw(r#"{"jsonrpc":"2.0","id":"9","result":{ }}"#, 9).expect("an answer");
        assert_eq!(
            response(&empty, json!(1), true)["result"],
            json!({"resultType": "complete"})
        );
        let asks = raw(
            r#"{"jsonrpc":"2.0","id":9,"result":{"resultType":"input_required"}}"#,
            9,
        )
        .expect("an answer");
        assert_eq!(asks.result_type.as_deref(), Some("input_required"));
        assert_eq!(
            response(&asks, json!(1), true)["result"],
            json!({"resultType": "input_required"})
        );
    }

    #[test]
    fn anything_unusual_is_left_to_the_general_path() {
        for text in [
            r#"{"jsonrpc":"2.0","id":8,"result":{}}"#,
            r#"{"jsonrpc":"1.0","id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":[]}"#,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"x","result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":7,"result":{}}]"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}} x"#,
            // A member twice: which one counts is the general path's to decide.
            r#"{"jsonrpc":"2.0","id":7,"result":{},"result":{"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"isError":false,"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":"07","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7.0,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":2.0,"id":7,"result":{}}"#,
            r#"["2.0",7,{}]"#,
        ] {
            assert!(raw(text, 7).is_none(), "{text}");
        }
        assert!(
            RawResult::of_answer(
                Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":\"\xff\"}}"),
                7
            )
            .is_none()
        );
    }

    #[test]
    fn escaped_keys_and_ids_of_another_spelling_go_to_the_general_path() {
        // The envelope's keys are read decoded.
        let r = raw(r#"{"jsonrpc":"2.0","\u0069d":7,"result":{"a":1}}"#, 7).expect("an answer");
        assert_eq!(r.json(), br#"{"a":1}"#);
        // The result's are read decoded there: `\u0069sError` is isError to an agent's parser too.
        for text in [
            r#"{"jsonrpc":"2.0","id":7,"result":{"\u0069sError":true}}"#,
            r#"{"jsonrpc":"2.0","id":"\u0037","result":{}}"#,
        ] {
            assert!(raw(text, 7).is_none(), "{text}");
        }
        // Escapes elsewhere are the result's own business.
        let r = raw(
            r#"{"jsonrpc":"2.0","id":"7","result":{"text":"a\\\"}\u00e9","isError":true,"resultType":"\u0063omplete"}}"#,
            7,
        )
        .expect("an answer");
        assert!(r.is_error);
        assert_eq!(r.result_type.as_deref(), Some("complete"));
        let zero = raw(
            r#"{"jsonrpc":"2.0","id":0,"result":{"n":[1,{"a":[]}],"b":false}}"#,
            0,
        )
        .expect("id 0");
        assert_eq!(zero.json(), br#"{"n":[1,{"a":[]}],"b":false}"#);
    }

    /// Any JSON value (strings with quotes, backslashes, control characters and non-ASCII).
    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z\"\\\\/{}\\[\\],:\\n\t é\u{1F600}\u{0}]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map("[a-zA-Z\"\\\\é]{0,8}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever a server's result holds, the pass-through reads the same result, isError
        /// and resultType as parsing the answer whole would (the general path's reading), and
        /// an answer cut short is never passed on.
        #[test]
        fn the_scan_reads_what_parsing_reads(
            // The result's own keys without escapes (a key with escapes goes to the general
            // path); the values' keys with them.
            result in proptest::collection::btree_map("[a-zA-Z é]{0,8}", any_json(), 0..6),
            flags in proptest::option::of((proptest::prelude::any::<bool>(), any_json())),
            pretty in proptest::prelude::any::<bool>(),
            cut in 1usize..40,
        ) {
            let mut result: Map<String, Value> = result.into_iter().collect();
            if let Some((is_error, result_type)) = flags {
                result.insert("isError".into(), Value::from(is_error));
                result.insert("resultType".into(), result_type);
            }
            let answer = json!({"jsonrpc": "2.0", "id": 7, "result": result});
            let text = if pretty {
                serde_json::to_vec_pretty(&answer).unwrap()
            } else {
                serde_json::to_vec(&answer).unwrap()
            };
            let raw = RawResult::of_answer(Bytes::from(text.clone()), 7)
                .expect("a plain answer passes through");
            let read: Map<String, Value> = serde_json::from_slice(raw.json()).unwrap();
            proptest::prop_assert_eq!(&read, &result);
            proptest::prop_assert_eq!(raw.is_error, result.get("isError") == Some(&Value::Bool(true)));
            proptest::prop_assert_eq!(
                raw.result_type.as_deref(),
                result.get("resultType").and_then(Value::as_str)
            );
            let short = &text[..text.len().saturating_sub(cut)];
            proptest::prop_assert!(RawResult::of_answer(Bytes::copy_from_slice(short), 7).is_none());
        }
    }
}
