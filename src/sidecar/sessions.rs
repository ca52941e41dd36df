//! Legacy-era agent sessions (2025-03-26, 2025-06-18, 2025-11-25) that outlive the sidecar
//! process. The session id the sidecar hands out at `initialize` *is* the session: what it
//! negotiated, sealed with the sidecar's key ([`super::approval::StateKey`], kept in the pod's
//! state directory), so a sidecar restarted by the kubelet (crash, OOM kill, liveness probe)
//! opens an id it never saw and answers as the one that issued it. The official TypeScript
//! client never initializes again after a 404: an id lost with the process broke its agent for
//! good.
//!
//! ```text
//! initialize ─► SessionClaims {agent, id, protocol, capabilities, client, issued} ─► seal ─► Mcp-Session-Id
//! request    ─► Mcp-Session-Id ─► known here? ─► else open (tag, agent, age) ─► not ended? ─► the session
//! DELETE     ─► ended: its id kept in --state-dir/ended-sessions, so it stays ended after a restart
//! ```
//!
//! What a process holds beyond the id is only a cache and what cannot outlive it anyway: the
//! log level `logging/setLevel` chose (back to the default after a restart), a held legacy
//! approval and an open GET stream (both end with their connection; the client's next request
//! is served). The downstream handler ([`super::downstream`]) is the only caller. Pure pieces
//! (the claims of an initialize, checking opened claims) are free functions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::approval::{Purpose, StateError, StateKey, now_ms, random_hex};

const SESSION_VERSION: u8 = 1;
/// Most sessions whose opened claims (and log level) are kept in memory; beyond it the least
/// recently used is dropped from the cache, which costs only opening its id again.
const MAX_CACHED: usize = 4096;
/// Most ended sessions remembered; beyond it the oldest issued is forgotten (its id would open
/// again, which ends nothing the agent did not already end).
const MAX_ENDED: usize = 4096;
/// The client's capabilities are kept whole up to this many bytes of JSON; beyond, only what the
/// sidecar acts on (elicitation), so the id stays a header every client carries.
const MAX_CAPABILITIES_BYTES: usize = 1024;
/// Most characters of the client's name and version kept.
const MAX_CLIENT_CHARS: usize = 64;
/// The file under `--state-dir` listing ended sessions, one `<id> <issued ms>` a line.
pub const ENDED_FILE: &str = "ended-sessions";

/// What a session id vouches for: everything the session negotiated at `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    pub v: u8,
    /// The AgentSpec the sidecar serves: an id issued for another agent is not this one's.
    pub agent: String,
    /// Random: two sessions of the same client differ, and ending one names it.
    pub id: String,
    /// The negotiated protocol revision.
    pub protocol: String,
    /// The client's declared capabilities (elicitation decides whether it can be asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    /// The client's `clientInfo` name and version, cut short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Value>,
    /// Unix milliseconds of the `initialize`.
    pub issued: u64,
}

/// Why a session id is not a session here. Each is answered with 404 and -32001 (the spec's
/// "initialize a new session"), and logged under its own word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("the session id is not one this sidecar issues")]
    Malformed,
    #[error("the session id was altered or was issued with another key")]
    Forged,
    #[error("the session was issued to another agent")]
    OtherAgent,
    #[error("the session is older than --session-max-age")]
    Expired,
    #[error("the session was ended (DELETE)")]
    Ended,
}

impl SessionError {
    pub fn reason(&self) -> &'static str {
        match self {
            SessionError::Malformed => "Malformed",
            SessionError::Forged => "Forged",
            SessionError::OtherAgent => "OtherAgent",
            SessionError::Expired => "Expired",
            SessionError::Ended => "Ended",
        }
    }
}

/// The claims of a session `agent` opens now with an `initialize` carrying `params`, having
/// negotiated `protocol`.
pub fn claims_at_initialize(
    agent: &str,
    protocol: &str,
    params: &Map<String, Value>,
    now_ms: u64,
) -> SessionClaims {
    let capabilities = params.get("capabilities").map(|c| {
        if serde_json::to_vec(c).map_or(usize::MAX, |b| b.len()) <= MAX_CAPABILITIES_BYTES {
            c.clone()
        } else {
            let mut kept = Map::new();
            if let Some(e) = c.get("elicitation") {
                kept.insert("elicitation".into(), e.clone());
            }
            Value::Object(kept)
        }
    });
    let client = params.get("clientInfo").map(|info| {
        let mut kept = Map::new();
        for field in ["name", "version"] {
            if let Some(v) = info.get(field).and_then(Value::as_str) {
                kept.insert(
                    field.into(),
                    Value::String(v.chars().take(MAX_CLIENT_CHARS).collect()),
                );
            }
        }
        Value::Object(kept)
    });
    SessionClaims {
        v: SESSION_VERSION,
        agent: agent.to_string(),
        id: random_hex(16),
        protocol: protocol.to_string(),
        capabilities,
        client,
        issued: now_ms,
    }
}

/// Pure: whether opened `claims` are a session of `agent` still in time.
pub fn check(
    claims: &SessionClaims,
    agent: &str,
    max_age: Option<Duration>,
    now_ms: u64,
) -> Result<(), SessionError> {
    if claims.v != SESSION_VERSION {
        return Err(SessionError::Malformed);
    }
    if claims.agent != agent {
        return Err(SessionError::OtherAgent);
    }
    if let Some(max) = max_age
        && now_ms.saturating_sub(claims.issued) >= max.as_millis() as u64
    {
        return Err(SessionError::Expired);
    }
    Ok(())
}

/// A session as a request finds it.
#[derive(Debug, Clone)]
pub struct Session {
    /// Shared: every request of a session opens it (some twice), and a copy of the claims
    /// (the client's capabilities among them) each time was a measurable part of a call.
    pub claims: Arc<SessionClaims>,
    /// The level `logging/setLevel` set in this process; None: the default.
    pub log_level: Option<String>,
}

struct Cached {
    session: Session,
    used: u64,
}

/// The sidecar's legacy sessions: issuing, opening, ending.
pub struct Sessions {
    key: StateKey,
    agent: String,
    max_age: Option<Duration>,
    cache: Mutex<Cache>,
    ended: Mutex<Ended>,
}

#[derive(Default)]
struct Cache {
    /// (foldhash: looked up on every legacy request; the tokens are ours, signed.)
    by_token: foldhash::HashMap<String, Cached>,
    tick: u64,
}

impl Sessions {
    /// `state_dir`: where ended sessions are kept across restarts (None: in memory only).
    pub fn new(
        key: StateKey,
        agent: &str,
        max_age: Option<Duration>,
        state_dir: Option<&Path>,
    ) -> Self {
        Sessions {
            key,
            agent: agent.to_string(),
            max_age,
            cache: Mutex::new(Cache::default()),
            ended: Mutex::new(Ended::load(state_dir.map(|d| d.join(ENDED_FILE)))),
        }
    }

    /// A new session for an `initialize` with `params` that negotiated `protocol`: its id.
    pub fn issue(&self, protocol: &str, params: &Map<String, Value>) -> String {
        let claims = claims_at_initialize(&self.agent, protocol, params, now_ms());
        let token = self.key.seal_as(Purpose::Session, &claims);
        self.remember(
            &token,
            Session {
                claims: Arc::new(claims),
                log_level: None,
            },
        );
        token
    }

    /// The session `token` names, whether this process issued it or one before it did.
    pub fn open(&self, token: &str) -> Result<Session, SessionError> {
        {
            let mut cache = self.cache.lock().expect("sessions lock");
            cache.tick += 1;
            let tick = cache.tick;
            if let Some(cached) = cache.by_token.get_mut(token) {
                cached.used = tick;
                return Ok(cached.session.clone());
            }
        }
        let claims: SessionClaims =
            self.key
                .open_as(Purpose::Session, token)
                .map_err(|e| match e {
                    StateError::Forged => SessionError::Forged,
                    _ => SessionError::Malformed,
                })?;
        check(&claims, &self.agent, self.max_age, now_ms())?;
        if self.ended.lock().expect("ended lock").contains(&claims.id) {
            return Err(SessionError::Ended);
        }
        let session = Session {
            claims: Arc::new(claims),
            log_level: None,
        };
        self.remember(token, session.clone());
        Ok(session)
    }

    /// Sets the session's log level (in this process only).
    pub fn set_log_level(&self, token: &str, level: &str) {
        if let Some(cached) = self
            .cache
            .lock()
            .expect("sessions lock")
            .by_token
            .get_mut(token)
        {
            cached.session.log_level = Some(level.to_string());
        }
    }

    /// Ends the session `token` names (DELETE): it stays ended across restarts when a state
    /// directory keeps the record.
    pub fn end(&self, token: &str) -> Result<(), SessionError> {
        let session = self.open(token)?;
        self.cache
            .lock()
            .expect("sessions lock")
            .by_token
            .remove(token);
        let mut ended = self.ended.lock().expect("ended lock");
        ended.insert(&session.claims.id, session.claims.issued, self.max_age);
        if let Err(e) = ended.save() {
            tracing::warn!(
                reason = "SessionRecordUnwritable",
                error = %e,
                "the ended session is refused until the sidecar restarts; after a restart it would open again"
            );
        }
        Ok(())
    }

    /// Sessions this process has served and not seen ended.
    pub fn cached(&self) -> usize {
        self.cache.lock().expect("sessions lock").by_token.len()
    }

    fn remember(&self, token: &str, session: Session) {
        let mut cache = self.cache.lock().expect("sessions lock");
        cache.tick += 1;
        let tick = cache.tick;
        if cache.by_token.len() >= MAX_CACHED
            && !cache.by_token.contains_key(token)
            && let Some(oldest) = cache
                .by_token
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(t, _)| t.clone())
        {
            cache.by_token.remove(&oldest);
        }
        cache.by_token.insert(
            token.to_string(),
            Cached {
                session,
                used: tick,
            },
        );
    }
}

/// Ended sessions: id → issued (ms), bounded, optionally kept in a file.
struct Ended {
    ids: HashMap<String, u64>,
    file: Option<PathBuf>,
}

impl Ended {
    fn load(file: Option<PathBuf>) -> Self {
        let mut ids = HashMap::new();
        if let Some(path) = &file
            && let Ok(text) = std::fs::read_to_string(path)
        {
            for line in text.lines() {
                if let Some((id, issued)) = line.split_once(' ')
                    && let Ok(issued) = issued.trim().parse::<u64>()
                    && !id.is_empty()
                    && ids.len() < MAX_ENDED
                {
                    ids.insert(id.to_string(), issued);
                }
            }
        }
        Ended { ids, file }
    }

    fn contains(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    fn insert(&mut self, id: &str, issued: u64, max_age: Option<Duration>) {
        if let Some(max) = max_age {
            // An expired session is refused anyway: no need to remember that it ended.
            let now = now_ms();
            self.ids
                .retain(|_, i| now.saturating_sub(*i) < max.as_millis() as u64);
        }
        while self.ids.len() >= MAX_ENDED {
            let Some(oldest) = self
                .ids
                .iter()
                .min_by_key(|(_, i)| **i)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.to_string(), issued);
    }

    /// Writes the record whole (a temporary file renamed over it: a crash leaves the old one).
    fn save(&self) -> std::io::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let mut text = String::with_capacity(self.ids.len() * 48);
        for (id, issued) in &self.ids {
            text.push_str(id);
            text.push(' ');
            text.push_str(&issued.to_string());
            text.push('\n');
        }
        let temp = path.with_extension("tmp");
        std::fs::write(&temp, text)?;
        std::fs::rename(&temp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    fn initialize_params() -> Map<String, Value> {
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"elicitation": {}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "agent-ts", "version": "1.2.3", "title": "ignored"},
        })
        .as_object()
        .cloned()
        .unwrap()
    }

    #[test]
    fn an_id_carries_what_the_session_negotiated_and_opens_in_a_new_process() {
        let dir = tempfile::tempdir().unwrap();
        let key = StateKey::kept_in(dir.path()).unwrap();
        let before = Sessions::new(key, "assistant", None, Some(dir.path()));
        let token = before.issue("2025-06-18", &initialize_params());
        assert!(token.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{token}");

        // A restarted sidecar: the key read back from the state directory, nothing in memory.
        let after = Sessions::new(
            StateKey::kept_in(dir.path()).unwrap(),
            "assistant",
            None,
            Some(dir.path()),
        );
        let session = after.open(&token).unwrap();
        assert_eq!(session.claims.protocol, "2025-06-18");
        assert_eq!(session.claims.agent, "assistant");
        assert!(super::super::approval::can_answer_forms(
            session.claims.capabilities.as_ref()
        ));
        assert_eq!(
            session.claims.client,
            Some(json!({"name": "agent-ts", "version": "1.2.3"}))
        );
        assert_eq!(session.log_level, None);
    }

    #[test]
    fn a_tampered_id_or_another_key_is_not_a_session() {
        let key = StateKey::generate();
        let sessions = Sessions::new(key.clone(), "assistant", None, None);
        let token = sessions.issue("2025-11-25", &initialize_params());
        let other = Sessions::new(StateKey::generate(), "assistant", None, None);
        assert_eq!(other.open(&token).unwrap_err(), SessionError::Forged);

        // Claims edited (another protocol), tag kept.
        let (body, tag) = token.split_once('.').unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut claims: SessionClaims = serde_json::from_slice(&b64.decode(body).unwrap()).unwrap();
        claims.protocol = "2025-03-26".into();
        let edited = format!("{}.{tag}", b64.encode(serde_json::to_vec(&claims).unwrap()));
        assert_eq!(sessions.open(&edited).unwrap_err(), SessionError::Forged);

        for bad in ["", "deadbeef", "a.b", &"x".repeat(5000)] {
            assert!(sessions.open(bad).is_err(), "{bad}");
        }
        // Every changed byte is refused.
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            if changed != token {
                assert!(sessions.open(&changed).is_err(), "byte {i}");
            }
        }
    }

    #[test]
    fn an_approval_state_is_not_a_session_id() {
        let key = StateKey::generate();
        let sessions = Sessions::new(key.clone(), "assistant", None, None);
        let token = sessions.issue("2025-11-25", &initialize_params());
        assert_eq!(key.open(&token).unwrap_err(), StateError::Forged);
        // …nor the other way round, even for a JSON shape that would parse.
        let sealed_as_state = key.seal_as(
            Purpose::ApprovalState,
            &claims_at_initialize("assistant", "2025-11-25", &Map::new(), 0),
        );
        assert_eq!(
            sessions.open(&sealed_as_state).unwrap_err(),
            SessionError::Forged
        );
    }

    #[test]
    fn another_agents_session_is_refused() {
        let key = StateKey::generate();
        let token = Sessions::new(key.clone(), "assistant", None, None)
            .issue("2025-11-25", &initialize_params());
        let intruder = Sessions::new(key, "intruder", None, None);
        assert_eq!(intruder.open(&token).unwrap_err(), SessionError::OtherAgent);
    }

    #[test]
    fn sessions_expire_only_with_a_max_age() {
        let claims = claims_at_initialize("a", "2025-11-25", &Map::new(), 1_000);
        assert_eq!(check(&claims, "a", None, u64::MAX), Ok(()));
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(check(&claims, "a", hour, 1_000 + 3_599_999), Ok(()));
        assert_eq!(
            check(&claims, "a", hour, 1_000 + 3_600_000),
            Err(SessionError::Expired)
        );
        // A clock set back does not end a session.
        assert_eq!(check(&claims, "a", hour, 0), Ok(()));
    }

    #[test]
    fn an_ended_session_stays_ended_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let key = StateKey::kept_in(dir.path()).unwrap();
        let before = Sessions::new(key.clone(), "assistant", None, Some(dir.path()));
        let ended = before.issue("2025-11-25", &initialize_params());
        let kept = before.issue("2025-11-25", &initialize_params());
        assert_ne!(ended, kept);
        before.end(&ended).unwrap();
        assert_eq!(before.open(&ended).unwrap_err(), SessionError::Ended);
        assert_eq!(before.end(&ended).unwrap_err(), SessionError::Ended);

        let after = Sessions::new(
            StateKey::kept_in(dir.path()).unwrap(),
            "assistant",
            None,
            Some(dir.path()),
        );
        assert_eq!(after.open(&ended).unwrap_err(), SessionError::Ended);
        assert!(after.open(&kept).is_ok());

        // Without a state directory the record lives as long as the process.
        let memory = Sessions::new(key.clone(), "assistant", None, None);
        let token = memory.issue("2025-11-25", &Map::new());
        memory.end(&token).unwrap();
        assert!(
            Sessions::new(key, "assistant", None, None)
                .open(&token)
                .is_ok()
        );
    }

    #[test]
    fn the_kept_key_is_made_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let a = StateKey::kept_in(dir.path()).unwrap();
        let b = StateKey::kept_in(dir.path()).unwrap();
        let token = Sessions::new(a, "x", None, None).issue("2025-11-25", &Map::new());
        assert!(Sessions::new(b, "x", None, None).open(&token).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join(super::super::approval::KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
    }

    #[test]
    fn a_mounted_key_rotated_ends_the_sessions_of_the_old_one() {
        // One key at a time: a rotated mounted key is a restart with new sessions (404, and the
        // client initializes again); the pod's kept key never rotates.
        let old = StateKey::from_bytes(&[1u8; 32]).unwrap();
        let new = StateKey::from_bytes(&[2u8; 32]).unwrap();
        let token = Sessions::new(old.clone(), "a", None, None).issue("2025-11-25", &Map::new());
        assert!(Sessions::new(old, "a", None, None).open(&token).is_ok());
        assert_eq!(
            Sessions::new(new, "a", None, None)
                .open(&token)
                .unwrap_err(),
            SessionError::Forged
        );
    }

    #[test]
    fn large_capabilities_keep_what_the_sidecar_acts_on() {
        let mut params = Map::new();
        params.insert(
            "capabilities".into(),
            json!({"elicitation": {"form": {}}, "experimental": {"blob": "x".repeat(5000)}}),
        );
        params.insert(
            "clientInfo".into(),
            json!({"name": "n".repeat(500), "version": "1"}),
        );
        let claims = claims_at_initialize("a", "2025-11-25", &params, 0);
        assert_eq!(
            claims.capabilities,
            Some(json!({"elicitation": {"form": {}}}))
        );
        assert_eq!(
            claims.client.unwrap()["name"].as_str().unwrap().len(),
            MAX_CLIENT_CHARS
        );
        let token = StateKey::generate().seal_as(
            Purpose::Session,
            &claims_at_initialize("a", "2025-11-25", &params, 0),
        );
        assert!(token.len() < 1024, "{}", token.len());
    }
}
