//! The Python MariaDB plugin (`plugins/mariadb`) as a process, against a real
//! MariaDB server, called as the host calls it.
//!
//! The test lays the plugin out as its image does (its `*.py` files and the
//! stubs `stubs.py` generates, no `proto/` in reach), starts a MariaDB
//! server from Debian's packages (`mariadb-install-db`, `mariadbd`: `apt-get
//! install mariadb-server`) on a free port, a fake Kubernetes API server
//! answering the server's `<serverName>-app` Secret to the right bearer
//! token only, and the plugin on a Unix socket with `--server-override` and
//! `--kube-api-server`. It then calls the plugin through the project's
//! client (`PluginClient`, a deadline on every call) with the DatabaseTable
//! JSON and its resolved references under `cnpgi.io/references`, as the
//! host sends them, and checks MariaDB's `information_schema` with the
//! `mariadb` client.
//!
//! Needs python3 with `plugins/mariadb/requirements.txt` installed, and
//! MariaDB's server and client.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    thread,
    time::Duration,
};

use cnpgi_core::references::{ObjectReference, ResolvedReference, split_reports, with_references};
use cnpgi_host::{ClientOptions, PluginClient, Transport};
use cnpgi_pluginhelper::{
    proto::{
        identity::v1::{GetPluginCapabilitiesRequest, GetPluginMetadataRequest, plugin_capability},
        operator::v1::{
            OperatorValidateClusterChangeRequest, OperatorValidateClusterCreateRequest, SetStatusInClusterRequest,
            ValidationError,
        },
        reconciler::v1::{ReconcilerHooksRequest, reconciler_hooks_result::Behavior},
    },
    testing::{ChildGuard, eventually},
    tonic::{Code, Status},
};
use k8s_openapi::ByteString;
use serde_json::{Value, json};

const PLUGIN: &str = "mariadb.tables.example.cnpgi.io";
const NAMESPACE: &str = "tables";
const TOKEN: &str = "the-plugins-service-account-token";

/// Runs `command`, panicking with its output when it fails.
fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `name`'s path, on PATH or in the sbin directories Debian installs servers to.
fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found: install MariaDB (Debian: apt-get install -y mariadb-server), as .ci/run does")
        })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A MariaDB server of its own data directory, killed when dropped.
struct MariaDb {
    socket: PathBuf,
    port: u16,
    server: ChildGuard,
}

impl MariaDb {
    async fn start(dir: &Path) -> Self {
        let data = dir.join("data");
        let user = String::from_utf8(run(Command::new("id").arg("-un")).stdout).unwrap();
        let user = format!("--user={}", user.trim());
        run(Command::new(program("mariadb-install-db"))
            .args([
                "--no-defaults",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                &user,
            ])
            .arg(format!("--datadir={}", data.display())));
        let socket = dir.join("mariadbd.sock");
        let port = free_port();
        let log = std::fs::File::create(dir.join("mariadbd.log")).unwrap();
        let server = ChildGuard::spawn(
            Command::new(program("mariadbd"))
                .args([
                    "--no-defaults",
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve",
                    &user,
                ])
                .args(["--innodb-buffer-pool-size=32M", "--max-connections=20"])
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(log),
        )
        .unwrap();
        let mut db = Self { socket, port, server };
        let log = dir.join("mariadbd.log");
        eventually("MariaDB accepts connections", Duration::from_secs(60), async || {
            if let Ok(Some(status)) = db.server.try_wait() {
                panic!(
                    "mariadbd exited ({status}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            db.try_sql("SELECT 1")
        })
        .await;
        db
    }

    /// Runs `sql` as root (over the socket): its rows, tab-separated.
    fn try_sql(&self, sql: &str) -> Result<String, String> {
        let output = Command::new("mariadb")
            .args([
                "--no-defaults",
                "--user=root",
                "--batch",
                "--skip-column-names",
                "--connect-timeout=5",
            ])
            .arg(format!("--socket={}", self.socket.display()))
            .args(["-e", sql])
            .output()
            .map_err(|e| format!("cannot run the mariadb client (apt-get install mariadb-client): {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim_end().to_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `name type [NOT NULL]` of each column of `app.table`, in order.
    fn columns(&self, table: &str) -> Vec<String> {
        let rows = self.sql(&format!(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION"
        ));
        rows.lines()
            .map(|row| {
                let fields: Vec<&str> = row.split('\t').collect();
                let not_null = if fields[2] == "NO" { " NOT NULL" } else { "" };
                format!("{} {}{not_null}", fields[0], fields[1])
            })
            .collect()
    }

    /// `app.table`'s engine as information_schema.TABLES says; empty when there is no such table.
    fn engine(&self, table: &str) -> String {
        self.sql(&format!(
            "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = '{table}'"
        ))
    }
}

/// A fake Kubernetes API server: `GET /api/v1/namespaces/tables/secrets/app-db-app`
/// with the bearer token [`TOKEN`] answers the Secret; anything else 401 or 404.
fn fake_api_server(password: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let data = |value: &str| serde_json::to_value(ByteString(value.as_bytes().to_vec())).unwrap();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "app-db-app", "namespace": NAMESPACE},
        "data": {"username": data("app"), "password": data(password), "dbname": data("app")},
    })
    .to_string();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            answer(stream, &secret);
        }
    });
    url
}

fn answer(mut stream: TcpStream, secret: &str) {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut authorized = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or_default();
        authorized |= name.eq_ignore_ascii_case("authorization") && value.trim() == format!("Bearer {TOKEN}");
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or_default();
    let (status, body) = if !authorized {
        ("401 Unauthorized", r#"{"kind":"Status","code":401}"#)
    } else if path == format!("/api/v1/namespaces/{NAMESPACE}/secrets/app-db-app") {
        ("200 OK", secret)
    } else {
        ("404 Not Found", r#"{"kind":"Status","code":404}"#)
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The plugin laid out as in its image: the Python files and the generated
/// stubs in one directory, no `proto/` in reach.
fn lay_out_plugin(dir: &Path) -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugins/mariadb");
    let app = dir.join("app");
    std::fs::create_dir_all(&app).unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&path, app.join(path.file_name().unwrap())).unwrap();
        }
    }
    let proto = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    run(Command::new("python3")
        .arg(app.join("stubs.py"))
        .arg(app.join("cnpgi_stubs"))
        .arg("--proto")
        .arg(proto));
    app.join("mariadb.py")
}

fn reference(kind: &str, name: &str, index: usize) -> ObjectReference {
    ObjectReference {
        api_version: "example.cnpgi.io/v1".into(),
        kind: kind.into(),
        name: name.into(),
        field: format!("spec.references[{index}]"),
    }
}

/// A DatabaseTable as the host sends it: the resource with its references
/// resolved (a MariaDbDatabaseTable of `engine`, a PostgreSqlDatabaseTable the
/// plugin must ignore) under `cnpgi.io/references`.
fn table(name: &str, engine: Option<&str>, columns: Value, extra: Value) -> Value {
    let mut spec = json!({
        "name": name,
        "serverName": "app-db",
        "preferredImplementation": PLUGIN,
        "columns": columns,
        "references": [
            {"apiVersion": "example.cnpgi.io/v1", "kind": "PostgreSqlDatabaseTable", "name": name},
        ],
    });
    let mut resolved = vec![ResolvedReference::found(
        reference("PostgreSqlDatabaseTable", name, 0),
        json!({"spec": {"partitionBy": {"type": "hash", "column": "id", "partitions": 4}}}),
    )];
    if let Some(engine) = engine {
        spec["references"].as_array_mut().unwrap().push(
            json!({"apiVersion": "example.cnpgi.io/v1", "kind": "MariaDbDatabaseTable", "name": format!("{name}-mariadb")}),
        );
        resolved.push(ResolvedReference::found(
            reference("MariaDbDatabaseTable", &format!("{name}-mariadb"), 1),
            json!({
                "apiVersion": "example.cnpgi.io/v1", "kind": "MariaDbDatabaseTable",
                "metadata": {"name": format!("{name}-mariadb"), "namespace": NAMESPACE},
                "spec": {"storageEngine": engine},
            }),
        ));
    }
    for (key, value) in extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    let resource = json!({
        "apiVersion": "example.cnpgi.io/v1",
        "kind": "DatabaseTable",
        "metadata": {"name": name, "namespace": NAMESPACE, "generation": 1, "uid": format!("uid-{name}")},
        "spec": spec,
    });
    with_references(&resource, &resolved)
}

fn deleted(mut table: Value) -> Value {
    table["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    table["metadata"]["finalizers"] = json!(["cnpgi.io/plugins"]);
    table
}

/// The plugin as the host reaches it.
struct Calls(PluginClient);

impl Calls {
    async fn pre(&self, table: &Value) -> Result<Behavior, Status> {
        let bytes = serde_json::to_vec(table).unwrap();
        let request = self.0.request(ReconcilerHooksRequest {
            cluster_definition: bytes.clone(),
            resource_definition: bytes,
        });
        let answer = self.0.reconciler().pre(request).await?.into_inner();
        Ok(Behavior::try_from(answer.behavior).unwrap())
    }

    async fn synced(&self, table: &Value) {
        let behavior = self.pre(table).await.unwrap_or_else(|status| {
            panic!(
                "Pre on {}: {:?}: {}",
                table["spec"]["name"],
                status.code(),
                status.message()
            )
        });
        assert_eq!(behavior, Behavior::Continue);
    }

    /// The status answer, split as the host splits it: the plugin's own
    /// entry, and its reports on referenced objects.
    async fn status(&self, table: &Value) -> (Value, Vec<cnpgi_core::references::ReferenceReport>) {
        let request = self.0.request(SetStatusInClusterRequest {
            cluster: serde_json::to_vec(table).unwrap(),
        });
        let answer = self
            .0
            .operator()
            .set_status_in_cluster(request)
            .await
            .unwrap()
            .into_inner();
        let status: Value = serde_json::from_slice(&answer.json_status).expect("a JSON status");
        split_reports(&status)
    }

    async fn validate(&self, table: &Value) -> Vec<ValidationError> {
        let request = self.0.request(OperatorValidateClusterCreateRequest {
            definition: serde_json::to_vec(table).unwrap(),
        });
        self.0
            .operator()
            .validate_cluster_create(request)
            .await
            .unwrap()
            .into_inner()
            .validation_errors
    }

    async fn validate_change(&self, old: &Value, new: &Value) -> Vec<ValidationError> {
        let request = self.0.request(OperatorValidateClusterChangeRequest {
            old_cluster: serde_json::to_vec(old).unwrap(),
            new_cluster: serde_json::to_vec(new).unwrap(),
        });
        self.0
            .operator()
            .validate_cluster_change(request)
            .await
            .unwrap()
            .into_inner()
            .validation_errors
    }
}

fn paths(errors: &[ValidationError]) -> Vec<String> {
    errors.iter().map(|e| e.path_components.join(".")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mariadb_plugin_makes_tables_with_their_engine_reports_them_and_drops_them_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = MariaDb::start(dir.path()).await;
    db.sql(
        "CREATE DATABASE app; CREATE USER 'app'@'%' IDENTIFIED BY 'app-password'; \
         GRANT ALL PRIVILEGES ON app.* TO 'app'@'%'",
    );
    let api = fake_api_server("app-password");
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let script = lay_out_plugin(dir.path());
    let sockets = dir.path().join("plugins");
    std::fs::create_dir(&sockets).unwrap();
    let mut plugin = ChildGuard::spawn(
        Command::new("python3")
            .arg(&script)
            .arg("--plugin-path")
            .arg(&sockets)
            .arg("--kube-api-server")
            .arg(&api)
            .arg("--kube-token-file")
            .arg(&token)
            // The flag and the environment variable both count.
            .args(["--server-override", &format!("app-db=127.0.0.1:{}", db.port)])
            .env("DBT_SERVER_OVERRIDES", "unused=127.0.0.1:1")
            .stdout(Stdio::null()),
    )
    .expect("python3 runs");
    let socket = sockets.join(PLUGIN);
    eventually("the plugin serves its socket", Duration::from_secs(60), async || {
        if let Ok(Some(status)) = plugin.try_wait() {
            panic!("the plugin exited ({status}): see its log above (requirements.txt installed?)");
        }
        socket.exists()
    })
    .await;
    let options = ClientOptions {
        call_timeout: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let client = PluginClient::new(PLUGIN, Transport::Unix { path: socket.clone() }, &options).unwrap();
    let calls = Calls(client.clone());

    // Who it is: an implementation of tables.example.cnpgi.io, with the Operator and ReconcilerHooks services.
    let metadata = client
        .identity()
        .get_plugin_metadata(client.request(GetPluginMetadataRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(metadata.name, PLUGIN);
    assert_eq!(
        metadata.manifest.get("cnpgi.io/implements").map(String::as_str),
        Some("tables.example.cnpgi.io")
    );
    let capabilities = client
        .identity()
        .get_plugin_capabilities(client.request(GetPluginCapabilitiesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let services: Vec<_> = capabilities
        .capabilities
        .iter()
        .filter_map(|c| {
            c.r#type
                .as_ref()
                .map(|plugin_capability::Type::Service(service)| service.r#type())
        })
        .collect();
    assert_eq!(
        services,
        [
            plugin_capability::service::Type::OperatorService,
            plugin_capability::service::Type::ReconcilerHooks
        ]
    );

    // Admission: types and names, the engine its reference names, MEMORY without text; name and server fixed.
    let all_types = json!([
        {"name": "id", "type": "uint64"},
        {"name": "email", "type": "string", "nullable": true},
        {"name": "bio", "type": "text", "nullable": true},
        {"name": "age", "type": "int32"},
        {"name": "visits", "type": "int64"},
        {"name": "active", "type": "bool"},
        {"name": "created_at", "type": "timestamp"},
        {"name": "score", "type": "float64", "nullable": true},
    ]);
    let users = table("users", Some("Aria"), all_types.clone(), json!({}));
    assert_eq!(calls.validate(&users).await, []);
    let bad = table(
        "users",
        Some("Blackhole"),
        json!([{"name": "Id", "type": "uint64"}, {"name": "email", "type": "strng"}, {"name": "email", "type": "text"}]),
        json!({}),
    );
    let errors = calls.validate(&bad).await;
    assert_eq!(
        paths(&errors),
        [
            "spec.columns.0.name",
            "spec.columns.1.type",
            "spec.columns.2.name",
            "spec.references.1"
        ],
        "{errors:?}"
    );
    assert!(errors[3].message.contains("storageEngine 'Blackhole'"), "{errors:?}");
    let memory = table("users", Some("MEMORY"), all_types.clone(), json!({}));
    let errors = calls.validate(&memory).await;
    assert_eq!(paths(&errors), ["spec.columns.2.type"], "{errors:?}");
    assert!(errors[0].message.contains("MEMORY"), "{errors:?}");
    let renamed = table(
        "people",
        Some("Aria"),
        all_types.clone(),
        json!({"serverName": "other-db"}),
    );
    let errors = calls.validate_change(&users, &renamed).await;
    assert_eq!(paths(&errors), ["spec.name", "spec.serverName"], "{errors:?}");

    // Created with the mapped types and the engine its MariaDbDatabaseTable names.
    calls.synced(&users).await;
    assert_eq!(
        db.columns("users"),
        [
            "id bigint(20) unsigned NOT NULL",
            "email varchar(255)",
            "bio text",
            "age int(11) NOT NULL",
            "visits bigint(20) NOT NULL",
            "active tinyint(1) NOT NULL",
            "created_at datetime(6) NOT NULL",
            "score double",
        ]
    );
    assert_eq!(db.engine("users"), "Aria");
    let (own, reports) = calls.status(&users).await;
    assert_eq!(own["table"], "app.users", "{own}");
    assert_eq!(own["engine"], "Aria", "{own}");
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(
        (reports[0].kind.as_str(), reports[0].name.as_str()),
        ("MariaDbDatabaseTable", "users-mariadb")
    );
    assert_eq!(reports[0].status, json!({"table": "app.users", "engine": "Aria"}));
    // In sync: nothing to apply the second time.
    calls.synced(&users).await;
    assert_eq!(calls.status(&users).await.0["applied"], json!([]));

    // The engine changed and a column added (after its predecessor), in one statement.
    db.sql("INSERT INTO app.users (id, age, visits, active, created_at) VALUES (1, 30, 2, 1, NOW(6))");
    let mut columns = all_types.as_array().unwrap().clone();
    columns.insert(1, json!({"name": "nickname", "type": "string", "nullable": true}));
    let changed = table("users", Some("InnoDB"), json!(columns), json!({}));
    calls.synced(&changed).await;
    assert_eq!(db.engine("users"), "InnoDB");
    assert_eq!(db.columns("users")[1], "nickname varchar(255)");
    assert_eq!(db.sql("SELECT id, age FROM app.users"), "1\t30", "the row survives");
    let (own, reports) = calls.status(&changed).await;
    let applied = own["applied"][0].as_str().unwrap();
    assert!(
        applied.contains("ADD COLUMN `nickname` VARCHAR(255) AFTER `id`") && applied.ends_with("ENGINE=InnoDB"),
        "{own}"
    );
    assert_eq!(reports[0].status, json!({"table": "app.users", "engine": "InnoDB"}));

    // A column dropped from the spec stays until dropExtraColumns says otherwise.
    let fewer = table("users", Some("InnoDB"), json!(columns[..3]), json!({}));
    calls.synced(&fewer).await;
    assert_eq!(db.columns("users").len(), 9);
    let dropping = table(
        "users",
        Some("InnoDB"),
        json!(columns[..3]),
        json!({"dropExtraColumns": true}),
    );
    calls.synced(&dropping).await;
    assert_eq!(
        db.columns("users"),
        [
            "id bigint(20) unsigned NOT NULL",
            "nickname varchar(255)",
            "email varchar(255)"
        ]
    );

    // No MariaDbDatabaseTable: InnoDB, and no report.
    let plain = table(
        "events",
        None,
        json!([{"name": "id", "type": "int64"}]),
        json!({"deletionPolicy": "Delete"}),
    );
    calls.synced(&plain).await;
    assert_eq!(db.engine("events"), "InnoDB");
    let (own, reports) = calls.status(&plain).await;
    assert_eq!(own["engine"], "InnoDB");
    assert!(reports.is_empty(), "{reports:?}");

    // Failures are gRPC statuses saying what failed and what to do.
    let mut elsewhere = users.clone();
    elsewhere["spec"]["serverName"] = json!("nowhere");
    let status = calls.pre(&elsewhere).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("Secret tables/nowhere-app") && status.message().contains("404"),
        "{status:?}"
    );
    let mut missing = table(
        "orders",
        Some("Aria"),
        json!([{"name": "id", "type": "int64"}]),
        json!({}),
    );
    missing["cnpgi.io/references"][1] = serde_json::to_value(ResolvedReference::missing(
        reference("MariaDbDatabaseTable", "orders-mariadb", 1),
        "MariaDbDatabaseTable orders-mariadb not found",
    ))
    .unwrap();
    let status = calls.pre(&missing).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("create it, or remove the reference"),
        "{status:?}"
    );
    assert_eq!(db.engine("orders"), "", "nothing created without its settings");

    // Deletion: kept under the default policy (Keep), dropped under Delete.
    calls.synced(&users).await;
    assert_eq!(calls.pre(&deleted(users.clone())).await.unwrap(), Behavior::Continue);
    assert_eq!(db.engine("users"), "Aria", "kept");
    assert_eq!(calls.pre(&deleted(plain.clone())).await.unwrap(), Behavior::Continue);
    assert_eq!(db.engine("events"), "", "dropped");
    let (own, _) = calls.status(&deleted(plain)).await;
    assert_eq!(own["deleted"], true, "{own}");

    // SIGTERM: it stops, removes its socket, exits 0.
    let status = plugin.terminate(Duration::from_secs(15)).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists());
}
