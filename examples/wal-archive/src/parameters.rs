//! The plugin's parameters and the configuration they make.
//!
//! A Cluster configures the plugin in its `spec.plugins[]` entry (the archive
//! it writes to) and, to recover from another cluster's archive, in the
//! `plugin` of a `spec.externalClusters[]` entry. Both take the same
//! parameters, listed in the README; all are optional:
//!
//! | parameter | default | meaning |
//! |---|---|---|
//! | `destinationPath` | `/var/lib/postgresql/data/wal-archive` | `/abs/dir`, `file:///abs/dir` or `s3://bucket[/prefix]` |
//! | `endpointURL` | AWS | an S3-compatible endpoint, `http(s)://host[:port]` |
//! | `region` | `us-east-1` | the S3 region |
//! | `s3CredentialsSecret` | | Secret with `ACCESS_KEY_ID` and `ACCESS_SECRET_KEY` |
//! | `serverName` | the Cluster's (or external cluster's) name | folder of this cluster in the store |
//! | `compressionLevel` | `1` | zstd level, 1 to 19 (1 is the fastest, and on WAL stores no more than 3: BENCHMARKS.md) |
//! | `keepBackups` | keep all | backups to keep, with the WAL they need |
//! | `pgHost`, `pgPort`, `pgUser`, `pgDatabase` | `/controller/run`, `5432`, `postgres`, `postgres` | how the backup connects to PostgreSQL |
//!
//! [`validate`] reports every bad parameter with machinery's path
//! convention (`["spec", "plugins", "<index>", "<parameter>"]`; for an
//! external cluster `["spec", "externalClusters", "<index>", "plugin",
//! "parameters", "<parameter>"]`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use cnpgi_pluginhelper::{
    cluster::Cluster,
    parameters::{Parameter, ParameterSchema, ParsedParameters},
    proto::operator::v1::ValidationError,
    validation,
};

use crate::cluster::{ClusterView, ExternalCluster};
use crate::metadata::PLUGIN_NAME;
pub use crate::storage::store::{Location, StoreConfig};

/// Where the archive is.
pub const DESTINATION_PATH: &str = "destinationPath";
/// The S3-compatible endpoint.
pub const ENDPOINT_URL: &str = "endpointURL";
/// The S3 region.
pub const REGION: &str = "region";
/// The Secret holding S3 credentials.
pub const S3_CREDENTIALS_SECRET: &str = "s3CredentialsSecret";
/// The cluster's folder in the store.
pub const SERVER_NAME: &str = "serverName";
/// zstd level.
pub const COMPRESSION_LEVEL: &str = "compressionLevel";
/// Retention: backups to keep.
pub const KEEP_BACKUPS: &str = "keepBackups";
/// PostgreSQL's socket directory (or host).
pub const PG_HOST: &str = "pgHost";
/// PostgreSQL's port.
pub const PG_PORT: &str = "pgPort";
/// The user the backup connects as.
pub const PG_USER: &str = "pgUser";
/// The database the backup connects to.
pub const PG_DATABASE: &str = "pgDatabase";

/// The default archive: beside PGDATA, on the instance's own volume. Fine to
/// try the plugin; not a backup (it shares the fate of the volume).
pub const DEFAULT_DESTINATION: &str = "/var/lib/postgresql/data/wal-archive";

/// The declared parameters.
pub fn schema() -> ParameterSchema {
    ParameterSchema::new()
        .with(Parameter::string(DESTINATION_PATH).default(DEFAULT_DESTINATION))
        .with(Parameter::string(ENDPOINT_URL))
        .with(Parameter::string(REGION).default("us-east-1"))
        .with(Parameter::string(S3_CREDENTIALS_SECRET))
        .with(Parameter::string(SERVER_NAME))
        .with(Parameter::integer(COMPRESSION_LEVEL).range(1..=19).default("1"))
        .with(Parameter::integer(KEEP_BACKUPS).range(1..=10_000))
        .with(Parameter::string(PG_HOST).default("/controller/run"))
        .with(Parameter::integer(PG_PORT).range(1..=65535).default("5432"))
        .with(Parameter::string(PG_USER).default("postgres"))
        .with(Parameter::string(PG_DATABASE).default("postgres"))
        .deny_unknown()
}

/// How the backup reaches PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConnection {
    /// Socket directory (starting with `/`) or host name.
    pub host: String,
    /// Port.
    pub port: u16,
    /// User.
    pub user: String,
    /// Database.
    pub database: String,
}

/// The plugin's configuration for one Cluster (or external cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where objects go.
    pub store: StoreConfig,
    /// zstd level.
    pub compression_level: i32,
    /// Backups to keep (all when `None`).
    pub keep_backups: Option<usize>,
    /// The connection of backups.
    pub postgres: PgConnection,
    /// `s3CredentialsSecret`, for the sidecar's environment.
    pub credentials_secret: Option<String>,
}

/// Why a Cluster gives no usable configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The plugin is not in `spec.plugins`.
    #[error("the Cluster does not list {PLUGIN_NAME} in spec.plugins")]
    NotEnabled,
    /// The parameters are invalid.
    #[error("{}", validation::describe(.0))]
    Invalid(Vec<ValidationError>),
}

impl From<ConfigError> for tonic::Status {
    fn from(error: ConfigError) -> Self {
        match error {
            ConfigError::NotEnabled => tonic::Status::failed_precondition(error.to_string()),
            ConfigError::Invalid(errors) => validation::to_status(&errors),
        }
    }
}

/// Where validation errors of a parameter set go.
#[derive(Debug, Clone)]
enum Origin {
    /// `spec.plugins[index]`.
    Plugin(usize),
    /// `spec.externalClusters[index].plugin`.
    External(usize),
}

impl Origin {
    fn path(&self, parameter: &str) -> Vec<String> {
        let mut path: Vec<String> = match self {
            Origin::Plugin(index) => vec!["spec".into(), "plugins".into(), index.to_string()],
            Origin::External(index) => vec![
                "spec".into(),
                "externalClusters".into(),
                index.to_string(),
                "plugin".into(),
                "parameters".into(),
            ],
        };
        path.push(parameter.to_owned());
        path
    }

    fn error(&self, parameter: &str, value: &str, message: impl Into<String>) -> ValidationError {
        validation::error(self.path(parameter), value, message)
    }

    /// Moves errors made by the schema (always for plugin index 0) here.
    fn relocate(&self, errors: Vec<ValidationError>) -> Vec<ValidationError> {
        errors
            .into_iter()
            .map(|mut error| {
                if let Some(parameter) = error.path_components.last().cloned() {
                    error.path_components = self.path(&parameter);
                }
                error
            })
            .collect()
    }
}

/// A name usable as one folder of a key: letters, digits, `.`, `_`, `-`.
fn is_folder_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// An RFC 1123 subdomain, as Kubernetes names Secrets.
fn is_secret_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn parse_destination(raw: &str) -> Result<Destination, String> {
    if let Some(rest) = raw.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'));
        if !valid_bucket {
            return Err("the bucket of an s3:// URL must be 3 to 63 lowercase letters, digits, '.' or '-'".into());
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|part| part == "." || part == "..") || prefix.contains("//") {
            return Err("the prefix of an s3:// URL must not contain '.', '..' or empty segments".into());
        }
        return Ok(Destination::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        });
    }
    let path = raw.strip_prefix("file://").unwrap_or(raw);
    if !path.starts_with('/') {
        return Err("must be an absolute directory, a file:/// URL or an s3://bucket[/prefix] URL".into());
    }
    if path.split('/').any(|part| part == "..") {
        return Err("must not contain '..'".into());
    }
    Ok(Destination::Local(PathBuf::from(path)))
}

enum Destination {
    Local(PathBuf),
    S3 { bucket: String, prefix: String },
}

fn parse_endpoint(raw: &str) -> Result<(), String> {
    let rest = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .ok_or("must start with https:// (or http:// for a store without TLS)")?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains(['/', '?', '#', ' ', '@']) {
        return Err("must be a scheme and a host[:port], without a path".into());
    }
    Ok(())
}

/// `endpointURL` and `s3CredentialsSecret`, if set; their errors, and
/// theirs on a local `destination`, go to `errors`.
fn s3_settings(
    parsed: &ParsedParameters,
    origin: &Origin,
    destination: Option<&Destination>,
    errors: &mut Vec<ValidationError>,
) -> (Option<String>, Option<String>) {
    let text = |name: &str| parsed.string(name).map(str::to_owned).unwrap_or_default();
    let endpoint = parsed.is_set(ENDPOINT_URL).then(|| text(ENDPOINT_URL));
    if let Some(endpoint) = &endpoint
        && let Err(message) = parse_endpoint(endpoint)
    {
        errors.push(origin.error(ENDPOINT_URL, endpoint, message));
    }
    let secret = parsed
        .is_set(S3_CREDENTIALS_SECRET)
        .then(|| text(S3_CREDENTIALS_SECRET));
    if let Some(secret) = &secret
        && !is_secret_name(secret)
    {
        errors.push(origin.error(
            S3_CREDENTIALS_SECRET,
            secret,
            "must be a Secret name: lowercase letters, digits, '-' and '.'",
        ));
    }
    if matches!(destination, Some(Destination::Local(_))) {
        for (name, value) in [(ENDPOINT_URL, &endpoint), (S3_CREDENTIALS_SECRET, &secret)] {
            if let Some(value) = value {
                errors.push(origin.error(name, value, "only applies to an s3:// destinationPath"));
            }
        }
    }
    (endpoint, secret)
}

/// `serverName`, else `default_server`; its error goes to `errors`.
fn server_name(
    parsed: &ParsedParameters,
    origin: &Origin,
    default_server: &str,
    errors: &mut Vec<ValidationError>,
) -> String {
    let server_name = if parsed.is_set(SERVER_NAME) {
        parsed.string(SERVER_NAME).unwrap_or_default().to_owned()
    } else {
        default_server.to_owned()
    };
    if !is_folder_name(&server_name) {
        let message = if parsed.is_set(SERVER_NAME) {
            "must be letters, digits, '.', '_' or '-'"
        } else {
            "is required when the cluster has no usable name"
        };
        errors.push(origin.error(SERVER_NAME, &server_name, message));
    }
    server_name
}

/// Builds the configuration from a parameter map; every problem at once.
fn build(
    params: &BTreeMap<String, String>,
    origin: &Origin,
    default_server: &str,
) -> Result<Config, Vec<ValidationError>> {
    let parsed: ParsedParameters = schema().parse(0, params).map_err(|e| origin.relocate(e))?;
    // The schema declares every name and type read here, so these cannot fail.
    let text = |name: &str| parsed.string(name).map(str::to_owned).unwrap_or_default();
    let number = |name: &str| parsed.integer(name).unwrap_or_default();

    let mut errors = Vec::new();
    let destination_raw = text(DESTINATION_PATH);
    let destination = parse_destination(&destination_raw)
        .map_err(|message| errors.push(origin.error(DESTINATION_PATH, &destination_raw, message)))
        .ok();
    let (endpoint, secret) = s3_settings(&parsed, origin, destination.as_ref(), &mut errors);
    let server_name = server_name(&parsed, origin, default_server, &mut errors);
    let pg_host = text(PG_HOST);
    if pg_host.contains(['\'', '\\', ' ']) {
        errors.push(origin.error(PG_HOST, &pg_host, "must be a directory or host name"));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let location = match destination {
        Some(Destination::Local(path)) => Location::Local(path),
        Some(Destination::S3 { bucket, prefix }) => Location::S3 {
            bucket,
            prefix,
            endpoint,
            region: text(REGION),
        },
        None => return Err(errors),
    };
    Ok(Config {
        store: StoreConfig { location, server_name },
        compression_level: number(COMPRESSION_LEVEL) as i32,
        keep_backups: parsed.is_set(KEEP_BACKUPS).then(|| number(KEEP_BACKUPS) as usize),
        postgres: PgConnection {
            host: pg_host,
            port: number(PG_PORT) as u16,
            user: text(PG_USER),
            database: text(PG_DATABASE),
        },
        credentials_secret: secret,
    })
}

/// The configuration of the Cluster's own archive (its `spec.plugins[]`
/// entry; `serverName` defaults to the Cluster's name).
///
/// # Errors
///
/// [`ConfigError::NotEnabled`] without an entry, [`ConfigError::Invalid`]
/// with bad parameters.
pub fn own(cluster: &Cluster) -> Result<Config, ConfigError> {
    let entry = cluster.plugin(PLUGIN_NAME).ok_or(ConfigError::NotEnabled)?;
    let view = ClusterView::new(cluster);
    build(entry.parameters(), &Origin::Plugin(entry.index), view.name()).map_err(ConfigError::Invalid)
}

/// The configuration of an external cluster's archive (`serverName`
/// defaults to the external cluster's name, as barman-cloud's).
///
/// # Errors
///
/// [`ConfigError::Invalid`] with bad parameters.
pub fn external(external: &ExternalCluster) -> Result<Config, ConfigError> {
    build(
        &external.plugin.parameters,
        &Origin::External(external.index),
        &external.name,
    )
    .map_err(ConfigError::Invalid)
}

/// The archive WAL is restored from: the recovery source's while the
/// Cluster is being created from it (no current primary yet), else the
/// Cluster's own. A standby or `pg_rewind` of a running cluster must never
/// read another cluster's timelines.
///
/// # Errors
///
/// As [`own`] and [`external`].
pub fn for_wal_restore(cluster: &Cluster) -> Result<Config, ConfigError> {
    let view = ClusterView::new(cluster);
    if view.current_primary().is_empty()
        && let Some(source) = view.recovery_source_using(PLUGIN_NAME)
    {
        return external(&source);
    }
    own(cluster)
}

/// Every validation error of a Cluster's parameters: its `spec.plugins[]`
/// entry and the external clusters using this plugin.
pub fn validate(cluster: &Cluster) -> Vec<ValidationError> {
    let mut errors = match own(cluster) {
        Err(ConfigError::Invalid(errors)) => errors,
        _ => Vec::new(),
    };
    for source in ClusterView::new(cluster).external_clusters_using(PLUGIN_NAME) {
        if let Err(ConfigError::Invalid(more)) = external(&source) {
            errors.extend(more);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnpgi_pluginhelper::cluster::decode_cluster;
    use serde_json::json;

    fn cluster(params: serde_json::Value) -> Cluster {
        let json = json!({
            "metadata": {"name": "pg1"},
            "spec": {"plugins": [{"name": "other.example.com"}, {"name": PLUGIN_NAME, "parameters": params}]}
        });
        decode_cluster(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn defaults_make_a_local_archive_named_after_the_cluster() {
        let config = own(&cluster(json!({}))).unwrap();
        assert_eq!(
            config.store,
            StoreConfig {
                location: Location::Local(DEFAULT_DESTINATION.into()),
                server_name: "pg1".into()
            }
        );
        assert_eq!(config.compression_level, 1);
        assert_eq!(config.keep_backups, None);
        assert_eq!(config.postgres.host, "/controller/run");
        assert_eq!(config.postgres.port, 5432);
    }

    #[test]
    fn s3_destinations() {
        let config = own(&cluster(json!({
            "destinationPath": "s3://my-bucket/some/prefix/",
            "endpointURL": "http://127.0.0.1:9000",
            "s3CredentialsSecret": "minio-creds",
            "serverName": "main",
            "keepBackups": "2"
        })))
        .unwrap();
        assert_eq!(
            config.store.location,
            Location::S3 {
                bucket: "my-bucket".into(),
                prefix: "some/prefix".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: "us-east-1".into()
            }
        );
        assert_eq!(config.store.server_name, "main");
        assert_eq!(config.keep_backups, Some(2));
        assert_eq!(config.credentials_secret.as_deref(), Some("minio-creds"));
    }

    #[test]
    fn every_bad_parameter_is_reported_on_its_field() {
        let errors = validate(&cluster(json!({
            "destinationPath": "relative/dir",
            "compressionLevel": "30",
            "keepBackups": "0",
            "serverName": "../x",
            "s3CredentialsSecret": "Not_A_Name",
            "endpointURL": "ftp://x",
            "destinationpath": "typo"
        })));
        let fields: Vec<String> = errors
            .iter()
            .map(|e| validation::field_path(&e.path_components, None))
            .collect();
        // Schema errors come first (the typo, the ranges); the rest needs a
        // parsed schema, so it is reported once those are fixed.
        assert_eq!(
            fields,
            [
                "spec.plugins[1].parameters.compressionLevel",
                "spec.plugins[1].parameters.keepBackups",
                "spec.plugins[1].parameters.destinationpath",
            ]
        );
        let errors = validate(&cluster(json!({
            "destinationPath": "relative/dir",
            "serverName": "../x",
            "s3CredentialsSecret": "Not_A_Name",
            "endpointURL": "ftp://x"
        })));
        let fields: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", validation::field_path(&e.path_components, None), e.message))
            .collect();
        assert_eq!(fields.len(), 4, "{fields:#?}");
        assert!(fields[0].starts_with("spec.plugins[1].parameters.destinationPath: must be an absolute"));
        assert!(fields[1].starts_with("spec.plugins[1].parameters.endpointURL: must start with https://"));
        assert!(fields[2].starts_with("spec.plugins[1].parameters.s3CredentialsSecret: must be a Secret name"));
        assert!(fields[3].starts_with("spec.plugins[1].parameters.serverName: must be letters"));
        for error in &errors {
            assert_eq!(&error.path_components[..3], ["spec", "plugins", "1"]);
        }
    }

    #[test]
    fn s3_only_parameters_are_refused_on_a_local_destination() {
        let errors = validate(&cluster(
            json!({"destinationPath": "/backups", "endpointURL": "https://s3.example.com"}),
        ));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].message, "only applies to an s3:// destinationPath");
        for bad in ["s3://AB", "s3://b/../x", "file://relative", "/a/../b"] {
            assert_eq!(validate(&cluster(json!({"destinationPath": bad}))).len(), 1, "{bad}");
        }
    }

    #[test]
    fn external_clusters_are_validated_and_used_while_recovering() {
        let json = json!({
            "metadata": {"name": "pg2"},
            "spec": {
                "plugins": [{"name": PLUGIN_NAME, "parameters": {"destinationPath": "/archive"}}],
                "bootstrap": {"recovery": {"source": "origin"}},
                "externalClusters": [{"name": "origin", "plugin": {"name": PLUGIN_NAME,
                    "parameters": {"destinationPath": "/archive", "compressionLevel": "x"}}}]
            }
        });
        let recovering = decode_cluster(json.to_string().as_bytes()).unwrap();
        let errors = validate(&recovering);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            validation::field_path(&errors[0].path_components, None),
            "spec.externalClusters[0].plugin.parameters.compressionLevel"
        );

        let mut json = json;
        json["spec"]["externalClusters"][0]["plugin"]["parameters"] = json!({"destinationPath": "/archive"});
        let recovering = decode_cluster(json.to_string().as_bytes()).unwrap();
        // No primary yet: WAL comes from the source, named after it.
        assert_eq!(for_wal_restore(&recovering).unwrap().store.server_name, "origin");
        // Once running: the cluster's own archive.
        json["status"] = json!({"currentPrimary": "pg2-1"});
        let running = decode_cluster(json.to_string().as_bytes()).unwrap();
        assert_eq!(for_wal_restore(&running).unwrap().store.server_name, "pg2");
    }

    #[test]
    fn a_cluster_without_the_plugin_has_no_configuration() {
        let other = decode_cluster(br#"{"metadata":{"name":"x"},"spec":{}}"#).unwrap();
        assert!(matches!(own(&other), Err(ConfigError::NotEnabled)));
        assert_eq!(
            tonic::Status::from(ConfigError::NotEnabled).code(),
            tonic::Code::FailedPrecondition
        );
    }
}
