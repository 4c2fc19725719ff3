//! Identity, checked first as CloudNativePG reads it when it loads a plugin:
//! the metadata (a valid name, the one it was found under, the required
//! fields), readiness, and the services it advertises.

use cnpgi_core::capabilities::{self, CapabilityError, ServiceType};
use cnpgi_proto::identity::v1::{
    GetPluginCapabilitiesRequest, GetPluginMetadataRequest, GetPluginMetadataResponse, ProbeRequest,
};

use super::checker::{Checker, Identity};

/// The Identity checks; `None` when the metadata cannot be read, which ends
/// the run.
pub(super) async fn check(c: &mut Checker) -> Option<Identity> {
    let client = c.client.clone();
    let metadata = c
        .timed(
            client
                .identity()
                .get_plugin_metadata(client.request(GetPluginMetadataRequest {})),
        )
        .await;
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(reason) => {
            c.report.record("Identity/GetPluginMetadata answers", Err(reason));
            return None;
        }
    };
    check_metadata(c, &metadata);
    c.record_call(
        "Identity/Probe answers",
        client.identity().probe(client.request(ProbeRequest {})),
        |p| Ok(format!("ready: {}", p.ready)),
    )
    .await;
    let services = services(c).await;
    Some(Identity {
        version: metadata.version,
        services,
    })
}

fn check_metadata(c: &mut Checker, metadata: &GetPluginMetadataResponse) {
    let expected_name = c.expected_name().to_owned();
    c.report.record(
        "Identity/GetPluginMetadata answers",
        Ok(format!("{} {}", metadata.name, metadata.version)),
    );
    c.report.record(
        "metadata name is a valid plugin name",
        cnpgi_core::names::validate_plugin_name(&metadata.name).map(|()| metadata.name.clone()),
    );
    c.report.record(
        "metadata name equals the discovered name",
        if metadata.name == expected_name {
            Ok(expected_name)
        } else {
            Err(format!("found as {expected_name:?}, calls itself {:?}", metadata.name))
        },
    );
    let missing: Vec<&str> = [("version", &metadata.version), ("display_name", &metadata.display_name)]
        .into_iter()
        .filter(|(_, v)| v.is_empty())
        .map(|(k, _)| k)
        .collect();
    c.report.record(
        "required metadata fields are set",
        if missing.is_empty() {
            Ok("name, version, display_name".into())
        } else {
            Err(format!("empty: {}", missing.join(", ")))
        },
    );
}

/// Identity/GetPluginCapabilities: the advertised services, each known and
/// listed once.
async fn services(c: &mut Checker) -> Vec<ServiceType> {
    let client = c.client.clone();
    let answer = c
        .timed(
            client
                .identity()
                .get_plugin_capabilities(client.request(GetPluginCapabilitiesRequest {})),
        )
        .await;
    let name = "Identity/GetPluginCapabilities is consistent";
    let answer = match answer {
        Ok(answer) => answer,
        Err(reason) => {
            c.report.record(name, Err(reason));
            return Vec::new();
        }
    };
    let mut types = Vec::new();
    let mut problems = Vec::new();
    for capability in &answer.capabilities {
        match capabilities::service_type(capability) {
            Err(CapabilityError::Unknown(value)) => problems.push(format!("unknown service type {value}")),
            Err(missing @ CapabilityError::Missing) => problems.push(missing.to_string()),
            Ok(t) if types.contains(&t) => problems.push(format!("{} listed twice", t.as_str_name())),
            Ok(t) => types.push(t),
        }
    }
    c.report.record(
        name,
        if problems.is_empty() {
            Ok(capabilities::service_names(&types).join(", "))
        } else {
            Err(problems.join("; "))
        },
    );
    types
}
