//! `render` and `check-plugin` stopped by SIGTERM or SIGINT while a plugin
//! hangs: the plugin processes they started are gone and their temporary
//! directories removed (issue 13, point 6).

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use cnpgi_pluginhelper::testing::ChildGuard;
use common::{BIN, workspace_binary};

/// Processes whose parent is `parent`, from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some((_, ppid)) = stat(pid)
            && ppid == parent
        {
            children.push(pid);
        }
    }
    children
}

/// (state, parent PID) of a process, if it exists.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Kills processes a failed test would otherwise leave behind.
struct Orphans(Vec<u32>);

impl Drop for Orphans {
    fn drop(&mut self) {
        for pid in &self.0 {
            if alive(*pid) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        }
    }
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect()
}

/// Starts `cnpgi-operator <args>` with the hanging broken plugin and a
/// private TMPDIR, waits until the plugin is serving and a call hangs, sends
/// `signal`, and checks what is left.
async fn interrupt(args: &[&str], signal: &str, expected_code: i32) {
    let broken = workspace_binary("cnpgi-broken-plugin");
    let scratch = tempfile::tempdir().unwrap();
    let tmpdir = scratch.path().join("tmp");
    fs::create_dir(&tmpdir).unwrap();
    let log = scratch.path().join("stderr");
    let mut cli = ChildGuard::spawn(
        Command::new(BIN)
            .args(args)
            .arg(format!("--plugin-exec={}", broken.display()))
            .env("TMPDIR", &tmpdir)
            .env("CNPGI_BROKEN_MODE", "hang")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap()),
    )
    .unwrap();

    // Wait for the plugin to serve; then give the hanging call time to start.
    let started = Instant::now();
    let plugins = loop {
        let serving = fs::read_to_string(&log).unwrap_or_default().contains("listening");
        let plugins = children_of(cli.id());
        if serving && !plugins.is_empty() {
            break plugins;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the plugin never served; stderr:\n{}",
            fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(cli.try_wait().unwrap().is_none(), "{args:?} exited early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _orphans = Orphans(plugins.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        cli.try_wait().unwrap().is_none(),
        "{args:?} should be waiting on the hanging plugin; stderr:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        !entries(&tmpdir).is_empty(),
        "the plugin's temporary directory exists while it runs"
    );

    let sent = Command::new("kill")
        .args([format!("-{signal}"), cli.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = cli.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{args:?} did not exit after SIG{signal}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stderr = fs::read_to_string(&log).unwrap_or_default();

    // Its plugin processes were killed and reaped, not left to PID 1.
    let deadline = Instant::now() + Duration::from_secs(5);
    while plugins.iter().any(|pid| alive(*pid)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<_> = plugins.iter().filter(|pid| alive(**pid)).collect();
    assert!(
        left.is_empty(),
        "plugin processes {left:?} outlived {args:?} (SIG{signal}); stderr:\n{stderr}"
    );
    assert_eq!(
        entries(&tmpdir),
        Vec::<PathBuf>::new(),
        "temporary directories left behind by {args:?} (SIG{signal})"
    );
    assert_eq!(
        status.code(),
        Some(expected_code),
        "{args:?} exits through its cleanup with 128 + the signal number: {status:?}; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("SIG{signal}")),
        "the interruption is reported: {stderr}"
    );
}

/// A Cluster using the broken plugin, in a file that lives as long as the test.
fn cluster() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    fs::write(
        &path,
        "apiVersion: cnpgi.io/v1\nkind: Cluster\nmetadata:\n  name: hanging\n  namespace: default\n\
         spec:\n  instances: 1\n  plugins:\n  - name: broken.example.com\n",
    )
    .unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[tokio::test]
async fn render_stopped_by_sigterm_leaves_no_plugin_and_no_temp_dir() {
    let (_dir, cluster) = cluster();
    interrupt(&["render", &cluster], "TERM", 143).await;
}

#[tokio::test]
async fn render_stopped_by_sigint_leaves_no_plugin_and_no_temp_dir() {
    let (_dir, cluster) = cluster();
    interrupt(&["render", &cluster], "INT", 130).await;
}

#[tokio::test]
async fn check_plugin_stopped_by_sigterm_leaves_no_plugin_and_no_temp_dir() {
    interrupt(&["check-plugin", "--plugin-timeout-seconds=120"], "TERM", 143).await;
}
