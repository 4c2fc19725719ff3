//! The conformance checks of the services beyond Operator and
//! OperatorLifecycle: ReconcilerHooks, WAL, Backup, RestoreJobHooks,
//! Postgres and Metrics.
//!
//! For each: an advertised service answers `GetCapabilities` with known,
//! distinct entries, and every RPC it advertises is served (an RPC answering
//! `UNIMPLEMENTED` fails). RPCs without side effects are called for real
//! with the sample Cluster (`EnrichConfiguration`, `Define`, `Collect`) and
//! their answers checked as CloudNativePG uses them; the others (archiving,
//! backups, restores, reconciler hooks) only receive garbage, which they
//! must refuse, so that checking a production plugin changes nothing. A
//! service that is not advertised should answer `UNIMPLEMENTED` (CloudNativePG
//! never calls it: a `NOTE` otherwise).

use std::{
    collections::{BTreeSet, HashMap},
    fmt::Debug,
    future::Future,
    time::Duration,
};

use cnpgi_core::capabilities::{
    self, BackupRpc, CapabilityError, MetricsRpc, PostgresRpc, ReconcilerKind, RestoreJobKind, ServiceType, WalRpc,
};
use cnpgi_proto::{
    backup::v1::{BackupCapabilitiesRequest, BackupRequest},
    identity::v1::{EnrichConfigurationRequest, OperationType, PostgresCapabilitiesRequest, operation_type},
    metrics::v1::{CollectMetricsRequest, DefineMetricsRequest, MetricsCapabilitiesRequest},
    reconciler::v1::{ReconcilerHooksCapabilitiesRequest, ReconcilerHooksRequest},
    wal::v1::{
        RestoreJobHooksCapabilitiesRequest, RestoreRequest, SetFirstRequiredRequest, WalArchiveRequest,
        WalCapabilitiesRequest, WalRestoreRequest, WalStatusRequest,
    },
};

use super::{Report, absent, timed};
use crate::{client::PluginClient, instance::metrics};

const GARBAGE: &[u8] = b"\x00not json";

/// What the checks of one plugin share.
pub(super) struct Checker<'a> {
    pub(super) client: &'a PluginClient,
    pub(super) deadline: Duration,
    pub(super) slowest: &'a mut Duration,
    pub(super) strict: bool,
    pub(super) report: &'a mut Report,
    /// The sample Cluster, as sent.
    pub(super) cluster: &'a [u8],
}

/// Reads a `GetCapabilities` answer: the known entries, or what is wrong
/// (unknown or missing types, duplicates, none at all).
fn consistent<C, T: Copy + PartialEq + Debug>(
    entries: &[C],
    read: impl Fn(&C) -> Result<T, CapabilityError>,
    name: impl Fn(T) -> &'static str,
) -> Result<Vec<T>, String> {
    let mut known = Vec::new();
    let mut problems = Vec::new();
    for entry in entries {
        match read(entry) {
            Ok(value) if known.contains(&value) => problems.push(format!("{} listed twice", name(value))),
            Ok(value) => known.push(value),
            Err(error) => problems.push(error.to_string()),
        }
    }
    if entries.is_empty() {
        problems.push("the service is advertised, but no RPC or kind".to_owned());
    }
    if problems.is_empty() {
        Ok(known)
    } else {
        Err(problems.join("; "))
    }
}

/// A gRPC code as the specification names it (`INVALID_ARGUMENT`).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn names<T>(values: &[T], name: impl Fn(&T) -> &'static str) -> String {
    values.iter().map(name).collect::<Vec<_>>().join(", ")
}

impl Checker<'_> {
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.client.request(message)
    }

    /// An advertised RPC called with garbage (or with input it cannot
    /// serve): it must answer, and refuse; `UNIMPLEMENTED` means it is not
    /// served. `INVALID_ARGUMENT` (or `expected`) passes; another code is a
    /// recommendation.
    async fn refuses<T>(
        &mut self,
        name: &str,
        expected: tonic::Code,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) {
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(self.deadline, call).await;
        *self.slowest = (*self.slowest).max(started.elapsed());
        match answer {
            Err(_) => self
                .report
                .record(name, Err(format!("no answer within {} ms", self.deadline.as_millis()))),
            Ok(Ok(_)) => self.report.record(name, Err("answered OK".into())),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => self.report.record(
                name,
                Err(format!("advertised, but answers UNIMPLEMENTED: {}", status.message())),
            ),
            Ok(Err(status)) if status.code() == expected => {
                self.report.record(name, Ok(code_name(expected).to_owned()))
            }
            Ok(Err(status)) => self.report.advise(
                name,
                format!(
                    "refused with {} ({}); {} is recommended",
                    code_name(status.code()),
                    crate::conformance::short(status.message()),
                    code_name(expected)
                ),
                self.strict,
            ),
        }
    }

    /// Checks the service `service` (`label` in check names): advertised, its
    /// capabilities through `capabilities`, and then `more`; else absent.
    async fn service<A, F>(
        &mut self,
        advertised: &[ServiceType],
        service: ServiceType,
        label: &str,
        ask: F,
    ) -> Option<A>
    where
        F: Future<Output = Result<tonic::Response<A>, tonic::Status>>,
    {
        let answer = timed(self.deadline, self.slowest, ask).await;
        if advertised.contains(&service) {
            match answer {
                Ok(answer) => Some(answer),
                Err(reason) => {
                    let reason = if reason.starts_with("Unimplemented") {
                        "advertised, but answers UNIMPLEMENTED: the service is not served".to_owned()
                    } else {
                        reason
                    };
                    self.report.record(
                        format!("advertised {label} service answers GetCapabilities"),
                        Err(reason),
                    );
                    None
                }
            }
        } else {
            match absent(answer) {
                Ok(detail) => self
                    .report
                    .record(format!("unadvertised {label} service is absent"), Ok(detail)),
                Err(reason) => self.report.advise(
                    format!("unadvertised {label} service is absent"),
                    format!("{reason}: CloudNativePG never calls it"),
                    self.strict,
                ),
            }
            None
        }
    }

    /// Records the capabilities check of `label`; the values when consistent.
    fn capabilities<T>(&mut self, label: &str, read: Result<Vec<T>, String>, shown: impl Fn(&[T]) -> String) -> Vec<T> {
        let name = format!("advertised {label} service answers GetCapabilities");
        match read {
            Ok(values) => {
                self.report.record(name, Ok(shown(&values)));
                values
            }
            Err(reason) => {
                self.report.record(name, Err(format!("inconsistent: {reason}")));
                Vec::new()
            }
        }
    }

    pub(super) async fn reconciler_hooks(&mut self, advertised: &[ServiceType]) {
        let client = self.client.clone();
        let mut stub = client.reconciler();
        let ask = stub.get_capabilities(self.request(ReconcilerHooksCapabilitiesRequest {}));
        let Some(answer) = self
            .service(advertised, ServiceType::ReconcilerHooks, "ReconcilerHooks", ask)
            .await
        else {
            return;
        };
        let kinds = self.capabilities(
            "ReconcilerHooks",
            consistent(
                &answer.reconciler_capabilities,
                capabilities::reconciler_kind,
                |k: ReconcilerKind| k.as_str_name(),
            ),
            |k| names(k, ReconcilerKind::as_str_name),
        );
        if kinds.is_empty() {
            return;
        }
        // Pre and Post may act (create objects, say): garbage only.
        for (rpc, pre) in [("Pre", true), ("Post", false)] {
            let request = self.request(ReconcilerHooksRequest {
                cluster_definition: GARBAGE.to_vec(),
                resource_definition: GARBAGE.to_vec(),
            });
            let mut reconciler = client.reconciler();
            let name = format!("ReconcilerHooks/{rpc}: garbage Cluster is refused");
            if pre {
                self.refuses(&name, tonic::Code::InvalidArgument, reconciler.pre(request))
                    .await;
            } else {
                self.refuses(&name, tonic::Code::InvalidArgument, reconciler.post(request))
                    .await;
            }
        }
    }

    pub(super) async fn wal(&mut self, advertised: &[ServiceType]) {
        let client = self.client.clone();
        let mut stub = client.wal();
        let ask = stub.get_capabilities(self.request(WalCapabilitiesRequest {}));
        let Some(answer) = self.service(advertised, ServiceType::WalService, "WAL", ask).await else {
            return;
        };
        let rpcs = self.capabilities(
            "WAL",
            consistent(&answer.capabilities, capabilities::wal_rpc_type, |r: WalRpc| {
                r.as_str_name()
            }),
            |r| names(r, WalRpc::as_str_name),
        );
        let cluster = self.cluster.to_vec();
        if rpcs.contains(&WalRpc::ArchiveWal) {
            let request = self.request(WalArchiveRequest {
                cluster_definition: GARBAGE.to_vec(),
                source_file_name: "/nonexistent/cnpgi-check-plugin/pg_wal/000000010000000000000001".into(),
                ..Default::default()
            });
            self.refuses(
                "WAL/Archive: garbage Cluster is refused",
                tonic::Code::InvalidArgument,
                client.wal().archive(request),
            )
            .await;
        }
        if rpcs.contains(&WalRpc::RestoreWal) {
            // A file no archive can have (timeline 0xFFFFFFFF), into a
            // directory that does not exist: refused, conventionally NOT_FOUND.
            let request = self.request(WalRestoreRequest {
                cluster_definition: cluster.clone(),
                source_wal_name: "FFFFFFFF.history".into(),
                destination_file_name: "/nonexistent/cnpgi-check-plugin/pg_wal/RECOVERYHISTORY".into(),
                ..Default::default()
            });
            self.refuses(
                "WAL/Restore: a file the archive lacks is refused",
                tonic::Code::NotFound,
                client.wal().restore(request),
            )
            .await;
        }
        if rpcs.contains(&WalRpc::Status) {
            let request = self.request(WalStatusRequest {
                cluster_definition: GARBAGE.to_vec(),
            });
            self.refuses(
                "WAL/Status: garbage Cluster is refused",
                tonic::Code::InvalidArgument,
                client.wal().status(request),
            )
            .await;
        }
        if rpcs.contains(&WalRpc::SetFirstRequired) {
            let request = self.request(SetFirstRequiredRequest {
                cluster_definition: GARBAGE.to_vec(),
                first_required_wal: "000000010000000000000001".into(),
            });
            self.refuses(
                "WAL/SetFirstRequired: garbage Cluster is refused",
                tonic::Code::InvalidArgument,
                client.wal().set_first_required(request),
            )
            .await;
        }
    }

    pub(super) async fn backup(&mut self, advertised: &[ServiceType]) {
        let client = self.client.clone();
        let mut stub = client.backup();
        let ask = stub.get_capabilities(self.request(BackupCapabilitiesRequest {}));
        let Some(answer) = self
            .service(advertised, ServiceType::BackupService, "Backup", ask)
            .await
        else {
            return;
        };
        let rpcs = self.capabilities(
            "Backup",
            consistent(&answer.capabilities, capabilities::backup_rpc_type, |r: BackupRpc| {
                r.as_str_name()
            }),
            |r| names(r, BackupRpc::as_str_name),
        );
        if rpcs.contains(&BackupRpc::Backup) {
            let request = self.request(BackupRequest {
                cluster_definition: GARBAGE.to_vec(),
                backup_definition: GARBAGE.to_vec(),
                parameters: HashMap::new(),
            });
            self.refuses(
                "Backup/Backup: garbage Cluster is refused",
                tonic::Code::InvalidArgument,
                client.backup().backup(request),
            )
            .await;
        }
    }

    pub(super) async fn restore_job(&mut self, advertised: &[ServiceType]) {
        let client = self.client.clone();
        let mut stub = client.restore_job();
        let ask = stub.get_capabilities(self.request(RestoreJobHooksCapabilitiesRequest {}));
        let Some(answer) = self
            .service(advertised, ServiceType::RestoreJob, "RestoreJobHooks", ask)
            .await
        else {
            return;
        };
        let kinds = self.capabilities(
            "RestoreJobHooks",
            consistent(
                &answer.capabilities,
                capabilities::restore_job_kind,
                |k: RestoreJobKind| k.as_str_name(),
            ),
            |k| names(k, RestoreJobKind::as_str_name),
        );
        if kinds.contains(&RestoreJobKind::Restore) {
            let request = self.request(RestoreRequest {
                cluster_definition: GARBAGE.to_vec(),
                check_empty_wal_archive: None,
            });
            self.refuses(
                "RestoreJobHooks/Restore: garbage Cluster is refused",
                tonic::Code::InvalidArgument,
                client.restore_job().restore(request),
            )
            .await;
        }
    }

    pub(super) async fn postgres(&mut self, advertised: &[ServiceType]) {
        let client = self.client.clone();
        let mut stub = client.postgres();
        let ask = stub.get_capabilities(self.request(PostgresCapabilitiesRequest {}));
        let Some(answer) = self.service(advertised, ServiceType::Postgres, "Postgres", ask).await else {
            return;
        };
        let rpcs = self.capabilities(
            "Postgres",
            consistent(
                &answer.capabilities,
                capabilities::postgres_rpc_type,
                |r: PostgresRpc| r.as_str_name(),
            ),
            |r| names(r, PostgresRpc::as_str_name),
        );
        if !rpcs.contains(&PostgresRpc::EnrichConfiguration) {
            return;
        }
        // What CloudNativePG sends: the whole map it computed.
        let sent: HashMap<String, String> = [
            ("shared_buffers", "128MB"),
            ("max_connections", "100"),
            ("archive_command", "/controller/manager wal-archive %p"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let request = self.request(EnrichConfigurationRequest {
            configs: sent.clone(),
            cluster_definition: self.cluster.to_vec(),
            operation_type: Some(OperationType {
                r#type: operation_type::Type::Reconcile.into(),
            }),
        });
        let name = "EnrichConfiguration: answers nothing or the complete map";
        match timed(
            self.deadline,
            self.slowest,
            client.postgres().enrich_configuration(request),
        )
        .await
        {
            Err(reason) => self.report.record(name, Err(reason)),
            Ok(answer) if answer.configs.is_empty() => self.report.record(name, Ok("empty (no change)".into())),
            Ok(answer) => {
                let dropped: BTreeSet<&String> = sent.keys().filter(|k| !answer.configs.contains_key(*k)).collect();
                if dropped.is_empty() {
                    self.report.record(
                        name,
                        Ok(format!("the complete map ({} parameters)", answer.configs.len())),
                    );
                } else if dropped.len() == sent.len() {
                    let kept: BTreeSet<&String> = answer.configs.keys().collect();
                    self.report.record(
                        name,
                        Err(format!(
                            "the answer has none of the {} parameters sent, only {}: a non-empty answer replaces \
                             the whole map, so CloudNativePG would lose every other parameter",
                            sent.len(),
                            kept.into_iter().cloned().collect::<Vec<_>>().join(", ")
                        )),
                    );
                } else {
                    self.report.advise(
                        name,
                        format!(
                            "the answer drops {}: a non-empty answer replaces the whole map, so CloudNativePG would lose them",
                            dropped.into_iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                        self.strict,
                    );
                }
            }
        }
        let request = self.request(EnrichConfigurationRequest {
            configs: sent,
            cluster_definition: GARBAGE.to_vec(),
            operation_type: Some(OperationType {
                r#type: operation_type::Type::Reconcile.into(),
            }),
        });
        self.refuses(
            "EnrichConfiguration: garbage Cluster is refused",
            tonic::Code::InvalidArgument,
            client.postgres().enrich_configuration(request),
        )
        .await;
    }

    pub(super) async fn metrics(&mut self, advertised: &[ServiceType]) {
        let client = self.client.clone();
        let mut stub = client.metrics();
        let ask = stub.get_capabilities(self.request(MetricsCapabilitiesRequest {}));
        let Some(answer) = self.service(advertised, ServiceType::Metrics, "Metrics", ask).await else {
            return;
        };
        let rpcs = self.capabilities(
            "Metrics",
            consistent(&answer.capabilities, capabilities::metrics_rpc_type, |r: MetricsRpc| {
                r.as_str_name()
            }),
            |r| names(r, MetricsRpc::as_str_name),
        );
        if !rpcs.contains(&MetricsRpc::Metrics) {
            return;
        }
        let request = self.request(DefineMetricsRequest {
            cluster_definition: self.cluster.to_vec(),
        });
        let defined = timed(self.deadline, self.slowest, client.metrics().define(request))
            .await
            .and_then(|answer| metrics::definitions(&answer, &BTreeSet::new()));
        let definitions = match defined {
            Ok(definitions) => {
                self.report.record(
                    "Metrics/Define: definitions are usable",
                    Ok(format!("{} metric(s)", definitions.len())),
                );
                definitions
            }
            Err(reason) => {
                self.report
                    .record("Metrics/Define: definitions are usable", Err(reason));
                return;
            }
        };
        let request = self.request(CollectMetricsRequest {
            cluster_definition: self.cluster.to_vec(),
        });
        let collected = timed(self.deadline, self.slowest, client.metrics().collect(request))
            .await
            .and_then(|answer| match metrics::samples(&definitions, &answer) {
                (values, None) => Ok(format!("{} value(s), each as defined", values.len())),
                (_, Some(reason)) => Err(reason),
            });
        self.report
            .record("Metrics/Collect: values fit their definitions", collected);
    }
}
