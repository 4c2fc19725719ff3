//! A CNPG-I plugin broken on purpose, so that the conformance suite can be
//! shown to catch it. `CNPGI_BROKEN_MODE` picks the defect:
//!
//! * `bad-patch`: its Pod lifecycle hook answers a patch that does not apply;
//! * `bad-name`: it calls itself `Broken_Plugin` (not a valid plugin name)
//!   while serving on the socket `broken.example.com`;
//! * `hang`: its Pod lifecycle hook never answers;
//! * `unknown-on-garbage`: correct, except that it refuses garbage with
//!   `UNKNOWN`, as a Go plugin returning a plain error does (allowed by
//!   CNPG-I; `INVALID_ARGUMENT` is only recommended).
//!
//! Run as `cnpgi-broken-plugin plugin --plugin-path DIR`, like any plugin.

use std::process::ExitCode;

use cnpgi_pluginhelper::{
    capabilities,
    proto::{
        identity::v1::{
            GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginMetadataRequest,
            GetPluginMetadataResponse, ProbeRequest, ProbeResponse, identity_server,
        },
        operator_lifecycle::v1::{
            OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse, OperatorLifecycleRequest,
            OperatorLifecycleResponse,
            operator_lifecycle_server::{OperatorLifecycle, OperatorLifecycleServer},
            operator_operation_type::Type as Operation,
        },
    },
    server::{PluginListener, PluginServer},
};
use tonic::{Request, Response, Status};

const SOCKET_NAME: &str = "broken.example.com";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    BadPatch,
    BadName,
    Hang,
    UnknownOnGarbage,
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
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: vec![capabilities::service(capabilities::ServiceType::LifecycleService)],
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
        }
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
        other => {
            eprintln!("set CNPGI_BROKEN_MODE to bad-patch, bad-name, hang or unknown-on-garbage (got {other:?})");
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
        let server = PluginServer::new(Broken(mode)).add_service(OperatorLifecycleServer::new(Broken(mode)));
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
