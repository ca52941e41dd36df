//! Resources and prompts through the sidecar: what the agent may list, read, get, complete and
//! subscribe to, narrowed by the grants' resource and prompt bounds
//! ([`crate::grants::resources_prompts`]). [`Narrowing`] is pure and compiled once per grants
//! generation (kept in [`super::grants_file::Loaded`]); [`Calls`] gains the upstream half.
//!
//! ```text
//! resources/list, resources/templates/list, prompts/list
//!     every granted server (concurrently) ─► every page, bounded ─► keep the granted ones,
//!     renamed: <prefix>+<uri> / <prefix>+<uriTemplate> / <prefix>__<name>  ─► one page
//! resources/read, resources/subscribe|unsubscribe   <prefix>+<uri> ─► Narrowing::resource
//! prompts/get                                       <prefix>__<name> ─► Narrowing::prompt
//! completion/complete   ref/prompt name, ref/resource uri (a template)   ─┘
//!     refused (a JSON-RPC error naming it): never sent; granted: the raw URI or name upstream,
//!     the answer's URIs renamed back; one audit line per read and get
//! ```
//!
//! The agent sees a resource as `<prefix>+<uri>` (see the grants module for why `+` and why it
//! never collides) and a prompt as `<prefix>__<name>`, like a tool. Two servers whose prefixes
//! make one prompt name (`a` + `_x` and `a_` + `x`) are both left out of the list and a get of
//! that name is refused as ambiguous, as colliding tools are withheld.
//!
//! Listing asks the upstreams at the agent's request (resources change more often than tools,
//! and nothing here is kept between requests). A server that cannot be listed is left out of the
//! answer and named in the log; the others are still listed. Subscriptions, upstream
//! `list_changed` and `notifications/resources/updated` are [`super::relay`]'s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::grants::resources_prompts::Kind;
use crate::grants::{
    Bounds, Endpoint, GrantsDocument, qualified_name, qualified_uri, split_qualified_uri,
};
use crate::mcp::call::{CallAnswer, CallFailure};

use super::audit::{self, AccessRecord, Decision, Outcome};
use super::calls::{Calls, Reply, shown};
use super::prompt_pins;

/// MCP's "resource not found" (the spec's code for a resources/read of an unknown URI).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// JSON-RPC invalid params: a prompt or reference that is not granted, or malformed params.
const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC internal error: the upstream could not be reached or answered nothing usable.
const INTERNAL_ERROR: i64 = -32603;

/// One server's resource and prompt grants.
#[derive(Debug, PartialEq)]
pub struct Surface {
    pub server: String,
    pub prefix: String,
    pub resources: Bounds,
    pub prompts: Bounds,
}

/// Every server's resource and prompt grants, compiled for one grants generation.
#[derive(Debug, Default)]
pub struct Narrowing {
    /// Servers granting resources or prompts, sorted by prefix.
    servers: Vec<Surface>,
    by_prefix: HashMap<String, usize>,
}

/// Which list the agent asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Resources,
    Templates,
    Prompts,
}

impl ListKind {
    /// The method, which is also the upstream's.
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
            ListKind::Prompts => "prompts/list",
        }
    }

    /// The result's array.
    fn field(self) -> &'static str {
        match self {
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
            ListKind::Prompts => "prompts",
        }
    }

    /// The item's key the bounds match and the prefix renames.
    fn key(self) -> &'static str {
        match self {
            ListKind::Resources => "uri",
            ListKind::Templates => "uriTemplate",
            ListKind::Prompts => "name",
        }
    }
}

impl Narrowing {
    /// Compiles the bounds of every available server of `doc`.
    pub fn new(doc: &GrantsDocument) -> Self {
        let mut servers: Vec<Surface> = doc
            .servers
            .iter()
            .filter(|s| s.available && s.grants_resources_or_prompts())
            .map(|s| Surface {
                server: s.name.clone(),
                prefix: s.prefix.clone(),
                resources: Bounds::new(&s.resources, Kind::Resource),
                prompts: Bounds::new(&s.prompts, Kind::Prompt),
            })
            .filter(|s| !s.resources.is_empty() || !s.prompts.is_empty())
            .collect();
        servers.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        let by_prefix = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.prefix.clone(), i))
            .collect();
        Narrowing { servers, by_prefix }
    }

    /// Some server grants resources: the sidecar advertises the capability.
    pub fn grants_resources(&self) -> bool {
        self.servers.iter().any(|s| !s.resources.is_empty())
    }

    /// Some server grants prompts.
    pub fn grants_prompts(&self) -> bool {
        self.servers.iter().any(|s| !s.prompts.is_empty())
    }

    /// The servers a list of `kind` asks.
    pub fn listing(&self, kind: ListKind) -> impl Iterator<Item = &Surface> {
        self.servers.iter().filter(move |s| match kind {
            ListKind::Prompts => !s.prompts.is_empty(),
            _ => !s.resources.is_empty(),
        })
    }

    /// The server and upstream URI of a granted `<prefix>+<uri>`, or the refusal's sentence.
    pub fn resource<'n, 'q>(
        &'n self,
        qualified: &'q str,
    ) -> Result<(&'n Surface, &'q str), String> {
        let refused = || {
            format!(
                "the resource {} is not granted to this agent",
                shown(qualified)
            )
        };
        let (prefix, uri) = split_qualified_uri(qualified).ok_or_else(refused)?;
        let surface = self
            .by_prefix
            .get(prefix)
            .map(|&i| &self.servers[i])
            .ok_or_else(refused)?;
        if surface.resources.permits(uri) {
            Ok((surface, uri))
        } else {
            Err(refused())
        }
    }

    /// The agent's name (`<prefix>+<uri>`) for `server`'s resource `uri`, if it is granted.
    pub fn granted_resource(&self, server: &str, uri: &str) -> Option<String> {
        self.servers
            .iter()
            .find(|s| s.server == server && s.resources.permits(uri))
            .map(|s| qualified_uri(&s.prefix, uri))
    }

    /// Whether `server` grants the agent any item of `kind`.
    pub fn server_grants(&self, server: &str, kind: ListKind) -> bool {
        self.listing(kind).any(|s| s.server == server)
    }

    /// Whether `other` grants the same items of `kind` under the same names (else the agent's
    /// list may have changed with the grants).
    pub fn same_as(&self, other: &Narrowing, kind: ListKind) -> bool {
        let bounds = |s: &Surface| match kind {
            ListKind::Prompts => s.prompts.clone(),
            _ => s.resources.clone(),
        };
        let of = |n: &Narrowing| {
            n.listing(kind)
                .map(|s| (s.server.clone(), s.prefix.clone(), bounds(s)))
                .collect::<Vec<_>>()
        };
        of(self) == of(other)
    }

    /// The server and raw name of a granted `<prefix>__<name>`, or the refusal's sentence.
    pub fn prompt<'n, 'q>(&'n self, qualified: &'q str) -> Result<(&'n Surface, &'q str), String> {
        let candidates: Vec<(&Surface, &str)> = self
            .servers
            .iter()
            .filter_map(|s| {
                let raw = qualified
                    .strip_prefix(s.prefix.as_str())?
                    .strip_prefix("__")?;
                s.prompts.permits(raw).then_some((s, raw))
            })
            .collect();
        match candidates.as_slice() {
            [one] => Ok(*one),
            [] => Err(format!(
                "the prompt {} is not granted to this agent",
                shown(qualified)
            )),
            many => Err(format!(
                "the prompt name {} is ambiguous: servers {} both grant a prompt it names; give one of them another prefix",
                shown(qualified),
                many.iter()
                    .map(|(s, _)| s.server.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        }
    }
}

/// One server's granted items of a list, renamed for the agent: those whose key the bounds
/// permit, the key qualified with the prefix.
pub fn narrow_items(surface: &Surface, kind: ListKind, items: Vec<Value>) -> Vec<Value> {
    let bounds = match kind {
        ListKind::Prompts => &surface.prompts,
        _ => &surface.resources,
    };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Object(mut item) = item else {
                return None;
            };
            let raw = item.get(kind.key())?.as_str()?;
            if !bounds.permits(raw) {
                return None;
            }
            let renamed = match kind {
                ListKind::Prompts => qualified_name(&surface.prefix, raw),
                _ => qualified_uri(&surface.prefix, raw),
            };
            item.insert(kind.key().into(), Value::String(renamed));
            Some(Value::Object(item))
        })
        .collect()
}

/// Prompts that two servers would publish under one name: all of them are left out.
fn without_colliding_prompts(items: Vec<Value>) -> Vec<Value> {
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for item in &items {
        if let Some(name) = item.get("name").and_then(Value::as_str)
            && !seen.insert(name.to_string())
        {
            twice.insert(name.to_string());
        }
    }
    if twice.is_empty() {
        return items;
    }
    items
        .into_iter()
        .filter(|i| {
            i.get("name")
                .and_then(Value::as_str)
                .is_none_or(|n| !twice.contains(n))
        })
        .collect()
}

/// Renames the upstream URIs in a result the agent gets back (read contents, a prompt's
/// embedded resources and resource links) to `<prefix>+<uri>`, so every URI the agent sees is
/// one it can ask for (and is checked when it does).
pub fn rename_uris(prefix: &str, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let is_content_item = map.contains_key("text")
                || map.contains_key("blob")
                || map.get("type").and_then(Value::as_str) == Some("resource_link");
            if is_content_item && let Some(Value::String(uri)) = map.get_mut("uri") {
                *uri = qualified_uri(prefix, uri);
            }
            for (key, v) in map.iter_mut() {
                if key != "uri" {
                    rename_uris(prefix, v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_uris(prefix, v)),
        _ => {}
    }
}

/// A granted request on its way to the server: what it is, and how the agent and the audit
/// line name it.
struct Target<'a> {
    method: &'a str,
    /// The agent's name for it: `<prefix>+<uri>` or `<prefix>__<name>`.
    qualified: &'a str,
    /// "the resource" or "the prompt", and the refusal's verb, for the sentence the agent reads.
    what: &'a str,
    verb: &'a str,
    /// The params' key the raw name goes under (`uri` or `name`), and that raw name.
    key: &'static str,
    raw: &'a str,
    audited: bool,
}

/// What an upstream request ended as.
enum Forwarded {
    Result(Map<String, Value>),
    Error { code: i64, data: Option<Value> },
    Failed(String, Outcome),
}

impl Calls {
    /// The granted items of `kind` across every granted server, in one page.
    pub async fn list_granted(&self, kind: ListKind) -> Reply {
        let view = Arc::clone(&self.view.borrow());
        let Some(grants) = view.grants.as_ref() else {
            return Reply::Result(Map::from_iter([(kind.field().into(), json!([]))]));
        };
        let lists = self.narrowed_lists(&grants.doc, &grants.narrowing, kind);
        let mut items: Vec<Value> = futures::future::join_all(lists)
            .await
            .into_iter()
            .flatten()
            .collect();
        if kind == ListKind::Prompts {
            items = without_colliding_prompts(items);
        }
        Reply::Result(Map::from_iter([(kind.field().into(), Value::Array(items))]))
    }

    fn narrowed_lists<'a>(
        &'a self,
        doc: &'a GrantsDocument,
        narrowing: &'a Narrowing,
        kind: ListKind,
    ) -> Vec<impl std::future::Future<Output = Vec<Value>> + 'a> {
        narrowing
            .listing(kind)
            .filter_map(|surface| {
                let endpoint = endpoint_of(doc, &surface.server)?;
                Some(async move {
                    match self.list_all(&surface.server, endpoint, kind).await {
                        Ok(items) => {
                            let items = prompt_pins::keep(doc, &surface.server, kind, items);
                            narrow_items(surface, kind, items)
                        }
                        Err(reason) => {
                            tracing::warn!(
                                server = %surface.server,
                                method = kind.method(),
                                %reason,
                                "left this server out of the agent's list"
                            );
                            Vec::new()
                        }
                    }
                })
            })
            .collect()
    }

    /// Under pinning (the grants carry the server's `promptDigests`), whether the raw prompt
    /// is served as a person approved it, judged on the server's live prompt list; every way to
    /// a prompt (prompts/get, completion/complete) asks this. Unpinned servers: always.
    async fn served_as_approved(
        &self,
        doc: &GrantsDocument,
        surface: &Surface,
        endpoint: &Endpoint,
        raw: &str,
    ) -> Result<(), String> {
        let Some(pins) = prompt_pins::pins(doc, &surface.server) else {
            return Ok(());
        };
        let live = self
            .list_all(&surface.server, endpoint, ListKind::Prompts)
            .await?;
        prompt_pins::check(pins, raw, &live)
    }

    /// Every page of one server's list, bounded like its tool list (`maxToolPages`, a
    /// repeated cursor ends it with an error).
    async fn list_all(
        &self,
        server: &str,
        endpoint: &Endpoint,
        kind: ListKind,
    ) -> Result<Vec<Value>, String> {
        let max_pages = endpoint.max_tool_pages.unwrap_or(100);
        let mut items = Vec::new();
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        for page in 1..=max_pages {
            let mut params = Map::new();
            if let Some(c) = &cursor {
                params.insert("cursor".into(), Value::String(c.clone()));
            }
            let mut result = match self.forward(server, endpoint, kind.method(), params).await {
                (Forwarded::Result(r), _) => r,
                (Forwarded::Error { code, .. }, _) => {
                    return Err(format!(
                        "page {page} of {} answered with JSON-RPC error {code}",
                        kind.method()
                    ));
                }
                (Forwarded::Failed(why, _), _) => return Err(why),
            };
            match result.remove(kind.field()) {
                Some(Value::Array(page_items)) => items.extend(page_items),
                _ => {
                    return Err(format!(
                        "page {page} of {} has no {} array",
                        kind.method(),
                        kind.field()
                    ));
                }
            }
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => {
                    if !cursors.insert(next.to_string()) {
                        return Err(format!(
                            "{} repeated a cursor after {page} pages",
                            kind.method()
                        ));
                    }
                    cursor = Some(next.to_string());
                }
                _ => return Ok(items),
            }
        }
        Err(format!(
            "{} needs more than {max_pages} pages",
            kind.method()
        ))
    }

    /// `resources/read` (and, for [`super::relay`], `resources/subscribe` and
    /// `resources/unsubscribe`): a granted URI is sent with the prefix stripped; anything else is
    /// refused without contacting a server.
    pub async fn resource_request(&self, method: &str, params: Map<String, Value>) -> Reply {
        let started = Instant::now();
        let view = Arc::clone(&self.view.borrow());
        let qualified = params
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let audited = method == "resources/read";
        let Some(grants) = view.grants.as_ref() else {
            let text = format!(
                "the resource {} is not granted to this agent",
                shown(&qualified)
            );
            return self.refused(
                audited,
                method,
                &qualified,
                None,
                RESOURCE_NOT_FOUND,
                text,
                started,
            );
        };
        let (surface, uri) = match grants.narrowing.resource(&qualified) {
            Ok(found) => found,
            Err(text) => {
                return self.refused(
                    audited,
                    method,
                    &qualified,
                    None,
                    RESOURCE_NOT_FOUND,
                    text,
                    started,
                );
            }
        };
        let target = Target {
            method,
            qualified: &qualified,
            what: "the resource",
            verb: "read",
            key: "uri",
            raw: uri,
            audited,
        };
        self.send_granted(&grants.doc, surface, target, params, started)
            .await
    }

    /// `prompts/get`: a granted prompt is sent under its raw name.
    pub async fn prompt_get(&self, params: Map<String, Value>) -> Reply {
        let method = "prompts/get";
        let started = Instant::now();
        let view = Arc::clone(&self.view.borrow());
        let qualified = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(grants) = view.grants.as_ref() else {
            let text = format!(
                "the prompt {} is not granted to this agent",
                shown(&qualified)
            );
            return self.refused(
                true,
                method,
                &qualified,
                None,
                INVALID_PARAMS,
                text,
                started,
            );
        };
        let (surface, raw) = match grants.narrowing.prompt(&qualified) {
            Ok(found) => found,
            Err(text) => {
                return self.refused(
                    true,
                    method,
                    &qualified,
                    None,
                    INVALID_PARAMS,
                    text,
                    started,
                );
            }
        };
        let target = Target {
            method,
            qualified: &qualified,
            what: "the prompt",
            verb: "got",
            key: "name",
            raw,
            audited: true,
        };
        self.send_granted(&grants.doc, surface, target, params, started)
            .await
    }

    /// The tail a granted read, subscribe or get shares: the server's endpoint (refused when
    /// the server is not available), the request sent under the raw name, the answer's URIs
    /// renamed back, and one audit line when the method is audited.
    async fn send_granted(
        &self,
        doc: &GrantsDocument,
        surface: &Surface,
        target: Target<'_>,
        mut params: Map<String, Value>,
        started: Instant,
    ) -> Reply {
        let Target {
            method,
            qualified,
            what,
            verb,
            key,
            raw,
            audited,
        } = target;
        let Some(endpoint) = endpoint_of(doc, &surface.server) else {
            let text = format!(
                "{what} {} cannot be {verb}: the McpServer {} is not available (see its status)",
                shown(qualified),
                surface.server
            );
            return self.refused(
                audited,
                method,
                qualified,
                Some(&surface.server),
                INTERNAL_ERROR,
                text,
                started,
            );
        };
        if method == "prompts/get"
            && let Err(why) = self.served_as_approved(doc, surface, endpoint, raw).await
        {
            let text = format!("{what} {} is not served: {why}", shown(qualified));
            let server = Some(surface.server.as_str());
            return self.refused(
                audited,
                method,
                qualified,
                server,
                INVALID_PARAMS,
                text,
                started,
            );
        }
        params.insert(key.into(), Value::String(raw.to_string()));
        strip_envelope(&mut params);
        let (forwarded, attempts) = self
            .forward(&surface.server, endpoint, method, params)
            .await;
        let (reply, outcome) = answer(
            forwarded,
            &surface.prefix,
            &surface.server,
            method,
            qualified,
        );
        if audited {
            self.audit_access(
                method,
                qualified,
                Some(&surface.server),
                Some(raw),
                Decision::Allowed,
                outcome,
                started,
                attempts,
            );
        }
        reply
    }

    /// `completion/complete`: only for a granted prompt (`ref/prompt`) or a granted resource
    /// template (`ref/resource`, its `uri` the template).
    pub async fn complete(&self, mut params: Map<String, Value>) -> Reply {
        let view = Arc::clone(&self.view.borrow());
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let kind = reference.get("type").and_then(Value::as_str).unwrap_or("");
        let (key, qualified) = match kind {
            "ref/prompt" => ("name", reference.get("name")),
            "ref/resource" => ("uri", reference.get("uri")),
            _ => {
                return Reply::Error {
                    code: INVALID_PARAMS,
                    message: "completion/complete needs a ref of type ref/prompt or ref/resource"
                        .into(),
                    data: None,
                };
            }
        };
        let qualified = qualified.and_then(Value::as_str).unwrap_or("").to_string();
        let refused = |message: String| Reply::Error {
            code: INVALID_PARAMS,
            message,
            data: None,
        };
        let Some(grants) = view.grants.as_ref() else {
            return refused(format!(
                "{} is not granted to this agent",
                shown(&qualified)
            ));
        };
        let found = if key == "name" {
            grants.narrowing.prompt(&qualified)
        } else {
            grants.narrowing.resource(&qualified)
        };
        let (surface, raw) = match found {
            Ok(found) => found,
            Err(text) => return refused(text),
        };
        let Some(endpoint) = endpoint_of(&grants.doc, &surface.server) else {
            return refused(format!(
                "{} cannot be completed: the McpServer {} is not available",
                shown(&qualified),
                surface.server
            ));
        };
        // A prompt withheld by pinning is not served to anything: no completions either.
        if key == "name"
            && let Err(why) = self
                .served_as_approved(&grants.doc, surface, endpoint, raw)
                .await
        {
            return refused(format!("{} is not served: {why}", shown(&qualified)));
        }
        let mut reference = reference.as_object().cloned().unwrap_or_default();
        reference.insert(key.into(), Value::String(raw.to_string()));
        params.insert("ref".into(), Value::Object(reference));
        strip_envelope(&mut params);
        let (forwarded, _) = self
            .forward(&surface.server, endpoint, "completion/complete", params)
            .await;
        answer(
            forwarded,
            &surface.prefix,
            &surface.server,
            "completion/complete",
            &qualified,
        )
        .0
    }

    #[allow(clippy::too_many_arguments)]
    fn refused(
        &self,
        audited: bool,
        method: &str,
        name: &str,
        server: Option<&str>,
        code: i64,
        message: String,
        started: Instant,
    ) -> Reply {
        let decision = if code == INTERNAL_ERROR {
            Decision::ServerUnavailable
        } else {
            Decision::NotGranted
        };
        if audited {
            self.audit_access(
                method,
                name,
                server,
                None,
                decision,
                Outcome::Refused,
                started,
                0,
            );
        }
        Reply::Error {
            code,
            message,
            data: None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn audit_access(
        &self,
        method: &str,
        name: &str,
        server: Option<&str>,
        raw: Option<&str>,
        decision: Decision,
        outcome: Outcome,
        started: Instant,
        attempts: u32,
    ) {
        audit::write_access(&AccessRecord {
            agent: &self.agent,
            method,
            server,
            name,
            raw,
            decision,
            outcome,
            duration: started.elapsed(),
            attempts,
        });
    }

    /// Sends one request to `server` on the pooled connection, within its call timeout. Every
    /// method here only reads (or subscribes, which repeating does not change), so a request
    /// is sent again within the server's retry budget whenever it failed, and once more on a
    /// lost session.
    async fn forward(
        &self,
        server: &str,
        endpoint: &Endpoint,
        method: &str,
        params: Map<String, Value>,
    ) -> (Forwarded, u32) {
        let timeout = Duration::from_millis(endpoint.call_timeout_ms.max(1));
        let mut attempts = 0;
        let sent = tokio::time::timeout(
            timeout,
            self.forward_unbounded(server, endpoint, method, params, &mut attempts),
        )
        .await;
        let forwarded = sent.unwrap_or_else(|_| {
            Forwarded::Failed(
                format!(
                    "server {server} did not answer {method} within {} ms",
                    timeout.as_millis()
                ),
                Outcome::Timeout,
            )
        });
        (forwarded, attempts)
    }

    async fn forward_unbounded(
        &self,
        server: &str,
        endpoint: &Endpoint,
        method: &str,
        params: Map<String, Value>,
        attempts: &mut u32,
    ) -> Forwarded {
        let mut budget = endpoint.retry;
        let mut session_renewed = false;
        loop {
            let resolved = match self.credentials.resolve(endpoint, self.policy) {
                Ok(r) => r,
                Err(reason) => {
                    return Forwarded::Failed(
                        format!("server {server} is unavailable ({reason})"),
                        Outcome::Error,
                    );
                }
            };
            let session = match self.pool.session(server, &resolved, endpoint.era).await {
                Ok(s) => s,
                Err(e) if budget > 0 => {
                    budget -= 1;
                    tracing::debug!(server, error = %e, "connecting again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => {
                    return Forwarded::Failed(
                        format!("server {server} could not be reached ({e})"),
                        Outcome::Error,
                    );
                }
            };
            *attempts += 1;
            let id = session.next_request_id();
            match session.request(id, method, &params, None).await {
                Ok(CallAnswer::Passed(raw)) => return Forwarded::Result(raw.to_map()),
                // `request` reads every answer whole; none is streamed.
                Ok(CallAnswer::Streamed(_)) => {
                    return Forwarded::Failed(
                        format!("server {server} answered in a way this request cannot take"),
                        Outcome::Error,
                    );
                }
                Ok(CallAnswer::Result(result)) => return Forwarded::Result(result),
                Ok(CallAnswer::Error { code, data }) => return Forwarded::Error { code, data },
                Err(CallFailure::SessionGone { .. }) if !session_renewed => {
                    session_renewed = true;
                    self.pool.discard(server, &resolved, &session).await;
                }
                Err(CallFailure::Refused(e)) => {
                    self.pool.discard(server, &resolved, &session).await;
                    return Forwarded::Failed(
                        format!("server {server} refused {method}: {e}"),
                        Outcome::Error,
                    );
                }
                Err(e) => {
                    self.pool.discard(server, &resolved, &session).await;
                    if budget > 0 {
                        budget -= 1;
                        continue;
                    }
                    return Forwarded::Failed(
                        format!("server {server} did not answer {method} ({e})"),
                        Outcome::Error,
                    );
                }
            }
        }
    }
}

/// The endpoint of an available server of `doc`.
fn endpoint_of<'d>(doc: &'d GrantsDocument, server: &str) -> Option<&'d Endpoint> {
    doc.servers
        .iter()
        .find(|s| s.name == server && s.available)
        .and_then(|s| s.endpoint.as_ref())
}

/// The agent's `_meta` loses its protocol envelope (it describes the agent's connection to the
/// sidecar, not the sidecar's to the upstream), as a tool call's does.
fn strip_envelope(params: &mut Map<String, Value>) {
    if let Some(Value::Object(meta)) = params.get_mut("_meta") {
        meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
        if meta.is_empty() {
            params.remove("_meta");
        }
    }
}

/// The agent's reply to a forwarded request, and how it ended.
fn answer(
    forwarded: Forwarded,
    prefix: &str,
    server: &str,
    method: &str,
    name: &str,
) -> (Reply, Outcome) {
    match forwarded {
        Forwarded::Result(result) => {
            let mut value = Value::Object(result);
            rename_uris(prefix, &mut value);
            let Value::Object(result) = value else {
                unreachable!("an object stays an object");
            };
            (Reply::Result(result), Outcome::Ok)
        }
        Forwarded::Error { code, data } => (
            Reply::Error {
                code,
                message: format!(
                    "server {server} answered {method} of {} with JSON-RPC error {code}",
                    shown(name)
                ),
                data,
            },
            Outcome::Error,
        ),
        Forwarded::Failed(why, outcome) => (
            Reply::Error {
                code: INTERNAL_ERROR,
                message: format!("{method} of {} failed: {why}", shown(name)),
                data: None,
            },
            outcome,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::{PatternBound, ServerGrants};

    fn server(name: &str, prefix: &str, resources: &[&str], prompts: &[&str]) -> ServerGrants {
        let bound = |allow: &[&str]| -> Vec<PatternBound> {
            if allow.is_empty() {
                return vec![];
            }
            vec![PatternBound {
                allow: allow.iter().map(|s| s.to_string()).collect(),
                deny: vec!["*secret*".into()],
            }]
        };
        ServerGrants {
            name: name.into(),
            prefix: prefix.into(),
            optional: false,
            available: true,
            deferred: false,
            endpoint: None,
            tools: vec![],
            resources: bound(resources),
            prompts: bound(prompts),
            prompt_digests: None,
        }
    }

    #[test]
    fn reads_and_gets_resolve_to_the_granted_server_and_raw_name_only() {
        let doc = GrantsDocument::new(vec![
            server(
                "everything",
                "ev",
                &["demo://resource/static/*"],
                &["simple-prompt"],
            ),
            server("files", "fs", &["file:///docs/{name}"], &[]),
            server("quiet", "q", &[], &[]),
        ]);
        let n = Narrowing::new(&doc);
        assert!(n.grants_resources() && n.grants_prompts());
        assert_eq!(
            n.resource("ev+demo://resource/static/document/a.md")
                .map(|(s, u)| (s.server.as_str(), u)),
            Ok(("everything", "demo://resource/static/document/a.md"))
        );
        assert_eq!(
            n.resource("fs+file:///docs/readme")
                .map(|(s, _)| s.server.as_str()),
            Ok("files")
        );
        for refused in [
            "ev+demo://resource/dynamic/1",
            "ev+demo://resource/static/secret",
            "demo://resource/static/document/a.md",
            "fs+demo://resource/static/document/a.md",
            "q+anything",
            "nope+demo://resource/static/x",
            "",
        ] {
            let why = n.resource(refused).unwrap_err();
            assert!(
                why.contains("is not granted to this agent"),
                "{refused}: {why}"
            );
        }
        assert_eq!(
            n.prompt("ev__simple-prompt")
                .map(|(s, p)| (s.server.as_str(), p)),
            Ok(("everything", "simple-prompt"))
        );
        assert!(n.prompt("ev__complex-prompt").is_err());
        assert!(n.prompt("fs__simple-prompt").is_err());
        assert!(n.prompt("simple-prompt").is_err());
    }

    #[test]
    fn a_grants_document_without_resources_or_prompts_advertises_neither() {
        let n = Narrowing::new(&GrantsDocument::new(vec![server("a", "a", &[], &[])]));
        assert!(!n.grants_resources() && !n.grants_prompts());
        assert_eq!(n.listing(ListKind::Resources).count(), 0);
        let mut down = server("a", "a", &["*"], &["*"]);
        down.available = false;
        assert!(!Narrowing::new(&GrantsDocument::new(vec![down])).grants_resources());
    }

    #[test]
    fn a_prompt_name_two_prefixes_make_is_ambiguous_and_left_out_of_the_list() {
        let doc = GrantsDocument::new(vec![
            server("one", "a", &[], &["*"]),
            server("two", "a_", &[], &["*"]),
        ]);
        let n = Narrowing::new(&doc);
        let why = n.prompt("a___x").unwrap_err();
        assert!(
            why.contains("ambiguous") && why.contains("one and two"),
            "{why}"
        );
        let one = &n.servers[0];
        let two = &n.servers[1];
        let mut items = narrow_items(
            one,
            ListKind::Prompts,
            vec![json!({"name": "_x"}), json!({"name": "y"})],
        );
        items.extend(narrow_items(
            two,
            ListKind::Prompts,
            vec![json!({"name": "x"})],
        ));
        let kept = without_colliding_prompts(items);
        assert_eq!(kept, vec![json!({"name": "a__y"})]);
    }

    #[test]
    fn lists_keep_granted_items_renamed_and_drop_the_rest() {
        let doc = GrantsDocument::new(vec![server(
            "everything",
            "ev",
            &["demo://resource/static/*"],
            &[],
        )]);
        let n = Narrowing::new(&doc);
        let surface = &n.servers[0];
        let items = vec![
            json!({"uri": "demo://resource/static/document/a.md", "name": "a"}),
            json!({"uri": "demo://resource/static/secret.md", "name": "s"}),
            json!({"uri": "demo://resource/dynamic/1", "name": "d"}),
            json!("not an object"),
            json!({"name": "no uri"}),
        ];
        assert_eq!(
            narrow_items(surface, ListKind::Resources, items),
            vec![json!({"uri": "ev+demo://resource/static/document/a.md", "name": "a"})]
        );
        let templates = vec![
            json!({"uriTemplate": "demo://resource/static/document/{path}", "name": "t"}),
            json!({"uriTemplate": "demo://resource/dynamic/{id}", "name": "u"}),
        ];
        assert_eq!(
            narrow_items(surface, ListKind::Templates, templates),
            vec![json!({"uriTemplate": "ev+demo://resource/static/document/{path}", "name": "t"})]
        );
    }

    #[test]
    fn uris_in_answers_are_renamed_to_what_the_agent_can_ask_for() {
        let mut read = json!({"contents": [
            {"uri": "file:///a", "text": "x"},
            {"uri": "file:///b", "blob": "eA=="},
        ]});
        rename_uris("fs", &mut read);
        assert_eq!(read["contents"][0]["uri"], "fs+file:///a");
        assert_eq!(read["contents"][1]["uri"], "fs+file:///b");
        let mut prompt = json!({"messages": [
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "file:///c", "text": "y"}}},
            {"role": "user", "content": {"type": "resource_link", "uri": "file:///d", "name": "d"}},
            {"role": "user", "content": {"type": "text", "text": "see file:///e"}},
        ]});
        rename_uris("fs", &mut prompt);
        assert_eq!(
            prompt["messages"][0]["content"]["resource"]["uri"],
            "fs+file:///c"
        );
        assert_eq!(prompt["messages"][1]["content"]["uri"], "fs+file:///d");
        assert_eq!(prompt["messages"][2]["content"]["text"], "see file:///e");
    }
}
