//! The declarative plugin API: capabilities derived from the handlers, and
//! every service's dispatch, in-process (`LocalPlugin`) and over a real
//! server (mutual TLS and a Unix socket).

#![allow(clippy::unwrap_used, missing_docs)]

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use cnpgi_pluginhelper::{
    capabilities::{self, Operation, OperatorRpc, ReconcilerKind, ServiceType},
    lowlevel::{ArchiveDecision, decide_archive, wal_files},
    parameters::Parameters,
    plugin::{Hook, MetricSet, Plugin, PostgresOperation, Sample},
    proto::{
        backup::v1::{BackupRequest, BackupResult, backup_client::BackupClient},
        identity::v1::{GetPluginMetadataResponse, ProbeRequest},
        metrics::v1::metric_type,
        operator::v1::{DeregisterRequest, OperatorCapabilitiesRequest, operator_server::Operator},
        reconciler::v1::{
            ReconcilerHooksCapabilitiesRequest, reconciler_hooks_client::ReconcilerHooksClient,
            reconciler_hooks_server::ReconcilerHooks,
        },
        wal::v1::{
            RestoreJobHooksCapabilitiesRequest, RestoreRequest, RestoreResponse, WalArchiveRequest,
            WalCapabilitiesRequest, WalRestoreRequest, WalStatusRequest, WalStatusResult,
            restore_job_hooks_client::RestoreJobHooksClient, wal_capability::rpc::Type as WalRpc,
            wal_client::WalClient, wal_server::Wal,
        },
    },
    testing::TestPlugin,
    validation::parameter_error,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tonic::{Code, Request};

const NAME: &str = "declarative.example.com";

fn metadata() -> GetPluginMetadataResponse {
    GetPluginMetadataResponse {
        name: NAME.into(),
        version: "1.2.3".into(),
        ..Default::default()
    }
}

/// Parameters of the test plugins.
#[derive(Parameters, Debug, Clone, PartialEq)]
#[params(rename_all = "camelCase")]
struct Config {
    /// Where things go; fixed once set.
    #[param(immutable = "the bucket cannot be changed")]
    bucket: String,
    /// How many at once.
    #[param(default = 2)]
    max_parallel: u8,
    /// Requeue the reconciliation after this many seconds.
    requeue_seconds: Option<u64>,
}

fn cluster(parameters: Value) -> Value {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"instances": 1, "plugins": [{"name": "other.example.com"}, {"name": NAME, "parameters": parameters}]},
    })
}

fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

#[tokio::test]
async fn capabilities_are_the_handlers_registered() {
    let nothing = Plugin::<()>::new(metadata()).local();
    assert!(nothing.services().await.is_empty());
    let status = nothing
        .operator_service()
        .deregister(Request::new(DeregisterRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);

    // Parameters alone: validation, and defaults written back.
    let parameters_only = Plugin::<Config>::new(metadata()).local();
    assert_eq!(parameters_only.services().await, [ServiceType::OperatorService]);
    assert_eq!(
        parameters_only.operator_rpcs().await,
        [
            OperatorRpc::ValidateClusterCreate,
            OperatorRpc::ValidateClusterChange,
            OperatorRpc::MutateCluster
        ]
    );

    let everything = Plugin::<Config>::new(metadata())
        .advertise(ServiceType::InstanceSidecarInjection)
        .enrich_configuration(|_, _, _, _| Ok(()))
        .metrics(MetricSet::new(), |_| async { Ok(vec![]) })
        .restore_job(|_| async { Ok(RestoreResponse::default()) })
        .backup(|_| async { Ok(BackupResult::default()) })
        .wal_restore(|_| async { Ok(()) })
        .reconciler_post(ReconcilerKind::Backup, |_| async { Ok(Hook::Continue) })
        .reconciler_pre(ReconcilerKind::Cluster, |_| async { Ok(Hook::Continue) })
        .deregister(|_| async { Ok(()) })
        .set_status(|_| Ok(json!({})))
        .lifecycle("apps", "Deployment", [Operation::Update], |_, _, _| Ok(()))
        .lifecycle_pod([Operation::Evaluate, Operation::Unspecified], |_, _, _| Ok(()))
        .lifecycle_pod([Operation::Create, Operation::Evaluate], |_, _, _| Ok(()));
    assert_eq!(
        everything.services(),
        [
            ServiceType::LifecycleService,
            ServiceType::OperatorService,
            ServiceType::ReconcilerHooks,
            ServiceType::WalService,
            ServiceType::BackupService,
            ServiceType::RestoreJob,
            ServiceType::Metrics,
            ServiceType::Postgres,
            ServiceType::InstanceSidecarInjection,
        ]
    );
    let local = everything.local();
    assert_eq!(local.services().await.len(), 9);
    assert_eq!(local.operator_rpcs().await.len(), 5);
    let lifecycle = local.lifecycle_capabilities().await;
    let summary: Vec<_> = lifecycle
        .iter()
        .map(|c| {
            let operations: Vec<_> = c.operation_types.iter().map(|o| o.r#type()).collect();
            (c.group.as_str(), c.kind.as_str(), operations)
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("apps", "Deployment", vec![Operation::Update]),
            ("", "Pod", vec![Operation::Create, Operation::Evaluate]),
        ]
    );
    let reconciler = local
        .reconciler_service()
        .get_capabilities(Request::new(ReconcilerHooksCapabilitiesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        capabilities::values_of(&reconciler.reconciler_capabilities),
        [ReconcilerKind::Cluster, ReconcilerKind::Backup]
    );
    let wal = local
        .wal_service()
        .get_capabilities(Request::new(WalCapabilitiesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let rpcs: Vec<_> = wal
        .capabilities
        .iter()
        .filter_map(|c| {
            let cnpgi_pluginhelper::proto::wal::v1::wal_capability::Type::Rpc(rpc) = c.r#type.as_ref()?;
            Some(rpc.r#type())
        })
        .collect();
    assert_eq!(rpcs, [WalRpc::RestoreWal]);
    let status = local
        .wal_service()
        .status(Request::new(WalStatusRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
}

#[tokio::test]
async fn whole_cluster_validation_runs_wherever_the_cluster_names_the_plugin() {
    let plugin = Plugin::<()>::new(metadata())
        .validate_cluster(|cluster| {
            let name = cluster.metadata.name.clone().unwrap_or_default();
            vec![cnpgi_pluginhelper::validation::error(
                ["metadata", "name"],
                name,
                "checked",
            )]
        })
        .local();
    assert_eq!(
        plugin.operator_rpcs().await,
        [OperatorRpc::ValidateClusterCreate, OperatorRpc::ValidateClusterChange]
    );
    let listed = cluster(json!({}));
    let errors = plugin.validate_create(&listed).await.unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].value.as_str(), errors[0].message.as_str()),
        ("pg", "checked")
    );
    // Named only as the plugin of an external cluster (a recovery source).
    let mut source_only = cluster(json!({}));
    source_only["spec"]["plugins"] = json!([]);
    source_only["spec"]["externalClusters"] = json!([{"name": "origin", "plugin": {"name": NAME}}]);
    assert_eq!(plugin.validate_create(&source_only).await.unwrap().len(), 1);
    assert_eq!(plugin.validate_change(&listed, &source_only).await.unwrap().len(), 1);
    // Not named at all: not its business.
    let mut unrelated = cluster(json!({}));
    unrelated["spec"]["plugins"] = json!([{"name": "other.example.com"}]);
    assert!(plugin.validate_create(&unrelated).await.unwrap().is_empty());
    assert!(plugin.validate_change(&listed, &unrelated).await.unwrap().is_empty());
}

#[tokio::test]
async fn operator_rpcs_run_the_parameters_and_the_handlers() {
    let deregistered = Arc::new(AtomicUsize::new(0));
    let counter = deregistered.clone();
    let plugin = Plugin::<Config>::new(metadata())
        .validate_create(|_, config| {
            if config.bucket.starts_with('-') {
                vec![parameter_error(1, "bucket", &config.bucket, "must not start with '-'")]
            } else {
                vec![]
            }
        })
        .validate_change(|_, old, _, new| {
            if new.max_parallel < old.max_parallel {
                vec![parameter_error(1, "maxParallel", "", "cannot decrease")]
            } else {
                vec![]
            }
        })
        .mutate_cluster(|_, config, cluster| {
            cluster["metadata"]["annotations"] = json!({ "bucket": config.bucket });
            Ok(())
        })
        .set_status(|cluster| Ok(json!({ "instances": cluster.spec.other["instances"] })))
        .deregister(move |cluster| {
            let counter = counter.clone();
            async move {
                assert_eq!(cluster.metadata.name.as_deref(), Some("pg"));
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .local();

    // Parameter errors first (every one), then the handler once they are valid.
    let errors = plugin
        .validate_create(&cluster(json!({"maxParallel": "x"})))
        .await
        .unwrap();
    let paths: Vec<_> = errors.iter().map(|e| e.path_components.join("/")).collect();
    assert_eq!(paths, ["spec/plugins/1/bucket", "spec/plugins/1/maxParallel"]);
    let errors = plugin.validate_create(&cluster(json!({"bucket": "-b"}))).await.unwrap();
    assert_eq!(errors[0].message, "must not start with '-'");
    assert!(
        plugin
            .validate_create(&cluster(json!({"bucket": "b"})))
            .await
            .unwrap()
            .is_empty()
    );
    let mut unlisted = cluster(json!({}));
    unlisted["spec"]["plugins"] = json!([]);
    assert!(plugin.validate_create(&unlisted).await.unwrap().is_empty());

    // Immutable values and the change handler.
    let old = cluster(json!({"bucket": "b", "maxParallel": "4"}));
    let errors = plugin
        .validate_change(&old, &cluster(json!({"bucket": "c", "maxParallel": "3"})))
        .await
        .unwrap();
    let messages: Vec<_> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages, ["the bucket cannot be changed", "cannot decrease"]);
    assert_eq!(errors[0].value, "c");
    // Enabling the plugin on an existing Cluster changes nothing fixed.
    assert!(
        plugin
            .validate_change(&unlisted, &cluster(json!({"bucket": "c"})))
            .await
            .unwrap()
            .is_empty()
    );

    // Defaults written back, then the handler; idempotent.
    let original = cluster(json!({"bucket": "b"}));
    let mutated = plugin.mutate(&original).await.unwrap();
    assert_eq!(mutated["spec"]["plugins"][1]["parameters"]["maxParallel"], "2");
    assert_eq!(mutated["metadata"]["annotations"]["bucket"], "b");
    assert_eq!(plugin.mutate(&mutated).await.unwrap(), mutated);
    let mut without_parameters = original.clone();
    without_parameters["spec"]["plugins"][1]
        .as_object_mut()
        .unwrap()
        .remove("parameters");
    let mutated = plugin.mutate(&without_parameters).await.unwrap();
    assert_eq!(mutated["spec"]["plugins"][1]["parameters"], json!({"maxParallel": "2"}));
    assert!(
        mutated["metadata"].get("annotations").is_none(),
        "invalid parameters: no handler"
    );

    // The status: FAILED_PRECONDITION without the entry, "no change" once stored.
    let status = plugin.set_status(&original).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    let mut with_entry = original.clone();
    with_entry["status"] = json!({"pluginStatus": [{"name": NAME}]});
    assert_eq!(
        plugin.set_status(&with_entry).await.unwrap(),
        Some(json!({"instances": 1}))
    );
    with_entry["status"]["pluginStatus"][0]["status"] = json!("{\"instances\":1}");
    assert_eq!(plugin.set_status(&with_entry).await.unwrap(), None);

    plugin
        .operator_service()
        .deregister(Request::new(DeregisterRequest {
            definition: bytes(&original),
        }))
        .await
        .unwrap();
    assert_eq!(deregistered.load(Ordering::SeqCst), 1);
    let capabilities = plugin
        .operator_service()
        .get_capabilities(Request::new(OperatorCapabilitiesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capabilities.capabilities.len(), 5);
}

#[tokio::test]
async fn typed_lifecycle_hooks_keep_what_the_type_does_not_know() {
    let plugin = Plugin::<Config>::new(metadata())
        .lifecycle_typed::<Pod>([Operation::Create], |_, config, pod| {
            let labels = pod.metadata.labels.get_or_insert_default();
            labels.insert("bucket".into(), config.bucket.clone());
            Ok(())
        })
        .local();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pg-1", "futureMetadata": 1},
        "spec": {"containers": [{"name": "postgres", "futureField": {"kept": true}}]},
    });
    let patched = plugin
        .lifecycle(Operation::Create, &cluster(json!({"bucket": "b"})), &pod)
        .await
        .unwrap();
    assert_eq!(patched["metadata"]["labels"], json!({"bucket": "b"}));
    assert_eq!(patched["metadata"]["futureMetadata"], 1);
    assert_eq!(patched["spec"]["containers"][0]["futureField"], json!({"kept": true}));

    // Bad parameters: INVALID_ARGUMENT naming the field; a Deployment: no change.
    let status = plugin
        .lifecycle(Operation::Create, &cluster(json!({})), &pod)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("spec.plugins[1].parameters.bucket"),
        "{status:?}"
    );
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Pod"});
    assert_eq!(
        plugin
            .lifecycle(Operation::Create, &cluster(json!({})), &deployment)
            .await
            .unwrap(),
        deployment
    );
}

/// The SDK keeps the Clusters it decoded for the next hooks that send the
/// same bytes: the hook sees each Cluster's own parameters, whatever the
/// order, and a changed Cluster is never answered from a kept one.
#[tokio::test]
async fn lifecycle_hooks_see_each_clusters_own_parameters() {
    let plugin = Plugin::<Config>::new(metadata())
        .lifecycle_pod([Operation::Create], |cluster, config, pod| {
            pod["metadata"]["labels"] = json!({ "bucket": config.bucket, "cluster": cluster.metadata.name });
            Ok(())
        })
        .local();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pg-1"}, "spec": {}});
    let mut renamed = cluster(json!({"bucket": "a"}));
    renamed["metadata"]["name"] = json!("pg2");
    for (cluster, bucket, name) in [
        (cluster(json!({"bucket": "a"})), "a", "pg"),
        (cluster(json!({"bucket": "b"})), "b", "pg"),
        (cluster(json!({"bucket": "a"})), "a", "pg"),
        (renamed, "a", "pg2"),
        (cluster(json!({"bucket": "b"})), "b", "pg"),
    ] {
        let patched = plugin.lifecycle(Operation::Create, &cluster, &pod).await.unwrap();
        assert_eq!(
            patched["metadata"]["labels"],
            json!({"bucket": bucket, "cluster": name})
        );
    }
    // A Cluster that fails is decoded again, and fails again, each time.
    for _ in 0..2 {
        let status = plugin
            .lifecycle(Operation::Create, &cluster(json!({})), &pod)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
    }
}

#[tokio::test]
async fn reconciler_hooks_answer_per_kind_over_mutual_tls() {
    let plugin = Plugin::<Config>::new(metadata()).reconciler_pre(ReconcilerKind::Cluster, |call| async move {
        assert_eq!(call.object["kind"], "Cluster");
        Ok(match call.parameters.requeue_seconds {
            Some(seconds) => Hook::RequeueAfter(Duration::from_secs(seconds)),
            None => Hook::Continue,
        })
    });
    let served = TestPlugin::start_tls(plugin.server()).await.unwrap();
    let mut client = ReconcilerHooksClient::new(served.channel());
    let call = |cluster: Value, object: Value| cnpgi_pluginhelper::proto::reconciler::v1::ReconcilerHooksRequest {
        cluster_definition: bytes(&cluster),
        resource_definition: bytes(&object),
    };
    let requeue = cluster(json!({"bucket": "b", "requeueSeconds": "30"}));
    let answer = client
        .pre(call(requeue.clone(), requeue.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(Hook::from(&answer), Hook::RequeueAfter(Duration::from_secs(30)));
    // No Post hook, and no hook for Backups: continue.
    let answer = client
        .post(call(requeue.clone(), requeue.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(Hook::from(&answer), Hook::Continue);
    let backup = json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup"});
    let answer = client.pre(call(requeue.clone(), backup)).await.unwrap().into_inner();
    assert_eq!(Hook::from(&answer), Hook::Continue);
    let status = client.pre(call(cluster(json!({})), requeue)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        served
            .identity()
            .probe(ProbeRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready
    );
}

/// An archive in memory, following PostgreSQL's rules.
type Archive = Arc<Mutex<BTreeMap<String, Vec<u8>>>>;

fn wal_plugin(archive: &Archive) -> Plugin<Config> {
    let (store, load) = (archive.clone(), archive.clone());
    Plugin::<Config>::new(metadata())
        .wal_archive(move |call| {
            let store = store.clone();
            async move {
                let content = format!("{}:{}", call.parameters.bucket, call.source_path).into_bytes();
                let mut archive = store.lock().unwrap();
                let existing = archive.get(call.file.as_str());
                if decide_archive(&call.file, existing, &content)? == ArchiveDecision::Store {
                    archive.insert(call.file.to_string(), content);
                }
                Ok(())
            }
        })
        .wal_restore(move |call| {
            let load = load.clone();
            async move {
                let archive = load.lock().unwrap();
                let content = archive
                    .get(call.file.as_str())
                    .ok_or_else(|| wal_files::not_in_archive(&call.file))?;
                assert!(content.starts_with(call.parameters.bucket.as_bytes()));
                assert_eq!(call.destination_path, "/pg/pg_wal/RECOVERYXLOG");
                Ok(())
            }
        })
}

#[tokio::test]
async fn wal_archive_and_restore_over_a_unix_socket() {
    let archive = Archive::default();
    let served = TestPlugin::start_unix(wal_plugin(&archive).server()).await.unwrap();
    let mut client = WalClient::new(served.channel());
    let configured = cluster(json!({"bucket": "b"}));
    let archive_request = |path: &str| WalArchiveRequest {
        cluster_definition: bytes(&configured),
        source_file_name: path.into(),
        ..Default::default()
    };
    let segment = "/pg/pg_wal/000000010000000000000003";
    client.archive(archive_request(segment)).await.unwrap();
    client.archive(archive_request(segment)).await.unwrap();
    assert_eq!(archive.lock().unwrap().len(), 1);
    let bad = client
        .archive(archive_request("/pg/pg_wal/RECOVERYXLOG"))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    let restore_request = |cluster: &Value, name: &str| WalRestoreRequest {
        cluster_definition: bytes(cluster),
        source_wal_name: name.into(),
        destination_file_name: "/pg/pg_wal/RECOVERYXLOG".into(),
        ..Default::default()
    };
    client
        .restore(restore_request(&configured, "000000010000000000000003"))
        .await
        .unwrap();
    let missing = client
        .restore(restore_request(&configured, "00000002.history"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    // A replica restoring from a source names the plugin in externalClusters.
    let replica = json!({
        "kind": "Cluster",
        "spec": {"externalClusters": [{"name": "origin", "plugin": {"name": NAME, "parameters": {"bucket": "b"}}}]},
    });
    client
        .restore(restore_request(&replica, "000000010000000000000003"))
        .await
        .unwrap();
    let capabilities = client
        .get_capabilities(WalCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capabilities.capabilities.len(), 2);
}

#[tokio::test]
async fn wal_status_backup_and_restore_job() {
    let plugin = Plugin::<Config>::new(metadata())
        .wal_status(|call| async move {
            Ok(WalStatusResult {
                first_wal: call.parameters.bucket,
                ..Default::default()
            })
        })
        .backup(|call| async move {
            assert_eq!(call.backup["kind"], "Backup");
            Ok(BackupResult {
                backup_id: format!("{}-{}", call.parameters.bucket, call.backup_parameters["tag"]),
                online: true,
                ..Default::default()
            })
        })
        .restore_job(|call| async move {
            Ok(RestoreResponse {
                restore_config: format!("# from {}", call.parameters.bucket),
                envs: vec!["A=1".into()],
            })
        });
    let served = TestPlugin::start_tls(plugin.server()).await.unwrap();
    let configured = cluster(json!({"bucket": "b"}));
    let status = WalClient::new(served.channel())
        .status(WalStatusRequest {
            cluster_definition: bytes(&configured),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.first_wal, "b");
    let backup = BackupClient::new(served.channel())
        .backup(BackupRequest {
            cluster_definition: bytes(&configured),
            backup_definition: bytes(&json!({"kind": "Backup", "metadata": {"name": "b1"}})),
            parameters: HashMap::from([("tag".to_owned(), "nightly".to_owned())]),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(backup.backup_id, "b-nightly");
    let mut restore = RestoreJobHooksClient::new(served.channel());
    let kinds = restore
        .get_capabilities(RestoreJobHooksCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(kinds.capabilities.len(), 1);
    let answer = restore
        .restore(RestoreRequest {
            cluster_definition: bytes(&configured),
            check_empty_wal_archive: Some(true),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.restore_config, "# from b");
    let status = restore
        .restore(RestoreRequest {
            cluster_definition: b"[]".to_vec(),
            check_empty_wal_archive: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn metrics_are_checked_against_their_definitions() {
    let set = MetricSet::new()
        .counter("uploads_total", "Uploaded files", &["bucket"])
        .gauge("parallel", "Workers", &[]);
    let plugin = Plugin::<Config>::new(metadata())
        .metrics(set, |call| async move {
            let mut samples = vec![
                Sample::new("uploads_total", 3.0).with_labels([call.parameters.bucket.clone()]),
                Sample::new("parallel", f64::from(call.parameters.max_parallel)),
            ];
            if call.parameters.bucket == "broken" {
                samples.push(Sample::new("undefined", 1.0));
            }
            Ok(samples)
        })
        .local();
    let defined = plugin.define_metrics(&json!({})).await.unwrap();
    let kinds: Vec<_> = defined
        .iter()
        .map(|m| (m.fq_name.as_str(), m.value_type.as_ref().unwrap().r#type()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("parallel", metric_type::Type::Gauge),
            ("uploads_total", metric_type::Type::Counter)
        ]
    );
    let collected = plugin.collect_metrics(&cluster(json!({"bucket": "b"}))).await.unwrap();
    assert_eq!(collected.len(), 2);
    assert_eq!(collected[0].variable_labels, ["b"]);
    assert_eq!(collected[1].value, 2.0);
    let status = plugin
        .collect_metrics(&cluster(json!({"bucket": "broken"})))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert!(status.message().contains("undefined"), "{status:?}");
}

#[tokio::test]
async fn enrich_configuration_answers_the_complete_map_or_nothing() {
    let plugin = Plugin::<Config>::new(metadata())
        .enrich_configuration(|_, config, operation, configs| {
            if operation == PostgresOperation::Reconcile {
                configs.insert("max_worker_processes".into(), (config.max_parallel * 4).to_string());
            }
            Ok(())
        })
        .local();
    let configs = HashMap::from([("shared_buffers".to_owned(), "128MB".to_owned())]);
    let configured = cluster(json!({"bucket": "b"}));
    let answer = plugin
        .enrich_configuration(PostgresOperation::Reconcile, &configured, &configs)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.len(), 2, "the complete map");
    assert_eq!(answer["max_worker_processes"], "8");
    let unchanged = plugin
        .enrich_configuration(PostgresOperation::Init, &configured, &configs)
        .await
        .unwrap();
    assert_eq!(unchanged, None);
}

/// A hand-written service takes the place of the declarative one.
#[derive(Clone, Copy)]
struct HandWrittenWal;

#[tonic::async_trait]
impl Wal for HandWrittenWal {
    async fn get_capabilities(
        &self,
        _: Request<WalCapabilitiesRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::wal::v1::WalCapabilitiesResult>, tonic::Status> {
        Ok(tonic::Response::new(wal_files::capabilities([WalRpc::Status])))
    }

    async fn status(&self, _: Request<WalStatusRequest>) -> Result<tonic::Response<WalStatusResult>, tonic::Status> {
        Ok(tonic::Response::new(WalStatusResult {
            first_wal: "hand-written".into(),
            ..Default::default()
        }))
    }
}

#[tokio::test]
async fn hand_written_services_mix_in() {
    use cnpgi_pluginhelper::proto::wal::v1::wal_server::WalServer;
    let plugin = wal_plugin(&Archive::default()).add_service(ServiceType::WalService, WalServer::new(HandWrittenWal));
    assert_eq!(
        plugin.services(),
        [ServiceType::OperatorService, ServiceType::WalService]
    );
    let served = TestPlugin::start_unix(plugin.server()).await.unwrap();
    let mut client = WalClient::new(served.channel());
    let status = client.status(WalStatusRequest::default()).await.unwrap().into_inner();
    assert_eq!(status.first_wal, "hand-written");
    let capabilities = client
        .get_capabilities(WalCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(capabilities.capabilities.len(), 1);
}

/// A resource naming its one plugin in `spec.implementation`, with its
/// parameters in `spec.options`, and entries in `status.plugins[]`.
#[derive(Debug)]
struct ImplementationLayout;

impl cnpgi_pluginhelper::layout::PluginLayout for ImplementationLayout {
    fn enabled_plugins(&self, resource: &Value) -> Vec<cnpgi_pluginhelper::cluster::EnabledPlugin> {
        let name = resource.pointer("/spec/implementation").and_then(Value::as_str);
        name.map(|name| cnpgi_pluginhelper::cluster::EnabledPlugin {
            index: 0,
            name: name.to_owned(),
        })
        .into_iter()
        .collect()
    }

    fn parameters(&self, resource: &Value, _: &cnpgi_pluginhelper::cluster::EnabledPlugin) -> BTreeMap<String, String> {
        serde_json::from_value(resource["spec"]["options"].clone()).unwrap_or_default()
    }

    fn previous_statuses(&self, resource: &Value) -> BTreeMap<String, String> {
        let entries = resource.pointer("/status/plugins").and_then(Value::as_array);
        entries
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["status"].as_str()?.to_owned())))
            .collect()
    }

    fn write_plugin_status(&self, _: &mut Value, _: &[cnpgi_pluginhelper::status::PluginStatusUpdate]) {}
}

#[tokio::test]
async fn a_plugin_finds_its_entry_where_its_layout_says() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let plugin = Plugin::<Config>::new(metadata())
        .layout(ImplementationLayout)
        .validate_create(move |table, config| {
            recorded
                .lock()
                .unwrap()
                .push((table.spec.other["table"].clone(), config.clone()));
            Vec::new()
        })
        .set_status(|_| Ok(json!({"synced": true})))
        .local();
    let table = |implementation: &str, options: Value| json!({"kind": "DatabaseTable", "spec": {"table": "users", "implementation": implementation, "options": options}});

    // Its entry: the parameters come from `spec.options`, errors at its index.
    let errors = plugin.validate_create(&table(NAME, json!({}))).await.unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "bucket"]);
    assert!(
        seen.lock().unwrap().is_empty(),
        "no handler call while the parameters are invalid"
    );
    plugin
        .validate_create(&table(NAME, json!({"bucket": "b"})))
        .await
        .unwrap();
    let calls = seen.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "users");

    // A resource naming another implementation is not this plugin's business.
    assert!(
        plugin
            .validate_create(&table("other.example.com", json!({})))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(seen.lock().unwrap().len(), 1);

    // MutateCluster does not write defaults where the layout does not say.
    let mutated = plugin.mutate(&table(NAME, json!({"bucket": "b"}))).await.unwrap();
    assert_eq!(mutated, table(NAME, json!({"bucket": "b"})));

    // SetStatusInCluster needs no pluginStatus entry, and compares with the layout's.
    assert_eq!(
        plugin.set_status(&table(NAME, json!({"bucket": "b"}))).await.unwrap(),
        Some(json!({"synced": true}))
    );
    let mut reported = table(NAME, json!({"bucket": "b"}));
    reported["status"] = json!({"plugins": [{"name": NAME, "status": "{\"synced\":true}"}]});
    assert_eq!(plugin.set_status(&reported).await.unwrap(), None, "unchanged: no-op");
}

/// [`ImplementationLayout`] where `spec.implementation` is the *preferred*
/// implementation of `tables.example.com`, one among several.
#[derive(Debug)]
struct PreferredLayout;

impl cnpgi_pluginhelper::layout::PluginLayout for PreferredLayout {
    fn enabled_plugins(&self, resource: &Value) -> Vec<cnpgi_pluginhelper::cluster::EnabledPlugin> {
        ImplementationLayout.enabled_plugins(resource)
    }

    fn parameters(
        &self,
        resource: &Value,
        plugin: &cnpgi_pluginhelper::cluster::EnabledPlugin,
    ) -> BTreeMap<String, String> {
        ImplementationLayout.parameters(resource, plugin)
    }

    fn previous_statuses(&self, resource: &Value) -> BTreeMap<String, String> {
        ImplementationLayout.previous_statuses(resource)
    }

    fn write_plugin_status(&self, _: &mut Value, _: &[cnpgi_pluginhelper::status::PluginStatusUpdate]) {}

    fn implementation_choice(&self) -> Option<cnpgi_pluginhelper::layout::ImplementationChoice> {
        Some(cnpgi_pluginhelper::layout::ImplementationChoice::new(
            "tables.example.com",
            "/spec/implementation",
        ))
    }
}

#[tokio::test]
async fn an_implementation_chosen_in_place_of_the_preferred_one_handles_the_resource() {
    let plugin = |manifest: &[(&str, &str)]| {
        let metadata = GetPluginMetadataResponse {
            manifest: manifest
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..metadata()
        };
        Plugin::<Config>::new(metadata)
            .layout(PreferredLayout)
            .validate_create(|_, _| Vec::new())
            .local()
    };
    // The host chose this plugin for a table preferring another (absent) one.
    let table = json!({"kind": "DatabaseTable", "spec": {"implementation": "preferred.example.com", "options": {}}});

    // It implements the kind: it stands in for the preferred one, at its
    // index, so its parameters are checked where the resource has them.
    let implementation = plugin(&[("cnpgi.io/implements", "tables.example.com")]);
    let errors = implementation.validate_create(&table).await.unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "bucket"]);

    // A plugin that implements something else is not enabled by the table.
    let other = plugin(&[("cnpgi.io/implements", "queues.example.com")]);
    assert!(other.validate_create(&table).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_resource_itself_is_reconciled_as_cnpg_i_cluster_kind_whatever_its_kind() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let plugin = Plugin::<()>::new(metadata())
        .layout(ImplementationLayout)
        .reconciler_pre(ReconcilerKind::Cluster, move |call| {
            let counted = counted.clone();
            async move {
                assert_eq!(call.object["kind"], "DatabaseTable");
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(Hook::RequeueAfter(Duration::from_secs(5)))
            }
        })
        .local();
    let table = json!({"kind": "DatabaseTable", "metadata": {"name": "users"}, "spec": {"implementation": NAME}});
    let hook = plugin.reconcile(false, &table, &table).await.unwrap();
    assert_eq!(hook, Hook::RequeueAfter(Duration::from_secs(5)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Another object of an unknown kind, reconciled for the table, is not the table.
    let job = json!({"kind": "Job", "metadata": {"name": "migrate"}});
    assert_eq!(plugin.reconcile(false, &table, &job).await.unwrap(), Hook::Continue);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
