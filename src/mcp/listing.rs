//! Reading a whole list (the tools, and the resources, resource templates and prompts beside
//! them), page by page, within bounds. A listing fails as a whole — never a partial list — on a
//! page cap, a repeated cursor, an entry listed twice, an error page, a malformed reply or an
//! oversized response; the caller bounds it in time. The bounds are the same for every list
//! (`maxToolPages` pages, `maxResponseBytes` a response).

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

/// Which list is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Tools,
    Resources,
    ResourceTemplates,
    Prompts,
}

impl List {
    /// The method, e.g. `tools/list`.
    pub fn method(self) -> &'static str {
        match self {
            List::Tools => "tools/list",
            List::Resources => "resources/list",
            List::ResourceTemplates => "resources/templates/list",
            List::Prompts => "prompts/list",
        }
    }

    /// The step a 401 or 403 names ("… answered 401 Unauthorized to list tools").
    fn step(self) -> &'static str {
        match self {
            List::Tools => "list tools",
            List::Resources => "list resources",
            List::ResourceTemplates => "list resource templates",
            List::Prompts => "list prompts",
        }
    }

    /// What one entry is called in a message.
    pub fn noun(self) -> &'static str {
        match self {
            List::Tools => "tool",
            List::Resources => "resource",
            List::ResourceTemplates => "resource template",
            List::Prompts => "prompt",
        }
    }

    /// The result's array.
    fn field(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Resources => "resources",
            List::ResourceTemplates => "resourceTemplates",
            List::Prompts => "prompts",
        }
    }

    /// The key that names an entry: two entries with one name are one listed twice.
    fn key(self) -> &'static str {
        match self {
            List::Tools | List::Prompts => "name",
            List::Resources => "uri",
            List::ResourceTemplates => "uriTemplate",
        }
    }
}

/// Whether a tool name fits the MCP tool-name rules: 1–128 of `A-Z a-z 0-9 _ - .`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Lists every page of the tools. `pages_read` is kept up to date so a caller whose deadline
/// struck can say how far the listing got.
pub async fn list_all_tools(
    session: &mut Session,
    max_pages: u32,
    pages_read: &mut u32,
) -> Result<RawListing, McpError> {
    list_all(session, List::Tools, max_pages, pages_read).await
}

/// Lists every page of `list` (its entries in [`RawListing::tools`] whatever the list).
pub async fn list_all(
    session: &mut Session,
    list: List,
    max_pages: u32,
    pages_read: &mut u32,
) -> Result<RawListing, McpError> {
    let method = list.method();
    let mut listing = RawListing::default();
    let mut seen_cursors: HashSet<String> = HashSet::new();
    let mut first_page_of: HashMap<String, u32> = HashMap::new();
    let mut cursor: Option<String> = None;
    loop {
        if listing.pages_read == max_pages {
            return Err(McpError::TooManyPages { list, max_pages });
        }
        let page = listing.pages_read + 1;
        let mut params = Map::new();
        if let Some(c) = &cursor {
            params.insert("cursor".into(), Value::String(c.clone()));
        }
        let answer = session
            .request(method, params, list.step())
            .await
            .map_err(|e| on_page(e, method, page, listing.pages_read))?;
        let mut result = match answer {
            Answer::Reply(RpcReply::Result(result)) => result,
            Answer::Reply(RpcReply::Error { code, .. }) => {
                return Err(McpError::ProtocolError(format!(
                    "page {page} of {method} answered with JSON-RPC error {code} (pages read: {})",
                    listing.pages_read
                )));
            }
            Answer::Status(status, _) => {
                return Err(on_page(
                    not_mcp_status(status, method),
                    method,
                    page,
                    listing.pages_read,
                ));
            }
        };
        let entries = match result.remove(list.field()) {
            Some(Value::Array(entries)) => entries,
            _ => {
                let why = format!("its result has no {} array", list.field());
                return Err(malformed(method, page, &why));
            }
        };
        for entry in entries {
            let entry = checked(list, entry, page)?;
            let name = entry[list.key()].as_str().unwrap_or_default().to_string();
            if let Some(first_page) = first_page_of.insert(name.clone(), page) {
                return Err(McpError::Duplicate {
                    list,
                    name: printable(&name),
                    first_page,
                    page,
                });
            }
            listing.tools.push(entry);
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
                    return Err(McpError::RepeatedCursor { list, page });
                }
                cursor = Some(next.clone());
            }
            Some(_) => return Err(malformed(method, page, "its nextCursor is not a string")),
        }
    }
}

/// One entry of a page, checked: an object named by its list's key (a tool's name valid, with
/// an inputSchema object).
fn checked(list: List, entry: Value, page: u32) -> Result<Map<String, Value>, McpError> {
    let method = list.method();
    let Value::Object(entry) = entry else {
        return Err(malformed(method, page, "an entry is not a JSON object"));
    };
    let Some(name) = entry.get(list.key()).and_then(Value::as_str) else {
        let why = format!("an entry has no {} string", list.key());
        return Err(malformed(method, page, &why));
    };
    if list != List::Tools {
        if name.is_empty() {
            let why = format!("an entry has an empty {}", list.key());
            return Err(malformed(method, page, &why));
        }
        return Ok(entry);
    }
    if !is_valid_tool_name(name) {
        return Err(McpError::InvalidToolName {
            name: printable(name),
            page,
        });
    }
    if !entry.get("inputSchema").is_some_and(Value::is_object) {
        let why = format!("the tool {name:?} has no inputSchema object");
        return Err(malformed(method, page, &why));
    }
    Ok(entry)
}

fn malformed(method: &str, page: u32, why: &str) -> McpError {
    McpError::ProtocolError(format!(
        "page {page} of {method} is malformed: {why} (pages read: {})",
        page - 1
    ))
}

/// Puts the page number into a transport-level failure.
fn on_page(e: McpError, method: &str, page: u32, pages_read: u32) -> McpError {
    match e {
        McpError::ProtocolError(m) | McpError::NotMcp(m) => McpError::ProtocolError(format!(
            "page {page} of {method} failed: {m} (pages read: {pages_read})"
        )),
        other => other.with_pages_read(pages_read),
    }
}

/// A name fit for a message: control characters escaped by Debug formatting, length cut.
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
