//! How a plugin is reached: its gRPC server, listeners (mutual TLS over TCP,
//! or a Unix socket), and what the server does under tonic for the clients
//! it serves.
//!
//! * [`PluginServer`] and [`PluginListener`] (`server.rs`): the routes
//!   (Identity, health, reflection and the plugin's services), the TLS
//!   accept loop, readiness and graceful shutdown;
//! * `batched_writes.rs`: a connection's writes held until the end of its
//!   task's turn, so that an answer is one socket write;
//! * `authority.rs`: Unix-socket clients whose `:authority` h2 refuses
//!   (grpcio, grpc-java, grpcurl send the socket path), their header blocks
//!   re-encoded.
//!
//! ```no_run
//! # async fn example<I: cnpgi_pluginhelper::proto::identity::v1::identity_server::Identity>(identity: I) -> Result<(), cnpgi_pluginhelper::transport::ServeError> {
//! use cnpgi_pluginhelper::transport::{PluginListener, PluginServer};
//!
//! let listener = PluginListener::bind_unix("/plugins".as_ref(), "example.com")?;
//! PluginServer::new(identity).serve(listener, std::future::pending()).await
//! # }
//! ```

mod authority;
mod batched_writes;
mod server;

pub use server::{GrpcService, PluginListener, PluginServer, ServeError, ServeOptions, SocketFile};
