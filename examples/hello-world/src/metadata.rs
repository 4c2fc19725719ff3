//! Who the plugin is.

use cnpgi_pluginhelper::prelude::*;

/// The plugin name: the `cnpg.io/pluginName` label of its Service, its socket
/// file name, and what Clusters write in `spec.plugins[].name`.
pub const PLUGIN_NAME: &str = "cnpg-i-hello-world.cloudnative-pg.io";

/// What `GetPluginMetadata` answers.
pub fn metadata() -> GetPluginMetadataResponse {
    GetPluginMetadataResponse {
        name: PLUGIN_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        display_name: "Hello World (Rust)".into(),
        description: "Adds labels, annotations and a sidecar to the instance Pods of a Cluster".into(),
        project_url: "https://github.com/cloudnative-pg/cnpg-i-hello-world".into(),
        repository_url: "https://github.com/cloudnative-pg/cnpg-i-hello-world".into(),
        license: "Apache-2.0".into(),
        license_url: "https://www.apache.org/licenses/LICENSE-2.0".into(),
        maturity: "alpha".into(),
        vendor: "cnpgi-rs".into(),
        manifest: Default::default(),
    }
}
