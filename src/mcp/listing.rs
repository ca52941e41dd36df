//! Reading the whole tool list, page by page, within bounds. The listing fails as a whole — never
//! a partial catalogue — on a page cap, a repeated cursor, a tool listed twice, an error page, a
//! malformed reply or an oversized response; the caller bounds it in time.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::error::McpError;
use super::rpc::Answer;
use super::rpc::RpcReply;
use super::session::{Session, not_mcp_status};

/// The raw tool definitions, in the order the server listed them.
#[derive(Debug, Default)]
pub struct RawListing {
    pub tools: Vec<Map<String, Value>>,
    pub pages_read: u32,
    /// The smallest `ttlMs` a modern server gave across pages.
    pub ttl_ms: Option<u64>,
}

/// Whether a tool name fits the MCP tool-name rules: 1–128 of `A-Z a-z 0-9 _ - .`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Lists every page. `pages_read` is kept up to date so a caller whose deadline struck can say
/// how far the listing got.
pub async fn list_all_tools(
    session: &mut Session,
    max_pages: u32,
    pages_read: &mut u32,
) -> Result<RawListing, McpError> {
    let mut listing = RawListing::default();
    let mut seen_cursors: HashSet<String> = HashSet::new();
    let mut first_page_of: HashMap<String, u32> = HashMap::new();
    let mut cursor: Option<String> = None;
    loop {
        if listing.pages_read == max_pages {
            return Err(McpError::TooManyPages { max_pages });
        }
        let page = listing.pages_read + 1;
        let mut params = Map::new();
        if let Some(c) = &cursor {
            params.insert("cursor".into(), Value::String(c.clone()));
        }
        let answer = session
            .request("tools/list", params, "list tools")
            .await
            .map_err(|e| on_page(e, page, listing.pages_read))?;
        let mut result = match answer {
            Answer::Reply(RpcReply::Result(result)) => result,
            Answer::Reply(RpcReply::Error { code, .. }) => {
                return Err(McpError::ProtocolError(format!(
                    "page {page} of tools/list answered with JSON-RPC error {code} (pages read: {})",
                    listing.pages_read
                )));
            }
            Answer::Status(status, _) => {
                return Err(on_page(
                    not_mcp_status(status, "tools/list"),
                    page,
                    listing.pages_read,
                ));
            }
        };
        let tools = match result.remove("tools") {
            Some(Value::Array(tools)) => tools,
            _ => return Err(malformed(page, "its result has no tools array")),
        };
        for tool in tools {
            let Value::Object(tool) = tool else {
                return Err(malformed(page, "a tool is not a JSON object"));
            };
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                return Err(malformed(page, "a tool has no name"));
            };
            if !is_valid_tool_name(name) {
                return Err(McpError::InvalidToolName {
                    name: printable(name),
                    page,
                });
            }
            if !tool.get("inputSchema").is_some_and(Value::is_object) {
                return Err(malformed(
                    page,
                    &format!("the tool {name:?} has no inputSchema object"),
                ));
            }
            if let Some(first_page) = first_page_of.insert(name.to_string(), page) {
                return Err(McpError::DuplicateTool {
                    name: name.to_string(),
                    first_page,
                    page,
                });
            }
            listing.tools.push(tool);
        }
        if let Some(ttl) = result.get("ttlMs").and_then(Value::as_u64) {
            listing.ttl_ms = Some(listing.ttl_ms.map_or(ttl, |t| t.min(ttl)));
        }
        listing.pages_read = page;
        *pages_read = page;
        match result.get("nextCursor") {
            None | Some(Value::Null) => return Ok(listing),
            // An empty string is a cursor like any other, not the end of the list.
            Some(Value::String(next)) => {
                if !seen_cursors.insert(next.clone()) {
                    return Err(McpError::RepeatedCursor { page });
                }
                cursor = Some(next.clone());
            }
            Some(_) => return Err(malformed(page, "its nextCursor is not a string")),
        }
    }
}

fn malformed(page: u32, why: &str) -> McpError {
    McpError::ProtocolError(format!(
        "page {page} of tools/list is malformed: {why} (pages read: {})",
        page - 1
    ))
}

/// Puts the page number into a transport-level failure.
fn on_page(e: McpError, page: u32, pages_read: u32) -> McpError {
    match e {
        McpError::ProtocolError(m) | McpError::NotMcp(m) => McpError::ProtocolError(format!(
            "page {page} of tools/list failed: {m} (pages read: {pages_read})"
        )),
        other => other.with_pages_read(pages_read),
    }
}

/// A tool name fit for a message: control characters escaped by Debug formatting, length cut.
fn printable(name: &str) -> String {
    let mut s: String = name.chars().take(64).collect();
    if s.len() < name.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_mcp_charset() {
        assert!(is_valid_tool_name("read_file"));
        assert!(is_valid_tool_name("github.create-issue"));
        assert!(is_valid_tool_name(&"a".repeat(128)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name(&"a".repeat(129)));
        assert!(!is_valid_tool_name("bad name"));
        assert!(!is_valid_tool_name("a/b"));
        assert!(!is_valid_tool_name("naïve"));
    }
}
