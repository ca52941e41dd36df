//! Approvals: a call to a tool whose grant says `requiresApproval` runs only after the agent's
//! client answers a form with an explicit yes. This module owns how the sidecar asks, in both
//! protocol eras, and how it judges the answer; the call pipeline ([`super::calls`]) asks it
//! about the *resolved target* tool, however the agent named it.
//!
//! ```text
//! modern (2026-07-28)  call ─► input_required {inputRequests: {approval: elicitation/create},
//!                                              requestState: sealed(agent, tool, args, grants, exp, nonce)}
//!                      retry + inputResponses + requestState ─► open ─► bind ─► nonce unused? ─► answer
//! legacy (2025-06-18, 2025-11-25)
//!                      call ─► elicitation/create on the call's own SSE stream ─► the agent's POSTed
//!                              answer (PendingAnswers), bounded by a timeout ─► answer
//! no elicitation capability (every 2025-03-26 client) ─► refused: this client cannot be asked
//! ```
//!
//! Only `accept` with `approve: true` approves. The state is HMAC-SHA256 sealed with the sidecar's
//! key (a mounted file, else one kept in `--state-dir`, else one made at start) and is only good
//! in the process that issued it, whatever the key: the record
//! of answered states (the nonces) is in memory, so a state never counts twice. Pure pieces
//! (sealing, binding, the form, the bounded argument summary, reading the answer) are free
//! functions and tested as such.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::core::catalog::definition_digest;
use crate::mcp::Access;
use crate::mcp::serving::{SealError, SealKey};

use super::audit::Decision;

/// The key of the one input request the sidecar puts in `inputRequests`.
pub const INPUT_KEY: &str = "approval";
/// The form field a person sets to say yes.
pub const APPROVE_FIELD: &str = "approve";
/// Most characters of the argument summary shown in the form.
pub const SUMMARY_CHARS: usize = 1200;
/// Most characters one argument's value takes in the summary.
const VALUE_CHARS: usize = 200;
/// Most answered states remembered at once (each until it expires); beyond it new answers are
/// refused rather than forgotten, so a replay can never slip through a full record.
const MAX_USED: usize = 65_536;
const STATE_VERSION: u8 = 1;

/// The call a person is asked about: the resolved target tool, never a wrapper around it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub agent: &'a str,
    pub server: &'a str,
    pub qualified: &'a str,
    pub raw: &'a str,
    pub access: Access,
    /// The arguments as the agent sent them (`null` when it sent none).
    pub arguments: &'a Value,
    /// The digest of the grants document the call was checked against.
    pub grants_digest: &'a str,
}

fn access_word(a: Access) -> &'static str {
    match a {
        Access::Read => "read",
        Access::Write => "write",
        Access::Destructive => "destructive",
    }
}

// ─── the form ────────────────────────────────────────────────────────────────────────────

/// The arguments as a person reads them: one `name = value` line per argument in JSON spelling,
/// each value cut at [`VALUE_CHARS`], the whole at `limit` characters (never more).
pub fn summarize(arguments: &Value, limit: usize) -> String {
    let lines: Vec<String> = match arguments {
        Value::Null => vec![],
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{} = {}", cut(k, 64), cut(&v.to_string(), VALUE_CHARS)))
            .collect(),
        other => vec![cut(&other.to_string(), VALUE_CHARS)],
    };
    if lines.is_empty() {
        return cut("(no arguments)", limit);
    }
    let mut out = String::new();
    let mut used = 0;
    for (i, line) in lines.iter().enumerate() {
        let sep = usize::from(!out.is_empty());
        let len = line.chars().count();
        let rest = lines.len() - i - 1;
        // Room for this line and, if more follow, the note saying how many were left out.
        let note = if rest > 0 {
            format!("… and {rest} more")
        } else {
            String::new()
        };
        if used
            + sep
            + len
            + if rest > 0 {
                1 + note.chars().count()
            } else {
                0
            }
            > limit
        {
            let left = lines.len() - i;
            let note = format!("… and {left} more");
            if used + sep + note.chars().count() <= limit {
                if sep == 1 {
                    out.push('\n');
                }
                out.push_str(&note);
            }
            return out;
        }
        if sep == 1 {
            out.push('\n');
            used += 1;
        }
        out.push_str(line);
        used += len;
    }
    out
}

/// At most `n` characters of `s`, ending in `…` when cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    if n > 0 {
        out.push('…');
    }
    out
}

/// The `elicitation/create` params (form mode) that ask a person about `target`.
pub fn form(target: &Target<'_>) -> Value {
    let message = format!(
        "The agent {agent} wants to run a tool that needs your approval.\n\
         Server: {server}\nTool: {raw} (called as {qualified})\nAccess: {access}\n\
         Arguments:\n{args}\n\nApprove to run it once with exactly these arguments.",
        agent = cut(target.agent, 128),
        server = target.server,
        raw = target.raw,
        qualified = target.qualified,
        access = access_word(target.access),
        args = summarize(target.arguments, SUMMARY_CHARS),
    );
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                APPROVE_FIELD: {
                    "type": "boolean",
                    "title": "Run this call",
                    "description": "Yes runs it once; anything else refuses it.",
                    "default": false,
                }
            },
            "required": [APPROVE_FIELD],
        },
    })
}

/// What the person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approved,
    Declined,
    Cancelled,
    /// The client answered with an error, or with something that is not an elicitation result.
    Failed(String),
}

/// Reads an `ElicitResult`. Only `accept` with `approve: true` is a yes; an accept without it is
/// a no.
pub fn read_answer(result: &Value) -> Answer {
    match result.get("action").and_then(Value::as_str) {
        Some("accept") => {
            if result
                .get("content")
                .and_then(|c| c.get(APPROVE_FIELD))
                .and_then(Value::as_bool)
                == Some(true)
            {
                Answer::Approved
            } else {
                Answer::Declined
            }
        }
        Some("decline") => Answer::Declined,
        Some("cancel") => Answer::Cancelled,
        _ => Answer::Failed("the answer is not an elicitation result".into()),
    }
}

/// Whether the client's declared capabilities let it answer a form. `elicitation: {}` means
/// form mode (it predates modes); `{url: {}}` alone does not.
pub fn can_answer_forms(capabilities: Option<&Value>) -> bool {
    match capabilities.and_then(|c| c.get("elicitation")) {
        Some(Value::Object(e)) => e.contains_key("form") || !e.contains_key("url"),
        _ => false,
    }
}

// ─── the sealed state ────────────────────────────────────────────────────────────────────

/// What a `requestState` vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub v: u8,
    /// The sidecar process that issued it.
    pub instance: String,
    pub agent: String,
    pub tool: String,
    /// [`arguments_digest`] of the arguments asked about.
    pub args: String,
    pub grants: String,
    /// Unix milliseconds after which the state is refused.
    pub exp: u64,
    pub nonce: String,
}

/// The digest the state binds the arguments with (RFC 8785: key order does not matter).
pub fn arguments_digest(arguments: &Value) -> String {
    definition_digest(arguments)
}

/// Why a `requestState` does not count as an answer. Each says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the requestState is not one this sidecar issues")]
    Malformed,
    #[error("the requestState was altered or was not issued by this sidecar")]
    Forged,
    #[error(
        "the requestState was issued before the sidecar restarted; call the tool again to be asked again"
    )]
    OtherInstance,
    #[error("the approval request expired; call the tool again to be asked again")]
    Expired,
    #[error("the requestState was issued to another agent")]
    OtherAgent,
    #[error("the requestState is for the tool {0}, not this one")]
    OtherTool(String),
    #[error(
        "the arguments differ from the ones the approval was asked for; call the tool again to be asked about these"
    )]
    ArgumentsChanged,
    #[error(
        "the grants changed since the approval was asked; call the tool again to be asked again"
    )]
    GrantsChanged,
    #[error("this approval was already answered once; call the tool again to be asked again")]
    Replayed,
    #[error("too many approvals are pending; try again in a few minutes")]
    Full,
    #[error("the retry carries no answer to the approval request (inputResponses.{INPUT_KEY})")]
    NoAnswer,
}

/// The HMAC key and this process's identity. The same key seals the agent's legacy session
/// ids ([`super::sessions`]), each kind of token under its own purpose so neither passes for
/// the other; the instance binds only approval states to this process.
#[derive(Clone)]
pub struct StateKey {
    key: SealKey,
    instance: String,
}

/// What a sealed token is for: the purpose is signed with it, so a token of one kind never
/// opens as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    ApprovalState,
    Session,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::ApprovalState => b"mcp-operator/approval-state",
            Purpose::Session => b"mcp-operator/session",
        }
    }
}

/// The file under the sidecar's state directory that keeps its key across restarts.
pub const KEY_FILE: &str = "seal.key";

impl StateKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        Self::with_key(&random_key())
    }

    /// A key from a mounted file's bytes (at least 32, a trailing newline ignored).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        if bytes.len() < 32 {
            return Err(format!(
                "an approval key needs at least 32 bytes, this one has {}",
                bytes.len()
            ));
        }
        Ok(Self::with_key(bytes))
    }

    /// The key kept in `dir` ([`KEY_FILE`]), made there on first use: a directory that
    /// outlives the process (the pod's emptyDir) gives every restart of the sidecar the same
    /// key, and so the same sessions, while nothing outside the pod ever holds it.
    pub fn kept_in(dir: &std::path::Path) -> Result<Self, String> {
        let path = dir.join(KEY_FILE);
        match std::fs::read(&path) {
            // Its bytes as written: a random key may well end in a newline.
            Ok(bytes) if bytes.len() >= 32 => return Ok(Self::with_key(&bytes)),
            // A short file is a write cut off before its rename could not leave; start over.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
        let bytes = random_key();
        let temp = dir.join(format!(".{KEY_FILE}.tmp"));
        let write = || -> std::io::Result<()> {
            use std::io::Write as _;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)
        };
        write().map_err(|e| format!("cannot keep a key in {}: {e}", dir.display()))?;
        Ok(Self::with_key(&bytes))
    }

    fn with_key(bytes: &[u8]) -> Self {
        StateKey {
            key: SealKey::from_bytes(bytes),
            instance: random_hex(8),
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// `<base64url(claims JSON)>.<base64url(HMAC)>`, the version bound under the tag.
    pub fn seal(&self, claims: &Claims) -> String {
        self.seal_as(Purpose::ApprovalState, claims)
    }

    /// The claims of a state this key sealed; anything else is [`StateError::Malformed`] or
    /// [`StateError::Forged`]. The tag is checked in constant time before the payload is read.
    pub fn open(&self, token: &str) -> Result<Claims, StateError> {
        let claims: Claims = self.open_as(Purpose::ApprovalState, token)?;
        if claims.v != STATE_VERSION {
            return Err(StateError::Malformed);
        }
        Ok(claims)
    }

    /// `<base64url(JSON)>.<base64url(HMAC(purpose, body))>`: visible ASCII, so it also serves
    /// as a header value.
    pub fn seal_as(&self, purpose: Purpose, value: &impl Serialize) -> String {
        self.key.seal(purpose.label(), value)
    }

    /// The value sealed under `purpose` by this key; the tag is checked (in constant time)
    /// before the payload is read.
    pub fn open_as<T: serde::de::DeserializeOwned>(
        &self,
        purpose: Purpose,
        token: &str,
    ) -> Result<T, StateError> {
        self.key.open(purpose.label(), token).map_err(|e| match e {
            SealError::Forged => StateError::Forged,
            SealError::Malformed => StateError::Malformed,
        })
    }
}

fn random_key() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    bytes
}

pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    hex::encode(bytes)
}

/// The claims for asking about `target` now.
pub fn claims_for(target: &Target<'_>, instance: &str, now_ms: u64, ttl: Duration) -> Claims {
    Claims {
        v: STATE_VERSION,
        instance: instance.to_string(),
        agent: target.agent.to_string(),
        tool: target.qualified.to_string(),
        args: arguments_digest(target.arguments),
        grants: target.grants_digest.to_string(),
        exp: now_ms.saturating_add(ttl.as_millis() as u64),
        nonce: random_hex(16),
    }
}

/// Pure: whether opened `claims` are for exactly `target`, by this process, still in time.
pub fn bind(
    claims: &Claims,
    target: &Target<'_>,
    instance: &str,
    now_ms: u64,
) -> Result<(), StateError> {
    if claims.instance != instance {
        return Err(StateError::OtherInstance);
    }
    if now_ms >= claims.exp {
        return Err(StateError::Expired);
    }
    if claims.agent != target.agent {
        return Err(StateError::OtherAgent);
    }
    if claims.tool != target.qualified {
        return Err(StateError::OtherTool(cut(&claims.tool, 128)));
    }
    if claims.args != arguments_digest(target.arguments) {
        return Err(StateError::ArgumentsChanged);
    }
    if claims.grants != target.grants_digest {
        return Err(StateError::GrantsChanged);
    }
    Ok(())
}

/// Answered states, each remembered until it expires: a state is answered at most once.
#[derive(Debug, Default)]
pub struct UsedStates {
    used: HashMap<String, u64>,
}

impl UsedStates {
    /// Records `nonce` as answered; refuses one already answered.
    pub fn claim(&mut self, nonce: &str, exp: u64, now_ms: u64) -> Result<(), StateError> {
        if self.used.contains_key(nonce) {
            return Err(StateError::Replayed);
        }
        if self.used.len() >= MAX_USED {
            self.used.retain(|_, e| *e > now_ms);
            if self.used.len() >= MAX_USED {
                return Err(StateError::Full);
            }
        }
        self.used.insert(nonce.to_string(), exp);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.used.len()
    }

    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ─── asking ──────────────────────────────────────────────────────────────────────────────

/// Answers the agent POSTs to requests the sidecar sent it, routed to whoever waits for them.
#[derive(Default)]
pub struct PendingAnswers {
    waiting: Mutex<HashMap<(String, String), oneshot::Sender<Value>>>,
}

impl PendingAnswers {
    fn expect(&self, session: &str, id: &str) -> oneshot::Receiver<Value> {
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .expect("pending answers lock")
            .insert((session.to_string(), id.to_string()), tx);
        rx
    }

    fn forget(&self, session: &str, id: &str) {
        self.waiting
            .lock()
            .expect("pending answers lock")
            .remove(&(session.to_string(), id.to_string()));
    }

    /// Hands the agent's response `message` (with `result` or `error`) to the request it
    /// answers. False when nothing waits for it (unknown id, other session, too late).
    pub fn deliver(&self, session: &str, message: &Map<String, Value>) -> bool {
        let Some(id) = message.get("id").and_then(Value::as_str) else {
            return false;
        };
        let waiting = self
            .waiting
            .lock()
            .expect("pending answers lock")
            .remove(&(session.to_string(), id.to_string()));
        match waiting {
            Some(tx) => tx.send(Value::Object(message.clone())).is_ok(),
            None => false,
        }
    }
}

/// The agent's client as one call's request reaches the sidecar: the era, what it can do and
/// how to reach it while the call is open.
pub enum Requester<'a> {
    /// 2026-07-28: asked by answering `input_required`; the retry carries the answer.
    Modern {
        can_elicit: bool,
        input_responses: Option<&'a Value>,
        request_state: Option<&'a str>,
    },
    /// A legacy session: asked on the call's own response stream.
    Legacy {
        session: &'a str,
        protocol_version: &'a str,
        can_elicit: bool,
        /// The call's response stream, when the agent accepts one.
        stream: Option<&'a mpsc::UnboundedSender<Value>>,
    },
}

/// What the approval step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Approved,
    /// Modern: answer the call with this `input_required` result and wait for the retry.
    Ask(Map<String, Value>),
    /// Refused: nothing goes upstream. `code` set: a JSON-RPC error (modern -32021) with `data`.
    Refused {
        decision: Decision,
        text: String,
        code: Option<i64>,
        data: Option<Value>,
    },
}

fn refused(decision: Decision, text: String) -> Verdict {
    Verdict::Refused {
        decision,
        text,
        code: None,
        data: None,
    }
}

/// The approval gate's state: the key, the answered states, the bounds, and where legacy
/// answers arrive.
pub struct Approvals {
    key: StateKey,
    used: Mutex<UsedStates>,
    /// How long a modern state stays good.
    pub ttl: Duration,
    /// How long a legacy call waits for the person.
    pub timeout: Duration,
    pub answers: Arc<PendingAnswers>,
}

impl Approvals {
    pub fn new(key: StateKey, ttl: Duration, timeout: Duration) -> Self {
        Approvals {
            key,
            used: Mutex::new(UsedStates::default()),
            ttl,
            timeout,
            answers: Arc::new(PendingAnswers::default()),
        }
    }

    /// Asks about `target` (or judges the answer a modern retry brings). `cancelled` ends a
    /// legacy wait early (the agent cancelled the call, or the sidecar is stopping).
    pub async fn gate(
        &self,
        target: &Target<'_>,
        requester: &Requester<'_>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Verdict {
        let who = format!("the tool {} needs a person's approval", target.qualified);
        match requester {
            Requester::Modern {
                can_elicit,
                input_responses,
                request_state,
            } => {
                if request_state.is_none() && input_responses.is_none() {
                    if !can_elicit {
                        return Verdict::Refused {
                            decision: Decision::CannotAsk,
                            text: format!(
                                "{who}, and this client cannot give it: it declared no elicitation (form) capability; it was not run"
                            ),
                            code: Some(-32021),
                            data: Some(
                                json!({"requiredCapabilities": {"elicitation": {"form": {}}}}),
                            ),
                        };
                    }
                    return Verdict::Ask(self.input_required(target));
                }
                self.judge_retry(target, *input_responses, *request_state, &who)
            }
            Requester::Legacy {
                session,
                protocol_version,
                can_elicit,
                stream,
            } => {
                if !can_elicit {
                    return refused(
                        Decision::CannotAsk,
                        format!(
                            "{who}, and this client cannot give it: it declared no elicitation capability (protocol {protocol_version}); it was not run"
                        ),
                    );
                }
                let Some(stream) = stream else {
                    return refused(
                        Decision::CannotAsk,
                        format!(
                            "{who}, and this client cannot be asked: it does not accept an event stream for the call's answer; it was not run"
                        ),
                    );
                };
                self.ask_on_stream(target, session, protocol_version, stream, cancelled, &who)
                    .await
            }
        }
    }

    fn input_required(&self, target: &Target<'_>) -> Map<String, Value> {
        let claims = claims_for(target, self.key.instance(), now_ms(), self.ttl);
        let state = self.key.seal(&claims);
        let mut result = Map::new();
        result.insert("resultType".into(), json!("input_required"));
        result.insert(
            "inputRequests".into(),
            json!({INPUT_KEY: {"method": "elicitation/create", "params": form(target)}}),
        );
        result.insert("requestState".into(), Value::String(state));
        result
    }

    fn judge_retry(
        &self,
        target: &Target<'_>,
        input_responses: Option<&Value>,
        request_state: Option<&str>,
        who: &str,
    ) -> Verdict {
        let invalid = |e: StateError| {
            refused(
                Decision::InvalidApproval,
                format!("{who}: {e}; it was not run"),
            )
        };
        let Some(state) = request_state else {
            return refused(
                Decision::InvalidApproval,
                format!(
                    "{who}: the retry carries inputResponses but no requestState; it was not run"
                ),
            );
        };
        let claims = match self.key.open(state) {
            Ok(c) => c,
            Err(e) => return invalid(e),
        };
        let now = now_ms();
        if let Err(e) = bind(&claims, target, self.key.instance(), now) {
            return invalid(e);
        }
        let Some(response) = input_responses.and_then(|r| r.get(INPUT_KEY)) else {
            return invalid(StateError::NoAnswer);
        };
        if let Err(e) =
            self.used
                .lock()
                .expect("used states lock")
                .claim(&claims.nonce, claims.exp, now)
        {
            return invalid(e);
        }
        verdict_of(read_answer(response), who)
    }

    async fn ask_on_stream(
        &self,
        target: &Target<'_>,
        session: &str,
        protocol_version: &str,
        stream: &mpsc::UnboundedSender<Value>,
        cancelled: impl std::future::Future<Output = ()>,
        who: &str,
    ) -> Verdict {
        let id = format!("approval-{}", random_hex(8));
        let answer = self.answers.expect(session, &id);
        let mut params = form(target);
        if protocol_version == "2025-06-18" {
            // Modes arrived in 2025-11-25; before, every elicitation was a form.
            if let Some(p) = params.as_object_mut() {
                p.remove("mode");
            }
        }
        let request =
            json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params});
        if stream.send(request).is_err() {
            self.answers.forget(session, &id);
            return refused(
                Decision::CannotAsk,
                format!(
                    "{who}, and the call's stream closed before it could be asked; it was not run"
                ),
            );
        }
        let withdraw = |reason: &str| {
            self.answers.forget(session, &id);
            let _ = stream.send(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                       "params": {"requestId": id, "reason": reason}}),
            );
        };
        tokio::select! {
            got = tokio::time::timeout(self.timeout, answer) => match got {
                Ok(Ok(message)) => {
                    if let Some(result) = message.get("result") {
                        verdict_of(read_answer(result), who)
                    } else {
                        let said = message
                            .get("error")
                            .and_then(|e| e.get("message"))
                            .and_then(Value::as_str)
                            .map(|m| cut(m, 200))
                            .unwrap_or_else(|| "no reason".into());
                        verdict_of(Answer::Failed(format!("the client answered the approval request with an error ({said:?})")), who)
                    }
                }
                Ok(Err(_)) => refused(Decision::Cancelled, format!("{who}; the request for it was dropped; it was not run")),
                Err(_) => {
                    withdraw("no answer in time");
                    refused(
                        Decision::TimedOut,
                        format!("{who}, and no answer came within {}s; it was not run", self.timeout.as_secs()),
                    )
                }
            },
            _ = cancelled => {
                withdraw("the call was cancelled");
                refused(Decision::Cancelled, format!("{who}; the call was cancelled while waiting for it; it was not run"))
            }
        }
    }
}

fn verdict_of(answer: Answer, who: &str) -> Verdict {
    match answer {
        Answer::Approved => Verdict::Approved,
        Answer::Declined => refused(
            Decision::Declined,
            format!("{who}, and it was declined; it was not run"),
        ),
        Answer::Cancelled => refused(
            Decision::Cancelled,
            format!("{who}, and the request was cancelled without an answer; it was not run"),
        ),
        Answer::Failed(why) => {
            refused(Decision::CannotAsk, format!("{who}: {why}; it was not run"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use proptest::prelude::*;

    fn target<'a>(args: &'a Value) -> Target<'a> {
        Target {
            agent: "assistant",
            server: "files",
            qualified: "fs__delete_file",
            raw: "delete_file",
            access: Access::Destructive,
            arguments: args,
            grants_digest: "sha256:grants",
        }
    }

    #[test]
    fn a_sealed_state_opens_and_binds_to_exactly_its_call() {
        let key = StateKey::generate();
        let args = json!({"path": "/a", "force": true});
        let t = target(&args);
        let claims = claims_for(&t, key.instance(), 1_000, Duration::from_secs(300));
        let token = key.seal(&claims);
        let opened = key.open(&token).unwrap();
        assert_eq!(opened, claims);
        assert_eq!(bind(&opened, &t, key.instance(), 2_000), Ok(()));
        // Key order does not change the arguments.
        let reordered: Value = serde_json::from_str(r#"{"force": true, "path": "/a"}"#).unwrap();
        assert_eq!(
            bind(&opened, &target(&reordered), key.instance(), 2_000),
            Ok(())
        );

        let other_args = json!({"path": "/b", "force": true});
        assert_eq!(
            bind(&opened, &target(&other_args), key.instance(), 2_000),
            Err(StateError::ArgumentsChanged)
        );
        let mut other_tool = t;
        other_tool.qualified = "fs__write_file";
        assert_eq!(
            bind(&opened, &other_tool, key.instance(), 2_000),
            Err(StateError::OtherTool("fs__delete_file".into()))
        );
        let mut other_agent = t;
        other_agent.agent = "intruder";
        assert_eq!(
            bind(&opened, &other_agent, key.instance(), 2_000),
            Err(StateError::OtherAgent)
        );
        let mut new_grants = t;
        new_grants.grants_digest = "sha256:other";
        assert_eq!(
            bind(&opened, &new_grants, key.instance(), 2_000),
            Err(StateError::GrantsChanged)
        );
        assert_eq!(
            bind(&opened, &t, key.instance(), 301_000),
            Err(StateError::Expired)
        );
        assert_eq!(
            bind(&opened, &t, "another-process", 2_000),
            Err(StateError::OtherInstance)
        );
    }

    #[test]
    fn another_key_or_garbage_does_not_open() {
        let key = StateKey::generate();
        let args = json!({});
        let token = key.seal(&claims_for(
            &target(&args),
            key.instance(),
            0,
            Duration::from_secs(1),
        ));
        assert_eq!(StateKey::generate().open(&token), Err(StateError::Forged));
        for bad in ["", "abc", "a.b", "..", &"x".repeat(5000)] {
            assert!(key.open(bad).is_err(), "{bad}");
        }
        // A payload re-signed by nobody: claims edited, tag kept.
        let (body, tag) = token.split_once('.').unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut claims: Claims = serde_json::from_slice(&b64.decode(body).unwrap()).unwrap();
        claims.exp = u64::MAX;
        let edited = format!("{}.{tag}", b64.encode(serde_json::to_vec(&claims).unwrap()));
        assert_eq!(key.open(&edited), Err(StateError::Forged));
    }

    #[test]
    fn a_generated_key_is_always_a_key() {
        // Random bytes may end in a newline; only a mounted file's trailing newline is dropped.
        for _ in 0..2000 {
            let key = StateKey::generate();
            let args = json!({});
            let token = key.seal(&claims_for(
                &target(&args),
                key.instance(),
                0,
                Duration::from_secs(1),
            ));
            assert!(key.open(&token).is_ok());
        }
    }

    #[test]
    fn a_mounted_key_needs_32_bytes() {
        assert!(StateKey::from_bytes(b"short\n").is_err());
        assert!(StateKey::from_bytes(&[7u8; 32]).is_ok());
    }

    proptest! {
        #[test]
        fn any_changed_byte_is_refused(flip in 0usize..400, bit in 0u8..8) {
            let key = StateKey::generate();
            let args = json!({"path": "/x"});
            let token = key.seal(&claims_for(&target(&args), key.instance(), 0, Duration::from_secs(60)));
            let mut bytes = token.clone().into_bytes();
            let i = flip % bytes.len();
            bytes[i] ^= 1 << bit;
            if let Ok(changed) = String::from_utf8(bytes)
                && changed != token
            {
                prop_assert!(key.open(&changed).is_err());
            }
        }

        #[test]
        fn the_summary_never_exceeds_its_bound(
            args in proptest::collection::btree_map("[a-zé🦀]{0,80}", "[ -~é🦀]{0,600}", 0..40),
            limit in 20usize..2000,
        ) {
            let value = Value::Object(args.into_iter().map(|(k, v)| (k, Value::String(v))).collect());
            let s = summarize(&value, limit);
            prop_assert!(s.chars().count() <= limit, "{} > {limit}", s.chars().count());
        }
    }

    #[test]
    fn the_summary_shows_each_argument_and_says_what_was_left_out() {
        let args = json!({"path": "/etc/passwd", "recursive": true});
        assert_eq!(
            summarize(&args, 200),
            "path = \"/etc/passwd\"\nrecursive = true"
        );
        let many: Map<String, Value> = (0..50)
            .map(|i| (format!("k{i:02}"), json!("v".repeat(100))))
            .collect();
        let s = summarize(&Value::Object(many), 500);
        assert!(s.ends_with("more"), "{s}");
        assert!(s.starts_with("k00 = "));
        let long = json!({"text": "y".repeat(10_000)});
        assert!(summarize(&long, SUMMARY_CHARS).chars().count() <= VALUE_CHARS + 8);
        assert_eq!(summarize(&Value::Null, 100), "(no arguments)");
    }

    #[test]
    fn the_form_names_the_server_tool_access_and_arguments() {
        let args = json!({"path": "/gated"});
        let f = form(&target(&args));
        let message = f["message"].as_str().unwrap();
        for part in [
            "Server: files",
            "delete_file",
            "fs__delete_file",
            "Access: destructive",
            "path = \"/gated\"",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert_eq!(f["mode"], "form");
        assert_eq!(
            f["requestedSchema"]["properties"][APPROVE_FIELD]["type"],
            "boolean"
        );
    }

    #[test]
    fn only_an_explicit_yes_approves() {
        assert_eq!(
            read_answer(&json!({"action": "accept", "content": {"approve": true}})),
            Answer::Approved
        );
        for no in [
            json!({"action": "accept"}),
            json!({"action": "accept", "content": {"approve": false}}),
            json!({"action": "accept", "content": {"approve": "true"}}),
            json!({"action": "decline"}),
        ] {
            assert_eq!(read_answer(&no), Answer::Declined, "{no}");
        }
        assert_eq!(read_answer(&json!({"action": "cancel"})), Answer::Cancelled);
        assert!(matches!(read_answer(&json!({})), Answer::Failed(_)));
    }

    #[test]
    fn form_capability_is_read_as_the_spec_says() {
        assert!(can_answer_forms(Some(&json!({"elicitation": {}}))));
        assert!(can_answer_forms(Some(
            &json!({"elicitation": {"form": {}, "url": {}}})
        )));
        assert!(!can_answer_forms(Some(
            &json!({"elicitation": {"url": {}}})
        )));
        assert!(!can_answer_forms(Some(&json!({"sampling": {}}))));
        assert!(!can_answer_forms(None));
    }

    #[test]
    fn a_state_is_answered_once() {
        let mut used = UsedStates::default();
        assert_eq!(used.claim("n1", 100, 0), Ok(()));
        assert_eq!(used.claim("n1", 100, 50), Err(StateError::Replayed));
        assert_eq!(used.claim("n2", 100, 50), Ok(()));
        assert_eq!(used.len(), 2);
    }

    #[tokio::test]
    async fn modern_retry_is_judged_once_and_refused_after() {
        let approvals = Approvals::new(
            StateKey::generate(),
            Duration::from_secs(60),
            Duration::from_secs(1),
        );
        let args = json!({"path": "/x"});
        let t = target(&args);
        let first = Requester::Modern {
            can_elicit: true,
            input_responses: None,
            request_state: None,
        };
        let Verdict::Ask(result) = approvals.gate(&t, &first, std::future::pending()).await else {
            panic!("a modern client is asked")
        };
        assert_eq!(result["resultType"], "input_required");
        let state = result["requestState"].as_str().unwrap().to_string();
        let yes = json!({INPUT_KEY: {"action": "accept", "content": {"approve": true}}});
        let retry = Requester::Modern {
            can_elicit: true,
            input_responses: Some(&yes),
            request_state: Some(&state),
        };
        assert_eq!(
            approvals.gate(&t, &retry, std::future::pending()).await,
            Verdict::Approved
        );
        match approvals.gate(&t, &retry, std::future::pending()).await {
            Verdict::Refused { decision, text, .. } => {
                assert_eq!(decision, Decision::InvalidApproval);
                assert!(text.contains("already answered"), "{text}");
            }
            other => panic!("a replay was not refused: {other:?}"),
        }
        let no_cap = Requester::Modern {
            can_elicit: false,
            input_responses: None,
            request_state: None,
        };
        match approvals.gate(&t, &no_cap, std::future::pending()).await {
            Verdict::Refused {
                decision,
                code,
                data,
                ..
            } => {
                assert_eq!(decision, Decision::CannotAsk);
                assert_eq!(code, Some(-32021));
                assert!(data.unwrap()["requiredCapabilities"]["elicitation"].is_object());
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn legacy_asks_on_the_stream_and_times_out() {
        let approvals = Approvals::new(
            StateKey::generate(),
            Duration::from_secs(60),
            Duration::from_millis(200),
        );
        let args = json!({"path": "/x"});
        let t = target(&args);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let r = Requester::Legacy {
            session: "s1",
            protocol_version: "2025-11-25",
            can_elicit: true,
            stream: Some(&tx),
        };
        let answers = Arc::clone(&approvals.answers);
        let answering = tokio::spawn(async move {
            let asked = rx.recv().await.unwrap();
            assert_eq!(asked["method"], "elicitation/create");
            let mut reply = Map::new();
            reply.insert("id".into(), asked["id"].clone());
            reply.insert(
                "result".into(),
                json!({"action": "accept", "content": {"approve": true}}),
            );
            // Another session's answer does not count.
            assert!(!answers.deliver("s2", &reply));
            assert!(answers.deliver("s1", &reply));
            rx
        });
        assert_eq!(
            approvals.gate(&t, &r, std::future::pending()).await,
            Verdict::Approved
        );
        let mut rx = answering.await.unwrap();
        match approvals.gate(&t, &r, std::future::pending()).await {
            Verdict::Refused { decision, .. } => assert_eq!(decision, Decision::TimedOut),
            other => panic!("{other:?}"),
        }
        let _asked = rx.recv().await.unwrap();
        let withdrawn = rx.recv().await.unwrap();
        assert_eq!(withdrawn["method"], "notifications/cancelled");
    }
}
