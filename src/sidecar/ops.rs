//! `/healthz`, `/readyz` (with reasons) and `/metrics`. Ready means: a good grants document is
//! loaded and every required server's tools have been read. An optional server that is down
//! does not make the sidecar not ready; a grants file that went bad keeps it ready on the last
//! good document, and `/readyz` says so.
//!
//! `/readyz` is served on every address of the pod (the kubelet probes it), so anyone who reaches
//! the pod reads it: it counts missing credentials ("not ready: 2 credentials missing") and never
//! names a Secret, a ConfigMap or a key; the sidecar's log names them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use super::grants_file::GrantsState;
use super::listing::View;
use super::metrics::Metrics;

pub struct Readiness {
    grants: watch::Receiver<GrantsState>,
    view: watch::Receiver<Arc<View>>,
}

impl Readiness {
    pub fn new(grants: watch::Receiver<GrantsState>, view: watch::Receiver<Arc<View>>) -> Self {
        Readiness { grants, view }
    }

    /// Whether the sidecar is ready, and the sentences saying why (not).
    pub fn check(&self) -> (bool, Vec<String>) {
        let grants = self.grants.borrow().clone();
        let view = Arc::clone(&self.view.borrow());
        judge(&grants, &view)
    }

    /// How many credential files the sidecar lacks now.
    pub fn missing_credentials(&self) -> usize {
        missing_credentials(&self.view.borrow())
    }
}

/// Pure: the readiness verdict from the grants state and the view built from it.
pub fn judge(grants: &GrantsState, view: &View) -> (bool, Vec<String>) {
    let mut ready = true;
    let mut reasons = Vec::new();
    match (&grants.current, &grants.problem) {
        (None, _) => {
            ready = false;
            reasons.push(format!(
                "nothing is granted: {}",
                grants.why_nothing().unwrap_or_default()
            ));
            // Revoked or gone, then a document that was refused: both are news.
            if let (Some(_), Some(problem)) = (&grants.nothing_granted, &grants.problem) {
                reasons.push(format!("the newest file was not used: {problem}"));
            }
        }
        (Some(good), Some(problem)) => reasons.push(format!(
            "serving the last good grants ({}); the newest file was not used: {problem}",
            good.digest
        )),
        (Some(_), None) => {}
    }
    let same_grants = match (&grants.current, &view.grants) {
        (Some(a), Some(b)) => a.digest == b.digest,
        (None, None) => true,
        _ => false,
    };
    if !same_grants {
        ready = false;
        reasons.push("applying the newest grants".into());
    }
    for server in &view.reading {
        ready = false;
        reasons.push(format!("reading the tools of server {server}"));
    }
    for u in &view.unavailable {
        let why = match u.missing_credentials.len() {
            0 => u.reason.clone(),
            n => format!("{} missing (named in the sidecar's log)", credentials(n)),
        };
        if u.optional {
            reasons.push(format!(
                "optional server {} is unavailable: {why}",
                u.server
            ));
        } else {
            ready = false;
            reasons.push(format!(
                "required server {} is unavailable: {why}",
                u.server
            ));
        }
    }
    (ready, reasons)
}

/// How many distinct credential files the servers of `view` lack.
pub fn missing_credentials(view: &View) -> usize {
    view.unavailable
        .iter()
        .flat_map(|u| &u.missing_credentials)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

fn credentials(n: usize) -> String {
    match n {
        1 => "1 credential".into(),
        n => format!("{n} credentials"),
    }
}

#[derive(Clone)]
struct Shared {
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
}

pub fn router(readiness: Arc<Readiness>, metrics: Arc<Metrics>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Shared { readiness, metrics })
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    let (ready, reasons) = s.readiness.check();
    let mut text = if ready {
        "ok".to_string()
    } else {
        "not ready".to_string()
    };
    match s.readiness.missing_credentials() {
        0 => {}
        n => text.push_str(&format!(": {} missing", credentials(n))),
    }
    for r in reasons {
        text.push_str("\n- ");
        text.push_str(&r);
    }
    text.push('\n');
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, text)
}

async fn metrics_text(State(s): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sidecar::grants_file::Loaded;
    use crate::sidecar::listing::Unavailable;

    fn loaded() -> Arc<Loaded> {
        let doc = crate::grants::GrantsDocument::new(vec![]);
        let digest = doc.digest();
        Arc::new(Loaded::new(doc, digest))
    }

    #[test]
    fn ready_needs_grants_and_every_required_server() {
        let none = GrantsState {
            nothing_granted: Some("the grants file /g does not exist".into()),
            ..GrantsState::default()
        };
        let (ready, reasons) = judge(&none, &View::default());
        assert!(!ready);
        assert!(reasons[0].contains("does not exist"));
        let revoked = GrantsState {
            nothing_granted: Some(
                "the grants were revoked: the AgentSpec a/b is being deleted".into(),
            ),
            sequence: Some(3),
            ..GrantsState::default()
        };
        let (ready, reasons) = judge(&revoked, &View::default());
        assert!(!ready);
        assert_eq!(
            reasons,
            ["nothing is granted: the grants were revoked: the AgentSpec a/b is being deleted"]
        );
        let refused = GrantsState {
            problem: Some("the grants file /g is not the operator's: it is not signed".into()),
            ..GrantsState::default()
        };
        let (ready, reasons) = judge(&refused, &View::default());
        assert!(!ready);
        assert!(reasons[0].contains("not signed"), "{reasons:?}");

        let good = GrantsState {
            current: Some(loaded()),
            ..GrantsState::default()
        };
        let mut view = View {
            grants: Some(loaded()),
            ..View::default()
        };
        assert_eq!(judge(&good, &view), (true, vec![]));

        view.unavailable.push(Unavailable {
            server: "cache".into(),
            optional: true,
            reason: "connection refused".into(),
            missing_credentials: vec![],
        });
        let (ready, reasons) = judge(&good, &view);
        assert!(ready, "an optional server does not block");
        assert!(reasons[0].contains("optional server cache"));

        view.unavailable.push(Unavailable {
            server: "files".into(),
            optional: false,
            reason: "401".into(),
            missing_credentials: vec![],
        });
        view.reading.push("other".into());
        let (ready, reasons) = judge(&good, &view);
        assert!(!ready);
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("required server files is unavailable: 401"))
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.contains("reading the tools of server other"))
        );

        let kept = GrantsState {
            current: Some(loaded()),
            problem: Some("not JSON".into()),
            ..GrantsState::default()
        };
        let (ready, reasons) = judge(
            &kept,
            &View {
                grants: Some(loaded()),
                ..View::default()
            },
        );
        assert!(ready, "the last good grants are served");
        assert!(reasons[0].contains("last good") && reasons[0].contains("not JSON"));
    }

    #[test]
    fn missing_credentials_are_counted_and_never_named() {
        let good = GrantsState {
            current: Some(loaded()),
            problem: None,
            nothing_granted: None,
            sequence: None,
        };
        let sentence =
            "Secret files-token key token is not mounted (no file /c/secrets/files-token/token)";
        let view = View {
            grants: Some(loaded()),
            unavailable: vec![
                Unavailable {
                    server: "files".into(),
                    optional: false,
                    reason: sentence.into(),
                    missing_credentials: vec![
                        "secrets/files-token/token".into(),
                        "secrets/files-ca/ca.crt".into(),
                    ],
                },
                // The same key for another server is one credential missing, not two.
                Unavailable {
                    server: "files-admin".into(),
                    optional: true,
                    reason: sentence.into(),
                    missing_credentials: vec!["secrets/files-token/token".into()],
                },
            ],
            ..View::default()
        };
        let (ready, reasons) = judge(&good, &view);
        assert!(!ready);
        assert_eq!(missing_credentials(&view), 2);
        assert_eq!(
            reasons,
            [
                "required server files is unavailable: 2 credentials missing (named in the sidecar's log)",
                "optional server files-admin is unavailable: 1 credential missing (named in the sidecar's log)",
            ]
        );
        assert!(
            reasons
                .iter()
                .all(|r| !r.contains("files-token") && !r.contains("token is"))
        );
    }
}
