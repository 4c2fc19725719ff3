//! Rate-limited warnings: under a flood (thousands of refused or silent
//! connections a second), one log line per event would drown the log and
//! cost more than the events; one line every few seconds, with how many
//! events it stands for, says the same.
//!
//! The caller reads the clock and passes the time in, so this module stays
//! free of I/O like the rest of the crate.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use cnpgi_core::ratelimit::RateLimited;
//!
//! static REFUSED: RateLimited = RateLimited::new(Duration::from_secs(5));
//! let start = Instant::now();
//! assert_eq!(REFUSED.hit(start), Some(1)); // the first event is logged at once
//! assert_eq!(REFUSED.hit(start + Duration::from_secs(1)), None);
//! assert_eq!(REFUSED.hit(start + Duration::from_secs(2)), None);
//! // 5 s after the last line: a line for these three events.
//! assert_eq!(REFUSED.hit(start + Duration::from_secs(5)), Some(3));
//! ```

use std::{
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// Counts events and says when one log line is due: at the first event,
/// then at the first event at least [`RateLimited::interval`] after the
/// previous line. Shared between threads (usually a `static`).
#[derive(Debug)]
pub struct RateLimited {
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the last line was due; `None` before the first event.
    last_line: Option<Instant>,
    /// Events since then, not yet reported.
    unreported: u64,
}

impl RateLimited {
    /// At most one line every `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new(State {
                last_line: None,
                unreported: 0,
            }),
        }
    }

    /// The shortest time between two lines.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Records one event at `now`. `Some(count)` when a line is due, for
    /// `count` events (this one and those not reported since the previous
    /// line); `None` when the event was only counted.
    pub fn hit(&self, now: Instant) -> Option<u64> {
        // A panic elsewhere while holding the lock leaves a count that is
        // still meaningful: keep using it.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.unreported = state.unreported.saturating_add(1);
        let due = state
            .last_line
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if !due {
            return None;
        }
        state.last_line = Some(now);
        Some(std::mem::take(&mut state.unreported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_every_event_counted_once() {
        let limiter = RateLimited::new(Duration::from_secs(5));
        let start = Instant::now();
        let mut reported = 0;
        let mut lines = 0;
        // 1,000 events a second for 12 s.
        for ms in 0..12_000u64 {
            if let Some(count) = limiter.hit(start + Duration::from_millis(ms)) {
                reported += count;
                lines += 1;
            }
        }
        // Lines at 0 s, 5 s and 10 s.
        assert_eq!(lines, 3);
        // The events after the last line wait for the next one.
        assert_eq!(reported, 10_001);
        assert_eq!(limiter.hit(start + Duration::from_secs(15)), Some(2_000));
    }

    #[test]
    fn a_clock_going_backwards_does_not_log_every_event() {
        let limiter = RateLimited::new(Duration::from_secs(5));
        let start = Instant::now() + Duration::from_secs(60);
        assert_eq!(limiter.hit(start), Some(1));
        assert_eq!(limiter.hit(start - Duration::from_secs(30)), None);
        assert_eq!(limiter.hit(start + Duration::from_secs(5)), Some(2));
    }
}
