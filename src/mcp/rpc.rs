//! JSON-RPC 2.0 messages as MCP uses them: building requests and picking our response out of
//! whatever a server sent (a single message, a batch, or a stream of them).

use serde_json::{Map, Value, json};

/// The answer to one of our requests.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcReply {
    Result(Map<String, Value>),
    /// A JSON-RPC error. Only the code and the structured `data` are kept: the message is the
    /// server's free text, which we never repeat.
    Error {
        code: i64,
        data: Option<Value>,
    },
}

/// What one JSON value received from the server is, relative to the request we are waiting for.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// The response to our request.
    Reply(RpcReply),
    /// A notification, a server request, or a response to someone else: not ours to handle,
    /// handed back whole (of a batch, what is left of it).
    Other(Value),
    /// Not JSON-RPC at all.
    Malformed(&'static str),
}

/// A request to a server, written out as JSON text without building the envelope as values
/// first and without copying `params` (the sidecar sends one for every call, and may send it
/// again). `added_meta`'s members (the modern era's own) are written into the request's `_meta`
/// over the caller's, which then need not be an object. Inside a traced span, a request with a
/// `_meta` carries that span's trace context there (SEP-414: `traceparent`, `tracestate`)
/// instead of the caller's: the upstream's parent is this process's span.
pub fn request_json(
    id: u64,
    method: &str,
    params: &Map<String, Value>,
    added_meta: Option<&Map<String, Value>>,
) -> Vec<u8> {
    serde_json::to_vec(&Request::new(id, method, params, added_meta))
        .expect("a JSON value serialises")
}

/// [`request_json`] as a value (for the transports' writers that take one).
pub fn request(
    id: u64,
    method: &str,
    params: &Map<String, Value>,
    added_meta: Option<&Map<String, Value>>,
) -> Value {
    serde_json::to_value(Request::new(id, method, params, added_meta))
        .expect("a JSON value serialises")
}

/// A request as it is written out: `params` as the caller holds them, with `_meta` (when it is
/// written over) merged member by member while writing.
#[derive(serde::Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: Params<'a>,
}

impl<'a> Request<'a> {
    fn new(
        id: u64,
        method: &'a str,
        params: &'a Map<String, Value>,
        added: Option<&'a Map<String, Value>>,
    ) -> Self {
        let own = params.get("_meta");
        // The trace context goes into a `_meta` that is (or is made) an object.
        let merged = added.is_some() || matches!(own, Some(Value::Object(_)));
        let meta = merged.then(|| Meta {
            own: own.and_then(Value::as_object),
            added,
            trace: crate::telemetry::trace_meta(),
        });
        Request {
            jsonrpc: "2.0",
            id,
            method,
            params: Params { params, meta },
        }
    }
}

struct Params<'a> {
    params: &'a Map<String, Value>,
    /// The `_meta` written in place of the caller's, when there is one to merge.
    meta: Option<Meta<'a>>,
}

struct Meta<'a> {
    own: Option<&'a Map<String, Value>>,
    added: Option<&'a Map<String, Value>>,
    trace: Option<crate::telemetry::TraceMeta>,
}

impl serde::Serialize for Params<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.params {
            if key != "_meta" || self.meta.is_none() {
                map.serialize_entry(key, value)?;
            }
        }
        if let Some(meta) = &self.meta {
            map.serialize_entry("_meta", meta)?;
        }
        map.end()
    }
}

impl serde::Serialize for Meta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let traced =
            |key: &str| self.trace.is_some() && (key == "traceparent" || key == "tracestate");
        let added = |key: &str| self.added.is_some_and(|a| a.contains_key(key));
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.own.into_iter().flatten() {
            if !added(key) && !traced(key) {
                map.serialize_entry(key, value)?;
            }
        }
        for (key, value) in self.added.into_iter().flatten() {
            if !traced(key) {
                map.serialize_entry(key, value)?;
            }
        }
        if let Some(trace) = &self.trace {
            map.serialize_entry("traceparent", &trace.traceparent)?;
            if let Some(state) = &trace.tracestate {
                map.serialize_entry("tracestate", state)?;
            }
        }
        map.end()
    }
}

/// A JSON-RPC message with `id` and `members`, which are moved in. (`json!` would copy each
/// member value through serialisation: a request's params, or a result the size of a resource,
/// copied once more per message — issue 24's profile.)
pub fn envelope<const N: usize>(id: Value, members: [(&str, Value); N]) -> Value {
    let mut message = Map::new();
    message.insert("jsonrpc".into(), Value::from("2.0"));
    message.insert("id".into(), id);
    for (key, value) in members {
        message.insert(key.into(), value);
    }
    Value::Object(message)
}

pub fn notification(method: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": method})
}

/// The reply to request `id` in the body of an HTTP error answer, when the body is JSON and
/// holds one (era detection reads the JSON-RPC error of a 400; anything else is ignored).
pub fn reply_in_error_body(is_json: bool, body: &[u8], id: u64) -> Option<RpcReply> {
    is_json
        .then(|| serde_json::from_slice::<Value>(body).ok())
        .flatten()
        .and_then(|v| match classify(v, id) {
            Incoming::Reply(r) => Some(r),
            _ => None,
        })
}

/// Classifies one received value (an object or a batch) against the id we wait for. Takes the
/// value: our reply's result moves out of it instead of being copied (a page of a large tool
/// list is most of what a probe holds, issue 24).
pub fn classify(value: Value, id: u64) -> Incoming {
    match value {
        Value::Array(batch) => {
            if batch.is_empty() {
                return Incoming::Malformed("an empty JSON-RPC batch");
            }
            let mut rest = Vec::new();
            for item in batch {
                match classify(item, id) {
                    Incoming::Other(item) => rest.push(item),
                    ours_or_malformed => return ours_or_malformed,
                }
            }
            Incoming::Other(Value::Array(rest))
        }
        Value::Object(obj) => classify_object(obj, id),
        _ => Incoming::Malformed("a JSON value that is not a JSON-RPC message"),
    }
}

fn classify_object(mut obj: Map<String, Value>, id: u64) -> Incoming {
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Incoming::Malformed("a JSON object that is not a JSON-RPC 2.0 message");
    }
    if obj.contains_key("method") {
        return Incoming::Other(Value::Object(obj));
    }
    let ours = match obj.get("id") {
        Some(Value::Number(n)) => n.as_u64() == Some(id),
        Some(Value::String(s)) => s == &id.to_string(),
        // An error with a null id answers a request the server could not parse: ours.
        Some(Value::Null) | None => obj.contains_key("error"),
        _ => return Incoming::Malformed("a JSON-RPC response with an invalid id"),
    };
    if !ours {
        return Incoming::Other(Value::Object(obj));
    }
    match (obj.remove("result"), obj.remove("error")) {
        (Some(Value::Object(result)), None) => Incoming::Reply(RpcReply::Result(result)),
        (Some(_), None) => Incoming::Malformed("a JSON-RPC result that is not an object"),
        (None, Some(Value::Object(mut err))) => match err.get("code").and_then(Value::as_i64) {
            Some(code) => Incoming::Reply(RpcReply::Error {
                code,
                data: err.remove("data"),
            }),
            None => Incoming::Malformed("a JSON-RPC error without an integer code"),
        },
        _ => Incoming::Malformed("a JSON-RPC response with neither a result nor an error"),
    }
}

/// What the server answered to one POST.
#[derive(Debug)]
pub enum Answer {
    /// A JSON-RPC response to our request (2xx).
    Reply(RpcReply),
    /// A non-2xx status other than 401/403, with the JSON-RPC error it carried, if any.
    Status(http::StatusCode, Option<RpcReply>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_written_out_directly_is_the_request_as_values() {
        let params = json!({"name": "t", "arguments": {"q": "\"x\"", "n": [1, 2.5, null]},
                            "_meta": {"progressToken": 3}});
        let Value::Object(params) = params else {
            unreachable!()
        };
        let text = request_json(7, "tools/call", &params, None);
        let read: Value = serde_json::from_slice(&text).expect("JSON");
        assert_eq!(
            read,
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
        );
        assert_eq!(request(7, "tools/call", &params, None), read);
    }

    #[test]
    fn added_meta_is_written_over_the_callers_own() {
        let added = json!({"io.modelcontextprotocol/protocolVersion": "v2", "b": {"x": 1}});
        let added = added.as_object().expect("an object");
        let with = |params: Value| {
            let text = request_json(3, "m", params.as_object().expect("an object"), Some(added));
            let read: Value = serde_json::from_slice(&text).expect("JSON");
            assert_eq!(
                read,
                request(3, "m", params.as_object().expect("an object"), Some(added))
            );
            read["params"].clone()
        };
        assert_eq!(
            with(json!({"name": "t", "_meta": {"progressToken": 3, "b": "mine"}})),
            json!({"name": "t", "_meta": {"progressToken": 3, "b": {"x": 1},
                   "io.modelcontextprotocol/protocolVersion": "v2"}})
        );
        // No `_meta` of the caller's, or one that is not an object: the added members alone.
        for params in [json!({"name": "t"}), json!({"name": "t", "_meta": 5})] {
            assert_eq!(
                with(params),
                json!({"name": "t", "_meta": {"b": {"x": 1},
                       "io.modelcontextprotocol/protocolVersion": "v2"}})
            );
        }
        // Tracing off (never set up in unit tests): the agent's own trace context passes.
        let traced = json!({"_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "a=1"}});
        assert_eq!(
            with(traced.clone())["_meta"]["traceparent"],
            traced["_meta"]["traceparent"]
        );
        assert_eq!(with(traced.clone())["_meta"]["tracestate"], "a=1");
        // Nothing added: the caller's `_meta` as it is, whatever it is.
        let text = request_json(3, "m", json!({"_meta": 5}).as_object().unwrap(), None);
        let read: Value = serde_json::from_slice(&text).expect("JSON");
        assert_eq!(read["params"], json!({"_meta": 5}));
    }

    #[test]
    fn picks_our_reply_out_of_a_batch() {
        let v = json!([
            {"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
            {"jsonrpc": "2.0", "id": 7, "result": {"tools": []}}
        ]);
        assert!(matches!(
            classify(v.clone(), 7),
            Incoming::Reply(RpcReply::Result(_))
        ));
        assert_eq!(classify(v.clone(), 8), Incoming::Other(v));
    }

    #[test]
    fn errors_keep_code_and_data_only() {
        let v = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32022, "message": "secret text", "data": {"supported": ["x"]}}});
        assert_eq!(
            classify(v, 1),
            Incoming::Reply(RpcReply::Error {
                code: -32022,
                data: Some(json!({"supported": ["x"]}))
            })
        );
    }

    #[test]
    fn non_json_rpc_is_malformed() {
        assert!(matches!(
            classify(json!({"foo": 1}), 1),
            Incoming::Malformed(_)
        ));
        assert!(matches!(
            classify(json!("hello"), 1),
            Incoming::Malformed(_)
        ));
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "id": 1, "result": []}), 1),
            Incoming::Malformed(_)
        ));
    }
}
