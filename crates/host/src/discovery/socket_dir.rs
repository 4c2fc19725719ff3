//! Sidecar plugins: Unix sockets named after their plugin in one directory.

use std::{
    collections::BTreeSet,
    os::unix::fs::FileTypeExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};

use super::{DiscoveryFuture, DiscoverySource, register};
use crate::registry::Registry;

/// Watches a directory of plugin sockets (`/plugins` by default): a socket
/// that appears is registered under its file name, one that disappears is
/// forgotten. The directory's modification time is checked every
/// `poll_interval`, and the directory is only listed when it changed.
#[derive(Debug, Clone)]
pub struct SocketDirectory {
    /// The directory.
    pub dir: PathBuf,
    /// Client tunables.
    pub options: ClientOptions,
    /// How often the directory is looked at. Default 1 s.
    pub poll_interval: Duration,
}

impl SocketDirectory {
    /// Watches `dir` with default options.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            options: ClientOptions::default(),
            poll_interval: Duration::from_secs(1),
        }
    }
}

/// The socket files of `dir`, by name (each a plugin named like its
/// socket). A missing directory has none.
pub fn sockets(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(e),
    };
    let mut names = BTreeSet::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_socket()
            && let Some(name) = entry.file_name().to_str()
        {
            names.insert(name.to_owned());
        }
    }
    Ok(names)
}

fn modified(dir: &Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

impl DiscoverySource for SocketDirectory {
    fn name(&self) -> String {
        format!("socket-dir:{}", self.dir.display())
    }

    fn run(self: Box<Self>, registry: Arc<Registry>) -> DiscoveryFuture {
        Box::pin(async move {
            let source = self.name();
            let mut known = BTreeSet::new();
            let mut last_modified = None;
            loop {
                let now_modified = modified(&self.dir);
                if now_modified.is_none() || now_modified != last_modified {
                    match sockets(&self.dir) {
                        Ok(found) => {
                            for gone in known.difference(&found) {
                                registry.remove(gone, &source);
                            }
                            for name in found.difference(&known) {
                                let path = self.dir.join(name);
                                let client = PluginClient::new(name, Transport::Unix { path }, &self.options);
                                register(&registry, &source, name, client).await;
                            }
                            known = found;
                            last_modified = now_modified;
                        }
                        Err(error) => {
                            tracing::error!(dir = %self.dir.display(), %error, "cannot list the plugin socket directory");
                            registry.options().metrics.discovery_error(&source);
                        }
                    }
                }
                // The directory was looked at once (listed, or not readable).
                registry.first_pass_done(&source);
                tokio::time::sleep(self.poll_interval).await;
            }
        })
    }
}
