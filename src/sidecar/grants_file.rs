//! The grants file: reads `grants.json` from the mounted ConfigMap and notices when the kubelet
//! replaces it. The kubelet swaps a `..data` symlink to a new timestamped directory, so the file
//! is polled by its resolved path, modification time and length (a swap changes the first; an
//! in-place write the others) every [`POLL`]; a change is picked up well within a second.
//!
//! A document that cannot be read, is not JSON, has another `schemaVersion` or does not fit the
//! layout never replaces the last good one: the watch keeps serving it and says what is wrong
//! (log line, reload metric, readiness message). No good document at all → not ready.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::grants::{GrantsDocument, SCHEMA_VERSION};

use super::metrics::Metrics;

/// How often the file is checked.
pub const POLL: Duration = Duration::from_millis(200);

/// Largest grants file read (a document for hundreds of tools is tens of kilobytes).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// A good document, as loaded.
#[derive(Debug)]
pub struct Loaded {
    pub doc: GrantsDocument,
    /// The document's digest (the controller's canonical function).
    pub digest: String,
}

/// What the sidecar knows of its grants: the last good document and, when the newest file
/// could not be used, why.
#[derive(Debug, Clone, Default)]
pub struct GrantsState {
    pub current: Option<Arc<Loaded>>,
    pub problem: Option<String>,
}

/// Reads and checks one grants file. The error is a sentence naming the file and what is wrong.
pub fn read(path: &Path) -> Result<GrantsDocument, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("the grants file {shown} does not exist (is the grants ConfigMap mounted?)")
        }
        _ => format!("the grants file {shown} cannot be read: {e}"),
    })?;
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "the grants file {shown} is {} bytes, more than the {MAX_BYTES} this sidecar reads",
            meta.len()
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("the grants file {shown} cannot be read: {e}"))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("the grants file {shown} is not JSON ({e})"))?;
    match value.get("schemaVersion").and_then(|v| v.as_str()) {
        Some(SCHEMA_VERSION) => {}
        Some(other) => {
            return Err(format!(
                "the grants file {shown} has schemaVersion {:?}; this sidecar reads {SCHEMA_VERSION} (is the sidecar older than the operator?)",
                other.chars().take(80).collect::<String>()
            ));
        }
        None => return Err(format!("the grants file {shown} has no schemaVersion")),
    }
    let mut doc: GrantsDocument = serde_json::from_value(value)
        .map_err(|e| format!("the grants file {shown} does not fit {SCHEMA_VERSION}: {e}"))?;
    if let Some(problem) = doc.naming_problem() {
        return Err(format!(
            "the grants file {shown} does not fit {SCHEMA_VERSION}: {problem}"
        ));
    }
    // The call-time lookup searches each server's tools by qualified name: make the order a
    // fact here rather than a trust in the writer.
    for server in &mut doc.servers {
        server
            .tools
            .sort_by(|a, b| a.qualified_name.cmp(&b.qualified_name));
    }
    Ok(doc)
}

/// What identifies the file's current content without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    resolved: Option<PathBuf>,
    modified: Option<SystemTime>,
    len: Option<u64>,
}

fn fingerprint(path: &Path) -> Fingerprint {
    let meta = std::fs::metadata(path).ok();
    Fingerprint {
        resolved: std::fs::canonicalize(path).ok(),
        modified: meta.as_ref().and_then(|m| m.modified().ok()),
        len: meta.map(|m| m.len()),
    }
}

/// Loads the file now and keeps watching it; the receiver always holds the current state.
pub fn watch_file(path: PathBuf, metrics: Arc<Metrics>) -> watch::Receiver<GrantsState> {
    let mut state = GrantsState::default();
    apply(&path, &mut state, &metrics);
    let (tx, rx) = watch::channel(state);
    tokio::spawn(async move {
        let mut seen = fingerprint(&path);
        let mut ticker = tokio::time::interval(POLL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if tx.is_closed() {
                return;
            }
            let now = fingerprint(&path);
            if now == seen {
                continue;
            }
            seen = now;
            tx.send_if_modified(|state| apply(&path, state, &metrics));
        }
    });
    rx
}

/// Reads the file into `state`; true when anything the sidecar acts on changed.
fn apply(path: &Path, state: &mut GrantsState, metrics: &Metrics) -> bool {
    match read(path) {
        Ok(doc) => {
            let digest = doc.digest();
            metrics
                .grants_reloads
                .get_or_create(&result_label("ok"))
                .inc();
            let problem_cleared = state.problem.take().is_some();
            if state.current.as_ref().is_some_and(|c| c.digest == digest) {
                return problem_cleared;
            }
            tracing::info!(
                digest = %digest,
                servers = doc.servers.len(),
                tools = doc.tool_count(),
                "grants loaded"
            );
            state.current = Some(Arc::new(Loaded { doc, digest }));
            true
        }
        Err(problem) => {
            metrics
                .grants_reloads
                .get_or_create(&result_label("invalid"))
                .inc();
            match &state.current {
                Some(good) => tracing::warn!(
                    reason = "InvalidGrants",
                    kept = %good.digest,
                    "{problem}; keeping the last good grants"
                ),
                None => tracing::warn!(reason = "InvalidGrants", "{problem}"),
            }
            let changed = state.problem.as_deref() != Some(problem.as_str());
            state.problem = Some(problem);
            changed
        }
    }
}

fn result_label(result: &str) -> Vec<(String, String)> {
    vec![("result".to_string(), result.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"schemaVersion":"mcp-operator.dev/grants/v1","servers":[{"name":"fs","prefix":"fs","optional":false,"available":true,"deferred":false,"tools":[
        {"qualifiedName":"fs__write","name":"write","access":"write","idempotent":false,"requiresApproval":false,"definitionDigest":"sha256:1"},
        {"qualifiedName":"fs__read","name":"read","access":"read","idempotent":true,"requiresApproval":false,"definitionDigest":"sha256:2"}]}]}"#;

    #[test]
    fn reads_a_good_document_and_sorts_its_tools() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        std::fs::write(&path, GOOD).unwrap();
        let doc = read(&path).unwrap();
        assert_eq!(doc.servers[0].tools[0].qualified_name, "fs__read");
        assert!(crate::grants::permits(&doc, "fs__write").is_some());
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        assert!(read(&path).unwrap_err().contains("does not exist"));
        std::fs::write(&path, "{not json").unwrap();
        assert!(read(&path).unwrap_err().contains("is not JSON"));
        std::fs::write(&path, GOOD.replace("grants/v1", "grants/v9")).unwrap();
        assert!(read(&path).unwrap_err().contains("grants/v9"));
        std::fs::write(&path, r#"{"schemaVersion":"mcp-operator.dev/grants/v1"}"#).unwrap();
        assert!(read(&path).unwrap_err().contains("does not fit"));
        // A qualified name that is not <prefix>__<name> could shadow the sidecar's own tools.
        std::fs::write(&path, GOOD.replace("\"fs__read\"", "\"list_tools\"")).unwrap();
        let problem = read(&path).unwrap_err();
        assert!(
            problem.contains("\"list_tools\", not \"fs__read\""),
            "{problem}"
        );
    }

    #[test]
    fn a_bad_document_keeps_the_last_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let metrics = Metrics::new();
        let mut state = GrantsState::default();
        assert!(apply(&path, &mut state, &metrics), "a new problem");
        assert!(state.problem.is_some() && state.current.is_none());
        std::fs::write(&path, GOOD).unwrap();
        assert!(apply(&path, &mut state, &metrics));
        let good = state.current.clone().unwrap();
        std::fs::write(&path, "garbage").unwrap();
        assert!(apply(&path, &mut state, &metrics));
        assert_eq!(state.current.as_ref().unwrap().digest, good.digest);
        assert!(state.problem.as_ref().unwrap().contains("not JSON"));
        std::fs::write(&path, GOOD).unwrap();
        assert!(apply(&path, &mut state, &metrics), "the problem cleared");
        assert!(state.problem.is_none());
    }
}
