//! The answer of a `cnpgi.reconciler.v1.ReconcilerHooks` hook ([`Hook`], for
//! `Pre` and `Post`), and the service's `GetCapabilities` answer.
//!
//! CloudNativePG reads an answer as: `CONTINUE` (or unspecified) goes on with
//! the next plugin; `REQUEUE` stops and reconciles again after
//! `requeue_after` **seconds** (0: its own rate-limited retry); `TERMINATE`
//! stops the chain (after `Pre`, the reconciliation ends without a requeue).
//! An error sets the Cluster's phase and retries in 15 s.
//!
//! ```
//! use std::time::Duration;
//! use cnpgi_pluginhelper::lowlevel::hook::Hook;
//! use cnpgi_pluginhelper::proto::reconciler::v1::{ReconcilerHooksResult, reconciler_hooks_result::Behavior};
//!
//! let answer = ReconcilerHooksResult::from(Hook::RequeueAfter(Duration::from_millis(1500)));
//! assert_eq!(answer.behavior(), Behavior::Requeue);
//! assert_eq!(answer.requeue_after, 2); // whole seconds, rounded up
//! ```

use std::time::Duration;

use cnpgi_proto::reconciler::v1::{
    ReconcilerHooksCapabilitiesResult, ReconcilerHooksResult, reconciler_hooks_capability::Kind,
    reconciler_hooks_result::Behavior,
};

/// What a hook tells the operator to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// Go on with the next plugin and the reconciliation.
    Continue,
    /// Stop, and reconcile again after this long (rounded up to whole
    /// seconds; zero leaves the delay to the operator).
    RequeueAfter(Duration),
    /// Stop the chain of hooks.
    Terminate,
}

impl From<Hook> for ReconcilerHooksResult {
    fn from(hook: Hook) -> Self {
        let (behavior, requeue_after) = match hook {
            Hook::Continue => (Behavior::Continue, 0),
            Hook::RequeueAfter(delay) => {
                let seconds = delay.as_secs().saturating_add(u64::from(delay.subsec_nanos() > 0));
                (Behavior::Requeue, i64::try_from(seconds).unwrap_or(i64::MAX))
            }
            Hook::Terminate => (Behavior::Terminate, 0),
        };
        ReconcilerHooksResult {
            behavior: behavior.into(),
            requeue_after,
        }
    }
}

impl From<&ReconcilerHooksResult> for Hook {
    /// How CloudNativePG reads an answer: unknown and unspecified behaviours
    /// continue; a negative delay counts as zero.
    fn from(result: &ReconcilerHooksResult) -> Self {
        match Behavior::try_from(result.behavior) {
            Ok(Behavior::Requeue) => {
                Hook::RequeueAfter(Duration::from_secs(u64::try_from(result.requeue_after).unwrap_or(0)))
            }
            Ok(Behavior::Terminate) => Hook::Terminate,
            Ok(Behavior::Continue | Behavior::Unspecified) | Err(_) => Hook::Continue,
        }
    }
}

/// The `GetCapabilities` answer for hooks on these kinds of object.
///
/// ```
/// use cnpgi_pluginhelper::lowlevel::hook::capabilities;
/// use cnpgi_pluginhelper::proto::reconciler::v1::reconciler_hooks_capability::Kind;
///
/// assert_eq!(capabilities([Kind::Cluster]).reconciler_capabilities.len(), 1);
/// ```
pub fn capabilities(kinds: impl IntoIterator<Item = Kind>) -> ReconcilerHooksCapabilitiesResult {
    ReconcilerHooksCapabilitiesResult {
        reconciler_capabilities: kinds
            .into_iter()
            .map(cnpgi_core::capabilities::reconciler_hook)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip() {
        for (hook, behavior, seconds) in [
            (Hook::Continue, Behavior::Continue, 0),
            (Hook::Terminate, Behavior::Terminate, 0),
            (Hook::RequeueAfter(Duration::from_secs(30)), Behavior::Requeue, 30),
            (Hook::RequeueAfter(Duration::ZERO), Behavior::Requeue, 0),
            (Hook::RequeueAfter(Duration::from_nanos(1)), Behavior::Requeue, 1),
        ] {
            let result = ReconcilerHooksResult::from(hook);
            assert_eq!((result.behavior(), result.requeue_after), (behavior, seconds));
        }
        assert_eq!(
            Hook::from(&ReconcilerHooksResult::from(Hook::RequeueAfter(Duration::from_secs(7)))),
            Hook::RequeueAfter(Duration::from_secs(7))
        );
        let odd = ReconcilerHooksResult {
            behavior: 42,
            requeue_after: -5,
        };
        assert_eq!(Hook::from(&odd), Hook::Continue);
        let negative = ReconcilerHooksResult {
            behavior: Behavior::Requeue.into(),
            requeue_after: -5,
        };
        assert_eq!(Hook::from(&negative), Hook::RequeueAfter(Duration::ZERO));
        let huge = ReconcilerHooksResult::from(Hook::RequeueAfter(Duration::MAX));
        assert_eq!(huge.requeue_after, i64::MAX);
    }
}
