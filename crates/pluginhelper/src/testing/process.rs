//! Child processes that cannot outlive the test that started them.

use std::{
    io,
    ops::{Deref, DerefMut},
    process::{Child, Command, ExitStatus},
    time::{Duration, Instant},
};

/// A child process that is killed and reaped when dropped.
///
/// A test that starts a plugin binary and then fails an assertion before
/// stopping it would otherwise leave the process running, reparented to PID
/// 1, holding its port or socket. Hold the child in a `ChildGuard` instead:
/// it derefs to [`Child`], [`ChildGuard::terminate`] stops it gracefully,
/// and dropping it (on any path, including a panic) kills what is left.
///
/// ```no_run
/// use std::process::Command;
/// use cnpgi_pluginhelper::testing::ChildGuard;
///
/// # async fn example() -> std::io::Result<()> {
/// let mut plugin = ChildGuard::spawn(Command::new("my-plugin").args(["plugin", "--plugin-path=/tmp/p"]))?;
/// // ... assertions that may panic ...
/// let status = plugin.terminate(std::time::Duration::from_secs(10)).await?;
/// assert!(status.success());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    /// Spawns `command` and guards the child.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        Ok(Self {
            child: command.spawn()?,
        })
    }

    /// Guards an already spawned child.
    pub fn new(child: Child) -> Self {
        Self { child }
    }

    /// Sends SIGTERM and waits up to `within` for the process to exit; kills
    /// it and answers an error naming the PID when it does not.
    pub async fn terminate(&mut self, within: Duration) -> io::Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        // `kill(1)` keeps this crate free of `unsafe` and of a libc binding.
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()?;
        if !sent.success() {
            return Err(io::Error::other(format!(
                "kill -TERM {} failed: {sent}",
                self.child.id()
            )));
        }
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let pid = self.child.id();
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("process {pid} did not exit within {within:?} of SIGTERM; killed"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drop_kills_and_reaps_the_child() {
        let guard = ChildGuard::spawn(Command::new("sleep").arg("600")).unwrap();
        let pid = guard.id();
        drop(guard);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} survived its guard"
        );
    }

    #[tokio::test]
    async fn terminate_reports_the_exit_status() {
        let mut guard = ChildGuard::spawn(Command::new("sleep").arg("600")).unwrap();
        let status = guard.terminate(Duration::from_secs(5)).await.unwrap();
        assert!(!status.success(), "sleep killed by SIGTERM cannot succeed: {status:?}");
    }

    #[tokio::test]
    async fn a_panicking_test_still_stops_its_child() {
        let pid = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let seen = pid.clone();
        let result = std::panic::catch_unwind(move || {
            let guard = ChildGuard::spawn(Command::new("sleep").arg("600")).unwrap();
            seen.store(guard.id(), std::sync::atomic::Ordering::SeqCst);
            panic!("a failed assertion");
        });
        assert!(result.is_err());
        let pid = pid.load(std::sync::atomic::Ordering::SeqCst);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
