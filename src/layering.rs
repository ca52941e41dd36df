//! Keeps the dependency graph of `lib.rs` true: each layer may name only itself and the layers
//! below it, and the pure layers (`core`, `grants`, `mcp`) name no Kubernetes crate. A
//! `use crate::api` in `grants`, say, or a `use crate::{core, api::McpServer}` (a grouped
//! import), or a `kube::` in `core` fails this test instead of slipping in.

use std::path::Path;

/// Each layer (a folder under `src/`) and the layers it may import from besides itself.
const LAYERS: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("grants", &["core"]),
    ("telemetry", &["core"]),
    ("mcp", &["core", "telemetry"]),
    ("api", &["core"]),
    ("sidecar", &["core", "grants", "mcp", "telemetry"]),
    ("inject", &["core", "grants"]),
    ("bridge", &["core", "mcp"]),
    ("import", &["core"]),
];

/// Every module path the crate has at its top, so `crate::<name>` can be told apart.
const TOP: &[&str] = &[
    "api",
    "bridge",
    "check_url",
    "controller",
    "core",
    "grants",
    "inject",
    "import",
    "mcp",
    "probe",
    "sidecar",
    "telemetry",
    "install_crypto_provider",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust file under `src/<dir>`: its path below `src/` and its text.
fn sources(dir: &str) -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join(dir), &mut files);
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            let relative = file
                .strip_prefix(&src)
                .unwrap_or(&file)
                .display()
                .to_string();
            (relative, text)
        })
        .collect()
}

/// A file's code with every `//` comment blanked out (lines kept, so positions still say which
/// line a name is on).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn line_at(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

fn name_at(code: &str, at: usize) -> String {
    code[at..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The `crate::<top>` names a file's code (not its comments) refers to, with their lines: a
/// path (`crate::api::McpServer`) or each item of a group (`crate::{api, mcp::read}`, over as
/// many lines as rustfmt gives it).
fn imports(text: &str) -> Vec<(usize, String)> {
    let code = code_of(text);
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = code[from..].find("crate::") {
        let at = from + offset + "crate::".len();
        from = at;
        if code[at..].starts_with('{') {
            // Each top-level item of the group starts after `{` or a `,` at depth one.
            let mut depth = 0usize;
            for (i, c) in code[at..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                if depth == 1 && (c == '{' || c == ',') {
                    let start = at + i + 1;
                    let skip = code[start..].len() - code[start..].trim_start().len();
                    let name = name_at(&code, start + skip);
                    if TOP.contains(&name.as_str()) {
                        found.push((line_at(&code, start + skip), name));
                    }
                }
            }
        } else {
            let name = name_at(&code, at);
            if TOP.contains(&name.as_str()) {
                found.push((line_at(&code, at), name));
            }
        }
    }
    found
}

/// The layers that must stay pure: no Kubernetes crate, so their tests need no cluster.
const PURE: &[&str] = &["core", "grants", "mcp", "telemetry"];

/// The Kubernetes crates a pure layer may not name.
const KUBERNETES: &[&str] = &[
    "kube",
    "kube_runtime",
    "kube_client",
    "kube_core",
    "k8s_openapi",
];

/// The Kubernetes crates a file's code names (`kube::…`, `use kube;`, `k8s_openapi::…`).
fn kubernetes_names(text: &str) -> Vec<(usize, String)> {
    let code = code_of(text);
    let mut found = Vec::new();
    for (at, _) in code.match_indices(|c: char| c.is_alphabetic()) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let name = name_at(&code, at);
        let after = code[at + name.len()..].trim_start();
        let named = after.starts_with("::")
            || (code[..at].trim_end().ends_with("use") && after.starts_with([';', ' ']));
        if KUBERNETES.contains(&name.as_str()) && named {
            found.push((line_at(&code, at), name));
        }
    }
    found
}

#[test]
fn no_module_imports_against_the_direction() {
    let mut wrong = Vec::new();
    for (layer, below) in LAYERS {
        let files = sources(layer);
        assert!(!files.is_empty(), "src/{layer} has no Rust files");
        for (file, text) in files {
            for (line, name) in imports(&text) {
                if name != *layer && !below.contains(&name.as_str()) {
                    wrong.push(format!("{file}:{line}: src/{layer} imports crate::{name}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the direction:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_pure_layers_name_no_kubernetes_crate() {
    let mut wrong = Vec::new();
    for layer in PURE {
        for (file, text) in sources(layer) {
            for (line, name) in kubernetes_names(&text) {
                wrong.push(format!("{file}:{line}: src/{layer} names {name}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "Kubernetes in a pure layer:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_sees_grouped_imports_over_lines() {
    let text = "use crate::{\n    core::Catalog,\n    api::{McpServer, conditions},\n    mcp,\n};";
    assert_eq!(
        imports(text),
        vec![
            (2, "core".to_string()),
            (3, "api".to_string()),
            (4, "mcp".to_string())
        ]
    );
    assert_eq!(
        imports("use crate::{self as c, grants::Pattern};"),
        vec![(1, "grants".to_string())]
    );
}

#[test]
fn the_scan_sees_kubernetes_crates_and_skips_look_alikes() {
    let text = "use kube::Api;\nlet x = k8s_openapi::ByteString;\n// kube::Client\nlet cube = my_kube::x;\nuse kube;";
    assert_eq!(
        kubernetes_names(text),
        vec![
            (1, "kube".to_string()),
            (2, "k8s_openapi".to_string()),
            (5, "kube".to_string())
        ]
    );
}

#[test]
fn the_scan_sees_imports_and_skips_comments() {
    let text =
        "use crate::api::McpServer;\n// see crate::controller\nlet x = crate::mcp::read_server;";
    assert_eq!(
        imports(text),
        vec![(1, "api".to_string()), (3, "mcp".to_string())]
    );
}

/// The reconcilers and the admission webhook, side by side under `controller/`: none imports
/// another (what they share, such as the Secret references of a spec or which policies require
/// pinning, is in `controller/shared/`); only the wiring above them (`controller/mod.rs`,
/// `watches/`) names them all.
const RECONCILERS: &[&str] = &["agent_spec", "mcp_server", "tenant_policy", "webhook"];

#[test]
fn the_reconcilers_are_peers() {
    let mut wrong = Vec::new();
    for reconciler in RECONCILERS {
        for (file, text) in sources(&format!("controller/{reconciler}")) {
            let code = code_of(&text);
            for other in RECONCILERS.iter().filter(|o| *o != reconciler) {
                for path in [
                    format!("controller::{other}"),
                    format!("super::{other}"),
                    format!("super::super::{other}"),
                ] {
                    for (at, _) in code.match_indices(&path) {
                        let end = at + path.len();
                        if !code[end..].starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                            let line = line_at(&code, at);
                            wrong.push(format!("{file}:{line}: {reconciler} imports {path}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a reconciler or the webhook imports another (move what they share to controller/shared/):\n{}",
        wrong.join("\n")
    );
}

/// The longest a controller function may be, in lines (its signature to its closing brace).
/// A reconcile longer than this is a hub, not a story: split it into gather, decide, apply.
/// No exception: the admission webhook, `controller/webhook/`, is checked like the rest.
const CONTROLLER_FUNCTION_LINES: usize = 80;

/// Non-test functions of a file and their lengths in lines: a `fn` line to the line where its
/// braces close. `#[cfg(test)]` modules (to the end of the file, where they sit) and test
/// files are left out: a test's length is the scenario it tells.
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_of(text);
    let lines: Vec<&str> = code.lines().collect();
    // The test module: `#[cfg(test)]` over an inline `mod … {` (a `mod fixtures;` is not one).
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|next| {
                    let next = next.trim();
                    next.contains("mod ") && next.ends_with('{')
                })
        })
        .unwrap_or(lines.len());
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate().take(end) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let before_ok = words[..at].iter().all(|w| {
            [
                "pub",
                "pub(crate)",
                "pub(super)",
                "async",
                "const",
                "unsafe",
            ]
            .contains(w)
                || w.starts_with("pub(")
        });
        if !before_ok || at + 1 >= words.len() {
            continue;
        }
        let name: String = words[at + 1]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut depth = 0i64;
        let mut opened = false;
        for (offset, body) in lines[start..].iter().enumerate() {
            for c in body.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if !opened && body.trim_end().ends_with(';') {
                break; // a declaration without a body
            }
            if opened && depth <= 0 {
                found.push((name.clone(), start + 1, offset + 1));
                break;
            }
        }
    }
    found
}

#[test]
fn no_controller_function_outgrows_a_page() {
    let mut wrong = Vec::new();
    for (file, text) in sources("controller") {
        let relative = file.trim_start_matches("controller/");
        if relative.ends_with("tests.rs") {
            continue;
        }
        for (name, line, length) in function_lengths(&text) {
            if length > CONTROLLER_FUNCTION_LINES {
                wrong.push(format!(
                    "{file}:{line}: {name} is {length} lines (at most {CONTROLLER_FUNCTION_LINES})"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "controller functions too long to read as a story:\n{}",
        wrong.join("\n")
    );
}

/// The most Rust files `controller/` keeps at its top (mod.rs included); the rest live in the
/// folders of what they do.
const CONTROLLER_TOP_FILES: usize = 8;

#[test]
fn the_controller_keeps_few_files_at_its_top() {
    let controller = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller");
    let top: Vec<String> = std::fs::read_dir(&controller)
        .expect("src/controller")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!(
        top.len() <= CONTROLLER_TOP_FILES,
        "controller/ has {} files at its top (at most {CONTROLLER_TOP_FILES}): {top:?}",
        top.len()
    );
}

#[test]
fn function_lengths_count_bodies_and_skip_tests() {
    let text = "pub async fn a(\n    x: u8,\n) -> u8 {\n    if x { 1 } else { 2 }\n}\nfn b();\nconst X: u8 = 1;\n#[cfg(test)]\nmod tests {\n    fn long() {\n    }\n}\n";
    assert_eq!(function_lengths(text), vec![("a".to_string(), 1, 5)]);
}
