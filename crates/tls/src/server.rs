//! TLS 1.3 server configurations that follow their certificate files.
//!
//! Kubernetes rotates mounted Secrets by swapping files under the mount.
//! [`ReloadingServerConfig`] looks at the files (one `stat` each) whenever a
//! connection is accepted and rebuilds the rustls configuration when one of
//! them changed, so a rotated certificate or client CA is used by the next
//! connection without a restart. A rotation that leaves unreadable or
//! mismatched files is logged and the previous configuration kept.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::SystemTime,
};

use rustls::{ServerConfig, server::WebPkiClientVerifier};
use tokio_rustls::TlsAcceptor;

use crate::{ALPN_H2, TlsError, crypto_provider, pem, verify::PinnedClientVerifier};

/// The files a TLS server is configured from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// PEM certificate chain presented to clients (`tls.crt`).
    pub cert: PathBuf,
    /// PEM private key of that certificate (`tls.key`).
    pub key: PathBuf,
    /// PEM certificates clients must present or chain to. `None` disables
    /// client authentication (for admission webhooks, which the API server
    /// calls without a client certificate); CNPG-I plugins always set it.
    pub client_ca: Option<PathBuf>,
}

impl ServerTlsFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [
            Some(self.cert.as_path()),
            Some(self.key.as_path()),
            self.client_ca.as_deref(),
        ]
        .into_iter()
        .flatten()
    }

    /// Reads the files and builds a TLS 1.3-only configuration offering ALPN `h2`.
    pub fn load(&self) -> Result<ServerConfig, TlsError> {
        self.load_with_alpn(&[ALPN_H2])
    }

    /// Like [`ServerTlsFiles::load`], offering the given ALPN protocols
    /// (e.g. `h2` and `http/1.1` for an HTTPS server that is not only gRPC).
    pub fn load_with_alpn(&self, alpn: &[&[u8]]) -> Result<ServerConfig, TlsError> {
        let certs = pem::read_certificates(&self.cert, "server certificate")?;
        let key = pem::read_private_key(&self.key, "server key")?;
        let builder = ServerConfig::builder_with_provider(crypto_provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?;
        let builder = match &self.client_ca {
            Some(path) => {
                let pinned = pem::read_certificates(path, "client certificate")?;
                builder.with_client_cert_verifier(PinnedClientVerifier::new(pinned)?)
            }
            None => builder.with_client_cert_verifier(WebPkiClientVerifier::no_client_auth()),
        };
        let mut config = builder.with_single_cert(certs, key)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }
}

/// What identifies one version of a file without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
    })
}

#[derive(Debug)]
struct Loaded {
    stamps: Vec<Option<FileStamp>>,
    config: Arc<ServerConfig>,
}

/// A server configuration rebuilt when its files change.
#[derive(Debug)]
pub struct ReloadingServerConfig {
    files: ServerTlsFiles,
    alpn: Vec<&'static [u8]>,
    loaded: Mutex<Loaded>,
}

impl ReloadingServerConfig {
    /// Loads the files once (ALPN `h2`); fails if they are not usable now.
    pub fn new(files: ServerTlsFiles) -> Result<Arc<Self>, TlsError> {
        Self::with_alpn(files, &[ALPN_H2])
    }

    /// Like [`ReloadingServerConfig::new`], offering the given ALPN protocols.
    pub fn with_alpn(files: ServerTlsFiles, alpn: &[&'static [u8]]) -> Result<Arc<Self>, TlsError> {
        let stamps = files.paths().map(stamp).collect();
        let config = Arc::new(files.load_with_alpn(alpn)?);
        Ok(Arc::new(Self {
            files,
            alpn: alpn.to_vec(),
            loaded: Mutex::new(Loaded { stamps, config }),
        }))
    }

    /// The files this configuration follows.
    pub fn files(&self) -> &ServerTlsFiles {
        &self.files
    }

    /// The configuration to use for a new connection, re-read first if a file changed.
    pub fn current(&self) -> Arc<ServerConfig> {
        let stamps: Vec<_> = self.files.paths().map(stamp).collect();
        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        if loaded.stamps != stamps {
            // Record the stamps even on failure, so a broken rotation is
            // reported once rather than on every connection.
            loaded.stamps = stamps;
            match self.files.load_with_alpn(&self.alpn) {
                Ok(config) => {
                    tracing::info!(cert = %self.files.cert.display(), "TLS certificate files changed, reloaded");
                    loaded.config = Arc::new(config);
                }
                Err(error) => {
                    tracing::error!(%error, "TLS certificate files changed but cannot be used; keeping the previous ones");
                }
            }
        }
        loaded.config.clone()
    }

    /// A rustls acceptor for one new connection, with the current configuration.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestCert;

    fn write_pair(dir: &Path, prefix: &str, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
        let cert = TestCert::builder(&[name]).self_signed();
        let (cert_path, key_path) = cert.write(dir, prefix).unwrap();
        (cert_path, key_path, cert.cert_der().to_vec())
    }

    #[test]
    fn offers_only_tls13_and_h2() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = write_pair(dir.path(), "server", "plugin");
        let (client, _, _) = write_pair(dir.path(), "client", "client");
        let config = ServerTlsFiles {
            cert,
            key,
            client_ca: Some(client),
        }
        .load()
        .unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn mismatched_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _, _) = write_pair(dir.path(), "a", "plugin");
        let (_, other_key, _) = write_pair(dir.path(), "b", "plugin");
        let err = ServerTlsFiles {
            cert,
            key: other_key,
            client_ca: None,
        }
        .load()
        .unwrap_err();
        assert!(err.to_string().contains("invalid TLS configuration"), "{err}");
    }

    #[test]
    fn reloads_changed_files_and_keeps_old_config_on_bad_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = write_pair(dir.path(), "server", "plugin");
        let (client, _, _) = write_pair(dir.path(), "client", "client");
        let reloading = ReloadingServerConfig::new(ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: Some(client),
        })
        .unwrap();
        let first = reloading.current();
        assert!(
            Arc::ptr_eq(&first, &reloading.current()),
            "unchanged files are not reloaded"
        );

        // Rotate: write a new pair elsewhere and rename over, as Kubernetes does.
        let staging = tempfile::tempdir().unwrap();
        let (new_cert, new_key, _) = write_pair(staging.path(), "server", "plugin");
        fs::rename(new_cert, &cert).unwrap();
        fs::rename(new_key, &key).unwrap();
        let second = reloading.current();
        assert!(!Arc::ptr_eq(&first, &second), "rotated files are reloaded");

        // A broken rotation keeps serving with the last good configuration.
        fs::write(&cert, b"garbage").unwrap();
        let third = reloading.current();
        assert!(Arc::ptr_eq(&second, &third));
    }
}
