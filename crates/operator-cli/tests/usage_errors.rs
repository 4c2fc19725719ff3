//! Mistakes in a `restore_command` or `archive_command` (a flag misspelt, an
//! argument missing, the Cluster file missing from PostgreSQL's
//! environment), through the real `cnpgi-operator` binary run in PGDATA as
//! PostgreSQL runs it: inside a recovery `wal-restore` exits above 125,
//! which stops PostgreSQL instead of ending the recovery; outside one,
//! clap's exit 2; `wal-archive` never reports such a mistake as success.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use common::BIN;

/// A PGDATA (with or without a signal file) and a usable Cluster file.
struct Pgdata {
    root: tempfile::TempDir,
}

impl Pgdata {
    fn new(signal: Option<&str>) -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("pgdata/pg_wal")).unwrap();
        if let Some(signal) = signal {
            std::fs::write(root.path().join("pgdata").join(signal), "").unwrap();
        }
        std::fs::write(
            root.path().join("cluster.yaml"),
            "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: pg\n  namespace: db\n  uid: 6f1c0de4-0c7e-4d4e-9a55-6c1b2f3e4d5a\n",
        )
        .unwrap();
        Self { root }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    /// `cnpgi-operator ARGS` in PGDATA with only `env` (and no plugin: none
    /// is asked before the command line and the Cluster file are usable).
    fn run(&self, args: &[&str], env: &[(&str, &Path)]) -> Output {
        let mut command = Command::new(BIN);
        command.args(args).current_dir(self.path("pgdata")).env_clear();
        for (name, value) in env {
            command.env(name, value);
        }
        command.env("CNPGI_PLUGIN_DIR", self.path("sockets")).output().unwrap()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Environment variables of a run.
type Env = Vec<(&'static str, PathBuf)>;

/// One of the six mistakes of a `restore_command` (or of PostgreSQL's
/// environment): what it is, the command line, the environment, and what
/// the one line must say.
type Mistake = (&'static str, Vec<&'static str>, Env, &'static str);

fn restore_mistakes(pgdata: &Pgdata) -> Vec<Mistake> {
    let cluster = ("CNPGI_CLUSTER", pgdata.path("cluster.yaml"));
    vec![
        (
            "no arguments",
            vec!["wal-restore"],
            vec![cluster.clone()],
            "no <NAME> <DEST>: restore_command must end with %f %p",
        ),
        (
            "no destination",
            vec!["wal-restore", "000000010000000000000001"],
            vec![cluster.clone()],
            "no <DEST>: restore_command must end with %f %p",
        ),
        (
            "an unknown flag",
            vec![
                "wal-restore",
                "--clutser",
                "c.yaml",
                "000000010000000000000001",
                "pg_wal/RECOVERYXLOG",
            ],
            vec![cluster.clone()],
            "unexpected argument '--clutser' found (did you mean '--cluster'?",
        ),
        (
            "no Cluster file",
            vec!["wal-restore", "000000010000000000000001", "pg_wal/RECOVERYXLOG"],
            vec![],
            "no --cluster <FILE> and no CNPGI_CLUSTER in the environment: set CNPGI_CLUSTER in PostgreSQL's environment",
        ),
        (
            "an empty CNPGI_CLUSTER",
            vec!["wal-restore", "000000010000000000000001", "pg_wal/RECOVERYXLOG"],
            vec![("CNPGI_CLUSTER", PathBuf::new())],
            "CNPGI_CLUSTER is set but empty",
        ),
        (
            "a Cluster file path that does not exist",
            vec!["wal-restore", "000000010000000000000001", "pg_wal/RECOVERYXLOG"],
            vec![("CNPGI_CLUSTER", pgdata.path("missing.yaml"))],
            "cannot use the Cluster file",
        ),
    ]
}

fn run(pgdata: &Pgdata, args: &[&str], env: &[(&'static str, PathBuf)]) -> Output {
    let env: Vec<(&str, &Path)> = env.iter().map(|(name, value)| (*name, value.as_path())).collect();
    pgdata.run(args, &env)
}

#[test]
fn wal_restore_mistakes_stop_a_recovery() {
    for signal in ["recovery.signal", "standby.signal"] {
        let pgdata = Pgdata::new(Some(signal));
        let effect = if signal == "recovery.signal" {
            "recovery aborted, not ended: correct restore_command, its environment or the Cluster file, then start \
             PostgreSQL again; exit 255)"
        } else {
            "standby stopped rather than left without its archive: correct restore_command, its environment or the \
             Cluster file, then start PostgreSQL again; exit 255)"
        };
        for (mistake, args, env, says) in restore_mistakes(&pgdata) {
            let output = run(&pgdata, &args, &env);
            let text = stderr(&output);
            assert_eq!(output.status.code(), Some(255), "{signal}, {mistake}: {text}");
            assert_eq!(text.lines().count(), 1, "{signal}, {mistake}: one line: {text}");
            assert!(text.starts_with("wal-restore"), "{signal}, {mistake}: {text}");
            assert!(text.contains(says), "{signal}, {mistake}: {text}");
            assert!(text.trim_end().ends_with(effect), "{signal}, {mistake}: {text}");
            if mistake.starts_with("a Cluster file") {
                assert!(
                    text.contains(&pgdata.path("missing.yaml").display().to_string()),
                    "{text}"
                );
            } else {
                // The signal file that made it a recovery, and where.
                assert!(
                    text.contains(&format!("({signal} in {}: ", pgdata.path("pgdata").display())),
                    "{mistake}: {text}"
                );
            }
        }
    }
}

#[test]
fn wal_restore_mistakes_outside_a_recovery_are_clap_usage_errors() {
    let pgdata = Pgdata::new(None);
    for (mistake, args, env, _) in restore_mistakes(&pgdata) {
        let output = run(&pgdata, &args, &env);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{mistake}: {text}");
        if mistake.starts_with("a Cluster file") {
            assert!(text.contains("(bad input; exit 2)"), "{mistake}: {text}");
        } else {
            // clap's own message, unchanged.
            assert!(text.starts_with("error: "), "{mistake}: {text}");
        }
    }
    let output = run(&pgdata, &["wal-restore", "--clutser", "c", "F", "P"], &[]);
    assert!(
        stderr(&output).contains("tip: a similar argument exists: '--cluster'"),
        "{}",
        stderr(&output)
    );
    // A recovery named by --pgdata counts as much as the working directory.
    let recovering = Pgdata::new(Some("recovery.signal"));
    let dir = recovering.path("pgdata");
    let output = run(
        &pgdata,
        &[
            "wal-restore",
            "--pgdata",
            dir.to_str().unwrap(),
            "--clutser",
            "c",
            "F",
            "P",
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(255), "{}", stderr(&output));
}

#[test]
fn a_misspelt_subcommand_stops_a_recovery_too() {
    let pgdata = Pgdata::new(Some("recovery.signal"));
    let output = run(
        &pgdata,
        &["wal-restor", "000000010000000000000001", "pg_wal/RECOVERYXLOG"],
        &[],
    );
    assert_eq!(output.status.code(), Some(255), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("unrecognized subcommand 'wal-restor': restore_command must run"),
        "{}",
        stderr(&output)
    );
    let outside = Pgdata::new(None);
    let output = run(&outside, &["wal-restor", "F", "P"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

#[test]
fn help_and_version_exit_0_alone_and_never_with_a_file() {
    for signal in [Some("recovery.signal"), None] {
        let pgdata = Pgdata::new(signal);
        for args in [
            &["--help"][..],
            &["--version"],
            &["wal-restore", "--help"],
            &["wal-archive", "--help"],
            &["help", "wal-restore"],
        ] {
            let output = run(&pgdata, args, &[]);
            assert_eq!(
                output.status.code(),
                Some(0),
                "{signal:?} {args:?}: {}",
                stderr(&output)
            );
            assert!(!output.stdout.is_empty(), "{args:?}");
        }
        // With PostgreSQL's %f and %p: nothing was restored, so never 0.
        let output = run(&pgdata, &["wal-restore", "--help", "F", "P"], &[]);
        let code = if signal.is_some() { 255 } else { 2 };
        assert_eq!(output.status.code(), Some(code), "{signal:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("nothing was restored"), "{}", stderr(&output));
    }
}

#[test]
fn wal_archive_never_reports_a_usage_error_as_archived() {
    for signal in [None, Some("recovery.signal"), Some("standby.signal")] {
        let pgdata = Pgdata::new(signal);
        let wal = "pg_wal/000000010000000000000001";
        std::fs::write(pgdata.path("pgdata").join(wal), b"x").unwrap();
        let cluster = ("CNPGI_CLUSTER", pgdata.path("cluster.yaml"));
        let cases: Vec<(Vec<&str>, Env)> = vec![
            (vec!["wal-archive"], vec![cluster.clone()]),
            (vec!["wal-archive", "--clutser", "c", wal], vec![cluster.clone()]),
            (vec!["wal-archive", wal, "extra"], vec![cluster.clone()]),
            (
                vec!["wal-archive", "--plugin-timeout-seconds", "soon", wal],
                vec![cluster.clone()],
            ),
            (vec!["wal-archive", wal], vec![]),
            (vec!["wal-archive", wal], vec![("CNPGI_CLUSTER", PathBuf::new())]),
            (
                vec!["wal-archive", wal],
                vec![("CNPGI_CLUSTER", pgdata.path("missing.yaml"))],
            ),
            (vec!["wal-archive", "--help", wal], vec![cluster.clone()]),
            (vec!["wal-archive", wal, "-h"], vec![cluster.clone()]),
            (vec!["wal-archive", "--version", wal], vec![cluster.clone()]),
            (vec!["wal-archiv", wal], vec![cluster.clone()]),
        ];
        for (args, env) in cases {
            let output = run(&pgdata, &args, &env);
            assert_ne!(
                output.status.code(),
                Some(0),
                "{signal:?} {args:?}: {}",
                stderr(&output)
            );
            // 2: PostgreSQL keeps the segment, retries, and counts the failure
            // in pg_stat_archiver (a status above 125 would restart the
            // archiver instead, uncounted). A subcommand clap does not know
            // may be a misspelt wal-restore: 255 in a recovery.
            let code = if args[0] == "wal-archiv" && signal.is_some() {
                255
            } else {
                2
            };
            assert_eq!(
                output.status.code(),
                Some(code),
                "{signal:?} {args:?}: {}",
                stderr(&output)
            );
            assert!(!stderr(&output).is_empty(), "{args:?}: says why");
        }
    }
}
