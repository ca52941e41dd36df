//! The call pipeline: every tool call the agent makes passes these steps, in this order, and
//! is audited once at the end. [`Calls::call`] is the one entry point: a `tools/call` and a
//! discovery tool naming its target both arrive here as a [`ToolCall`] for the *target* tool.
//!
//! ```text
//! narrow      grants::permits(current document, name)     ── refused: "not granted"
//! available   the grants and the live state of the server ── refused: "server unavailable"
//! definition  live digest == granted digest               ── refused: "definition changed"
//! approval    requiresApproval → approval::Approvals::gate (ask the agent's client; see there)
//!             legacy: held until answered, then narrow/available/definition again on the
//!             grants of that moment (a grant removed meanwhile refuses; a gate removed
//!             meanwhile does not un-ask)
//! send        pool connection, call timeout, resend rules ── the upstream's answer, unchanged
//!             progress and log notifications of the call ─► the caller's stream (and the log)
//! ```
//!
//! A refused name never reaches an upstream. The upstream gets the raw tool name. Resending
//! (seed 000): a call is sent again only when the server cannot have run it (the session was
//! gone, the connection was refused) or when the tool is read-only or idempotent and the
//! server's retry budget allows; any other failure after sending answers "outcome unknown".

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::grants::{self, GrantedTool};
use crate::mcp::call::{CallAnswer, CallFailure};
use crate::mcp::pass_through::RawResult;
use crate::mcp::serving::{json_response, rpc_error, rpc_result, sse_event};
use crate::mcp::{Access, EndpointPolicy};

use super::approval::{self, Approvals, Requester, Target, Verdict};
use super::audit::{self, CallRecord, Decision, Outcome, Via};
use super::credentials::CredentialsDir;
use super::definitions::{Definitions, Live};
use super::listing::View;
use super::metrics::{CallLabels, Metrics, server_label};
use super::streamed::StreamedReply;
use super::upstream::Pool;

/// What the agent gets back.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// A `tools/call` result (the upstream's unchanged, or ours with `isError: true`, or an
    /// `input_required` result asking for approval).
    Result(Map<String, Value>),
    /// The upstream's result, as its bytes (passed through, never parsed into values).
    Passed(RawResult),
    /// The upstream's result, too big to hold, passed on as it arrives.
    Streamed(Box<StreamedReply>),
    /// A JSON-RPC error (the upstream answered with one, or -32021 for a missing capability).
    Error {
        code: i64,
        message: String,
        data: Option<Value>,
    },
}

impl Reply {
    /// The JSON-RPC response to the agent's request `id` (`modern`: a result says its
    /// `resultType`).
    pub fn into_message(self, id: &Value, modern: bool) -> Value {
        match self {
            Reply::Passed(raw) => Reply::Result(raw.to_map()).into_message(id, modern),
            // Never asked of a streamed answer (it is written as it arrives); dropped here, its
            // call is audited as not read.
            Reply::Streamed(_) => rpc_error(
                id,
                -32603,
                "the answer was too big to hold and could not be passed on here",
                None,
            ),
            Reply::Result(mut result) => {
                if modern && !result.contains_key("resultType") {
                    result.insert("resultType".into(), json!("complete"));
                }
                rpc_result(id, result)
            }
            Reply::Error {
                code,
                message,
                data,
            } => rpc_error(id, code, &message, data),
        }
    }

    /// The reply as a JSON response. A passed-through result is written from the upstream's
    /// bytes, which (and what they hold of the response budget) are let go once the body is
    /// sent.
    pub fn into_json_response(self, id: &Value, modern: bool) -> Response {
        if let Reply::Streamed(streamed) = self {
            return (*streamed).into_json_response(id, modern);
        }
        let Reply::Passed(raw) = self else {
            return json_response(StatusCode::OK, &self.into_message(id, modern));
        };
        let chunks = raw.response_chunks(id, modern);
        let length: usize = chunks.iter().map(Bytes::len).sum();
        let body = Body::from_stream(Holding {
            chunks: futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>)),
            _held: raw,
        });
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        response
    }

    /// Sends the reply as one event on an agent's stream (a streamed answer as it arrives).
    pub async fn send_as_event(self, id: &Value, modern: bool, tx: &mpsc::Sender<Bytes>) {
        match self {
            Reply::Streamed(streamed) => (*streamed).send_as_event(id, modern, tx).await,
            other => {
                let _ = tx.send(other.into_sse_event(id, modern)).await;
            }
        }
    }

    /// The reply as one event of an event stream.
    pub fn into_sse_event(self, id: &Value, modern: bool) -> Bytes {
        match self {
            Reply::Passed(raw) => {
                let mut event = b"event: message\ndata: ".to_vec();
                for chunk in raw.response_chunks(id, modern) {
                    event.extend_from_slice(&chunk);
                }
                // An event's data is one line.
                super::streamed::spaces_for_line_breaks(
                    &mut event[b"event: message\ndata: ".len()..],
                );
                event.extend_from_slice(b"\n\n");
                Bytes::from(event)
            }
            other => sse_event(&other.into_message(id, modern)),
        }
    }
}

/// A response body's chunks, and what must live until they are sent.
struct Holding<S> {
    chunks: S,
    _held: RawResult,
}

impl<S: futures::Stream + Unpin> futures::Stream for Holding<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        std::pin::Pin::new(&mut self.chunks).poll_next(cx)
    }
}

/// The shared state every call reads.
pub struct Calls {
    pub agent: String,
    pub view: watch::Receiver<Arc<View>>,
    pub definitions: Arc<Definitions>,
    pub credentials: CredentialsDir,
    pub policy: EndpointPolicy,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub approvals: Approvals,
    /// The agents' resource subscriptions and what the upstreams push about them.
    pub relay: super::relay::Relay,
}

/// One call to one tool, however the agent asked for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    /// The qualified name of the tool to run.
    pub name: String,
    /// The arguments for it, as the agent sent them.
    pub arguments: Option<Value>,
    /// The agent's `_meta` (progressToken, logLevel…); its protocol envelope is not sent on.
    pub meta: Option<Map<String, Value>>,
    /// Any other params, passed on unchanged.
    pub rest: Map<String, Value>,
    /// Modern retry: the answers to the sidecar's input requests, and the sealed state.
    pub input_responses: Option<Value>,
    pub request_state: Option<String>,
}

impl ToolCall {
    /// From `tools/call` params.
    pub fn from_params(mut params: Map<String, Value>) -> Self {
        let name = match params.remove("name") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let meta = match params.remove("_meta") {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        let request_state = match params.remove("requestState") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        ToolCall {
            name,
            arguments: params.remove("arguments"),
            meta,
            input_responses: params.remove("inputResponses"),
            request_state,
            rest: params,
        }
    }
}

/// Which kind of agent connection a call came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerEra<'a> {
    Modern,
    Legacy {
        session: &'a str,
        protocol_version: &'a str,
    },
}

/// The agent's client as this call's request reached the sidecar.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub era: CallerEra<'a>,
    /// The client capabilities it declared (legacy: at initialize; modern: in the request).
    pub capabilities: Option<&'a Value>,
    /// The call's own response stream, when the agent accepts one: the upstream's progress and
    /// log notifications and, in the legacy era, the approval request go there.
    pub stream: Option<&'a mpsc::UnboundedSender<Value>>,
    /// The lowest log level the agent wants of the upstream's log lines (`None`: none).
    pub log_level: Option<&'a str>,
}

/// A refusal or failure, as the agent reads it: a tool result marked as an error.
fn sentence(text: String) -> Reply {
    let mut result = Map::new();
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result.insert("isError".into(), Value::Bool(true));
    Reply::Result(result)
}

/// What the audit line of one call says, filled in as the pipeline learns it.
pub(super) struct Audit {
    started: Instant,
    name: String,
    server: Option<String>,
    tool: Option<(String, Access)>,
    attempts: u32,
    via: Via,
    /// The access recorded when no granted tool was resolved (discovery grades such a target
    /// destructive).
    pub(super) graded: Option<Access>,
}

impl Audit {
    /// A call the agent made at `started`, to `name`, by way of `via`.
    pub(super) fn new(started: Instant, name: impl Into<String>, via: Via) -> Self {
        Audit {
            started,
            name: name.into(),
            server: None,
            tool: None,
            attempts: 0,
            via,
            graded: None,
        }
    }

    /// The McpServer the call was for, when it is known without a granted tool.
    pub(super) fn server(&mut self, server: &str) {
        self.server = Some(server.to_string());
    }
}

/// A tool the grants permit right now, with what calling it needs.
/// Borrowed from the view the call was resolved on, which the call holds: nothing of the
/// grants is copied per call.
struct Resolved<'v> {
    server: &'v str,
    endpoint: &'v grants::Endpoint,
    tool: &'v GrantedTool,
    grants_digest: &'v str,
}

impl Calls {
    /// Runs one tool call through the pipeline. When `cancelled` completes (the agent cancelled,
    /// or went away) a held approval ends and the upstream is told.
    pub async fn call(
        &self,
        call: ToolCall,
        caller: &Caller<'_>,
        cancelled: impl Future<Output = ()>,
    ) -> Reply {
        self.call_via(call, caller, cancelled, Instant::now(), Via::Direct)
            .await
    }

    /// [`Calls::call`] for a call that arrived `via` discovery's `call_tool` (at `started`):
    /// `call` names the target tool, which every step (approval too) is about.
    pub(super) async fn call_via(
        &self,
        call: ToolCall,
        caller: &Caller<'_>,
        cancelled: impl Future<Output = ()>,
        started: Instant,
        via: Via,
    ) -> Reply {
        tokio::pin!(cancelled);
        let mut audit = Audit::new(started, call.name.clone(), via);
        let view = Arc::clone(&self.view.borrow());
        // The grants of after an approval, when they moved while it was asked (declared here:
        // `resolved` may borrow from it).
        let after_approval: Arc<View>;
        let mut resolved = match self.resolve(&view, &call.name, &mut audit) {
            Ok(r) => r,
            Err((decision, text)) => return self.refuse(&audit, decision, text),
        };
        // 4. Approval, about this very tool and these arguments.
        let mut decision = Decision::Allowed;
        if resolved.tool.requires_approval {
            let null = Value::Null;
            let target = Target {
                agent: &self.agent,
                server: resolved.server,
                qualified: &resolved.tool.qualified_name,
                raw: &resolved.tool.name,
                access: resolved.tool.access,
                arguments: call.arguments.as_ref().unwrap_or(&null),
                grants_digest: resolved.grants_digest,
            };
            let can_elicit = approval::can_answer_forms(caller.capabilities);
            let requester = match caller.era {
                CallerEra::Modern => Requester::Modern {
                    can_elicit,
                    input_responses: call.input_responses.as_ref(),
                    request_state: call.request_state.as_deref(),
                },
                CallerEra::Legacy {
                    session,
                    protocol_version,
                } => Requester::Legacy {
                    session,
                    protocol_version,
                    // Elicitation arrived in 2025-06-18: a 2025-03-26 session has no way to answer.
                    can_elicit: can_elicit && protocol_version != "2025-03-26",
                    stream: caller.stream,
                },
            };
            match self
                .approvals
                .gate(&target, &requester, &mut cancelled)
                .await
            {
                Verdict::Approved => decision = Decision::Approved,
                Verdict::Ask(result) => {
                    self.finish(&audit, Decision::ApprovalAsked, Outcome::InputRequired);
                    return Reply::Result(result);
                }
                Verdict::Refused {
                    decision,
                    text,
                    code,
                    data,
                } => {
                    self.finish(&audit, decision, Outcome::Refused);
                    return match code {
                        Some(code) => Reply::Error {
                            code,
                            message: text,
                            data,
                        },
                        None => sentence(text),
                    };
                }
            }
            // A legacy approval may have taken minutes: the grants of now decide whether the
            // tool may still run (a modern retry was checked against them already).
            let now = Arc::clone(&self.view.borrow());
            if !Arc::ptr_eq(&now, &view) {
                let approved_tool = resolved.tool;
                after_approval = now;
                resolved = match self.resolve(&after_approval, &call.name, &mut audit) {
                    Ok(r)
                        if r.tool.name == approved_tool.name
                            && r.tool.definition_digest == approved_tool.definition_digest =>
                    {
                        r
                    }
                    Ok(_) => {
                        return self.refuse(
                            &audit,
                            Decision::DefinitionChanged,
                            format!(
                                "the tool {} changed while its approval was asked; it was not run",
                                call.name
                            ),
                        );
                    }
                    Err((decision, text)) => return self.refuse(&audit, decision, text),
                };
            }
        }
        // 5. Send, with the raw name.
        let name = call.name.clone();
        let upstream = upstream_params(call, &resolved.tool.name, caller.log_level);
        let endpoint = resolved.endpoint;
        let timeout = Duration::from_millis(endpoint.call_timeout_ms.max(1));
        let deadline = tokio::time::Instant::now() + timeout;
        let (notes_tx, mut notes_rx) = mpsc::unbounded_channel::<Value>();
        let mut attempts = 0;
        let (reply, outcome) = {
            let sending = tokio::time::timeout_at(
                deadline,
                self.send(
                    resolved.server,
                    resolved.tool,
                    endpoint,
                    upstream,
                    &notes_tx,
                    &mut attempts,
                ),
            );
            tokio::pin!(sending);
            loop {
                tokio::select! {
                    sent = &mut sending => break match sent {
                        Ok(done) => done,
                        Err(_) => (
                            sentence(format!(
                                "the call to {name} did not finish within {}; its outcome is unknown: check before calling it again",
                                humanize(timeout)
                            )),
                            Outcome::Timeout,
                        ),
                    },
                    Some(note) = notes_rx.recv() => pass_through(resolved.server, note, caller),
                    _ = &mut cancelled => break (
                        sentence(format!("the call to {name} was cancelled; its outcome is unknown")),
                        Outcome::OutcomeUnknown,
                    ),
                }
            }
        };
        audit.attempts = attempts;
        while let Ok(note) = notes_rx.try_recv() {
            pass_through(resolved.server, note, caller);
        }
        if let Reply::Streamed(mut streamed) = reply {
            let end = CallEnd {
                agent: self.agent.clone(),
                metrics: Arc::clone(&self.metrics),
                audit,
                decision,
            };
            streamed.ends_with(end, deadline, timeout);
            return Reply::Streamed(streamed);
        }
        self.finish(&audit, decision, outcome);
        reply
    }

    /// Steps 1–3 on `view`: the tool the grants permit under `name`, on a server that can be
    /// called, with the definition that was granted.
    fn resolve<'v>(
        &self,
        view: &'v View,
        name: &str,
        audit: &mut Audit,
    ) -> Result<Resolved<'v>, (Decision, String)> {
        let Some(grants) = view.grants.as_ref() else {
            return Err((
                Decision::NotGranted,
                format!(
                    "the tool {} is not granted: no tool is granted to this agent now ({})",
                    shown(name),
                    view.nothing_granted
                        .as_deref()
                        .unwrap_or("the sidecar has not read a grants document yet")
                ),
            ));
        };
        // 1. Narrow: the one function, however the agent got the name.
        let Some(tool) = grants::permits(&grants.doc, name) else {
            return Err((
                Decision::NotGranted,
                format!("the tool {} is not granted to this agent", shown(name)),
            ));
        };
        let Some((server, _)) = grants.doc.find(name) else {
            unreachable!("permits found {name} in the document");
        };
        audit.server = Some(server.name.clone());
        audit.tool = Some((tool.name.clone(), tool.access));
        // 2. Available.
        let Some(endpoint) = server.endpoint.as_ref().filter(|_| server.available) else {
            return Err((
                Decision::ServerUnavailable,
                format!(
                    "the tool {name} cannot be called: the McpServer {} is not available (see its status)",
                    server.name
                ),
            ));
        };
        let live = match self.definitions.get(&server.name) {
            Live::Ready(tools) => tools,
            Live::Reading => {
                return Err((
                    Decision::ServerUnavailable,
                    format!(
                        "the tool {name} cannot be called yet: the sidecar is still reading the tools of {}",
                        server.name
                    ),
                ));
            }
            Live::Unavailable(reason)
            | Live::MissingCredentials {
                sentence: reason, ..
            } => {
                return Err((
                    Decision::ServerUnavailable,
                    format!(
                        "the tool {name} cannot be called: server {} is unavailable ({reason})",
                        server.name
                    ),
                ));
            }
        };
        // 3. Definition: the rug-pull guard.
        match live.get(&tool.name) {
            Some(t) if t.digest == tool.definition_digest => {}
            Some(_) => {
                return Err((
                    Decision::DefinitionChanged,
                    format!(
                        "the tool {name} is withheld: its definition on server {} changed since it was granted, and it stays withheld until the grants are updated",
                        server.name
                    ),
                ));
            }
            None => {
                return Err((
                    Decision::ServerUnavailable,
                    format!(
                        "the tool {name} cannot be called: server {} no longer offers it",
                        server.name
                    ),
                ));
            }
        }
        Ok(Resolved {
            server: &server.name,
            endpoint,
            tool,
            grants_digest: &grants.digest,
        })
    }

    /// Sends, reconnecting and resending only where that is safe. Returns the reply and how the
    /// call ended.
    async fn send(
        &self,
        server: &str,
        tool: &GrantedTool,
        endpoint: &grants::Endpoint,
        params: Map<String, Value>,
        notifications: &mpsc::UnboundedSender<Value>,
        attempts: &mut u32,
    ) -> (Reply, Outcome) {
        let resend_safe = tool.access == Access::Read || tool.idempotent;
        let mut budget = endpoint.retry;
        let mut session_renewed = false;
        let qualified = &tool.qualified_name;
        loop {
            let resolved = match self.credentials.resolve(endpoint, self.policy) {
                Ok(r) => r,
                Err(reason) => {
                    return (
                        sentence(format!(
                            "the tool {qualified} cannot be called: server {} is unavailable ({reason})",
                            server
                        )),
                        Outcome::Error,
                    );
                }
            };
            let session = match self.pool.session(server, &resolved, endpoint.era).await {
                Ok(s) => s,
                Err(e) => {
                    // Nothing was sent: trying again is always safe, within the budget.
                    if budget > 0 {
                        budget -= 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the tool {qualified} cannot be called: server {} could not be reached ({e})",
                            server
                        )),
                        Outcome::Error,
                    );
                }
            };
            *attempts += 1;
            let id = session.next_request_id();
            let guard = CancelOnDrop {
                session: Some(Arc::clone(&session)),
                id,
            };
            let answer = session.call(id, &params, Some(notifications)).await;
            guard.disarm();
            match answer {
                Ok(CallAnswer::Result(result))
                    if result.get("resultType").and_then(Value::as_str)
                        == Some("input_required") =>
                {
                    // The server wants input from the agent (2026-07-28): its requests do not
                    // pass the sidecar, whose own approval exchange uses the same fields.
                    return (
                        sentence(format!(
                            "server {server} asked for more input to run {qualified} (elicitation or sampling from servers does not pass the sidecar); the call did not complete and may have done part of its work"
                        )),
                        Outcome::Error,
                    );
                }
                Ok(CallAnswer::Passed(raw))
                    if raw.result_type.as_deref() == Some("input_required") =>
                {
                    return (
                        sentence(format!(
                            "server {server} asked for more input to run {qualified} (elicitation or sampling from servers does not pass the sidecar); the call did not complete and may have done part of its work"
                        )),
                        Outcome::Error,
                    );
                }
                Ok(CallAnswer::Streamed(result)) => {
                    // Its outcome is known when it has ended (see `call_via`).
                    return (
                        Reply::Streamed(Box::new(StreamedReply::unended(*result))),
                        Outcome::Ok,
                    );
                }
                Ok(CallAnswer::Passed(raw)) => {
                    let outcome = if raw.is_error {
                        Outcome::IsError
                    } else {
                        Outcome::Ok
                    };
                    return (Reply::Passed(raw), outcome);
                }
                Ok(CallAnswer::Result(result)) => {
                    let outcome = if result.get("isError").and_then(Value::as_bool) == Some(true) {
                        Outcome::IsError
                    } else {
                        Outcome::Ok
                    };
                    return (Reply::Result(result), outcome);
                }
                Ok(CallAnswer::Error { code, data }) => {
                    return (
                        Reply::Error {
                            code,
                            message: format!(
                                "server {} answered the call to {qualified} with JSON-RPC error {code}",
                                server
                            ),
                            data,
                        },
                        Outcome::Error,
                    );
                }
                Err(CallFailure::SessionGone { status }) => {
                    self.pool.discard(server, &resolved, &session).await;
                    if !session_renewed {
                        session_renewed = true;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the tool {qualified} was not run: server {} rejected a new session too (HTTP {status})",
                            server
                        )),
                        Outcome::Error,
                    );
                }
                Err(CallFailure::NotSent(e)) => {
                    self.pool.discard(server, &resolved, &session).await;
                    if budget > 0 {
                        budget -= 1;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the tool {qualified} was not run: server {} refused it ({e})",
                            server
                        )),
                        Outcome::Error,
                    );
                }
                Err(CallFailure::Refused(e)) => {
                    // Not retried; the next call reconnects and reads the credential again.
                    self.pool.discard(server, &resolved, &session).await;
                    return (
                        sentence(format!("the tool {qualified} was not run: {e}")),
                        Outcome::Error,
                    );
                }
                Err(CallFailure::AfterSending(e)) => {
                    self.pool.discard(server, &resolved, &session).await;
                    if resend_safe && budget > 0 {
                        budget -= 1;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the outcome of the call to {qualified} is unknown: it was sent to server {} and no answer came back ({e}); check whether it took effect before calling it again",
                            server
                        )),
                        Outcome::OutcomeUnknown,
                    );
                }
            }
        }
    }

    pub(super) fn refuse(&self, audit: &Audit, decision: Decision, text: String) -> Reply {
        self.finish(audit, decision, Outcome::Refused);
        sentence(text)
    }

    fn finish(&self, audit: &Audit, decision: Decision, outcome: Outcome) {
        record(&self.agent, &self.metrics, audit, decision, outcome);
    }
}

/// Writes a call's audit line, trace and metrics.
fn record(agent: &str, metrics: &Metrics, audit: &Audit, decision: Decision, outcome: Outcome) {
    let duration = audit.started.elapsed();
    let server = audit.server.as_deref();
    let record = CallRecord {
        agent,
        server,
        tool: &audit.name,
        raw_tool: audit.tool.as_ref().map(|(t, _)| t.as_str()),
        access: audit.tool.as_ref().map(|(_, a)| *a).or(audit.graded),
        via: audit.via,
        decision,
        outcome,
        duration,
        attempts: audit.attempts,
    };
    audit::write(&record);
    super::traces::call(&record);
    let server = server.unwrap_or("").to_string();
    if decision.sent() {
        metrics
            .call_duration
            .get_or_create(&server_label(&server))
            .observe(duration.as_secs_f64());
    }
    metrics
        .calls
        .get_or_create(&CallLabels {
            server,
            decision: decision.as_str(),
            outcome: outcome.as_str(),
        })
        .inc();
}

/// The end of a call whose answer goes on after [`Calls::call_via`] returned (a streamed
/// answer): its audit line and metrics, written once the answer has ended.
pub(super) struct CallEnd {
    agent: String,
    metrics: Arc<Metrics>,
    audit: Audit,
    decision: Decision,
}

impl CallEnd {
    /// The server that answers.
    pub(super) fn server(&self) -> &str {
        self.audit.server.as_deref().unwrap_or("")
    }

    /// The answer ended with `outcome`; `why` it was broken off, when it was.
    pub(super) fn ended(self, outcome: Outcome, why: Option<&str>) {
        if let Some(why) = why {
            tracing::warn!(
                tool = %self.audit.name,
                server = self.server(),
                "the answer was broken off on its way to the agent: {why}"
            );
        }
        record(
            &self.agent,
            &self.metrics,
            &self.audit,
            self.decision,
            outcome,
        );
    }
}

/// The `tools/call` params the upstream gets: the raw name, the arguments, the agent's `_meta`
/// without its protocol envelope (which describes the agent's connection to the sidecar, not
/// the sidecar's to the upstream), and nothing of the sidecar's own approval exchange.
fn upstream_params(call: ToolCall, raw: &str, log_level: Option<&str>) -> Map<String, Value> {
    let mut params = call.rest;
    params.insert("name".into(), Value::String(raw.to_string()));
    if let Some(arguments) = call.arguments {
        params.insert("arguments".into(), arguments);
    }
    let mut meta = call.meta.unwrap_or_default();
    meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
    // A modern upstream sends log lines only to a request that opts in (2026-07-28): the
    // agent's level, which a legacy agent sets for its session (logging/setLevel).
    if let Some(level) = log_level {
        meta.insert(META_LOG_LEVEL.into(), Value::String(level.to_string()));
    }
    if !meta.is_empty() {
        params.insert("_meta".into(), Value::Object(meta));
    }
    params
}

const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// MCP's log levels, lowest first (RFC 5424 severities).
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Whether a line at `level` reaches an agent that asked for `wanted` and above.
fn wanted(level: &str, wanted: Option<&str>) -> bool {
    let rank = |l: &str| LOG_LEVELS.iter().position(|x| *x == l);
    match (rank(level), wanted.and_then(rank)) {
        (Some(l), Some(w)) => l >= w,
        // An unknown level is shown to an agent that wants log lines at all.
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

/// Most bytes of an upstream log line's data written to the sidecar's own log.
const LOG_DATA_BYTES: usize = 2048;

/// What the upstream sent on the call's stream that belongs to the call: progress and log
/// lines go to the agent (log lines also to the sidecar's log); anything else stays here.
fn pass_through(server: &str, note: Value, caller: &Caller<'_>) {
    let method = note.get("method").and_then(Value::as_str).unwrap_or("");
    match method {
        "notifications/progress" => {}
        "notifications/message" => {
            let params = note.get("params");
            let level = params
                .and_then(|p| p.get("level"))
                .and_then(Value::as_str)
                .unwrap_or("info");
            let logger = params
                .and_then(|p| p.get("logger"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let data = params
                .and_then(|p| p.get("data"))
                .map_or(String::new(), |d| {
                    let text = match d {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    bounded(&text, LOG_DATA_BYTES)
                });
            match level {
                "debug" => {
                    tracing::debug!(target: "mcp_sidecar::upstream_log", server, level, logger, "{data}")
                }
                "info" | "notice" => {
                    tracing::info!(target: "mcp_sidecar::upstream_log", server, level, logger, "{data}")
                }
                "warning" => {
                    tracing::warn!(target: "mcp_sidecar::upstream_log", server, level, logger, "{data}")
                }
                _ => {
                    tracing::error!(target: "mcp_sidecar::upstream_log", server, level, logger, "{data}")
                }
            }
            if !wanted(level, caller.log_level) {
                return;
            }
        }
        _ => return,
    }
    if let Some(stream) = caller.stream {
        let _ = stream.send(note);
    }
}

fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Tells the upstream a call was abandoned (timeout, agent cancelled, agent went away) when the
/// sending future is dropped before the answer came.
struct CancelOnDrop {
    session: Option<Arc<crate::mcp::call::ToolSession>>,
    id: u64,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.session = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let id = self.id;
            tokio::spawn(async move { session.cancel(id, "the agent's call ended").await });
        }
    }
}

/// A name as shown in a refusal: bounded, so a hostile agent cannot make the sidecar echo
/// megabytes.
pub(super) fn shown(name: &str) -> String {
    if name.is_empty() {
        return "with no name".into();
    }
    let cut: String = name.chars().take(128).collect();
    if cut.len() < name.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

pub(super) fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_gets_the_raw_name_and_none_of_the_sidecars_exchange() {
        let params = json!({
            "name": "fs__delete_file",
            "arguments": {"path": "/x"},
            "inputResponses": {"approval": {"action": "accept"}},
            "requestState": "sealed",
            "task": {"ttl": 1},
            "_meta": {
                "progressToken": 7,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                "io.modelcontextprotocol/logLevel": "debug",
            },
        });
        let call = ToolCall::from_params(params.as_object().cloned().unwrap());
        assert_eq!(call.name, "fs__delete_file");
        assert_eq!(call.request_state.as_deref(), Some("sealed"));
        assert!(call.input_responses.is_some());
        let sent = upstream_params(call.clone(), "delete_file", Some("warning"));
        assert_eq!(
            Value::Object(sent),
            json!({"name": "delete_file", "arguments": {"path": "/x"}, "task": {"ttl": 1},
                   "_meta": {"progressToken": 7, "io.modelcontextprotocol/logLevel": "warning"}})
        );
        let quiet = upstream_params(ToolCall { meta: None, ..call }, "delete_file", None);
        assert!(!quiet.contains_key("_meta"));
    }

    #[test]
    fn a_pretty_printed_answer_goes_on_as_one_event_line_unparsed() {
        let answer = "{\r\n  \"jsonrpc\": \"2.0\",\n  \"id\": 4,\n  \"result\": {\n    \"content\": [{\"type\": \"text\", \"text\": \"two\\nlines \u{e9}\"}],\n    \"isError\": false\n  }\n}\n";
        let raw = RawResult::of_answer(Bytes::from(answer), 4).expect("passes through");
        let event = Reply::Passed(raw).into_sse_event(&json!("agent-9"), true);
        let text = std::str::from_utf8(&event).expect("UTF-8");
        let data = text
            .strip_prefix("event: message\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .expect("one event");
        assert!(!data.contains(['\n', '\r']), "{data:?}");
        assert_eq!(
            serde_json::from_str::<Value>(data).expect("its data is JSON"),
            json!({"jsonrpc": "2.0", "id": "agent-9", "result": {
                "resultType": "complete", "isError": false,
                "content": [{"type": "text", "text": "two\nlines \u{e9}"}]}})
        );
    }

    #[test]
    fn log_lines_reach_the_agent_at_its_level_and_above() {
        assert!(wanted("warning", Some("info")));
        assert!(wanted("info", Some("info")));
        assert!(!wanted("debug", Some("info")));
        assert!(!wanted("emergency", None));
        assert!(wanted("chatter", Some("error")));
    }
}
