//! The Operator service: its capabilities (read with Identity, since
//! CloudNativePG writes them in the Cluster's status), then each advertised
//! RPC called with the sample Cluster, and garbage refused.

use cnpgi_core::{
    capabilities::{self, OperatorRpc, ServiceType},
    status::parse_json_status,
};
use cnpgi_proto::operator::v1::{
    OperatorCapabilitiesRequest, OperatorMutateClusterRequest, OperatorValidateClusterChangeRequest,
    OperatorValidateClusterCreateRequest, SetStatusInClusterRequest, ValidationError,
};
use serde_json::Value;

use super::checker::{Checker, GARBAGE, Running, absent, check_patch, idempotent};

/// Operator/GetCapabilities: the advertised RPCs (none when the service is
/// not advertised in `services`, where it must be absent).
pub(super) async fn capabilities(c: &mut Checker, services: &[ServiceType]) -> Vec<OperatorRpc> {
    let client = c.client.clone();
    let answer = c
        .timed(
            client
                .operator()
                .get_capabilities(client.request(OperatorCapabilitiesRequest {})),
        )
        .await;
    if !services.contains(&ServiceType::OperatorService) {
        c.report
            .record("unadvertised Operator service is absent", absent(answer));
        return Vec::new();
    }
    match answer {
        Ok(answer) => {
            let rpcs = capabilities::values_of(&answer.capabilities);
            c.report.record(
                "advertised Operator service answers",
                Ok(capabilities::operator_rpc_names(&rpcs).join(", ")),
            );
            rpcs
        }
        Err(reason) => {
            c.report.record("advertised Operator service answers", Err(reason));
            Vec::new()
        }
    }
}

/// Asks the plugin's ValidateClusterCreate about the Cluster every check
/// sends, before the checks: when it refuses it, that is said once (a
/// `NOTE`, the Cluster being the user's, not the plugin's fault), and the
/// calls that refuse the Cluster with `INVALID_ARGUMENT` pass.
pub(super) async fn validation_verdict(c: &mut Checker) {
    if !c.operator_rpcs.contains(&OperatorRpc::ValidateClusterCreate) {
        return;
    }
    let client = c.client.clone();
    let request = OperatorValidateClusterCreateRequest {
        definition: c.cluster_bytes.clone(),
    };
    let Ok(answer) = c
        .timed(client.operator().validate_cluster_create(client.request(request)))
        .await
    else {
        // The ValidateClusterCreate check itself reports the failure.
        return;
    };
    if answer.validation_errors.is_empty() {
        return;
    }
    let errors = answer
        .validation_errors
        .iter()
        .map(|e| format!("{}: {}", field_path(&e.path_components), e.message))
        .collect::<Vec<_>>()
        .join("; ");
    c.report.advise(
        "the Cluster sent passes the plugin's validation",
        format!("refused ({errors}): calls refusing it with INVALID_ARGUMENT pass"),
        false,
    );
    c.refused_by_validation = Some(errors);
}

/// `spec.plugins[0].parameters.labels` of `["spec", "plugins", "0", ...]`.
fn field_path(components: &[String]) -> String {
    cnpgi_core::path::joined(components)
}

/// The checks of the advertised Operator RPCs.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let rpcs = c.operator_rpcs.clone();
        if rpcs.contains(&OperatorRpc::ValidateClusterCreate) {
            validate_create(c).await;
        }
        if rpcs.contains(&OperatorRpc::ValidateClusterChange) {
            validate_change(c).await;
        }
        if rpcs.contains(&OperatorRpc::MutateCluster) {
            mutate(c).await;
        }
        if rpcs.contains(&OperatorRpc::SetStatusInCluster) {
            set_status(c).await;
        }
        if rpcs
            .iter()
            .any(|r| matches!(r, OperatorRpc::ValidateClusterCreate | OperatorRpc::MutateCluster))
        {
            garbage(c).await;
        }
    })
}

async fn validate_create(c: &mut Checker) {
    let client = c.client.clone();
    let plugins = plugin_count(&c.cluster);
    let request = OperatorValidateClusterCreateRequest {
        definition: c.cluster_bytes.clone(),
    };
    c.record_call(
        "ValidateClusterCreate: validation errors are well-formed",
        client.operator().validate_cluster_create(client.request(request)),
        |a| check_validation_errors(plugins, &a.validation_errors),
    )
    .await;
}

async fn validate_change(c: &mut Checker) {
    let client = c.client.clone();
    let plugins = plugin_count(&c.cluster);
    let request = OperatorValidateClusterChangeRequest {
        old_cluster: c.cluster_bytes.clone(),
        new_cluster: c.cluster_bytes.clone(),
    };
    c.record_call(
        "ValidateClusterChange: validation errors are well-formed",
        client.operator().validate_cluster_change(client.request(request)),
        |a| check_validation_errors(plugins, &a.validation_errors),
    )
    .await;
}

/// MutateCluster: a patch that applies, and changes nothing the second time.
async fn mutate(c: &mut Checker) {
    let cluster = c.cluster.clone();
    let first = mutate_once(c, &cluster).await;
    let outcome = c.excused(first.as_ref().map(|_| "applies".to_owned()).map_err(Clone::clone));
    c.report.record("MutateCluster: patch is valid and applies", outcome);
    if let Ok(mutated) = first {
        let again = mutate_once(c, &mutated).await;
        c.report.record(
            "MutateCluster: idempotent",
            idempotent(again, &mutated, "mutating the mutated Cluster changes it again"),
        );
    }
}

/// `cluster` mutated by the plugin.
async fn mutate_once(c: &mut Checker, cluster: &Value) -> Result<Value, String> {
    let client = c.client.clone();
    let request = OperatorMutateClusterRequest {
        definition: serde_json::to_vec(cluster).unwrap_or_default(),
    };
    c.timed(client.operator().mutate_cluster(client.request(request)))
        .await
        .and_then(|a| check_patch(cluster, &a.json_patch))
}

async fn set_status(c: &mut Checker) {
    let client = c.client.clone();
    let request = SetStatusInClusterRequest {
        cluster: c.cluster_bytes.clone(),
    };
    c.record_call(
        "SetStatusInCluster: answers empty or a JSON object",
        client.operator().set_status_in_cluster(client.request(request)),
        |a| match parse_json_status(&a.json_status) {
            Ok(None) => Ok("empty (no change)".into()),
            Ok(Some(_)) => Ok("a JSON object".into()),
            Err(e) => Err(e.to_string()),
        },
    )
    .await;
}

/// Garbage for MutateCluster, else ValidateClusterCreate.
async fn garbage(c: &mut Checker) {
    let client = c.client.clone();
    let name = "garbage Cluster is refused";
    if c.operator_rpcs.contains(&OperatorRpc::MutateCluster) {
        let request = OperatorMutateClusterRequest {
            definition: GARBAGE.to_vec(),
        };
        c.garbage_refused(name, client.operator().mutate_cluster(client.request(request)))
            .await;
    } else {
        let request = OperatorValidateClusterCreateRequest {
            definition: GARBAGE.to_vec(),
        };
        c.garbage_refused(name, client.operator().validate_cluster_create(client.request(request)))
            .await;
    }
}

/// The length of the Cluster's `spec.plugins`.
fn plugin_count(cluster: &Value) -> usize {
    cluster
        .pointer("/spec/plugins")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// Validation errors as CloudNativePG shows them: non-empty path
/// components, a plugin index within `spec.plugins` (`plugins` long), a message.
fn check_validation_errors(plugins: usize, errors: &[ValidationError]) -> Result<String, String> {
    for error in errors {
        if error.path_components.iter().any(String::is_empty) {
            return Err(format!("empty path component in {:?}", error.path_components));
        }
        // The plugin index of machinery's `["spec", "plugins", "<i>", ...]`
        // or of the older `["<i>", ...]`.
        let index = match error.path_components.as_slice() {
            [spec, plugins, index, ..] if spec == "spec" && plugins == "plugins" => Some(index),
            [index, ..] => Some(index),
            [] => None,
        };
        if let Some(index) = index
            && index.bytes().all(|b| b.is_ascii_digit())
            && index.parse::<usize>().map_or(true, |i| i >= plugins)
        {
            return Err(format!(
                "plugin index {index} is outside spec.plugins (length {plugins})"
            ));
        }
        if error.message.is_empty() {
            return Err(format!("error on {:?} has no message", error.path_components));
        }
    }
    Ok(format!("{} error(s), all well-formed", errors.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(path: &[&str], message: &str) -> ValidationError {
        ValidationError {
            path_components: path.iter().map(|p| (*p).to_owned()).collect(),
            message: message.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn validation_errors_name_a_plugin_of_the_cluster_with_a_message() {
        let two = 2;
        assert_eq!(
            check_validation_errors(two, &[error(&["spec", "plugins", "1", "parameters", "x"], "bad")]),
            Ok("1 error(s), all well-formed".into())
        );
        assert_eq!(
            check_validation_errors(two, &[error(&["0", "parameters"], "bad")]),
            Ok("1 error(s), all well-formed".into())
        );
        assert_eq!(
            check_validation_errors(two, &[error(&["spec", "plugins", "2"], "bad")]),
            Err("plugin index 2 is outside spec.plugins (length 2)".into())
        );
        assert_eq!(
            check_validation_errors(two, &[error(&["spec", "", "x"], "bad")]),
            Err(r#"empty path component in ["spec", "", "x"]"#.into())
        );
        assert_eq!(
            check_validation_errors(two, &[error(&["spec", "instances"], "")]),
            Err(r#"error on ["spec", "instances"] has no message"#.into())
        );
    }

    #[test]
    fn plugins_are_counted_from_spec_plugins() {
        assert_eq!(plugin_count(&serde_json::json!({"spec": {"plugins": [{}, {}]}})), 2);
        assert_eq!(plugin_count(&serde_json::json!({"spec": {}})), 0);
    }
}
