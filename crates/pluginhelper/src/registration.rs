//! Registering with an operator and keeping the lease: the plugin side of
//! `cnpgi.registration.v1`, this project's own service (not CNPG-I's).
//!
//! A cnpgi-rs host can discover plugins that announce themselves, beside
//! Services and socket directories (`cnpgi_host::discovery::registration`).
//! The `plugin` command does it with `--register-with=HOST:PORT`
//! (`CNPGI_REGISTER_WITH`); [`keep_registered`] is the same loop for a
//! plugin that serves itself.
//!
//! The loop, with a deadline on every call:
//!
//! 1. `Register` (name, version, the address the operator dials) over mutual
//!    TLS: the client certificate must name the plugin (a DNS name equal to
//!    the plugin name), the operator's certificate must be, or chain to,
//!    [`RegistrationTarget::operator_ca`]. A failure is retried after 1 s,
//!    doubling up to 30 s (the operator may be starting, a refused
//!    certificate may be rotated).
//! 2. `Heartbeat` every interval the operator asked for (a third of its
//!    TTL). A heartbeat that fails is retried sooner (1 s, doubling up to the
//!    interval), so that one lost call does not cost the lease.
//! 3. `NOT_FOUND` from a heartbeat means the operator no longer knows the
//!    lease (it restarted, or forgot the plugin): register again at once.

use std::{path::PathBuf, sync::Arc, time::Duration};

use cnpgi_proto::registration::v1::{HeartbeatRequest, RegisterRequest, registration_client::RegistrationClient};
use cnpgi_tls::{
    client::{TlsConnectorService, client_config, server_name},
    pem,
    verify::PinnedServerVerifier,
};
use tonic::transport::{Channel, Endpoint};

/// Where and how a plugin registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationTarget {
    /// The operator's registration endpoint, `host:port`.
    pub endpoint: String,
    /// PEM certificate the plugin presents: it must name the plugin (DNS
    /// name) and be trusted by the operator.
    pub client_cert: PathBuf,
    /// Its PEM key.
    pub client_key: PathBuf,
    /// PEM certificate(s) the operator's registration certificate must be,
    /// or chain to.
    pub operator_ca: PathBuf,
    /// Where the operator dials this plugin, `host:port` (the server
    /// certificate must carry the host, or `advertise_server_name`).
    pub advertise: String,
    /// The name the operator verifies in this plugin's server certificate,
    /// when not the host of `advertise`.
    pub advertise_server_name: Option<String>,
}

/// Why registration cannot run at all (as opposed to an operator not
/// answering, which is retried).
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The endpoint is not `host:port`.
    #[error(
        "--register-with (CNPGI_REGISTER_WITH) {endpoint:?}: expected the operator's registration endpoint as host:port"
    )]
    Endpoint {
        /// As given.
        endpoint: String,
    },
    /// The certificate files are unusable.
    #[error("--register-with: {0}")]
    Tls(#[from] cnpgi_tls::TlsError),
}

/// How long a `Register` may take: the operator probes the plugin before it
/// answers.
const REGISTER_DEADLINE: Duration = Duration::from_secs(20);
/// How long a `Heartbeat` may take at most (less when the interval is shorter).
const HEARTBEAT_DEADLINE: Duration = Duration::from_secs(10);
/// The first retry after a failure; retries double.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two `Register` attempts.
const MAX_REGISTER_RETRY: Duration = Duration::from_secs(30);

impl RegistrationTarget {
    /// A channel to the operator, reading the certificate files now.
    fn channel(&self) -> Result<Channel, RegistrationError> {
        let host = self
            .endpoint
            .rsplit_once(':')
            .map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
            .filter(|host| !host.is_empty())
            .ok_or_else(|| RegistrationError::Endpoint {
                endpoint: self.endpoint.clone(),
            })?;
        let config = client_config(
            pem::read_certificates(&self.client_cert, "registration client certificate")?,
            pem::read_private_key(&self.client_key, "registration client key")?,
            PinnedServerVerifier::new(pem::read_certificates(&self.operator_ca, "operator registration CA")?)?,
        )?;
        let connector = TlsConnectorService::new(Arc::new(config), server_name(host)?);
        // The connector does TLS: tonic sees plain http.
        let endpoint = Endpoint::from_shared(format!("http://{}", self.endpoint))
            .map_err(|_| RegistrationError::Endpoint {
                endpoint: self.endpoint.clone(),
            })?
            .connect_timeout(Duration::from_secs(5));
        Ok(endpoint.connect_with_connector_lazy(connector))
    }
}

/// Registers the plugin `name` (`version`) with the operator and keeps its
/// lease until the future is dropped. Returns only when the configuration is
/// unusable (the endpoint, the certificate files); an operator that does not
/// answer or refuses is logged and tried again.
pub async fn keep_registered(
    target: RegistrationTarget,
    name: String,
    version: String,
) -> Result<std::convert::Infallible, RegistrationError> {
    let mut register_retry = FIRST_RETRY;
    loop {
        // Files read at each registration: a rotated certificate is used
        // from the next one on.
        let mut client = RegistrationClient::new(target.channel()?);
        let mut request = tonic::Request::new(RegisterRequest {
            name: name.clone(),
            version: version.clone(),
            address: target.advertise.clone(),
            server_name: target.advertise_server_name.clone().unwrap_or_default(),
        });
        request.set_timeout(REGISTER_DEADLINE);
        let lease = match tokio::time::timeout(REGISTER_DEADLINE, client.register(request)).await {
            Ok(Ok(answer)) => answer.into_inner(),
            failed => {
                let error = match failed {
                    Ok(Err(status)) => format!("{:?}: {}", status.code(), status.message()),
                    _ => format!("no answer within {} s", REGISTER_DEADLINE.as_secs()),
                };
                tracing::warn!(
                    operator = %target.endpoint,
                    %error,
                    retry_in_s = register_retry.as_secs(),
                    "cannot register with the operator"
                );
                tokio::time::sleep(register_retry).await;
                register_retry = (register_retry * 2).min(MAX_REGISTER_RETRY);
                continue;
            }
        };
        register_retry = FIRST_RETRY;
        let interval = Duration::from_secs(u64::from(lease.heartbeat_interval_seconds.max(1)));
        tracing::info!(
            operator = %target.endpoint,
            address = %target.advertise,
            ttl_s = lease.ttl_seconds,
            "registered with the operator"
        );
        heartbeat_until_lost(&mut client, &target, &name, &lease.lease_id, interval).await;
    }
}

/// Beats every `interval` until the operator says it lost the lease.
async fn heartbeat_until_lost(
    client: &mut RegistrationClient<Channel>,
    target: &RegistrationTarget,
    name: &str,
    lease_id: &str,
    interval: Duration,
) {
    let deadline = HEARTBEAT_DEADLINE.min(interval);
    let mut wait = interval;
    let mut retry = FIRST_RETRY.min(interval);
    loop {
        tokio::time::sleep(wait).await;
        let mut request = tonic::Request::new(HeartbeatRequest {
            name: name.to_owned(),
            lease_id: lease_id.to_owned(),
        });
        request.set_timeout(deadline);
        match tokio::time::timeout(deadline, client.heartbeat(request)).await {
            Ok(Ok(_)) => {
                wait = interval;
                retry = FIRST_RETRY.min(interval);
            }
            Ok(Err(status)) if status.code() == tonic::Code::NotFound => {
                tracing::info!(operator = %target.endpoint, reason = %status.message(), "the operator lost the lease: registering again");
                return;
            }
            failed => {
                let error = match failed {
                    Ok(Err(status)) => format!("{:?}: {}", status.code(), status.message()),
                    _ => format!("no answer within {} ms", deadline.as_millis()),
                };
                tracing::warn!(operator = %target.endpoint, %error, "heartbeat failed; retrying");
                wait = retry;
                retry = (retry * 2).min(interval);
            }
        }
    }
}
