//! The webhook's TLS, kept by the operator itself: a CA and a serving certificate for the
//! webhook Service's DNS names, in one Secret every replica shares, and the CA bundle in the
//! MutatingWebhookConfiguration and the ValidatingWebhookConfiguration (both of the name
//! `--webhook-configuration`). No cert-manager needed.
//!
//! ```text
//!  every replica, every minute:
//!    Secret <webhook-secret> (ns of the pod)   absent ─► issue ─► create  (409: another replica
//!      tls.crt, tls.key, ca.crt (bundle)                                   won; read its Secret)
//!      annotations: not-after, dns-names       due ─► issue ─► replace at its resourceVersion
//!                                                              (409: re-read next round)
//!    ─► Mutating- and ValidatingWebhookConfiguration    (every webhook's caBundle = ca.crt,
//!                                                         replaced only when it differs)
//!    ─► the serving certificate this replica presents   (a resolver, swapped in place; a
//!                                                         renewed one a round after its bundle)
//! ```
//!
//! The CA and the serving certificate are issued together and the CA's key is never stored: a
//! renewal makes a new CA, and the bundle keeps the previous CA next to the new one, so an
//! apiserver that has the old bundle and a replica that still serves the old certificate both
//! keep working through the switch. Deciding when to issue is pure ([`plan`]).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// When the serving certificate expires (RFC 3339), so renewal needs no X.509 parsing.
pub const NOT_AFTER_ANNOTATION: &str = "mcp-operator.dev/not-after";
/// The DNS names it was issued for, comma-separated: a renamed Service gets a new certificate.
pub const DNS_NAMES_ANNOTATION: &str = "mcp-operator.dev/dns-names";

/// How long a certificate is valid and how long before its end it is replaced.
#[derive(Clone, Copy, Debug)]
pub struct Lifetime {
    pub validity: Duration,
    pub renew_before: Duration,
}

impl Default for Lifetime {
    fn default() -> Self {
        Lifetime {
            validity: Duration::from_secs(365 * 24 * 3600),
            renew_before: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// The DNS names the apiserver may use for the Service `service` in `namespace`.
pub fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_string(),
    ]
}

/// A freshly issued CA and serving certificate, PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: jiff::Timestamp,
}

/// Issues a new CA and a serving certificate for `names`, valid from a minute ago (clock skew)
/// for `validity`.
pub fn issue(
    names: &[String],
    now: jiff::Timestamp,
    validity: Duration,
) -> Result<Issued, rcgen::Error> {
    let start = now - jiff::SignedDuration::from_secs(60);
    let end = now + jiff::SignedDuration::try_from(validity).unwrap_or(jiff::SignedDuration::MAX);
    let to_time = |t: jiff::Timestamp| {
        time::OffsetDateTime::from_unix_timestamp(t.as_second())
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "mcp-operator webhook CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = to_time(start);
    ca.not_after = to_time(end);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names.to_vec())?;
    leaf.distinguished_name.push(
        DnType::CommonName,
        names.first().map(String::as_str).unwrap_or("mcp-operator"),
    );
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.not_before = to_time(start);
    leaf.not_after = to_time(end);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(Issued {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: jiff::Timestamp::from_second(end.as_second()).unwrap_or(end),
    })
}

/// What the stored Secret holds, as far as renewal is concerned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    pub has_cert_and_key: bool,
    pub not_after: Option<jiff::Timestamp>,
    pub dns_names: String,
    pub bundle: String,
}

/// What to do with the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// It serves as it is.
    Keep,
    /// There is none: create one.
    Create,
    /// It expires soon, is unreadable or names other hosts: replace it.
    Renew(&'static str),
}

/// Pure: whether the stored certificate serves `names` until well after `now`.
pub fn plan(
    stored: Option<&Stored>,
    names: &[String],
    now: jiff::Timestamp,
    life: Lifetime,
) -> Plan {
    let Some(s) = stored else {
        return Plan::Create;
    };
    if !s.has_cert_and_key || s.bundle.trim().is_empty() {
        return Plan::Renew("the Secret lacks tls.crt, tls.key or ca.crt");
    }
    if s.dns_names != names.join(",") {
        return Plan::Renew("the certificate names another Service");
    }
    let Some(not_after) = s.not_after else {
        return Plan::Renew("the Secret does not say when its certificate expires");
    };
    let renew_at = not_after
        - jiff::SignedDuration::try_from(life.renew_before).unwrap_or(jiff::SignedDuration::ZERO);
    if now >= renew_at {
        Plan::Renew("the certificate expires soon")
    } else {
        Plan::Keep
    }
}

/// The first certificate of a PEM bundle (the current CA of a bundle this module wrote).
fn first_certificate(bundle: &str) -> Option<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let end = bundle.find(END)? + END.len();
    let start = bundle[..end].find("-----BEGIN CERTIFICATE-----")?;
    Some(format!("{}\n", &bundle[start..end]))
}

/// The CA bundle after a renewal: the new CA, then the one it replaces (still trusted until the
/// next renewal, so nothing in flight breaks).
pub fn renewed_bundle(new_ca: &str, old_bundle: Option<&str>) -> String {
    let mut bundle = new_ca.to_string();
    if let Some(old) = old_bundle.and_then(first_certificate)
        && old.trim() != new_ca.trim()
    {
        bundle.push_str(&old);
    }
    bundle
}

fn stored(secret: &Secret) -> Stored {
    let data = secret.data.clone().unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    Stored {
        has_cert_and_key: !text("tls.crt").is_empty() && !text("tls.key").is_empty(),
        not_after: annotations
            .get(NOT_AFTER_ANNOTATION)
            .and_then(|t| t.parse().ok()),
        dns_names: annotations
            .get(DNS_NAMES_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        bundle: text("ca.crt"),
    }
}

fn secret_of(
    name: &str,
    namespace: &str,
    issued: &Issued,
    bundle: &str,
    names: &[String],
) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "mcp-operator".to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    NOT_AFTER_ANNOTATION.to_string(),
                    issued.not_after.to_string(),
                ),
                (DNS_NAMES_ANNOTATION.to_string(), names.join(",")),
            ])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), bytes(&issued.cert_pem)),
            ("tls.key".to_string(), bytes(&issued.key_pem)),
            ("ca.crt".to_string(), bytes(bundle)),
        ])),
        ..Default::default()
    }
}

/// Pure: whether to present the Secret's certificate `stored` now. With none served yet, at
/// once (nothing can break). A renewed one only once a round ago already found it with its
/// CA bundle written, so the apiserver (whose view of the configuration lags a little) trusts
/// its CA first; until then the previous certificate, still valid for weeks, serves.
pub fn switch_now(
    served: Option<&str>,
    seen_last_round: Option<&str>,
    stored: &str,
    bundle_written: bool,
) -> bool {
    match served {
        None => true,
        Some(s) if s == stored => false,
        Some(_) => bundle_written && seen_last_round == Some(stored),
    }
}

/// The certificate this replica presents; swapped when the Secret changes.
#[derive(Debug, Default)]
pub struct Resolver {
    current: RwLock<Option<(String, Arc<CertifiedKey>)>>,
    /// A renewed certificate found in the Secret, not served yet (see [`switch_now`]).
    seen: std::sync::Mutex<Option<String>>,
}

impl Resolver {
    /// The PEM of the certificate it presents.
    fn served(&self) -> Option<String> {
        self.current
            .read()
            .expect("resolver lock")
            .as_ref()
            .map(|(c, _)| c.clone())
    }

    /// Whether a certificate is loaded (the webhook can answer).
    pub fn loaded(&self) -> bool {
        self.current.read().expect("resolver lock").is_some()
    }

    /// Loads `cert_pem` and `key_pem` unless they are what it serves already.
    pub fn load(&self, cert_pem: &str, key_pem: &str) -> Result<bool, String> {
        if self
            .current
            .read()
            .expect("resolver lock")
            .as_ref()
            .is_some_and(|(c, _)| c == cert_pem)
        {
            return Ok(false);
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("tls.crt is not PEM certificates: {e}"))?;
        if chain.is_empty() {
            return Err("tls.crt holds no certificate".into());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| format!("tls.key is not a PEM private key: {e}"))?;
        let signing = any_supported_type(&key).map_err(|e| format!("tls.key: {e}"))?;
        *self.current.write().expect("resolver lock") = Some((
            cert_pem.to_string(),
            Arc::new(CertifiedKey::new(chain, signing)),
        ));
        Ok(true)
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .expect("resolver lock")
            .as_ref()
            .map(|(_, k)| Arc::clone(k))
    }
}

/// Where the certificate lives and which configuration trusts it.
#[derive(Clone)]
pub struct Keeper {
    pub client: Client,
    pub namespace: String,
    pub secret: String,
    pub service: String,
    pub configuration: String,
    pub life: Lifetime,
}

impl Keeper {
    /// One round: the Secret made current (created or renewed when due), its certificate
    /// loaded into `resolver`, the configuration's caBundle made equal to its bundle.
    pub async fn sync(&self, resolver: &Resolver) -> Result<(), String> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let names = dns_names(&self.service, &self.namespace);
        let secret = self.current_secret(&api, &names).await?;
        let data = secret.data.clone().unwrap_or_default();
        let text = |k: &str| {
            data.get(k)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .unwrap_or_default()
        };
        // The bundle first: the apiserver must trust a new CA before any replica presents a
        // certificate it signed.
        let bundle = self.keep_ca_bundle(text("ca.crt").as_bytes()).await;
        let cert = text("tls.crt");
        let served = resolver.served();
        let seen = resolver.seen.lock().expect("resolver lock").clone();
        if switch_now(served.as_deref(), seen.as_deref(), &cert, bundle.is_ok()) {
            if resolver.load(&cert, &text("tls.key"))? {
                tracing::info!(secret = %self.secret, "serving the webhook with the certificate in its Secret");
            }
        } else if served.as_deref() != Some(cert.as_str()) {
            // Renewed: served from the next round on, when the apiserver has the bundle.
            *resolver.seen.lock().expect("resolver lock") = bundle.is_ok().then_some(cert);
        }
        bundle
    }

    async fn current_secret(&self, api: &Api<Secret>, names: &[String]) -> Result<Secret, String> {
        let now = jiff::Timestamp::now();
        let existing = api
            .get_opt(&self.secret)
            .await
            .map_err(|e| format!("reading the webhook Secret {}: {e}", self.secret))?;
        let state = existing.as_ref().map(stored);
        match plan(state.as_ref(), names, now, self.life) {
            Plan::Keep => Ok(existing.expect("kept means it exists")),
            Plan::Create => {
                let issued = issue(names, now, self.life.validity)
                    .map_err(|e| format!("issuing the webhook certificate: {e}"))?;
                let secret = secret_of(
                    &self.secret,
                    &self.namespace,
                    &issued,
                    &issued.ca_pem,
                    names,
                );
                match api.create(&PostParams::default(), &secret).await {
                    Ok(created) => {
                        tracing::info!(secret = %self.secret, not_after = %issued.not_after, "created the webhook's CA and serving certificate");
                        Ok(created)
                    }
                    // Another replica created it first: everyone uses that one.
                    Err(kube::Error::Api(s)) if s.code == 409 => api
                        .get(&self.secret)
                        .await
                        .map_err(|e| format!("reading the webhook Secret {}: {e}", self.secret)),
                    Err(e) => Err(format!("creating the webhook Secret {}: {e}", self.secret)),
                }
            }
            Plan::Renew(why) => {
                let old = existing.expect("renewed means it exists");
                let issued = issue(names, now, self.life.validity)
                    .map_err(|e| format!("issuing the webhook certificate: {e}"))?;
                let bundle =
                    renewed_bundle(&issued.ca_pem, state.as_ref().map(|s| s.bundle.as_str()));
                let mut secret = secret_of(&self.secret, &self.namespace, &issued, &bundle, names);
                // Replaced only at the version read: two replicas renewing at once agree on
                // whichever write lands first.
                secret.metadata.resource_version = old.metadata.resource_version.clone();
                match api
                    .replace(&self.secret, &PostParams::default(), &secret)
                    .await
                {
                    Ok(replaced) => {
                        tracing::info!(secret = %self.secret, reason = why, not_after = %issued.not_after, "renewed the webhook's certificate");
                        Ok(replaced)
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => api
                        .get(&self.secret)
                        .await
                        .map_err(|e| format!("reading the webhook Secret {}: {e}", self.secret)),
                    Err(e) => Err(format!("renewing the webhook Secret {}: {e}", self.secret)),
                }
            }
        }
    }

    /// Makes every webhook of both configurations (the injection's and the validation's, of
    /// one name) trust `bundle`.
    async fn keep_ca_bundle(&self, bundle: &[u8]) -> Result<(), String> {
        let mutating = self
            .keep_bundle_of::<MutatingWebhookConfiguration>(bundle, |c| {
                c.webhooks
                    .iter_mut()
                    .flatten()
                    .map(|w| &mut w.client_config)
                    .collect()
            })
            .await;
        let validating = self
            .keep_bundle_of::<ValidatingWebhookConfiguration>(bundle, |c| {
                c.webhooks
                    .iter_mut()
                    .flatten()
                    .map(|w| &mut w.client_config)
                    .collect()
            })
            .await;
        match (mutating, validating) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Err(a), Err(b)) => Err(format!("{a}; {b}")),
        }
    }

    async fn keep_bundle_of<K>(
        &self,
        bundle: &[u8],
        client_configs: impl Fn(&mut K) -> Vec<&mut WebhookClientConfig>,
    ) -> Result<(), String>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
    {
        let kind = K::kind(&());
        let api: Api<K> = Api::all(self.client.clone());
        let Some(mut config) = api
            .get_opt(&self.configuration)
            .await
            .map_err(|e| format!("reading the {kind} {}: {e}", self.configuration))?
        else {
            return Err(format!(
                "the {kind} {} does not exist: the chart creates it (injection.enabled)",
                self.configuration
            ));
        };
        let mut changed = false;
        for client in client_configs(&mut config) {
            if client.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle) {
                client.ca_bundle = Some(ByteString(bundle.to_vec()));
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        match api
            .replace(&self.configuration, &PostParams::default(), &config)
            .await
        {
            Ok(_) => {
                tracing::info!(configuration = %self.configuration, %kind, "set the webhook's caBundle");
                Ok(())
            }
            // Another replica wrote it in between; the next round compares again.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(format!(
                "writing the caBundle of the {kind} {}: {e}",
                self.configuration
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;

    fn now() -> jiff::Timestamp {
        "2026-12-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn plan_creates_renews_when_due_or_renamed_and_keeps_otherwise() {
        let names = dns_names("wh", "ops");
        let life = Lifetime::default();
        assert_eq!(plan(None, &names, now(), life), Plan::Create);
        let good = Stored {
            has_cert_and_key: true,
            not_after: Some(now() + jiff::SignedDuration::from_hours(24 * 60)),
            dns_names: names.join(","),
            bundle: "ca".into(),
        };
        assert_eq!(plan(Some(&good), &names, now(), life), Plan::Keep);
        let due = Stored {
            not_after: Some(now() + jiff::SignedDuration::from_hours(24 * 29)),
            ..good.clone()
        };
        assert!(matches!(
            plan(Some(&due), &names, now(), life),
            Plan::Renew(_)
        ));
        let renamed = dns_names("other", "ops");
        assert!(matches!(
            plan(Some(&good), &renamed, now(), life),
            Plan::Renew(_)
        ));
        let broken = Stored {
            has_cert_and_key: false,
            ..good.clone()
        };
        assert!(matches!(
            plan(Some(&broken), &names, now(), life),
            Plan::Renew(_)
        ));
        let undated = Stored {
            not_after: None,
            ..good
        };
        assert!(matches!(
            plan(Some(&undated), &names, now(), life),
            Plan::Renew(_)
        ));
    }

    #[test]
    fn an_issued_certificate_verifies_against_its_ca_for_the_service_name() {
        crate::install_crypto_provider();
        let names = dns_names("wh", "ops");
        let issued = issue(&names, jiff::Timestamp::now(), Duration::from_secs(3600)).unwrap();
        let resolver = Resolver::default();
        assert!(resolver.load(&issued.cert_pem, &issued.key_pem).unwrap());
        assert!(
            !resolver.load(&issued.cert_pem, &issued.key_pem).unwrap(),
            "loaded once"
        );
        assert!(resolver.loaded());

        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(issued.ca_pem.as_bytes()) {
            roots.add(ca.unwrap()).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots))
            .build()
            .unwrap();
        let leaf = CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
        let now = rustls::pki_types::UnixTime::now();
        for name in ["wh.ops.svc", "wh.ops.svc.cluster.local"] {
            let server = rustls::pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&leaf, &[], &server, &[], now)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let wrong = rustls::pki_types::ServerName::try_from("evil.ops.svc").unwrap();
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &wrong, &[], now)
                .is_err()
        );
        // A certificate of another CA does not verify against this one.
        let other = issue(&names, jiff::Timestamp::now(), Duration::from_secs(3600)).unwrap();
        let other_leaf = CertificateDer::from_pem_slice(other.cert_pem.as_bytes()).unwrap();
        let server = rustls::pki_types::ServerName::try_from("wh.ops.svc").unwrap();
        assert!(
            verifier
                .verify_server_cert(&other_leaf, &[], &server, &[], now)
                .is_err()
        );
        assert!(!issued.key_pem.is_empty() && !issued.ca_pem.contains("PRIVATE KEY"));
    }

    #[test]
    fn a_renewed_certificate_is_served_one_round_after_its_bundle_was_written() {
        // Nothing served: at once, whatever the bundle.
        assert!(switch_now(None, None, "new", false));
        // The same certificate: nothing to do.
        assert!(!switch_now(Some("old"), None, "old", true));
        // Renewed: not in the round that finds it...
        assert!(!switch_now(Some("old"), None, "new", true));
        // ...but in the next, if the bundle is (still) written.
        assert!(switch_now(Some("old"), Some("new"), "new", true));
        assert!(!switch_now(Some("old"), Some("new"), "new", false));
        // Renewed again meanwhile: wait for that one.
        assert!(!switch_now(Some("old"), Some("newer"), "new", true));
    }

    #[test]
    fn a_renewed_bundle_trusts_the_new_and_the_previous_ca_only() {
        let names = dns_names("wh", "ops");
        let one = issue(&names, now(), Duration::from_secs(3600)).unwrap();
        let two = issue(&names, now(), Duration::from_secs(3600)).unwrap();
        let three = issue(&names, now(), Duration::from_secs(3600)).unwrap();
        let b2 = renewed_bundle(&two.ca_pem, Some(&one.ca_pem));
        assert!(b2.starts_with(two.ca_pem.trim()) && b2.contains(one.ca_pem.trim()));
        let b3 = renewed_bundle(&three.ca_pem, Some(&b2));
        assert!(b3.starts_with(three.ca_pem.trim()) && b3.contains(two.ca_pem.trim()));
        assert!(!b3.contains(one.ca_pem.trim()), "the oldest CA is dropped");
        assert_eq!(renewed_bundle(&one.ca_pem, None), one.ca_pem);
        assert_eq!(renewed_bundle(&one.ca_pem, Some(&one.ca_pem)), one.ca_pem);
    }
}
