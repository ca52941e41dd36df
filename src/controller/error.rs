//! Why a reconcile failed (not why a server is down: that is status, not an error). Each variant's
//! reason is a metric label and a log word.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("apiserver request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("the CRDs are not installed: {0}")]
    CrdsMissing(String),
    #[error("leader election failed: {0}")]
    LeaderElection(String),
    #[error("the health and metrics server could not start: {0}")]
    Serve(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "ApiError",
            Error::CrdsMissing(_) => "CrdsMissing",
            Error::LeaderElection(_) => "LeaderElection",
            Error::Serve(_) => "Serve",
        }
    }
}
