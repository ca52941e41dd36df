//! `/healthz`, `/readyz` and `/metrics` on one port. Ready means: the apiserver answered and this
//! replica is either leading with its watches started (every reconciler's main watch has listed
//! its kind; `watches::Started` flips the flag), or standing by as a follower.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

pub mod metrics;
pub mod readiness;

use super::error::StartError;
use metrics::Metrics;

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

/// Binds the address and serves until the process ends. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) -> Result<SocketAddr, StartError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| StartError::Serve(format!("binding {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| StartError::Serve(e.to_string()))?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Shared { metrics, ready });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("health and metrics server stopped: {e}");
        }
    });
    Ok(bound)
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
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
