//! The pure half of deferred disclosure: the discovery tools' reserved names and definitions,
//! one deferred tool as `list_tools` shows it, and the reading, filtering, shortening and paging
//! that keep every discovery answer bounded whatever the catalogue or the agent sends. No I/O:
//! [`super`] applies it to the current view.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::mcp::Access;
use crate::sidecar::definitions::LiveTool;

/// `list_tools` entries per page, at most.
pub const PAGE_TOOLS: usize = 50;
/// A `list_tools` page stops before its entries exceed this many bytes of JSON (one entry is
/// always shown, so paging moves on even past a tool with an outsized name).
pub const PAGE_BYTES: usize = 16 * 1024;
/// Characters of a tool's description `list_tools` shows.
pub const DESCRIPTION_CHARS: usize = 160;
/// Characters of a tool's title `list_tools` shows.
pub const TITLE_CHARS: usize = 80;
/// Longest `query` accepted (a longer one cannot be meant as a substring of a tool's text).
pub const QUERY_CHARS: usize = 200;

/// The three discovery tools.
///
/// Their names are reserved by shape, not by luck: every granted tool reaches the agent as
/// `<prefix>__<tool>` with a non-empty prefix (the AgentSpec CRD requires one, and the sidecar
/// refuses a grants document whose qualified names are anything else, see
/// [`crate::grants::GrantsDocument::naming_problem`]), so every granted name contains `__` and
/// these, which contain none, can never be one. Should a document the check did not see name a
/// granted tool like one of these anyway, the discovery tool wins, deterministically: the
/// listing drops the granted entry (`Missing::NameReserved`), and a call by that name is
/// routed to discovery — `grants::permits` could not resolve a name without `__` in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryTool {
    ListTools,
    GetToolInfo,
    CallTool,
}

impl DiscoveryTool {
    pub const ALL: [DiscoveryTool; 3] = [
        DiscoveryTool::ListTools,
        DiscoveryTool::GetToolInfo,
        DiscoveryTool::CallTool,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DiscoveryTool::ListTools => "list_tools",
            DiscoveryTool::GetToolInfo => "get_tool_info",
            DiscoveryTool::CallTool => "call_tool",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// True for a name the discovery tools hold.
pub fn is_reserved(name: &str) -> bool {
    DiscoveryTool::from_name(name).is_some()
}

/// The discovery tools' definitions for an agent whose deferred servers (with at least one
/// tool to discover) are `servers`, sorted. They name the servers, never the tools: the
/// definitions change only when the set of deferred servers does.
pub fn definitions(servers: &[&str]) -> Vec<Map<String, Value>> {
    let names = servers.join(", ");
    let server = |what: &str| json!({"type": "string", "enum": servers, "description": what});
    let tool =
        json!({"type": "string", "description": "The tool's name exactly as list_tools shows it"});
    let defs = [
        json!({
            "name": DiscoveryTool::ListTools.name(),
            "title": "List deferred tools",
            "description": format!(
                "Lists the tools of MCP servers that are too large to show here one by one ({names}): \
                 name, title, access (read, write or destructive) and a short description, \
                 {PAGE_TOOLS} at most per page. Read a tool's full definition with get_tool_info, \
                 then call it with call_tool."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "server": server("Only this server's tools"),
                    "query": {"type": "string", "description": "Only tools whose name, title or description contains this text (any case)"},
                    "cursor": {"type": "string", "description": "The nextCursor of the previous page"},
                },
            },
            "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
        }),
        json!({
            "name": DiscoveryTool::GetToolInfo.name(),
            "title": "Get a deferred tool's definition",
            "description": "Returns one tool's full definition (input schema, annotations) as its server offers it now, for a tool list_tools shows.",
            "inputSchema": {
                "type": "object",
                "properties": {"server": server("The tool's server"), "tool": tool},
                "required": ["server", "tool"],
            },
            "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
        }),
        json!({
            "name": DiscoveryTool::CallTool.name(),
            "title": "Call a deferred tool",
            "description": "Calls one tool list_tools shows, with arguments that fit the input schema get_tool_info returns. It is checked, approved and audited exactly like a tool listed here directly.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "server": server("The tool's server"),
                    "tool": tool,
                    "arguments": {"type": "object", "description": "The tool's arguments"},
                },
                "required": ["server", "tool"],
            },
            // What it runs may destroy state: a client that gates on annotations gates this.
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true},
        }),
    ];
    defs.into_iter()
        .map(|d| d.as_object().cloned().expect("an object"))
        .collect()
}

/// One granted tool of a deferred server whose live definition matches the granted one: what
/// discovery may show and call.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The McpServer's name.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// `<prefix>__<tool>`: the name the pipeline and the audit line use.
    pub qualified_name: String,
    pub access: Access,
    pub requires_approval: bool,
    pub live: Arc<LiveTool>,
}

impl Entry {
    fn text(&self, key: &str) -> Option<&str> {
        self.live.definition.get(key).and_then(Value::as_str)
    }

    /// The tool's title (`title`, else `annotations.title`).
    pub fn title(&self) -> Option<&str> {
        self.text("title").or_else(|| {
            self.live
                .definition
                .get("annotations")
                .and_then(|a| a.get("title"))
                .and_then(Value::as_str)
        })
    }

    pub fn description(&self) -> &str {
        self.text("description").unwrap_or_default()
    }

    /// Whether the entry passes a `list_tools` filter; `query` is already lowercase.
    pub fn matches(&self, server: Option<&str>, query: Option<&str>) -> bool {
        if server.is_some_and(|s| s != self.server) {
            return false;
        }
        let Some(query) = query else { return true };
        [
            Some(self.tool.as_str()),
            self.title(),
            Some(self.description()),
        ]
        .into_iter()
        .flatten()
        .any(|text| text.to_lowercase().contains(query))
    }

    /// The entry as `list_tools` shows it: bounded, whatever the server wrote.
    pub fn summary(&self) -> Value {
        let mut out = Map::new();
        out.insert("server".into(), json!(self.server));
        out.insert("tool".into(), json!(self.tool));
        if let Some(title) = self.title() {
            out.insert("title".into(), json!(shorten(title, TITLE_CHARS)));
        }
        out.insert("access".into(), json!(self.access));
        if self.requires_approval {
            out.insert("requiresApproval".into(), json!(true));
        }
        let description = shorten(self.description(), DESCRIPTION_CHARS);
        if !description.is_empty() {
            out.insert("description".into(), json!(description));
        }
        Value::Object(out)
    }

    /// The entry as `get_tool_info` shows it: the full live definition, as the server lists it.
    pub fn info(&self) -> Value {
        json!({
            "server": self.server,
            "tool": self.tool,
            "access": self.access,
            "requiresApproval": self.requires_approval,
            "definition": self.live.definition,
        })
    }
}

/// `text` with its whitespace collapsed, cut to at most `max_chars` characters (a cut one ends
/// in `…`, at a word boundary when one is near).
pub fn shorten(text: &str, max_chars: usize) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= max_chars {
        return collapsed;
    }
    if max_chars == 0 {
        return String::new();
    }
    let cut: String = collapsed.chars().take(max_chars - 1).collect();
    let cut = match cut.rfind(' ') {
        // Lose at most a third to end on a whole word.
        Some(i) if i >= cut.len() * 2 / 3 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end())
}

/// A `list_tools` request, read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListRequest {
    pub server: Option<String>,
    /// Lowercase.
    pub query: Option<String>,
    /// Index into the filtered entries.
    pub offset: usize,
}

/// The names and values of the arguments discovery reads, or a sentence saying what is wrong.
fn optional_string(args: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

fn required_string(args: &Map<String, Value>, key: &str) -> Result<String, String> {
    match optional_string(args, key)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(format!("{key} is required")),
    }
}

/// Reads `list_tools` arguments. An empty `server` or `query` is no filter.
pub fn parse_list(args: &Map<String, Value>) -> Result<ListRequest, String> {
    let server = optional_string(args, "server")?.filter(|s| !s.is_empty());
    let query = optional_string(args, "query")?.filter(|q| !q.trim().is_empty());
    if query
        .as_ref()
        .is_some_and(|q| q.chars().count() > QUERY_CHARS)
    {
        return Err(format!(
            "query is longer than {QUERY_CHARS} characters; use a word or two of the tool's name or description"
        ));
    }
    let offset = match optional_string(args, "cursor")? {
        None => 0,
        Some(c) => c
            .strip_prefix('o')
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or("cursor is not a nextCursor list_tools returned")?,
    };
    Ok(ListRequest {
        server,
        query: query.map(|q| q.trim().to_lowercase()),
        offset,
    })
}

/// Reads `get_tool_info` arguments: the server and the tool's name on it.
pub fn parse_target(args: &Map<String, Value>) -> Result<(String, String), String> {
    Ok((
        required_string(args, "server")?,
        required_string(args, "tool")?,
    ))
}

/// Reads `call_tool` arguments: the server, the tool's name on it and its arguments (absent is
/// none).
pub fn parse_call(
    mut args: Map<String, Value>,
) -> Result<(String, String, Map<String, Value>), String> {
    let (server, tool) = parse_target(&args)?;
    let arguments = match args.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(_) => return Err("arguments must be an object".into()),
    };
    Ok((server, tool, arguments))
}

/// One `list_tools` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub tools: Vec<Value>,
    /// Entries matching the filter, on every page.
    pub total: usize,
    pub next_cursor: Option<String>,
}

impl Page {
    pub fn to_value(&self) -> Value {
        let mut out = json!({"tools": self.tools, "total": self.total});
        if let Some(next) = &self.next_cursor {
            out["nextCursor"] = json!(next);
        }
        out
    }
}

/// The page of `entries` (sorted) that `request` asks for: at most [`PAGE_TOOLS`] entries and
/// about [`PAGE_BYTES`] of JSON, never none while entries remain.
pub fn page(entries: &[Entry], request: &ListRequest) -> Result<Page, String> {
    let matching: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.matches(request.server.as_deref(), request.query.as_deref()))
        .collect();
    let total = matching.len();
    if request.offset > total {
        return Err("cursor is past the end of the list (did the filter change?)".into());
    }
    let mut tools = Vec::new();
    let mut bytes = 0;
    for entry in &matching[request.offset..] {
        if tools.len() == PAGE_TOOLS {
            break;
        }
        let summary = entry.summary();
        let size = serde_json::to_string(&summary).map_or(0, |s| s.len()) + 1;
        if !tools.is_empty() && bytes + size > PAGE_BYTES {
            break;
        }
        bytes += size;
        tools.push(summary);
    }
    let end = request.offset + tools.len();
    Ok(Page {
        tools,
        total,
        next_cursor: (end < total).then(|| format!("o{end}")),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::grants::qualified_name;
    use crate::mcp::catalog::definition_digest;

    fn entry(server: &str, tool: &str, title: Option<&str>, description: &str) -> Entry {
        let mut def =
            json!({"name": tool, "description": description, "inputSchema": {"type": "object"}});
        if let Some(t) = title {
            def["title"] = json!(t);
        }
        let digest = definition_digest(&def);
        Entry {
            server: server.into(),
            tool: tool.into(),
            qualified_name: qualified_name(server, tool),
            access: Access::Read,
            requires_approval: false,
            live: Arc::new(LiveTool {
                definition: def.as_object().cloned().unwrap(),
                digest,
            }),
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn the_names_are_reserved_and_the_definitions_name_the_servers() {
        for t in DiscoveryTool::ALL {
            assert!(is_reserved(t.name()));
            assert!(!t.name().contains("__"));
            assert_eq!(DiscoveryTool::from_name(t.name()), Some(t));
        }
        assert!(!is_reserved("gh__list_tools"));
        let defs = definitions(&["github", "jira"]);
        let names: Vec<&str> = defs.iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["list_tools", "get_tool_info", "call_tool"]);
        assert_eq!(
            defs[2]["inputSchema"]["properties"]["server"]["enum"],
            json!(["github", "jira"])
        );
        assert!(
            defs[0]["description"]
                .as_str()
                .unwrap()
                .contains("github, jira")
        );
        assert_eq!(defs[2]["annotations"]["destructiveHint"], true);
    }

    proptest! {
        /// No granted name the controller can publish is a discovery tool's name.
        #[test]
        fn no_qualified_name_is_reserved(prefix in "[A-Za-z0-9_-]{1,16}", tool in "\\PC{0,24}") {
            let name = qualified_name(&prefix, &tool);
            prop_assert!(!is_reserved(&name));
        }

        #[test]
        fn shorten_is_bounded_and_a_prefix(text in "\\PC{0,400}", max in 0usize..200) {
            let out = shorten(&text, max);
            let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
            prop_assert!(out.chars().count() <= max);
            if max == 0 {
                prop_assert!(out.is_empty());
                return Ok(());
            }
            match out.strip_suffix('…') {
                Some(head) if out != collapsed => prop_assert!(collapsed.starts_with(head)),
                _ => prop_assert_eq!(&out, &collapsed),
            }
        }

        /// Paging through any filter shows every matching entry exactly once, in order, and no
        /// page is over its bounds.
        #[test]
        fn pages_cover_the_matches_once(
            tools in proptest::collection::btree_set("[a-c]{1,6}", 0..160),
            big in 0usize..3000,
            query in proptest::option::of("[a-c]{1,2}"),
        ) {
            let entries: Vec<Entry> = tools.iter().enumerate()
                .map(|(i, t)| entry(if i % 3 == 0 { "one" } else { "two" }, t, None, &"d".repeat(big)))
                .collect();
            for server in [None, Some("one".to_string())] {
                let mut request = ListRequest { server: server.clone(), query: query.clone(), offset: 0 };
                let mut seen = Vec::new();
                loop {
                    let page = page(&entries, &request).unwrap();
                    prop_assert!(page.tools.len() <= PAGE_TOOLS);
                    let bytes: usize = page.tools.iter().map(|t| t.to_string().len() + 1).sum();
                    prop_assert!(page.tools.len() <= 1 || bytes <= PAGE_BYTES);
                    seen.extend(page.tools.iter().map(|t| t["tool"].as_str().unwrap().to_string()));
                    match page.next_cursor {
                        Some(c) => {
                            prop_assert!(!page.tools.is_empty());
                            request = parse_list(&args(json!({"cursor": c, "server": server, "query": query}))).unwrap();
                        }
                        None => break,
                    }
                }
                let expected: Vec<String> = entries.iter()
                    .filter(|e| e.matches(server.as_deref(), query.as_deref()))
                    .map(|e| e.tool.clone())
                    .collect();
                prop_assert_eq!(seen, expected);
            }
        }
    }

    #[test]
    fn filters_by_server_and_by_substring_of_name_title_or_description() {
        let entries = vec![
            entry("gh", "get_issue", Some("Get an issue"), "Reads one issue."),
            entry("gh", "list_repos", None, "Lists REPOSITORIES of an owner."),
            entry("jira", "create_ticket", None, "Opens a ticket."),
        ];
        let tools = |a: Value| -> Vec<String> {
            page(&entries, &parse_list(&args(a)).unwrap())
                .unwrap()
                .tools
                .iter()
                .map(|t| t["tool"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(tools(json!({})).len(), 3);
        assert_eq!(tools(json!({"server": "jira"})), ["create_ticket"]);
        assert_eq!(tools(json!({"query": "ISSUE"})), ["get_issue"]);
        assert_eq!(tools(json!({"query": "repositories"})), ["list_repos"]);
        assert_eq!(
            tools(json!({"query": "an issue", "server": "gh"})),
            ["get_issue"]
        );
        assert!(tools(json!({"query": "ticket", "server": "gh"})).is_empty());
        assert_eq!(tools(json!({"server": "", "query": "  "})).len(), 3);
    }

    #[test]
    fn a_summary_is_bounded_whatever_the_server_wrote() {
        let huge = entry(
            "gh",
            "t",
            Some(&"T".repeat(10_000)),
            &"word ".repeat(100_000),
        );
        let summary = huge.summary();
        assert!(summary.to_string().len() < 400, "{summary}");
        assert!(summary["description"].as_str().unwrap().ends_with('…'));
        assert_eq!(summary["access"], "read");
        assert!(summary.get("requiresApproval").is_none());
        assert_eq!(
            huge.info()["definition"]["description"]
                .as_str()
                .unwrap()
                .len(),
            500_000
        );
    }

    #[test]
    fn bad_arguments_are_sentences() {
        assert_eq!(
            parse_list(&args(json!({"server": 3}))).unwrap_err(),
            "server must be a string"
        );
        assert!(parse_list(&args(json!({"cursor": "p7"}))).is_err());
        assert!(parse_list(&args(json!({"query": "x".repeat(201)}))).is_err());
        assert_eq!(
            parse_target(&args(json!({"server": "gh"}))).unwrap_err(),
            "tool is required"
        );
        assert_eq!(
            parse_call(args(json!({"server": "gh", "tool": "t", "arguments": [1]}))).unwrap_err(),
            "arguments must be an object"
        );
        let (s, t, a) = parse_call(args(json!({"server": "gh", "tool": "t"}))).unwrap();
        assert_eq!((s.as_str(), t.as_str(), a.len()), ("gh", "t", 0));
        let entries = vec![entry("gh", "a", None, "")];
        let past = ListRequest {
            offset: 2,
            ..Default::default()
        };
        assert!(page(&entries, &past).is_err());
    }
}
