//! What the plugin does to each instance Pod.

use cnpgi_pluginhelper::prelude::*;
use k8s_openapi::api::core::v1::Container;
use serde_json::Value;

use crate::config::Config;

/// Image of the sidecar the plugin adds. Upstream's hello-world uses
/// `pause:3.5`; this one uses the current release, which runs as a non-root
/// user, so that the Pod also passes the `restricted` Pod Security Standard.
pub const PAUSER_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Adds the configured labels and annotations and the `pauser` sidecar. The
/// SDK answers the patch from the Pod it received to this one.
pub fn patch_pod(config: &Config, pod: &mut Value) -> Result<(), Status> {
    for (field, values) in [("labels", &config.labels), ("annotations", &config.annotations)] {
        let map = object_mut(pod, &["metadata", field])?;
        map.extend(values.iter().map(|(key, value)| (key.clone(), value.as_str().into())));
    }
    let pauser = Container {
        name: "pauser".into(),
        image: Some(PAUSER_IMAGE.into()),
        ..Container::default()
    };
    Ok(inject_sidecar(pod, &pauser, SidecarOptions::default())?)
}
