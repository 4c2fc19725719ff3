//! The `plugin` command every plugin binary runs: `create_main_cmd`.

use std::{path::PathBuf, process::ExitCode};

use clap::{ArgMatches, Args, Command, FromArgMatches};
use cnpgi_proto::identity::v1::{GetPluginMetadataResponse, identity_server::Identity};
use cnpgi_tls::server::ServerTlsFiles;
use tonic::service::RoutesBuilder;

use crate::{
    logging::{self, LogFormat},
    registration::{RegistrationTarget, keep_registered},
    transport::{PluginListener, PluginServer, ServeError},
};

/// Where a sidecar plugin puts its socket when no flag says otherwise.
pub const DEFAULT_PLUGIN_PATH: &str = "/plugins";

/// Flags of the `plugin` command. Every flag can also come from the
/// environment variable named in its help, as with upstream cnpg-i-machinery.
#[derive(Debug, Clone, Args)]
pub struct PluginArgs {
    /// Address to serve on with mutual TLS, e.g. `:9090` or `0.0.0.0:9090`.
    #[arg(long, env = "SERVER_ADDRESS", value_name = "ADDRESS",
          requires_all = ["server_cert", "server_key", "client_cert"], conflicts_with = "plugin_path")]
    pub server_address: Option<String>,

    /// PEM certificate the server presents (`tls.crt` of the server Secret).
    #[arg(long, env = "SERVER_CERT", value_name = "FILE",
          requires_all = ["server_address", "server_key", "client_cert"], conflicts_with = "plugin_path")]
    pub server_cert: Option<PathBuf>,

    /// PEM private key of the server certificate (`tls.key`).
    #[arg(long, env = "SERVER_KEY", value_name = "FILE",
          requires_all = ["server_address", "server_cert", "client_cert"], conflicts_with = "plugin_path")]
    pub server_key: Option<PathBuf>,

    /// PEM certificate clients must present or chain to (`tls.crt` of the client Secret).
    #[arg(long, env = "CLIENT_CERT", value_name = "FILE",
          requires_all = ["server_address", "server_cert", "server_key"], conflicts_with = "plugin_path")]
    pub client_cert: Option<PathBuf>,

    /// Serve on the Unix socket `DIR/PLUGIN-NAME`, without TLS (sidecar plugins).
    /// The default when no TLS flag is given: /plugins.
    #[arg(long, env = "PLUGIN_PATH", value_name = "DIR")]
    pub plugin_path: Option<PathBuf>,

    /// Register with a cnpgi-rs operator at HOST:PORT (its registration endpoint, mutual TLS)
    /// and keep heart-beating, so that it dials this plugin at --advertise-address. Needs the TLS
    /// flags; the client certificate (--registration-cert, else --server-cert) must name the
    /// plugin. Not part of CNPG-I: CloudNativePG has no such endpoint.
    #[arg(long, env = "CNPGI_REGISTER_WITH", value_name = "HOST:PORT",
          requires_all = ["server_address", "registration_ca"])]
    pub register_with: Option<String>,

    /// PEM certificate the operator's registration endpoint must present or chain to.
    #[arg(long, env = "CNPGI_REGISTRATION_CA", value_name = "FILE", requires = "register_with")]
    pub registration_ca: Option<PathBuf>,

    /// PEM certificate presented when registering (its DNS name is the plugin name).
    /// Default: --server-cert.
    #[arg(long, env = "CNPGI_REGISTRATION_CERT", value_name = "FILE",
          requires_all = ["register_with", "registration_key"])]
    pub registration_cert: Option<PathBuf>,

    /// PEM key of --registration-cert. Default: --server-key.
    #[arg(long, env = "CNPGI_REGISTRATION_KEY", value_name = "FILE",
          requires_all = ["register_with", "registration_cert"])]
    pub registration_key: Option<PathBuf>,

    /// HOST:PORT where the operator dials this plugin when it registers; the server certificate
    /// must carry HOST. Default: the address listened on, unless it is unspecified (0.0.0.0, ::).
    #[arg(
        long,
        env = "CNPGI_ADVERTISE_ADDRESS",
        value_name = "HOST:PORT",
        requires = "register_with"
    )]
    pub advertise_address: Option<String>,

    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, e.g. `info` or `debug` (RUST_LOG wins when set).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl PluginArgs {
    /// The TLS files, when serving over TCP.
    fn tls_files(&self) -> Option<(String, ServerTlsFiles)> {
        match (
            &self.server_address,
            &self.server_cert,
            &self.server_key,
            &self.client_cert,
        ) {
            (Some(address), Some(cert), Some(key), Some(client)) => Some((
                address.clone(),
                ServerTlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: Some(client.clone()),
                },
            )),
            _ => None,
        }
    }

    /// Where and how to register, when `--register-with` is given, the
    /// server listening on `listening`.
    pub fn registration(&self, listening: std::net::SocketAddr) -> Result<Option<RegistrationTarget>, ServeError> {
        let (Some(endpoint), Some(operator_ca)) = (&self.register_with, &self.registration_ca) else {
            return Ok(None);
        };
        let (Some(server_cert), Some(server_key)) = (&self.server_cert, &self.server_key) else {
            // clap requires the TLS flags with --register-with.
            return Ok(None);
        };
        let advertise = match &self.advertise_address {
            Some(address) => address.clone(),
            None if !listening.ip().is_unspecified() => listening.to_string(),
            None => {
                return Err(ServeError::Address {
                    address: listening.to_string(),
                    reason: "--register-with needs --advertise-address (CNPGI_ADVERTISE_ADDRESS): the plugin \
                             listens on every interface, and the operator needs a host:port to dial"
                        .into(),
                });
            }
        };
        Ok(Some(RegistrationTarget {
            endpoint: endpoint.clone(),
            client_cert: self.registration_cert.clone().unwrap_or_else(|| server_cert.clone()),
            client_key: self.registration_key.clone().unwrap_or_else(|| server_key.clone()),
            operator_ca: operator_ca.clone(),
            advertise,
            advertise_server_name: None,
        }))
    }
}

/// The clap definition of the `plugin` subcommand, to embed in a larger CLI
/// (then serve with [`PluginCommand::execute_matches`]).
pub fn plugin_command() -> Command {
    // After augment_args: the struct's doc comment (written for rustdoc)
    // would otherwise become the subcommand's help.
    PluginArgs::augment_args(Command::new("plugin"))
        .about("Serve this CNPG-I plugin over gRPC")
        .long_about(
            "Serve this CNPG-I plugin over gRPC. Every flag can also come from the environment variable \
             named in its help, as with upstream cnpg-i-machinery.",
        )
}

/// The whole command line of a plugin binary named `binary`: `--version`
/// and a description in `--help` from the plugin's `metadata` (generic ones
/// without it), and the [`plugin_command`] subcommand, which is required.
pub fn main_command(binary: impl Into<String>, metadata: Option<&GetPluginMetadataResponse>) -> Command {
    let binary = binary.into();
    let serving = format!(
        "`{binary} plugin` serves it over gRPC: with mutual TLS (--server-address and the \
         certificate flags, as a Deployment behind a Service) or on a Unix socket (--plugin-path, \
         as a sidecar). See `{binary} plugin --help`."
    );
    let command = Command::new(binary.clone())
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(plugin_command());
    let Some(metadata) = metadata else {
        return command
            .about("A CNPG-I plugin")
            .long_about(format!("A CNPG-I plugin.\n\n{serving}"));
    };
    let title = if metadata.display_name.is_empty() {
        metadata.name.clone()
    } else {
        format!("{} ({})", metadata.display_name, metadata.name)
    };
    let about = if metadata.description.is_empty() {
        format!("{title}: a CNPG-I plugin")
    } else {
        format!("{title}: {}", metadata.description)
    };
    let mut long_about = format!("{about}\n\nA CNPG-I plugin for CloudNativePG. {serving}");
    if !metadata.project_url.is_empty() {
        long_about.push_str(&format!("\n\nProject: {}", metadata.project_url));
    }
    let command = command.about(about).long_about(long_about);
    if metadata.version.is_empty() {
        command
    } else {
        command.version(metadata.version.clone())
    }
}

/// The `plugin` command of a plugin binary, from [`create_main_cmd`].
#[derive(Debug)]
pub struct PluginCommand<I> {
    server: PluginServer<I>,
}

/// Builds the command that serves a plugin, like cnpg-i-machinery's
/// `CreateMainCmd`: `identity` answers the Identity service, and `register`
/// adds the plugin's other services.
///
/// ```no_run
/// use cnpgi_pluginhelper::{create_main_cmd, proto::identity::v1::*};
/// use tonic::{Request, Response, Status};
///
/// struct MyIdentity;
///
/// #[tonic::async_trait]
/// impl identity_server::Identity for MyIdentity {
///     async fn get_plugin_metadata(&self, _: Request<GetPluginMetadataRequest>)
///         -> Result<Response<GetPluginMetadataResponse>, Status> {
///         Ok(Response::new(GetPluginMetadataResponse {
///             name: "my-plugin.example.com".into(),
///             version: "0.1.0".into(),
///             ..Default::default()
///         }))
///     }
///     async fn get_plugin_capabilities(&self, _: Request<GetPluginCapabilitiesRequest>)
///         -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
///         Ok(Response::new(GetPluginCapabilitiesResponse::default()))
///     }
///     async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
///         Ok(Response::new(ProbeResponse { ready: true }))
///     }
/// }
///
/// fn main() -> std::process::ExitCode {
///     create_main_cmd(MyIdentity, |routes| {
///         // routes.add_service(OperatorServer::new(MyOperator));
///         let _ = routes;
///     })
///     .execute()
/// }
/// ```
///
/// The binary is then run as
/// `my-plugin plugin --server-address=:9090 --server-cert=… --server-key=… --client-cert=…`
/// (mutual TLS) or `my-plugin plugin --plugin-path=/plugins` (Unix socket).
pub fn create_main_cmd<I: Identity>(identity: I, register: impl FnOnce(&mut RoutesBuilder)) -> PluginCommand<I> {
    PluginCommand {
        server: PluginServer::new(identity).register(register),
    }
}

impl<I: Identity> PluginCommand<I> {
    /// Parses the process arguments (`<binary> plugin [FLAGS]`) and serves the
    /// plugin. Usage errors print help and exit with code 2; a plugin that
    /// cannot start exits with code 1; a clean shutdown exits with 0.
    pub fn execute(self) -> ExitCode {
        let binary = std::env::args_os()
            .next()
            .and_then(|arg0| {
                PathBuf::from(arg0)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "plugin".to_owned());
        // The plugin's own metadata gives `--version` and `--help` their
        // text; an Identity that cannot answer leaves the generic ones (and
        // fails again, naming why, when the plugin starts).
        let metadata = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()
            .and_then(|runtime| runtime.block_on(self.server.metadata()).ok());
        let matches = main_command(binary, metadata.as_ref()).get_matches();
        match matches.subcommand() {
            Some(("plugin", sub)) => self.execute_matches(sub),
            // subcommand_required makes clap reject anything else before this point.
            _ => ExitCode::from(2),
        }
    }

    /// Serves with flags already parsed by the caller's own clap command.
    pub fn execute_matches(self, matches: &ArgMatches) -> ExitCode {
        let args = match PluginArgs::from_arg_matches(matches) {
            Ok(args) => args,
            Err(error) => error.exit(),
        };
        let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("error: cannot start the async runtime: {error}");
                return ExitCode::FAILURE;
            }
        };
        match runtime.block_on(self.run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "plugin failed");
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        }
    }

    /// Sets up logging, binds the listener the flags ask for and serves until
    /// SIGTERM or SIGINT.
    pub async fn run(self, args: PluginArgs) -> Result<(), ServeError> {
        logging::init(args.log_format, &args.log_level);
        let metadata = self.server.metadata().await?;
        tracing::info!(
            name = %metadata.name,
            version = %metadata.version,
            display_name = %metadata.display_name,
            "starting plugin"
        );
        let listener = match args.tls_files() {
            Some((address, files)) => PluginListener::bind_tcp(&address, files).await?,
            None => {
                let dir = args.plugin_path.clone().unwrap_or_else(|| DEFAULT_PLUGIN_PATH.into());
                PluginListener::bind_unix(&dir, &metadata.name)?
            }
        };
        tracing::info!(address = %listener.address(), tls = matches!(listener, PluginListener::Tcp { .. }), "listening");
        let registration = match &listener {
            PluginListener::Tcp { address, .. } => args.registration(*address)?,
            PluginListener::Unix { .. } => None,
        };
        let Some(target) = registration else {
            return self.server.serve(listener, shutdown_signal()).await;
        };
        // Registration runs beside serving and stops with it; it only ends
        // by itself when its files are unusable, which stops the plugin too
        // (it would otherwise serve, never found).
        let registering = keep_registered(target, metadata.name.clone(), metadata.version.clone());
        tokio::select! {
            served = self.server.serve(listener, shutdown_signal()) => served,
            registered = registering => {
                let Err(error) = registered;
                Err(ServeError::Registration(error))
            }
        }
    }
}

/// Completes on SIGTERM (Kubernetes stopping the Pod) or SIGINT (Ctrl-C):
/// what the `plugin` command serves until (shared with the `cnpgi-operator` binary).
pub use cnpgi_process::signals::shutdown_signal;

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;

    use super::*;

    fn parse(args: &[&str]) -> Result<PluginArgs, clap::Error> {
        let matches = plugin_command().try_get_matches_from(std::iter::once("plugin").chain(args.iter().copied()))?;
        PluginArgs::from_arg_matches(&matches)
    }

    /// The book's reference page is what these definitions generate
    /// (`CNPGI_UPDATE_REFERENCE=1` rewrites it), for a binary named `PLUGIN`.
    #[test]
    fn the_reference_page_is_generated_from_these_definitions() {
        let page = cnpgi_process::cli_reference::markdown(&main_command("PLUGIN", None), "A plugin's command line");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src/reference/plugin-command.md");
        if let Err(error) = cnpgi_process::cli_reference::check_or_update(&page, &path) {
            panic!("{error}");
        }
    }

    /// The subcommand's help is written for users, not PluginArgs' rustdoc.
    #[test]
    fn the_plugin_subcommand_says_what_it_does() {
        let command = plugin_command();
        assert_eq!(
            command.get_about().map(ToString::to_string).as_deref(),
            Some("Serve this CNPG-I plugin over gRPC")
        );
        let main = main_command("p", None);
        let help = main.clone().render_help().to_string();
        assert!(help.contains("plugin  Serve this CNPG-I plugin over gRPC"), "{help}");
        assert!(!help.contains("Flags of the"), "{help}");
    }

    #[test]
    fn tls_flags_are_required_together() {
        let args = parse(&[
            "--server-address=:9090",
            "--server-cert=s.crt",
            "--server-key=s.key",
            "--client-cert=c.crt",
        ])
        .unwrap();
        let (address, files) = args.tls_files().unwrap();
        assert_eq!(address, ":9090");
        assert_eq!(files.client_ca, Some(PathBuf::from("c.crt")));

        let err = parse(&["--server-address=:9090", "--server-cert=s.crt"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
        assert_eq!(err.exit_code(), 2);
        let text = err.to_string();
        assert!(
            text.contains("--server-key") && text.contains("--client-cert"),
            "{text}"
        );
    }

    #[test]
    fn plugin_path_excludes_tls_flags() {
        let args = parse(&["--plugin-path=/tmp/plugins"]).unwrap();
        assert!(args.tls_files().is_none());
        let err = parse(&["--plugin-path=/p", "--server-cert=s.crt"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        assert_eq!(err.exit_code(), 2);
    }

    fn metadata() -> GetPluginMetadataResponse {
        GetPluginMetadataResponse {
            name: "labels.example.com".into(),
            version: "1.2.3".into(),
            display_name: "Labels".into(),
            description: "Adds labels to instance Pods".into(),
            project_url: "https://example.com/labels".into(),
            ..Default::default()
        }
    }

    #[test]
    fn version_and_help_come_from_the_plugin_metadata() {
        let metadata = metadata();
        let err = main_command("labels-plugin", Some(&metadata))
            .try_get_matches_from(["labels-plugin", "--version"])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DisplayVersion);
        assert_eq!(err.exit_code(), 0);
        assert_eq!(err.to_string(), "labels-plugin 1.2.3\n");

        let mut command = main_command("labels-plugin", Some(&metadata));
        let help = command.render_long_help().to_string();
        for expected in [
            "Labels (labels.example.com): Adds labels to instance Pods",
            "`labels-plugin plugin` serves it over gRPC",
            "Project: https://example.com/labels",
            "plugin",
        ] {
            assert!(help.contains(expected), "{expected:?} missing from {help}");
        }
        let short = command.render_help().to_string();
        assert!(
            short.contains("Labels (labels.example.com): Adds labels to instance Pods"),
            "{short}"
        );
    }

    #[test]
    fn without_metadata_the_help_is_generic_and_there_is_no_version_flag() {
        let err = main_command("p", None)
            .try_get_matches_from(["p", "--version"])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnknownArgument);
        let help = main_command("p", None).render_long_help().to_string();
        assert!(
            help.contains("A CNPG-I plugin") && help.contains("`p plugin` serves it"),
            "{help}"
        );
        // The plugin subcommand is still required.
        let err = main_command("p", None).try_get_matches_from(["p"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn registering_needs_the_tls_flags_and_the_operator_ca_and_advertises_the_listened_address() {
        let tls = [
            "--server-address=127.0.0.1:9090",
            "--server-cert=s.crt",
            "--server-key=s.key",
            "--client-cert=c.crt",
        ];
        let err = parse(&["--register-with=operator:9443"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
        let err = parse(&[&tls[..], &["--register-with=operator:9443"]].concat()).unwrap_err();
        assert!(err.to_string().contains("--registration-ca"), "{err}");

        let args = parse(&[&tls[..], &["--register-with=operator:9443", "--registration-ca=op.crt"]].concat()).unwrap();
        let listening: std::net::SocketAddr = "127.0.0.1:9090".parse().unwrap();
        let target = args.registration(listening).unwrap().unwrap();
        assert_eq!(target.endpoint, "operator:9443");
        assert_eq!(target.advertise, "127.0.0.1:9090");
        // The server certificate is the client certificate unless told otherwise.
        assert_eq!(
            (target.client_cert, target.client_key),
            (PathBuf::from("s.crt"), PathBuf::from("s.key"))
        );
        // Every interface is not an address to dial: the flag to give is named.
        let err = args.registration("0.0.0.0:9090".parse().unwrap()).unwrap_err();
        assert!(
            err.to_string()
                .contains("--advertise-address (CNPGI_ADVERTISE_ADDRESS)"),
            "{err}"
        );
        let args = parse(
            &[
                &tls[..],
                &[
                    "--register-with=operator:9443",
                    "--registration-ca=op.crt",
                    "--advertise-address=plugin.ns.svc:9090",
                ],
            ]
            .concat(),
        )
        .unwrap();
        let target = args.registration("0.0.0.0:9090".parse().unwrap()).unwrap().unwrap();
        assert_eq!(target.advertise, "plugin.ns.svc:9090");
        assert!(parse(&[]).unwrap().registration(listening).unwrap().is_none());
    }

    #[test]
    fn no_flags_means_the_default_socket_directory() {
        let args = parse(&[]).unwrap();
        assert!(args.tls_files().is_none() && args.plugin_path.is_none());
    }
}
