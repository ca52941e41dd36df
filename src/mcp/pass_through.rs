//! Tool results passed through as the server sent them: the sidecar checks a `tools/call`
//! answer (JSON-RPC 2.0, our request's id, a result object, whether it is `isError` or asks
//! for input) and hands the result's bytes on to the agent under the agent's own id, without
//! parsing it into values and writing it out again. A big answer is then held once, as bytes,
//! and what it holds of the response budget is given back when the agent has it.
//!
//! ```text
//! upstream body ─ validate (no allocation) ─ locate "result" ─┬ RawResult { bytes, span, isError, resultType }
//!                                                             └ anything unusual: None (the caller parses it)
//! RawResult ─► chunks: {"jsonrpc":"2.0","id":<agent's>,"result": │ the server's bytes │ }
//! ```

use std::sync::Arc;

use bytes::Bytes;
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
        // The whole document is valid JSON (checked without building it), so the scanner below
        // only has to find where values end.
        serde_json::from_slice::<serde::de::IgnoredAny>(&body).ok()?;
        let mut jsonrpc_ok = false;
        let mut id_ok = false;
        let mut result = None;
        for (key, (start, end)) in members(&body, 0)? {
            let value = &body[start..end];
            match key {
                b"jsonrpc" => jsonrpc_ok = value == b"\"2.0\"",
                b"id" => {
                    id_ok = match serde_json::from_slice::<Value>(value).ok()? {
                        Value::Number(n) => n.as_u64() == Some(id),
                        Value::String(s) => s == id.to_string(),
                        _ => false,
                    }
                }
                b"result" => result = Some((start, end)),
                b"method" | b"error" => return None,
                _ => {}
            }
        }
        let (start, end) = result.filter(|_| jsonrpc_ok && id_ok)?;
        if body[start] != b'{' {
            return None;
        }
        let mut is_error = false;
        let mut result_type = None;
        for (key, (s, e)) in members(&body, start)? {
            match key {
                b"isError" => is_error = &body[s..e] == b"true",
                b"resultType" => {
                    result_type = match serde_json::from_slice::<Value>(&body[s..e]).ok()? {
                        Value::String(t) => Some(t),
                        _ => None,
                    }
                }
                _ => {}
            }
        }
        Some(RawResult {
            body,
            start,
            end,
            is_error,
            result_type,
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

/// One member of an object: its key's bytes and its value's span.
type Member<'b> = (&'b [u8], (usize, usize));

/// The members of the object starting at `at` (after whitespace): each key's bytes (a key with
/// escapes makes the whole None: the caller's general path) and its value's span.
/// `body` is valid JSON.
fn members(body: &[u8], at: usize) -> Option<Vec<Member<'_>>> {
    let mut i = skip_ws(body, at);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut out = Vec::new();
    loop {
        i = skip_ws(body, i);
        match body.get(i)? {
            b'}' => return Some(out),
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(body, i)?;
        let key = &body[i + 1..key_end - 1];
        if key.contains(&b'\\') {
            return None;
        }
        i = skip_ws(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(body, i + 1);
        let end = value_end(body, start)?;
        out.push((key, (start, end)));
        i = end;
    }
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while body.get(i).is_some_and(|b| b" \t\r\n".contains(b)) {
        i += 1;
    }
    i
}

/// The index after the string that starts (with its quote) at `i`.
fn string_end(body: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let k = j + memchr2(b'"', b'\\', &body[j..])?;
        if body[k] == b'\\' {
            j = k + 2;
        } else {
            return Some(k + 1);
        }
    }
}

fn memchr2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == a || c == b)
}

/// The index after the value that starts at `i`.
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
        _ => {
            let mut j = i;
            while body.get(j).is_some_and(|b| !b",}] \t\r\n".contains(b)) {
                j += 1;
            }
            Some(j)
        }
    }
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
            r#"{"jsonrpc":"2.0","\u0069d":7,"result":{}}"#,
        ] {
            assert!(raw(text, 7).is_none(), "{text}");
        }
    }
}
