//! Deferred disclosure (seed 002). A server the grants mark `deferred` (its granted schemas
//! exceed the preload budget) is not listed tool by tool: while any deferred server has tools
//! to offer, the agent's list carries three discovery tools in their place, and the agent pays
//! for one schema when it decides to use that tool.
//!
//! ```text
//! list_tools     {server?, query?, cursor?}   → name, title, access, short description; paged
//! get_tool_info  {server, tool}               → the tool's full live definition
//! call_tool      {server, tool, arguments?}   → Calls::call_via with the *target* tool
//! anything else                               → Calls::call (the direct pipeline)
//! ```
//!
//! Discovery is a door, not a bypass. It shows and calls only granted tools of deferred
//! servers whose live definition matches the granted one (the view's [`View::deferred`], built
//! by the same checks as the direct list). `call_tool` resolves its target in the grants
//! document and confirms it with [`grants::permits`], the one narrowing function; the call
//! then runs the direct call's whole pipeline as a [`ToolCall`] for the target, so the
//! definition guard, approval (asked about the target, never about `call_tool`), the audit
//! line (which names the target, `via=call_tool`) and the metrics are the target's. A target
//! that cannot be resolved is refused, audited as destructive. Non-deferred servers' tools
//! stay in the list and are not reachable through discovery.
//!
//! [`catalogue`] holds the pure parts: names, definitions, filtering, shortening, paging.

pub mod catalogue;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::grants::{self, GrantedTool, GrantsDocument, ServerGrants, qualified_name};
use crate::mcp::Access;

use self::catalogue::DiscoveryTool;
use super::audit::{Decision, Via};
use super::calls::{Audit, Caller, Calls, Reply, ToolCall, shown};
use super::listing::{Missing, View};

/// Runs one `tools/call`: a discovery tool's name goes to discovery while the view offers the
/// discovery tools; every other name (and a discovery name while none is offered, which then
/// is not granted) goes to the direct pipeline.
pub async fn call(
    calls: &Calls,
    mut call: ToolCall,
    caller: &Caller<'_>,
    cancelled: impl Future<Output = ()>,
) -> Reply {
    let started = Instant::now();
    let tool = DiscoveryTool::from_name(&call.name);
    let view = Arc::clone(&calls.view.borrow());
    let Some(tool) = tool.filter(|_| !view.deferred.is_empty()) else {
        return calls.call(call, caller, cancelled).await;
    };
    // Taken, not copied: call_tool passes the target's arguments on as the agent sent them.
    let arguments = match call.arguments.take() {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        // call_tool reads this as a request it cannot resolve, and refuses it audited.
        Some(_) if tool == DiscoveryTool::CallTool => json!({"arguments": []})
            .as_object()
            .cloned()
            .expect("an object"),
        Some(_) => {
            return refusal(format!("{}: arguments must be an object", tool.name()));
        }
    };
    match tool {
        DiscoveryTool::ListTools => list_tools(&view, &arguments),
        DiscoveryTool::GetToolInfo => get_tool_info(&view, &arguments),
        DiscoveryTool::CallTool => {
            call_tool(calls, &view, started, call, arguments, caller, cancelled).await
        }
    }
}

fn answer(value: &Value) -> Reply {
    let mut result = Map::new();
    result.insert(
        "content".into(),
        json!([{"type": "text", "text": value.to_string()}]),
    );
    result.insert("isError".into(), Value::Bool(false));
    Reply::Result(result)
}

fn refusal(text: String) -> Reply {
    let mut result = Map::new();
    result.insert("content".into(), json!([{"type": "text", "text": text}]));
    result.insert("isError".into(), Value::Bool(true));
    Reply::Result(result)
}

fn list_tools(view: &View, arguments: &Map<String, Value>) -> Reply {
    let request = match catalogue::parse_list(arguments) {
        Ok(r) => r,
        Err(why) => return refusal(format!("list_tools: {why}")),
    };
    if let Some(server) = &request.server
        && !view.deferred_servers().contains(&server.as_str())
    {
        return refusal(format!("list_tools: {}", not_deferred(view, server, None)));
    }
    match catalogue::page(&view.deferred, &request) {
        Ok(page) => answer(&page.to_value()),
        Err(why) => refusal(format!("list_tools: {why}")),
    }
}

fn get_tool_info(view: &View, arguments: &Map<String, Value>) -> Reply {
    let (server, tool) = match catalogue::parse_target(arguments) {
        Ok(t) => t,
        Err(why) => return refusal(format!("get_tool_info: {why}")),
    };
    match view.deferred_tool(&server, &tool) {
        Some(entry) => answer(&entry.info()),
        None => refusal(format!(
            "get_tool_info: {}",
            not_deferred(view, &server, Some(&tool))
        )),
    }
}

/// Why discovery does not show `tool` of `server` (or `server` at all): a sentence that names
/// nothing the agent was not granted.
fn not_deferred(view: &View, server: &str, tool: Option<&str>) -> String {
    let deferred = view.deferred_servers().join(", ");
    let Some(grants) = view.grants.as_ref() else {
        return format!(
            "no tool is granted to this agent now ({})",
            view.nothing_granted
                .as_deref()
                .unwrap_or("the sidecar has not read a grants document yet")
        );
    };
    let Some(granted) = grants.doc.servers.iter().find(|s| s.name == server) else {
        return format!(
            "no server {} is granted to this agent; the servers listed through list_tools are {deferred}",
            shown(server)
        );
    };
    if !granted.deferred {
        return format!(
            "the tools of server {server} are listed directly, named {}__<tool>; call them by that name",
            granted.prefix
        );
    }
    if let Some(u) = view.unavailable.iter().find(|u| u.server == server) {
        return format!("server {server} is unavailable: {}", u.reason);
    }
    if view.reading.iter().any(|s| s == server) {
        return format!("the sidecar is still reading the tools of server {server}");
    }
    let Some(tool) = tool else {
        return format!("server {server} has no tool to show now");
    };
    let qualified = qualified_name(&granted.prefix, tool);
    match grants::permits(&grants.doc, &qualified).map(|_| view.missing.get(&qualified)) {
        Some(Some(Missing::DefinitionChanged)) => format!(
            "the tool {tool} of server {server} is withheld: its definition changed since it was granted, and it stays withheld until the grants are updated"
        ),
        Some(Some(Missing::NotOffered)) => {
            format!("server {server} no longer offers the tool {tool}")
        }
        _ => format!(
            "the tool {} of server {server} is not granted to this agent",
            shown(tool)
        ),
    }
}

/// The granted tool `tool` of the deferred server `server`, confirmed by the narrowing
/// function a direct call uses.
fn resolve<'d>(
    doc: &'d GrantsDocument,
    server: &str,
    tool: &str,
) -> Option<(&'d ServerGrants, &'d GrantedTool)> {
    let granted = doc
        .servers
        .iter()
        .find(|s| s.name == server && s.deferred)?;
    let qualified = qualified_name(&granted.prefix, tool);
    let permitted = grants::permits(doc, &qualified)?;
    let (owner, _) = doc.find(&qualified)?;
    (owner.name == granted.name && permitted.name == tool).then_some((owner, permitted))
}

async fn call_tool(
    calls: &Calls,
    view: &View,
    started: Instant,
    call: ToolCall,
    arguments: Map<String, Value>,
    caller: &Caller<'_>,
    cancelled: impl Future<Output = ()>,
) -> Reply {
    let grants = view
        .grants
        .as_ref()
        .expect("a view with deferred tools has grants");
    let (server, tool, target_arguments) = match catalogue::parse_call(arguments) {
        Ok(request) => request,
        Err(why) => {
            let mut audit = Audit::new(started, DiscoveryTool::CallTool.name(), Via::Discovery);
            audit.graded = Some(Access::Destructive);
            return calls.refuse(
                &audit,
                Decision::NotGranted,
                format!("call_tool: {why}; nothing was called"),
            );
        }
    };
    let Some((_, granted_tool)) = resolve(&grants.doc, &server, &tool) else {
        // Refused, and graded destructive: the audit line of a call nothing could resolve
        // must not read as harmless.
        let mut audit = Audit::new(started, bounded(&tool), Via::Discovery);
        audit.graded = Some(Access::Destructive);
        if let Some(s) = grants.doc.servers.iter().find(|s| s.name == server) {
            audit.server(&s.name);
        }
        return calls.refuse(
            &audit,
            Decision::NotGranted,
            format!(
                "call_tool: {}; it was not run",
                not_deferred(view, &server, Some(&tool))
            ),
        );
    };
    // The call as if the agent had made it directly: everything else the client sent with
    // it (`_meta`, the answers to an approval the pipeline asked for) stays.
    let target = ToolCall {
        name: granted_tool.qualified_name.clone(),
        arguments: Some(Value::Object(target_arguments)),
        ..call
    };
    calls
        .call_via(target, caller, cancelled, started, Via::Discovery)
        .await
}

/// An agent-chosen name as the audit line records it: at most 128 characters.
fn bounded(name: &str) -> String {
    name.chars().take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> GrantsDocument {
        let tool = |prefix: &str, name: &str| {
            json!({"qualifiedName": qualified_name(prefix, name), "name": name, "access": "read",
                   "idempotent": true, "requiresApproval": false, "definitionDigest": "sha256:00"})
        };
        serde_json::from_value(json!({
            "schemaVersion": "mcp-operator.dev/grants/v1",
            "servers": [
                {"name": "big", "prefix": "b", "optional": false, "available": true, "deferred": true,
                 "tools": [tool("b", "read"), tool("b", "x__y")]},
                {"name": "small", "prefix": "s", "optional": false, "available": true, "deferred": false,
                 "tools": [tool("s", "read")]},
            ]
        }))
        .unwrap()
    }

    #[test]
    fn resolves_granted_tools_of_deferred_servers_only() {
        let doc = doc();
        let (server, tool) = resolve(&doc, "big", "read").unwrap();
        assert_eq!(
            (server.name.as_str(), tool.qualified_name.as_str()),
            ("big", "b__read")
        );
        assert_eq!(resolve(&doc, "big", "x__y").unwrap().1.name, "x__y");
        assert!(resolve(&doc, "big", "write").is_none(), "not granted");
        assert!(resolve(&doc, "small", "read").is_none(), "not deferred");
        assert!(
            resolve(&doc, "b", "read").is_none(),
            "the server's name, not its prefix"
        );
        assert!(resolve(&doc, "nope", "read").is_none());
        assert!(resolve(&doc, "big", "").is_none());
    }
}
