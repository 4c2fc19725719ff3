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
                "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: pg\n  namespace: db\n  uid: 6f1c0de4-0c7e-4d4e-9a55-6c1b2f3e4d5a\nstatus:\n  currentPrimary: pg-1\nspec:\n  plugins:\n  - name: {PLUGIN}\n    isWALArchiver: true\n    parameters:\n      archive: {}\n      pgdata: {}\n{extra_parameters}",
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

/// A 1 MiB WAL segment (the smallest `initdb --wal-segsize`) with its long
/// page header, the rest `fill`.
fn segment(fill: u8) -> Vec<u8> {
    let mut bytes = vec![fill; 1 << 20];
    bytes[..cnpgi_core::wal_segment::HEADER_LEN].copy_from_slice(&cnpgi_core::wal_segment::segment_header(1 << 20));
    bytes
}

#[test]
fn wal_archive_then_restore_round_trip() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(1)).unwrap();

    let archived = setup.run(&["wal-archive", &format!("pg_wal/{SEGMENT}")]);
    assert!(archived.status.success(), "{}", stderr(&archived));
    assert!(stderr(&archived).is_empty(), "silent on success: {}", stderr(&archived));
    assert_eq!(std::fs::read(setup.path("archive").join(SEGMENT)).unwrap(), segment(1));

    // PostgreSQL retries after a crash: the same content again is a success.
    assert!(
        setup
            .run(&["wal-archive", &format!("pg_wal/{SEGMENT}")])
            .status
            .success()
    );

    // Different content under an archived name: refused, never overwritten.
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(2)).unwrap();
    let (code, line) = failed(&setup.run(&["wal-archive", &format!("pg_wal/{SEGMENT}")]));
    assert_eq!(code, 1);
    assert!(
        line.starts_with(&format!(
            "wal-archive pg_wal/{SEGMENT}: plugin {PLUGIN}: WAL/Archive failed: AlreadyExists:"
        )),
        "{line}"
    );
    assert_eq!(std::fs::read(setup.path("archive").join(SEGMENT)).unwrap(), segment(1));

    let restored = setup.run(&["wal-restore", SEGMENT, "pg_wal/RECOVERYXLOG"]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert_eq!(
        std::fs::read(setup.path("pgdata/pg_wal/RECOVERYXLOG")).unwrap(),
        segment(1)
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

/// `count` segments in `pg_wal`, each with its `.ready` file, the n-th
/// filled with n; their names.
fn ready_segments(setup: &Setup, count: u8) -> Vec<String> {
    (1..=count)
        .map(|n| {
            let name = format!("0000000100000000000000{n:02X}");
            std::fs::write(setup.path("pgdata/pg_wal").join(&name), segment(n)).unwrap();
            std::fs::create_dir_all(setup.path("pgdata/pg_wal/archive_status")).unwrap();
            std::fs::write(
                setup.path("pgdata/pg_wal/archive_status").join(format!("{name}.ready")),
                "",
            )
            .unwrap();
            name
        })
        .collect()
}

/// The files in `dir`, sorted (none when it does not exist).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().file_name().into_string().unwrap()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// PostgreSQL's bookkeeping once `archive_command` succeeded for `name`.
fn mark_done(setup: &Setup, name: &str) {
    let status = setup.path("pgdata/pg_wal/archive_status");
    std::fs::rename(
        status.join(format!("{name}.ready")),
        status.join(format!("{name}.done")),
    )
    .unwrap();
}

#[test]
fn wal_archive_archives_ahead_and_answers_from_its_spool() {
    let mut setup = Setup::new();
    let names = ready_segments(&setup, 5);
    let spool = setup.path("cnpgi-wal-spool/pgdata");
    // The store already has another segment 4: archiving it ahead fails.
    std::fs::write(setup.path("archive").join(&names[3]), segment(99)).unwrap();

    let first = setup.run(&["wal-archive", "--max-parallel", "4", &format!("pg_wal/{}", names[0])]);
    assert!(first.status.success(), "{}", stderr(&first));
    for (n, name) in names.iter().enumerate().take(3) {
        assert_eq!(
            std::fs::read(setup.path("archive").join(name)).unwrap(),
            segment(n as u8 + 1),
            "{name}"
        );
    }
    assert!(!setup.path("archive").join(&names[4]).exists(), "at most 4 at once");
    assert_eq!(
        listing(&spool),
        names[1..3],
        "markers only for what the plugin confirmed"
    );
    let (code, line) = failed(&first);
    assert_eq!(code, 0);
    assert!(
        line.starts_with(&format!(
            "wal-archive pg_wal/{}: {} not archived ahead: plugin {PLUGIN}: WAL/Archive failed: AlreadyExists:",
            names[0], names[3]
        )),
        "{line}"
    );
    mark_done(&setup, &names[0]);

    // PostgreSQL asks for segment 2: answered from its marker, even with the
    // plugin down, and the marker is used up.
    setup.plugin = None;
    let second = setup.run(&["wal-archive", "--max-parallel", "4", &format!("pg_wal/{}", names[1])]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(stderr(&second).is_empty(), "{}", stderr(&second));
    assert_eq!(listing(&spool), names[2..3]);
    mark_done(&setup, &names[1]);

    // Segment 3 changed in pg_wal since it was archived: its marker vouches
    // for other bytes, so it is dropped and the plugin asked, which refuses.
    setup.start_plugin();
    std::fs::write(setup.path("pgdata/pg_wal").join(&names[2]), segment(33)).unwrap();
    let third = setup.run(&["wal-archive", "--max-parallel", "1", &format!("pg_wal/{}", names[2])]);
    assert_eq!(third.status.code(), Some(1), "{}", stderr(&third));
    let text = stderr(&third);
    assert!(
        text.contains("dropped: the file changed since it was archived"),
        "{text}"
    );
    assert!(text.contains("AlreadyExists"), "{text}");
    assert_eq!(
        std::fs::read(setup.path("archive").join(&names[2])).unwrap(),
        segment(3)
    );
    assert!(listing(&spool).is_empty());
}

#[test]
fn a_crash_while_archiving_ahead_leaves_no_marker_and_loses_nothing() {
    let setup = Setup::new();
    let names = ready_segments(&setup, 3);
    let spool = setup.path("cnpgi-wal-spool/pgdata");
    let slow = setup.write_cluster("slow.yaml", "      archiveDelaySeconds: \"2\"\n");
    let mut archiver = Command::new(BIN)
        .args(["wal-archive", "--max-parallel", "3", &format!("pg_wal/{}", names[0])])
        .current_dir(setup.path("pgdata"))
        .env("CNPGI_CLUSTER", &slow)
        .env("CNPGI_PLUGIN_DIR", setup.sockets())
        .env_remove("PGDATA")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed while the plugin holds all three, before it answers.
    std::thread::sleep(Duration::from_millis(700));
    archiver.kill().unwrap();
    archiver.wait().unwrap();
    assert!(
        listing(&spool).is_empty(),
        "no marker before the plugin answered: {:?}",
        listing(&spool)
    );

    // PostgreSQL asks for each again: archived (again, the same bytes), then
    // answered from the markers; the store ends with every segment as it is.
    for name in &names {
        let output = setup.run(&["wal-archive", "--max-parallel", "3", &format!("pg_wal/{name}")]);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        mark_done(&setup, name);
    }
    for (n, name) in names.iter().enumerate() {
        assert_eq!(
            std::fs::read(setup.path("archive").join(name)).unwrap(),
            segment(n as u8 + 1)
        );
    }
    assert!(listing(&spool).is_empty(), "{:?}", listing(&spool));
}

#[test]
fn wal_archive_refuses_to_report_what_nobody_archived() {
    let mut setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(0)).unwrap();
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
    // Restoring with no plugin is a failure, not an absence (see
    // wal_restore_never_lets_a_failure_end_a_recovery).
    let (code, line) = failed(&setup.run(&["wal-restore", "--retries", "0", SEGMENT, "pg_wal/RECOVERYXLOG"]));
    assert_eq!(code, 255);
    assert!(line.contains("no plugin restores WAL"), "{line}");

    // Back on the same path, it serves again.
    setup.start_plugin();
    assert!(setup.run(&["wal-archive", &wal]).status.success());
}

#[test]
fn backup_and_restore_through_the_plugin() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/postgresql.conf"), "port = 5432\n").unwrap();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(3)).unwrap();

    let output = setup.run(&[
        "backup",
        "--plugin-name",
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
    let output = setup.run(&["backup", "--plugin-name", PLUGIN]);
    assert!(output.status.success(), "{}", stderr(&output));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    let name = result["backupName"].as_str().unwrap();
    assert!(name.starts_with("pg-20") && name.len() == "pg-".len() + 14, "{name}");

    // A plugin that does not exist here, and a backup over its deadline.
    let (code, line) = failed(&setup.run(&["backup", "--plugin-name", "nope.example.com"]));
    assert_eq!(code, 1);
    assert!(
        line.contains("plugin nope.example.com is not available: no socket"),
        "{line}"
    );
    let slow = setup.write_cluster("slow.yaml", "      backupDelaySeconds: \"30\"\n");
    let started = Instant::now();
    let (code, line) = failed(&setup.run_with(
        &[
            "backup",
            "--plugin-name",
            PLUGIN,
            "--backup-name",
            "slow",
            "--plugin-timeout-seconds",
            "1",
        ],
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
    // The plugin answered CloudNativePG's instance-manager command
    // (`/controller/manager wal-restore --log-destination … %f %p`): it is
    // mapped to this program, with this restore's Cluster and plugins.
    assert!(
        stderr(&output).contains("restore_command mapped from CloudNativePG's instance manager"),
        "{}",
        stderr(&output)
    );
    assert!(
        envs.contains("CNPGI_DIR_PLUGIN_CHECK_EMPTY_WAL_ARCHIVE=true\n"),
        "sent as CloudNativePG sends it: {envs}"
    );
    let auto = std::fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    let command = format!(
        "{BIN} wal-restore --cluster {} --plugin-dir {} %f %p",
        setup.path("restore.yaml").display(),
        setup.sockets().display()
    );
    assert!(
        auto.ends_with(&format!(
            "archive_command = 'false'\nrecovery_target_action = promote\n\
             restore_command = '{command}'\n\
             recovery_target_name = 'before'\nrecovery_target_inclusive = true\n"
        )),
        "{auto}"
    );
    assert!(target.join("recovery.signal").exists());
    assert!(target.join(".check-empty-wal-archive").exists());
    // The mapped command works as PostgreSQL runs it: through sh, in PGDATA.
    assert!(
        setup
            .run(&["wal-archive", &format!("pg_wal/{SEGMENT}")])
            .status
            .success()
    );
    let ran = Command::new("sh")
        .arg("-c")
        .arg(command.replace("%f", SEGMENT).replace("%p", "pg_wal/RECOVERYXLOG"))
        .current_dir(&target)
        .env_remove("CNPGI_CLUSTER")
        .env_remove("CNPGI_PLUGIN_DIR")
        .output()
        .unwrap();
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert_eq!(std::fs::read(target.join("pg_wal/RECOVERYXLOG")).unwrap(), segment(3));

    // A PGDATA with files is never restored into.
    let (code, line) = failed(&setup.run_with(
        &["restore", "--plugin-name", PLUGIN, "--pgdata", target.to_str().unwrap()],
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
        &[
            "restore",
            "--plugin-name",
            PLUGIN,
            "--pgdata",
            elsewhere.to_str().unwrap(),
        ],
        &decoy,
    ));
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("has no PG_VERSION: the plugin did not fill this PGDATA")
            && line.ends_with(&format!("{} removed again", elsewhere.display())),
        "{line}"
    );
    assert!(setup.path("decoy/PG_VERSION").exists());
    assert!(!elsewhere.exists());
}

#[test]
fn a_failed_restore_leaves_pgdata_as_it_was() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/postgresql.conf"), "port = 5432\n").unwrap();
    assert!(
        setup
            .run(&["backup", "--plugin-name", PLUGIN, "--backup-name", "b"])
            .status
            .success()
    );
    // The plugin fills PGDATA, then takes 30 s to answer (a slow
    // verification): the deadline passes with PGDATA half restored.
    let target = setup.path("restored");
    std::fs::create_dir(&target).unwrap();
    let cluster = setup.write_cluster("slow-restore.yaml", "      restoreDelaySeconds: \"30\"\n");
    let text = std::fs::read_to_string(&cluster).unwrap().replace(
        &setup.path("pgdata").display().to_string(),
        &target.display().to_string(),
    );
    std::fs::write(&cluster, text).unwrap();
    let started = Instant::now();
    let (code, line) = failed(&setup.run_with(
        &[
            "restore",
            "--plugin-name",
            PLUGIN,
            "--pgdata",
            target.to_str().unwrap(),
            "--plugin-timeout-seconds",
            "2",
        ],
        &cluster,
    ));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("RestoreJobHooks/Restore failed: DeadlineExceeded")
            && line.ends_with(&format!("{} emptied again", target.display())),
        "{line}"
    );
    assert!(target.is_dir(), "a PGDATA that existed stays");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing of the restore is left"
    );

    // A restore_config calling the instance manager in a way that has no
    // equivalent here: refused, and PGDATA emptied, rather than a
    // recovery that would fail on every file.
    let cluster = setup.write_cluster(
        "odd-command.yaml",
        "      restoreCommand: /controller/manager wal-restore --spool /x %f %p\n",
    );
    let text = std::fs::read_to_string(&cluster).unwrap().replace(
        &setup.path("pgdata").display().to_string(),
        &target.display().to_string(),
    );
    std::fs::write(&cluster, text).unwrap();
    let (code, line) = failed(&setup.run_with(
        &["restore", "--plugin-name", PLUGIN, "--pgdata", target.to_str().unwrap()],
        &cluster,
    ));
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains("restore_config cannot be used here: restore_command calls CloudNativePG's instance manager")
            && line.contains("its flag --spool has no equivalent"),
        "{line}"
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
}

/// The exit code and every stderr line.
fn outcome(output: &Output) -> (i32, Vec<String>) {
    (
        output.status.code().unwrap(),
        stderr(output).lines().map(str::to_owned).collect(),
    )
}

#[test]
fn wal_restore_never_lets_a_failure_end_a_recovery() {
    let mut setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(1)).unwrap();
    assert!(
        setup
            .run(&["wal-archive", &format!("pg_wal/{SEGMENT}")])
            .status
            .success()
    );
    std::fs::write(setup.path("pgdata/recovery.signal"), "").unwrap();
    let restore =
        |setup: &Setup, name: &str| setup.run(&["wal-restore", "--retries", "1", name, "pg_wal/RECOVERYXLOG"]);

    // Absent (every plugin NOT_FOUND): exit 1, PostgreSQL ends recovery there.
    let (code, line) = failed(&restore(&setup, "000000010000000000000002"));
    assert_eq!(code, 1);
    assert!(line.contains("NotFound"), "{line}");

    // The store down (the archive directory unmounted): UNAVAILABLE, retried
    // once after 1 s, then exit 255, which makes PostgreSQL abort recovery.
    std::fs::rename(setup.path("archive"), setup.path("archive.away")).unwrap();
    let started = Instant::now();
    let (code, lines) = outcome(&restore(&setup, SEGMENT));
    assert!(started.elapsed() >= Duration::from_secs(1), "retried after a pause");
    assert_eq!(code, 255, "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("Unavailable") && lines[0].ends_with("(attempt 1 of 2; retrying in 1 s)"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "wal-restore {SEGMENT} not restored: plugin {PLUGIN}: Unavailable:"
        )) && lines[1].contains("is not there")
            && lines[1].contains("after 2 attempts (recovery aborted"),
        "{lines:?}"
    );
    assert!(!setup.path("pgdata/pg_wal/RECOVERYXLOG").exists());

    // In standby mode the same failure exits 1: PostgreSQL streams instead,
    // and promotes nothing.
    std::fs::write(setup.path("pgdata/standby.signal"), "").unwrap();
    let (code, lines) = outcome(&restore(&setup, SEGMENT));
    assert_eq!(code, 1, "{lines:?}");
    assert!(lines[1].contains("standby mode"), "{lines:?}");
    std::fs::remove_file(setup.path("pgdata/standby.signal")).unwrap();

    // The store back while retrying: restored.
    let back = {
        let (from, to) = (setup.path("archive.away"), setup.path("archive"));
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            std::fs::rename(from, to).unwrap();
        })
    };
    let output = setup.run(&["wal-restore", "--retries", "3", SEGMENT, "pg_wal/RECOVERYXLOG"]);
    back.join().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        std::fs::read(setup.path("pgdata/pg_wal/RECOVERYXLOG")).unwrap(),
        segment(1)
    );
    std::fs::remove_file(setup.path("pgdata/pg_wal/RECOVERYXLOG")).unwrap();

    // The plugin dead (its socket left behind): a failure too.
    let mut plugin = setup.plugin.take().unwrap();
    plugin.kill().unwrap();
    plugin.wait().unwrap();
    let (code, lines) = outcome(&restore(&setup, "000000010000000000000002"));
    assert_eq!(code, 255, "{lines:?}");
    assert!(
        lines[1].contains(&format!("plugin {PLUGIN}")) && lines[1].contains("recovery aborted"),
        "{lines:?}"
    );

    // An unreadable Cluster file during a recovery: not "absent" either.
    let (code, line) = failed(&setup.run_with(
        &["wal-restore", SEGMENT, "pg_wal/RECOVERYXLOG"],
        &setup.path("missing.yaml"),
    ));
    assert_eq!(code, 255, "{line}");
    assert!(
        line.contains("missing.yaml") && line.contains("recovery aborted"),
        "{line}"
    );
    // Outside a recovery it is bad input, as for every command.
    std::fs::remove_file(setup.path("pgdata/recovery.signal")).unwrap();
    let (code, _) = failed(&setup.run_with(
        &["wal-restore", SEGMENT, "pg_wal/RECOVERYXLOG"],
        &setup.path("missing.yaml"),
    ));
    assert_eq!(code, 2);
}

#[test]
fn wal_archive_refuses_what_cannot_be_a_segment() {
    let setup = Setup::new();
    let wal = setup.path("pgdata/pg_wal").join(SEGMENT);
    let archive = |setup: &Setup| failed(&setup.run(&["wal-archive", &format!("pg_wal/{SEGMENT}")]));
    for (bytes, reason) in [
        (Vec::new(), "it is empty (0 bytes)"),
        (
            segment(1)[..(1 << 20) - 8192].to_vec(),
            "its size, 1040384 bytes, is not a WAL segment size",
        ),
        (vec![0; 1 << 20], "its first page has no WAL long page header"),
    ] {
        std::fs::write(&wal, bytes).unwrap();
        let (code, line) = archive(&setup);
        assert_eq!(code, 1, "{line}");
        assert!(
            line.starts_with(&format!(
                "wal-archive pg_wal/{SEGMENT}: {} is not a whole WAL segment: {reason}",
                wal.display()
            )) && line.ends_with("refusing to archive it"),
            "{line}"
        );
        assert!(!setup.path("archive").join(SEGMENT).exists(), "nothing archived");
    }
    // The Cluster's own segment size (initdb --wal-segsize 16).
    std::fs::write(&wal, segment(1)).unwrap();
    let sized = setup.write_cluster("sized.yaml", "");
    let text = std::fs::read_to_string(&sized).unwrap() + "  bootstrap:\n    initdb:\n      walSegmentSize: 16\n";
    std::fs::write(&sized, text).unwrap();
    let (code, line) = failed(&setup.run_with(&["wal-archive", &format!("pg_wal/{SEGMENT}")], &sized));
    assert_eq!(code, 1);
    assert!(
        line.contains("differs from the Cluster's WAL segment size (16777216 bytes)"),
        "{line}"
    );
    // Files with other rules are not segments: a history file is archived.
    std::fs::write(setup.path("pgdata/pg_wal/00000002.history"), b"1\t0/3000000\tx\n").unwrap();
    assert!(setup.run(&["wal-archive", "pg_wal/00000002.history"]).status.success());
    assert!(
        setup
            .run(&["wal-archive", &format!("pg_wal/{SEGMENT}")])
            .status
            .success()
    );
}

#[test]
fn wal_archive_sends_the_empty_archive_check_and_clears_its_marker() {
    let setup = Setup::new();
    std::fs::write(setup.path("archive/000000010000000000000007"), segment(7)).unwrap();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(1)).unwrap();
    let marker = setup.path("pgdata/.check-empty-wal-archive");
    std::fs::write(&marker, "").unwrap();
    // A new instance must not archive into another cluster's WAL.
    let (code, line) = failed(&setup.run(&["wal-archive", &format!("pg_wal/{SEGMENT}")]));
    assert_eq!(code, 1);
    assert!(
        line.contains("FailedPrecondition: the archive") && line.contains("is not empty"),
        "{line}"
    );
    assert!(marker.exists());
    // cnpg.io/skipEmptyWalArchiveCheck: enabled turns the check off; once
    // archived, the marker is gone and later files are not checked.
    let skip = setup.write_cluster("skip.yaml", "");
    let text = std::fs::read_to_string(&skip).unwrap().replace(
        "  uid:",
        "  annotations:\n    cnpg.io/skipEmptyWalArchiveCheck: enabled\n  uid:",
    );
    std::fs::write(&skip, text).unwrap();
    let output = setup.run_with(&["wal-archive", &format!("pg_wal/{SEGMENT}")], &skip);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!marker.exists(), "the marker is removed once archiving works");
    std::fs::write(setup.path("pgdata/pg_wal/000000010000000000000002"), segment(2)).unwrap();
    assert!(
        setup
            .run(&["wal-archive", "pg_wal/000000010000000000000002"])
            .status
            .success()
    );
}

#[test]
fn cluster_files_must_be_small_and_say_what_plugins_read() {
    let setup = Setup::new();
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(1)).unwrap();
    let wal = format!("pg_wal/{SEGMENT}");
    // 100 MB: refused before it is read.
    let huge = setup.path("huge.yaml");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(100_000_000).unwrap();
    let started = Instant::now();
    let (code, line) = failed(&setup.run_with(&["wal-archive", &wal], &huge));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(code, 2);
    assert!(
        line.contains("huge.yaml is larger than 16 MiB; refusing to read it"),
        "{line}"
    );

    for (field, removed, commands) in [
        (
            "metadata.uid",
            "  uid: 6f1c0de4-0c7e-4d4e-9a55-6c1b2f3e4d5a\n",
            &["wal-archive", "wal-restore"][..],
        ),
        ("metadata.namespace", "  namespace: db\n", &["wal-archive"][..]),
        (
            "status.currentPrimary",
            "status:\n  currentPrimary: pg-1\n",
            &["wal-archive"][..],
        ),
    ] {
        let path = setup.path("partial.yaml");
        let text = std::fs::read_to_string(setup.path("cluster.yaml"))
            .unwrap()
            .replace(removed, "");
        std::fs::write(&path, text).unwrap();
        for command in commands {
            let args: Vec<&str> = if *command == "wal-archive" {
                vec![command, &wal]
            } else {
                vec![command, SEGMENT, "pg_wal/RECOVERYXLOG"]
            };
            let (code, line) = failed(&setup.run_with(&args, &path));
            assert_eq!(code, 2, "{command}: {line}");
            assert!(
                line.contains(&format!("partial.yaml has no {field}: ")),
                "{command}: {line}"
            );
        }
    }
    // Another kind of object is not a Cluster, however complete.
    let path = setup.path("pod.yaml");
    let text = std::fs::read_to_string(setup.path("cluster.yaml"))
        .unwrap()
        .replace("kind: Cluster", "kind: Pod");
    assert!(text.contains("kind: Pod"), "{text}");
    std::fs::write(&path, text).unwrap();
    for args in [
        vec!["wal-archive", wal.as_str()],
        vec!["wal-restore", SEGMENT, "pg_wal/RECOVERYXLOG"],
    ] {
        let (code, line) = failed(&setup.run_with(&args, &path));
        assert_eq!(code, 2, "{args:?}: {line}");
        assert!(line.contains("pod.yaml holds a Pod of apiVersion"), "{args:?}: {line}");
    }
    // wal-restore runs before there is a primary: it does not need one.
    let path = setup.path("partial.yaml");
    let text = std::fs::read_to_string(setup.path("cluster.yaml"))
        .unwrap()
        .replace("status:\n  currentPrimary: pg-1\n", "");
    std::fs::write(&path, text).unwrap();
    let (code, line) = failed(&setup.run_with(&["wal-restore", "00000002.history", "pg_wal/X"], &path));
    assert_eq!(code, 1, "not in the archive: {line}");
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
    std::fs::write(setup.path("pgdata/pg_wal").join(SEGMENT), segment(0)).unwrap();
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

/// `--log-format json` (or `CNPGI_LOG_FORMAT=json`): each message an instance
/// command writes is one JSON object on its own line, with its level, as
/// `run` logs, whatever RUST_LOG says (as the text lines); text stays the
/// plain line. These commands had no such flag.
#[test]
fn instance_messages_are_json_lines_with_log_format_json() {
    let setup = Setup::new();
    let json_lines = |output: &Output| -> Vec<serde_json::Value> {
        stderr(output)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
            .collect()
    };

    let run = |args: &[&str], format: Option<&str>| {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .current_dir(setup.path("pgdata"))
            .env("CNPGI_CLUSTER", setup.path("cluster.yaml"))
            .env("CNPGI_PLUGIN_DIR", setup.sockets())
            .env("RUST_LOG", "error")
            .env_remove("CNPGI_LOG_FORMAT")
            .env_remove("LOG_FORMAT");
        if let Some(format) = format {
            command.env("CNPGI_LOG_FORMAT", format);
        }
        command.output().unwrap()
    };

    // A file no plugin has: absence, exit 1, at level INFO.
    let output = run(
        &[
            "wal-restore",
            "--log-format=json",
            "000000010000000000000099",
            "pg_wal/x",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["level"], "INFO", "{lines:?}");
    let message = lines[0]["fields"]["message"].as_str().unwrap();
    assert!(message.contains("000000010000000000000099"), "{message}");
    assert!(lines[0]["timestamp"].is_string(), "{lines:?}");

    // A file that is not there, through the environment: bad input, exit 2, ERROR.
    let output = run(&["wal-archive", "pg_wal/000000010000000000000042"], Some("json"));
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["level"], "ERROR", "{lines:?}");
    let message = lines[0]["fields"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("wal-archive pg_wal/000000010000000000000042: cannot read"),
        "{message}"
    );

    // Text, the default: the plain line PostgreSQL logs.
    let output = run(&["wal-archive", "pg_wal/000000010000000000000042"], None);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with("wal-archive pg_wal/000000010000000000000042: cannot read"),
        "{}",
        stderr(&output)
    );

    // The 0.1 name, LOG_FORMAT, still works, with a deprecation warning in
    // the same format.
    let mut command = Command::new(BIN);
    let output = command
        .args(["wal-archive", "pg_wal/000000010000000000000042"])
        .current_dir(setup.path("pgdata"))
        .env("CNPGI_CLUSTER", setup.path("cluster.yaml"))
        .env("CNPGI_PLUGIN_DIR", setup.sockets())
        .env_remove("CNPGI_LOG_FORMAT")
        .env("LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["level"], "WARN", "{lines:?}");
    let warning = lines[0]["fields"]["message"].as_str().unwrap();
    assert!(
        warning.contains("LOG_FORMAT is deprecated") && warning.contains("set CNPGI_LOG_FORMAT instead"),
        "{warning}"
    );
    assert_eq!(lines[1]["level"], "ERROR", "{lines:?}");
}
