//! The Python MariaDB plugin registering itself: served over mutual TLS,
//! `--register-with` given through its environment (`CNPGI_REGISTER_WITH`, as
//! the Rust SDK reads it), it registers with the host's registration
//! endpoint, is chosen and routed to as the implementation a DatabaseTable
//! prefers (it refuses a column name that is not a lower-case identifier),
//! and is forgotten once killed. Run from the checkout, without generated
//! stubs: the plugin generates them from `proto/` at start. Needs python3
//! with `examples/database-table/plugins/mariadb/requirements.txt` installed
//! (as CI does).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use cnpgi_example_database_table::DatabaseTable;
use cnpgi_host::{
    Host, HostOptions,
    discovery::registration::{PluginTlsFiles, Registration, RegistrationOptions, ServerTlsFiles},
    registry::LookupError,
};
use cnpgi_pluginhelper::testing::{ExtendedKeyUsagePurpose, TestCert, eventually};
use serde_json::json;

const MARIADB: &str = "mariadb.tables.example.cnpgi.io";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mariadb_plugin_registers_is_chosen_and_routed_to_and_is_forgotten_when_killed() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCert::builder(&[]).ca().self_signed();
    ca.write(dir.path(), "ca").unwrap();
    let ca_path = dir.path().join("ca.crt");
    let leaf = |stem: &str, names: &[&str], usage| -> (PathBuf, PathBuf) {
        TestCert::builder(names)
            .usages(&[usage])
            .signed_by(&ca)
            .write(dir.path(), stem)
            .unwrap()
    };
    let endpoint = leaf("registration", &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let operator = leaf(
        "operator",
        &["database-table-operator"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let plugin_server = leaf("plugin-server", &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let plugin_client = leaf("plugin-client", &[MARIADB], ExtendedKeyUsagePurpose::ClientAuth);

    let host = Host::<DatabaseTable>::new(HostOptions::default());
    let mut options = RegistrationOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        ServerTlsFiles {
            cert: endpoint.0,
            key: endpoint.1,
            client_ca: Some(ca_path.clone()),
        },
        PluginTlsFiles {
            client_cert: operator.0,
            client_key: operator.1,
            server_ca: ca_path.clone(),
        },
    );
    options.ttl = Duration::from_secs(3);
    options.client = host.client_options();
    let source = Registration::bind(options).await.unwrap();
    let address = source.local_addr();
    host.discover(source);

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/mariadb/mariadb.py");
    let mut plugin = Killed(
        Command::new("python3")
            .arg(script)
            .env("SERVER_ADDRESS", "127.0.0.1:0")
            .env("SERVER_CERT", &plugin_server.0)
            .env("SERVER_KEY", &plugin_server.1)
            .env("CLIENT_CERT", &ca_path)
            .env("CNPGI_REGISTER_WITH", address.to_string())
            .env("CNPGI_REGISTRATION_CA", &ca_path)
            .env("CNPGI_REGISTRATION_CERT", &plugin_client.0)
            .env("CNPGI_REGISTRATION_KEY", &plugin_client.1)
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs (with requirements.txt installed)"),
    );

    eventually(
        "the Python plugin registered and is routable",
        Duration::from_secs(60),
        async || {
            if let Ok(Some(status)) = plugin.0.try_wait() {
                panic!("the Python plugin exited ({status}): see its log above (requirements.txt installed?)");
            }
            host.routable(MARIADB)
        },
    )
    .await;
    let table: DatabaseTable = serde_json::from_value(json!({
        "apiVersion": "example.cnpgi.io/v1",
        "kind": "DatabaseTable",
        "metadata": {"name": "orders", "namespace": "default"},
        "spec": {
            "name": "orders",
            "serverName": "app-db",
            "preferredImplementation": MARIADB,
            "columns": [{"name": "id", "type": "uint64"}, {"name": "Email", "type": "string"}],
        },
    }))
    .unwrap();
    let errors = host.validate_create(&table).await.unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        (errors[0].plugin.as_str(), errors[0].field.as_str()),
        (MARIADB, "spec.columns[1].name"),
        "{errors:?}"
    );
    assert!(errors[0].message.contains("lower-case identifier"), "{errors:?}");

    plugin.0.kill().unwrap();
    plugin.0.wait().unwrap();
    let reason = eventually(
        "the killed plugin is forgotten",
        Duration::from_secs(12),
        async || match host.routable(MARIADB) {
            Err(LookupError::Forgotten { reason, .. }) => Ok(reason),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(reason.contains("stopped heart-beating at"), "{reason}");
}
