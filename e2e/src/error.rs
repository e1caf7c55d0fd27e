use std::path::PathBuf;

/// Why the test bed could not give a test what it asked for.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("test bed asset {path} is missing: run `make testbed` first ({hint})")]
    MissingAsset { path: PathBuf, hint: &'static str },

    #[error("could not start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{what} did not become ready within {seconds} s; last log lines:\n{log_tail}")]
    NotReady {
        what: String,
        seconds: u64,
        log_tail: String,
    },

    #[error("{what} exited early ({status}); last log lines:\n{log_tail}")]
    ExitedEarly {
        what: String,
        status: std::process::ExitStatus,
        log_tail: String,
    },

    #[error("could not generate certificates: {0}")]
    Certificates(#[from] rcgen::Error),

    #[error("invalid CRD file {path}: {source}")]
    InvalidCrd {
        path: PathBuf,
        #[source]
        source: yaml_serde::Error,
    },

    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),

    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    #[error("{0}")]
    Component(String),

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
