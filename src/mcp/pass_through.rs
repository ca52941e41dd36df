//! Tool results passed through as the server sent them: the sidecar checks a `tools/call`
//! answer (JSON-RPC 2.0, our request's id, a result object, whether it is `isError` or asks
//! for input) and hands the result's bytes on to the agent under the agent's own id, without
//! parsing it into values and writing it out again. A big answer is then held once, as bytes,
//! and what it holds of the response budget is given back when the agent has it.
//!
//! ```text
//! upstream body ─ one serde pass: valid, envelope borrowed ─ the result's flags ─┬ RawResult { bytes, span, isError, resultType }
//!                                                                               └ anything unusual: None (the caller parses it)
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
        // One pass of serde_json over the whole document validates it and borrows the
        // envelope's members (keys decoded, so an escaped key is read as the key it spells);
        // the result object is then read once more for its two flags. Nothing is allocated
        // but a decoded `resultType`.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None; // a batch, or not an object
        }
        let envelope: Envelope<'_> = serde_json::from_slice(&body).ok()?;
        if envelope.method.0 || envelope.error.0 || envelope.jsonrpc.as_deref() != Some("2.0") {
            return None;
        }
        if !is_id(envelope.id?.get(), id) {
            return None;
        }
        let result = envelope.result?.get();
        if !result.starts_with('{') {
            return None;
        }
        let flags: Flags<'_> = serde_json::from_str(result).ok()?;
        let start = result.as_ptr() as usize - body.as_ptr() as usize;
        let end = start + result.len();
        Some(RawResult {
            is_error: flags.is_error.is_some_and(|v| v.get() == "true"),
            result_type: flags
                .result_type
                .and_then(|v| serde_json::from_str::<String>(v.get()).ok()),
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

/// What [`RawResult::of_answer`] reads of an answer: borrowed from its bytes. A member that
/// appears twice makes the whole unreadable (serde refuses it): the caller's general path.
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
    /// An error answer (even `"error": null` beside a result: the general path decides).
    #[serde(default)]
    error: Present,
}

/// The result's members the sidecar acts on.
#[derive(serde::Deserialize)]
struct Flags<'a> {
    #[serde(rename = "isError", borrow)]
    is_error: Option<&'a RawValue>,
    #[serde(rename = "resultType", borrow)]
    result_type: Option<&'a RawValue>,
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

/// Whether the JSON text `raw` is our request id: the number, or its digits as a string
/// (spelt as `id.to_string()` spells them; any other spelling is the general path's to read).
fn is_id(raw: &str, id: u64) -> bool {
    let text = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .unwrap_or(raw);
    let canonical =
        text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    canonical && text.parse::<u64>() == Ok(id)
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
    fn escaped_keys_are_read_as_the_keys_they_spell() {
        // An agent's JSON parser decodes them too: `\u0069sError` is isError to it.
        let r = raw(
            r#"{"jsonrpc":"2.0","\u0069d":"7","result":{"\u0069sError":true,"resultType":"\u0063omplete"}}"#,
            7,
        )
        .expect("an answer");
        assert!(r.is_error);
        assert_eq!(r.result_type.as_deref(), Some("complete"));
        assert_eq!(
            r.json(),
            br#"{"\u0069sError":true,"resultType":"\u0063omplete"}"#
        );
        let zero = raw(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#, 0).expect("id 0");
        assert!(!zero.is_error);
    }
}
