//! VS Code's `mcp.json` (`.vscode/mcp.json`, or the user profile's): its `servers` entries have
//! the `mcpServers` fields (`type: stdio` with `command`/`args`/`env`/`envFile`, `type: http|sse`
//! with `url`/`headers`), so they go through the common import; what is VS Code's own is the
//! `inputs` list, read here. Each input (`{type: promptString, id, description, password}`) is
//! a value VS Code asks the person for and keeps in its secret store; a value that says
//! `${input:<id>}` becomes a Secret key to fill, its comment naming the input's description.
//! An input's `default` is never copied (a `password` input's default is a credential too).

use serde_json::Value;

use super::references::{Dialect, Source};
use super::short;

/// The [`Source`] of a VS Code file: its dialect and what each declared input is.
pub(super) fn source(inputs: Option<&Value>, notes: &mut Vec<String>) -> Source {
    let mut source = Source::new(Dialect::VsCode);
    let Some(inputs) = inputs else {
        return source;
    };
    let Some(inputs) = inputs.as_array() else {
        notes.push("inputs is not a list; not read".into());
        return source;
    };
    for (i, input) in inputs.iter().enumerate() {
        let Some(id) = input.get("id").and_then(Value::as_str) else {
            notes.push(format!("inputs[{i}] has no id; not read"));
            continue;
        };
        let kind = input
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("promptString");
        let mut said = format!("VS Code input {:?}", short(id));
        match input.get("description").and_then(Value::as_str) {
            Some(description) => said.push_str(&format!(": {:?}", short(description))),
            None => said.push_str(", which has no description"),
        }
        match kind {
            "promptString" => {
                if input.get("password").and_then(Value::as_bool) != Some(true) {
                    said.push_str("; not a password, so it may also be a plain value");
                }
            }
            "pickString" => said.push_str("; one of the options the file lists"),
            "command" => said.push_str("; the output of a VS Code command"),
            other => notes.push(format!(
                "input {:?} has type {:?}, which import does not know; taken as asked of the person",
                short(id),
                short(other)
            )),
        }
        if input.get("default").is_some() {
            said.push_str("; its default was not copied");
        }
        source.inputs.insert(id.to_string(), said);
    }
    source
}
