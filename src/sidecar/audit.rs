//! The audit line: one structured log line per tool call, resource read and prompt get (target
//! `mcp_sidecar::audit`), with who called what, what was decided, how it ended, how long it took and how many times it was
//! sent. Never the arguments, the result or a credential: none of them is passed in.
//!
//! With `--log-format json` (what the injection sets) the line is written here, in the shape
//! tracing's JSON formatter gives every other line (`timestamp`, `level`, `fields`, `target`),
//! as one write: tracing's formatter took about 17,000 instructions per line (a map of the
//! fields, then serialising it), a twelfth of a call's whole cost in the sidecar. The log filter
//! still decides whether the line is written.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::mcp::Access;

/// What the sidecar decided before sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    NotGranted,
    DefinitionChanged,
    ServerUnavailable,
    /// The tool needs approval and the agent's client said yes: sent.
    Approved,
    /// The person said no (or accepted without saying yes).
    Declined,
    /// The approval request was dismissed, or the call was cancelled while it waited.
    Cancelled,
    /// No answer within the approval timeout.
    TimedOut,
    /// The client cannot be asked (no elicitation capability, no event stream) or answered with
    /// an error.
    CannotAsk,
    /// Modern era: the call was answered with `input_required` (the form); its retry decides.
    ApprovalAsked,
    /// A modern retry whose requestState is forged, expired, replayed or for another call.
    InvalidApproval,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::NotGranted => "not_granted",
            Decision::DefinitionChanged => "definition_changed",
            Decision::ServerUnavailable => "server_unavailable",
            Decision::Approved => "approved",
            Decision::Declined => "declined",
            Decision::Cancelled => "cancelled",
            Decision::TimedOut => "timed_out",
            Decision::CannotAsk => "cannot_ask",
            Decision::ApprovalAsked => "approval_asked",
            Decision::InvalidApproval => "invalid_approval",
        }
    }

    /// Whether the call was sent upstream.
    pub fn sent(self) -> bool {
        matches!(self, Decision::Allowed | Decision::Approved)
    }
}

/// How the agent asked for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `tools/call` with the tool's qualified name.
    Direct,
    /// `call_tool`, the discovery tool of deferred servers: the line names the target tool.
    Discovery,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Discovery => "call_tool",
        }
    }
}

/// How an allowed call ended (refused calls end `refused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered with a result.
    Ok,
    /// The server answered with a result marked `isError`.
    IsError,
    /// No result: a JSON-RPC error, or a failure known to have run nothing.
    Error,
    /// Sent, and no answer: the server may have run it.
    OutcomeUnknown,
    /// The call timeout struck.
    Timeout,
    /// Not sent: the decision was not `allowed` or `approved`.
    Refused,
    /// Not sent yet: the agent was asked for approval (modern era) and will call again.
    InputRequired,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::IsError => "is_error",
            Outcome::Error => "error",
            Outcome::OutcomeUnknown => "outcome_unknown",
            Outcome::Timeout => "timeout",
            Outcome::Refused => "refused",
            Outcome::InputRequired => "input_required",
        }
    }
}

/// One call, as audited.
#[derive(Debug, Clone)]
pub struct CallRecord<'a> {
    pub agent: &'a str,
    pub server: Option<&'a str>,
    pub tool: &'a str,
    pub raw_tool: Option<&'a str>,
    pub access: Option<Access>,
    pub decision: Decision,
    pub outcome: Outcome,
    pub duration: Duration,
    pub attempts: u32,
    pub via: Via,
}

/// Audit lines are written as JSON by this module (the process logs JSON).
static AS_JSON: AtomicBool = AtomicBool::new(false);

/// The process logs JSON: audit lines are written here, in the same shape.
pub fn lines_as_json() {
    AS_JSON.store(true, Ordering::Relaxed);
}

/// Whether the log filter lets audit lines through.
fn audit_enabled() -> bool {
    tracing::enabled!(target: "mcp_sidecar::audit", tracing::Level::INFO)
}

fn access_str(access: Option<Access>) -> &'static str {
    match access {
        Some(Access::Read) => "read",
        Some(Access::Write) => "write",
        Some(Access::Destructive) => "destructive",
        None => "",
    }
}

pub fn write(record: &CallRecord<'_>) {
    if !written_as_json(|| json_line(&call_fields(record), "tool call")) {
        write_via_tracing(record);
    }
}

/// With JSON logs: writes the line `line` builds, when the log filter lets audit lines
/// through, and says it took the line (true); otherwise the line is tracing's to write.
fn written_as_json(line: impl FnOnce() -> Vec<u8>) -> bool {
    if !AS_JSON.load(Ordering::Relaxed) {
        return false;
    }
    if audit_enabled() {
        emit(&line());
    }
    true
}

/// A call's fields, in the order tracing's formatter writes them.
fn call_fields<'a>(record: &'a CallRecord<'a>) -> [(&'static str, Field<'a>); 10] {
    [
        ("agent", Field::Str(record.agent)),
        ("server", Field::Str(record.server.unwrap_or(""))),
        ("tool", Field::Str(record.tool)),
        ("raw_tool", Field::Str(record.raw_tool.unwrap_or(""))),
        ("access", Field::Str(access_str(record.access))),
        ("decision", Field::Str(record.decision.as_str())),
        ("outcome", Field::Str(record.outcome.as_str())),
        (
            "duration_ms",
            Field::Float(record.duration.as_secs_f64() * 1000.0),
        ),
        ("attempts", Field::Int(u64::from(record.attempts))),
        ("via", Field::Str(record.via.as_str())),
    ]
}

/// One field's value.
enum Field<'a> {
    Str(&'a str),
    Float(f64),
    Int(u64),
}

/// The audit line as tracing's JSON formatter would write it (bar the fields' order).
fn json_line(fields: &[(&'static str, Field<'_>)], message: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(384);
    line.extend_from_slice(b"{\"timestamp\":\"");
    timestamp(&mut line, time::OffsetDateTime::now_utc());
    line.extend_from_slice(b"\",\"level\":\"INFO\",\"fields\":{\"message\":");
    json_str(&mut line, message);
    for (name, value) in fields {
        line.extend_from_slice(b",\"");
        line.extend_from_slice(name.as_bytes());
        line.extend_from_slice(b"\":");
        match value {
            Field::Str(s) => json_str(&mut line, s),
            Field::Float(f) => {
                let _ = serde_json::to_writer(&mut line, f);
            }
            Field::Int(n) => {
                let _ = write!(line, "{n}");
            }
        }
    }
    line.extend_from_slice(b"},\"target\":\"mcp_sidecar::audit\"}\n");
    line
}

fn json_str(line: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *line, s);
}

/// RFC 3339 in UTC with microseconds, as tracing's formatter writes it.
fn timestamp(line: &mut Vec<u8>, now: time::OffsetDateTime) {
    // Digit by digit: `write!` with padding took a third of the line's cost (issue 24).
    let mut digits = |n: u32, width: u32, after: u8| {
        for place in (0..width).rev() {
            line.push(b'0' + (n / 10u32.pow(place) % 10) as u8);
        }
        if after != 0 {
            line.push(after);
        }
    };
    digits(now.year().clamp(0, 9999) as u32, 4, b'-');
    digits(u8::from(now.month()).into(), 2, b'-');
    digits(now.day().into(), 2, b'T');
    digits(now.hour().into(), 2, b':');
    digits(now.minute().into(), 2, b':');
    digits(now.second().into(), 2, b'.');
    digits(now.microsecond(), 6, b'Z');
}

/// One write of the whole line, as tracing's writer does (lines of concurrent calls never mix).
fn emit(line: &[u8]) {
    let _ = std::io::stderr().lock().write_all(line);
}

fn write_via_tracing(record: &CallRecord<'_>) {
    tracing::info!(
        target: "mcp_sidecar::audit",
        agent = record.agent,
        server = record.server.unwrap_or(""),
        tool = record.tool,
        raw_tool = record.raw_tool.unwrap_or(""),
        access = access_str(record.access),
        decision = record.decision.as_str(),
        outcome = record.outcome.as_str(),
        duration_ms = record.duration.as_secs_f64() * 1000.0,
        attempts = record.attempts,
        via = record.via.as_str(),
        "tool call"
    );
}

/// One resource read or prompt get, as audited.
#[derive(Debug, Clone)]
pub struct AccessRecord<'a> {
    pub agent: &'a str,
    /// `resources/read` or `prompts/get`.
    pub method: &'a str,
    pub server: Option<&'a str>,
    /// What the agent asked for: `<prefix>+<uri>` or `<prefix>__<prompt>`.
    pub name: &'a str,
    /// The URI or prompt name sent upstream, when granted.
    pub raw: Option<&'a str>,
    pub decision: Decision,
    pub outcome: Outcome,
    pub duration: Duration,
    pub attempts: u32,
}

pub fn write_access(record: &AccessRecord<'_>) {
    let line = || {
        let (name, raw) = (bounded(record.name), bounded(record.raw.unwrap_or("")));
        json_line(&access_fields(record, &name, &raw), access_what(record))
    };
    if !written_as_json(line) {
        write_access_via_tracing(record);
    }
}

fn access_what(record: &AccessRecord<'_>) -> &'static str {
    if record.method == "prompts/get" {
        "prompt get"
    } else {
        "resource read"
    }
}

/// A URI the agent sent is bounded like a tool name, so a hostile agent cannot fill the log.
fn bounded(s: &str) -> String {
    s.chars().take(512).collect()
}

fn access_fields<'a>(
    record: &'a AccessRecord<'a>,
    name: &'a str,
    raw: &'a str,
) -> [(&'static str, Field<'a>); 9] {
    [
        ("agent", Field::Str(record.agent)),
        ("method", Field::Str(record.method)),
        ("server", Field::Str(record.server.unwrap_or(""))),
        ("name", Field::Str(name)),
        ("raw", Field::Str(raw)),
        ("decision", Field::Str(record.decision.as_str())),
        ("outcome", Field::Str(record.outcome.as_str())),
        (
            "duration_ms",
            Field::Float(record.duration.as_secs_f64() * 1000.0),
        ),
        ("attempts", Field::Int(u64::from(record.attempts))),
    ]
}

fn write_access_via_tracing(record: &AccessRecord<'_>) {
    let what = access_what(record);
    tracing::info!(
        target: "mcp_sidecar::audit",
        agent = record.agent,
        method = record.method,
        server = record.server.unwrap_or(""),
        name = %bounded(record.name),
        raw = %bounded(record.raw.unwrap_or("")),
        decision = record.decision.as_str(),
        outcome = record.outcome.as_str(),
        duration_ms = record.duration.as_secs_f64() * 1000.0,
        attempts = record.attempts,
        "{what}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What tracing's JSON formatter writes for `log`, parsed.
    fn via_tracing(log: impl FnOnce()) -> serde_json::Value {
        let captured = Captured::default();
        let out = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let bytes = captured.0.lock().unwrap().clone();
        serde_json::from_slice(&bytes).expect("one JSON line")
    }

    fn same_but_the_time(ours: &[u8], theirs: serde_json::Value) {
        assert_eq!(ours.last(), Some(&b'\n'), "one line");
        let mut ours: serde_json::Value = serde_json::from_slice(ours).expect("JSON");
        let (a, b) = (ours["timestamp"].take(), theirs["timestamp"].clone());
        let (a, b) = (a.as_str().unwrap(), b.as_str().unwrap());
        assert_eq!(a.len(), b.len(), "{a} / {b}");
        assert_eq!((&a[10..11], &a[19..20], &a[26..]), ("T", ".", "Z"), "{a}");
        let mut theirs = theirs;
        theirs["timestamp"].take();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn the_json_audit_line_is_the_one_tracings_formatter_writes() {
        let record = CallRecord {
            agent: "team-a/agent",
            server: Some("files"),
            tool: "files__say \"hé\"\n\u{1}",
            raw_tool: None,
            access: Some(Access::Destructive),
            decision: Decision::Approved,
            outcome: Outcome::IsError,
            duration: Duration::from_micros(1_234_567),
            attempts: 2,
            via: Via::Discovery,
        };
        same_but_the_time(
            &json_line(&call_fields(&record), "tool call"),
            via_tracing(|| write_via_tracing(&record)),
        );
        let access = AccessRecord {
            agent: "team-a/agent",
            method: "resources/read",
            server: None,
            name: "docs+file:///a b",
            raw: Some("file:///a b"),
            decision: Decision::NotGranted,
            outcome: Outcome::Refused,
            duration: Duration::from_nanos(1),
            attempts: 0,
        };
        let (name, raw) = (bounded(access.name), bounded(access.raw.unwrap()));
        same_but_the_time(
            &json_line(&access_fields(&access, &name, &raw), access_what(&access)),
            via_tracing(|| write_access_via_tracing(&access)),
        );
    }

    #[test]
    fn the_timestamp_is_rfc3339_in_microseconds_as_tracing_writes_it() {
        for unix_ns in [
            0i128,
            1_000,
            1_796_515_200_123_456_789,
            253_402_300_799_999_999_000,
        ] {
            let at = time::OffsetDateTime::from_unix_timestamp_nanos(unix_ns).unwrap();
            let mut ours = Vec::new();
            timestamp(&mut ours, at);
            let theirs = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                at.year(),
                u8::from(at.month()),
                at.day(),
                at.hour(),
                at.minute(),
                at.second(),
                at.microsecond()
            );
            assert_eq!(String::from_utf8(ours).unwrap(), theirs);
        }
    }
}
