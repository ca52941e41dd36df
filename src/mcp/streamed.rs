//! A `tools/call` answer too big to hold, passed on as it arrives: past [`STREAM_PAST`] bytes,
//! an answer whose result object has begun goes on chunk by chunk instead of being read whole
//! — from a JSON body, or from the data lines of the event that carries it on the call's
//! stream. Each chunk is checked by [`AnswerScan`] on the way; the result's closing brace is
//! the caller's to write, once [`Piece::End`] says the whole answer was valid, ours (the
//! envelope's id and version) and complete, so an agent never holds a whole answer that was not.
//!
//! ```text
//! upstream chunk ─ size bound ─ budget (one chunk held) ─ SSE data lines? ─ AnswerScan
//!     └─► Piece::Bytes(the result's bytes in it)  …  Piece::End(ResultEnd | why not)
//! ```
//!
//! The call's timeout stays the caller's (it reads the pieces under it); the answer's size
//! bound and the response budget are kept here, as for an answer read whole.

use std::sync::Arc;

use bytes::Bytes;

use super::answer_scan::{AnswerScan, ResultEnd};
use super::budget::{Allowance, SMALL_TAKE};
use super::error::McpError;
use super::http::{Http, Response};

/// An answer longer than this (before its end has come) is passed on as it arrives.
pub const STREAM_PAST: u64 = SMALL_TAKE;

/// What the next read of a streamed answer gave.
#[derive(Debug)]
pub enum Piece {
    /// More of the result object's bytes (never its closing brace).
    Bytes(Bytes),
    /// The answer ended: the result's facts, or why it cannot be passed on (the agent's copy
    /// must then be broken off).
    End(Result<ResultEnd, McpError>),
}

/// Where the rest of the answer comes from.
enum Source {
    /// A JSON body: all of it is the answer.
    Json,
    /// The event on the call's stream: its data lines are the answer.
    Event(DataLines),
}

/// A result being passed on as it arrives.
pub struct StreamedResult {
    /// Result bytes already read and not yet handed on.
    first: Option<Bytes>,
    response: Response,
    source: Source,
    scan: Option<AnswerScan>,
    /// The end, found with the last bytes (handed on first).
    ending: Option<Result<ResultEnd, McpError>>,
    id: u64,
    /// Upstream bytes read, against the server's maxResponseBytes.
    read: u64,
    http: Http,
    allowance: Arc<Allowance>,
}

impl std::fmt::Debug for StreamedResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedResult")
            .field("id", &self.id)
            .field("read", &self.read)
            .finish()
    }
}

impl PartialEq for StreamedResult {
    /// Two streams are never the same answer.
    fn eq(&self, _: &Self) -> bool {
        false
    }
}

impl StreamedResult {
    /// Goes on from a JSON body of which `read` bytes came, `first` of them the result's so far.
    pub(super) fn json(
        begun: Begun,
        http: &Http,
        allowance: Arc<Allowance>,
        id: u64,
    ) -> StreamedResult {
        StreamedResult::new(begun, Source::Json, http, allowance, id)
    }

    /// Goes on from the event on a call's stream whose data so far was scanned.
    pub(super) fn event(
        begun: Begun,
        http: &Http,
        allowance: Arc<Allowance>,
        id: u64,
    ) -> StreamedResult {
        StreamedResult::new(begun, Source::Event(DataLines::InData), http, allowance, id)
    }

    fn new(
        begun: Begun,
        source: Source,
        http: &Http,
        allowance: Arc<Allowance>,
        id: u64,
    ) -> StreamedResult {
        StreamedResult {
            first: Some(begun.first).filter(|b| !b.is_empty()),
            response: begun.response,
            source,
            scan: Some(begun.scan),
            ending: None,
            id,
            read: begun.read,
            http: http.clone(),
            allowance,
        }
    }

    /// The next piece. After [`Piece::End`], the answer is over (the connection's body is let
    /// go, and so is what the answer held of the budget).
    pub async fn next(&mut self) -> Piece {
        if let Some(first) = self.first.take() {
            return Piece::Bytes(first);
        }
        if let Some(ending) = self.ending.take() {
            return Piece::End(ending);
        }
        loop {
            let Some(scan) = self.scan.as_mut() else {
                return Piece::End(Err(McpError::ProtocolError(
                    "the answer was passed on already".into(),
                )));
            };
            let chunk = match self.response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) if matches!(self.source, Source::Json) => return Piece::End(self.end()),
                Ok(None) => {
                    return Piece::End(
                        self.fail(McpError::ProtocolError(
                            "the server closed the call's stream before the answer's event ended"
                                .into(),
                        )),
                    );
                }
                Err(e) => {
                    let e = self.http.transport_error(&e);
                    return Piece::End(self.fail(e));
                }
            };
            self.read += chunk.len() as u64;
            let limit = self.http.max_response_bytes();
            if self.read > limit {
                return Piece::End(self.fail(McpError::ResponseTooLarge {
                    limit,
                    pages_read: 0,
                }));
            }
            // What was handed on before has been written (the agent's body asks for the next
            // piece once it has): only this chunk is held.
            self.allowance.release();
            if let Err(e) = self.allowance.take(chunk.len() as u64).await {
                return Piece::End(self.fail(e));
            }
            let (doc, event_ended) = match &mut self.source {
                Source::Json => (chunk, false),
                Source::Event(lines) => match lines.data_of(chunk) {
                    Ok(pair) => pair,
                    Err(why) => return Piece::End(self.fail(McpError::ProtocolError(why.into()))),
                },
            };
            let range = scan.feed(&doc);
            let faulted = !scan.sound();
            if event_ended || faulted {
                // Whatever the stream carries after the answer's event is not read.
                let ending = self.end();
                if range.is_empty() || faulted {
                    return Piece::End(ending);
                }
                self.ending = Some(ending);
                return Piece::Bytes(doc.slice(range));
            }
            if !range.is_empty() {
                return Piece::Bytes(doc.slice(range));
            }
        }
    }

    fn end(&mut self) -> Result<ResultEnd, McpError> {
        self.allowance.release();
        match self.scan.take() {
            Some(scan) => scan.finish(self.id).map_err(McpError::ProtocolError),
            None => Err(McpError::ProtocolError(
                "the answer was passed on already".into(),
            )),
        }
    }

    fn fail(&mut self, e: McpError) -> Result<ResultEnd, McpError> {
        self.scan = None;
        self.allowance.release();
        Err(e)
    }
}

/// The start of an answer read before it was found too big to hold.
pub(super) struct Begun {
    /// The result's bytes among those read.
    pub first: Bytes,
    pub scan: AnswerScan,
    pub response: Response,
    /// Upstream bytes read so far.
    pub read: u64,
}

/// Where the data lines of one event are, byte by byte (the event's first data line is being
/// read when the answer starts to be passed on).
#[derive(Debug, Clone, PartialEq, Eq)]
enum DataLines {
    /// In a data line: its bytes are the answer's.
    InData,
    /// At the start of a line.
    LineStart,
    /// Reading a field's name.
    Field(Vec<u8>),
    /// After `data:`: one space may come.
    DataColon,
    /// After `event:`: the type, which must stay `message`.
    EventType(Vec<u8>),
    /// A line that does not matter (a comment, `id:`, `retry:`).
    Skip,
}

impl DataLines {
    /// The answer's bytes in `chunk`, and whether the event ended in it.
    fn data_of(&mut self, chunk: Bytes) -> Result<(Bytes, bool), &'static str> {
        if *self == DataLines::InData && !chunk.contains(&b'\n') {
            return Ok((chunk, false));
        }
        let mut doc = Vec::with_capacity(chunk.len());
        for &b in chunk.iter() {
            match self {
                DataLines::InData => {
                    if b == b'\n' {
                        *self = DataLines::LineStart;
                    } else {
                        doc.push(b);
                    }
                }
                DataLines::LineStart => match b {
                    b'\n' => return Ok((Bytes::from(doc), true)),
                    b'\r' => {}
                    b':' => *self = DataLines::Skip,
                    _ => *self = DataLines::Field(vec![b]),
                },
                DataLines::Field(name) => match b {
                    b':' | b'\n' => {
                        let data = name.as_slice() == b"data";
                        let event = name.as_slice() == b"event";
                        *self = match (b, data, event) {
                            (b':', true, _) => DataLines::DataColon,
                            (b':', _, true) => DataLines::EventType(Vec::new()),
                            (b'\n', _, _) => DataLines::LineStart,
                            _ => DataLines::Skip,
                        };
                        if data {
                            // Data lines are joined by a line break.
                            doc.push(b'\n');
                        }
                    }
                    _ if name.len() < 16 => name.push(b),
                    _ => *self = DataLines::Skip,
                },
                DataLines::DataColon => match b {
                    b' ' => *self = DataLines::InData,
                    b'\n' => *self = DataLines::LineStart,
                    _ => {
                        doc.push(b);
                        *self = DataLines::InData;
                    }
                },
                DataLines::EventType(value) => {
                    if b == b'\n' {
                        let value = value.strip_prefix(b" ").unwrap_or(value);
                        let value = value.strip_suffix(b"\r").unwrap_or(value);
                        if value != b"message" {
                            return Err("the event carrying the answer is not a message");
                        }
                        *self = DataLines::LineStart;
                    } else if value.len() < 16 {
                        value.push(b);
                    }
                }
                DataLines::Skip => {
                    if b == b'\n' {
                        *self = DataLines::LineStart;
                    }
                }
            }
        }
        Ok((Bytes::from(doc), false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(stream: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, bool), &'static str> {
        let mut lines = DataLines::InData;
        let mut doc = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
            let (bytes, ended) = lines.data_of(Bytes::copy_from_slice(&stream[at..cut]))?;
            doc.extend_from_slice(&bytes);
            at = cut;
            if ended {
                return Ok((doc, true));
            }
        }
        Ok((doc, false))
    }

    #[test]
    fn an_events_data_lines_are_the_answer_wherever_the_chunks_end() {
        // The rest of a data line, a second data line, a comment, an id, CRLF line ends, the
        // blank line that ends the event, and what follows it (not read).
        let stream = b"{\"a\":\r\ndata: 1}\r\n: keep-alive\nid: 7\r\nevent: message\n\r\nevent: other\ndata: x\n\n";
        for cut in 0..stream.len() {
            assert_eq!(
                data(stream, &[cut]),
                Ok((b"{\"a\":\r\n1}\r".to_vec(), true)),
                "cut at {cut}"
            );
        }
        assert_eq!(data(b"{\"a\":1}", &[]), Ok((b"{\"a\":1}".to_vec(), false)));
    }

    #[test]
    fn an_event_that_turns_into_another_type_is_not_an_answer() {
        assert_eq!(
            data(b"{}\nevent: endpoint\n\n", &[]),
            Err("the event carrying the answer is not a message")
        );
    }
}
