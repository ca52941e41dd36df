//! A tool's answer too big to hold, on its way to the agent as it arrives
//! ([`crate::mcp::streamed`] reads and checks it upstream): written under the agent's own id,
//! as a JSON body or as one event on the agent's stream, within the call's timeout. The
//! result's closing brace goes last, once the whole answer was found valid and complete; an
//! answer that fails on the way (the server's JSON, its size bound, the timeout, a server that
//! asks for input) is broken off, so the agent never holds an answer that was not the
//! server's. The call's audit line is written when the answer has ended — or when the agent
//! stopped reading it.
//!
//! ```text
//! {"jsonrpc":"2.0","id":<agent's>,"result":  │ the server's result, as it comes │  }}   (audit)
//!                                                       └─ fails: broken off, no brace (audit)
//! ```

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::response::Response;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::mcp::McpError;
use crate::mcp::streamed::{Piece, StreamedResult};

use super::audit::Outcome;
use super::calls::CallEnd;

/// A streamed answer and what its end writes.
pub struct StreamedReply {
    result: StreamedResult,
    /// The call's deadline and its length (for the reason).
    deadline: Instant,
    timeout: Duration,
    /// Written once, when the answer ends (dropped unended: the agent stopped reading).
    end: Option<CallEnd>,
    /// The head was written.
    started: bool,
}

impl std::fmt::Debug for StreamedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedReply")
            .field("result", &self.result)
            .finish()
    }
}

impl PartialEq for StreamedReply {
    fn eq(&self, _: &Self) -> bool {
        false
    }
}

impl Drop for StreamedReply {
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            end.ended(
                Outcome::OutcomeUnknown,
                Some("the agent stopped reading the answer"),
            );
        }
    }
}

/// Why the agent's copy was broken off (already audited).
struct BrokenOff;

impl StreamedReply {
    /// A result whose call has not set its end yet ([`Self::ends_with`]).
    pub(super) fn unended(result: StreamedResult) -> Self {
        StreamedReply {
            result,
            deadline: Instant::now(),
            timeout: Duration::ZERO,
            end: None,
            started: false,
        }
    }

    /// The call's deadline (and its length, for the reason) and what its end writes.
    pub(super) fn ends_with(&mut self, end: CallEnd, deadline: Instant, timeout: Duration) {
        self.end = Some(end);
        self.deadline = deadline;
        self.timeout = timeout;
    }

    /// The next bytes of the agent's JSON-RPC response to request `id`; None once it is whole.
    async fn next_bytes(&mut self, id: &Value, modern: bool) -> Option<Result<Bytes, BrokenOff>> {
        if !self.started {
            self.started = true;
            let mut head = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
            head.extend_from_slice(&serde_json::to_vec(id).expect("an id serialises"));
            head.extend_from_slice(b",\"result\":");
            return Some(Ok(Bytes::from(head)));
        }
        let end = self.end.as_ref()?;
        let piece = match tokio::time::timeout_at(self.deadline, self.result.next()).await {
            Ok(piece) => piece,
            Err(_) => {
                let why = format!(
                    "the answer did not end within the call's {}",
                    super::calls::humanize(self.timeout)
                );
                return Some(Err(self.broken_off(Outcome::Timeout, &why)));
            }
        };
        let facts = match piece {
            Piece::Bytes(bytes) => return Some(Ok(bytes)),
            Piece::End(Ok(facts)) => facts,
            Piece::End(Err(e)) => {
                let outcome = match e {
                    McpError::Timeout { .. } => Outcome::Timeout,
                    _ => Outcome::OutcomeUnknown,
                };
                return Some(Err(self.broken_off(outcome, &e.to_string())));
            }
        };
        if facts.result_type.as_deref() == Some("input_required") {
            let why = format!(
                "server {} asked for more input (elicitation or sampling from servers does not pass the sidecar)",
                end.server()
            );
            return Some(Err(self.broken_off(Outcome::Error, &why)));
        }
        let tail: &[u8] = match (modern && facts.result_type.is_none(), facts.has_members) {
            (true, true) => b",\"resultType\":\"complete\"}}",
            (true, false) => b"\"resultType\":\"complete\"}}",
            (false, _) => b"}}",
        };
        let outcome = if facts.is_error {
            Outcome::IsError
        } else {
            Outcome::Ok
        };
        self.end.take().expect("not ended").ended(outcome, None);
        Some(Ok(Bytes::from_static(tail)))
    }

    fn broken_off(&mut self, outcome: Outcome, why: &str) -> BrokenOff {
        if let Some(end) = self.end.take() {
            end.ended(outcome, Some(why));
        }
        BrokenOff
    }

    /// The reply as a JSON response whose body is written as the answer arrives (and broken
    /// off when it fails).
    pub fn into_json_response(self, id: &Value, modern: bool) -> Response {
        let id = id.clone();
        let chunks = futures::stream::unfold(Some(self), move |state| {
            let id = id.clone();
            async move {
                let mut reply = state?;
                match reply.next_bytes(&id, modern).await? {
                    Ok(bytes) => Some((Ok(bytes), Some(reply))),
                    Err(BrokenOff) => Some((
                        Err(std::io::Error::other("the answer was broken off")),
                        None,
                    )),
                }
            }
        });
        let mut response = Response::new(Body::from_stream(chunks));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }

    /// Sends the reply as one event on the agent's stream, as it arrives. A broken-off answer
    /// leaves the event unfinished; the caller ends the stream, and the agent's client drops it.
    pub async fn send_as_event(mut self, id: &Value, modern: bool, tx: &mpsc::Sender<Bytes>) {
        let mut first = true;
        while let Some(next) = self.next_bytes(id, modern).await {
            let Ok(bytes) = next else { return };
            let bytes = if first {
                first = false;
                let mut event = b"event: message\ndata: ".to_vec();
                event.extend_from_slice(&bytes);
                Bytes::from(event)
            } else {
                one_line(bytes)
            };
            if tx.send(bytes).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Bytes::from_static(b"\n\n")).await;
    }
}

/// The bytes as part of one event's data line.
fn one_line(bytes: Bytes) -> Bytes {
    if !bytes.iter().any(|&b| b == b'\n' || b == b'\r') {
        return bytes;
    }
    let mut line = bytes.to_vec();
    spaces_for_line_breaks(&mut line);
    Bytes::from(line)
}

/// JSON made one line: a line break in valid JSON can only be whitespace between tokens (a
/// string holds none unescaped, and no UTF-8 sequence contains the byte), so a space stands in
/// for it.
pub(super) fn spaces_for_line_breaks(json: &mut [u8]) {
    for byte in json {
        if *byte == b'\n' || *byte == b'\r' {
            *byte = b' ';
        }
    }
}
