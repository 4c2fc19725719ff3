//! The client side of CNPG-I: reaching plugins, probing them, holding them
//! to the protocol.
//!
//! What an operator does with a plugin before any routing decision, usable
//! without an operator (a plugin's own tests use it, through
//! `cnpgi-pluginhelper`'s `conformance` feature): no Kubernetes, no HTTP
//! server, no metrics library.
//!
//! * [`client`]: [`client::PluginClient`], one lazy HTTP/2 channel per plugin
//!   (mutual TLS over TCP, or a Unix socket), shared by every caller, with a
//!   deadline on every call and a [`client::CallObserver`] told about each;
//! * [`capabilities`]: each service's `GetCapabilities`, asked and read one way;
//! * [`probe`]: the CNPG-I probing sequence and the capabilities it yields
//!   ([`probe::PluginInfo`]);
//! * [`conformance`]: the conformance suite of `cnpgi-operator check-plugin`;
//! * [`instance`]: the instance side, beside PostgreSQL: WAL archiving and
//!   restoring, backups, restores and metrics through the plugins of a socket
//!   directory (`cnpgi-operator wal-archive`, `wal-restore`, `backup`,
//!   `restore`, `metrics`).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use cnpgi_client::{client::{ClientOptions, PluginClient, Transport}, probe::probe};
//!
//! let client = PluginClient::new(
//!     "cnpg-i-hello-world.cloudnative-pg.io",
//!     Transport::Unix { path: "/plugins/cnpg-i-hello-world.cloudnative-pg.io".into() },
//!     &ClientOptions::default(),
//! )?;
//! let info = probe(&client).await?;
//! println!("{} {}", info.metadata.name, info.metadata.version);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod capabilities;
pub mod client;
pub mod conformance;
pub mod instance;
pub mod probe;
