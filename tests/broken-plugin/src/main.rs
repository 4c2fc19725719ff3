//! A CNPG-I plugin broken on purpose, so that the conformance suite can be
//! shown to catch it. `CNPGI_BROKEN_MODE` picks the defect:
//!
//! * `bad-patch`: its Pod lifecycle hook answers a patch that does not apply;
//! * `bad-name`: it calls itself `Broken_Plugin` (not a valid plugin name)
//!   while serving on the socket `broken.example.com`;
//! * `hang`: its Pod lifecycle hook never answers;
//! * `unknown-on-garbage`: correct, except that it refuses garbage with
//!   `UNKNOWN`, as a Go plugin returning a plain error does (allowed by
//!   CNPG-I; `INVALID_ARGUMENT` is only recommended);
//! * `unserved-wal`: advertises the WAL service without serving it;
//! * `unserved-archive`: its WAL service advertises `TYPE_ARCHIVE_WAL` but
//!   `Archive` answers `UNIMPLEMENTED`;
//! * `bad-metrics`: defines a metric without a value type;
//! * `partial-enrich`: `EnrichConfiguration` answers only what it changed,
//!   which makes CloudNativePG drop every other parameter.
//!
//! Run as `cnpgi-broken-plugin plugin --plugin-path DIR`, like any plugin.

use std::process::ExitCode;

use cnpgi_pluginhelper::{
    capabilities,
    lowlevel::{MetricSet, enrich, wal_files},
    proto::{
        identity::v1::{
            EnrichConfigurationRequest, EnrichConfigurationResult, GetPluginCapabilitiesRequest,
            GetPluginCapabilitiesResponse, GetPluginMetadataRequest, GetPluginMetadataResponse,
            PostgresCapabilitiesRequest, PostgresCapabilitiesResult, ProbeRequest, ProbeResponse, identity_server,
            postgres_server,
        },
        metrics::v1::{
            DefineMetricsRequest, DefineMetricsResult, Metric, MetricsCapabilitiesRequest, MetricsCapabilitiesResult,
            metrics_server,
        },
        operator_lifecycle::v1::{
            OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse, OperatorLifecycleRequest,
            OperatorLifecycleResponse,
            operator_lifecycle_server::{OperatorLifecycle, OperatorLifecycleServer},
            operator_operation_type::Type as Operation,
        },
        wal::v1::{WalCapabilitiesRequest, WalCapabilitiesResult, wal_capability, wal_server},
    },
    transport::{PluginListener, PluginServer},
};
use tonic::{Request, Response, Status};

const SOCKET_NAME: &str = "broken.example.com";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    BadPatch,
    BadName,
    Hang,
    UnknownOnGarbage,
    UnservedWal,
    UnservedArchive,
    BadMetrics,
    PartialEnrich,
}

impl Mode {
    /// The services advertised besides OperatorLifecycle.
    fn extra_services(self) -> Vec<capabilities::ServiceType> {
        match self {
            Mode::UnservedWal | Mode::UnservedArchive => vec![capabilities::ServiceType::WalService],
            Mode::BadMetrics => vec![capabilities::ServiceType::Metrics],
            Mode::PartialEnrich => vec![capabilities::ServiceType::Postgres],
            _ => Vec::new(),
        }
    }
}

#[derive(Clone, Copy)]
struct Broken(Mode);

#[tonic::async_trait]
impl identity_server::Identity for Broken {
    async fn get_plugin_metadata(
        &self,
        _: Request<GetPluginMetadataRequest>,
    ) -> Result<Response<GetPluginMetadataResponse>, Status> {
        let name = if self.0 == Mode::BadName {
            "Broken_Plugin"
        } else {
            SOCKET_NAME
        };
        Ok(Response::new(GetPluginMetadataResponse {
            name: name.into(),
            version: "0.0.1".into(),
            display_name: "Broken on purpose".into(),
            ..Default::default()
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        let mut services = vec![capabilities::ServiceType::LifecycleService];
        services.extend(self.0.extra_services());
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: services.into_iter().map(capabilities::service).collect(),
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: true }))
    }
}

#[tonic::async_trait]
impl OperatorLifecycle for Broken {
    async fn get_capabilities(
        &self,
        _: Request<OperatorLifecycleCapabilitiesRequest>,
    ) -> Result<Response<OperatorLifecycleCapabilitiesResponse>, Status> {
        Ok(Response::new(OperatorLifecycleCapabilitiesResponse {
            lifecycle_capabilities: vec![capabilities::lifecycle("", "Pod", [Operation::Create])],
        }))
    }

    async fn lifecycle_hook(
        &self,
        request: Request<OperatorLifecycleRequest>,
    ) -> Result<Response<OperatorLifecycleResponse>, Status> {
        match self.0 {
            Mode::Hang => std::future::pending().await,
            Mode::BadPatch => {
                // Garbage must still be refused properly: only the patch is broken.
                if serde_json_ok(&request.get_ref().object_definition) {
                    Ok(Response::new(OperatorLifecycleResponse {
                        json_patch: br#"[{"op":"remove","path":"/metadata/doesNotExist"}]"#.to_vec(),
                    }))
                } else {
                    Err(Status::invalid_argument("the object is not JSON"))
                }
            }
            Mode::BadName => Ok(Response::new(OperatorLifecycleResponse::default())),
            Mode::UnknownOnGarbage if serde_json_ok(&request.get_ref().object_definition) => {
                Ok(Response::new(OperatorLifecycleResponse::default()))
            }
            Mode::UnknownOnGarbage => Err(Status::unknown("error unmarshalling object JSON")),
            _ if serde_json_ok(&request.get_ref().object_definition) => {
                Ok(Response::new(OperatorLifecycleResponse::default()))
            }
            _ => Err(Status::invalid_argument("the object is not JSON")),
        }
    }
}

/// Advertises `TYPE_ARCHIVE_WAL`, and leaves `Archive` to the default stub
/// (`UNIMPLEMENTED`).
#[tonic::async_trait]
impl wal_server::Wal for Broken {
    async fn get_capabilities(
        &self,
        _: Request<WalCapabilitiesRequest>,
    ) -> Result<Response<WalCapabilitiesResult>, Status> {
        Ok(Response::new(wal_files::capabilities([
            wal_capability::rpc::Type::ArchiveWal,
        ])))
    }
}

/// Defines a metric without its value type (CloudNativePG 1.29 would
/// dereference the missing field).
#[tonic::async_trait]
impl metrics_server::Metrics for Broken {
    async fn get_capabilities(
        &self,
        _: Request<MetricsCapabilitiesRequest>,
    ) -> Result<Response<MetricsCapabilitiesResult>, Status> {
        Ok(Response::new(MetricSet::new().capabilities()))
    }

    async fn define(&self, _: Request<DefineMetricsRequest>) -> Result<Response<DefineMetricsResult>, Status> {
        Ok(Response::new(DefineMetricsResult {
            metrics: vec![Metric {
                fq_name: "broken_metric".into(),
                help: "no value type".into(),
                ..Default::default()
            }],
        }))
    }
}

/// Answers only the parameter it adds.
#[tonic::async_trait]
impl postgres_server::Postgres for Broken {
    async fn get_capabilities(
        &self,
        _: Request<PostgresCapabilitiesRequest>,
    ) -> Result<Response<PostgresCapabilitiesResult>, Status> {
        Ok(Response::new(enrich::capabilities()))
    }

    async fn enrich_configuration(
        &self,
        request: Request<EnrichConfigurationRequest>,
    ) -> Result<Response<EnrichConfigurationResult>, Status> {
        if !serde_json_ok(&request.get_ref().cluster_definition) {
            return Err(Status::invalid_argument("the Cluster is not JSON"));
        }
        Ok(Response::new(EnrichConfigurationResult {
            configs: [("wal_level".to_owned(), "logical".to_owned())].into(),
        }))
    }
}

fn serde_json_ok(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok_and(|s| s.trim_start().starts_with('{'))
}

fn main() -> ExitCode {
    let mode = match std::env::var("CNPGI_BROKEN_MODE").as_deref() {
        Ok("bad-patch") => Mode::BadPatch,
        Ok("bad-name") => Mode::BadName,
        Ok("hang") => Mode::Hang,
        Ok("unknown-on-garbage") => Mode::UnknownOnGarbage,
        Ok("unserved-wal") => Mode::UnservedWal,
        Ok("unserved-archive") => Mode::UnservedArchive,
        Ok("bad-metrics") => Mode::BadMetrics,
        Ok("partial-enrich") => Mode::PartialEnrich,
        other => {
            eprintln!(
                "set CNPGI_BROKEN_MODE to bad-patch, bad-name, hang, unknown-on-garbage, unserved-wal, \
                 unserved-archive, bad-metrics or partial-enrich (got {other:?})"
            );
            return ExitCode::from(2);
        }
    };
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args
        .iter()
        .find_map(|a| a.strip_prefix("--plugin-path="))
        .map(str::to_owned)
        .or_else(|| args.windows(2).find(|w| w[0] == "--plugin-path").map(|w| w[1].clone()))
    else {
        eprintln!("usage: cnpgi-broken-plugin plugin --plugin-path DIR");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match PluginListener::bind_unix(dir.as_ref(), SOCKET_NAME) {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        // Served without create_main_cmd, which would refuse the bad name.
        let mut server = PluginServer::new(Broken(mode)).add_service(OperatorLifecycleServer::new(Broken(mode)));
        server = match mode {
            Mode::UnservedArchive => server.add_service(wal_server::WalServer::new(Broken(mode))),
            Mode::BadMetrics => server.add_service(metrics_server::MetricsServer::new(Broken(mode))),
            Mode::PartialEnrich => server.add_service(postgres_server::PostgresServer::new(Broken(mode))),
            _ => server,
        };
        match server
            .serve(listener, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        }
    })
}
