//! The call pipeline: every `tools/call` the agent makes passes these steps, in this order, and
//! is audited once at the end.
//!
//! ```text
//! narrow      grants::permits(current document, name)     ── refused: "not granted"
//! available   the grants and the live state of the server ── refused: "server unavailable"
//! definition  live digest == granted digest               ── refused: "definition changed"
//! approval    requiresApproval → refused for now; issue 11's elicitation gate replaces this step
//! send        pool connection, call timeout, resend rules ── the upstream's answer, unchanged
//! ```
//!
//! A refused name never reaches an upstream. The upstream gets the raw tool name. Resending
//! (seed 000): a call is sent again only when the server cannot have run it (the session was
//! gone, the connection was refused) or when the tool is read-only or idempotent and the
//! server's retry budget allows; any other failure after sending answers "outcome unknown".

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::grants::{self, GrantedTool, ServerGrants};
use crate::mcp::call::{CallAnswer, CallFailure};
use crate::mcp::{Access, EndpointPolicy};

use super::audit::{self, CallRecord, Decision, Outcome};
use super::credentials::CredentialsDir;
use super::definitions::{Definitions, Live};
use super::listing::View;
use super::metrics::{CallLabels, Metrics, server_label};
use super::upstream::Pool;

/// What the agent gets back.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A `tools/call` result (the upstream's unchanged, or ours with `isError: true`).
    Result(Map<String, Value>),
    /// A JSON-RPC error (the upstream answered with one).
    Error {
        code: i64,
        message: String,
        data: Option<Value>,
    },
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
}

/// A refusal or failure, as the agent reads it: a tool result marked as an error.
fn sentence(text: String) -> Reply {
    let mut result = Map::new();
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result.insert("isError".into(), Value::Bool(true));
    Reply::Result(result)
}

struct Audit<'a> {
    started: Instant,
    name: &'a str,
    server: Option<&'a ServerGrants>,
    tool: Option<&'a GrantedTool>,
    /// Times the call was sent (atomic so the audit-on-drop guard can read it while `send`
    /// counts).
    attempts: AtomicU32,
}

impl Calls {
    /// Runs one `tools/call` (params as the agent sent them) through the pipeline.
    /// `notifications` receives what the upstream sends on the call's stream; when `cancelled`
    /// completes the upstream is told and the call ends.
    pub async fn call(
        &self,
        params: Map<String, Value>,
        notifications: Option<&mpsc::UnboundedSender<Value>>,
        cancelled: impl Future<Output = ()>,
    ) -> Reply {
        let started = Instant::now();
        let view = Arc::clone(&self.view.borrow());
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut audit = Audit {
            started,
            name: &name,
            server: None,
            tool: None,
            attempts: AtomicU32::new(0),
        };
        let Some(grants) = view.grants.as_ref() else {
            return self.refuse(
                &audit,
                Decision::ServerUnavailable,
                "no tools are granted yet: the sidecar has not read a grants document".into(),
            );
        };
        // 1. Narrow: the one function, however the agent got the name.
        let Some(tool) = grants::permits(&grants.doc, &name) else {
            return self.refuse(
                &audit,
                Decision::NotGranted,
                format!("the tool {} is not granted to this agent", shown(&name)),
            );
        };
        let Some((server, _)) = grants.doc.find(&name) else {
            unreachable!("permits found {name} in the document");
        };
        audit.server = Some(server);
        audit.tool = Some(tool);
        // 2. Available.
        let Some(endpoint) = server.endpoint.as_ref().filter(|_| server.available) else {
            return self.refuse(
                &audit,
                Decision::ServerUnavailable,
                format!(
                    "the tool {name} cannot be called: the McpServer {} is not available (see its status)",
                    server.name
                ),
            );
        };
        let live = match self.definitions.get(&server.name) {
            Live::Ready(tools) => tools,
            Live::Reading => {
                return self.refuse(
                    &audit,
                    Decision::ServerUnavailable,
                    format!(
                        "the tool {name} cannot be called yet: the sidecar is still reading the tools of {}",
                        server.name
                    ),
                );
            }
            Live::Unavailable(reason) => {
                return self.refuse(
                    &audit,
                    Decision::ServerUnavailable,
                    format!(
                        "the tool {name} cannot be called: server {} is unavailable ({reason})",
                        server.name
                    ),
                );
            }
        };
        // 3. Definition: the rug-pull guard.
        match live.get(&tool.name) {
            Some(t) if t.digest == tool.definition_digest => {}
            Some(_) => {
                return self.refuse(
                    &audit,
                    Decision::DefinitionChanged,
                    format!(
                        "the tool {name} is withheld: its definition on server {} changed since it was granted, and it stays withheld until the grants are updated",
                        server.name
                    ),
                );
            }
            None => {
                return self.refuse(
                    &audit,
                    Decision::ServerUnavailable,
                    format!(
                        "the tool {name} cannot be called: server {} no longer offers it",
                        server.name
                    ),
                );
            }
        }
        // 4. Approval. Until the sidecar can ask the agent's client (elicitation, issue 11), a
        //    gated tool is refused: running it unasked would make the grant's gate advice.
        if tool.requires_approval {
            return self.refuse(
                &audit,
                Decision::ApprovalRequired,
                format!(
                    "the tool {name} needs a person's approval before it runs, and this sidecar cannot ask for it yet; it was not run"
                ),
            );
        }
        // 5. Send, with the raw name.
        let mut upstream = params;
        upstream.insert("name".into(), Value::String(tool.name.clone()));
        // The agent's protocol envelope describes its connection to the sidecar, not the
        // sidecar's to the upstream (which gets its own); the rest of `_meta` (progressToken…)
        // passes through.
        if let Some(Value::Object(meta)) = upstream.get_mut("_meta") {
            meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
            if meta.is_empty() {
                upstream.remove("_meta");
            }
        }
        let timeout = Duration::from_millis(endpoint.call_timeout_ms.max(1));
        // From here the call may be in the upstream's hands: if the agent goes away (its HTTP
        // request closed, which is how a 2026-07-28 agent cancels) this future is dropped, and
        // the call is still audited, its outcome unknown.
        let unfinished = AuditOnDrop {
            calls: self,
            audit: &audit,
        };
        let (reply, outcome) = tokio::select! {
            sent = tokio::time::timeout(
                timeout,
                self.send(server, tool, endpoint, upstream, notifications, &audit.attempts),
            ) => match sent {
                Ok(done) => done,
                Err(_) => (
                    sentence(format!(
                        "the call to {name} did not finish within {}; its outcome is unknown: check before calling it again",
                        humanize(timeout)
                    )),
                    Outcome::Timeout,
                ),
            },
            _ = cancelled => (
                sentence(format!("the call to {name} was cancelled; its outcome is unknown")),
                Outcome::OutcomeUnknown,
            ),
        };
        std::mem::forget(unfinished);
        self.finish(&audit, Decision::Allowed, outcome);
        reply
    }

    /// Sends, reconnecting and resending only where that is safe. Returns the reply and how the
    /// call ended.
    async fn send(
        &self,
        server: &ServerGrants,
        tool: &GrantedTool,
        endpoint: &grants::Endpoint,
        params: Map<String, Value>,
        notifications: Option<&mpsc::UnboundedSender<Value>>,
        attempts: &AtomicU32,
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
                            server.name
                        )),
                        Outcome::Error,
                    );
                }
            };
            let session = match self
                .pool
                .session(&server.name, &resolved, endpoint.era)
                .await
            {
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
                            server.name
                        )),
                        Outcome::Error,
                    );
                }
            };
            attempts.fetch_add(1, Ordering::Relaxed);
            let id = session.next_request_id();
            let guard = CancelOnDrop {
                session: Some(Arc::clone(&session)),
                id,
            };
            let answer = session.call(id, params.clone(), notifications).await;
            guard.disarm();
            match answer {
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
                                server.name
                            ),
                            data,
                        },
                        Outcome::Error,
                    );
                }
                Err(CallFailure::SessionGone { status }) => {
                    self.pool.discard(&server.name, &resolved, &session).await;
                    if !session_renewed {
                        session_renewed = true;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the tool {qualified} was not run: server {} rejected a new session too (HTTP {status})",
                            server.name
                        )),
                        Outcome::Error,
                    );
                }
                Err(CallFailure::NotSent(e)) => {
                    self.pool.discard(&server.name, &resolved, &session).await;
                    if budget > 0 {
                        budget -= 1;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the tool {qualified} was not run: server {} refused it ({e})",
                            server.name
                        )),
                        Outcome::Error,
                    );
                }
                Err(CallFailure::Refused(e)) => {
                    // Not retried; the next call reconnects and reads the credential again.
                    self.pool.discard(&server.name, &resolved, &session).await;
                    return (
                        sentence(format!("the tool {qualified} was not run: {e}")),
                        Outcome::Error,
                    );
                }
                Err(CallFailure::AfterSending(e)) => {
                    self.pool.discard(&server.name, &resolved, &session).await;
                    if resend_safe && budget > 0 {
                        budget -= 1;
                        continue;
                    }
                    return (
                        sentence(format!(
                            "the outcome of the call to {qualified} is unknown: it was sent to server {} and no answer came back ({e}); check whether it took effect before calling it again",
                            server.name
                        )),
                        Outcome::OutcomeUnknown,
                    );
                }
            }
        }
    }

    fn refuse(&self, audit: &Audit<'_>, decision: Decision, text: String) -> Reply {
        self.finish(audit, decision, Outcome::Refused);
        sentence(text)
    }

    fn finish(&self, audit: &Audit<'_>, decision: Decision, outcome: Outcome) {
        let duration = audit.started.elapsed();
        let server = audit.server.map(|s| s.name.as_str());
        audit::write(&CallRecord {
            agent: &self.agent,
            server,
            tool: audit.name,
            raw_tool: audit.tool.map(|t| t.name.as_str()),
            access: audit.tool.map(|t| t.access),
            decision,
            outcome,
            duration,
            attempts: audit.attempts.load(Ordering::Relaxed),
        });
        let server = server.unwrap_or("").to_string();
        if decision == Decision::Allowed {
            self.metrics
                .call_duration
                .get_or_create(&server_label(&server))
                .observe(duration.as_secs_f64());
        }
        self.metrics
            .calls
            .get_or_create(&CallLabels {
                server,
                decision: decision.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }
}

/// Audits an allowed call whose future was dropped before it ended (the agent went away): it
/// was sent, or about to be, so its outcome is unknown. Forgotten once the call ends normally.
struct AuditOnDrop<'c, 'a> {
    calls: &'c Calls,
    audit: &'c Audit<'a>,
}

impl Drop for AuditOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.calls
            .finish(self.audit, Decision::Allowed, Outcome::OutcomeUnknown);
    }
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
fn shown(name: &str) -> String {
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

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
