//! Log lines captured for assertions about what a server logs.

use std::sync::{Arc, Mutex, PoisonError};

use tracing::subscriber::DefaultGuard;

/// The lines `tracing` writes on this thread while the guard of
/// [`CapturedLog::install`] lives (a current-thread runtime's tasks included),
/// without ANSI colours.
///
/// ```
/// let (log, _guard) = cnpgi_pluginhelper::testing::CapturedLog::install();
/// tracing::warn!(count = 3, "refused");
/// assert_eq!(log.lines_with("refused").len(), 1);
/// ```
#[derive(Debug, Clone, Default)]
pub struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    /// A capture, and the guard that keeps it the thread's subscriber.
    pub fn install() -> (Self, DefaultGuard) {
        let log = Self::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (log, tracing::subscriber::set_default(subscriber))
    }

    /// The lines captured so far that contain every one of `texts`.
    pub fn lines_with_all(&self, texts: &[&str]) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| texts.iter().all(|text| line.contains(text)))
            .map(str::to_owned)
            .collect()
    }

    /// The lines captured so far that contain `text`.
    pub fn lines_with(&self, text: &str) -> Vec<String> {
        self.lines_with_all(&[text])
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
