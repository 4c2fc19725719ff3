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
        // This project's, not upstream's Go hello-world, whose behaviour it
        // copies: its --help and Identity point users where the code is.
        project_url: concat!(env!("CARGO_PKG_REPOSITORY"), "/tree/main/examples/hello-world").into(),
        repository_url: env!("CARGO_PKG_REPOSITORY").into(),
        license: "Apache-2.0".into(),
        license_url: "https://www.apache.org/licenses/LICENSE-2.0".into(),
        maturity: "alpha".into(),
        vendor: "cnpgi-rs".into(),
        manifest: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    /// Identity and --help send users to this project, where the code is,
    /// not to upstream's Go repository.
    #[test]
    fn the_project_is_this_one() {
        let metadata = super::metadata();
        let repository = env!("CARGO_PKG_REPOSITORY");
        assert!(!repository.is_empty());
        assert_eq!(metadata.repository_url, repository);
        assert!(metadata.project_url.starts_with(repository), "{}", metadata.project_url);
    }
}
