//! Errors by layer. [`StartError`]: the controller could not start or keep running (the process
//! exits with it). [`ReconcileError`]: one reconcile could not do one of its writes; the
//! reconcile is retried. Why a server is down or an agent not ready is neither: that is status.
//!
//! Each [`ReconcileError`] variant names the kind of write that failed, and that word is the
//! `result` label of `mcp_operator_reconciles_total` (beside `ok`) and the `reason` of the log
//! line.

/// Why the controller could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("apiserver request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("the CRDs are not installed: {0}")]
    CrdsMissing(String),
    #[error("leader election failed: {0}")]
    LeaderElection(String),
    #[error("the health and metrics server could not start: {0}")]
    Serve(String),
    #[error("the sidecar-injection webhook could not start: {0}")]
    Webhook(String),
}

impl StartError {
    /// The log word.
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::Kube(_) => "ApiError",
            StartError::CrdsMissing(_) => "CrdsMissing",
            StartError::LeaderElection(_) => "LeaderElection",
            StartError::Serve(_) => "Serve",
            StartError::Webhook(_) => "Webhook",
        }
    }
}

/// Which write of one reconcile the apiserver refused.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Applying the object's status.
    #[error("writing the status failed: {0}")]
    StatusPatch(#[source] kube::Error),
    /// Reading or applying an AgentSpec's grants ConfigMap.
    #[error("publishing the grants ConfigMap failed: {0}")]
    GrantsConfigMap(#[source] kube::Error),
    /// Reading or applying an McpServer's companion ConfigMap of a large catalogue.
    #[error("writing the catalogue ConfigMap failed: {0}")]
    CatalogSpillWrite(#[source] kube::Error),
    /// Deleting the companion ConfigMap once the catalogue fits in status again.
    #[error("removing the catalogue ConfigMap failed: {0}")]
    CatalogSpillRemove(#[source] kube::Error),
    /// Reading back the companion ConfigMap that holds a pinned catalogue's pins.
    #[error("reading the catalogue ConfigMap failed: {0}")]
    CatalogSpillRead(#[source] kube::Error),
    /// Reading or writing the pins kept in the operator's namespace.
    #[error("reading or writing the kept pins failed: {0}")]
    PinStore(#[source] kube::Error),
    /// Reading, applying or removing a stdio McpServer's Deployment or Service (or reading its
    /// pods).
    #[error("reconciling the stdio server's Deployment or Service failed: {0}")]
    Workload(#[source] kube::Error),
    /// No keyring to sign grants with (not created yet, or broken): nothing is published.
    #[error("{0}")]
    SigningKeys(String),
    /// Adding or removing the AgentSpec's finalizer `mcp-operator.dev/revoke-grants`.
    #[error("updating the AgentSpec's finalizer failed: {0}")]
    Finalizer(#[source] kube::Error),
}

impl ReconcileError {
    /// The metric label and log word.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::StatusPatch(_) => "StatusPatch",
            ReconcileError::GrantsConfigMap(_) => "GrantsConfigMap",
            ReconcileError::CatalogSpillWrite(_) => "CatalogSpillWrite",
            ReconcileError::CatalogSpillRemove(_) => "CatalogSpillRemove",
            ReconcileError::CatalogSpillRead(_) => "CatalogSpillRead",
            ReconcileError::PinStore(_) => "PinStore",
            ReconcileError::Workload(_) => "Workload",
            ReconcileError::SigningKeys(_) => "SigningKeys",
            ReconcileError::Finalizer(_) => "Finalizer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_write_has_its_own_label() {
        let refused = || {
            kube::Error::Api(
                kube::core::Status::failure("conflict", "Conflict")
                    .with_code(409)
                    .boxed(),
            )
        };
        let labels: Vec<_> = [
            ReconcileError::StatusPatch(refused()),
            ReconcileError::GrantsConfigMap(refused()),
            ReconcileError::CatalogSpillWrite(refused()),
            ReconcileError::CatalogSpillRemove(refused()),
            ReconcileError::CatalogSpillRead(refused()),
            ReconcileError::PinStore(refused()),
            ReconcileError::Workload(refused()),
            ReconcileError::SigningKeys("no keys".into()),
            ReconcileError::Finalizer(refused()),
        ]
        .iter()
        .map(ReconcileError::reason)
        .collect();
        assert_eq!(
            labels,
            [
                "StatusPatch",
                "GrantsConfigMap",
                "CatalogSpillWrite",
                "CatalogSpillRemove",
                "CatalogSpillRead",
                "PinStore",
                "Workload",
                "SigningKeys",
                "Finalizer"
            ]
        );
    }
}
