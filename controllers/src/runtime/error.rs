//! Why a reconcile failed.

/// Why a reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(String),
    /// A write built on a cached object the API server has since moved past (the cache has not
    /// heard yet): retried shortly, without backoff, as the watch catches up.
    #[error("the cache is behind: {0}")]
    Stale(String),
    #[error("provider: {0}")]
    Provider(#[from] meridian_providers::ProviderError),
    #[error("waiting: {0}")]
    Waiting(String),
    /// A write refused because this replica may no longer hold the Lease.
    #[error("fenced: {0}")]
    Fenced(crate::runtime::fence::Fenced),
    #[error("the reconcile ended abnormally: {0}")]
    Aborted(String),
}

impl Error {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Stale(_) => "stale",
            Error::Provider(_) => "provider",
            Error::Waiting(_) => "waiting",
            Error::Fenced(_) => "fenced",
            Error::Aborted(_) => "aborted",
        }
    }
}
