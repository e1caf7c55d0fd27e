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
    /// A provider refused a write planned on records another writer has since changed (every
    /// provider write is conditional): retried shortly, after a fresh read and plan, without
    /// backoff, until that has happened [`crate::reconcile::context::RACED_STREAK`] times in a
    /// row.
    #[error("the records changed since they were read: {0}")]
    Raced(String),
    #[error("provider: {0}")]
    Provider(meridian_providers::ProviderError),
    #[error("waiting: {0}")]
    Waiting(String),
    /// A write refused because this replica may no longer hold the Lease.
    #[error("fenced: {0}")]
    Fenced(crate::runtime::fence::Fenced),
    #[error("the reconcile ended abnormally: {0}")]
    Aborted(String),
}

impl From<meridian_providers::ProviderError> for Error {
    fn from(error: meridian_providers::ProviderError) -> Self {
        match error {
            meridian_providers::ProviderError::Stale(message) => Error::Raced(message),
            other => Error::Provider(other),
        }
    }
}

impl Error {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Stale(_) => "stale",
            Error::Raced(_) => "raced",
            Error::Provider(_) => "provider",
            Error::Waiting(_) => "waiting",
            Error::Fenced(_) => "fenced",
            Error::Aborted(_) => "aborted",
        }
    }

    /// Whether this replica's own fence refused the write: a provider batch checked
    /// ([`Error::Fenced`]), or a request the client's fence layer never sent (a
    /// [`kube::Error::Service`] carrying the refusal). The Lease lapsed or moved; the object is
    /// not at fault.
    pub fn is_fenced(&self) -> bool {
        match self {
            Error::Fenced(_) => true,
            Error::Kube(kube::Error::Service(error)) => error
                .downcast_ref::<crate::runtime::fence::Fenced>()
                .is_some(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fence::Fenced;

    #[test]
    fn a_refusal_of_the_fence_is_told_apart_however_it_came() {
        let expired = Fenced::Expired {
            term: 2,
            late_ms: 40,
        };
        assert!(Error::Fenced(expired.clone()).is_fenced());
        assert!(Error::Kube(kube::Error::Service(Box::new(expired))).is_fenced());
        let other: tower::BoxError = "connection reset".into();
        assert!(!Error::Kube(kube::Error::Service(other)).is_fenced());
        assert!(!Error::Waiting("the first list".into()).is_fenced());
    }
}
