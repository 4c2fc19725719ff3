//! Where a table's server is, and how to log in: `spec.serverName` names a
//! CloudNativePG `Cluster` of the table's namespace.
//!
//! * **Address**: its read-write Service, `<serverName>-rw.<namespace>.svc`,
//!   port 5432 — or, for a plugin running outside the cluster (the process
//!   test, a port-forward), the `HOST:PORT` given by `--server-override
//!   NAME=HOST:PORT` (repeatable; `DBT_SERVER_OVERRIDES`, comma-separated).
//! * **Credentials**: the Secret CloudNativePG writes for the application,
//!   `<serverName>-app`, keys `username`, `password` and `dbname`, read
//!   through the Kubernetes API (the plugin's ServiceAccount needs `get` on
//!   Secrets; out of a cluster, `KUBECONFIG`), within [`SECRET_TIMEOUT`].

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::OnceCell;

/// PostgreSQL's port, CloudNativePG's Services'.
pub const PORT: u16 = 5432;

/// How long the API server has to answer for the Secret.
pub const SECRET_TIMEOUT: Duration = Duration::from_secs(10);

/// `HOST:PORT` by server name, from `--server-override`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Servers {
    overrides: BTreeMap<String, (String, u16)>,
}

/// One `--server-override`: `NAME=HOST:PORT` (an IPv6 host in brackets).
///
/// ```
/// use cnpgi_example_database_table_postgres::server::parse_override;
///
/// assert_eq!(parse_override("app-db=127.0.0.1:5433"), Ok(("app-db".into(), "127.0.0.1".into(), 5433)));
/// assert_eq!(parse_override("db=[::1]:5432"), Ok(("db".into(), "::1".into(), 5432)));
/// assert!(parse_override("app-db=127.0.0.1").is_err());
/// ```
pub fn parse_override(text: &str) -> Result<(String, String, u16), String> {
    let usage = || format!("{text:?} is not NAME=HOST:PORT (e.g. app-db=127.0.0.1:5432)");
    let (name, address) = text.trim().split_once('=').ok_or_else(usage)?;
    let (host, port) = address.rsplit_once(':').ok_or_else(usage)?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port: u16 = port.parse().map_err(|_| usage())?;
    if name.is_empty() || host.is_empty() || port == 0 {
        return Err(usage());
    }
    Ok((name.to_owned(), host.to_owned(), port))
}

impl Servers {
    /// The servers with these overrides (later ones win).
    pub fn new(overrides: impl IntoIterator<Item = (String, String, u16)>) -> Self {
        Self {
            overrides: overrides
                .into_iter()
                .map(|(name, host, port)| (name, (host, port)))
                .collect(),
        }
    }

    /// Where server `name` of `namespace` is: its override, else its
    /// CloudNativePG Cluster's read-write Service.
    ///
    /// ```
    /// use cnpgi_example_database_table_postgres::server::Servers;
    ///
    /// let servers = Servers::new([("local".to_owned(), "127.0.0.1".to_owned(), 5433)]);
    /// assert_eq!(servers.address("tables", "app-db"), ("app-db-rw.tables.svc".to_owned(), 5432));
    /// assert_eq!(servers.address("tables", "local"), ("127.0.0.1".to_owned(), 5433));
    /// ```
    pub fn address(&self, namespace: &str, name: &str) -> (String, u16) {
        match self.overrides.get(name) {
            Some((host, port)) => (host.clone(), *port),
            None => (format!("{name}-rw.{namespace}.svc"), PORT),
        }
    }
}

/// The Secret holding server `name`'s application credentials.
pub fn secret_name(name: &str) -> String {
    format!("{name}-app")
}

/// Why the credentials cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// No Kubernetes client could be configured.
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[source] kube::Error),
    /// The Secret could not be read.
    #[error("cannot read Secret {namespace}/{name} (the server's credentials, as CloudNativePG writes them): {source}")]
    Read {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What the API server said.
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("cannot read Secret {namespace}/{name}: no answer from the API server within {} s", SECRET_TIMEOUT.as_secs())]
    Timeout {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A key is missing or not UTF-8.
    #[error("Secret {namespace}/{name} has no UTF-8 {key:?} key (it needs username, password and dbname)")]
    MissingKey {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: &'static str,
    },
}

/// A user name, its password, and the database.
pub struct Credentials {
    /// The role.
    pub username: String,
    /// Its password.
    pub password: String,
    /// The database.
    pub dbname: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("dbname", &self.dbname)
            .finish_non_exhaustive()
    }
}

/// The client, configured once on first use and shared by every call.
static CLIENT: OnceCell<Client> = OnceCell::const_new();

/// Reads the credentials of server `server` of `namespace` (Secret `<server>-app`).
pub async fn credentials(namespace: &str, server: &str) -> Result<Credentials, CredentialsError> {
    let name = secret_name(server);
    let client = CLIENT
        .get_or_try_init(Client::try_default)
        .await
        .map_err(CredentialsError::Client)?;
    let read = tokio::time::timeout(
        SECRET_TIMEOUT,
        Api::<Secret>::namespaced(client.clone(), namespace).get(&name),
    )
    .await
    .map_err(|_| CredentialsError::Timeout {
        namespace: namespace.to_owned(),
        name: name.clone(),
    })?;
    let secret = read.map_err(|source| CredentialsError::Read {
        namespace: namespace.to_owned(),
        name: name.clone(),
        source,
    })?;
    from_secret(namespace, &name, &secret)
}

/// The credentials in `secret` (`namespace/name`).
pub fn from_secret(namespace: &str, name: &str, secret: &Secret) -> Result<Credentials, CredentialsError> {
    let key = |key: &'static str| {
        let value = secret.data.as_ref().and_then(|data| data.get(key));
        let value = value.and_then(|bytes| String::from_utf8(bytes.0.clone()).ok());
        value.ok_or_else(|| CredentialsError::MissingKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key,
        })
    };
    Ok(Credentials {
        username: key("username")?,
        password: key("password")?,
        dbname: key("dbname")?,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn overrides_are_name_equals_host_colon_port() {
        for bad in ["", "=h:1", "n=:1", "n=h:0", "n=h:x", "n=h:70000", "n"] {
            assert!(parse_override(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_override("n=h").unwrap_err().contains("NAME=HOST:PORT"));
        let servers = Servers::new([
            ("a".to_owned(), "h1".to_owned(), 1),
            ("a".to_owned(), "h2".to_owned(), 2),
        ]);
        assert_eq!(servers.address("ns", "a"), ("h2".to_owned(), 2), "the last one wins");
    }

    #[test]
    fn credentials_need_the_three_keys() {
        let secret = |keys: &[(&str, &str)]| Secret {
            data: Some(
                keys.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        };
        let full = secret(&[("username", "app"), ("password", "pw"), ("dbname", "app")]);
        let credentials = from_secret("ns", "db-app", &full).unwrap();
        assert_eq!(
            (credentials.username.as_str(), credentials.dbname.as_str()),
            ("app", "app")
        );
        assert!(!format!("{credentials:?}").contains("pw"), "the password is not shown");
        let missing = from_secret("ns", "db-app", &secret(&[("username", "app"), ("password", "pw")]));
        let message = missing.unwrap_err().to_string();
        assert!(message.contains("ns/db-app has no UTF-8 \"dbname\" key"), "{message}");
        assert_eq!(secret_name("db"), "db-app");
    }
}
