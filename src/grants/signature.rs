//! Signed grants: what lets a sidecar tell the operator's grants document from one edited by
//! anyone else. Pure: no Kubernetes, no I/O (the random source for a new key aside).
//!
//! ```text
//!  controller                                           sidecar (injected with the public keys,
//!    Keyring { current, next, previous }                 its namespace, AgentSpec and uid)
//!      │ sign(grants.json bytes, Binding, sequence)          │
//!      ▼                                                     ▼
//!  ConfigMap <agentspec>-mcp-grants                      verify(grants.json, grants.sig,
//!    grants.json   the document, bytes unchanged                keys, Binding, last sequence)
//!    grants.sig    GrantsSignature (JSON)                  ├─ Ok(Verified): obey it
//!                                                          └─ Err(Refused): keep the last good one
//! ```
//!
//! - The signed payload binds the namespace, the AgentSpec's name and uid, a sequence and the
//!   SHA-256 of the exact `grants.json` bytes: a document copied from another AgentSpec, or
//!   from this AgentSpec's previous life (same name, another uid), or an older one of its own
//!   put back, verifies but is refused for what it is.
//! - The sequence grows with every document the operator publishes for an AgentSpec
//!   ([`next_sequence`]: milliseconds since the epoch, or one more than the last); a sidecar
//!   keeps the highest it accepted and refuses anything lower.
//! - The [`Keyring`] holds the signing key in use (`current`), the one that replaces it at the
//!   next rotation (`next`) and the public half of the one rotated out (`previous`). Pods are
//!   injected with the public keys of `current` and `next`, so a pod created before one
//!   rotation verifies the documents signed after it.
//! - A revoked document is a grants document granting nothing with `revoked: true`
//!   ([`super::GrantsDocument::revoked`]), signed like any other.
//!
//! Key ids are the first 16 hex digits of the SHA-256 of the 32-byte public key.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, Verifier as _};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The ConfigMap key next to `grants.json` holding its [`GrantsSignature`].
pub const SIGNATURE_KEY: &str = "grants.sig";
/// The `version` of signatures this code writes and reads.
pub const SIGNATURE_VERSION: u32 = 1;
/// Separates this payload from anything else the same key could ever sign.
const PAYLOAD_CONTEXT: &[u8] = b"mcp-operator.dev/grants-signature/v1";

/// Secret data keys of the keyring.
pub const CURRENT_KEY: &str = "current";
pub const NEXT_KEY: &str = "next";
pub const PREVIOUS_KEY: &str = "previous.pub";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Whose grants a document is: the AgentSpec by namespace, name and uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub namespace: String,
    pub agent_spec: String,
    pub uid: String,
}

/// The `grants.sig` document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantsSignature {
    pub version: u32,
    /// Which key signed: the first 16 hex digits of the SHA-256 of its public key.
    pub key_id: String,
    pub namespace: String,
    pub agent_spec: String,
    pub uid: String,
    pub sequence: u64,
    /// Hex SHA-256 of the `grants.json` bytes.
    pub sha256: String,
    /// Base64 Ed25519 signature over the payload of the fields above.
    pub signature: String,
}

impl GrantsSignature {
    /// The JSON the ConfigMap holds under [`SIGNATURE_KEY`].
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a signature serialises")
    }

    fn binding(&self) -> Binding {
        Binding {
            namespace: self.namespace.clone(),
            agent_spec: self.agent_spec.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// The bytes the signature covers: the context, then each field length-prefixed, so no two
/// different field sets make the same bytes.
fn payload(version: u32, binding: &Binding, sequence: u64, sha256: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut field = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    field(PAYLOAD_CONTEXT);
    field(&version.to_be_bytes());
    field(binding.namespace.as_bytes());
    field(binding.agent_spec.as_bytes());
    field(binding.uid.as_bytes());
    field(&sequence.to_be_bytes());
    field(sha256.as_bytes());
    out
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The sequence of the next document: the time in milliseconds, but always above the last one
/// (a clock that went back, two documents within one millisecond).
pub fn next_sequence(now_ms: u64, last: Option<u64>) -> u64 {
    match last {
        Some(last) => now_ms.max(last.saturating_add(1)),
        None => now_ms,
    }
}

/// A public key and its id.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub id: String,
    key: ed25519_dalek::VerifyingKey,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.id)
    }
}

impl PublicKey {
    fn of(key: ed25519_dalek::VerifyingKey) -> Self {
        let id = hex::encode(&Sha256::digest(key.as_bytes())[..8]);
        PublicKey { id, key }
    }

    /// From the 32 bytes of an Ed25519 public key.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyringError> {
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| KeyringError::new(format!("{} bytes, not 32", bytes.len())))?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map(PublicKey::of)
            .map_err(|_| KeyringError::new("not an Ed25519 public key".into()))
    }

    pub fn to_bytes(&self) -> [u8; 32] {
        self.key.to_bytes()
    }
}

/// A private signing key. Its Debug shows the key id only: the secret half is never printed.
#[derive(Clone)]
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    public: PublicKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public.id)
    }
}

impl SigningKey {
    /// A fresh key from the OS random source.
    pub fn generate() -> Self {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the OS random source works");
        Self::from_seed(seed)
    }

    fn from_seed(seed: [u8; 32]) -> Self {
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let public = PublicKey::of(key.verifying_key());
        SigningKey { key, public }
    }

    /// From a Secret value: the 32-byte seed, raw or in base64 text.
    pub fn from_secret_value(bytes: &[u8]) -> Result<Self, KeyringError> {
        if let Ok(seed) = <[u8; 32]>::try_from(bytes) {
            return Ok(Self::from_seed(seed));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| KeyringError::new(format!("{} bytes, not a 32-byte seed", bytes.len())))?;
        let decoded = B64
            .decode(text.trim())
            .map_err(|_| KeyringError::new(format!("{} bytes, not a 32-byte seed", bytes.len())))?;
        <[u8; 32]>::try_from(decoded.as_slice())
            .map(Self::from_seed)
            .map_err(|_| {
                KeyringError::new(format!(
                    "base64 of {} bytes, not a 32-byte seed",
                    decoded.len()
                ))
            })
    }

    /// The 32-byte seed, for the keyring Secret only.
    pub fn secret_value(&self) -> Vec<u8> {
        self.key.to_bytes().to_vec()
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    pub fn id(&self) -> &str {
        &self.public.id
    }

    /// Signs `grants_json` (the exact ConfigMap bytes) for `binding` under `sequence`.
    pub fn sign(&self, grants_json: &[u8], binding: &Binding, sequence: u64) -> GrantsSignature {
        let sha256 = sha256_hex(grants_json);
        let signature = self
            .key
            .sign(&payload(SIGNATURE_VERSION, binding, sequence, &sha256));
        GrantsSignature {
            version: SIGNATURE_VERSION,
            key_id: self.public.id.clone(),
            namespace: binding.namespace.clone(),
            agent_spec: binding.agent_spec.clone(),
            uid: binding.uid.clone(),
            sequence,
            sha256,
            signature: B64.encode(signature.to_bytes()),
        }
    }
}

/// Why a keyring or a list of public keys cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyringError(String);

impl KeyringError {
    fn new(message: String) -> Self {
        KeyringError(message)
    }
}

/// The operator's signing keys (the Secret `<release>-grants-signing`).
#[derive(Clone, Debug)]
pub struct Keyring {
    /// Signs every document now.
    pub current: SigningKey,
    /// Becomes `current` at the next rotation; already given to new pods.
    pub next: SigningKey,
    /// The public half of the key rotated out last: a document it signed is stale, not forged.
    pub previous: Option<PublicKey>,
}

impl Keyring {
    /// Two fresh keys.
    pub fn generate() -> Self {
        Keyring {
            current: SigningKey::generate(),
            next: SigningKey::generate(),
            previous: None,
        }
    }

    /// `next` becomes `current`, a fresh `next`; the old `current` is kept as `previous`
    /// (public half only).
    pub fn rotated(&self) -> Self {
        Keyring {
            current: self.next.clone(),
            next: SigningKey::generate(),
            previous: Some(self.current.public.clone()),
        }
    }

    /// From the Secret's data.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, KeyringError> {
        let key = |name: &str| -> Result<SigningKey, KeyringError> {
            let value = data
                .get(name)
                .ok_or_else(|| KeyringError::new(format!("the key {name:?} is missing")))?;
            SigningKey::from_secret_value(value)
                .map_err(|e| KeyringError::new(format!("the key {name:?} is {e}")))
        };
        let current = key(CURRENT_KEY)?;
        let next = key(NEXT_KEY)?;
        if current.id() == next.id() {
            return Err(KeyringError::new(
                "the keys \"current\" and \"next\" are the same key".into(),
            ));
        }
        let previous = match data.get(PREVIOUS_KEY) {
            None => None,
            Some(bytes) => Some(
                PublicKey::from_bytes(bytes)
                    .map_err(|e| KeyringError::new(format!("the key {PREVIOUS_KEY:?} is {e}")))?,
            ),
        };
        Ok(Keyring {
            current,
            next,
            previous,
        })
    }

    /// The Secret's data.
    pub fn to_secret_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut data = BTreeMap::from([
            (CURRENT_KEY.to_string(), self.current.secret_value()),
            (NEXT_KEY.to_string(), self.next.secret_value()),
        ]);
        if let Some(previous) = &self.previous {
            data.insert(PREVIOUS_KEY.to_string(), previous.to_bytes().to_vec());
        }
        data
    }

    /// What a new pod's sidecar is given: `current` and `next`.
    pub fn verifying_keys(&self) -> VerifyingKeys {
        VerifyingKeys(vec![self.current.public.clone(), self.next.public.clone()])
    }

    /// Every key whose signature the operator recognises as its own (`previous` too).
    pub fn known_keys(&self) -> VerifyingKeys {
        let mut keys = self.verifying_keys();
        keys.0.extend(self.previous.clone());
        keys
    }
}

/// The public keys a sidecar trusts, as the flag `--grants-verify-keys=<id>:<b64>,<id>:<b64>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyingKeys(Vec<PublicKey>);

impl VerifyingKeys {
    /// Parses `<id>:<base64 public key>` items separated by commas; an id that is not the
    /// key's own is refused (a typo would otherwise trust nothing, silently).
    pub fn parse(text: &str) -> Result<Self, KeyringError> {
        let mut keys = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (id, b64) = item.split_once(':').ok_or_else(|| {
                KeyringError::new(format!("{item:?} is not <key id>:<base64 public key>"))
            })?;
            let bytes = B64
                .decode(b64)
                .map_err(|_| KeyringError::new(format!("the key {id:?} is not base64")))?;
            let key = PublicKey::from_bytes(&bytes)
                .map_err(|e| KeyringError::new(format!("the key {id:?} is {e}")))?;
            if key.id != id {
                return Err(KeyringError::new(format!(
                    "the key given as {id:?} has the id {:?}",
                    key.id
                )));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(KeyringError::new("no key given".into()));
        }
        Ok(VerifyingKeys(keys))
    }

    /// The flag's value.
    pub fn to_arg(&self) -> String {
        self.0
            .iter()
            .map(|k| format!("{}:{}", k.id, B64.encode(k.to_bytes())))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn ids(&self) -> Vec<&str> {
        self.0.iter().map(|k| k.id.as_str()).collect()
    }

    fn get(&self, id: &str) -> Option<&PublicKey> {
        self.0.iter().find(|k| k.id == id)
    }
}

/// A document that passed [`verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub key_id: String,
    pub sequence: u64,
}

/// Why a grants document is not obeyed. [`Refused::reason`] is the word of the metric label
/// and the log line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("it is not signed (no {SIGNATURE_KEY})")]
    Unsigned,
    #[error("its signature ({SIGNATURE_KEY}) is not a grants signature: {0}")]
    Malformed(String),
    #[error("its signature has version {0}; this reader knows version {SIGNATURE_VERSION}")]
    UnsupportedVersion(u32),
    #[error("it is signed by the key {key_id:?}, which is not one of the trusted keys ({trusted})")]
    UnknownKey { key_id: String, trusted: String },
    #[error(
        "its signature does not verify with the key {key_id:?} (the signature's fields or signature were changed)"
    )]
    BadSignature { key_id: String },
    #[error(
        "grants.json was changed after it was signed (its SHA-256 is {found}, the signature is for {signed})"
    )]
    ContentChanged { signed: String, found: String },
    #[error("it is signed for namespace {signed:?}, not {expected:?}")]
    OtherNamespace { signed: String, expected: String },
    #[error("it is signed for the AgentSpec {signed:?}, not {expected:?}")]
    OtherAgentSpec { signed: String, expected: String },
    #[error(
        "it is signed for another AgentSpec of the same name (uid {signed}, not {expected}): one deleted and created again"
    )]
    OtherUid { signed: String, expected: String },
    #[error(
        "it is an older document (sequence {sequence}) than one already accepted (sequence {last}): a replay"
    )]
    OlderSequence { sequence: u64, last: u64 },
}

impl Refused {
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Unsigned => "unsigned",
            Refused::Malformed(_) => "malformed_signature",
            Refused::UnsupportedVersion(_) => "unsupported_signature",
            Refused::UnknownKey { .. } => "unknown_key",
            Refused::BadSignature { .. } => "bad_signature",
            Refused::ContentChanged { .. } => "content_changed",
            Refused::OtherNamespace { .. } => "other_namespace",
            Refused::OtherAgentSpec { .. } => "other_agentspec",
            Refused::OtherUid { .. } => "other_uid",
            Refused::OlderSequence { .. } => "older_sequence",
        }
    }
}

/// Parses a `grants.sig`.
pub fn parse_signature(signature: &[u8]) -> Result<GrantsSignature, Refused> {
    serde_json::from_slice(signature).map_err(|e| Refused::Malformed(e.to_string()))
}

/// Whether `grants_json` with `signature` (None: the file or key is absent) is a document the
/// operator signed for `expected`, by one of `keys`, no older than `last_sequence`.
pub fn verify(
    grants_json: &[u8],
    signature: Option<&[u8]>,
    keys: &VerifyingKeys,
    expected: &Binding,
    last_sequence: Option<u64>,
) -> Result<Verified, Refused> {
    let sig = parse_signature(signature.ok_or(Refused::Unsigned)?)?;
    if sig.version != SIGNATURE_VERSION {
        return Err(Refused::UnsupportedVersion(sig.version));
    }
    let key = keys.get(&sig.key_id).ok_or_else(|| Refused::UnknownKey {
        key_id: sig.key_id.chars().take(64).collect(),
        trusted: keys.ids().join(", "),
    })?;
    let bytes: [u8; 64] = B64
        .decode(&sig.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Refused::Malformed("the signature is not 64 bytes of base64".into()))?;
    let signed = payload(sig.version, &sig.binding(), sig.sequence, &sig.sha256);
    key.key
        .verify(&signed, &ed25519_dalek::Signature::from_bytes(&bytes))
        .map_err(|_| Refused::BadSignature {
            key_id: sig.key_id.clone(),
        })?;
    let found = sha256_hex(grants_json);
    if found != sig.sha256 {
        return Err(Refused::ContentChanged {
            signed: sig.sha256,
            found,
        });
    }
    if sig.namespace != expected.namespace {
        return Err(Refused::OtherNamespace {
            signed: sig.namespace,
            expected: expected.namespace.clone(),
        });
    }
    if sig.agent_spec != expected.agent_spec {
        return Err(Refused::OtherAgentSpec {
            signed: sig.agent_spec,
            expected: expected.agent_spec.clone(),
        });
    }
    if sig.uid != expected.uid {
        return Err(Refused::OtherUid {
            signed: sig.uid,
            expected: expected.uid.clone(),
        });
    }
    if let Some(last) = last_sequence
        && sig.sequence < last
    {
        return Err(Refused::OlderSequence {
            sequence: sig.sequence,
            last,
        });
    }
    Ok(Verified {
        key_id: sig.key_id,
        sequence: sig.sequence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bot() -> Binding {
        Binding {
            namespace: "team-a".into(),
            agent_spec: "bot".into(),
            uid: "0b8e-uid".into(),
        }
    }

    const DOC: &[u8] = br#"{"schemaVersion":"mcp-operator.dev/grants/v1","servers":[]}"#;

    fn signed(keyring: &Keyring, sequence: u64) -> Vec<u8> {
        keyring
            .current
            .sign(DOC, &bot(), sequence)
            .to_json()
            .into_bytes()
    }

    #[test]
    fn a_signed_document_verifies_with_the_keys_a_pod_is_given() {
        let keyring = Keyring::generate();
        let keys = keyring.verifying_keys();
        let sig = signed(&keyring, 7);
        let verified = verify(DOC, Some(&sig), &keys, &bot(), None).unwrap();
        assert_eq!(verified.sequence, 7);
        assert_eq!(verified.key_id, keyring.current.id());
        // The same sequence again (a restarted sidecar reading the same document) is fine.
        assert!(verify(DOC, Some(&sig), &keys, &bot(), Some(7)).is_ok());
        let parsed = parse_signature(&sig).unwrap();
        assert_eq!(parsed.sha256, sha256_hex(DOC));
        assert_eq!(parsed.key_id.len(), 16);
    }

    #[test]
    fn each_way_a_document_is_not_the_operators_is_refused_with_its_reason() {
        let keyring = Keyring::generate();
        let keys = keyring.verifying_keys();
        let sig = signed(&keyring, 100);
        let refuse = |doc: &[u8], sig: Option<&[u8]>, binding: &Binding, last: Option<u64>| {
            verify(doc, sig, &keys, binding, last).unwrap_err().reason()
        };
        assert_eq!(refuse(DOC, None, &bot(), None), "unsigned");
        assert_eq!(refuse(DOC, Some(b"{"), &bot(), None), "malformed_signature");
        let edited = String::from_utf8(DOC.to_vec())
            .unwrap()
            .replace("[]", "[ ]");
        assert_eq!(
            refuse(edited.as_bytes(), Some(&sig), &bot(), None),
            "content_changed"
        );
        let other = |f: fn(&mut Binding)| {
            let mut b = bot();
            f(&mut b);
            b
        };
        assert_eq!(
            refuse(
                DOC,
                Some(&sig),
                &other(|b| b.namespace = "team-b".into()),
                None
            ),
            "other_namespace"
        );
        assert_eq!(
            refuse(
                DOC,
                Some(&sig),
                &other(|b| b.agent_spec = "bot2".into()),
                None
            ),
            "other_agentspec"
        );
        assert_eq!(
            refuse(DOC, Some(&sig), &other(|b| b.uid = "new-uid".into()), None),
            "other_uid"
        );
        assert_eq!(refuse(DOC, Some(&sig), &bot(), Some(101)), "older_sequence");
        // A key the sidecar was not given, even a well-formed one.
        let stranger = Keyring::generate();
        assert_eq!(
            refuse(DOC, Some(&signed(&stranger, 100)), &bot(), None),
            "unknown_key"
        );
        // The stranger's signature under a trusted key id.
        let mut forged = parse_signature(&signed(&stranger, 100)).unwrap();
        forged.key_id = keyring.current.id().to_string();
        assert_eq!(
            refuse(DOC, Some(forged.to_json().as_bytes()), &bot(), None),
            "bad_signature"
        );
        // Moving the signed fields: the signature no longer covers them.
        let mut moved = parse_signature(&sig).unwrap();
        moved.namespace = "team-b".into();
        let team_b = other(|b| b.namespace = "team-b".into());
        assert_eq!(
            refuse(DOC, Some(moved.to_json().as_bytes()), &team_b, None),
            "bad_signature"
        );
        let mut newer = parse_signature(&sig).unwrap();
        newer.sequence = 1_000;
        assert_eq!(
            refuse(DOC, Some(newer.to_json().as_bytes()), &bot(), Some(500)),
            "bad_signature"
        );
        let mut version = parse_signature(&sig).unwrap();
        version.version = 2;
        assert_eq!(
            refuse(DOC, Some(version.to_json().as_bytes()), &bot(), None),
            "unsupported_signature"
        );
    }

    #[test]
    fn a_rotation_keeps_pods_injected_before_it_verifying() {
        let before = Keyring::generate();
        let pod_keys = before.verifying_keys();
        let after = before.rotated();
        assert_eq!(after.current.id(), before.next.id());
        assert_ne!(after.next.id(), before.next.id());
        assert_eq!(
            after.previous.as_ref().map(|p| p.id.as_str()),
            Some(before.current.id())
        );
        let sig = signed(&after, 5);
        assert!(verify(DOC, Some(&sig), &pod_keys, &bot(), None).is_ok());
        // Two rotations later the pod's keys are both gone.
        let twice = after.rotated();
        let sig = signed(&twice, 6);
        assert_eq!(
            verify(DOC, Some(&sig), &pod_keys, &bot(), None)
                .unwrap_err()
                .reason(),
            "unknown_key"
        );
        // The operator still recognises what the previous key signed.
        assert!(after.known_keys().ids().contains(&before.current.id()));
        assert!(!after.verifying_keys().ids().contains(&before.current.id()));
    }

    #[test]
    fn the_keyring_round_trips_through_secret_data_and_never_prints_a_secret() {
        let keyring = Keyring::generate().rotated();
        let data = keyring.to_secret_data();
        assert_eq!(data.len(), 3);
        let back = Keyring::from_secret_data(&data).unwrap();
        assert_eq!(back.current.id(), keyring.current.id());
        assert_eq!(back.next.id(), keyring.next.id());
        assert_eq!(back.previous, keyring.previous);

        let shown = format!("{keyring:?} {:?}", keyring.verifying_keys());
        for secret in [&data[CURRENT_KEY], &data[NEXT_KEY]] {
            assert!(!shown.contains(&B64.encode(secret)), "{shown}");
            assert!(!shown.contains(&hex::encode(secret)), "{shown}");
            assert!(
                !keyring
                    .verifying_keys()
                    .to_arg()
                    .contains(&B64.encode(secret))
            );
        }
        assert!(shown.contains(keyring.current.id()));

        // A seed given by hand in base64 text works too.
        let mut by_hand = data.clone();
        by_hand.insert(
            CURRENT_KEY.into(),
            format!("{}\n", B64.encode(&data[CURRENT_KEY])).into_bytes(),
        );
        by_hand.remove(PREVIOUS_KEY);
        let parsed = Keyring::from_secret_data(&by_hand).unwrap();
        assert_eq!(parsed.current.id(), keyring.current.id());
        assert_eq!(parsed.previous, None);

        let mut broken = data.clone();
        broken.remove(NEXT_KEY);
        assert!(
            Keyring::from_secret_data(&broken)
                .unwrap_err()
                .to_string()
                .contains("\"next\" is missing")
        );
        broken.insert(NEXT_KEY.into(), b"short".to_vec());
        assert!(
            Keyring::from_secret_data(&broken)
                .unwrap_err()
                .to_string()
                .contains("not a 32-byte seed")
        );
        broken.insert(NEXT_KEY.into(), data[CURRENT_KEY].clone());
        assert!(
            Keyring::from_secret_data(&broken)
                .unwrap_err()
                .to_string()
                .contains("same key")
        );
    }

    #[test]
    fn verifying_keys_parse_as_the_webhook_writes_them() {
        let keyring = Keyring::generate();
        let arg = keyring.verifying_keys().to_arg();
        assert_eq!(arg.split(',').count(), 2);
        let parsed = VerifyingKeys::parse(&arg).unwrap();
        assert_eq!(parsed, keyring.verifying_keys());
        assert!(VerifyingKeys::parse("").is_err());
        assert!(VerifyingKeys::parse("nocolon").is_err());
        let (_, b64) = arg.split(',').next().unwrap().split_once(':').unwrap();
        let wrong_id = format!("0000000000000000:{b64}");
        assert!(
            VerifyingKeys::parse(&wrong_id)
                .unwrap_err()
                .to_string()
                .contains("has the id")
        );
    }

    #[test]
    fn the_sequence_grows_even_when_the_clock_goes_back() {
        assert_eq!(next_sequence(1_000, None), 1_000);
        assert_eq!(next_sequence(1_000, Some(400)), 1_000);
        assert_eq!(next_sequence(1_000, Some(1_000)), 1_001);
        assert_eq!(next_sequence(5, Some(2_000)), 2_001);
        assert_eq!(next_sequence(5, Some(u64::MAX)), u64::MAX);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any changed byte of grants.json is refused as changed content.
        #[test]
        fn any_changed_byte_of_the_document_is_refused(at in 0usize..DOC.len(), xor in 1u8..=255) {
            let keyring = Keyring::generate();
            let sig = signed(&keyring, 1);
            let mut doc = DOC.to_vec();
            doc[at] ^= xor;
            let refused = verify(&doc, Some(&sig), &keyring.verifying_keys(), &bot(), None).unwrap_err();
            prop_assert_eq!(refused.reason(), "content_changed");
        }

        /// Any changed byte of grants.sig is refused (whichever reason it makes).
        #[test]
        fn any_changed_byte_of_the_signature_is_refused(seed in any::<u64>(), xor in 1u8..=255) {
            let keyring = Keyring::generate();
            let mut sig = signed(&keyring, 1);
            let at = (seed as usize) % sig.len();
            sig[at] ^= xor;
            prop_assert!(verify(DOC, Some(&sig), &keyring.verifying_keys(), &bot(), None).is_err());
        }

        /// Any binding but the signed one is refused; the signed one with any sequence at most
        /// the document's is accepted.
        #[test]
        fn only_the_signed_binding_and_newer_sequences_pass(
            namespace in "[a-z]{1,8}", agent in "[a-z]{1,8}", uid in "[a-f0-9]{1,8}",
            sequence in 1u64..1_000_000, last in 0u64..2_000_000,
        ) {
            let keyring = Keyring::generate();
            let sig = keyring.current.sign(DOC, &bot(), sequence).to_json();
            let binding = Binding { namespace, agent_spec: agent, uid };
            let result = verify(DOC, Some(sig.as_bytes()), &keyring.verifying_keys(), &binding, Some(last));
            prop_assert_eq!(result.is_ok(), binding == bot() && sequence >= last);
        }
    }
}
