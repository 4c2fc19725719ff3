//! A fixed list of plugins, given on the command line or in code.

use std::{path::PathBuf, sync::Arc, time::Duration};

use cnpgi_tls::pem;

use cnpgi_client::client::{ClientError, ClientOptions, PluginClient, TlsTransport, Transport};

use super::{DiscoveryFuture, DiscoverySource, register};
use crate::registry::Registry;

/// How to reach one statically configured plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticAddress {
    /// `unix:///path/to/socket`.
    Unix(PathBuf),
    /// `https://host:port` with mutual TLS, credentials read from files.
    Tls {
        /// `host:port`.
        address: String,
        /// Name to verify in the server certificate.
        server_name: String,
        /// PEM certificate presented to the plugin.
        client_cert: PathBuf,
        /// Its PEM key.
        client_key: PathBuf,
        /// The plugin's pinned PEM server certificate (or its CA).
        server_cert: PathBuf,
    },
}

/// One statically configured plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPlugin {
    /// The plugin name (must equal its metadata name).
    pub name: String,
    /// Where it is.
    pub address: StaticAddress,
}

/// Credentials for `https://` static plugins given on a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate presented to plugins.
    pub client_cert: PathBuf,
    /// Its PEM key.
    pub client_key: PathBuf,
    /// The pinned PEM server certificate (or CA).
    pub server_cert: PathBuf,
    /// Name to verify in the server certificate; the URL's host when `None`.
    pub server_name: Option<String>,
}

impl StaticPlugin {
    /// Parses `NAME=unix:///path/to/socket` or `NAME=https://host:port`
    /// (the latter needs `tls`).
    ///
    /// ```
    /// use cnpgi_host::discovery::static_list::{StaticAddress, StaticPlugin};
    ///
    /// let plugin = StaticPlugin::parse("hello.example.com=unix:///plugins/hello.example.com", None).unwrap();
    /// assert_eq!(plugin.address, StaticAddress::Unix("/plugins/hello.example.com".into()));
    /// assert!(StaticPlugin::parse("hello=https://plugin:9090", None).is_err());
    /// ```
    pub fn parse(spec: &str, tls: Option<&TlsFiles>) -> Result<Self, String> {
        let (name, address) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?}: expected NAME=unix:///path or NAME=https://host:port"))?;
        cnpgi_core::names::validate_plugin_name(name)?;
        let address = if let Some(path) = address.strip_prefix("unix://") {
            StaticAddress::Unix(PathBuf::from(path))
        } else if let Some(host_port) = address.strip_prefix("https://") {
            let host_port = host_port.trim_end_matches('/');
            let tls = tls.ok_or_else(|| {
                format!("{spec:?}: an https:// plugin needs --client-cert, --client-key and --server-ca")
            })?;
            let host = host_port
                .rsplit_once(':')
                .map(|(host, _)| host)
                .ok_or_else(|| format!("{spec:?}: expected https://host:port"))?;
            StaticAddress::Tls {
                address: host_port.to_owned(),
                server_name: tls
                    .server_name
                    .clone()
                    .unwrap_or_else(|| host.trim_matches(['[', ']']).to_owned()),
                client_cert: tls.client_cert.clone(),
                client_key: tls.client_key.clone(),
                server_cert: tls.server_cert.clone(),
            }
        } else {
            return Err(format!("{spec:?}: the address must start with unix:// or https://"));
        };
        Ok(Self {
            name: name.to_owned(),
            address,
        })
    }
}

/// Why a static plugin could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum StaticError {
    /// A credentials file is unusable.
    #[error("plugin {plugin}: {source}")]
    Tls {
        /// The plugin.
        plugin: String,
        /// What was wrong.
        source: cnpgi_tls::TlsError,
    },
    /// The client could not be created.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl StaticPlugin {
    /// Reads the credentials and creates the client.
    pub fn client(&self, options: &ClientOptions) -> Result<PluginClient, StaticError> {
        let transport = match &self.address {
            StaticAddress::Unix(path) => Transport::Unix { path: path.clone() },
            StaticAddress::Tls {
                address,
                server_name,
                client_cert,
                client_key,
                server_cert,
            } => {
                let tls = |source| StaticError::Tls {
                    plugin: self.name.clone(),
                    source,
                };
                Transport::Tls(TlsTransport {
                    address: address.clone(),
                    server_name: server_name.clone(),
                    client_cert: pem::read_certificates(client_cert, "client certificate").map_err(tls)?,
                    client_key: pem::read_private_key(client_key, "client key").map_err(tls)?,
                    server_cert: pem::read_certificates(server_cert, "server certificate").map_err(tls)?,
                })
            }
        };
        Ok(PluginClient::new(&self.name, transport, options)?)
    }
}

/// A fixed list of plugins. A plugin whose credentials cannot be read is
/// logged and retried every `retry_interval` (the files may appear later).
#[derive(Debug, Clone)]
pub struct StaticList {
    /// The plugins.
    pub plugins: Vec<StaticPlugin>,
    /// Client tunables.
    pub options: ClientOptions,
    /// Delay between attempts for a plugin that could not be set up. Default 10 s.
    pub retry_interval: Duration,
}

impl StaticList {
    /// A list with default options.
    pub fn new(plugins: Vec<StaticPlugin>) -> Self {
        Self {
            plugins,
            options: ClientOptions::default(),
            retry_interval: Duration::from_secs(10),
        }
    }
}

impl DiscoverySource for StaticList {
    fn name(&self) -> String {
        "static".to_owned()
    }

    fn run(self: Box<Self>, registry: Arc<Registry>) -> DiscoveryFuture {
        Box::pin(async move {
            let source = self.name();
            let mut pending = self.plugins.clone();
            loop {
                let mut failed = Vec::new();
                for plugin in pending {
                    let client = plugin.client(&self.options);
                    if !register(&registry, &source, &plugin.name, client).await {
                        failed.push(plugin);
                    }
                }
                // Every plugin of the list was attempted once.
                registry.first_pass_done(&source);
                if failed.is_empty() {
                    return std::future::pending().await;
                }
                pending = failed;
                tokio::time::sleep(self.retry_interval).await;
            }
        })
    }
}
