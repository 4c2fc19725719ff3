//! Watching the calls routing makes to plugins: for each one, the plugin,
//! the RPC, a short summary of what was asked and of what came back (or the
//! gRPC error), and how long it took.
//!
//! This is what `cnpgi-operator render --trace` prints; any operator can do
//! the same by giving a [`RouteObserver`] in [`RoutingPolicy::observer`]
//! (or [`Router::with_observer`]). Without one, routing computes no
//! summary and reads no clock: the observer costs nothing when unset.
//!
//! The calls a [`Registry`](crate::registry::Registry) makes to learn what a
//! plugin is (`GetPluginMetadata`, the capabilities, `Probe`) are not
//! routing's: [`ClientOptions::observer`](crate::ClientOptions::observer)
//! sees those, without summaries.
//!
//! ```
//! use std::sync::Arc;
//!
//! use cnpgi_host::{HostOptions, observe::CallRecorder, routing::RoutingPolicy};
//!
//! let recorder = Arc::new(CallRecorder::default());
//! let options = HostOptions {
//!     policy: RoutingPolicy { observer: Some(recorder.clone()), ..RoutingPolicy::default() },
//!     ..HostOptions::default()
//! };
//! # let _ = options;
//! // ... route through a `Host::new(options)`, then:
//! for call in recorder.calls() {
//!     println!("{} {} {} -> {}", call.plugin, call.rpc, call.request, call.outcome);
//! }
//! ```
//!
//! [`RoutingPolicy::observer`]: crate::routing::RoutingPolicy::observer
//! [`Router::with_observer`]: crate::routing::Router::with_observer

pub(crate) mod summary;

use std::{
    fmt,
    future::Future,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use cnpgi_core::echo::bounded_string;

/// Told about every call routing makes to a plugin, once it ended.
///
/// Called on the routing task, between one plugin call and the next: keep
/// it quick (record, count, log) and never block.
pub trait RouteObserver: fmt::Debug + Send + Sync + 'static {
    /// `call` was made and ended (answered or failed).
    fn call_ended(&self, call: &RoutedCall);
}

/// One call routing made to a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutedCall {
    /// The plugin called.
    pub plugin: String,
    /// `Service/RPC`, as in errors and metrics: `Operator/MutateCluster`.
    pub rpc: &'static str,
    /// What was asked, in short: the object sent (`Cluster default/pg`,
    /// `TYPE_CREATE Pod default/pg-1`) and what else the request carries.
    pub request: String,
    /// How it ended.
    pub outcome: CallOutcome,
    /// From sending the request to having the answer (or the error).
    pub elapsed: Duration,
}

/// How a plugin call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// The plugin answered; a short summary of its answer (for a patch: the
    /// number of operations, their kinds and paths; for a validation: the
    /// fields in error; for a status: its keys). A summary says so when the
    /// answer is unusable (a patch that does not parse): routing then fails.
    Answered(String),
    /// The call failed: the plugin's gRPC status, or the client's (deadline,
    /// connection).
    Failed {
        /// The gRPC code.
        code: tonic::Code,
        /// The status message, bounded ([`cnpgi_core::echo::bounded`]).
        message: String,
    },
}

impl fmt::Display for CallOutcome {
    /// The answer's summary, or `error <Code>: <message>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Answered(summary) => f.write_str(summary),
            Self::Failed { code, message } => write!(f, "error {code:?}: {message}"),
        }
    }
}

/// Keeps every call it is told about, in the order they ended (for a
/// pipeline routed one call at a time, the order they were made).
#[derive(Debug, Default)]
pub struct CallRecorder {
    calls: Mutex<Vec<RoutedCall>>,
}

impl CallRecorder {
    /// The calls recorded so far, in order.
    pub fn calls(&self) -> Vec<RoutedCall> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The calls recorded so far, in order, leaving none.
    pub fn take(&self) -> Vec<RoutedCall> {
        std::mem::take(&mut *self.calls.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl RouteObserver for CallRecorder {
    fn call_ended(&self, call: &RoutedCall) {
        // A panic elsewhere while holding the lock leaves a usable Vec.
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call.clone());
    }
}

/// Awaits `call`, a call of `rpc` to `plugin`, and tells `observer` about
/// it when there is one. `request` and `answer` summarise what was asked
/// and answered; they are run only when there is an observer, so that
/// routing without one pays for no summary, clock or allocation.
pub(crate) async fn observed<T>(
    observer: Option<&dyn RouteObserver>,
    plugin: &str,
    rpc: &'static str,
    request: impl FnOnce() -> String,
    call: impl Future<Output = Result<T, tonic::Status>>,
    answer: impl FnOnce(&T) -> String,
) -> Result<T, tonic::Status> {
    let Some(observer) = observer else {
        return call.await;
    };
    let request = request();
    let started = Instant::now();
    let result = call.await;
    let elapsed = started.elapsed();
    let outcome = match &result {
        Ok(value) => CallOutcome::Answered(answer(value)),
        Err(status) => CallOutcome::Failed {
            code: status.code(),
            message: bounded_string(status.message()),
        },
    };
    observer.call_ended(&RoutedCall {
        plugin: plugin.to_owned(),
        rpc,
        request,
        outcome,
        elapsed,
    });
    result
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_call_is_recorded_with_its_summaries_and_time() {
        let recorder = CallRecorder::default();
        let answer = observed(
            Some(&recorder),
            "p.example.com",
            "Operator/MutateCluster",
            || "Cluster default/pg".to_owned(),
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, tonic::Status>(3)
            },
            |n| format!("{n} ops"),
        )
        .await;
        assert_eq!(answer.unwrap(), 3, "the answer is passed through");
        let calls = recorder.take();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].plugin.as_str(), calls[0].rpc, calls[0].request.as_str()),
            ("p.example.com", "Operator/MutateCluster", "Cluster default/pg")
        );
        assert_eq!(calls[0].outcome, CallOutcome::Answered("3 ops".into()));
        assert!(calls[0].elapsed >= Duration::from_millis(20), "{:?}", calls[0].elapsed);
        assert!(recorder.calls().is_empty(), "take leaves none");
    }

    #[tokio::test]
    async fn a_failure_is_recorded_with_its_code_and_bounded_message() {
        let recorder = CallRecorder::default();
        let huge = "x".repeat(100_000);
        let result = observed(
            Some(&recorder),
            "p.example.com",
            "Operator/ValidateClusterCreate",
            String::new,
            async { Err::<(), _>(tonic::Status::invalid_argument(huge.clone())) },
            |()| unreachable!("no answer to summarise"),
        )
        .await;
        assert_eq!(
            result.unwrap_err().message(),
            huge,
            "the status is passed through whole"
        );
        let call = &recorder.calls()[0];
        let CallOutcome::Failed { code, message } = &call.outcome else {
            panic!("{call:?}");
        };
        assert_eq!(*code, tonic::Code::InvalidArgument);
        assert!(message.len() <= cnpgi_core::echo::MAX_ECHO_BYTES, "{}", message.len());
        assert!(call.outcome.to_string().starts_with("error InvalidArgument: xxx"));
    }

    #[tokio::test]
    async fn without_an_observer_no_summary_is_computed() {
        let summarised = AtomicBool::new(false);
        let result = observed(
            None,
            "p.example.com",
            "Operator/MutateCluster",
            || {
                summarised.store(true, Ordering::SeqCst);
                String::new()
            },
            async { Ok::<_, tonic::Status>(1) },
            |_| {
                summarised.store(true, Ordering::SeqCst);
                String::new()
            },
        )
        .await;
        assert_eq!(result.unwrap(), 1);
        assert!(!summarised.load(Ordering::SeqCst));
    }
}
