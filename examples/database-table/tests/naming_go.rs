//! The Go naming plugin (`plugins/naming`, on upstream's cnpg-i and
//! cnpg-i-machinery), built with `go build` and run as a process, reached
//! the host's way: over mutual TLS through the project's client
//! (`PluginClient`, probed by the host), and by registering itself with the
//! host's registration endpoint (`CNPGI_REGISTER_WITH`).
//!
//! Needs Go >= 1.25 on PATH (or `GO=/path/to/go`) and its modules
//! (github.com/cloudnative-pg/cnpg-i v0.6.0, cnpg-i-machinery v0.4.2 and
//! theirs) in the module cache or from the module proxy. The DatabaseTables
//! sent are JSON, not this crate's types: the plugin reads the JSON.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    fs::File,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use cnpgi_core::layout::PluginLayout;
use cnpgi_example_database_table::{DatabaseTable, ImplementationLayout};
use cnpgi_host::{
    Host, HostOptions, PluginClient,
    discovery::{
        registration::{PluginTlsFiles, Registration, RegistrationOptions, ServerTlsFiles},
        static_list::{StaticPlugin, TlsFiles},
    },
    registry::{LookupError, Routable},
};
use cnpgi_pluginhelper::{
    proto::operator::v1::{OperatorValidateClusterChangeRequest, OperatorValidateClusterCreateRequest},
    testing::{ChildGuard, ExtendedKeyUsagePurpose, TestCa, eventually},
    tonic,
};
use serde_json::{Value, json};

const NAMING: &str = "naming.tables.example.cnpgi.io";

/// The plugin's binary, built once per test run into this crate's
/// temporary directory of the target dir.
fn plugin_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/naming");
        let binary = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("naming-go/naming");
        let go = std::env::var_os("GO").unwrap_or_else(|| "go".into());
        // As the image builds it: static, no VCS stamp (the checkout may be a worktree).
        let built = Command::new(&go)
            .args(["build", "-trimpath", "-buildvcs=false", "-o"])
            .arg(&binary)
            .arg(".")
            .current_dir(&source)
            .env("CGO_ENABLED", "0")
            .env("GOTOOLCHAIN", "local")
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run {go:?} to build the Go naming plugin in {}: {error}; install Go >= 1.25 \
                     (https://go.dev/dl) and put it on PATH, or set GO to its path",
                    source.display()
                )
            });
        assert!(
            built.status.success(),
            "`go build` of the naming plugin in {} failed ({}); its modules come from the module cache or \
             GOPROXY:\n{}",
            source.display(),
            built.status,
            String::from_utf8_lossy(&built.stderr)
        );
        binary
    })
}

/// A free TCP port on 127.0.0.1: machinery's server does not say which port
/// it picked for `:0`, and registering needs the address.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The plugin serving mutual TLS on 127.0.0.1:`port` with the server
/// certificate of `pki`, trusting clients of its CA; `env` adds settings
/// (registration); its log goes to `<stem>.log` in the PKI's directory.
fn spawn_plugin(pki: &TestCa, stem: &str, port: u16, env: &[(&str, PathBuf)]) -> (ChildGuard, PathBuf) {
    let (server_crt, server_key) = pki.leaf(
        &format!("{stem}-server"),
        &["127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let log = pki.dir().join(format!("{stem}.log"));
    let mut command = Command::new(plugin_binary());
    command
        .args(["plugin", "--log-format", "text"])
        .arg(format!("--server-address=127.0.0.1:{port}"))
        .arg("--server-cert")
        .arg(server_crt)
        .arg("--server-key")
        .arg(server_key)
        // The SDK's environment names, as a Deployment may give them.
        .env("CLIENT_CERT", pki.ca_path())
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap());
    for (name, value) in env {
        command.env(name, value);
    }
    (ChildGuard::spawn(&mut command).unwrap(), log)
}

fn read_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// A DatabaseTable of the shared design (issue 33), as JSON.
fn table(name: &str, columns: &[&str]) -> Value {
    let columns: Vec<Value> = columns.iter().map(|c| json!({"name": c, "type": "string"})).collect();
    json!({
        "apiVersion": "example.cnpgi.io/v1",
        "kind": "DatabaseTable",
        "metadata": {"name": "t", "namespace": "tables"},
        "spec": {
            "name": name,
            "serverName": "app-db",
            "preferredImplementation": "postgres.tables.example.cnpgi.io",
            "policies": [NAMING],
            "columns": columns,
        },
        "cnpgi.io/references": [],
    })
}

/// The errors of `ValidateClusterCreate` on `table`, as (field path, value,
/// message), the field path rendered by the example's layout as the host
/// renders it (the naming plugin is `spec.policies[0]`: index 1).
async fn validate_create(plugin: &Routable, table: &Value) -> Result<Vec<(String, String, String)>, tonic::Status> {
    let request = OperatorValidateClusterCreateRequest {
        definition: serde_json::to_vec(table).unwrap(),
    };
    let answer = plugin
        .client
        .operator()
        .validate_cluster_create(plugin.client.request(request))
        .await?;
    Ok(rendered(answer.into_inner().validation_errors))
}

async fn validate_change(plugin: &Routable, old: &Value, new: &Value) -> Vec<(String, String, String)> {
    let request = OperatorValidateClusterChangeRequest {
        old_cluster: serde_json::to_vec(old).unwrap(),
        new_cluster: serde_json::to_vec(new).unwrap(),
    };
    let answer = plugin
        .client
        .operator()
        .validate_cluster_change(plugin.client.request(request))
        .await;
    rendered(answer.unwrap().into_inner().validation_errors)
}

fn rendered(errors: Vec<cnpgi_pluginhelper::proto::operator::v1::ValidationError>) -> Vec<(String, String, String)> {
    errors
        .into_iter()
        .map(|e| {
            (
                ImplementationLayout.field_path(&e.path_components, 1),
                e.value,
                e.message,
            )
        })
        .collect()
}

/// What the issue asks of the naming policy, through `plugin`.
async fn check_the_policy(plugin: &Routable) {
    let refused = validate_create(plugin, &table("user", &["id", "email"])).await.unwrap();
    assert_eq!(
        refused,
        [(
            "spec.name".to_owned(),
            "user".to_owned(),
            r#""user" is a reserved word in SQL: choose another name"#.to_owned()
        )]
    );
    let refused = validate_create(plugin, &table("orders", &["id", "select"]))
        .await
        .unwrap();
    let paths: Vec<(&str, &str)> = refused.iter().map(|(p, v, _)| (p.as_str(), v.as_str())).collect();
    assert_eq!(paths, [("spec.columns[1].name", "select")], "{refused:?}");
    let admitted = validate_create(plugin, &table("users", &["id", "email", "selected"]))
        .await
        .unwrap();
    assert_eq!(admitted, [], "a good table refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_plugin_serves_mutual_tls_and_refuses_reserved_words_at_their_field_paths() {
    let pki = TestCa::new();
    let operator = pki.leaf(
        "operator",
        &["database-table-operator"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let port = free_port();
    let (mut plugin, log) = spawn_plugin(&pki, "plugin", port, &[]);
    // The host's static discovery (`--plugin NAME=https://HOST:PORT`), mutual TLS.
    let connect = |(client_cert, client_key): &(PathBuf, PathBuf), host: &Host<DatabaseTable>| -> PluginClient {
        let files = TlsFiles {
            client_cert: client_cert.clone(),
            client_key: client_key.clone(),
            server_cert: pki.ca_path(),
            server_name: None,
        };
        let plugin = StaticPlugin::parse(&format!("{NAMING}=https://127.0.0.1:{port}"), Some(&files)).unwrap();
        plugin.client(&host.client_options()).unwrap()
    };

    // Probed by the host, as a discovery source would have it probed.
    eventually("the Go plugin listens", Duration::from_secs(60), async || {
        if let Ok(Some(status)) = plugin.try_wait() {
            panic!("the Go plugin exited ({status}):\n{}", read_log(&log));
        }
        std::net::TcpStream::connect(("127.0.0.1", port)).map(drop)
    })
    .await;
    let host = Host::<DatabaseTable>::new(HostOptions::default());
    host.add_plugin("naming-go test", connect(&operator, &host))
        .await
        .unwrap();
    let routable = host.routable(NAMING).unwrap();
    let metadata = &routable.info.metadata;
    assert_eq!(
        (
            metadata.name.as_str(),
            metadata.version.as_str(),
            metadata.display_name.as_str()
        ),
        (NAMING, "0.1.0", "Table naming policy")
    );
    assert_eq!(routable.info.service_names(), ["TYPE_OPERATOR_SERVICE"]);
    assert_eq!(
        routable.info.operator_rpc_names(),
        ["TYPE_VALIDATE_CLUSTER_CREATE", "TYPE_VALIDATE_CLUSTER_CHANGE"]
    );

    check_the_policy(&routable).await;
    // A change is judged on the new table.
    let changed = validate_change(
        &routable,
        &table("users", &["id"]),
        &table("users", &["id", "email", "order"]),
    )
    .await;
    let paths: Vec<&str> = changed.iter().map(|(p, ..)| p.as_str()).collect();
    assert_eq!(paths, ["spec.columns[2].name"], "{changed:?}");
    // A CloudNativePG Cluster is not what it validates.
    let cluster = json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "spec": {"instances": 1}});
    let refused = validate_create(&routable, &cluster).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains(r#"its kind is "Cluster""#), "{refused:?}");
    // Everything else of the Operator service is not served.
    let mutate = routable
        .client
        .operator()
        .mutate_cluster(routable.client.request(Default::default()))
        .await
        .unwrap_err();
    assert_eq!(mutate.code(), tonic::Code::Unimplemented, "{mutate:?}");

    // Mutual TLS: a client certificate of another CA is not served.
    let strangers = TestCa::new();
    let stranger = strangers.leaf(
        "stranger",
        &["database-table-operator"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let other_host = Host::<DatabaseTable>::new(HostOptions::default());
    other_host
        .add_plugin("stranger", connect(&stranger, &other_host))
        .await
        .unwrap();
    let refused = other_host.routable(NAMING).map(|r| r.info.metadata.name.clone());
    assert!(
        matches!(&refused, Err(LookupError::NotReady { reason, .. }) if reason.contains("GetPluginMetadata failed")),
        "a client of another CA was served: {refused:?}"
    );

    let status = plugin.terminate(Duration::from_secs(10)).await.unwrap();
    let log = read_log(&log);
    assert!(status.success(), "SIGTERM: {status}\n{log}");
    assert!(log.contains("validated"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_plugin_registers_itself_is_routed_to_and_a_certificate_naming_another_plugin_is_refused() {
    let pki = TestCa::new();
    let ca = pki.ca_path();
    let (endpoint_crt, endpoint_key) = pki.leaf("registration", &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (operator_crt, operator_key) = pki.leaf(
        "operator",
        &["database-table-operator"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (client_crt, client_key) = pki.leaf("plugin-client", &[NAMING], ExtendedKeyUsagePurpose::ClientAuth);
    let (rogue_crt, rogue_key) = pki.leaf("rogue", &["other.example.com"], ExtendedKeyUsagePurpose::ClientAuth);

    let host = Host::<DatabaseTable>::new(HostOptions::default());
    let mut options = RegistrationOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        ServerTlsFiles {
            cert: endpoint_crt,
            key: endpoint_key,
            client_ca: Some(ca.clone()),
        },
        PluginTlsFiles {
            client_cert: operator_crt,
            client_key: operator_key,
            server_ca: ca.clone(),
        },
    );
    options.ttl = Duration::from_secs(3);
    options.client = host.client_options();
    let source = Registration::bind(options).await.unwrap();
    let endpoint = PathBuf::from(source.local_addr().to_string());
    host.discover(source);
    // The SDK's environment names, as a Deployment may give them.
    let registration = |crt: &Path, key: &Path| -> Vec<(&'static str, PathBuf)> {
        vec![
            ("CNPGI_REGISTER_WITH", endpoint.clone()),
            ("CNPGI_REGISTRATION_CA", ca.clone()),
            ("CNPGI_REGISTRATION_CERT", crt.to_owned()),
            ("CNPGI_REGISTRATION_KEY", key.to_owned()),
        ]
    };

    // A plugin whose client certificate names another plugin is refused,
    // and keeps trying (with backoff) without ever being routed to.
    let (mut rogue, rogue_log) = spawn_plugin(&pki, "rogue", free_port(), &registration(&rogue_crt, &rogue_key));
    eventually(
        "the rogue registration is refused",
        Duration::from_secs(60),
        async || {
            if let Ok(Some(status)) = rogue.try_wait() {
                panic!("the Go plugin exited ({status}):\n{}", read_log(&rogue_log));
            }
            let log = read_log(&rogue_log);
            let refusals = log
                .lines()
                .filter(|l| l.contains("cannot register with the operator"))
                .count();
            refusals >= 2
                && log.contains("PermissionDenied")
                && log.contains(&format!("does not name plugin {NAMING}"))
                && log.contains("DNS:other.example.com")
        },
    )
    .await;
    assert!(
        matches!(host.routable(NAMING), Err(LookupError::Unknown { .. })),
        "{:?}",
        host.routable(NAMING).map(|r| r.info.metadata.name.clone())
    );
    rogue.terminate(Duration::from_secs(10)).await.unwrap();

    // The plugin with its own certificate registers and is routed to.
    let (mut plugin, log) = spawn_plugin(&pki, "plugin", free_port(), &registration(&client_crt, &client_key));
    let routable = eventually(
        "the Go plugin registered and is routable",
        Duration::from_secs(60),
        async || {
            if let Ok(Some(status)) = plugin.try_wait() {
                panic!("the Go plugin exited ({status}):\n{}", read_log(&log));
            }
            host.routable(NAMING).map_err(|e| e.to_string())
        },
    )
    .await;
    assert_eq!(routable.info.metadata.name, NAMING);
    check_the_policy(&routable).await;
    // It keeps its lease (3 s, heart-beating every second) past its TTL.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(host.routable(NAMING).is_ok(), "{}", read_log(&log));
    assert!(
        read_log(&log).contains("registered with the operator"),
        "{}",
        read_log(&log)
    );

    // Stopped, it stops heart-beating and is forgotten.
    plugin.terminate(Duration::from_secs(10)).await.unwrap();
    let reason = eventually(
        "the stopped plugin is forgotten",
        Duration::from_secs(12),
        async || match host.routable(NAMING) {
            Err(LookupError::Forgotten { reason, .. }) => Ok(reason),
            other => Err(format!("{:?}", other.map(|r| r.info.metadata.name.clone()))),
        },
    )
    .await;
    assert!(reason.contains("stopped heart-beating at"), "{reason}");
}
