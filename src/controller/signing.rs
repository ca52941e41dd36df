//! The grants signing keyring: the Secret `--signing-secret` (chart: `<release>-grants-signing`)
//! in the operator's namespace, read by every replica, created and rotated by the leader.
//!
//! ```text
//!  Secret <release>-grants-signing (operator's namespace)
//!    data: current, next (32-byte Ed25519 seeds), previous.pub (the rotated-out public key)
//!    annotation mcp-operator.dev/rotate: <anything>   ← a person asks for a rotation
//!        │ watch (every replica, unfenced: the webhook needs it on followers too)
//!        ▼
//!  watch::Receiver<KeyringState> ──► webhook: injects current + next public keys
//!        │                       ──► AgentSpec reconciler: signs with current; a new current
//!        │                           key re-signs every grants ConfigMap
//!        ▼
//!  keep() (the leader, fenced client): absent → create; annotated → rotate
//!    (next becomes current, a fresh next, current kept as previous.pub; annotation removed)
//! ```
//!
//! A rotation keeps one generation of overlap: pods injected before it hold the old `next`,
//! which now signs. A Secret that cannot be read as a keyring is left alone (the operator
//! says so and signs nothing): delete it to have the leader create a fresh one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::grants::signature::Keyring;

/// The annotation that asks the leader for a rotation.
pub const ROTATE_ANNOTATION: &str = "mcp-operator.dev/rotate";
/// When the keys were last rotated (RFC 3339), set by the leader.
pub const ROTATED_ANNOTATION: &str = "mcp-operator.dev/rotated-at";

/// The default `--signing-secret`.
pub const DEFAULT_SIGNING_SECRET: &str = "mcp-operator-grants-signing";

/// What the replica knows of the keyring.
#[derive(Clone, Default)]
pub enum KeyringState {
    /// Not listed yet.
    #[default]
    Unknown,
    /// No such Secret.
    Absent,
    /// The Secret is not a keyring: why (never a key).
    Invalid(String),
    Loaded(Loaded),
}

/// A keyring as read, with what the leader needs to rotate it.
#[derive(Clone)]
pub struct Loaded {
    pub keyring: Arc<Keyring>,
    /// A person asked for a rotation.
    pub rotate_requested: bool,
    resource_version: Option<String>,
}

impl KeyringState {
    pub fn keyring(&self) -> Option<&Arc<Keyring>> {
        match self {
            KeyringState::Loaded(l) => Some(&l.keyring),
            _ => None,
        }
    }

    /// Why there is no keyring to sign or verify with, as a sentence.
    pub fn problem(&self, namespace: &str, name: &str) -> Option<String> {
        match self {
            KeyringState::Loaded(_) => None,
            KeyringState::Unknown => Some(format!(
                "the grants signing keys (Secret {namespace}/{name}) have not been read yet"
            )),
            KeyringState::Absent => Some(format!(
                "the grants signing keys (Secret {namespace}/{name}) do not exist yet: the leading replica creates them"
            )),
            KeyringState::Invalid(why) => Some(format!(
                "the Secret {namespace}/{name} is not a grants signing keyring ({why}): delete it and the operator creates a fresh one"
            )),
        }
    }
}

/// Where the keyring lives.
#[derive(Clone, Debug)]
pub struct KeyringSecret {
    pub namespace: String,
    pub name: String,
}

fn state_of(secret: Option<&Secret>) -> KeyringState {
    let Some(secret) = secret else {
        return KeyringState::Absent;
    };
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    match Keyring::from_secret_data(&data) {
        Ok(keyring) => KeyringState::Loaded(Loaded {
            keyring: Arc::new(keyring),
            rotate_requested: secret.annotations().contains_key(ROTATE_ANNOTATION),
            resource_version: secret.resource_version(),
        }),
        Err(e) => KeyringState::Invalid(e.to_string()),
    }
}

/// Watches the keyring Secret for as long as the process runs (every replica).
pub fn watch_keyring(client: Client, at: KeyringSecret) -> watch::Receiver<KeyringState> {
    let (tx, rx) = watch::channel(KeyringState::Unknown);
    tokio::spawn(async move {
        let api: Api<Secret> = Api::namespaced(client, &at.namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", at.name));
        let mut events = std::pin::pin!(watcher(api, config).default_backoff());
        let mut listing: Option<Secret> = None;
        let mut shown_problem: Option<String> = None;
        while let Some(event) = events.next().await {
            let next = match event {
                Ok(watcher::Event::Init) => {
                    listing = None;
                    continue;
                }
                Ok(watcher::Event::InitApply(s)) => {
                    listing = Some(s);
                    continue;
                }
                Ok(watcher::Event::InitDone) => state_of(listing.take().as_ref()),
                Ok(watcher::Event::Apply(s)) => state_of(Some(&s)),
                Ok(watcher::Event::Delete(_)) => KeyringState::Absent,
                Err(e) => {
                    warn!(secret = %at.name, "watching the grants signing keys: {e}");
                    continue;
                }
            };
            let problem = next.problem(&at.namespace, &at.name);
            if problem != shown_problem {
                match &problem {
                    Some(p) if matches!(next, KeyringState::Invalid(_)) => {
                        error!(reason = "SigningKeysInvalid", "{p}")
                    }
                    Some(p) => info!("{p}"),
                    None => {}
                }
                shown_problem = problem;
            }
            if let Some(k) = next.keyring() {
                info!(
                    current = k.current.id(),
                    next = k.next.id(),
                    "grants signing keys loaded"
                );
            }
            if tx.send(next).is_err() {
                return;
            }
        }
    });
    rx
}

/// The Secret holding `keyring`.
fn secret_of(at: &KeyringSecret, keyring: &Keyring, rotated_at: Option<String>) -> Secret {
    let mut annotations = BTreeMap::new();
    if let Some(at) = rotated_at {
        annotations.insert(ROTATED_ANNOTATION.to_string(), at);
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(at.name.clone()),
            namespace: Some(at.namespace.clone()),
            labels: Some(BTreeMap::from([(
                super::shared::MANAGED_BY_LABEL.to_string(),
                super::shared::MANAGED_BY.to_string(),
            )])),
            annotations: Some(annotations),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            keyring
                .to_secret_data()
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The leader's part: creates the keyring when there is none and rotates it when asked, until
/// `stop`. `client` is fenced: nothing is written once the lease may have gone.
pub async fn keep(
    client: Client,
    at: KeyringSecret,
    mut keys: watch::Receiver<KeyringState>,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Secret> = Api::namespaced(client, &at.namespace);
    loop {
        let state = keys.borrow_and_update().clone();
        let wrote = match state {
            KeyringState::Absent => {
                let secret = secret_of(&at, &Keyring::generate(), None);
                match api.create(&PostParams::default(), &secret).await {
                    Ok(_) => {
                        info!(secret = %at.name, namespace = %at.namespace, "created the grants signing keys");
                        Ok(())
                    }
                    // Another replica (a previous term) created it: the watch shows it.
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            KeyringState::Loaded(loaded) if loaded.rotate_requested => {
                let rotated = loaded.keyring.rotated();
                let mut secret = secret_of(
                    &at,
                    &rotated,
                    Some(k8s_openapi::jiff::Timestamp::now().to_string()),
                );
                // Only the Secret that was read is rotated: a concurrent change is a conflict.
                secret.metadata.resource_version = loaded.resource_version.clone();
                match api.replace(&at.name, &PostParams::default(), &secret).await {
                    Ok(_) => {
                        info!(
                            secret = %at.name,
                            retired = loaded.keyring.current.id(),
                            current = rotated.current.id(),
                            next = rotated.next.id(),
                            "rotated the grants signing keys: every grants ConfigMap is signed again with the new current key"
                        );
                        Ok(())
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            _ => Ok(()),
        };
        if let Err(e) = wrote {
            warn!(reason = "SigningKeys", secret = %at.name, "writing the grants signing keys failed: {e}");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        tokio::select! {
            changed = keys.changed() => if changed.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Fires whenever the current signing key changes (a rotation, a keyring created or replaced):
/// every grants ConfigMap must then be signed again.
pub fn current_key_changes(
    mut keys: watch::Receiver<KeyringState>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    let seen = keys
        .borrow_and_update()
        .keyring()
        .map(|k| k.current.id().to_string());
    futures::stream::unfold((keys, seen), |(mut keys, mut seen)| async move {
        loop {
            keys.changed().await.ok()?;
            let now = keys
                .borrow_and_update()
                .keyring()
                .map(|k| k.current.id().to_string());
            if now.is_some() && now != seen {
                seen = now;
                return Some(((), (keys, seen)));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> KeyringSecret {
        KeyringSecret {
            namespace: "mcp-system".into(),
            name: "mcp-operator-grants-signing".into(),
        }
    }

    #[test]
    fn the_secret_round_trips_and_a_rotation_request_is_seen() {
        let keyring = Keyring::generate();
        let mut secret = secret_of(&at(), &keyring, None);
        let KeyringState::Loaded(loaded) = state_of(Some(&secret)) else {
            panic!("a keyring");
        };
        assert_eq!(loaded.keyring.current.id(), keyring.current.id());
        assert!(!loaded.rotate_requested);
        secret
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(ROTATE_ANNOTATION.into(), "now".into());
        let KeyringState::Loaded(loaded) = state_of(Some(&secret)) else {
            panic!("a keyring");
        };
        assert!(loaded.rotate_requested);
        // The rotated Secret no longer asks for a rotation.
        let rotated = secret_of(&at(), &loaded.keyring.rotated(), Some("t".into()));
        let KeyringState::Loaded(after) = state_of(Some(&rotated)) else {
            panic!("a keyring");
        };
        assert!(!after.rotate_requested);
        assert_eq!(after.keyring.current.id(), keyring.next.id());
    }

    #[test]
    fn a_broken_keyring_says_what_to_do_without_showing_a_key() {
        let keyring = Keyring::generate();
        let mut secret = secret_of(&at(), &keyring, None);
        let seed = secret.data.as_ref().unwrap()["current"].0.clone();
        secret.data.as_mut().unwrap().remove("next");
        let state = state_of(Some(&secret));
        let problem = state.problem("mcp-system", "keys").unwrap();
        assert!(
            problem.contains("\"next\" is missing") && problem.contains("delete it"),
            "{problem}"
        );
        use base64::Engine as _;
        assert!(!problem.contains(&base64::engine::general_purpose::STANDARD.encode(&seed)));
        assert!(
            state_of(None)
                .problem("n", "s")
                .unwrap()
                .contains("do not exist yet")
        );
    }

    #[tokio::test]
    async fn a_new_current_key_fires_a_change_and_a_new_next_key_does_not() {
        let keyring = Keyring::generate();
        let loaded = |k: &Keyring| {
            KeyringState::Loaded(Loaded {
                keyring: Arc::new(k.clone()),
                rotate_requested: false,
                resource_version: None,
            })
        };
        let (tx, rx) = watch::channel(loaded(&keyring));
        let mut changes = std::pin::pin!(current_key_changes(rx));
        let rotated = keyring.rotated();
        tx.send(KeyringState::Loaded(Loaded {
            keyring: Arc::new(keyring.clone()),
            rotate_requested: true,
            resource_version: None,
        }))
        .unwrap();
        tx.send(loaded(&rotated)).unwrap();
        tokio::time::timeout(Duration::from_secs(1), changes.next())
            .await
            .expect("a change")
            .unwrap();
        tx.send(loaded(&Keyring {
            next: crate::grants::signature::SigningKey::generate(),
            ..rotated.clone()
        }))
        .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), changes.next())
                .await
                .is_err(),
            "the same current key"
        );
    }
}
