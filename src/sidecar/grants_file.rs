//! The grants file: reads `grants.json` (and its signature `grants.sig` beside it) from the
//! mounted ConfigMap and notices when the kubelet replaces them. The kubelet swaps a `..data`
//! symlink to a new timestamped directory, so the files are polled by their resolved paths,
//! modification times and lengths (a swap changes the first; an in-place write the others)
//! every [`POLL`]; a change is picked up well within a second.
//!
//! ```text
//!  grants.json + grants.sig ──► read ──► Trust::Signed: grants::signature::verify
//!                                 │        (trusted keys, this pod's namespace/AgentSpec/uid,
//!                                 │         sequence ≥ the last accepted, kept in --state-dir)
//!                                 ├─ Good            obeyed
//!                                 ├─ NothingGranted  no file, or a signed revoked document
//!                                 └─ Rejected        kept the last good one; metric, log, /readyz
//! ```
//!
//! A document that cannot be read, is not JSON, has another `schemaVersion`, does not fit the
//! layout or (with trusted keys) is not signed by the operator for this very AgentSpec never
//! replaces the last good one: the watch keeps serving it and says what is wrong (log line,
//! `grants_rejected_total{reason}`, readiness message). A missing grants file or a revoked
//! document grants nothing: the agent loses every tool, and `/readyz` and every refusal say
//! why. Without trusted keys ([`Trust::Unsigned`], a sidecar run by hand) signatures are not
//! checked at all.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::resources_prompts::Narrowing;
use crate::grants::signature::{self, Binding, SIGNATURE_KEY, VerifyingKeys};
use crate::grants::{GrantsDocument, READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION};

use super::metrics::Metrics;

/// How often the file is checked.
pub const POLL: Duration = Duration::from_millis(200);

/// Largest grants file read (a document for hundreds of tools is tens of kilobytes).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Largest signature file read (it is a few hundred bytes).
const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;

/// A good document, as loaded.
#[derive(Debug)]
pub struct Loaded {
    pub doc: GrantsDocument,
    /// The document's digest (the controller's canonical function).
    pub digest: String,
    /// Its resource and prompt grants, compiled once for this generation of the grants.
    pub narrowing: Narrowing,
}

impl Loaded {
    /// A loaded document, its resource and prompt bounds compiled.
    pub fn new(doc: GrantsDocument, digest: String) -> Self {
        let narrowing = Narrowing::new(&doc);
        Loaded {
            doc,
            digest,
            narrowing,
        }
    }
}

/// What the sidecar knows of its grants: the document it obeys, or why nothing is granted, and,
/// when the newest file could not be used, why.
#[derive(Debug, Clone, Default)]
pub struct GrantsState {
    pub current: Option<Arc<Loaded>>,
    pub problem: Option<String>,
    /// Nothing is granted, on purpose: the grants file is gone or the grants were revoked
    /// (`current` is None then).
    pub nothing_granted: Option<String>,
    /// The highest sequence of a signed document accepted.
    pub sequence: Option<u64>,
}

impl GrantsState {
    /// Why no tool is granted now, when none is: a sentence for the agent and `/readyz`.
    pub fn why_nothing(&self) -> Option<String> {
        if self.current.is_some() {
            return None;
        }
        Some(match (&self.nothing_granted, &self.problem) {
            (Some(reason), _) => reason.clone(),
            (None, Some(problem)) => format!("no usable grants document yet: {problem}"),
            (None, None) => "the sidecar has not read a grants document yet".into(),
        })
    }
}

/// Which documents the sidecar obeys.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Any well-formed document (a sidecar run by hand, without --grants-verify-keys).
    Unsigned,
    /// Only documents signed by one of `keys` for `binding`, never older than the last one
    /// accepted (kept in `state`, so a restarted sidecar remembers it).
    Signed {
        keys: VerifyingKeys,
        binding: Binding,
        state: Option<SequenceFile>,
        /// The oldest sequence obeyed even when `state` has none (`--grants-min-sequence`).
        min_sequence: Option<u64>,
    },
}

/// Where the highest accepted sequence survives a restart of the sidecar (the pod's emptyDir
/// `mcp-sidecar-state`): `<dir>/grants-sequence.json`, `{"uid": …, "sequence": …}`.
#[derive(Debug, Clone)]
pub struct SequenceFile {
    path: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SequenceRecord {
    uid: String,
    sequence: u64,
}

impl SequenceFile {
    pub fn in_dir(dir: &Path) -> Self {
        SequenceFile {
            path: dir.join("grants-sequence.json"),
        }
    }

    /// The sequence recorded for `uid`; a record of another uid (another AgentSpec's) or an
    /// unreadable one is none (logged).
    pub fn load(&self, uid: &str) -> Option<u64> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(
                    reason = "StateUnreadable",
                    "cannot read {}: {e}",
                    self.path.display()
                );
                return None;
            }
        };
        match serde_json::from_slice::<SequenceRecord>(&bytes) {
            Ok(r) if r.uid == uid => Some(r.sequence),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(
                    reason = "StateUnreadable",
                    "{} is not a sequence record: {e}",
                    self.path.display()
                );
                None
            }
        }
    }

    /// Records `sequence` for `uid` (written aside and renamed: a crash leaves the old record
    /// or the new one).
    pub fn store(&self, uid: &str, sequence: u64) {
        let record = serde_json::to_vec(&SequenceRecord {
            uid: uid.to_string(),
            sequence,
        })
        .expect("a record serialises");
        let aside = self.path.with_extension("json.new");
        let written =
            std::fs::write(&aside, record).and_then(|()| std::fs::rename(&aside, &self.path));
        if let Err(e) = written {
            tracing::warn!(
                reason = "StateUnwritable",
                "cannot record the accepted grants sequence in {}: {e}; a restarted sidecar would not know it",
                self.path.display()
            );
        }
    }
}

/// What one read of the grants files gave.
#[derive(Debug)]
pub enum Read {
    Good {
        doc: GrantsDocument,
        sequence: Option<u64>,
    },
    /// Nothing is granted: why.
    NothingGranted {
        reason: &'static str,
        message: String,
        sequence: Option<u64>,
    },
    /// Not obeyed: the metric label and the sentence.
    Rejected {
        reason: &'static str,
        message: String,
    },
}

/// `grants.sig` beside `grants.json`.
pub fn signature_path(grants_file: &Path) -> PathBuf {
    grants_file.with_file_name(SIGNATURE_KEY)
}

fn read_limited(path: &Path, max: u64) -> Result<Option<Vec<u8>>, String> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown} cannot be read: {e}")),
    };
    if meta.len() > max {
        return Err(format!(
            "{shown} is {} bytes, more than the {max} this sidecar reads",
            meta.len()
        ));
    }
    std::fs::read(path)
        .map(Some)
        .map_err(|e| format!("{shown} cannot be read: {e}"))
}

/// Reads and judges the grants file (and its signature, under [`Trust::Signed`]). `last` is
/// the highest sequence accepted so far.
pub fn read(path: &Path, trust: &Trust, last: Option<u64>) -> Read {
    let shown = path.display();
    let invalid = |message: String| Read::Rejected {
        reason: "invalid",
        message,
    };
    let bytes = match read_limited(path, MAX_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Read::NothingGranted {
                reason: "missing",
                message: format!(
                    "the grants file {shown} does not exist (the grants ConfigMap is not mounted, or it lost its grants.json)"
                ),
                sequence: None,
            };
        }
        Err(e) => return invalid(format!("the grants file {e}")),
    };
    let mut sequence = None;
    if let Trust::Signed { keys, binding, .. } = trust {
        let sig_path = signature_path(path);
        let sig = match read_limited(&sig_path, MAX_SIGNATURE_BYTES) {
            Ok(s) => s,
            Err(e) => return invalid(format!("the grants signature {e}")),
        };
        match signature::verify(&bytes, sig.as_deref(), keys, binding, last) {
            Ok(v) => sequence = Some(v.sequence),
            Err(refused) => {
                return Read::Rejected {
                    reason: refused.reason(),
                    message: format!("the grants file {shown} is not the operator's: {refused}"),
                };
            }
        }
    }
    match parse(&bytes, path) {
        Ok(doc) if doc.revoked => Read::NothingGranted {
            reason: "revoked",
            message: match trust {
                Trust::Signed { binding, .. } => format!(
                    "the grants were revoked: the AgentSpec {}/{} is being deleted",
                    binding.namespace, binding.agent_spec
                ),
                Trust::Unsigned => "the grants were revoked: the AgentSpec is being deleted".into(),
            },
            sequence,
        },
        Ok(doc) => Read::Good { doc, sequence },
        Err(message) => invalid(message),
    }
}

/// Parses and checks one grants document. The error is a sentence naming the file and what is
/// wrong.
fn parse(bytes: &[u8], path: &Path) -> Result<GrantsDocument, String> {
    let shown = path.display();
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("the grants file {shown} is not JSON ({e})"))?;
    // v1 is v2 without resources and prompts: a v1 document read as v2 grants none of them.
    match value.get("schemaVersion").and_then(|v| v.as_str()) {
        Some(version) if READABLE_SCHEMA_VERSIONS.contains(&version) => {}
        Some(other) => {
            return Err(format!(
                "the grants file {shown} has schemaVersion {:?}; this sidecar reads {} (is the sidecar older than the operator?)",
                other.chars().take(80).collect::<String>(),
                READABLE_SCHEMA_VERSIONS.join(" and ")
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

/// What identifies the files' current content without reading them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    resolved: Option<PathBuf>,
    modified: Option<SystemTime>,
    len: Option<u64>,
}

fn fingerprint_of(path: &Path) -> Fingerprint {
    let meta = std::fs::metadata(path).ok();
    Fingerprint {
        resolved: std::fs::canonicalize(path).ok(),
        modified: meta.as_ref().and_then(|m| m.modified().ok()),
        len: meta.map(|m| m.len()),
    }
}

/// The grants file's and its signature's.
fn fingerprint(path: &Path) -> (Fingerprint, Fingerprint) {
    (fingerprint_of(path), fingerprint_of(&signature_path(path)))
}

/// What a sidecar starts from: nothing loaded, and the oldest sequence it will obey — the one
/// it accepted before a restart (its state dir) or the one the injection gave it, the higher.
fn starting_state(trust: &Trust) -> GrantsState {
    let mut state = GrantsState::default();
    if let Trust::Signed {
        binding,
        state: file,
        min_sequence,
        ..
    } = trust
    {
        let kept = file.as_ref().and_then(|f| f.load(&binding.uid));
        state.sequence = kept.max(*min_sequence);
    }
    state
}

/// Loads the file now and keeps watching it; the receiver always holds the current state.
pub fn watch_file(
    path: PathBuf,
    trust: Trust,
    metrics: Arc<Metrics>,
) -> watch::Receiver<GrantsState> {
    let mut state = starting_state(&trust);
    apply(&path, &trust, &mut state, &metrics);
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
            tx.send_if_modified(|state| apply(&path, &trust, state, &metrics));
        }
    });
    rx
}

/// Reads the file into `state`; true when anything the sidecar acts on changed.
fn apply(path: &Path, trust: &Trust, state: &mut GrantsState, metrics: &Metrics) -> bool {
    let accepted = |state: &mut GrantsState, sequence: Option<u64>| {
        let Some(sequence) = sequence else { return };
        if state.sequence.is_some_and(|last| last >= sequence) {
            return;
        }
        state.sequence = Some(sequence);
        if let Trust::Signed {
            binding,
            state: Some(file),
            ..
        } = trust
        {
            file.store(&binding.uid, sequence);
        }
    };
    match read(path, trust, state.sequence) {
        Read::Good { doc, sequence } => {
            let digest = doc.digest();
            metrics
                .grants_reloads
                .get_or_create(&result_label("ok"))
                .inc();
            accepted(state, sequence);
            let cleared = state.problem.take().is_some() | state.nothing_granted.take().is_some();
            if state.current.as_ref().is_some_and(|c| c.digest == digest) {
                return cleared;
            }
            tracing::info!(
                digest = %digest,
                servers = doc.servers.len(),
                tools = doc.tool_count(),
                sequence,
                "grants loaded"
            );
            state.current = Some(Arc::new(Loaded::new(doc, digest)));
            true
        }
        Read::NothingGranted {
            reason,
            message,
            sequence,
        } => {
            metrics
                .grants_reloads
                .get_or_create(&result_label(reason))
                .inc();
            accepted(state, sequence);
            let changed = state.current.is_some()
                || state.problem.is_some()
                || state.nothing_granted.as_deref() != Some(message.as_str());
            if changed {
                tracing::warn!(reason, "{message}: nothing is granted");
            }
            state.current = None;
            state.problem = None;
            state.nothing_granted = Some(message);
            changed
        }
        Read::Rejected { reason, message } => {
            metrics
                .grants_reloads
                .get_or_create(&result_label("invalid"))
                .inc();
            metrics
                .grants_rejected
                .get_or_create(&reason_label(reason))
                .inc();
            match &state.current {
                Some(good) => tracing::warn!(
                    reason,
                    kept = %good.digest,
                    "{message}; keeping the last good grants"
                ),
                None => tracing::warn!(reason, "{message}"),
            }
            let changed = state.problem.as_deref() != Some(message.as_str());
            state.problem = Some(message);
            changed
        }
    }
}

fn result_label(result: &str) -> Vec<(String, String)> {
    vec![("result".to_string(), result.to_string())]
}

fn reason_label(reason: &str) -> Vec<(String, String)> {
    vec![("reason".to_string(), reason.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::signature::Keyring;

    const GOOD: &str = r#"{"schemaVersion":"mcp-operator.dev/grants/v1","servers":[{"name":"fs","prefix":"fs","optional":false,"available":true,"deferred":false,"tools":[
        {"qualifiedName":"fs__write","name":"write","access":"write","idempotent":false,"requiresApproval":false,"definitionDigest":"sha256:1"},
        {"qualifiedName":"fs__read","name":"read","access":"read","idempotent":true,"requiresApproval":false,"definitionDigest":"sha256:2"}]}]}"#;

    fn unsigned(path: &Path) -> Result<GrantsDocument, String> {
        match read(path, &Trust::Unsigned, None) {
            Read::Good { doc, .. } => Ok(doc),
            Read::NothingGranted { message, .. } | Read::Rejected { message, .. } => Err(message),
        }
    }

    fn bot() -> Binding {
        Binding {
            namespace: "team-a".into(),
            agent_spec: "bot".into(),
            uid: "uid-1".into(),
        }
    }

    fn signed_trust(keyring: &Keyring, state: Option<&Path>) -> Trust {
        Trust::Signed {
            keys: keyring.verifying_keys(),
            binding: bot(),
            state: state.map(SequenceFile::in_dir),
            min_sequence: None,
        }
    }

    /// Writes `doc` and its signature the way the kubelet presents a ConfigMap.
    fn publish(dir: &Path, keyring: &Keyring, doc: &str, sequence: u64) {
        let sig = keyring.current.sign(doc.as_bytes(), &bot(), sequence);
        std::fs::write(dir.join(SIGNATURE_KEY), sig.to_json()).unwrap();
        std::fs::write(dir.join("grants.json"), doc).unwrap();
    }

    fn rejected(state: &Metrics, reason: &str) -> u64 {
        state
            .grants_rejected
            .get_or_create(&reason_label(reason))
            .get()
    }

    #[test]
    fn reads_a_good_document_and_sorts_its_tools() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        std::fs::write(&path, GOOD).unwrap();
        let doc = unsigned(&path).unwrap();
        assert_eq!(doc.servers[0].tools[0].qualified_name, "fs__read");
        assert!(crate::grants::permits(&doc, "fs__write").is_some());
    }

    /// This sidecar reads both versions: v1 (an older operator's, or one granting tools only)
    /// grants no resource and no prompt; v2 carries the bounds.
    #[test]
    fn reads_v1_and_v2_documents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        std::fs::write(&path, GOOD).unwrap();
        let v1 = unsigned(&path).unwrap();
        assert!(v1.servers[0].resources.is_empty() && v1.servers[0].prompts.is_empty());
        let v2 = GOOD.replace("grants/v1", "grants/v2").replace(
            r#""deferred":false,"#,
            r#""deferred":false,"resources":[{"allow":["file:///docs/*"]}],"prompts":[{"allow":["*"]}],"#,
        );
        std::fs::write(&path, v2).unwrap();
        let doc = unsigned(&path).unwrap();
        assert_eq!(doc.servers[0].resources[0].allow, vec!["file:///docs/*"]);
        assert_eq!(doc.servers[0].prompts[0].allow, vec!["*"]);
        assert!(crate::grants::permits(&doc, "fs__read").is_some());
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        assert!(unsigned(&path).unwrap_err().contains("does not exist"));
        std::fs::write(&path, "{not json").unwrap();
        assert!(unsigned(&path).unwrap_err().contains("is not JSON"));
        std::fs::write(&path, GOOD.replace("grants/v1", "grants/v9")).unwrap();
        assert!(unsigned(&path).unwrap_err().contains("grants/v9"));
        std::fs::write(&path, r#"{"schemaVersion":"mcp-operator.dev/grants/v1"}"#).unwrap();
        assert!(unsigned(&path).unwrap_err().contains("does not fit"));
        // A qualified name that is not <prefix>__<name> could shadow the sidecar's own tools.
        std::fs::write(&path, GOOD.replace("\"fs__read\"", "\"list_tools\"")).unwrap();
        let problem = unsigned(&path).unwrap_err();
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
        let trust = Trust::Unsigned;
        assert!(
            apply(&path, &trust, &mut state, &metrics),
            "nothing granted"
        );
        assert!(state.current.is_none());
        assert!(state.why_nothing().unwrap().contains("does not exist"));
        std::fs::write(&path, GOOD).unwrap();
        assert!(apply(&path, &trust, &mut state, &metrics));
        let good = state.current.clone().unwrap();
        assert_eq!(state.why_nothing(), None);
        std::fs::write(&path, "garbage").unwrap();
        assert!(apply(&path, &trust, &mut state, &metrics));
        assert_eq!(state.current.as_ref().unwrap().digest, good.digest);
        assert!(state.problem.as_ref().unwrap().contains("not JSON"));
        assert_eq!(rejected(&metrics, "invalid"), 1);
        std::fs::write(&path, GOOD).unwrap();
        assert!(
            apply(&path, &trust, &mut state, &metrics),
            "the problem cleared"
        );
        assert!(state.problem.is_none());
    }

    #[test]
    fn a_missing_file_grants_nothing_even_after_a_good_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let metrics = Metrics::new();
        let mut state = GrantsState::default();
        std::fs::write(&path, GOOD).unwrap();
        apply(&path, &Trust::Unsigned, &mut state, &metrics);
        assert!(state.current.is_some());
        std::fs::remove_file(&path).unwrap();
        assert!(apply(&path, &Trust::Unsigned, &mut state, &metrics));
        assert!(state.current.is_none());
        assert!(state.why_nothing().unwrap().contains("does not exist"));
    }

    #[test]
    fn with_trusted_keys_only_the_operators_documents_are_obeyed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let keyring = Keyring::generate();
        let trust = signed_trust(&keyring, None);
        let metrics = Metrics::new();
        let mut state = GrantsState::default();

        // Unsigned: refused, nothing to fall back on.
        std::fs::write(&path, GOOD).unwrap();
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_none());
        assert!(
            state.why_nothing().unwrap().contains("not signed"),
            "{state:?}"
        );
        assert_eq!(rejected(&metrics, "unsigned"), 1);

        publish(dir.path(), &keyring, GOOD, 10);
        apply(&path, &trust, &mut state, &metrics);
        let good = state.current.clone().expect("a signed document is obeyed");
        assert_eq!(state.sequence, Some(10));

        // One tool more, signature untouched: refused, the last good one kept.
        let widened = GOOD.replace(r#""access":"write""#, r#""access":"read""#);
        std::fs::write(&path, &widened).unwrap();
        assert!(apply(&path, &trust, &mut state, &metrics));
        assert_eq!(state.current.as_ref().unwrap().digest, good.digest);
        let problem = state.problem.clone().unwrap();
        assert!(problem.contains("changed after it was signed"), "{problem}");
        assert_eq!(rejected(&metrics, "content_changed"), 1);

        // Another key's signature.
        let stranger = Keyring::generate();
        publish(dir.path(), &stranger, &widened, 11);
        apply(&path, &trust, &mut state, &metrics);
        assert_eq!(state.current.as_ref().unwrap().digest, good.digest);
        assert_eq!(rejected(&metrics, "unknown_key"), 1);

        // A newer document, then the older one replayed.
        let newer = GOOD.replace("sha256:1", "sha256:3");
        publish(dir.path(), &keyring, &newer, 20);
        apply(&path, &trust, &mut state, &metrics);
        let newest = state.current.clone().unwrap();
        assert_ne!(newest.digest, good.digest);
        publish(dir.path(), &keyring, GOOD, 10);
        apply(&path, &trust, &mut state, &metrics);
        assert_eq!(state.current.as_ref().unwrap().digest, newest.digest);
        assert!(state.problem.as_ref().unwrap().contains("a replay"));
        assert_eq!(rejected(&metrics, "older_sequence"), 1);
    }

    #[test]
    fn a_signed_revoked_document_grants_nothing_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let keyring = Keyring::generate();
        let trust = signed_trust(&keyring, None);
        let metrics = Metrics::new();
        let mut state = GrantsState::default();
        publish(dir.path(), &keyring, GOOD, 1);
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_some());
        let revoked = serde_json::to_string(&GrantsDocument::revoked()).unwrap();
        // Unsigned, the revocation is refused like any other document...
        std::fs::write(&path, &revoked).unwrap();
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_some());
        // ...signed, it is obeyed.
        publish(dir.path(), &keyring, &revoked, 2);
        assert!(apply(&path, &trust, &mut state, &metrics));
        assert!(state.current.is_none());
        let why = state.why_nothing().unwrap();
        assert!(
            why.contains("revoked") && why.contains("team-a/bot"),
            "{why}"
        );
        // And the grants before it cannot be put back.
        publish(dir.path(), &keyring, GOOD, 1);
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_none());
    }

    #[test]
    fn a_restarted_sidecar_remembers_the_sequence_it_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let keyring = Keyring::generate();
        let trust = signed_trust(&keyring, Some(state_dir.path()));
        let metrics = Metrics::new();
        let mut state = GrantsState::default();
        publish(dir.path(), &keyring, GOOD, 50);
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_some());
        let file = SequenceFile::in_dir(state_dir.path());
        assert_eq!(file.load("uid-1"), Some(50));
        assert_eq!(file.load("another-uid"), None);

        // The older document put back while the sidecar restarts.
        publish(
            dir.path(),
            &keyring,
            &GOOD.replace("sha256:1", "sha256:0"),
            40,
        );
        let mut restarted = starting_state(&trust);
        apply(&path, &trust, &mut restarted, &metrics);
        assert!(restarted.current.is_none());
        assert!(restarted.why_nothing().unwrap().contains("a replay"));
    }

    #[test]
    fn a_brand_new_sidecar_refuses_a_document_older_than_the_published_one() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        let keyring = Keyring::generate();
        let Trust::Signed {
            keys,
            binding,
            state,
            ..
        } = signed_trust(&keyring, Some(state_dir.path()))
        else {
            unreachable!()
        };
        // The AgentSpec's status says sequence 50 is published; the tenant put 40 back first.
        let trust = Trust::Signed {
            keys,
            binding,
            state,
            min_sequence: Some(50),
        };
        let metrics = Metrics::new();
        publish(dir.path(), &keyring, GOOD, 40);
        let mut state = starting_state(&trust);
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_none(), "the older document is not obeyed");
        assert!(state.why_nothing().unwrap().contains("a replay"));
        assert_eq!(rejected(&metrics, "older_sequence"), 1);
        // The published document itself, and any newer one, is.
        publish(dir.path(), &keyring, GOOD, 50);
        apply(&path, &trust, &mut state, &metrics);
        assert!(state.current.is_some());
        // The state dir's higher record wins over a lower floor after a restart.
        publish(dir.path(), &keyring, GOOD, 60);
        apply(&path, &trust, &mut state, &metrics);
        assert_eq!(starting_state(&trust).sequence, Some(60));
    }
}
