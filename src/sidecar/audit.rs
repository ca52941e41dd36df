//! The audit line: one structured log line per tool call, resource read and prompt get (target
//! `mcp_sidecar::audit`), with who called what, what was decided, how it ended, how long it took and how many times it was
//! sent. Never the arguments, the result or a credential: none of them is passed in.

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

pub fn write(record: &CallRecord<'_>) {
    let access = record.access.map(|a| match a {
        Access::Read => "read",
        Access::Write => "write",
        Access::Destructive => "destructive",
    });
    tracing::info!(
        target: "mcp_sidecar::audit",
        agent = record.agent,
        server = record.server.unwrap_or(""),
        tool = record.tool,
        raw_tool = record.raw_tool.unwrap_or(""),
        access = access.unwrap_or(""),
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
    let what = if record.method == "prompts/get" {
        "prompt get"
    } else {
        "resource read"
    };
    // A URI the agent sent is bounded like a tool name, so a hostile agent cannot fill the log.
    let bounded = |s: &str| s.chars().take(512).collect::<String>();
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
