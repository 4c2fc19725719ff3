//! Mutual TLS for CNPG-I plugins and the operators that call them.
//!
//! CNPG-I trusts certificates the way Go's `crypto/tls` does with a pool of
//! roots: the peer's certificate must either chain to one of the pinned
//! CA certificates, or *be* one of the pinned certificates byte for byte (the
//! "pinned leaf" model, which is what cert-manager's `selfSigned` issuer and
//! hand-made certificates rely on). A pinned leaf never acts as an issuer. [`verify`] implements that for both sides on top of
//! rustls; [`server`] builds TLS 1.3-only server configurations that re-read
//! their certificate files when they change, so rotation needs no restart;
//! [`client`] builds the matching client configuration and a connector that
//! tonic channels can use.
//!
//! Only TLS 1.3 is offered, with ALPN `h2` (gRPC), and the `ring` crypto
//! provider.
//!
//! ```no_run
//! use cnpgi_tls::server::{ReloadingServerConfig, ServerTlsFiles};
//!
//! let config = ReloadingServerConfig::new(ServerTlsFiles {
//!     cert: "/certs/server/tls.crt".into(),
//!     key: "/certs/server/tls.key".into(),
//!     client_ca: Some("/certs/client/tls.crt".into()),
//! })?;
//! // Each new connection asks for the current configuration; a changed file
//! // is re-read then.
//! let _acceptor = config.acceptor();
//! # Ok::<(), cnpgi_tls::TlsError>(())
//! ```

#![forbid(unsafe_code)]

pub mod client;
mod error;
pub mod pem;
pub mod server;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verify;

pub use error::TlsError;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// ALPN protocol identifier of HTTP/2, which gRPC requires.
pub const ALPN_H2: &[u8] = b"h2";

/// The crypto provider every configuration of this crate uses (`ring`).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
