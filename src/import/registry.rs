//! An MCP Registry `server.json` (schema 2025-09-29 of modelcontextprotocol/registry, or the
//! registry API's `{"server": {..}}` around one): the ways a published server runs, turned into
//! the common entries of the import.
//!
//! ```text
//! packages[i]  npm  identifier@version   -> command npx -y <id>@<version>   (node image)
//!              pypi identifier==version  -> command uvx <id>==<version>     (uv image)
//!              oci  identifier:version   -> the image itself (its command to be named)
//!   packageArguments / runtimeArguments  -> args;  environmentVariables -> env
//! remotes[j]   streamable-http | sse, url, headers[] -> url, type, headers
//! ```
//!
//! The registry's version is what the McpServer pins (a package runner fetching a floating
//! version would run different code on every pod start). Every declared input
//! (`environmentVariables`, `headers`, arguments) the person must supply, or that is marked
//! `isSecret`, becomes an `${input:<id>}` reference described by the input's `description`, so
//! the common import makes it a Secret key and never prints a value or a default of a secret.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::references::{Dialect, Source};
use super::{Candidate, dns_label, looks_secret, short};

/// Fields of a server.json that say who the server is, not how it runs: read, not reported.
const DESCRIPTIVE: [&str; 11] = [
    "$schema",
    "name",
    "title",
    "description",
    "version",
    "repository",
    "websiteUrl",
    "icons",
    "status",
    "_meta",
    "server",
];

/// The candidates of one server.json, and the inputs their references name.
pub(super) fn candidates(
    server: &Map<String, Value>,
    notes: &mut Vec<String>,
) -> (Source, Vec<Candidate>) {
    let mut inputs = Inputs {
        source: Source::new(Dialect::VsCode),
        taken: BTreeSet::new(),
    };
    for key in server.keys() {
        if !DESCRIPTIVE.contains(&key.as_str()) && key != "packages" && key != "remotes" {
            notes.push(format!(
                "server.json field {:?} is not imported",
                short(key)
            ));
        }
    }
    let title = server
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("server");
    // `io.github.user/weather`: the part after the namespace is the server's own name.
    let base = dns_label(title.rsplit('/').next().unwrap_or(title), 40);
    let packages = list(server, "packages", notes);
    let remotes = list(server, "remotes", notes);
    let mut candidates = Vec::new();
    for (i, package) in packages.iter().enumerate() {
        if let Some(c) = from_package(i, package, &base, &mut inputs, notes) {
            candidates.push(c);
        }
    }
    for (i, remote) in remotes.iter().enumerate() {
        if let Some(c) = from_remote(i, remote, &base, &mut inputs, notes) {
            candidates.push(c);
        }
    }
    if candidates.len() == 1 {
        candidates[0].key = base;
    } else if candidates.len() > 1 {
        // Keys made unique here: names are made from keys, one McpServer per key.
        let mut seen = BTreeSet::new();
        for c in &mut candidates {
            let mut key = c.key.clone();
            let mut n = 2;
            while !seen.insert(key.clone()) {
                key = format!("{}-{n}", c.key);
                n += 1;
            }
            c.key = key;
        }
        notes.push(format!(
            "server.json offers {} ways to run {:?} ({}); each is printed as its own McpServer: \
             apply the one you want",
            candidates.len(),
            short(title),
            candidates
                .iter()
                .map(|c| c.from.trim_start_matches("server.json ").to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    (inputs.source, candidates)
}

fn list<'a>(server: &'a Map<String, Value>, field: &str, notes: &mut Vec<String>) -> &'a [Value] {
    match server.get(field) {
        None => &[],
        Some(Value::Array(items)) => items,
        Some(_) => {
            notes.push(format!("server.json {field} is not a list; not imported"));
            &[]
        }
    }
}

/// The inputs being declared, as `${input:<id>}` ids the common import describes.
struct Inputs {
    source: Source,
    taken: BTreeSet<String>,
}

impl Inputs {
    /// A reference to a new input, described for the comment above the Secret.
    fn reference(&mut self, wanted: &str, input: &Value, what: &str) -> String {
        let base: String = wanted
            .chars()
            .map(|c| if c == '}' || c == '$' { '_' } else { c })
            .collect();
        let mut id = base.clone();
        let mut n = 2;
        while !self.taken.insert(id.clone()) {
            id = format!("{base}-{n}");
            n += 1;
        }
        let flag = |field: &str| input.get(field).and_then(Value::as_bool) == Some(true);
        let mut said = format!("server.json {what}");
        if let Some(description) = input.get("description").and_then(Value::as_str) {
            said.push_str(&format!(": {:?}", short(description)));
        }
        let mut marks = vec![if flag("isRequired") {
            "required"
        } else {
            "optional"
        }];
        if flag("isSecret") {
            marks.push("secret");
        } else {
            marks.push("not marked secret, so it may also be a plain value");
        }
        if input.get("default").is_some() && flag("isSecret") {
            marks.push("its default was not copied");
        }
        said.push_str(&format!(" ({})", marks.join(", ")));
        self.source.inputs.insert(id.clone(), said);
        format!("${{input:{id}}}")
    }

    /// The text an input (an argument, an env var, a header) stands for, if it is given one:
    /// a fixed `value` (its `{variables}` filled in the same way), a `default` of an input that
    /// is not secret, or a reference to fill in. `None`: optional, with nothing to say.
    fn text(&mut self, name: &str, input: &Value, what: &str, depth: u8) -> Option<String> {
        let secret = input.get("isSecret").and_then(Value::as_bool) == Some(true);
        let required = input.get("isRequired").and_then(Value::as_bool) == Some(true);
        let value = input.get("value").and_then(Value::as_str);
        let default = input.get("default").and_then(Value::as_str);
        if let (Some(value), false) = (value, secret) {
            let mut text = value.to_string();
            if let Some(variables) = input.get("variables").and_then(Value::as_object)
                && depth < 2
            {
                for (var, spec) in variables {
                    let wanted = format!("{name}.{var}");
                    let filled = self
                        .text(&wanted, spec, &format!("{what}, its {{{var}}}"), depth + 1)
                        .unwrap_or_default();
                    text = text.replace(&format!("{{{var}}}"), &filled);
                }
            }
            return Some(if looks_secret(name, &text) && !text.contains("${input:") {
                self.reference(name, input, what)
            } else {
                text
            });
        }
        match (default, secret, required) {
            (Some(default), false, _) if !looks_secret(name, default) => Some(default.to_string()),
            (_, true, _) | (_, _, true) => Some(self.reference(name, input, what)),
            _ => None,
        }
    }
}

fn from_package(
    i: usize,
    package: &Value,
    base: &str,
    inputs: &mut Inputs,
    notes: &mut Vec<String>,
) -> Option<Candidate> {
    let at = format!("server.json packages[{i}]");
    let kind = package
        .get("registryType")
        .and_then(Value::as_str)
        .unwrap_or("");
    let Some(identifier) = package.get("identifier").and_then(Value::as_str) else {
        notes.push(format!("{at}: has no identifier; skipped"));
        return None;
    };
    let version = package
        .get("version")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty() && *v != "latest");
    let transport = package
        .pointer("/transport/type")
        .and_then(Value::as_str)
        .unwrap_or("stdio");
    if transport != "stdio" {
        notes.push(format!(
            "{at}: the package serves {} itself (a port inside its container); import runs \
             stdio packages only: use a remote, or run it yourself and point spec.url at it; \
             skipped",
            short(transport)
        ));
        return None;
    }
    let runtime_hint = package.get("runtimeHint").and_then(Value::as_str);
    let mut args: Vec<String> = Vec::new();
    let mut runtime_args = arguments(package.get("runtimeArguments"), "runtime argument", inputs);
    let (command, image, pinned) = match kind {
        "npm" => {
            let command = runtime_hint.unwrap_or("npx").to_string();
            if command.ends_with("npx") && !runtime_args.iter().any(|a| a == "-y" || a == "--yes") {
                args.push("-y".into());
            }
            let pinned = match version {
                Some(v) => format!("{identifier}@{v}"),
                None => identifier.to_string(),
            };
            (command, None, pinned)
        }
        "pypi" => {
            let command = runtime_hint.unwrap_or("uvx").to_string();
            let pinned = match version {
                Some(v) => format!("{identifier}=={v}"),
                None => identifier.to_string(),
            };
            (command, None, pinned)
        }
        "oci" => {
            // A tag or digest already in the identifier wins; else the registry's version.
            let last = identifier.rsplit('/').next().unwrap_or(identifier);
            let image = match version {
                Some(v) if !last.contains(':') && !last.contains('@') => {
                    format!("{identifier}:{v}")
                }
                _ => identifier.to_string(),
            };
            if !runtime_args.is_empty() {
                notes.push(format!(
                    "{at}: its runtimeArguments are docker run flags; not imported (a stdio \
                     McpServer's pod is described by its spec)"
                ));
                runtime_args.clear();
            }
            notes.push(format!(
                "{at}: a stdio McpServer runs a command in the image (its entrypoint is not \
                 used): set spec.stdio.command to the image's entrypoint (docker inspect {})",
                short(&image)
            ));
            (
                "REPLACE-with-the-image-entrypoint".to_string(),
                Some(image),
                String::new(),
            )
        }
        other => {
            notes.push(format!(
                "{at}: registryType {:?} is not one import can run in a pod (npm, pypi and oci \
                 are); skipped",
                short(other)
            ));
            return None;
        }
    };
    if version.is_none() && kind != "oci" {
        notes.push(format!("{at}: has no exact version to pin"));
    }
    args.splice(0..0, runtime_args);
    if !pinned.is_empty() {
        args.push(pinned);
    }
    args.extend(arguments(
        package.get("packageArguments"),
        "package argument",
        inputs,
    ));
    let mut env = Map::new();
    for var in package
        .get("environmentVariables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = var.get("name").and_then(Value::as_str) else {
            notes.push(format!(
                "{at}: an environment variable has no name; skipped"
            ));
            continue;
        };
        match inputs.text(name, var, "environment variable", 0) {
            Some(text) => {
                env.insert(name.to_string(), json!(text));
            }
            None => notes.push(format!(
                "{at}: optional environment variable {} is not set; add it to spec.stdio.env if \
                 you need it",
                short(name)
            )),
        }
    }
    let mut entry = Map::new();
    entry.insert("command".into(), json!(command));
    entry.insert("args".into(), json!(args));
    if !env.is_empty() {
        entry.insert("env".into(), Value::Object(env));
    }
    let from = match version {
        Some(v) => format!("{at}: {kind} {} {}", short(identifier), short(v)),
        None => format!("{at}: {kind} {}", short(identifier)),
    };
    Some(Candidate {
        key: format!("{base}-{}", dns_label(kind, 10)),
        from,
        entry,
        image,
    })
}

/// Arguments (`positional` or `named`) as command-line words.
fn arguments(given: Option<&Value>, what: &str, inputs: &mut Inputs) -> Vec<String> {
    let mut out = Vec::new();
    for (i, argument) in given
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let named = argument.get("type").and_then(Value::as_str) == Some("named");
        let flag = argument.get("name").and_then(Value::as_str);
        let hint = argument
            .get("valueHint")
            .and_then(Value::as_str)
            .or(flag.map(|f| f.trim_start_matches('-')))
            .map_or_else(|| format!("arg{}", i + 1), str::to_string);
        let what = format!("{what} {}", short(flag.unwrap_or(&hint)));
        match (named, flag) {
            (true, Some(flag)) => {
                let has_value = ["value", "default", "valueHint"]
                    .iter()
                    .any(|f| argument.get(*f).is_some())
                    || argument.get("isRequired").and_then(Value::as_bool) == Some(true);
                if !has_value {
                    // A bare flag (`--read-only`).
                    out.push(flag.to_string());
                } else if let Some(text) = inputs.text(&hint, argument, &what, 0) {
                    out.push(flag.to_string());
                    out.push(text);
                }
            }
            _ => {
                if let Some(text) = inputs.text(&hint, argument, &what, 0) {
                    out.push(text);
                }
            }
        }
    }
    out
}

fn from_remote(
    i: usize,
    remote: &Value,
    base: &str,
    inputs: &mut Inputs,
    notes: &mut Vec<String>,
) -> Option<Candidate> {
    let at = format!("server.json remotes[{i}]");
    let kind = remote
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("streamable-http");
    let Some(url) = remote.get("url").and_then(Value::as_str) else {
        notes.push(format!("{at}: has no url; skipped"));
        return None;
    };
    if url.contains('{') {
        // Named by its variables, not printed: a URL may carry a credential.
        let variables: Vec<&str> = url
            .split('{')
            .skip(1)
            .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
            .collect();
        notes.push(format!(
            "{at}: the url is a template (with {}): an McpServer's url is written out; skipped",
            variables
                .iter()
                .map(|v| format!("{{{}}}", short(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return None;
    }
    let mut headers = Map::new();
    for header in remote
        .get("headers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = header.get("name").and_then(Value::as_str) else {
            notes.push(format!("{at}: a header has no name; skipped"));
            continue;
        };
        // Headers are credentials to an McpServer whatever their marks: each is read from a
        // Secret, so a header the person fills is one with a reference.
        let what = format!("header {name}");
        let text = match inputs.text(name, header, &what, 0) {
            Some(text) => text,
            None => inputs.reference(name, header, &what),
        };
        headers.insert(name.to_string(), json!(text));
    }
    let mut entry = Map::new();
    entry.insert("url".into(), json!(url));
    entry.insert("type".into(), json!(kind));
    if !headers.is_empty() {
        entry.insert("headers".into(), Value::Object(headers));
    }
    Some(Candidate {
        key: format!("{base}-remote"),
        // Not the URL: the McpServer's spec.url is the URL with its credentials taken out.
        from: format!("{at}: {}", short(kind)),
        entry,
        image: None,
    })
}
