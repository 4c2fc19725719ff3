//! Waiting, in tests, for what happens in the background.

use std::{fmt::Debug, time::Duration};

/// What [`eventually`] waits for: a condition (`bool`) or an attempt that
/// gives a value (`Result`, whose last error is shown if it never succeeds).
pub trait Outcome {
    /// What a successful outcome gives: `()` for a condition.
    type Value;

    /// The value, or why not yet.
    fn settled(self) -> Result<Self::Value, String>;
}

impl Outcome for bool {
    type Value = ();

    fn settled(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the condition is false".to_owned())
        }
    }
}

impl<T, E: Debug> Outcome for Result<T, E> {
    type Value = T;

    fn settled(self) -> Result<T, String> {
        self.map_err(|error| format!("{error:?}"))
    }
}

/// How often [`eventually`] checks.
const INTERVAL: Duration = Duration::from_millis(10);

/// Checks `check` every 10 ms until it succeeds (a `true`, an `Ok`) and
/// returns its value; panics naming `what`, with the last failure, when it
/// has not succeeded within `within`.
///
/// ```no_run
/// # async fn example(ready: std::sync::Arc<std::sync::atomic::AtomicBool>) {
/// use std::{sync::atomic::Ordering, time::Duration};
///
/// use cnpgi_pluginhelper::testing::eventually;
///
/// // A condition...
/// eventually("the plugin is ready", Duration::from_secs(2), async || ready.load(Ordering::SeqCst)).await;
/// // ...or an attempt that gives a value.
/// let answer = eventually("the file is written", Duration::from_secs(2), async || {
///     std::fs::read_to_string("/tmp/answer")
/// })
/// .await;
/// # let _ = answer;
/// # }
/// ```
///
/// # Panics
///
/// When `check` has not succeeded within `within`: the test fails there.
pub async fn eventually<O: Outcome>(what: &str, within: Duration, mut check: impl AsyncFnMut() -> O) -> O::Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await.settled() {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("never happened within {within:?}: {what} (last: {last})")
            }
            Err(_) => tokio::time::sleep(INTERVAL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn waits_for_a_condition_and_for_a_value() {
        let calls = AtomicU32::new(0);
        eventually("the third call", Duration::from_secs(5), async || {
            calls.fetch_add(1, Ordering::SeqCst) >= 2
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let value = eventually("an Ok", Duration::from_secs(5), async || {
            match calls.fetch_add(1, Ordering::SeqCst) {
                n if n < 5 => Err("not yet"),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(value, 5);
    }

    #[tokio::test]
    #[should_panic(expected = "never happened within 50ms: the impossible (last: \"nope\")")]
    async fn panics_with_what_and_the_last_failure() {
        eventually("the impossible", Duration::from_millis(50), async || {
            Err::<(), _>("nope")
        })
        .await;
    }
}
