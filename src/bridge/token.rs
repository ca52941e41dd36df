//! Who may call the bridge: with `--bearer-token-file`, only a client that sends that file's
//! token as `Authorization: Bearer …`. In a stdio McpServer's pod the file is the operator's
//! Secret `<name>-mcp-token`, which only the controller and the sidecars of the server's
//! namespace are given (the grants reference it like any credential), so no other process in
//! the cluster can call the server's tools with its environment — whatever the network allows.
//!
//! The file is read again for every request: the kubelet swaps a rotated Secret in place, and a
//! token file is a few bytes. The comparison takes the same time whatever the bytes.

use std::path::{Path, PathBuf};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rmcp::model::ErrorCode;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::mcp::serving::error_response;

/// The token clients must send, as a file.
#[derive(Debug, Clone)]
pub struct RequiredToken {
    path: PathBuf,
}

impl RequiredToken {
    pub fn new(path: &Path) -> Self {
        RequiredToken {
            path: path.to_path_buf(),
        }
    }

    /// Reads the token now: a file that cannot be read, or that is empty, is an error (the
    /// bridge then refuses every request instead of serving without a token).
    fn expected(&self) -> Result<String, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("{} is empty", self.path.display()));
        }
        Ok(token.to_string())
    }

    /// At start-up: the file must hold a token; returns it.
    pub fn check(&self) -> Result<String, String> {
        self.expected()
    }

    /// Ok when the request carries the token; otherwise the 401 to send.
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), Box<Response>> {
        let expected = match self.expected() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(reason = "TokenUnreadable", "refusing a request: {e}");
                return Err(Box::new(error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &Value::Null,
                    ErrorCode::INTERNAL_ERROR,
                    "the bridge cannot read its token file, so it serves nobody",
                )));
            }
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        match presented {
            Some(p) if same(p, &expected) => Ok(()),
            presented => {
                tracing::info!(
                    reason = if presented.is_some() {
                        "WrongToken"
                    } else {
                        "NoToken"
                    },
                    "refused a request without the bridge's token"
                );
                let mut response = error_response(
                    StatusCode::UNAUTHORIZED,
                    &Value::Null,
                    ErrorCode::INVALID_REQUEST,
                    "this MCP server answers only the mcp-operator sidecars and controller of its \
                     namespace: the request did not carry its bearer token",
                );
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"mcp-operator bridge\""),
                );
                Err(Box::new(response))
            }
        }
    }
}

/// Equal tokens, compared through their digests so that the time taken says nothing about
/// how many leading bytes matched.
fn same(presented: &str, expected: &str) -> bool {
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// A new token: 32 random bytes, hex.
pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    #[test]
    fn only_the_token_of_the_file_passes_and_a_rotated_file_takes_effect_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        let required = RequiredToken::new(&path);
        assert!(required.check().is_ok());
        assert!(required.authorize(&headers(Some("Bearer s3cret"))).is_ok());
        for wrong in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Basic s3cret"),
            Some("s3cret"),
        ] {
            let refused = required.authorize(&headers(wrong)).unwrap_err();
            assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{wrong:?}");
            assert!(refused.headers().contains_key(header::WWW_AUTHENTICATE));
        }
        std::fs::write(&path, "rotated").unwrap();
        assert!(required.authorize(&headers(Some("Bearer s3cret"))).is_err());
        assert!(required.authorize(&headers(Some("Bearer rotated"))).is_ok());
    }

    #[test]
    fn an_unreadable_or_empty_file_serves_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let required = RequiredToken::new(&path);
        assert!(required.check().unwrap_err().contains("cannot read"));
        assert_eq!(
            required
                .authorize(&headers(Some("Bearer ")))
                .unwrap_err()
                .status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        std::fs::write(&path, " \n").unwrap();
        assert!(required.check().unwrap_err().contains("empty"));
        assert!(required.authorize(&headers(Some("Bearer "))).is_err());
    }

    #[test]
    fn generated_tokens_are_long_and_differ() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
