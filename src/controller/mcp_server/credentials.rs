//! Resolves what an McpServer refers to — bearer token, header values, CA bundle — from Secrets
//! and ConfigMaps in its namespace into the plain connection settings `mcp` takes. Errors name the
//! object and key, never a value.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use crate::api::mcp_server::{FromSecret, McpServer, McpServerSpec, OAuth2GrantType};
use crate::core::{ConfigMapKeySelector, SecretKeySelector};
use crate::mcp::oauth::OAuthSettings;
use crate::mcp::{Credentials, SecretValue, TlsSettings};

/// Why the credentials could not be resolved. The reason words appear in the
/// `CredentialsResolved` condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("Secret {name:?} (referenced by {field}) does not exist in namespace {namespace:?}")]
    SecretNotFound {
        namespace: String,
        name: String,
        field: String,
    },
    #[error("Secret {name:?} has no key {key:?} (referenced by {field})")]
    SecretKeyNotFound {
        name: String,
        key: String,
        field: String,
    },
    #[error("ConfigMap {name:?} (referenced by {field}) does not exist in namespace {namespace:?}")]
    ConfigMapNotFound {
        namespace: String,
        name: String,
        field: String,
    },
    #[error("ConfigMap {name:?} has no key {key:?} (referenced by {field})")]
    ConfigMapKeyNotFound {
        name: String,
        key: String,
        field: String,
    },
    #[error(
        "the value of Secret {name:?} key {key:?} (referenced by {field}) is not valid UTF-8 text"
    )]
    NotText {
        name: String,
        key: String,
        field: String,
    },
    #[error("reading {kind} {name:?} failed: {detail}")]
    ApiError {
        kind: &'static str,
        name: String,
        detail: String,
    },
}

impl CredentialError {
    pub fn reason(&self) -> &'static str {
        match self {
            CredentialError::SecretNotFound { .. } => "SecretNotFound",
            CredentialError::SecretKeyNotFound { .. } => "SecretKeyNotFound",
            CredentialError::ConfigMapNotFound { .. } => "ConfigMapNotFound",
            CredentialError::ConfigMapKeyNotFound { .. } => "ConfigMapKeyNotFound",
            CredentialError::NotText { .. } => "SecretNotText",
            CredentialError::ApiError { .. } => "SecretReadFailed",
        }
    }
}

/// The resolved settings, and a digest of every resolved value so a change (a rotated token)
/// can be noticed without keeping the values around.
pub struct Resolved {
    pub credentials: Credentials,
    pub tls: TlsSettings,
    pub digest: String,
    /// When each Secret and ConfigMap read last changed (None: it does not say), so a
    /// restarted controller can tell whether one changed while it was down.
    pub references_changed: Vec<Option<Timestamp>>,
}

/// The latest time an object's metadata records a change at: its creation or any manager's
/// last write.
fn last_changed(meta: &ObjectMeta) -> Option<Timestamp> {
    let written = meta
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.time.as_ref().map(|t| t.0));
    meta.creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .into_iter()
        .chain(written)
        .max()
}

/// Reads the referenced Secrets and ConfigMaps.
pub async fn resolve(
    client: &Client,
    namespace: &str,
    server: &McpServer,
) -> Result<Resolved, CredentialError> {
    let spec = &server.spec;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut hasher = Sha256::new();
    let mut changed = Vec::new();
    let mut credentials = Credentials::default();
    if let Some(creds) = &server.credentials() {
        if let Some(bearer) = &creds.bearer_token {
            let field = if spec.stdio.is_some() {
                "the stdio server's token"
            } else {
                "spec.credentials.bearerToken.secretKeyRef"
            };
            let token = secret_text(
                &secrets,
                namespace,
                &bearer.secret_key_ref,
                field,
                &mut changed,
            )
            .await?;
            hasher.update(b"bearer\0");
            hasher.update(token.as_bytes());
            credentials.bearer_token = Some(SecretValue::new(token.trim()));
        }
        for (i, header) in creds.headers.iter().enumerate() {
            let field = format!("spec.credentials.headers[{i}].valueFrom.secretKeyRef");
            let value = secret_text(
                &secrets,
                namespace,
                &header.value_from.secret_key_ref,
                &field,
                &mut changed,
            )
            .await?;
            hasher.update(header.name.as_bytes());
            hasher.update(b"\0");
            hasher.update(value.as_bytes());
            credentials
                .headers
                .push((header.name.clone(), SecretValue::new(value.trim())));
        }
        if let Some(o) = &creds.oauth2 {
            let settings = read_oauth2(&secrets, namespace, o, &mut changed).await?;
            hasher.update(b"oauth2\0");
            hasher.update(settings.digest().as_bytes());
            credentials.oauth2 = Some(settings);
        }
    }
    let tls = read_tls(&secrets, &config_maps, namespace, spec, &mut changed).await?;
    if let Some(pem) = &tls.ca_pem {
        hasher.update(b"ca\0");
        hasher.update(pem);
    }
    hasher.update(if tls.insecure_skip_verify {
        b"insecure"
    } else {
        b"verify\0\0"
    });
    Ok(Resolved {
        credentials,
        tls,
        digest: hex::encode(hasher.finalize()),
        references_changed: changed,
    })
}

/// The OAuth settings of spec.credentials.oauth2, with the client secret and refresh token read
/// from their Secrets.
async fn read_oauth2(
    secrets: &Api<Secret>,
    namespace: &str,
    o: &crate::api::mcp_server::OAuth2,
    changed: &mut Vec<Option<Timestamp>>,
) -> Result<OAuthSettings, CredentialError> {
    let mut read = async |name: &str, r: &Option<FromSecret>| match r {
        Some(r) => {
            let field = format!("spec.credentials.oauth2.{name}.secretKeyRef");
            secret_text(secrets, namespace, &r.secret_key_ref, &field, changed)
                .await
                .map(|v| Some(SecretValue::new(v.trim())))
        }
        None => Ok(None),
    };
    let client_secret = read("clientSecret", &o.client_secret).await?;
    let refresh_token = read("refreshToken", &o.refresh_token).await?;
    Ok(oauth_settings(o, client_secret, refresh_token))
}

/// spec.tls, with its CA bundle read from the Secret or ConfigMap it names.
async fn read_tls(
    secrets: &Api<Secret>,
    config_maps: &Api<ConfigMap>,
    namespace: &str,
    spec: &McpServerSpec,
    changed: &mut Vec<Option<Timestamp>>,
) -> Result<TlsSettings, CredentialError> {
    let mut tls = TlsSettings::default();
    let Some(t) = &spec.tls else {
        return Ok(tls);
    };
    tls.insecure_skip_verify = t.insecure_skip_verify;
    if let Some(bundle) = &t.ca_bundle {
        let pem = if let Some(r) = &bundle.secret_key_ref {
            let field = "spec.tls.caBundle.secretKeyRef";
            secret_bytes(secrets, namespace, r, field, changed).await?
        } else if let Some(r) = &bundle.config_map_key_ref {
            let field = "spec.tls.caBundle.configMapKeyRef";
            config_map_bytes(config_maps, namespace, r, field, changed).await?
        } else {
            Vec::new()
        };
        tls.ca_pem = Some(pem);
    }
    Ok(tls)
}

/// The token client's settings from the spec and the values read.
pub fn oauth_settings(
    o: &crate::api::mcp_server::OAuth2,
    client_secret: Option<SecretValue>,
    refresh_token: Option<SecretValue>,
) -> OAuthSettings {
    OAuthSettings {
        token_url: o.token_url.clone(),
        client_id: o.client_id.clone(),
        client_secret,
        refresh_token: match o.grant_type {
            OAuth2GrantType::RefreshToken => refresh_token,
            OAuth2GrantType::ClientCredentials => None,
        },
        scopes: o.scopes.iter().map(|s| s.0.clone()).collect(),
        audience: o.audience.clone(),
        resource: o.resource.clone(),
    }
}

/// The bytes of a ConfigMap key (`data` or `binaryData`), noting when the ConfigMap last
/// changed.
async fn config_map_bytes(
    config_maps: &Api<ConfigMap>,
    namespace: &str,
    r: &ConfigMapKeySelector,
    field: &str,
    changed: &mut Vec<Option<Timestamp>>,
) -> Result<Vec<u8>, CredentialError> {
    let cm = config_maps
        .get_opt(&r.name)
        .await
        .map_err(|e| api_error("ConfigMap", &r.name, e))?
        .ok_or_else(|| CredentialError::ConfigMapNotFound {
            namespace: namespace.into(),
            name: r.name.clone(),
            field: field.into(),
        })?;
    changed.push(last_changed(&cm.metadata));
    cm.data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|s| s.as_bytes().to_vec())
        .or_else(|| {
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(&r.key))
                .map(|b| b.0.clone())
        })
        .ok_or_else(|| CredentialError::ConfigMapKeyNotFound {
            name: r.name.clone(),
            key: r.key.clone(),
            field: field.into(),
        })
}

async fn secret_bytes(
    secrets: &Api<Secret>,
    namespace: &str,
    selector: &SecretKeySelector,
    field: &str,
    changed: &mut Vec<Option<Timestamp>>,
) -> Result<Vec<u8>, CredentialError> {
    let secret = secrets
        .get_opt(&selector.name)
        .await
        .map_err(|e| api_error("Secret", &selector.name, e))?
        .ok_or_else(|| CredentialError::SecretNotFound {
            namespace: namespace.into(),
            name: selector.name.clone(),
            field: field.into(),
        })?;
    changed.push(last_changed(&secret.metadata));
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(&selector.key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(&selector.key))
                .map(|s| s.as_bytes().to_vec())
        })
        .ok_or_else(|| CredentialError::SecretKeyNotFound {
            name: selector.name.clone(),
            key: selector.key.clone(),
            field: field.into(),
        })
}

async fn secret_text(
    secrets: &Api<Secret>,
    namespace: &str,
    selector: &SecretKeySelector,
    field: &str,
    changed: &mut Vec<Option<Timestamp>>,
) -> Result<String, CredentialError> {
    let bytes = secret_bytes(secrets, namespace, selector, field, changed).await?;
    String::from_utf8(bytes).map_err(|_| CredentialError::NotText {
        name: selector.name.clone(),
        key: selector.key.clone(),
        field: field.into(),
    })
}

fn api_error(kind: &'static str, name: &str, e: kube::Error) -> CredentialError {
    // A kube API error carries the apiserver's status message, never the object's data.
    let detail = match &e {
        kube::Error::Api(status) => format!("{} ({})", status.reason, status.code),
        other => other.to_string(),
    };
    CredentialError::ApiError {
        kind,
        name: name.into(),
        detail,
    }
}
