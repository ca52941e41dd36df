//! What a connection to a server (or to its authorization server) trusts: the rustls client
//! configuration built from `spec.tls` — the system's roots, a CA bundle instead of them or
//! beside them, or (loudly reported elsewhere) no verification at all. The protocols offered
//! by ALPN are the client's to set.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

use super::connection::TlsSettings;
use super::error::McpError;

/// What a client built with a CA bundle trusts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Roots {
    /// The bundle alone (spec.tls for the server: "trust this instead of the system roots").
    BundleOnly,
    /// The system's roots and the bundle (an authorization server: a server on a private CA
    /// is often behind a public one, and the other way round).
    SystemAndBundle,
}

/// The client configuration for `host` under `tls`.
pub fn client_config(
    host: &str,
    tls: &TlsSettings,
    roots: Roots,
) -> Result<Arc<ClientConfig>, McpError> {
    let bundle = match &tls.ca_pem {
        Some(pem) => Some(certificates(host, pem)?),
        None => None,
    };
    let unbuildable = |detail: String| McpError::TlsError {
        host: host.to_string(),
        detail: format!("the TLS client could not be built ({detail})"),
    };
    if tls.insecure_skip_verify {
        return built(Arc::new(AcceptAnyCertificate(provider()))).map_err(unbuildable);
    }
    match (bundle, roots) {
        (None, _) => system_roots().map_err(unbuildable),
        (Some(bundle), Roots::BundleOnly) => {
            let mut store = rustls::RootCertStore::empty();
            let (_, ignored) = store.add_parsable_certificates(bundle);
            if store.is_empty() {
                return Err(McpError::TlsError {
                    host: host.to_string(),
                    detail: format!(
                        "none of the CA bundle's certificates can be used as a root ({ignored} refused)"
                    ),
                });
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                store.into(),
                provider(),
            )
            .build()
            .map_err(|e| unbuildable(e.to_string()))?;
            built(verifier).map_err(unbuildable)
        }
        (Some(bundle), Roots::SystemAndBundle) => {
            let verifier =
                rustls_platform_verifier::Verifier::new_with_extra_roots(bundle, provider())
                    .map_err(|e| unbuildable(e.to_string()))?;
            built(Arc::new(verifier)).map_err(unbuildable)
        }
    }
}

/// The configuration of every server verified against the system's roots, built once: the
/// platform verifier reads and parses every system root when it is built, and the controller
/// connects to up to --probe-concurrency servers at once.
fn system_roots() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let verifier =
                rustls_platform_verifier::Verifier::new(provider()).map_err(|e| e.to_string())?;
            built(Arc::new(verifier))
        })
        .clone()
}

/// Every TLS version, no client certificate, and `verifier` deciding whom to trust.
fn built(verifier: Arc<dyn ServerCertVerifier>) -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The process's crypto provider (the binaries install ring's at start), ring's otherwise.
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The certificates of a PEM bundle (other sections, such as keys, are skipped).
fn certificates(host: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, McpError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| McpError::TlsError {
            host: host.to_string(),
            detail: "the CA bundle is not valid PEM".into(),
        })?;
    if certs.is_empty() {
        return Err(McpError::TlsError {
            host: host.to_string(),
            detail: "the CA bundle holds no certificate".into(),
        });
    }
    Ok(certs)
}

/// `insecureSkipVerify`: any certificate for any name. The handshake's signatures are still
/// checked, so the connection is at least to whoever holds the key it shows.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pem: &[u8]) -> TlsSettings {
        TlsSettings {
            ca_pem: Some(pem.to_vec()),
            insecure_skip_verify: false,
        }
    }

    #[test]
    fn a_bundle_that_is_not_pem_or_holds_no_certificate_says_which() {
        let broken = b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
        for (pem, expected) in [
            (&broken[..], "not valid PEM"),
            (&b"just text"[..], "holds no certificate"),
        ] {
            for roots in [Roots::BundleOnly, Roots::SystemAndBundle] {
                let e = client_config("example.test", &settings(pem), roots).unwrap_err();
                assert_eq!(e.reason(), "TLSError", "{e}");
                assert!(e.to_string().contains(expected), "{e}");
            }
        }
    }

    #[test]
    fn the_system_roots_are_read_once_for_every_server() {
        let system = TlsSettings {
            ca_pem: None,
            insecure_skip_verify: false,
        };
        let a = client_config("a.example.test", &system, Roots::BundleOnly).unwrap();
        let b = client_config("b.example.test", &system, Roots::SystemAndBundle).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
