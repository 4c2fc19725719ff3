//! The instance side: what CloudNativePG's instance manager does with the
//! plugins beside PostgreSQL, usable by a plain PostgreSQL without
//! Kubernetes (`cnpgi-operator wal-archive`, `wal-restore`, `backup`,
//! `restore`, `metrics`).
//!
//! Plugins are sidecars listening on Unix sockets named after them in one
//! directory (`/plugins` in a CloudNativePG Pod). As CloudNativePG's
//! per-call clients do, every call scans the directory, keeps the plugins
//! the Cluster enables that have a socket (others are skipped silently),
//! and connects to them: `GetPluginMetadata`, `GetPluginCapabilities`, and
//! `GetCapabilities` of the one service the call needs ([`connect`]).
//!
//! * [`wal`]: `WAL.Archive` on every archiving plugin, `WAL.Restore` from the
//!   first that has the file;
//! * [`archive_ahead`]: the segments PostgreSQL will ask for next archived
//!   beside the one it asks for, and its later requests answered from a
//!   spool;
//! * [`backup`]: `Backup.Backup`, `RestoreJobHooks.Restore` and the recovery
//!   configuration CloudNativePG writes after it;
//! * [`commands`]: CloudNativePG's instance-manager commands in a plugin's
//!   `restore_config`, mapped to `cnpgi-operator`'s;
//! * [`metrics`]: `Metrics.Define` and `Collect`, checked as CloudNativePG
//!   checks them, in the Prometheus text format.

pub mod archive_ahead;
pub mod backup;
pub mod commands;
pub mod metrics;
pub mod wal;

use std::{
    collections::BTreeSet,
    os::unix::fs::FileTypeExt as _,
    path::{Path, PathBuf},
};

use cnpgi_core::{capabilities::ServiceType, echo::bounded_string};

use crate::{
    client::{ClientError, ClientOptions, PluginClient, Transport},
    probe::{PluginInfo, ProbeError, probe_only},
};

/// A plugin of the instance, connected and probed.
#[derive(Debug, Clone)]
pub struct InstancePlugin {
    /// Its name (the socket's, checked against its metadata).
    pub name: String,
    /// The client on its socket.
    pub client: PluginClient,
    /// What probing it taught.
    pub info: PluginInfo,
}

/// Why an instance-side call failed. Every message is one line naming the
/// plugin, the call and the reason.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The socket directory cannot be read.
    #[error("cannot read the plugin socket directory {dir}: {source}")]
    SocketDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A plugin client could not be created.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A plugin did not answer the probing sequence.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// A plugin answered an error.
    #[error("plugin {plugin}: {rpc} failed: {code:?}: {message}")]
    Call {
        /// The plugin.
        plugin: String,
        /// The RPC, e.g. `WAL/Archive`.
        rpc: &'static str,
        /// The gRPC code.
        code: tonic::Code,
        /// The status message (bounded).
        message: String,
    },
    /// The plugin a call needs has no socket.
    #[error("plugin {plugin} is not available: no socket {}", socket.display())]
    Unavailable {
        /// The plugin.
        plugin: String,
        /// Where its socket should be.
        socket: PathBuf,
    },
    /// The plugin a call needs does not offer it.
    #[error("plugin {plugin} does not offer {what}")]
    Unsupported {
        /// The plugin.
        plugin: String,
        /// What it lacks, e.g. `TYPE_BACKUP_SERVICE`.
        what: String,
    },
    /// No plugin could do what was asked.
    #[error("{0}")]
    NoPlugin(String),
    /// A plugin's answer is not usable.
    #[error("plugin {plugin}: {rpc} returned an unusable answer: {reason}")]
    BadAnswer {
        /// The plugin.
        plugin: String,
        /// The RPC.
        rpc: &'static str,
        /// Why.
        reason: String,
    },
    /// A file named like a WAL segment cannot be one.
    #[error("{} is not a whole WAL segment: {reason}; refusing to archive it", path.display())]
    NotASegment {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: cnpgi_core::wal_segment::SegmentError,
    },
    /// The Cluster could not be encoded.
    #[error("cannot encode the Cluster as JSON: {0}")]
    Encode(#[from] serde_json::Error),
    /// A file the call writes could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the file.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

impl InstanceError {
    /// [`InstanceError::Call`] from a status.
    pub fn call(plugin: &str, rpc: &'static str, status: &tonic::Status) -> Self {
        Self::Call {
            plugin: plugin.to_owned(),
            rpc,
            code: status.code(),
            message: bounded_string(status.message().replace('\n', " ")),
        }
    }
}

/// The plugin sockets in `dir`, by name; none when `dir` does not exist.
///
/// # Errors
///
/// [`InstanceError::SocketDir`] when `dir` exists but cannot be read.
pub fn sockets(dir: &Path) -> Result<BTreeSet<String>, InstanceError> {
    let error = |source| InstanceError::SocketDir {
        dir: dir.to_owned(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(error(e)),
    };
    let mut names = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(error)?;
        if entry.file_type().map_err(error)?.is_socket()
            && let Some(name) = entry.file_name().to_str()
        {
            names.insert(name.to_owned());
        }
    }
    Ok(names)
}

/// Where the instance's plugins are, and how to call them.
#[derive(Debug, Clone)]
pub struct InstanceOptions {
    /// The socket directory (`/plugins` in a CloudNativePG Pod).
    pub socket_dir: PathBuf,
    /// Deadlines of the calls.
    pub client: ClientOptions,
}

/// The plugins among `names` that have a socket, connected and probed for
/// `services`, sorted by name and de-duplicated; and the names that have no
/// socket (skipped, as CloudNativePG's per-call clients skip them).
///
/// # Errors
///
/// The first plugin that cannot be reached or does not answer the probing
/// sequence (a plugin that died leaves its socket behind: connecting fails).
pub async fn connect<'a>(
    names: impl IntoIterator<Item = &'a str>,
    services: &[ServiceType],
    options: &InstanceOptions,
) -> Result<(Vec<InstancePlugin>, Vec<String>), InstanceError> {
    let present = sockets(&options.socket_dir)?;
    let wanted: BTreeSet<&str> = names.into_iter().collect();
    let mut plugins = Vec::new();
    let mut missing = Vec::new();
    for name in wanted {
        if !present.contains(name) {
            missing.push(name.to_owned());
            continue;
        }
        let client = PluginClient::new(
            name,
            Transport::Unix {
                path: options.socket_dir.join(name),
            },
            &options.client,
        )?;
        let info = probe_only(&client, services).await?;
        plugins.push(InstancePlugin {
            name: name.to_owned(),
            client,
            info,
        });
    }
    Ok((plugins, missing))
}

/// The one plugin `name`, connected and probed for `service`, which it must
/// advertise.
///
/// # Errors
///
/// [`InstanceError::Unavailable`] without its socket,
/// [`InstanceError::Unsupported`] when it does not advertise `service`, or
/// why it could not be reached.
pub async fn connect_one(
    name: &str,
    service: ServiceType,
    options: &InstanceOptions,
) -> Result<InstancePlugin, InstanceError> {
    let (mut plugins, _) = connect([name], &[service], options).await?;
    let Some(plugin) = plugins.pop() else {
        return Err(InstanceError::Unavailable {
            plugin: name.to_owned(),
            socket: options.socket_dir.join(name),
        });
    };
    if !plugin.info.has_service(service) {
        return Err(InstanceError::Unsupported {
            plugin: name.to_owned(),
            what: service.as_str_name().to_owned(),
        });
    }
    Ok(plugin)
}

/// `names` as a readable list: `a, b` or `(none)`.
fn list(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    }
}
