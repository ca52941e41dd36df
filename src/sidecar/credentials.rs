//! Credentials and CA bundles as files: the grants name Secret and ConfigMap keys, the Pod mounts
//! them under `DIR/secrets/<secret>/<key>` and `DIR/configmaps/<configmap>/<key>`. They are
//! looked at again for every call (so a rotated Secret is used on the next connect): a file whose
//! metadata is what it was when it was last read is not read again. The connection is keyed by a
//! digest of what was read, never by the value. An oauth2 client
//! secret or refresh token is read the same way; the token it obtains is the `mcp::oauth`
//! client's, cached per process.
//!
//! A missing or unreadable file makes that server unavailable with a reason naming the Secret
//! (or ConfigMap) and key, never the value. When the injection said which keys the pod mounts
//! (`--mounted-credentials`), a key the grants came to reference later is reported as such: the
//! pod must be restarted to mount it (a running pod's volumes never change).

use std::collections::BTreeSet;

// foldhash, not SipHash: each map is looked up on every call, with keys the grants chose.
use foldhash::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::core::limits::{DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOOL_PAGES};
use crate::core::{SecretKeySelector, Transport};
use crate::grants::Endpoint;
use crate::mcp::oauth::OAuthSettings;
use crate::mcp::{
    Credentials, EndpointPolicy, Limits, ReservationShare, ResponseBudget, SecretValue,
    ServerConnection, TlsSettings, TransportKind,
};

/// A server's connection with its credentials read, and their identity.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub conn: ServerConnection,
    /// `sha256:<hex>` over the URL and every credential value read: equal identities can share
    /// one connection.
    pub identity: String,
}

/// Where the mounted Secrets and ConfigMaps are.
#[derive(Debug, Clone)]
pub struct CredentialsDir {
    root: PathBuf,
    /// The files the pod mounts (`secrets/<name>/<key>`), when known.
    mounted: Option<BTreeSet<String>>,
    /// The sidecar's bound on upstream answer bytes held at once (`--response-budget`),
    /// given to every connection.
    budget: Option<ResponseBudget>,
    /// Each upstream's share of `budget` for reservations, by URL: one per server for the
    /// sidecar's life, whichever connection (or reconnection) its answers come on.
    shares: Arc<Mutex<HashMap<String, ReservationShare>>>,
    /// The identity last computed for each URL, with the bytes it digests.
    identities: Arc<Mutex<HashMap<String, (Digested, String)>>>,
    /// What each file held when it was last read.
    files: Arc<Mutex<HashMap<PathBuf, ReadFile>>>,
}

/// A file's text as read, with its metadata from just before the read: a write (in place, or
/// the kubelet swapping the `..data` link of a projected volume to a new file) changes the
/// inode, size, or modification and change times, so matching metadata means the text is
/// still what the file holds. Only a file last modified a while before it was read is kept:
/// file times move in clock ticks, and two writes within one tick would leave the same times
/// (git's "racily clean" files); a later write lands in a later tick.
struct ReadFile {
    stamp: Stamp,
    text: String,
}

impl std::fmt::Debug for ReadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The text is a credential: never printed.
        write!(f, "({} bytes)", self.text.len())
    }
}

/// How long before it was read a file must have been last modified for its text to be kept.
const SETTLED_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The bytes an identity digests: credential values among them, so never printed.
struct Digested(Vec<u8>);

impl std::fmt::Debug for Digested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({} bytes)", self.0.len())
    }
}

impl CredentialsDir {
    pub fn new(root: PathBuf) -> Self {
        CredentialsDir {
            root,
            mounted: None,
            budget: None,
            shares: Arc::default(),
            identities: Arc::default(),
            files: Arc::default(),
        }
    }

    /// The reservation share of the upstream at `url` (made on first use).
    fn share_of(&self, url: &str, cap: u64) -> Option<ReservationShare> {
        let budget = self.budget.as_ref()?;
        let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        Some(
            shares
                .entry(url.to_string())
                .or_insert_with(|| ReservationShare::of(budget, cap))
                .clone(),
        )
    }

    /// `sha256:<hex>` of `material`, computed again only when it differs from what was last
    /// read for `url` (every call resolves its server's credential; few calls see it change).
    fn identity_of(&self, url: &str, material: Vec<u8>) -> String {
        let mut identities = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((last, identity)) = identities.get(url)
            && last.0 == material
        {
            return identity.clone();
        }
        let identity = format!("sha256:{}", hex::encode(Sha256::digest(&material)));
        identities.insert(url.to_string(), (Digested(material), identity.clone()));
        identity
    }

    /// Every connection's answers are charged to `budget`.
    pub fn with_budget(mut self, budget: ResponseBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Knows which files the pod mounts: a reference to any other is a pod to restart.
    pub fn with_mounted(mut self, mounted: impl IntoIterator<Item = String>) -> Self {
        self.mounted = Some(mounted.into_iter().filter(|p| !p.is_empty()).collect());
        self
    }

    fn secret(&self, name: &str, key: &str) -> Result<String, String> {
        self.read_text("secrets", "Secret", name, key)
    }

    fn config_map(&self, name: &str, key: &str) -> Result<String, String> {
        self.read_text("configmaps", "ConfigMap", name, key)
    }

    fn read_text(&self, dir: &str, kind: &str, name: &str, key: &str) -> Result<String, String> {
        let invalid = |s: &str| s.is_empty() || s.contains('/') || s == "." || s == "..";
        if invalid(name) || invalid(key) {
            return Err(format!(
                "the {kind} reference {name:?}/{key:?} is not a valid name and key"
            ));
        }
        if let Some(mounted) = &self.mounted
            && !mounted.contains(&format!("{dir}/{name}/{key}"))
        {
            return Err(format!(
                "{kind} {name} key {key} is referenced by the grants but this pod does not mount it \
                 (the grants named it after the pod was created): restart the pod to mount it"
            ));
        }
        let path = self.root.join(dir).join(name).join(key);
        let unreadable = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "{kind} {name} key {key} is not mounted (no file {}); the sidecar needs it to reach the server",
                path.display()
            ),
            _ => format!("{kind} {name} key {key} cannot be read ({})", e.kind()),
        };
        // One stat instead of open, stat, read and close for every call of a server with a
        // credential; the stamp is taken before reading, so a write during the read is seen
        // on the next call.
        let meta = std::fs::metadata(&path).map_err(unreadable)?;
        let stamp = Stamp::of(&meta);
        if let Some(text) = self.read_before(&path, stamp) {
            return Ok(text);
        }
        let bytes = std::fs::read(&path).map_err(unreadable)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{kind} {name} key {key} is not UTF-8 text"))?;
        let settled = meta
            .modified()
            .is_ok_and(|at| at + SETTLED_AFTER <= std::time::SystemTime::now());
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if settled {
            let read = ReadFile {
                stamp,
                text: text.clone(),
            };
            files.insert(path, read);
        } else {
            files.remove(&path);
        }
        Ok(text)
    }

    /// The text last read from `path`, when the file's metadata is still `stamp`.
    fn read_before(&self, path: &Path, stamp: Stamp) -> Option<String> {
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files
            .get(path)
            .filter(|read| read.stamp == stamp)
            .map(|read| read.text.clone())
    }

    /// The files an endpoint references that cannot be read now (`secrets/<name>/<key>`),
    /// for counting: the names go to the log, never to `/readyz`.
    pub fn missing(&self, endpoint: &Endpoint) -> Vec<String> {
        let mut refs: Vec<(&str, &str, &str)> = Vec::new();
        if let Some(r) = &endpoint.bearer_token {
            refs.push(("secrets", &r.name, &r.key));
        }
        for header in &endpoint.headers {
            refs.push((
                "secrets",
                &header.secret_key_ref.name,
                &header.secret_key_ref.key,
            ));
        }
        for r in oauth_refs(endpoint).into_iter().flatten() {
            refs.push(("secrets", &r.name, &r.key));
        }
        if let Some(tls) = &endpoint.tls {
            if let Some(r) = &tls.ca_bundle_secret {
                refs.push(("secrets", &r.name, &r.key));
            }
            if let Some(r) = &tls.ca_bundle_config_map {
                refs.push(("configmaps", &r.name, &r.key));
            }
        }
        refs.into_iter()
            .filter(|(dir, name, key)| match *dir {
                "secrets" => self.secret(name, key).is_err(),
                _ => self.config_map(name, key).is_err(),
            })
            .map(|(dir, name, key)| format!("{dir}/{name}/{key}"))
            .collect()
    }

    /// Builds a server's connection from its endpoint and the files it references.
    pub fn resolve(&self, endpoint: &Endpoint, policy: EndpointPolicy) -> Result<Resolved, String> {
        // What the identity digests: the URL and every credential value read, in order.
        let mut material = Vec::with_capacity(128);
        material.extend_from_slice(endpoint.url.as_bytes());
        let mut credentials = Credentials::default();
        if let Some(r) = &endpoint.bearer_token {
            let token = self.secret(&r.name, &r.key)?;
            material.extend_from_slice(b"\0bearer\0");
            material.extend_from_slice(token.trim().as_bytes());
            credentials.bearer_token = Some(SecretValue::new(token.trim()));
        }
        for header in &endpoint.headers {
            let r = &header.secret_key_ref;
            let value = self.secret(&r.name, &r.key)?;
            material.extend_from_slice(b"\0header\0");
            material.extend_from_slice(header.name.as_bytes());
            material.extend_from_slice(b"\0");
            material.extend_from_slice(value.trim().as_bytes());
            credentials
                .headers
                .push((header.name.clone(), SecretValue::new(value.trim())));
        }
        if let Some(o) = &endpoint.oauth2 {
            let read = |r: &Option<SecretKeySelector>| {
                r.as_ref()
                    .map(|r| {
                        self.secret(&r.name, &r.key)
                            .map(|v| SecretValue::new(v.trim()))
                    })
                    .transpose()
            };
            let settings = OAuthSettings {
                token_url: o.token_url.clone(),
                client_id: o.client_id.clone(),
                client_secret: read(&o.client_secret)?,
                refresh_token: read(&o.refresh_token)?,
                scopes: o.scopes.clone(),
                audience: o.audience.clone(),
                resource: o.resource.clone(),
            };
            // A rotated client secret is a new identity: a new connection, a new token.
            material.extend_from_slice(b"\0oauth2\0");
            material.extend_from_slice(settings.digest().as_bytes());
            credentials.oauth2 = Some(settings);
        }
        let mut tls = TlsSettings::default();
        if let Some(t) = &endpoint.tls {
            tls.insecure_skip_verify = t.insecure_skip_verify;
            let pem = match (&t.ca_bundle_secret, &t.ca_bundle_config_map) {
                (Some(r), _) => Some(self.secret(&r.name, &r.key)?),
                (None, Some(r)) => Some(self.config_map(&r.name, &r.key)?),
                (None, None) => None,
            };
            if let Some(pem) = pem {
                material.extend_from_slice(b"\0ca\0");
                material.extend_from_slice(pem.as_bytes());
                tls.ca_pem = Some(pem.into_bytes());
            }
            material.extend_from_slice(if t.insecure_skip_verify {
                b"\0insecure"
            } else {
                b"\0verify\0\0"
            });
        }
        let max_response_bytes = endpoint
            .max_response_bytes
            .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
        let conn = ServerConnection {
            url: endpoint.url.clone(),
            transport: match endpoint.transport {
                Transport::Sse => TransportKind::Sse,
                Transport::StreamableHttp => TransportKind::StreamableHttp,
            },
            credentials,
            tls,
            limits: Limits {
                connect_timeout: Duration::from_millis(endpoint.connect_timeout_ms.max(1)),
                max_tool_pages: endpoint.max_tool_pages.unwrap_or(DEFAULT_MAX_TOOL_PAGES),
                max_response_bytes,
            },
            endpoint_policy: policy,
            // The per-response cap bounds each answer, the budget all of them at once.
            budget: self.budget.clone(),
            reservations: self.share_of(&endpoint.url, max_response_bytes),
        };
        Ok(Resolved {
            conn,
            identity: self.identity_of(&endpoint.url, material),
        })
    }
}

/// The Secret keys an endpoint's oauth2 names: client secret, refresh token.
fn oauth_refs(endpoint: &Endpoint) -> [Option<&SecretKeySelector>; 2] {
    match &endpoint.oauth2 {
        Some(o) => [o.client_secret.as_ref(), o.refresh_token.as_ref()],
        None => [None, None],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::HeaderReference;

    fn endpoint(dir_token: bool) -> Endpoint {
        serde_json::from_value(serde_json::json!({
            "url": "http://127.0.0.1:1/mcp",
            "transport": "streamable-http",
            "connectTimeoutMs": 1000,
            "callTimeoutMs": 1000,
            "retry": 1,
            "bearerToken": if dir_token { serde_json::json!({"name": "tok", "key": "token"}) } else { serde_json::Value::Null },
        }))
        .unwrap()
    }

    #[test]
    fn a_credential_is_read_again_when_its_file_changes_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let tok = dir.path().join("secrets/tok");
        std::fs::create_dir_all(&tok).unwrap();
        let written_before = |path: &Path, text: &str| {
            std::fs::write(path, text).unwrap();
            let past = std::time::SystemTime::now() - Duration::from_secs(10);
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(past)
                .unwrap();
        };
        written_before(&tok.join("token"), "one");
        let creds = CredentialsDir::new(dir.path().to_path_buf());
        let token = |creds: &CredentialsDir| {
            creds
                .resolve(&endpoint(true), EndpointPolicy::default())
                .unwrap()
                .conn
                .credentials
                .bearer_token
                .unwrap()
                .expose()
                .to_string()
        };
        assert_eq!(token(&creds), "one");
        // Read once, kept while the file is unchanged.
        let kept = |creds: &CredentialsDir| creds.files.lock().unwrap().len();
        assert_eq!(kept(&creds), 1);
        assert_eq!(token(&creds), "one");
        // Rewritten in place with as many bytes: read again, and not kept while the write is
        // recent (another write in the same clock tick would leave the same times).
        std::fs::write(tok.join("token"), "two").unwrap();
        assert_eq!(token(&creds), "two");
        assert_eq!(kept(&creds), 0);
        std::fs::write(tok.join("token"), "2wo").unwrap();
        assert_eq!(token(&creds), "2wo");
        // Rotated the kubelet's way: a new file behind the same name.
        written_before(&tok.join(".new"), "three");
        std::fs::rename(tok.join(".new"), tok.join("token")).unwrap();
        assert_eq!(token(&creds), "three");
        assert_eq!(kept(&creds), 1);
        // Gone: unavailable with the reason, not the last value read.
        std::fs::remove_file(tok.join("token")).unwrap();
        let e = creds
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap_err();
        assert!(e.contains("is not mounted"), "{e}");
        assert!(!format!("{creds:?}").contains("three"));
    }

    #[test]
    fn a_server_keeps_one_reservation_share_across_connections_and_credentials() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("secrets/tok")).unwrap();
        std::fs::write(dir.path().join("secrets/tok/token"), "one").unwrap();
        let creds = CredentialsDir::new(dir.path().to_path_buf())
            .with_budget(ResponseBudget::new(64 * 1024 * 1024));
        let share = |creds: &CredentialsDir, token: bool| {
            creds
                .resolve(&endpoint(token), EndpointPolicy::default())
                .unwrap()
                .conn
                .reservations
                .expect("a share under a budget")
        };
        let first = share(&creds, true);
        // A reconnection (the pool resolves again), a rotated credential (a new session), the
        // same server without a token, and a copy of the directory: all the same share, so a
        // server that makes the sidecar reconnect gets no second half of the budget.
        std::fs::write(dir.path().join("secrets/tok/token"), "two").unwrap();
        for again in [
            share(&creds, true),
            share(&creds, false),
            share(&creds.clone(), true),
        ] {
            assert!(again.same_as(&first));
        }
        let mut other = endpoint(false);
        other.url = "http://127.0.0.1:2/mcp".into();
        let theirs = creds
            .resolve(&other, EndpointPolicy::default())
            .unwrap()
            .conn
            .reservations
            .unwrap();
        assert!(!theirs.same_as(&first), "another server has its own");
        // Without a budget there is nothing to share.
        let unbounded = CredentialsDir::new(dir.path().to_path_buf());
        assert!(
            unbounded
                .resolve(&endpoint(true), EndpointPolicy::default())
                .unwrap()
                .conn
                .reservations
                .is_none()
        );
    }

    #[test]
    fn reads_the_files_at_each_resolve_and_the_identity_follows_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let creds = CredentialsDir::new(dir.path().to_path_buf());
        let err = creds
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap_err();
        assert!(err.contains("Secret tok key token is not mounted"), "{err}");
        std::fs::create_dir_all(dir.path().join("secrets/tok")).unwrap();
        std::fs::write(dir.path().join("secrets/tok/token"), "s3cret-one\n").unwrap();
        let one = creds
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap();
        assert_eq!(
            one.conn.credentials.bearer_token.as_ref().unwrap().expose(),
            "s3cret-one"
        );
        assert!(!one.identity.contains("s3cret"));
        assert!(!format!("{:?}", one.conn).contains("s3cret"));
        let again = creds
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap();
        assert_eq!(
            one.identity, again.identity,
            "the same value, the same identity"
        );
        std::fs::write(dir.path().join("secrets/tok/token"), "s3cret-two").unwrap();
        let two = creds
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap();
        assert_ne!(one.identity, two.identity);
        assert!(
            !format!("{creds:?}").contains("s3cret"),
            "what the identity digests is never printed"
        );
        std::fs::write(dir.path().join("secrets/tok/token"), "s3cret-one\n").unwrap();
        let back = creds
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap();
        assert_eq!(
            one.identity, back.identity,
            "rotated back, the first identity"
        );
        let none = creds
            .resolve(&endpoint(false), EndpointPolicy::default())
            .unwrap();
        assert!(none.conn.credentials.bearer_token.is_none());
    }

    #[test]
    fn a_key_the_pod_does_not_mount_asks_for_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("secrets/tok")).unwrap();
        std::fs::write(dir.path().join("secrets/tok/token"), "s3cret").unwrap();
        let mut ep = endpoint(true);
        let mounted = CredentialsDir::new(dir.path().to_path_buf())
            .with_mounted(["secrets/tok/token".to_string()]);
        assert!(mounted.resolve(&ep, EndpointPolicy::default()).is_ok());
        ep.headers.push(HeaderReference {
            name: "X-Key".into(),
            secret_key_ref: serde_json::from_value(serde_json::json!({"name": "new", "key": "k"}))
                .unwrap(),
        });
        let err = mounted.resolve(&ep, EndpointPolicy::default()).unwrap_err();
        assert!(
            err.contains("Secret new key k") && err.contains("restart the pod"),
            "{err}"
        );
        // Nothing mounted at all (grants without credentials at injection time).
        let none = CredentialsDir::new(dir.path().to_path_buf()).with_mounted([String::new()]);
        let err = none
            .resolve(&endpoint(true), EndpointPolicy::default())
            .unwrap_err();
        assert!(
            err.contains("Secret tok key token") && err.contains("restart"),
            "{err}"
        );
        // Unknown (run by hand, not injected): the file decides.
        let unknown = CredentialsDir::new(dir.path().to_path_buf());
        assert!(
            unknown
                .resolve(&endpoint(true), EndpointPolicy::default())
                .is_ok()
        );
    }

    #[test]
    fn an_oauth2_client_secret_is_read_from_its_file_and_a_rotation_is_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        let creds = CredentialsDir::new(dir.path().to_path_buf());
        let mut ep = endpoint(false);
        ep.oauth2 = Some(
            serde_json::from_value(serde_json::json!({
                "tokenUrl": "https://auth.example/token",
                "clientId": "agent",
                "clientSecret": {"name": "oauth", "key": "client-secret"},
                "scopes": ["mcp"],
            }))
            .unwrap(),
        );
        assert_eq!(creds.missing(&ep), ["secrets/oauth/client-secret"]);
        std::fs::create_dir_all(dir.path().join("secrets/oauth")).unwrap();
        std::fs::write(
            dir.path().join("secrets/oauth/client-secret"),
            "s3cret-one\n",
        )
        .unwrap();
        let one = creds.resolve(&ep, EndpointPolicy::default()).unwrap();
        let settings = one.conn.credentials.oauth2.as_ref().unwrap();
        assert_eq!(
            settings.client_secret.as_ref().unwrap().expose(),
            "s3cret-one"
        );
        assert_eq!(settings.grant(), "client_credentials");
        assert!(!format!("{:?}", one.conn).contains("s3cret"));
        std::fs::write(dir.path().join("secrets/oauth/client-secret"), "s3cret-two").unwrap();
        let two = creds.resolve(&ep, EndpointPolicy::default()).unwrap();
        assert_ne!(one.identity, two.identity);
    }

    #[test]
    fn a_reference_cannot_leave_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let creds = CredentialsDir::new(dir.path().to_path_buf());
        let mut ep = endpoint(false);
        ep.headers.push(HeaderReference {
            name: "X-Key".into(),
            secret_key_ref: serde_json::from_value(serde_json::json!({"name": "..", "key": "etc"}))
                .unwrap(),
        });
        let err = creds.resolve(&ep, EndpointPolicy::default()).unwrap_err();
        assert!(err.contains("not a valid name"), "{err}");
    }
}
