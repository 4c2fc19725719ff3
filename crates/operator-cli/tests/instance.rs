//! The instance commands (`wal-archive`, `wal-restore`, `backup`, `restore`,
//! `metrics`) as PostgreSQL and an operator would run them: the real
//! `cnpgi-operator` binary, a real plugin process (`cnpgi-dir-plugin`) on a
//! Unix socket, the Cluster in a file, and the exit codes and one-line
//! errors PostgreSQL sees.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    io::{Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use cnpgi_pluginhelper::testing::ChildGuard;
use common::{BIN, workspace_binary};
use serde_json::Value;

const PLUGIN: &str = "cnpgi-dir-plugin.example.com";

/// A plugin serving in a socket directory, with its archive and a PGDATA.
struct Setup {
    root: tempfile::TempDir,
    plugin: Option<ChildGuard>,
}

impl Setup {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for dir in ["sockets", "archive", "pgdata/pg_wal"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("pgdata/PG_VERSION"), "17\n").unwrap();
        let mut setup = Self { root, plugin: None };
        setup.write_cluster("cluster.yaml", "");
        setup.start_plugin();
        setup
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    fn sockets(&self) -> PathBuf {
        self.path("sockets")
    }

    /// The plugin started on `sockets/`, once its socket is there.
    fn start_plugin(&mut self) {
        let guard = ChildGuard::spawn(
            Command::new(workspace_binary("cnpgi-dir-plugin"))
                .arg("plugin")
                .arg(format!("--plugin-path={}", self.sockets().display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .unwrap();
        let socket = self.sockets().join(PLUGIN);
        let started = Instant::now();
        while !socket.exists() {
            assert!(started.elapsed() < Duration::from_secs(20), "the plugin did not serve");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.plugin = Some(guard);
    }

    /// A Cluster enabling the plugin as WAL archiver, with extra YAML lines
    /// appended to its `parameters`.
    fn write_cluster(&self, name: &str, extra_parameters: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: pg\n  namespace: db\nspec:\n  plugins:\n  - name: {PLUGIN}\n    isWALArchiver: true\n    parameters:\n      archive: {}\n      pgdata: {}\n{extra_parameters}",
                self.path("archive").display(),
                self.path("pgdata").display()
            ),
        )
        .unwrap();
        path
    }

    /// `cnpgi-operator ARGS` in PGDATA, as PostgreSQL runs its commands, with
    /// the Cluster and socket directory from the environment.
    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &self.path("cluster.yaml"))
    }

    fn run_with(&self, args: &[&str], cluster: &Path) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.path("pgdata"))
            .env("CNPGI_CLUSTER", cluster)
            .env("CNPGI_PLUGIN_DIR", self.sockets())
            .env_remove("PGDATA")
            .output()
            .unwrap()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The exit code, and stderr as the single line PostgreSQL logs.
fn failed(output: &Output) -> (i32, String) {
    let text = stderr(output);
    assert_eq!(text.lines().count(), 1, "one line on stderr: {text:?}");
    (output.status.code().unwrap(), text.trim_end().to_owned())
}

const SEGMENT: &str = "000000010000000000000001";

#[test]
fn wal_archive_then_restore_round_trip() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), b"segment one").unwrap();

    let archived = setup.run(&["wal-archive", &format!("pg_wal/{SEGMENT}")]);
    assert!(archived.status.success(), "{}", stderr(&archived));
    assert!(stderr(&archived).is_empty(), "silent on success: {}", stderr(&archived));
    assert_eq!(
        std::fs::read(setup.path("archive").join(SEGMENT)).unwrap(),
        b"segment one"
    );

    // PostgreSQL retries after a crash: the same content again is a success.
    assert!(
        setup
            .run(&["wal-archive", &format!("pg_wal/{SEGMENT}")])
            .status
            .success()
    );

    // Different content under an archived name: refused, never overwritten.
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), b"something else").unwrap();
    let (code, line) = failed(&setup.run(&["wal-archive", &format!("pg_wal/{SEGMENT}")]));
    assert_eq!(code, 1);
    assert!(
        line.starts_with(&format!(
            "wal-archive pg_wal/{SEGMENT}: plugin {PLUGIN}: WAL/Archive failed: AlreadyExists:"
        )),
        "{line}"
    );
    assert_eq!(
        std::fs::read(setup.path("archive").join(SEGMENT)).unwrap(),
        b"segment one"
    );

    let restored = setup.run(&["wal-restore", SEGMENT, "pg_wal/RECOVERYXLOG"]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert_eq!(
        std::fs::read(setup.path("pgdata/pg_wal/RECOVERYXLOG")).unwrap(),
        b"segment one"
    );

    // A file the archive lacks (the next timeline's history, say): exit 1,
    // which PostgreSQL reads as "not available" and carries on.
    let (code, line) = failed(&setup.run(&["wal-restore", "00000002.history", "pg_wal/RECOVERYHISTORY"]));
    assert_eq!(code, 1);
    assert_eq!(
        line,
        format!(
            "wal-restore 00000002.history not restored: plugin {PLUGIN}: NotFound: WAL file 00000002.history is not in the archive"
        )
    );
    assert!(!setup.path("pgdata/pg_wal/RECOVERYHISTORY").exists());
}

#[test]
fn wal_archive_refuses_to_report_what_nobody_archived() {
    let mut setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), b"x").unwrap();
    let wal = format!("pg_wal/{SEGMENT}");

    // The file PostgreSQL names does not exist.
    let (code, line) = failed(&setup.run(&["wal-archive", "pg_wal/000000010000000000000099"]));
    assert_eq!(code, 2);
    assert!(
        line.contains("cannot read") && line.contains("000000010000000000000099"),
        "{line}"
    );

    // The Cluster file is not usable.
    std::fs::write(setup.path("broken.yaml"), "spec: [unclosed").unwrap();
    let (code, line) = failed(&setup.run_with(&["wal-archive", &wal], &setup.path("broken.yaml")));
    assert_eq!(code, 2);
    assert!(line.contains("is not valid YAML"), "{line}");

    // No --cluster and no CNPGI_CLUSTER: a usage error.
    let output = Command::new(BIN)
        .args(["wal-archive", &wal])
        .env_remove("CNPGI_CLUSTER")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--cluster <FILE>"), "{}", stderr(&output));

    // The plugin enabled but no plugin archiving (it is not enabled).
    let disabled = setup.path("disabled.yaml");
    let text = std::fs::read_to_string(setup.path("cluster.yaml"))
        .unwrap()
        .replace("    isWALArchiver: true\n", "    enabled: false\n");
    std::fs::write(&disabled, text).unwrap();
    let (code, line) = failed(&setup.run_with(&["wal-archive", &wal], &disabled));
    assert_eq!(code, 1);
    assert!(line.contains("no plugin archives WAL: enabled (none)"), "{line}");

    // The plugin died: its socket is left behind, nothing answers on it.
    let mut plugin = setup.plugin.take().unwrap();
    plugin.kill().unwrap();
    plugin.wait().unwrap();
    assert!(setup.sockets().join(PLUGIN).exists(), "SIGKILL leaves the socket");
    let (code, line) = failed(&setup.run(&["wal-archive", &wal]));
    assert_eq!(code, 1);
    assert!(
        line.contains(&format!("plugin {PLUGIN}")) && line.contains("Identity/GetPluginMetadata failed"),
        "{line}"
    );

    // No socket at all: the isWALArchiver plugin must have one.
    std::fs::remove_file(setup.sockets().join(PLUGIN)).unwrap();
    let (code, line) = failed(&setup.run(&["wal-archive", &wal]));
    assert_eq!(code, 1);
    assert_eq!(
        line,
        format!(
            "wal-archive {wal}: plugin {PLUGIN} is not available: no socket {}",
            setup.sockets().join(PLUGIN).display()
        )
    );
    // Restoring with no plugin: exit 1 as well, PostgreSQL carries on.
    let (code, line) = failed(&setup.run(&["wal-restore", SEGMENT, "pg_wal/RECOVERYXLOG"]));
    assert_eq!(code, 1);
    assert!(line.contains("no plugin restores WAL"), "{line}");

    // Back on the same path, it serves again.
    setup.start_plugin();
    assert!(setup.run(&["wal-archive", &wal]).status.success());
}

#[test]
fn backup_and_restore_through_the_plugin() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/postgresql.conf"), "port = 5432\n").unwrap();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), b"not in base backups").unwrap();

    let output = setup.run(&[
        "backup",
        "--plugin",
        PLUGIN,
        "--backup-name",
        "first",
        "--parameter",
        "mode=full",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["backupId"], "first");
    assert_eq!(result["backupName"], "first");
    assert_eq!(result["metadata"]["parameters"], "1", "--parameter reached the plugin");
    assert!(result["stoppedAt"].as_i64().unwrap() >= result["startedAt"].as_i64().unwrap());
    assert!(setup.path("archive/base/first/postgresql.conf").exists());
    assert!(!setup.path("archive/base/first/pg_wal").join(SEGMENT).exists());

    // A default name: <cluster>-<timestamp>.
    let output = setup.run(&["backup", "--plugin", PLUGIN]);
    assert!(output.status.success(), "{}", stderr(&output));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    let name = result["backupName"].as_str().unwrap();
    assert!(name.starts_with("pg-20") && name.len() == "pg-".len() + 14, "{name}");

    // A plugin that does not exist here, and a backup over its deadline.
    let (code, line) = failed(&setup.run(&["backup", "--plugin", "nope.example.com"]));
    assert_eq!(code, 1);
    assert!(
        line.contains("plugin nope.example.com is not available: no socket"),
        "{line}"
    );
    let slow = setup.write_cluster("slow.yaml", "      backupDelaySeconds: \"30\"\n");
    let started = Instant::now();
    let (code, line) = failed(&setup.run_with(
        &["backup", "--plugin", PLUGIN, "--backup-name", "slow", "--timeout", "1"],
        &slow,
    ));
    assert_eq!(code, 1);
    assert!(line.contains("Backup/Backup failed: DeadlineExceeded"), "{line}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Restore into a new PGDATA: the plugin fills it (the `pgdata`
    // parameter tells it where), the command writes the recovery
    // configuration and prints the plugin's environment.
    let target = setup.path("restored");
    let cluster = std::fs::read_to_string(setup.path("cluster.yaml")).unwrap().replace(
        &setup.path("pgdata").display().to_string(),
        &target.display().to_string(),
    ) + "  bootstrap:\n    recovery:\n      source: origin\n      recoveryTarget:\n        targetName: before\n  externalClusters:\n  - name: origin\n    plugin:\n      name: cnpgi-dir-plugin.example.com\n";
    std::fs::write(setup.path("restore.yaml"), cluster).unwrap();
    let output = setup.run_with(
        &["restore", "--pgdata", target.to_str().unwrap()],
        &setup.path("restore.yaml"),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let envs = String::from_utf8(output.stdout.clone()).unwrap();
    assert!(
        envs.starts_with("CNPGI_DIR_PLUGIN_BACKUP=pg-20"),
        "the latest backup: {envs}"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("postgresql.conf")).unwrap(),
        "port = 5432\n"
    );
    let auto = std::fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    assert!(
        auto.ends_with(
            "archive_command = 'false'\nrecovery_target_action = promote\n\
             restore_command = 'cnpgi-operator wal-restore %f %p'\n\
             recovery_target_name = 'before'\nrecovery_target_inclusive = true\n"
        ),
        "{auto}"
    );
    assert!(target.join("recovery.signal").exists());
    assert!(target.join(".check-empty-wal-archive").exists());

    // A PGDATA with files is never restored into.
    let (code, line) = failed(&setup.run_with(
        &["restore", "--plugin", PLUGIN, "--pgdata", target.to_str().unwrap()],
        &setup.path("restore.yaml"),
    ));
    assert_eq!(code, 2);
    assert!(line.contains("it is not empty"), "{line}");

    // A plugin that answers but fills another directory than --pgdata.
    let decoy = setup.write_cluster("decoy.yaml", "");
    let text = std::fs::read_to_string(&decoy).unwrap().replace(
        &setup.path("pgdata").display().to_string(),
        &setup.path("decoy").display().to_string(),
    );
    std::fs::write(&decoy, text).unwrap();
    let elsewhere = setup.path("elsewhere");
    let (code, line) = failed(&setup.run_with(
        &["restore", "--plugin", PLUGIN, "--pgdata", elsewhere.to_str().unwrap()],
        &decoy,
    ));
    assert_eq!(code, 1, "{line}");
    assert!(
        line.ends_with("has no PG_VERSION: the plugin did not fill this PGDATA"),
        "{line}"
    );
    assert!(setup.path("decoy/PG_VERSION").exists());
}

/// GET `path` on `address` over plain HTTP/1.1: (status line, body).
fn get(address: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

fn sample(scrape: &prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

fn parse(body: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

#[test]
fn metrics_are_collected_on_each_scrape() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), b"x").unwrap();
    assert!(
        setup
            .run(&["wal-archive", &format!("pg_wal/{SEGMENT}")])
            .status
            .success()
    );

    let mut server = ChildGuard::spawn(
        Command::new(BIN)
            .args(["metrics", "--address", "127.0.0.1:0"])
            .env("CNPGI_CLUSTER", setup.path("cluster.yaml"))
            .env("CNPGI_PLUGIN_DIR", setup.sockets())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )
    .unwrap();
    // The address it listens on, from its log line.
    let mut log = server.stderr.take().unwrap();
    let mut seen = String::new();
    let address = loop {
        let mut buffer = [0u8; 256];
        let n = log.read(&mut buffer).unwrap();
        assert!(n > 0, "the server exited: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
        if let Some(at) = seen.find("address=") {
            let rest = &seen[at + "address=".len()..];
            if let Some(end) = rest.find(char::is_whitespace) {
                break rest[..end].to_owned();
            }
        }
    };

    let (status, body) = get(&address, "/metrics");
    assert!(status.contains("200"), "{status}\n{body}");
    let scrape = parse(&body);
    assert_eq!(
        sample(&scrape, "cnpgi_dir_plugin_archive_files", Some(("kind", "segment"))),
        Some(1.0),
        "{body}"
    );
    assert_eq!(sample(&scrape, "cnpgi_dir_plugin_base_backups", None), Some(0.0));
    assert_eq!(sample(&scrape, "cnpg_collector_last_collection_error", None), Some(0.0));
    assert!(body.contains("# TYPE cnpgi_dir_plugin_archive_files gauge\n"), "{body}");

    // Each scrape asks again: a second file shows at once.
    std::fs::write(setup.path("pgdata/pg_wal/00000002.history"), b"1\t0/3000000\tx\n").unwrap();
    assert!(setup.run(&["wal-archive", "pg_wal/00000002.history"]).status.success());
    let scrape = parse(&get(&address, "/metrics").1);
    assert_eq!(
        sample(&scrape, "cnpgi_dir_plugin_archive_files", Some(("kind", "history"))),
        Some(1.0)
    );

    // A plugin collecting a value it did not define: its remaining values
    // are dropped and a collection error counted, as CloudNativePG does.
    setup.write_cluster("cluster.yaml", "      badMetrics: undefined\n");
    let (_, body) = get(&address, "/metrics");
    let scrape = parse(&body);
    assert!(!body.contains("cnpgi_dir_plugin_undefined"), "{body}");
    assert_eq!(sample(&scrape, "cnpg_collector_last_collection_error", None), Some(1.0));
    assert_eq!(
        sample(
            &scrape,
            "cnpg_collector_collection_errors_total",
            Some(("collector", "Collect.PluginMetrics"))
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &scrape,
            "cnpgi_plugin_collection_errors_total",
            Some(("plugin", PLUGIN))
        ),
        Some(1.0)
    );
    // The values collected before the undefined one are kept.
    assert!(
        sample(&scrape, "cnpgi_dir_plugin_base_backups", None).is_some(),
        "{body}"
    );

    let status = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.terminate(Duration::from_secs(10)))
        .unwrap();
    assert!(status.success(), "{status:?}");
}
