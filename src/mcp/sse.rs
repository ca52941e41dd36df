//! The one server-sent-event reader: an incremental `text/event-stream` parser, a byte budget,
//! and the classification of each event (a JSON-RPC message, the old transport's `endpoint`,
//! or something to skip). Streamable HTTP replies, the old HTTP+SSE transport and the
//! list_changed watch all read their streams through [`SseReader`].
//!
//! A caller that passes an answer on as bytes ([`SseReader::feed_events`], a call's reply
//! stream) gets each event's data as the server sent it, never parsed into values.
//!
//! Two budgets: a reply stream ([`SseReader::whole`]) may not pass the cap in total; a
//! long-lived stream ([`SseReader::per_event`]) bounds each event and lets keep-alives be free.

use bytes::Bytes;
use serde_json::Value;

use super::error::McpError;

/// What one event is, for an MCP client.
#[derive(Debug, Clone, PartialEq)]
pub enum SseMessage {
    /// A `message` event carrying JSON (a JSON-RPC message or batch).
    Json(Value),
    /// A `message` event whose data is not JSON.
    NotJson,
    /// A `message` event with no data.
    Empty,
    /// The old transport's `endpoint` event: where to POST.
    Endpoint(String),
    /// Any other event type: not ours.
    Other,
}

impl SseMessage {
    fn of(event: SseEvent) -> Self {
        match event.event.as_str() {
            "endpoint" => SseMessage::Endpoint(event.data),
            "message" if event.data.is_empty() => SseMessage::Empty,
            "message" => serde_json::from_str(&event.data)
                .map(SseMessage::Json)
                .unwrap_or(SseMessage::NotJson),
            _ => SseMessage::Other,
        }
    }
}

/// One event as it came, for a caller that may pass its data on without parsing it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    /// The `event:` field; `message` when absent.
    pub event: String,
    /// The `data:` lines joined by `\n`, as bytes.
    pub data: Bytes,
}

impl RawEvent {
    /// A `message` event with data: what may carry a JSON-RPC message.
    pub fn carries_message(&self) -> bool {
        self.event == "message" && !self.data.is_empty()
    }

    /// The event classified as [`SseReader::feed`] would have (its data parsed when JSON).
    pub fn message(self) -> SseMessage {
        match self.event.as_str() {
            "endpoint" => SseMessage::Endpoint(String::from_utf8_lossy(&self.data).into_owned()),
            "message" if self.data.is_empty() => SseMessage::Empty,
            "message" => serde_json::from_slice(&self.data)
                .map(SseMessage::Json)
                .unwrap_or(SseMessage::NotJson),
            _ => SseMessage::Other,
        }
    }
}

/// How a stream's bytes are bounded.
#[derive(Debug)]
enum Budget {
    /// The whole stream (one reply) may not pass the cap.
    Whole { limit: u64, received: u64 },
    /// Each event may not pass the cap (a long-lived stream).
    PerEvent(EventBudget),
}

/// Reads one event stream: bytes in, bounded, classified events out.
#[derive(Debug)]
pub struct SseReader {
    parser: SseParser,
    budget: Budget,
}

impl SseReader {
    /// For a stream that carries one reply: at most `limit` bytes in all.
    pub fn whole(limit: u64) -> Self {
        SseReader {
            parser: SseParser::default(),
            budget: Budget::Whole { limit, received: 0 },
        }
    }

    /// For a long-lived stream: at most `limit` bytes per event, keep-alive comments free.
    pub fn per_event(limit: u64) -> Self {
        SseReader {
            parser: SseParser::default(),
            budget: Budget::PerEvent(EventBudget::new(limit)),
        }
    }

    /// Bytes of the event being read that the reader keeps (the line and the data so far).
    pub fn pending_bytes(&self) -> u64 {
        let p = &self.parser;
        (p.line.len()
            + p.event.as_ref().map_or(0, String::len)
            + p.data.as_ref().map_or(0, String::len)) as u64
    }

    /// The data so far of the event being read, when it is a `message` event in the middle of
    /// a data line: the lines before joined by `\n`, then the line being read (an answer too big
    /// to hold, to be passed on from here as it arrives: [`super::streamed`]).
    pub fn answer_so_far(&self) -> Option<Vec<u8>> {
        let p = &self.parser;
        if p.event.as_deref().is_some_and(|e| e != "message") {
            return None;
        }
        let rest = p.line.strip_prefix(b"data:")?;
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        let before = p.data.as_ref().map_or(0, |d| d.len() + 1);
        let mut doc = Vec::with_capacity(before + rest.len());
        if let Some(data) = &p.data {
            doc.extend_from_slice(data.as_bytes());
            doc.push(b'\n');
        }
        doc.extend_from_slice(rest);
        Some(doc)
    }

    /// Feeds the bytes that arrived; the events they complete, or `ResponseTooLarge`.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseMessage>, McpError> {
        self.account(bytes)?;
        Ok(self
            .parser
            .feed(bytes)
            .into_iter()
            .map(SseMessage::of)
            .collect())
    }

    /// Like [`feed`](Self::feed), the events unclassified: their data as bytes.
    pub fn feed_events(&mut self, bytes: &[u8]) -> Result<Vec<RawEvent>, McpError> {
        self.account(bytes)?;
        Ok(self
            .parser
            .feed(bytes)
            .into_iter()
            .map(|e| RawEvent {
                event: e.event,
                data: Bytes::from(e.data.into_bytes()),
            })
            .collect())
    }

    fn account(&mut self, bytes: &[u8]) -> Result<(), McpError> {
        match &mut self.budget {
            Budget::Whole { limit, received } => {
                *received += bytes.len() as u64;
                if *received > *limit {
                    return Err(McpError::ResponseTooLarge {
                        limit: *limit,
                        pages_read: 0,
                    });
                }
            }
            Budget::PerEvent(budget) => budget.feed(bytes)?,
        }
        Ok(())
    }
}

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SseEvent {
    /// The `event:` field; `message` when absent.
    pub event: String,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Incremental SSE parser (WHATWG event-stream rules: `field: value` lines, a blank line
/// dispatches, lines starting with `:` are comments).
#[derive(Debug, Default)]
struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes and returns the events they complete.
    fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = bytes;
        // Whole stretches up to each line end, not byte by byte: an answer's one data line may be
        // megabytes long.
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..end]);
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line_done(line, &mut out);
            rest = &rest[end + 1..];
        }
        self.line.extend_from_slice(rest);
        out
    }

    /// One line without its line end. Taken by value: a data line (an answer may be one line of
    /// megabytes) becomes the event's data without being copied.
    fn line_done(&mut self, mut line: Vec<u8>, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    event: self.event.take().unwrap_or_else(|| "message".into()),
                    data,
                });
            }
            self.event = None;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field_end, value_start) = match line.iter().position(|&b| b == b':') {
            Some(i) if line.get(i + 1) == Some(&b' ') => (i, i + 2),
            Some(i) => (i, i + 1),
            None => (line.len(), line.len()),
        };
        match &line[..field_end] {
            b"event" => {
                self.event = Some(String::from_utf8_lossy(&line[value_start..]).into_owned());
            }
            b"data" => {
                line.drain(..value_start);
                let value = String::from_utf8(line)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(&value);
                    }
                    None => self.data = Some(value),
                }
            }
            _ => {}
        }
    }
}

/// Bounds one server-sent event on a long-lived stream: the bytes of its lines since the last
/// blank line (the line being read included) may not pass the cap. Comment lines (keep-alives)
/// are bounded one at a time but never add up, so an idle stream never runs out of budget.
#[derive(Debug)]
struct EventBudget {
    limit: u64,
    /// Bytes of the finished, non-comment lines of the current event.
    event: u64,
    /// Bytes of the line being read (without its line end).
    line: u64,
    comment: bool,
}

impl EventBudget {
    fn new(limit: u64) -> Self {
        EventBudget {
            limit,
            event: 0,
            line: 0,
            comment: false,
        }
    }

    /// Accounts for bytes as they arrive; an error once one event passes the cap.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), McpError> {
        for &b in bytes {
            match b {
                b'\n' => {
                    if self.line == 0 {
                        self.event = 0;
                    } else if !self.comment {
                        self.event += self.line;
                    }
                    self.line = 0;
                    self.comment = false;
                }
                b'\r' => {}
                _ => {
                    if self.line == 0 && b == b':' {
                        self.comment = true;
                    }
                    self.line += 1;
                    if self.event + self.line > self.limit {
                        return Err(McpError::ResponseTooLarge {
                            limit: self.limit,
                            pages_read: 0,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_crlf() {
        let mut p = SseParser::default();
        assert!(p.feed(b"event: endpoint\r\nda").is_empty());
        let ev = p.feed(b"ta: /messages?s=1\r\n\r\n: ping\n\ndata: {\"a\":\ndata: 1}\n\n");
        assert_eq!(
            ev,
            vec![
                SseEvent {
                    event: "endpoint".into(),
                    data: "/messages?s=1".into()
                },
                SseEvent {
                    event: "message".into(),
                    data: "{\"a\":\n1}".into()
                },
            ]
        );
    }

    #[test]
    fn comments_alone_dispatch_nothing() {
        let mut p = SseParser::default();
        assert!(p.feed(b": keepalive\n\n: keepalive\n\n").is_empty());
    }

    #[test]
    fn keep_alive_comments_never_exhaust_the_budget() {
        let mut budget = EventBudget::new(64);
        for _ in 0..10_000 {
            budget.feed(b": ping\r\n\r\n").unwrap();
            budget.feed(b":\n").unwrap();
        }
        budget
            .feed(b"event: message\ndata: {\"jsonrpc\":\"2.0\"}\n\n")
            .unwrap();
    }

    #[test]
    fn one_event_over_the_cap_is_refused_even_split_across_chunks() {
        let mut budget = EventBudget::new(64);
        budget
            .feed(b"data: 0123456789012345678901234567890\n")
            .unwrap();
        let err = budget
            .feed(b"data: 0123456789012345678901234567890")
            .unwrap_err();
        assert_eq!(err.reason(), "ResponseTooLarge");

        // A line that never ends is bounded too, comment or not.
        let mut budget = EventBudget::new(64);
        assert!(budget.feed(&[b':'; 65]).is_err());
        let mut budget = EventBudget::new(64);
        assert!(budget.feed(&[b'x'; 65]).is_err());

        // The budget starts again after each event.
        let mut budget = EventBudget::new(64);
        for _ in 0..100 {
            budget.feed(b"data: 01234567890123456789\n\n").unwrap();
        }
    }

    #[test]
    fn events_are_classified_and_the_whole_budget_counts_every_byte() {
        let mut reader = SseReader::whole(1024);
        let events = reader
            .feed(b"event: endpoint\ndata: /messages?s=1\n\ndata: {\"id\":1}\n\ndata: nope\n\nevent: ping\ndata: x\n\nevent: message\ndata:\n\n")
            .unwrap();
        assert_eq!(
            events,
            [
                SseMessage::Endpoint("/messages?s=1".into()),
                SseMessage::Json(serde_json::json!({"id": 1})),
                SseMessage::NotJson,
                SseMessage::Other,
                SseMessage::Empty,
            ]
        );
        let mut reader = SseReader::whole(16);
        reader.feed(b": 0123456789\n").unwrap();
        let err = reader.feed(b": 0123456789\n").unwrap_err();
        assert_eq!(
            err.reason(),
            "ResponseTooLarge",
            "comments count in a reply"
        );
        let mut reader = SseReader::per_event(16);
        for _ in 0..100 {
            reader.feed(b": 0123456789\n").unwrap();
        }
    }

    const STREAM: &[u8] = b"event: endpoint\ndata: /messages?s=1\n\ndata: {\"id\":1}\n\ndata: nope\n\nevent: ping\ndata: x\n\nevent: message\ndata:\n\n: ping\r\ndata: {\"a\":\r\ndata: [1,\n\ndata:2]}\n\n";

    #[test]
    fn raw_events_keep_the_data_as_sent_and_classify_as_feed_does() {
        let raw = SseReader::whole(1024).feed_events(STREAM).unwrap();
        let carrying: Vec<&[u8]> = raw
            .iter()
            .filter(|e| e.carries_message())
            .map(|e| &e.data[..])
            .collect();
        assert_eq!(
            carrying,
            [&b"{\"id\":1}"[..], b"nope", b"{\"a\":\n[1,", b"2]}"]
        );
        let classified: Vec<SseMessage> = raw.into_iter().map(RawEvent::message).collect();
        assert_eq!(classified, SseReader::whole(1024).feed(STREAM).unwrap());
    }

    proptest::proptest! {
        /// However the stream is cut into chunks, the same events come out.
        #[test]
        fn chunking_never_changes_the_events(cuts in proptest::collection::vec(0..STREAM.len(), 0..8)) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            cuts.push(STREAM.len());
            let mut reader = SseReader::whole(1024);
            let mut events = Vec::new();
            let mut from = 0;
            for to in cuts {
                events.extend(reader.feed_events(&STREAM[from..to]).unwrap());
                from = to;
            }
            proptest::prop_assert_eq!(events, SseReader::whole(1024).feed_events(STREAM).unwrap());
        }
    }
}
