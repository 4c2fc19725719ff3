//! The OperatorLifecycle service: consistent capabilities, each Pod hook's
//! patch applies and is idempotent, garbage refused.

use cnpgi_core::{
    capabilities::{Operation, ServiceType, operation_name},
    pod::instance_pod,
};
use cnpgi_proto::operator_lifecycle::v1::{
    OperatorLifecycleCapabilities, OperatorLifecycleCapabilitiesRequest, OperatorLifecycleRequest,
    OperatorOperationType,
};
use serde_json::Value;

use super::checker::{Checker, GARBAGE, Running, absent, check_patch, idempotent};

/// The checks of the OperatorLifecycle service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let answer = c
            .timed(
                client
                    .lifecycle()
                    .get_capabilities(client.request(OperatorLifecycleCapabilitiesRequest {})),
            )
            .await;
        if !c.services.contains(&ServiceType::LifecycleService) {
            c.report
                .record("unadvertised OperatorLifecycle service is absent", absent(answer));
            return;
        }
        let capabilities = match answer {
            Ok(answer) => answer.lifecycle_capabilities,
            Err(reason) => {
                c.report
                    .record("advertised OperatorLifecycle service answers", Err(reason));
                return;
            }
        };
        c.report.record(
            "advertised OperatorLifecycle service answers",
            Ok(describe(&capabilities)),
        );
        c.report
            .record("lifecycle capabilities are consistent", consistent(&capabilities));
        for operation in capabilities
            .iter()
            .filter(|capability| capability.group.is_empty() && capability.kind == "Pod")
            .flat_map(|capability| capability.operation_types.iter().map(OperatorOperationType::r#type))
        {
            pod_hook(c, operation).await;
        }
        garbage(c, &capabilities).await;
    })
}

/// `core/Pod CREATE+EVALUATE, batch/Job CREATE`.
fn describe(capabilities: &[OperatorLifecycleCapabilities]) -> String {
    capabilities
        .iter()
        .map(|c| {
            let ops: Vec<_> = c.operation_types.iter().map(|o| operation_name(o.r#type())).collect();
            format!(
                "{}/{} {}",
                if c.group.is_empty() { "core" } else { &c.group },
                c.kind,
                ops.join("+")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every capability names its kind and at least one known operation.
fn consistent(capabilities: &[OperatorLifecycleCapabilities]) -> Result<String, String> {
    let bad: Vec<String> = capabilities
        .iter()
        .filter(|c| {
            c.kind.is_empty()
                || c.operation_types.is_empty()
                || c.operation_types.iter().any(|o| o.r#type() == Operation::Unspecified)
        })
        .map(|c| format!("{}/{}", c.group, c.kind))
        .collect();
    if bad.is_empty() {
        Ok("kinds and operations set".into())
    } else {
        Err(format!("missing kind or operations: {}", bad.join(", ")))
    }
}

/// The Pod hook of `operation` on the sample instance Pod: a patch that
/// applies, and changes nothing the second time.
async fn pod_hook(c: &mut Checker, operation: Operation) {
    let name = format!("LifecycleHook Pod {}", operation_name(operation));
    let pod = instance_pod(&c.cluster, 1);
    let first = hook(c, operation, &pod).await;
    let outcome = c.excused(first.as_ref().map(|_| "applies".to_owned()).map_err(Clone::clone));
    c.report.record(format!("{name}: patch is valid and applies"), outcome);
    if let Ok(patched) = first {
        let again = hook(c, operation, &patched).await;
        c.report.record(
            format!("{name}: idempotent"),
            idempotent(again, &patched, "the hook changes an already patched Pod again"),
        );
    }
}

/// `object` patched by the plugin's hook.
async fn hook(c: &mut Checker, operation: Operation, object: &Value) -> Result<Value, String> {
    let client = c.client.clone();
    let request = OperatorLifecycleRequest {
        operation_type: Some(OperatorOperationType {
            r#type: operation.into(),
        }),
        cluster_definition: c.cluster_bytes.clone(),
        object_definition: serde_json::to_vec(object).unwrap_or_default(),
    };
    c.timed(client.lifecycle().lifecycle_hook(client.request(request)))
        .await
        .and_then(|a| check_patch(object, &a.json_patch))
}

/// Garbage as the object of the first advertised kind and operation.
async fn garbage(c: &mut Checker, capabilities: &[OperatorLifecycleCapabilities]) {
    let Some(operation) = capabilities
        .first()
        .and_then(|capability| capability.operation_types.first())
    else {
        return;
    };
    let client = c.client.clone();
    let request = OperatorLifecycleRequest {
        operation_type: Some(OperatorOperationType {
            r#type: operation.r#type,
        }),
        cluster_definition: c.cluster_bytes.clone(),
        object_definition: GARBAGE.to_vec(),
    };
    c.garbage_refused(
        "garbage object is refused",
        client.lifecycle().lifecycle_hook(client.request(request)),
    )
    .await;
}
