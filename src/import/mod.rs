//! `mcp-operator import FILE`: turns the MCP server configs people already have into McpServer
//! manifests, and a Secret manifest per server for everything that is or looks like a
//! credential. Pure: [`plan`] maps one parsed document to manifests and notes; [`render`]
//! prints them; the CLI only reads the file.
//!
//! Three shapes, told apart by their top-level fields ([`Shape`]):
//!
//! ```text
//! {"mcpServers": {..}}                         Claude Desktop, Cursor, Claude Code's .mcp.json
//! {"servers": {..}, "inputs": [..]}            VS Code's mcp.json (its inputs: vscode.rs)
//! {"name", "packages": [..], "remotes": [..]}  an MCP Registry server.json (registry.rs)
//!      |  each server brought to one form, a Candidate: an mcpServers-style entry
//!      |  (command/args/env or url/headers) whose values may reference what the file
//!      |  does not hold (${input:id}, ${VAR}: references.rs, read through a Source)
//!      v
//! import_one -> McpServer <name>  (+ Secret <name>-credentials: a key per credential or reference)
//! ```
//!
//! The rule that matters: no value that is, or may be, a secret is ever printed. Headers are
//! always credentials (an McpServer only sends headers from Secrets); env values and args are
//! when their name or shape says so or they take a value from outside the file (`${input:id}`,
//! `${env:VAR}`, `${VAR}`, `$VAR`: references.rs). Each becomes a Secret key with an empty
//! placeholder and a comment saying which key needs a value and where it came from (an input's
//! description, a variable's name; never its value or default).

mod references;
mod registry;
mod secrets;
mod vscode;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use references::{Dialect, Source};
pub use secrets::looks_secret;

/// Flags of `mcp-operator import`.
#[derive(clap::Args, Debug, Clone)]
pub struct ImportArgs {
    /// The JSON file: an `mcpServers` object (claude_desktop_config.json, .cursor/mcp.json,
    /// Claude Code's .mcp.json), VS Code's mcp.json (`servers`, `inputs`), or an MCP Registry
    /// server.json (`packages`, `remotes`).
    pub file: std::path::PathBuf,
    /// Namespace of every manifest printed.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Prefix for every resource name (e.g. `team-a-`).
    #[arg(long, default_value = "")]
    pub prefix: String,
}

/// What an import produced: manifests in order, and notes for the person (stderr).
#[derive(Debug, Default)]
pub struct Plan {
    pub manifests: Vec<Manifest>,
    pub notes: Vec<String>,
}

/// One manifest and the comment printed above it.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub comment: Vec<String>,
    pub body: Value,
}

/// Why a document could not be imported at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImportError {
    #[error("the file is not JSON: {0}")]
    NotJson(String),
    #[error(
        "the file is none of the shapes import reads: an \"mcpServers\" object (Claude Desktop, \
         Cursor, Claude Code's .mcp.json), a \"servers\" object (VS Code's mcp.json), or an MCP \
         Registry server.json (\"packages\" or \"remotes\" lists)"
    )]
    UnknownShape,
    #[error(
        "the file is a list of registry servers (the registry API's \"servers\" list); import \
         one of them: its \"server\" object is a server.json"
    )]
    RegistryList,
}

/// The shapes of file `import` reads, told apart by their top-level fields.
pub enum Shape<'a> {
    /// `{"mcpServers": {name: entry}}`.
    McpServers(&'a Map<String, Value>),
    /// `{"servers": {name: entry}, "inputs": [..]}`, or a VS Code settings.json's `"mcp"`
    /// object of the same.
    VsCode(&'a Map<String, Value>),
    /// A registry `server.json`, or the registry API's `{"server": {..}}` around one.
    Registry(&'a Map<String, Value>),
}

impl<'a> Shape<'a> {
    pub fn of(doc: &'a Value) -> Result<Self, ImportError> {
        let top = doc.as_object().ok_or(ImportError::UnknownShape)?;
        if top.get("mcpServers").is_some_and(Value::is_object) {
            return Ok(Shape::McpServers(top));
        }
        if top.get("servers").is_some_and(Value::is_object) {
            return Ok(Shape::VsCode(top));
        }
        // VS Code's settings.json held the same under "mcp" before mcp.json existed.
        if let Some(Value::Object(mcp)) = top.get("mcp")
            && mcp.get("servers").is_some_and(Value::is_object)
        {
            return Ok(Shape::VsCode(mcp));
        }
        let server = match top.get("server") {
            Some(Value::Object(inner)) => inner,
            _ => top,
        };
        if ["packages", "remotes"]
            .iter()
            .any(|f| server.get(*f).is_some_and(Value::is_array))
        {
            return Ok(Shape::Registry(server));
        }
        if let Some(Value::Array(items)) = top.get("servers")
            && items.iter().any(|item| item.get("server").is_some())
        {
            return Err(ImportError::RegistryList);
        }
        Err(ImportError::UnknownShape)
    }
}

/// One server to import, in the common form every shape is brought to: an `mcpServers`-style
/// entry (`command`/`args`/`env` or `url`/`headers`/`type`).
struct Candidate {
    /// The key names are made from.
    key: String,
    /// Where in the file it came from (the comment above the McpServer).
    from: String,
    entry: Map<String, Value>,
    /// The image, when the shape names it (a registry OCI package); else chosen by command.
    image: Option<String>,
}

const KNOWN_FIELDS: [&str; 8] = [
    "command",
    "args",
    "env",
    "url",
    "headers",
    "type",
    "transport",
    "envFile",
];

/// Longest name printed: a stdio McpServer's Deployment and Service are named `<name>-mcp`,
/// which must stay a DNS label (63).
const MAX_NAME: usize = 59;

/// A DNS label (RFC 1123) from any text: lowercase, runs of other characters as one `-`,
/// trimmed, at most `max` characters; "server" when nothing is left.
pub fn dns_label(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_matches('-').chars().take(max).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        "server".chars().take(max).collect()
    } else {
        out
    }
}

/// Unique names for the servers' keys, in key order: a clash gets `-2`, `-3`… (the base cut
/// so the whole stays a DNS label). Room is left for the Secret's `-credentials` suffix.
pub fn names_for(keys: &[String], prefix: &str) -> BTreeMap<String, String> {
    let mut taken = BTreeSet::new();
    let mut out = BTreeMap::new();
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    for key in sorted {
        let mut base = dns_label(&format!("{prefix}{key}"), MAX_NAME);
        // A Service name (a stdio server's) starts with a letter.
        if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
            base = dns_label(&format!("mcp-{base}"), MAX_NAME);
        }
        let mut name = base.clone();
        let mut n = 2;
        while taken.contains(&name) {
            let suffix = format!("-{n}");
            let cut: String = base.chars().take(MAX_NAME - suffix.len()).collect();
            name = format!("{}{suffix}", cut.trim_end_matches('-'));
            n += 1;
        }
        taken.insert(name.clone());
        out.insert(key.clone(), name);
    }
    out
}

/// The keys of a Secret being assembled: key → what to tell the person about it.
#[derive(Default)]
struct SecretKeys {
    keys: BTreeMap<String, String>,
    /// A value that is one reference (`${input:pat}`) → its key: an input used twice in one
    /// server is one key to fill, not two.
    by_reference: BTreeMap<String, String>,
}

impl SecretKeys {
    /// Adds a key (made unique) and returns it.
    fn add(&mut self, wanted: &str, why: String) -> String {
        let base = secret_key(wanted);
        let mut key = base.clone();
        let mut n = 2;
        while self.keys.contains_key(&key) {
            key = format!("{base}-{n}");
            n += 1;
        }
        self.keys.insert(key.clone(), why);
        key
    }

    /// Like [`add`](Self::add), but a value that is exactly one reference gets the key an
    /// earlier use of the same reference got.
    fn add_for(&mut self, value: &str, source: &Source, wanted: &str, why: String) -> String {
        let value = value.trim();
        let one_reference = value.starts_with("${")
            && value.ends_with('}')
            && value.matches("${").count() == 1
            && source.takes_from_outside(value);
        if !one_reference {
            return self.add(wanted, why);
        }
        if let Some(key) = self.by_reference.get(value) {
            let said = self.keys.get_mut(key).expect("a key of this Secret");
            // Where it comes from was said at the first use.
            let usage = why.split(" (").next().unwrap_or(&why);
            said.push_str(&format!("; also {usage}"));
            return key.clone();
        }
        let key = self.add(wanted, why);
        self.by_reference.insert(value.to_string(), key.clone());
        key
    }
}

/// A Secret data key: `[-._a-zA-Z0-9]+`.
fn secret_key(text: &str) -> String {
    let key: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(253)
        .collect();
    if key.is_empty() { "value".into() } else { key }
}

fn secret_ref(secret: &str, key: &str) -> Value {
    json!({"secretKeyRef": {"name": secret, "key": key}})
}

/// Maps a parsed document of any [`Shape`] to manifests.
pub fn plan(doc: &Value, namespace: &str, prefix: &str) -> Result<Plan, ImportError> {
    let mut out = Plan::default();
    let (source, candidates) = match Shape::of(doc)? {
        Shape::McpServers(top) => (
            Source::new(Dialect::McpServers),
            servers_object(top, "mcpServers", &["mcpServers"], &mut out),
        ),
        Shape::VsCode(top) => {
            let source = vscode::source(top.get("inputs"), &mut out.notes);
            let candidates = servers_object(top, "servers", &["servers", "inputs"], &mut out);
            (source, candidates)
        }
        Shape::Registry(server) => registry::candidates(server, &mut out.notes),
    };
    let keys: Vec<String> = candidates.iter().map(|c| c.key.clone()).collect();
    let names = names_for(&keys, prefix);
    for candidate in &candidates {
        import_one(
            candidate,
            &names[&candidate.key],
            namespace,
            &source,
            &mut out,
        );
    }
    Ok(out)
}

/// The entries of an object of servers (`mcpServers`, VS Code's `servers`), with a note for
/// every top-level field that is not imported.
fn servers_object(
    top: &Map<String, Value>,
    field: &str,
    known: &[&str],
    out: &mut Plan,
) -> Vec<Candidate> {
    for key in top.keys().filter(|k| !known.contains(&k.as_str())) {
        out.notes
            .push(format!("top-level field {:?} is not imported", short(key)));
    }
    let mut candidates = Vec::new();
    for (key, entry) in top[field].as_object().into_iter().flatten() {
        let Some(entry) = entry.as_object() else {
            out.notes
                .push(format!("server {:?}: not an object; skipped", short(key)));
            continue;
        };
        candidates.push(Candidate {
            key: key.clone(),
            from: format!("{field}.{}", short(key)),
            entry: entry.clone(),
            image: None,
        });
    }
    candidates
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}

fn import_one(candidate: &Candidate, name: &str, ns: &str, source: &Source, out: &mut Plan) {
    let entry = &candidate.entry;
    let who = format!("server {:?} (McpServer {name})", short(&candidate.key));
    for field in entry.keys() {
        if !KNOWN_FIELDS.contains(&field.as_str()) {
            out.notes
                .push(format!("{who}: field {:?} is not imported", short(field)));
        }
    }
    let kind = entry
        .get("type")
        .or_else(|| entry.get("transport"))
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase);
    let secret_name = format!("{name}-credentials");
    let mut keys = SecretKeys::default();
    let spec = match (entry.get("url"), entry.get("command")) {
        (Some(Value::String(url)), None) => remote(
            url,
            kind.as_deref(),
            entry,
            &Context {
                secret: &secret_name,
                who: &who,
                source,
            },
            &mut keys,
            out,
        ),
        (None, Some(Value::String(command))) => stdio(
            command,
            candidate.image.as_deref(),
            entry,
            &Context {
                secret: &secret_name,
                who: &who,
                source,
            },
            &mut keys,
            out,
        ),
        (Some(_), Some(_)) => {
            out.notes
                .push(format!("{who}: has both url and command; skipped"));
            return;
        }
        _ => {
            out.notes.push(format!(
                "{who}: needs a string url (remote) or command (stdio); skipped"
            ));
            return;
        }
    };
    let Some(spec) = spec else { return };
    out.manifests.push(Manifest {
        comment: vec![format!("From {}", candidate.from)],
        body: json!({
            "apiVersion": "mcp-operator.dev/v1alpha1",
            "kind": "McpServer",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }),
    });
    if !keys.keys.is_empty() {
        let mut comment = vec![format!(
            "Fill in before applying (values were not copied from the file): Secret {secret_name}"
        )];
        for (key, why) in &keys.keys {
            comment.push(format!("  {key}: {why}"));
        }
        let data: Map<String, Value> = keys.keys.keys().map(|k| (k.clone(), json!(""))).collect();
        out.manifests.push(Manifest {
            comment,
            body: json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret_name, "namespace": ns},
                "type": "Opaque",
                "stringData": data,
            }),
        });
        out.notes.push(format!(
            "{who}: Secret {secret_name} needs values for: {}",
            keys.keys.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
}

/// What the translation of one entry needs to know besides the entry.
struct Context<'a> {
    /// The Secret `<name>-credentials` its keys go in.
    secret: &'a str,
    /// How notes name the server.
    who: &'a str,
    source: &'a Source,
}

fn remote(
    url: &str,
    kind: Option<&str>,
    entry: &Map<String, Value>,
    cx: &Context<'_>,
    keys: &mut SecretKeys,
    out: &mut Plan,
) -> Option<Value> {
    let (secret, who) = (cx.secret, cx.who);
    let given = url;
    let url = match cx.source.expand_url(given) {
        Ok(url) => url,
        Err(missing) => {
            out.notes.push(format!(
                "{who}: the url takes {missing} from outside the file; an McpServer's url is \
                 written out, so put the URL itself in the file; skipped"
            ));
            return None;
        }
    };
    let Ok(mut parsed) = url::Url::parse(&url) else {
        out.notes.push(format!("{who}: url is not a URL; skipped"));
        return None;
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        out.notes
            .push(format!("{who}: url is not http(s); skipped"));
        return None;
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        out.notes.push(format!(
            "{who}: the URL carried a user name or password; removed (an McpServer sends credentials from Secrets only: add them as a header)"
        ));
    }
    let pairs: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
    if pairs.iter().any(|(k, v)| looks_secret(k, v)) {
        let kept: Vec<&(String, String)> =
            pairs.iter().filter(|(k, v)| !looks_secret(k, v)).collect();
        let dropped: Vec<&str> = pairs
            .iter()
            .filter(|(k, v)| looks_secret(k, v))
            .map(|(k, _)| k.as_str())
            .collect();
        if kept.is_empty() {
            parsed.set_query(None);
        } else {
            parsed
                .query_pairs_mut()
                .clear()
                .extend_pairs(kept.iter().map(|(k, v)| (k, v)));
        }
        out.notes.push(format!(
            "{who}: query parameter(s) {} look like credentials; removed from the URL (an McpServer cannot send query credentials from a Secret: use a header if the server accepts one)",
            dropped.join(", ")
        ));
    }
    let transport = match kind {
        Some("sse") => "sse",
        Some("http" | "streamable-http" | "streamablehttp" | "streamable_http") | None => {
            "streamable-http"
        }
        Some(other) => {
            out.notes.push(format!(
                "{who}: type {:?} is not a transport the operator knows; using streamable-http",
                short(other)
            ));
            "streamable-http"
        }
    };
    if url != given {
        // Said after the credentials were taken out: a default may have carried some.
        out.notes.push(format!(
            "{who}: the url's variables were written out with the file's defaults (check it: {})",
            short(parsed.as_str())
        ));
    }
    let mut spec = json!({"url": parsed.to_string()});
    if transport == "sse" {
        spec["transport"] = json!("sse");
    }
    let mut credentials = Map::new();
    let mut headers = Vec::new();
    match entry.get("headers") {
        None => {}
        Some(Value::Object(given)) => {
            for (header, value) in given {
                let value = value.as_str().unwrap_or("");
                let bare = value
                    .get(..7)
                    .filter(|p| p.eq_ignore_ascii_case("bearer "))
                    .map_or(value, |_| &value[7..]);
                let source = cx.source.describe(bare.trim());
                if header.eq_ignore_ascii_case("authorization")
                    && value.to_ascii_lowercase().starts_with("bearer ")
                {
                    let key = keys.add_for(
                        bare,
                        cx.source,
                        "token",
                        format!("the bearer token of the Authorization header ({source}), without \"Bearer \""),
                    );
                    credentials.insert(
                        "bearerToken".into(),
                        json!({"secretKeyRef": {"name": secret, "key": key}}),
                    );
                } else {
                    let key = keys.add_for(
                        value,
                        cx.source,
                        &header.to_ascii_lowercase(),
                        format!("the {header} header ({source})"),
                    );
                    headers.push(json!({"name": header, "valueFrom": secret_ref(secret, &key)}));
                }
            }
        }
        Some(_) => out
            .notes
            .push(format!("{who}: headers is not an object; not imported")),
    }
    if !headers.is_empty() {
        credentials.insert("headers".into(), Value::Array(headers));
    }
    if !credentials.is_empty() {
        spec["credentials"] = Value::Object(credentials);
    }
    for field in ["command", "args", "env"] {
        if entry.contains_key(field) {
            out.notes.push(format!(
                "{who}: {field} is ignored for a remote (url) server"
            ));
        }
    }
    Some(spec)
}

/// The image a stdio command runs in: the runtime its launcher needs.
fn image_for(command: &str) -> Option<&'static str> {
    let base = command.rsplit('/').next().unwrap_or(command);
    match base {
        "npx" | "node" | "npm" | "pnpm" | "bunx" => Some("node:22-slim"),
        "uvx" | "uv" => Some("ghcr.io/astral-sh/uv:python3.12-bookworm-slim"),
        "python" | "python3" | "pipx" => Some("python:3.12-slim"),
        "deno" => Some("denoland/deno:latest"),
        _ => None,
    }
}

fn stdio(
    command: &str,
    image: Option<&str>,
    entry: &Map<String, Value>,
    cx: &Context<'_>,
    keys: &mut SecretKeys,
    out: &mut Plan,
) -> Option<Value> {
    let (secret, who) = (cx.secret, cx.who);
    let mut editor_variables = BTreeSet::new();
    let mut env = Vec::new();
    let mut args = Vec::new();
    if let Some(given) = entry.get("args") {
        let Some(given) = given.as_array() else {
            out.notes
                .push(format!("{who}: args is not a list; skipped"));
            return None;
        };
        for (i, arg) in given.iter().enumerate() {
            let arg = match arg {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // A secret in an argument moves to an env var from the Secret; Kubernetes expands
            // `$(NAME)` in container args.
            let (flag, value) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with('-') => (Some(flag), value),
                _ => (None, arg.as_str()),
            };
            let secret_arg =
                looks_secret(flag.unwrap_or(""), value) || cx.source.takes_from_outside(value);
            if secret_arg {
                let var = format!("MCP_IMPORT_ARG_{}", i + 1);
                let key = keys.add_for(
                    value,
                    cx.source,
                    &var.to_ascii_lowercase(),
                    format!(
                        "argument {} of the command ({})",
                        i + 1,
                        cx.source.describe(value)
                    ),
                );
                env.push(json!({"name": var, "valueFrom": secret_ref(secret, &key)}));
                args.push(match flag {
                    Some(flag) => format!("{flag}=$({var})"),
                    None => format!("$({var})"),
                });
            } else {
                editor_variables.extend(cx.source.editor_variables(&arg).iter().map(|v| short(v)));
                args.push(arg);
            }
        }
    }
    match entry.get("env") {
        None => {}
        Some(Value::Object(given)) => {
            for (name, value) in given {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if looks_secret(name, &text) || cx.source.takes_from_outside(&text) {
                    let source = cx.source.describe(&text);
                    let key =
                        keys.add_for(&text, cx.source, name, format!("env {name} ({source})"));
                    env.push(json!({"name": name, "valueFrom": secret_ref(secret, &key)}));
                } else {
                    editor_variables
                        .extend(cx.source.editor_variables(&text).iter().map(|v| short(v)));
                    env.push(json!({"name": name, "value": text}));
                }
            }
        }
        Some(_) => out
            .notes
            .push(format!("{who}: env is not an object; not imported")),
    }
    if let Some(file) = entry.get("envFile") {
        out.notes.push(format!(
            "{who}: envFile {} is not read (it may hold credentials): add each variable it sets \
             to spec.stdio.env, a credential as a key of Secret {secret}",
            short(file.as_str().unwrap_or("(not a string)"))
        ));
    }
    if !editor_variables.is_empty() {
        out.notes.push(format!(
            "{who}: {} is the editor's variable, which means nothing in a pod; the text was kept: \
             replace it with the path or value the server should use in its container",
            editor_variables
                .iter()
                .map(|v| format!("${{{v}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let image = match image.or_else(|| image_for(command)) {
        Some(image) => image.to_string(),
        None => {
            out.notes.push(format!(
                "{who}: no image known for the command {:?}; set spec.stdio.image to one that holds it",
                short(command)
            ));
            "REPLACE-with-an-image-holding-the-command".into()
        }
    };
    if command.rsplit('/').next() == Some("docker") {
        out.notes.push(format!(
            "{who}: the command runs docker; in a cluster use the image it names as spec.stdio.image instead"
        ));
    }
    if let Some(package) = unpinned_package(command, &args) {
        out.notes.push(format!(
            "{who}: {} fetches {package} at its newest version every time a pod starts, so two \
             pods may run different code; pin it to a version you reviewed ({})",
            short(command),
            pin_example(command, &package)
        ));
    }
    let mut stdio = json!({"image": image, "command": [command]});
    if !args.is_empty() {
        stdio["args"] = json!(args);
    }
    if !env.is_empty() {
        stdio["env"] = Value::Array(env);
    }
    for field in ["url", "headers"] {
        if entry.contains_key(field) {
            out.notes.push(format!(
                "{who}: {field} is ignored for a stdio (command) server"
            ));
        }
    }
    Some(json!({"stdio": stdio}))
}

/// The package a package runner (npx, bunx, uvx, pipx run) fetches without an exact version,
/// if it does: `pkg`, `@scope/pkg`, `pkg@latest` or `pkg@^1` are unpinned; `pkg@1.2.3` and
/// `pkg==1.2.3` are pinned.
fn unpinned_package(command: &str, args: &[String]) -> Option<String> {
    let base = command.rsplit('/').next().unwrap_or(command);
    let mut rest = args.iter().map(String::as_str);
    let python = match base {
        "npx" | "bunx" => false,
        "uvx" => true,
        "pipx" => {
            rest.find(|a| *a == "run")?;
            true
        }
        _ => return None,
    };
    // The first word that is not a flag (a flag's own value, as in `--from pkg`, is the package
    // for uvx).
    let mut package = None;
    while let Some(arg) = rest.next() {
        if arg == "--from" || arg == "--package" || arg == "-p" {
            package = rest.next();
            break;
        }
        if !arg.starts_with('-') {
            package = Some(arg);
            break;
        }
    }
    let package = package?;
    let exact = |v: &str| {
        !v.is_empty()
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '+')
            && v.starts_with(|c: char| c.is_ascii_digit())
    };
    let pinned = if python {
        package
            .split_once("==")
            .or_else(|| package.split_once('@'))
            .is_some_and(|(_, v)| exact(v))
    } else {
        // A scope's leading @ is not a version.
        let unscoped = package
            .strip_prefix('@')
            .map_or(package, |p| p.split_once('/').map_or(p, |(_, n)| n));
        unscoped.split_once('@').is_some_and(|(_, v)| exact(v))
    };
    (!pinned).then(|| package.to_string())
}

fn pin_example(command: &str, package: &str) -> String {
    let base = command.rsplit('/').next().unwrap_or(command);
    let bare = package.trim_end_matches("@latest");
    match base {
        "uvx" | "pipx" => format!("{}==1.2.3", bare.split(['=', '@']).next().unwrap_or(bare)),
        _ => format!("{bare}@1.2.3"),
    }
}

/// The manifests as one YAML stream, each with its comment.
pub fn render(plan: &Plan) -> String {
    let mut text = String::new();
    for manifest in &plan.manifests {
        text.push_str("---\n");
        for line in &manifest.comment {
            text.push_str("# ");
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(&serde_saphyr::to_string(&manifest.body).expect("JSON renders as YAML"));
    }
    text
}

/// The CLI: reads the file, prints manifests on stdout and notes on stderr.
pub fn main(args: ImportArgs) -> std::process::ExitCode {
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("import: cannot read {}: {e}", args.file.display());
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = serde_json::from_str::<Value>(&text)
        .map_err(|e| ImportError::NotJson(format!("line {} column {}", e.line(), e.column())))
        .and_then(|doc| plan(&doc, &args.namespace, &args.prefix));
    match result {
        Ok(plan) => {
            for note in &plan.notes {
                eprintln!("import: {note}");
            }
            print!("{}", render(&plan));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("import: {}: {e}", args.file.display());
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
