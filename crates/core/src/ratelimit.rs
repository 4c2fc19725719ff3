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
    collections::HashMap,
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
        state.hit(now, self.interval)
    }
}

impl State {
    fn hit(&mut self, now: Instant, interval: Duration) -> Option<u64> {
        self.unreported = self.unreported.saturating_add(1);
        let due = self
            .last_line
            .is_none_or(|last| now.saturating_duration_since(last) >= interval);
        if !due {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

/// One [`RateLimited`] per kind of event, the kind being a short text (an
/// error's message, say), so that one kind's flood does not hide the first
/// line of another: a client retrying with the wrong certificate must still
/// be logged while cancelled dials were logged a second before.
///
/// At most `max_kinds` kinds get their own limit; later kinds share one, so
/// a flood of distinct messages cannot grow the map without bound.
///
/// ```
/// use std::time::{Duration, Instant};
/// use cnpgi_core::ratelimit::RateLimitedByKind;
///
/// let refused = RateLimitedByKind::new(Duration::from_secs(5), 16);
/// let start = Instant::now();
/// assert_eq!(refused.hit("tls handshake eof", start), Some(1));
/// assert_eq!(refused.hit("tls handshake eof", start), None);
/// // Another kind is logged at once.
/// assert_eq!(refused.hit("invalid peer certificate: UnknownIssuer", start), Some(1));
/// ```
#[derive(Debug)]
pub struct RateLimitedByKind {
    interval: Duration,
    max_kinds: usize,
    kinds: Mutex<HashMap<String, State>>,
    overflow: RateLimited,
}

impl RateLimitedByKind {
    /// At most one line every `interval` for each kind, with separate
    /// limits for the first `max_kinds` kinds seen.
    pub fn new(interval: Duration, max_kinds: usize) -> Self {
        Self {
            interval,
            max_kinds,
            kinds: Mutex::new(HashMap::new()),
            overflow: RateLimited::new(interval),
        }
    }

    /// Records one event of `kind` at `now`; like [`RateLimited::hit`].
    pub fn hit(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        if !kinds.contains_key(kind) {
            if kinds.len() >= self.max_kinds {
                drop(kinds);
                return self.overflow.hit(now);
            }
            kinds.insert(
                kind.to_owned(),
                State {
                    last_line: None,
                    unreported: 0,
                },
            );
        }
        let state = kinds.get_mut(kind)?;
        state.hit(now, self.interval)
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

    #[test]
    fn each_kind_has_its_own_limit_and_late_kinds_share_one() {
        let limiter = RateLimitedByKind::new(Duration::from_secs(5), 2);
        let start = Instant::now();
        assert_eq!(limiter.hit("eof", start), Some(1));
        assert_eq!(limiter.hit("eof", start + Duration::from_secs(1)), None);
        // The failure that matters is not hidden by the flood of another.
        assert_eq!(limiter.hit("unknown issuer", start + Duration::from_secs(1)), Some(1));
        assert_eq!(limiter.hit("eof", start + Duration::from_secs(5)), Some(2));
        // Beyond two kinds, the others share one limit.
        assert_eq!(limiter.hit("third", start), Some(1));
        assert_eq!(limiter.hit("fourth", start + Duration::from_secs(1)), None);
        assert_eq!(limiter.hit("fifth", start + Duration::from_secs(6)), Some(2));
    }
}
