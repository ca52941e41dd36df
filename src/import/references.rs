//! References in a config's values to what the file does not hold: `${input:id}` (VS Code asks
//! the person and keeps the answer in its secret store), `${env:VAR}` (VS Code, Cursor),
//! `${VAR}` / `${VAR:-default}` (Claude Code expands both; `$VAR` the desktop clients' users
//! write), and the editors' own variables (`${workspaceFolder}`, `${userHome}`).
//!
//! Which syntax means what depends on the file's format: in VS Code's `mcp.json` a bare
//! `${workspaceFolder}` is the editor's variable, never the environment's, so the parse takes a
//! [`Dialect`]. A value with an input or environment reference becomes a Secret key: its value
//! lives outside the file and may be a credential. An editor variable has no meaning in a pod;
//! the import names it in a note and keeps the text.

use std::collections::BTreeMap;

use super::short;

/// Whose reference syntax a value is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// An `mcpServers` object: Claude Desktop, Cursor, Claude Code's `.mcp.json`.
    McpServers,
    /// VS Code's `mcp.json` (and what the registry's `server.json` is translated into).
    VsCode,
}

/// One reference found in a value.
#[derive(Debug, PartialEq, Eq)]
pub enum Reference<'a> {
    /// `${input:id}`: asked of the person when the server starts.
    Input(&'a str),
    /// An environment variable of the machine the client runs on, with Claude Code's
    /// `:-default` if the file gives one.
    Env {
        name: &'a str,
        default: Option<&'a str>,
    },
    /// The editor's own variable (`${workspaceFolder}`).
    Editor(&'a str),
}

/// Variables VS Code and Cursor define themselves: in an `mcpServers` file too, these are not
/// environment variables.
const EDITOR_VARIABLES: [&str; 9] = [
    "workspaceFolder",
    "workspaceFolderBasename",
    "workspaceRoot",
    "userHome",
    "pathSeparator",
    "/",
    "cwd",
    "file",
    "fileWorkspaceFolder",
];

/// Every reference in `text`, in order.
pub fn references(text: &str, dialect: Dialect) -> Vec<Reference<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else { break };
            out.push(classify(&body[..end], dialect));
            rest = &body[end + 1..];
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            // A bare `$VAR` is how people write a variable in the desktop clients' files (none
            // expands it; the person meant "my environment's value"). VS Code knows no `$VAR`.
            if dialect == Dialect::McpServers
                && after.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            {
                out.push(Reference::Env {
                    name: &after[..len],
                    default: None,
                });
            }
            rest = &after[len..];
        }
    }
    out
}

fn classify(inner: &str, dialect: Dialect) -> Reference<'_> {
    if let Some(id) = inner.strip_prefix("input:") {
        return Reference::Input(id);
    }
    if let Some(name) = inner.strip_prefix("env:") {
        return Reference::Env {
            name,
            default: None,
        };
    }
    if dialect == Dialect::VsCode
        || EDITOR_VARIABLES.contains(&inner)
        || (inner.contains(':') && !inner.contains(":-"))
    {
        return Reference::Editor(inner);
    }
    match inner.split_once(":-") {
        Some((name, default)) => Reference::Env {
            name,
            default: Some(default),
        },
        None => Reference::Env {
            name: inner,
            default: None,
        },
    }
}

/// How a file's references are read and described: its dialect, and what its inputs are
/// (input id → what the person is told about it: the input's own description).
pub struct Source {
    pub dialect: Dialect,
    pub inputs: BTreeMap<String, String>,
}

impl Source {
    pub fn new(dialect: Dialect) -> Self {
        Source {
            dialect,
            inputs: BTreeMap::new(),
        }
    }

    /// Whether the value takes anything from outside the file (an input or the environment):
    /// then it becomes a Secret key.
    pub fn takes_from_outside(&self, text: &str) -> bool {
        references(text, self.dialect)
            .iter()
            .any(|r| !matches!(r, Reference::Editor(_)))
    }

    /// The editor variables a value uses (they mean nothing in a pod).
    pub fn editor_variables<'a>(&self, text: &'a str) -> Vec<&'a str> {
        references(text, self.dialect)
            .into_iter()
            .filter_map(|r| match r {
                Reference::Editor(name) => Some(name),
                _ => None,
            })
            .collect()
    }

    /// Where a Secret key's value is to come from, for the comment above the Secret: the
    /// references' descriptions, or "the file's value". Never the value, never a default.
    pub fn describe(&self, text: &str) -> String {
        let said: Vec<String> = references(text, self.dialect)
            .into_iter()
            .filter_map(|r| match r {
                Reference::Input(id) => Some(self.inputs.get(id).cloned().unwrap_or_else(|| {
                    format!(
                        "input {:?}, which the file's inputs do not declare",
                        short(id)
                    )
                })),
                Reference::Env {
                    name,
                    default: None,
                } => Some(format!("from ${}", short(name))),
                Reference::Env {
                    name,
                    default: Some(_),
                } => Some(format!(
                    "from ${}; the file's default was not copied",
                    short(name)
                )),
                Reference::Editor(_) => None,
            })
            .collect();
        if said.is_empty() {
            "the file's value".into()
        } else {
            said.join("; ")
        }
    }

    /// A URL with its references expanded where the file gives a default (Claude Code's
    /// `${BASE:-https://…}`); `Err` names the references it cannot expand.
    pub fn expand_url(&self, url: &str) -> Result<String, String> {
        let refs = references(url, self.dialect);
        if refs.is_empty() {
            return Ok(url.to_string());
        }
        let mut missing = Vec::new();
        let mut text = url.to_string();
        for reference in refs {
            match reference {
                Reference::Env {
                    name,
                    default: Some(default),
                } => {
                    text = text.replacen(&format!("${{{name}:-{default}}}"), default, 1);
                }
                Reference::Env { name, .. } => missing.push(format!("${}", short(name))),
                Reference::Input(id) => missing.push(format!("input {:?}", short(id))),
                Reference::Editor(name) => missing.push(format!("${{{}}}", short(name))),
            }
        }
        if missing.is_empty() {
            Ok(text)
        } else {
            Err(missing.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_reads_its_own_syntax() {
        use Reference::*;
        assert_eq!(
            references("Bearer ${input:api-key}", Dialect::VsCode),
            [Input("api-key")]
        );
        assert_eq!(
            references("${env:HOME}/x:${workspaceFolder}", Dialect::VsCode),
            [
                Env {
                    name: "HOME",
                    default: None
                },
                Editor("workspaceFolder")
            ]
        );
        // VS Code has no `$VAR` and no `${VAR}` of the environment.
        assert_eq!(
            references("$HOME ${TOKEN}", Dialect::VsCode),
            [Editor("TOKEN")]
        );
        assert_eq!(
            references(
                "${API_BASE:-https://api.example.com}/mcp",
                Dialect::McpServers
            ),
            [Env {
                name: "API_BASE",
                default: Some("https://api.example.com")
            }]
        );
        assert_eq!(
            references("$TOKEN and ${workspaceFolder} cost $5", Dialect::McpServers),
            [
                Env {
                    name: "TOKEN",
                    default: None
                },
                Editor("workspaceFolder")
            ]
        );
        assert_eq!(references("no references", Dialect::McpServers), []);
    }

    #[test]
    fn descriptions_never_carry_a_default() {
        let mut source = Source::new(Dialect::McpServers);
        assert_eq!(
            source.describe("${KEY:-sk-live-abc}"),
            "from $KEY; the file's default was not copied"
        );
        assert_eq!(source.describe("plain"), "the file's value");
        source.dialect = Dialect::VsCode;
        source.inputs.insert(
            "pat".into(),
            "VS Code input \"pat\" (\"GitHub token\")".into(),
        );
        assert_eq!(
            source.describe("Bearer ${input:pat}"),
            "VS Code input \"pat\" (\"GitHub token\")"
        );
        assert_eq!(
            source.describe("${input:other}"),
            "input \"other\", which the file's inputs do not declare"
        );
    }

    #[test]
    fn urls_expand_only_defaults() {
        let source = Source::new(Dialect::McpServers);
        assert_eq!(
            source.expand_url("${API_BASE:-https://api.example.com}/mcp"),
            Ok("https://api.example.com/mcp".into())
        );
        assert_eq!(
            source.expand_url("https://${HOST}/mcp"),
            Err("$HOST".into())
        );
    }
}
