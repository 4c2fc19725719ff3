//! Who the plugin is.

use cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataResponse;

/// The plugin name: its socket file name (`/plugins/wal-archive.cnpgi.io`)
/// and what Clusters write in `spec.plugins[].name`.
pub const PLUGIN_NAME: &str = "wal-archive.cnpgi.io";

/// What `GetPluginMetadata` answers.
pub fn metadata() -> GetPluginMetadataResponse {
    GetPluginMetadataResponse {
        name: PLUGIN_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        display_name: "WAL archive and backups (Rust)".into(),
        description: "Archives WAL and takes base backups into a local directory or an S3-compatible object store, \
                      and restores them"
            .into(),
        project_url: concat!(env!("CARGO_PKG_REPOSITORY"), "/tree/main/examples/wal-archive").into(),
        repository_url: env!("CARGO_PKG_REPOSITORY").into(),
        license: "Apache-2.0".into(),
        license_url: "https://www.apache.org/licenses/LICENSE-2.0".into(),
        maturity: "alpha".into(),
        vendor: "cnpgi-rs".into(),
        manifest: Default::default(),
    }
}
