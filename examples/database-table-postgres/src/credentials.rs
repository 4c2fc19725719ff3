//! The database credentials: the `username` and `password` keys of the
//! Secret a table names, read through the Kubernetes API (the plugin's
//! ServiceAccount needs `get` on Secrets; out of a cluster, `KUBECONFIG`).

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::OnceCell;

/// Why the credentials cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// No Kubernetes client could be configured.
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[source] kube::Error),
    /// The Secret could not be read.
    #[error("cannot read Secret {namespace}/{name}: {source}")]
    Read {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What the API server said.
        source: kube::Error,
    },
    /// A key is missing or not UTF-8.
    #[error("Secret {namespace}/{name} has no UTF-8 {key:?} key")]
    MissingKey {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key.
        key: &'static str,
    },
}

/// A user name and its password.
pub struct Credentials {
    /// The role.
    pub username: String,
    /// Its password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The client, configured once on first use and shared by every call.
static CLIENT: OnceCell<Client> = OnceCell::const_new();

/// Reads Secret `namespace/name`.
pub async fn read(namespace: &str, name: &str) -> Result<Credentials, CredentialsError> {
    let client = CLIENT
        .get_or_try_init(Client::try_default)
        .await
        .map_err(CredentialsError::Client)?;
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|source| CredentialsError::Read {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
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
    })
}
