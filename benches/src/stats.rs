//! Latency samples and their percentiles.

use std::time::Duration;

/// Latencies of one scenario.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    latencies: Vec<Duration>,
    pub(crate) elapsed: Duration,
    pub(crate) errors: usize,
}

impl Samples {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            latencies: Vec::with_capacity(n),
            ..Self::default()
        }
    }

    pub(crate) fn push(&mut self, latency: Duration) {
        self.latencies.push(latency);
    }

    pub(crate) fn extend(&mut self, other: Samples) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.elapsed += other.elapsed;
    }

    pub(crate) fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[rank.min(sorted.len() - 1)]
    }

    pub(crate) fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    pub(crate) fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    pub(crate) fn count(&self) -> usize {
        self.latencies.len()
    }

    /// Calls per second over the measured wall time.
    pub(crate) fn rate(&self) -> f64 {
        if self.elapsed.is_zero() {
            return 0.0;
        }
        self.count() as f64 / self.elapsed.as_secs_f64()
    }
}

/// `1.234 ms` / `56 µs`.
pub(crate) fn fmt(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros >= 1000.0 {
        format!("{:.2} ms", micros / 1000.0)
    } else {
        format!("{micros:.0} µs")
    }
}
