use std::path::PathBuf;

/// What can go wrong while loading certificates or building TLS configurations.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {what} from {path}: {source}")]
    Read {
        /// Which file this was (e.g. "server certificate").
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file held no usable PEM block of the expected kind, or a malformed one.
    #[error("{what} at {path} is not valid PEM: {reason}")]
    Pem {
        /// Which file this was.
        what: &'static str,
        /// Its path (or `<memory>`).
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("invalid TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The certificate verifier could not be built from the pinned certificates.
    #[error("cannot build certificate verifier: {0}")]
    Verifier(String),
    /// A server name is not a valid DNS name or IP address.
    #[error("invalid TLS server name {name:?}: {reason}")]
    ServerName {
        /// The offending name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
}
