//! Keeps the dependency graph of `lib.rs` true: each layer may name only itself and the layers
//! below it. A `use crate::api` in `grants`, say, fails this test instead of slipping in.

use std::path::Path;

/// Each layer (a folder under `src/`) and the layers it may import from besides itself.
const LAYERS: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("grants", &["core"]),
    ("mcp", &["core"]),
    ("api", &["core"]),
    ("sidecar", &["core", "grants", "mcp"]),
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

/// The `crate::<top>` names a file's code (not its comments) refers to.
fn imports(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if TOP.contains(&name.as_str()) {
                found.push((number + 1, name));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn no_module_imports_against_the_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for (layer, below) in LAYERS {
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "src/{layer} has no Rust files");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a readable source file");
            for (line, name) in imports(&text) {
                if name != *layer && !below.contains(&name.as_str()) {
                    wrong.push(format!(
                        "{}:{line}: src/{layer} imports crate::{name}",
                        file.strip_prefix(&src).unwrap_or(&file).display()
                    ));
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
fn the_scan_sees_imports_and_skips_comments() {
    let text =
        "use crate::api::McpServer;\n// see crate::controller\nlet x = crate::mcp::read_server;";
    assert_eq!(
        imports(text),
        vec![(1, "api".to_string()), (3, "mcp".to_string())]
    );
}
