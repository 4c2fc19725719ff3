//! A conformance suite any CNPG-I plugin, in any language, can be held to.
//!
//! [`check_plugin`] calls a plugin the way an operator would, with a sample
//! Cluster (and Pod), and reports each check with a reason. It is what
//! `cnpgi-operator check-plugin` prints, and what a plugin's own tests can
//! assert on.
//!
//! Every service is covered: Identity, then Operator and OperatorLifecycle
//! (here), then ReconcilerHooks, WAL, Backup, RestoreJobHooks, Postgres and
//! Metrics (`services.rs`: capabilities consistent, advertised RPCs served,
//! answers usable, garbage refused, nothing changed on the plugin's side).

use std::{
    future::Future,
    time::{Duration, Instant},
};

use cnpgi_core::{
    capabilities::{self, CapabilityError, Operation, OperatorRpc as RpcType, ServiceType, operation_name},
    patch::{parse_patch, patched},
    pod::instance_pod,
    status::{PluginStatusUpdate, parse_json_status, previous_statuses, write_plugin_status},
};
use cnpgi_proto::{
    identity::v1::{GetPluginCapabilitiesRequest, GetPluginMetadataRequest, ProbeRequest},
    operator::v1::{
        OperatorCapabilitiesRequest, OperatorMutateClusterRequest, OperatorValidateClusterChangeRequest,
        OperatorValidateClusterCreateRequest, SetStatusInClusterRequest, ValidationError,
    },
    operator_lifecycle::v1::{
        OperatorLifecycleCapabilities, OperatorLifecycleCapabilitiesRequest, OperatorLifecycleRequest,
        OperatorOperationType,
    },
};
use serde_json::{Value, json};

use crate::client::PluginClient;

mod services;

/// A plugin's message, bounded and on one line, for a report.
fn short(message: &str) -> String {
    cnpgi_core::echo::bounded_string(message.replace('\n', " "))
}

/// One check and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// A recommendation CNPG-I does not mandate (e.g. `INVALID_ARGUMENT` for
    /// garbage input): shown as `NOTE`, or a failure under
    /// [`ConformanceOptions::strict`].
    pub advisory: bool,
    /// Why it failed, or a detail when it passed.
    pub reason: String,
}

/// Every check run on one plugin.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The name the plugin was expected to have.
    pub plugin: String,
    /// The checks, in the order run.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The failed checks.
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.passed).collect()
    }

    /// The advice given (passed checks with a recommendation).
    pub fn advisories(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.passed && c.advisory).collect()
    }

    fn record(&mut self, name: impl Into<String>, result: Result<String, String>) {
        let (passed, reason) = match result {
            Ok(detail) => (true, detail),
            Err(reason) => (false, reason),
        };
        self.checks.push(Check {
            name: name.into(),
            passed,
            advisory: false,
            reason,
        });
    }

    /// Records a check that passed with a recommendation; a failure when
    /// `strict`.
    fn advise(&mut self, name: impl Into<String>, advice: String, strict: bool) {
        self.checks.push(Check {
            name: name.into(),
            passed: !strict,
            advisory: true,
            reason: advice,
        });
    }
}

impl std::fmt::Display for Report {
    /// A table: one line per check, `PASS`/`FAIL`, name, reason.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        writeln!(f, "plugin {}", self.plugin)?;
        for check in &self.checks {
            let verdict = match (check.passed, check.advisory) {
                (false, _) => "FAIL",
                (true, true) => "NOTE",
                (true, false) => "PASS",
            };
            writeln!(f, "  {verdict}  {:width$}  {}", check.name, check.reason)?;
        }
        let failed = self.failures().len();
        let advised = self.advisories().len();
        write!(
            f,
            "  {} checks, {} passed, {failed} failed",
            self.checks.len(),
            self.checks.len() - failed
        )?;
        if advised > 0 {
            write!(f, " ({advised} with a recommendation, NOTE)")?;
        }
        writeln!(f)
    }
}

/// Tunables of the suite.
#[derive(Debug, Clone)]
pub struct ConformanceOptions {
    /// Every call must answer within this. Default 5 s.
    pub deadline: Duration,
    /// The Cluster to send (its `spec.plugins` gets the plugin if missing,
    /// and `status.pluginStatus` the plugin's entry, as CloudNativePG writes it).
    pub cluster: Option<Value>,
    /// Turn recommendations (`NOTE`) into failures. Default off.
    pub strict: bool,
}

impl Default for ConformanceOptions {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(5),
            cluster: None,
            strict: false,
        }
    }
}

fn sample_cluster(plugin: &str, given: Option<&Value>) -> Value {
    let mut cluster = given.cloned().unwrap_or_else(|| {
        json!({
            "apiVersion": "cnpgi.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "conformance", "namespace": "default", "uid": "00000000-0000-4000-8000-00000000c0de"},
            "spec": {"instances": 1, "plugins": []}
        })
    });
    let plugins = cluster
        .pointer_mut("/spec/plugins")
        .and_then(Value::as_array_mut)
        .map(|plugins| {
            if !plugins.iter().any(|p| p["name"] == plugin) {
                plugins.push(json!({ "name": plugin }));
            }
        });
    if plugins.is_none() {
        cluster["spec"]["plugins"] = json!([{ "name": plugin }]);
    }
    cluster
}

/// Runs `call` under the deadline, turning errors into text.
async fn timed<T>(
    deadline: Duration,
    slowest: &mut Duration,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    let started = Instant::now();
    let result = tokio::time::timeout(deadline, call).await;
    *slowest = (*slowest).max(started.elapsed());
    match result {
        Err(_) => Err(format!("no answer within {} ms", deadline.as_millis())),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Ok(Ok(response)) => Ok(response.into_inner()),
    }
}

/// Checks a patch: valid RFC 6902, applies to `object`; returns the result.
fn check_patch(object: &Value, patch: &[u8]) -> Result<Value, String> {
    parse_patch(patch)
        .and_then(|patch| patched(object, &patch))
        .map_err(|e| e.to_string())
}

fn check_validation_errors(cluster: &Value, errors: &[ValidationError]) -> Result<String, String> {
    let plugins = cluster
        .pointer("/spec/plugins")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
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

/// Runs the suite on the plugin behind `client`, expected to be named `expected_name`.
pub async fn check_plugin(client: &PluginClient, expected_name: &str, options: &ConformanceOptions) -> Report {
    let deadline = options.deadline;
    let mut slowest = Duration::ZERO;
    let mut report = Report {
        plugin: expected_name.to_owned(),
        checks: Vec::new(),
    };

    // Identity.
    let metadata = timed(
        deadline,
        &mut slowest,
        client
            .identity()
            .get_plugin_metadata(client.request(GetPluginMetadataRequest {})),
    )
    .await;
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(reason) => {
            report.record("Identity/GetPluginMetadata answers", Err(reason));
            return report;
        }
    };
    report.record(
        "Identity/GetPluginMetadata answers",
        Ok(format!("{} {}", metadata.name, metadata.version)),
    );
    report.record(
        "metadata name is a valid plugin name",
        cnpgi_core::names::validate_plugin_name(&metadata.name).map(|()| metadata.name.clone()),
    );
    report.record(
        "metadata name equals the discovered name",
        if metadata.name == expected_name {
            Ok(expected_name.to_owned())
        } else {
            Err(format!("found as {expected_name:?}, calls itself {:?}", metadata.name))
        },
    );
    let missing: Vec<&str> = [("version", &metadata.version), ("display_name", &metadata.display_name)]
        .into_iter()
        .filter(|(_, v)| v.is_empty())
        .map(|(k, _)| k)
        .collect();
    report.record(
        "required metadata fields are set",
        if missing.is_empty() {
            Ok("name, version, display_name".into())
        } else {
            Err(format!("empty: {}", missing.join(", ")))
        },
    );
    report.record(
        "Identity/Probe answers",
        timed(
            deadline,
            &mut slowest,
            client.identity().probe(client.request(ProbeRequest {})),
        )
        .await
        .map(|p| format!("ready: {}", p.ready)),
    );
    let services: Vec<ServiceType> = match timed(
        deadline,
        &mut slowest,
        client
            .identity()
            .get_plugin_capabilities(client.request(GetPluginCapabilitiesRequest {})),
    )
    .await
    {
        Ok(answer) => {
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
            report.record(
                "Identity/GetPluginCapabilities is consistent",
                if problems.is_empty() {
                    Ok(capabilities::service_names(&types).join(", "))
                } else {
                    Err(problems.join("; "))
                },
            );
            types
        }
        Err(reason) => {
            report.record("Identity/GetPluginCapabilities is consistent", Err(reason));
            Vec::new()
        }
    };

    // Operator service.
    let operator_answer = timed(
        deadline,
        &mut slowest,
        client
            .operator()
            .get_capabilities(client.request(OperatorCapabilitiesRequest {})),
    )
    .await;
    let mut rpcs = Vec::new();
    if services.contains(&ServiceType::OperatorService) {
        match operator_answer {
            Ok(answer) => {
                rpcs = capabilities::operator_rpcs_of(&answer.capabilities);
                report.record(
                    "advertised Operator service answers",
                    Ok(capabilities::operator_rpc_names(&rpcs).join(", ")),
                );
            }
            Err(reason) => report.record("advertised Operator service answers", Err(reason)),
        }
    } else {
        report.record("unadvertised Operator service is absent", absent(operator_answer));
    }

    // The Cluster every further call carries, with this plugin's
    // `status.pluginStatus` entry as CloudNativePG writes it before calling.
    let mut cluster = sample_cluster(expected_name, options.cluster.as_ref());
    let previous = previous_statuses(&cluster).get(expected_name).cloned();
    write_plugin_status(
        &mut cluster,
        &[PluginStatusUpdate {
            name: expected_name.to_owned(),
            version: metadata.version.clone(),
            capabilities: capabilities::service_names(&services),
            operator_capabilities: capabilities::operator_rpc_names(&rpcs),
            // Read by services.rs, after this entry is written: left out, as
            // CloudNativePG leaves out empty lists.
            wal_capabilities: Vec::new(),
            backup_capabilities: Vec::new(),
            restore_job_hook_capabilities: Vec::new(),
            status: previous,
        }],
    );
    let cluster_bytes = serde_json::to_vec(&cluster).unwrap_or_default();

    if rpcs.contains(&RpcType::ValidateClusterCreate) {
        let answer = timed(
            deadline,
            &mut slowest,
            client
                .operator()
                .validate_cluster_create(client.request(OperatorValidateClusterCreateRequest {
                    definition: cluster_bytes.clone(),
                })),
        )
        .await;
        report.record(
            "ValidateClusterCreate: validation errors are well-formed",
            answer.and_then(|a| check_validation_errors(&cluster, &a.validation_errors)),
        );
    }
    if rpcs.contains(&RpcType::ValidateClusterChange) {
        let answer = timed(
            deadline,
            &mut slowest,
            client
                .operator()
                .validate_cluster_change(client.request(OperatorValidateClusterChangeRequest {
                    old_cluster: cluster_bytes.clone(),
                    new_cluster: cluster_bytes.clone(),
                })),
        )
        .await;
        report.record(
            "ValidateClusterChange: validation errors are well-formed",
            answer.and_then(|a| check_validation_errors(&cluster, &a.validation_errors)),
        );
    }
    if rpcs.contains(&RpcType::MutateCluster) {
        let first = timed(
            deadline,
            &mut slowest,
            client
                .operator()
                .mutate_cluster(client.request(OperatorMutateClusterRequest {
                    definition: cluster_bytes.clone(),
                })),
        )
        .await
        .and_then(|a| check_patch(&cluster, &a.json_patch));
        report.record(
            "MutateCluster: patch is valid and applies",
            first.as_ref().map(|_| "applies".to_owned()).map_err(Clone::clone),
        );
        if let Ok(mutated) = first {
            let again = timed(
                deadline,
                &mut slowest,
                client
                    .operator()
                    .mutate_cluster(client.request(OperatorMutateClusterRequest {
                        definition: serde_json::to_vec(&mutated).unwrap_or_default(),
                    })),
            )
            .await
            .and_then(|a| check_patch(&mutated, &a.json_patch));
            report.record(
                "MutateCluster: idempotent",
                match again {
                    Ok(twice) if twice == mutated => Ok("no further change".into()),
                    Ok(_) => Err("mutating the mutated Cluster changes it again".into()),
                    Err(reason) => Err(reason),
                },
            );
        }
    }
    if rpcs.contains(&RpcType::SetStatusInCluster) {
        let answer = timed(
            deadline,
            &mut slowest,
            client
                .operator()
                .set_status_in_cluster(client.request(SetStatusInClusterRequest {
                    cluster: cluster_bytes.clone(),
                })),
        )
        .await;
        report.record(
            "SetStatusInCluster: answers empty or a JSON object",
            answer.and_then(|a| match parse_json_status(&a.json_status) {
                Ok(None) => Ok("empty (no change)".into()),
                Ok(Some(_)) => Ok("a JSON object".into()),
                Err(e) => Err(e.to_string()),
            }),
        );
    }
    if rpcs
        .iter()
        .any(|r| matches!(r, RpcType::ValidateClusterCreate | RpcType::MutateCluster))
    {
        let garbage = OperatorMutateClusterRequest {
            definition: b"\x00not json".to_vec(),
        };
        let status = if rpcs.contains(&RpcType::MutateCluster) {
            tokio::time::timeout(deadline, client.operator().mutate_cluster(client.request(garbage))).await
        } else {
            tokio::time::timeout(
                deadline,
                client
                    .operator()
                    .validate_cluster_create(client.request(OperatorValidateClusterCreateRequest {
                        definition: b"\x00not json".to_vec(),
                    })),
            )
            .await
            .map(|r| r.map(|_| tonic::Response::new(Default::default())))
        };
        record_garbage(
            &mut report,
            "garbage Cluster is refused",
            status,
            deadline,
            options.strict,
        );
    }

    // Lifecycle service.
    let lifecycle_answer = timed(
        deadline,
        &mut slowest,
        client
            .lifecycle()
            .get_capabilities(client.request(OperatorLifecycleCapabilitiesRequest {})),
    )
    .await;
    if services.contains(&ServiceType::LifecycleService) {
        match lifecycle_answer {
            Ok(answer) => {
                report.record(
                    "advertised OperatorLifecycle service answers",
                    Ok(describe_lifecycle(&answer.lifecycle_capabilities)),
                );
                let bad: Vec<String> = answer
                    .lifecycle_capabilities
                    .iter()
                    .filter(|c| {
                        c.kind.is_empty()
                            || c.operation_types.is_empty()
                            || c.operation_types.iter().any(|o| o.r#type() == Operation::Unspecified)
                    })
                    .map(|c| format!("{}/{}", c.group, c.kind))
                    .collect();
                report.record(
                    "lifecycle capabilities are consistent",
                    if bad.is_empty() {
                        Ok("kinds and operations set".into())
                    } else {
                        Err(format!("missing kind or operations: {}", bad.join(", ")))
                    },
                );
                for capability in answer
                    .lifecycle_capabilities
                    .iter()
                    .filter(|c| c.group.is_empty() && c.kind == "Pod")
                {
                    for operation in capability.operation_types.iter().map(OperatorOperationType::r#type) {
                        let name = format!("LifecycleHook Pod {}", operation_name(operation));
                        let pod = instance_pod(&cluster, 1);
                        let first = hook(client, deadline, &mut slowest, operation, &cluster_bytes, &pod)
                            .await
                            .and_then(|patch| check_patch(&pod, &patch));
                        report.record(
                            format!("{name}: patch is valid and applies"),
                            first.as_ref().map(|_| "applies".to_owned()).map_err(Clone::clone),
                        );
                        if let Ok(patched) = first {
                            let again = hook(client, deadline, &mut slowest, operation, &cluster_bytes, &patched)
                                .await
                                .and_then(|patch| check_patch(&patched, &patch));
                            report.record(
                                format!("{name}: idempotent"),
                                match again {
                                    Ok(twice) if twice == patched => Ok("no further change".into()),
                                    Ok(_) => Err("the hook changes an already patched Pod again".into()),
                                    Err(reason) => Err(reason),
                                },
                            );
                        }
                    }
                }
                if let Some(capability) = answer.lifecycle_capabilities.first()
                    && let Some(operation) = capability.operation_types.first()
                {
                    let garbage = OperatorLifecycleRequest {
                        operation_type: Some(OperatorOperationType {
                            r#type: operation.r#type,
                        }),
                        cluster_definition: cluster_bytes.clone(),
                        object_definition: b"\x00not json".to_vec(),
                    };
                    let status =
                        tokio::time::timeout(deadline, client.lifecycle().lifecycle_hook(client.request(garbage)))
                            .await;
                    record_garbage(
                        &mut report,
                        "garbage object is refused",
                        status,
                        deadline,
                        options.strict,
                    );
                }
            }
            Err(reason) => report.record("advertised OperatorLifecycle service answers", Err(reason)),
        }
    } else {
        report.record(
            "unadvertised OperatorLifecycle service is absent",
            absent(lifecycle_answer),
        );
    }

    let mut others = services::Checker {
        client,
        deadline,
        slowest: &mut slowest,
        strict: options.strict,
        report: &mut report,
        cluster: &cluster_bytes,
    };
    others.reconciler_hooks(&services).await;
    others.wal(&services).await;
    others.backup(&services).await;
    others.restore_job(&services).await;
    others.postgres(&services).await;
    others.metrics(&services).await;

    report.record(
        "still serving after every call",
        timed(
            deadline,
            &mut slowest,
            client.identity().probe(client.request(ProbeRequest {})),
        )
        .await
        .map(|_| "Probe answers".into()),
    );
    report.record(
        "every call answered within the deadline",
        if slowest <= deadline {
            Ok(format!(
                "slowest {} ms (deadline {} ms)",
                slowest.as_millis(),
                deadline.as_millis()
            ))
        } else {
            Err(format!(
                "slowest {} ms (deadline {} ms)",
                slowest.as_millis(),
                deadline.as_millis()
            ))
        },
    );
    report
}

fn describe_lifecycle(capabilities: &[OperatorLifecycleCapabilities]) -> String {
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

async fn hook(
    client: &PluginClient,
    deadline: Duration,
    slowest: &mut Duration,
    operation: Operation,
    cluster: &[u8],
    object: &Value,
) -> Result<Vec<u8>, String> {
    let request = OperatorLifecycleRequest {
        operation_type: Some(OperatorOperationType {
            r#type: operation.into(),
        }),
        cluster_definition: cluster.to_vec(),
        object_definition: serde_json::to_vec(object).unwrap_or_default(),
    };
    timed(
        deadline,
        slowest,
        client.lifecycle().lifecycle_hook(client.request(request)),
    )
    .await
    .map(|a| a.json_patch)
}

fn absent<T>(answer: Result<T, String>) -> Result<String, String> {
    match answer {
        Err(reason) if reason.starts_with("Unimplemented") => Ok("UNIMPLEMENTED".into()),
        Err(reason) => Err(format!("expected UNIMPLEMENTED, got {reason}")),
        Ok(_) => Err("answers although not advertised".into()),
    }
}

/// Garbage must be refused with an error; CNPG-I mandates no code, and
/// `INVALID_ARGUMENT` is the recommended one.
fn record_garbage<T>(
    report: &mut Report,
    name: &str,
    status: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
    deadline: Duration,
    strict: bool,
) {
    match status {
        Err(_) => report.record(name, Err(format!("no answer within {} ms", deadline.as_millis()))),
        Ok(Ok(_)) => report.record(name, Err("accepted garbage".into())),
        Ok(Err(status)) if status.code() == tonic::Code::InvalidArgument => {
            report.record(name, Ok("INVALID_ARGUMENT".into()))
        }
        Ok(Err(status)) => report.advise(
            name,
            format!(
                "refused with {:?} ({}); INVALID_ARGUMENT is recommended",
                status.code(),
                status.message()
            ),
            strict,
        ),
    }
}
