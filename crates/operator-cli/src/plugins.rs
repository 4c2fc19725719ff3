//! Plugin flags shared by `run`, `render` and `check-plugin`, and starting
//! plugins for the local commands.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use clap::Args;
use cnpgi_client::client::{ClientOptions, NO_DEADLINE, PluginClient, Transport};
use cnpgi_host::{
    Host,
    discovery::static_list::{StaticPlugin, TlsFiles},
};
use cnpgi_operator::crd::Cluster;

/// Where plugins are.
#[derive(Debug, Clone, Args)]
pub(crate) struct PluginFlags {
    /// Sidecar plugins' sockets in this directory (repeatable; the
    /// environment variable takes a comma-separated list).
    #[arg(
        long = "plugin-dir",
        env = "CNPGI_PLUGIN_DIR",
        value_name = "DIR",
        value_delimiter = ','
    )]
    pub(crate) plugin_dirs: Vec<PathBuf>,

    /// A plugin, NAME=unix:///path or NAME=https://host:port (repeatable;
    /// the environment variable takes a comma-separated list).
    #[arg(
        long = "plugin",
        env = "CNPGI_PLUGINS",
        value_name = "NAME=ADDRESS",
        value_delimiter = ','
    )]
    pub(crate) plugins: Vec<String>,

    /// Certificate presented to https:// plugins.
    #[arg(long, env = "CNPGI_CLIENT_CERT", value_name = "FILE", requires_all = ["client_key", "server_ca"])]
    pub(crate) client_cert: Option<PathBuf>,

    /// Key of --client-cert.
    #[arg(long, env = "CNPGI_CLIENT_KEY", value_name = "FILE", requires = "client_cert")]
    pub(crate) client_key: Option<PathBuf>,

    /// Pinned server certificate (or CA) of https:// plugins.
    #[arg(long, env = "CNPGI_SERVER_CA", value_name = "FILE", requires = "client_cert")]
    pub(crate) server_ca: Option<PathBuf>,

    /// Server name to verify for https:// plugins (default: the URL host).
    #[arg(long, env = "CNPGI_SERVER_NAME", value_name = "NAME")]
    pub(crate) server_name: Option<String>,
}

impl PluginFlags {
    pub(crate) fn static_plugins(&self) -> anyhow::Result<Vec<StaticPlugin>> {
        let tls = match (&self.client_cert, &self.client_key, &self.server_ca) {
            (Some(client_cert), Some(client_key), Some(server_cert)) => Some(TlsFiles {
                client_cert: client_cert.clone(),
                client_key: client_key.clone(),
                server_cert: server_cert.clone(),
                server_name: self.server_name.clone(),
            }),
            _ => None,
        };
        self.plugins
            .iter()
            .map(|spec| StaticPlugin::parse(spec, tls.as_ref()).map_err(|e| anyhow::anyhow!("--plugin {e}")))
            .collect()
    }
}

/// Plugins for a local command: the shared flags plus binaries to start.
#[derive(Debug, Clone, Args)]
pub(crate) struct LocalPluginFlags {
    /// A plugin binary to start as `PATH plugin --plugin-path <temp dir>` (repeatable).
    #[arg(long = "plugin-exec", value_name = "PATH")]
    pub(crate) execs: Vec<PathBuf>,

    #[command(flatten)]
    pub(crate) flags: PluginFlags,

    /// Deadline of each plugin call, and of a --plugin-exec plugin's start
    /// (until its socket is open), in seconds (0: none).
    #[arg(
        long,
        env = "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    pub(crate) plugin_timeout_seconds: u64,
}

/// Why a plugin could not be set up; the command exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PluginStartError(pub(crate) String);

/// A started plugin process, leader of its own process group. Dropping it
/// kills the whole group (the plugin and anything it started), reaps the
/// plugin and removes its temporary directory, so neither outlives the
/// command, including when the command is stopped by SIGTERM or SIGINT
/// (`main.rs` turns those into an orderly return through these drops).
struct PluginProcess {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // The group's ID is the plugin's PID (`process_group(0)`).
            // `kill(1)` keeps this crate free of `unsafe` and of a libc binding.
            let group = format!("-{}", self.child.id());
            let killed = Command::new("kill")
                .args(["-KILL", "--", &group])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if !killed {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// The plugins of a local command, connected.
pub(crate) struct LocalPlugins {
    /// (name it was found under, where it came from, client), in the order found.
    pub(crate) found: Vec<(String, String, PluginClient)>,
    _processes: Vec<PluginProcess>,
}

/// Plugin sockets in `dir`, sorted; an unreadable directory has none.
fn sockets(dir: &Path) -> Vec<String> {
    cnpgi_host::discovery::socket_dir::sockets(dir)
        .map(|names| names.into_iter().collect())
        .unwrap_or_default()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Starts a plugin binary and waits for its socket, at most `timeout`.
async fn start_process(path: &Path, timeout: Duration) -> Result<(PluginProcess, PathBuf, String), PluginStartError> {
    let dir = tempfile::tempdir().map_err(|e| PluginStartError(format!("cannot create a temporary directory: {e}")))?;
    let log = dir.path().join("plugin.log");
    let sockets_dir = dir.path().join("sockets");
    std::fs::create_dir(&sockets_dir).map_err(|e| PluginStartError(e.to_string()))?;
    let stderr = std::fs::File::create(&log).map_err(|e| PluginStartError(e.to_string()))?;
    eprintln!("starting plugin {} …", path.display());
    let child = Command::new(path)
        // Its own process group: killed as a whole on drop, and a terminal's
        // Ctrl-C reaches this command only, which then stops the plugin.
        .process_group(0)
        .arg("plugin")
        .arg(format!("--plugin-path={}", sockets_dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| PluginStartError(format!("cannot start plugin {}: {e}", path.display())))?;
    let mut process = PluginProcess { child, _dir: dir };
    let started = Instant::now();
    loop {
        // The file exists from bind(); it accepts connections from listen().
        let listening = sockets(&sockets_dir)
            .into_iter()
            .find(|name| std::os::unix::net::UnixStream::connect(sockets_dir.join(name)).is_ok());
        if let Some(name) = listening {
            eprintln!("plugin {name} listening ({} ms)", started.elapsed().as_millis());
            return Ok((process, sockets_dir, name));
        }
        if let Ok(Some(status)) = process.child.try_wait() {
            let output = tail(&log);
            return Err(PluginStartError(if output.trim().is_empty() {
                format!(
                    "plugin {} exited ({status}) before serving, printing nothing: is it a CNPG-I plugin? \
                     --plugin-exec starts it as `{} plugin --plugin-path DIR` and waits for a socket in DIR",
                    path.display(),
                    path.display()
                )
            } else {
                format!("plugin {} exited ({status}) before serving:\n{output}", path.display())
            }));
        }
        if started.elapsed() > timeout {
            return Err(PluginStartError(format!(
                "plugin {} did not open its socket within {} s (--plugin-timeout-seconds):\n{}",
                path.display(),
                timeout.as_secs_f64(),
                tail(&log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl LocalPlugins {
    /// Starts and connects every plugin the flags name, and registers each
    /// in `host` (which probes it). Each must be routable, or the error
    /// names it.
    pub(crate) async fn start(flags: &LocalPluginFlags, host: &Host<Cluster>) -> Result<Self, PluginStartError> {
        let plugins = Self::connect(flags).await?;
        for (name, origin, client) in &plugins.found {
            host.add_plugin(origin, client.clone())
                .await
                .map_err(|e| PluginStartError(e.to_string()))?;
            if let Err(e) = host.routable(name) {
                return Err(PluginStartError(format!(
                    "plugin {name} ({origin}) does not answer: {e}"
                )));
            }
        }
        Ok(plugins)
    }

    /// Starts and connects every plugin the flags name, without probing.
    pub(crate) async fn connect(flags: &LocalPluginFlags) -> Result<Self, PluginStartError> {
        let options = ClientOptions {
            call_timeout: crate::instance::deadline(flags.plugin_timeout_seconds).unwrap_or(NO_DEADLINE),
            connect_timeout: Duration::from_secs(5),
            ..ClientOptions::default()
        };
        let mut processes = Vec::new();
        let mut candidates: Vec<(String, String, Result<PluginClient, String>)> = Vec::new();

        for path in &flags.execs {
            let (process, dir, name) = start_process(path, options.call_timeout).await?;
            let client = PluginClient::new(&name, Transport::Unix { path: dir.join(&name) }, &options)
                .map_err(|e| e.to_string());
            candidates.push((name, format!("{}", path.display()), client));
            processes.push(process);
        }
        for dir in &flags.flags.plugin_dirs {
            let names = sockets(dir);
            if names.is_empty() {
                return Err(PluginStartError(format!("no plugin socket in {}", dir.display())));
            }
            for name in names {
                let client = PluginClient::new(&name, Transport::Unix { path: dir.join(&name) }, &options)
                    .map_err(|e| e.to_string());
                candidates.push((name, dir.display().to_string(), client));
            }
        }
        for plugin in flags
            .flags
            .static_plugins()
            .map_err(|e| PluginStartError(e.to_string()))?
        {
            let client = plugin.client(&options).map_err(|e| e.to_string());
            candidates.push((plugin.name.clone(), "--plugin".to_owned(), client));
        }

        let mut found = Vec::new();
        for (name, origin, client) in candidates {
            let client = client.map_err(|e| PluginStartError(format!("plugin {name} ({origin}): {e}")))?;
            found.push((name, origin, client));
        }
        Ok(Self {
            found,
            _processes: processes,
        })
    }
}
