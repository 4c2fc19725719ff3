//! Deletion: a deleted resource's plugins clean up before it goes, within a deadline.
//!
//! An operator holds a finalizer ([`FINALIZER`], `cnpgi.io/plugins`, or one
//! of its own) on every resource that enables plugins. When the resource is
//! deleted, the API server sets its `metadata.deletionTimestamp` and keeps
//! it while the finalizer is there; [`Host::cleanup`] then calls
//! `ReconcilerHooks` `Pre` ([`HookKind::Cluster`](crate::HookKind)) on each
//! enabled plugin with the resource **as the API server has it**:
//!
//! * **How a plugin is told.** The resource it is sent has
//!   `metadata.deletionTimestamp` set: that is the whole signal, on the
//!   CNPG-I wire as it is. A plugin checks it (with the Rust SDK,
//!   `ReconcilerCall::is_being_deleted`), cleans up what it made for the
//!   resource, and answers `CONTINUE` when done, or `REQUEUE` to be asked
//!   again. A plugin without a reconciler hook for the resource has nothing
//!   to clean up.
//! * **Every plugin is asked**, whatever the others answered (not the
//!   chain of a reconcile, which stops at the first `REQUEUE`): one
//!   plugin's trouble does not hold another's cleanup back. Cleanups must
//!   be idempotent: a plugin is asked again until all answered.
//! * **The implementation that did the work.** When the resource's layout
//!   names one implementation among several ([`crate::choice`]), the plugin
//!   asked is the one its status records as chosen, available or not, not
//!   one chosen now (which could be another plugin, that never served it).
//! * **Never forever.** The outcome ([`CleanupOutcome`]) is
//!   [`Done`](CleanupOutcome::Done) when every plugin answered `CONTINUE`
//!   (or has no hook for the resource), else
//!   [`Pending`](CleanupOutcome::Pending), naming each plugin that did not
//!   and why (`REQUEUE`, `TERMINATE`, unavailable, failed), until
//!   `deletionTimestamp +` [`HostOptions::cleanup_deadline`](crate::HostOptions::cleanup_deadline)
//!   (default [`DEFAULT_CLEANUP_DEADLINE`], 5 minutes) has passed; then it is
//!   [`Abandoned`](CleanupOutcome::Abandoned): the finalizer goes anyway,
//!   an Event [`ABANDONED_REASON`] (`Warning`) names the plugins that did
//!   not answer and why ([`publish_abandoned`]), and
//!   `cnpgi_plugin_cleanups_abandoned_total{plugin}` counts them. The
//!   deadline is measured from the resource's own `deletionTimestamp` (to
//!   the second), so it holds across operator restarts. A fail-open plugin
//!   ([`RoutingPolicy::fail_open`](crate::routing::RoutingPolicy::fail_open))
//!   that is unavailable or fails is not waited for.
//!
//! # With kube-runtime's `Controller`
//!
//! [`PluginFinalizer::reconcile`] wraps kube-runtime's own
//! [`finalizer`](kube::runtime::finalizer::finalizer) helper (which adds
//! and removes the finalizer with JSON patches that test the list first, so
//! no other controller's finalizer is ever removed): the operator's
//! reconcile becomes its `apply` on a live resource, and [`Host::cleanup`]
//! on a deleted one, a [`Pending`](CleanupOutcome::Pending) cleanup keeping
//! the finalizer and asking to be reconciled again after
//! [`retry_after`](CleanupOutcome::Pending::retry_after) (never past the
//! deadline), [`Done`](CleanupOutcome::Done) and
//! [`Abandoned`](CleanupOutcome::Abandoned) letting the finalizer go. The
//! operator's RBAC needs `patch` on its resource (the finalizer) and
//! `create` on `events.k8s.io` Events. The patches are bounded by the
//! client's timeouts (`kube::Config::read_timeout`), the Event by
//! [`EVENT_TIMEOUT`](crate::choice::EVENT_TIMEOUT), each plugin call by
//! [`ClientOptions::call_timeout`](crate::ClientOptions).
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//!
//! use cnpgi_host::{Host, HostOptions, PluginResource, deletion::{FinalizerError, PluginFinalizer}};
//! use futures_util::StreamExt;
//! use kube::{
//!     Api, Client, CustomResource, ResourceExt,
//!     runtime::{Controller, controller::Action, events::{Recorder, Reporter}, watcher},
//! };
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// A table, implemented by the plugins it lists.
//! #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Table", namespaced)]
//! pub struct TableSpec {
//!     /// CloudNativePG's shape: `[{"name": ...}]`.
//!     #[serde(default)]
//!     pub plugins: Vec<serde_json::Value>,
//! }
//! impl PluginResource for Table {}
//!
//! /// What the operator's own reconcile fails with.
//! #[derive(Debug, thiserror::Error)]
//! #[error("{0}")]
//! struct ApplyError(String);
//!
//! /// Makes the world match a live table.
//! async fn apply(table: Arc<Table>) -> Result<Action, ApplyError> {
//!     let _ = table;
//!     Ok(Action::requeue(Duration::from_secs(300)))
//! }
//!
//! /// The controller's context: the finalizer, and the client.
//! struct Context {
//!     finalizer: PluginFinalizer<Table>,
//!     client: Client,
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::try_default().await?;
//! let host = Host::<Table>::new(HostOptions { cleanup_deadline: Duration::from_secs(120), ..HostOptions::default() });
//! let recorder = Recorder::new(client.clone(), Reporter { controller: "table-operator".into(), instance: None });
//! let context = Arc::new(Context { finalizer: PluginFinalizer::new(host, recorder), client: client.clone() });
//! Controller::new(Api::<Table>::all(client), watcher::Config::default())
//!     .run(
//!         |table, context| async move {
//!             let namespace = table.namespace().unwrap_or_default();
//!             let api = Api::<Table>::namespaced(context.client.clone(), &namespace);
//!             context.finalizer.reconcile(&api, table, apply).await
//!         },
//!         |_, _: &FinalizerError<ApplyError>, _| Action::requeue(Duration::from_secs(10)),
//!         context,
//!     )
//!     .for_each(|_| async {})
//!     .await;
//! # Ok(()) }
//! ```

use std::{
    fmt,
    future::Future,
    sync::Arc,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api,
    runtime::{
        controller::Action,
        events::{Event, EventType, Recorder},
        finalizer::{self, finalizer},
    },
};

use cnpgi_proto::reconciler::v1::reconciler_hooks_result::Behavior;

use crate::{
    HookKind, Host, HostError, PluginResource,
    references::ReferenceResolver,
    routing::{HookPhase, RoutedResource},
};

/// The finalizer [`PluginFinalizer`] holds by default.
pub const FINALIZER: &str = "cnpgi.io/plugins";

/// How long a deleted resource waits for its plugins' cleanup by default
/// ([`HostOptions::cleanup_deadline`](crate::HostOptions::cleanup_deadline)).
pub const DEFAULT_CLEANUP_DEADLINE: Duration = Duration::from_secs(300);

/// How soon a pending cleanup is asked again when no plugin said when (it
/// asked `REQUEUE` with no delay, or did not answer); never past the deadline.
pub const CLEANUP_RETRY: Duration = Duration::from_secs(10);

/// The reason of the Event saying a cleanup was abandoned ([`publish_abandoned`]).
pub const ABANDONED_REASON: &str = "PluginCleanupAbandoned";

/// An enabled plugin that has not (yet) finished its cleanup, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCleanedUp {
    /// The plugin.
    pub plugin: String,
    /// Why, in words: what it answered, or why it could not be asked.
    pub why: String,
}

impl fmt::Display for NotCleanedUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.plugin, self.why)
    }
}

/// What a deleted resource's plugins answered to their cleanup call ([`Host::cleanup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupOutcome {
    /// Every enabled plugin answered `CONTINUE`, or has no reconciler hook
    /// for the resource: the finalizer may go.
    Done,
    /// Some did not, and the cleanup deadline has not passed: keep the
    /// finalizer and ask again after `retry_after`.
    Pending {
        /// The plugins that did not answer `CONTINUE`, in routing order, and why.
        plugins: Vec<NotCleanedUp>,
        /// When to ask again: the soonest delay a plugin asked for, else
        /// [`CLEANUP_RETRY`], never past the deadline.
        retry_after: Duration,
    },
    /// Some did not, and the cleanup deadline has passed: the finalizer
    /// goes anyway ([`publish_abandoned`] says so).
    Abandoned {
        /// The plugins that did not answer `CONTINUE`, in routing order, and why.
        plugins: Vec<NotCleanedUp>,
    },
}

impl CleanupOutcome {
    /// The plugins that did not finish, and why (none when done).
    pub fn not_cleaned_up(&self) -> &[NotCleanedUp] {
        match self {
            Self::Done => &[],
            Self::Pending { plugins, .. } | Self::Abandoned { plugins } => plugins,
        }
    }

    /// Whether the finalizer may go ([`Done`](Self::Done) or [`Abandoned`](Self::Abandoned)).
    pub fn finished(&self) -> bool {
        !matches!(self, Self::Pending { .. })
    }

    /// The Event saying the cleanup was abandoned (a `Warning`,
    /// [`ABANDONED_REASON`], naming each plugin and why), when it was.
    pub fn abandoned_event(&self, deadline: Duration) -> Option<Event> {
        let Self::Abandoned { plugins } = self else {
            return None;
        };
        let which: Vec<String> = plugins.iter().map(ToString::to_string).collect();
        Some(Event {
            type_: EventType::Warning,
            reason: ABANDONED_REASON.to_owned(),
            note: Some(cnpgi_core::echo::bounded_string(format!(
                "the resource was let go without its plugins' cleanup: the cleanup deadline ({} s from its \
                 deletionTimestamp) passed before {} answered CONTINUE ({}); what they made for it may remain",
                deadline.as_secs(),
                if plugins.len() == 1 {
                    "this plugin"
                } else {
                    "these plugins"
                },
                which.join("; "),
            ))),
            action: "Cleanup".to_owned(),
            secondary: None,
        })
    }
}

/// One plugin's part in a cleanup: what it answered, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// `CONTINUE` (or unspecified): done.
    Continue,
    /// No reconciler hook for the resource: nothing to clean up.
    NoHook,
    /// Fail-open and unavailable or failing: not waited for.
    Skipped,
    /// `REQUEUE` after this long (zero: no delay said).
    Requeue(Duration),
    /// `TERMINATE`: it stopped its cleanup; asked again.
    Terminate,
    /// Not available, or the call failed: why.
    Failed(String),
}

/// The outcome of a cleanup: `answers` by plugin (in routing order), the
/// resource deleted at `deleted_at` (`None`: not being deleted, no deadline),
/// `deadline` after it, at `now`.
fn decide(
    answers: Vec<(String, Answer)>,
    deleted_at: Option<SystemTime>,
    deadline: Duration,
    now: SystemTime,
) -> CleanupOutcome {
    let mut plugins = Vec::new();
    let mut wanted: Option<Duration> = None;
    for (plugin, answer) in answers {
        let (why, delay) = match answer {
            Answer::Continue | Answer::NoHook | Answer::Skipped => continue,
            Answer::Requeue(after) if after.is_zero() => {
                ("asked to be called again (REQUEUE)".to_owned(), CLEANUP_RETRY)
            }
            Answer::Requeue(after) => (
                format!("asked to be called again in {} s (REQUEUE)", after.as_secs()),
                after,
            ),
            Answer::Terminate => ("stopped its cleanup (TERMINATE)".to_owned(), CLEANUP_RETRY),
            Answer::Failed(why) => (why, CLEANUP_RETRY),
        };
        wanted = Some(wanted.map_or(delay, |w| w.min(delay)));
        plugins.push(NotCleanedUp { plugin, why });
    }
    let Some(wanted) = wanted else {
        return CleanupOutcome::Done;
    };
    let remaining = deleted_at.map(|at| {
        at.checked_add(deadline)
            .and_then(|end| end.duration_since(now).ok())
            .unwrap_or(Duration::ZERO)
    });
    match remaining {
        Some(remaining) if remaining.is_zero() => CleanupOutcome::Abandoned { plugins },
        Some(remaining) => CleanupOutcome::Pending {
            plugins,
            retry_after: wanted.min(remaining),
        },
        None => CleanupOutcome::Pending {
            plugins,
            retry_after: wanted,
        },
    }
}

/// `metadata.deletionTimestamp` of `resource`, if set and readable.
fn deletion_timestamp(resource: &serde_json::Value) -> Option<SystemTime> {
    let text = resource.pointer("/metadata/deletionTimestamp")?.as_str()?;
    match text.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(at) => Some(SystemTime::from(at)),
        Err(error) => {
            tracing::warn!(%text, %error, "metadata.deletionTimestamp does not parse; the cleanup deadline is not applied");
            None
        }
    }
}

impl<K: PluginResource> Host<K> {
    /// Asks each plugin `resource` enables to clean up before it goes:
    /// `ReconcilerHooks` `Pre` ([`HookKind::Cluster`]) with the resource as
    /// given, which for a deleted resource is as the API server has it,
    /// `metadata.deletionTimestamp` set (see [`deletion`](crate::deletion)).
    /// Every plugin is asked, whatever the others answer; the outcome is
    /// [`Done`](CleanupOutcome::Done) when all answered `CONTINUE` (or have no
    /// hook), else [`Pending`](CleanupOutcome::Pending) until
    /// `deletionTimestamp +` [`HostOptions::cleanup_deadline`](crate::HostOptions::cleanup_deadline),
    /// [`Abandoned`](CleanupOutcome::Abandoned) after it (counted in
    /// [`Host::metrics`]). A resource without `deletionTimestamp` has no
    /// deadline: its cleanup stays pending until its plugins answer.
    ///
    /// Route it with [`Host::routed`], or [`Host::routed_with_references`]
    /// for plugins that read its references; when its layout names one
    /// implementation among several, the one its status records is asked.
    pub async fn cleanup(&self, resource: &RoutedResource) -> CleanupOutcome {
        let routed = self.router.routed_for_cleanup(resource);
        let fail_open = &self.router.policy().fail_open;
        let mut patience = self.router.policy().arrival_wait;
        let mut answers = Vec::new();
        for plugin in routed.enabled() {
            let name = plugin.name.clone();
            let started = std::time::Instant::now();
            let found = self.registry.get_waiting(&name, patience).await;
            patience = patience.saturating_sub(started.elapsed());
            let answer = match found {
                Err(error) => Err(format!("unavailable: {error}")),
                Ok(routable) if !routable.info.reconciler_kinds.contains(&HookKind::Cluster) => Ok(Answer::NoHook),
                Ok(routable) => self
                    .router
                    .reconciler_hook(HookPhase::Pre, &name, &routable, &routed, routed.definition())
                    .await
                    .map(|answer| match Behavior::try_from(answer.behavior) {
                        Ok(Behavior::Requeue) => {
                            Answer::Requeue(Duration::from_secs(u64::try_from(answer.requeue_after).unwrap_or(0)))
                        }
                        Ok(Behavior::Terminate) => Answer::Terminate,
                        Ok(Behavior::Continue | Behavior::Unspecified) | Err(_) => Answer::Continue,
                    })
                    .map_err(|error| error.to_string()),
            };
            let answer = match answer {
                Ok(answer) => answer,
                Err(why) if fail_open.contains(&name) => {
                    tracing::warn!(plugin = %name, %why, "plugin's cleanup failed; not waited for (fail-open)");
                    Answer::Skipped
                }
                Err(why) => Answer::Failed(why),
            };
            answers.push((name, answer));
        }
        let outcome = decide(
            answers,
            deletion_timestamp(routed.value()),
            self.cleanup_deadline,
            SystemTime::now(),
        );
        if let CleanupOutcome::Abandoned { plugins } = &outcome {
            for plugin in plugins {
                self.metrics().cleanup_abandoned(&plugin.plugin);
            }
        }
        outcome
    }

    /// [`HostOptions::cleanup_deadline`](crate::HostOptions::cleanup_deadline).
    pub fn cleanup_deadline(&self) -> Duration {
        self.cleanup_deadline
    }
}

/// Publishes `outcome`'s Event about the object `reference` with
/// `recorder` when the cleanup was abandoned ([`CleanupOutcome::abandoned_event`],
/// `deadline` being the cleanup deadline it names); returns whether it
/// published. The API server has [`EVENT_TIMEOUT`](crate::choice::EVENT_TIMEOUT)
/// to take it.
pub async fn publish_abandoned(
    recorder: &Recorder,
    reference: &ObjectReference,
    outcome: &CleanupOutcome,
    deadline: Duration,
) -> Result<bool, kube::Error> {
    let Some(event) = outcome.abandoned_event(deadline) else {
        return Ok(false);
    };
    crate::choice::publish_within_deadline(recorder, &event, reference, "the abandoned cleanup").await?;
    Ok(true)
}

/// Why [`PluginFinalizer::reconcile`] failed (a pending cleanup is not a
/// failure: it asks to be reconciled again).
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E: std::error::Error + 'static> {
    /// The operator's own reconcile (`apply`) failed.
    #[error(transparent)]
    Apply(E),
    /// The resource could not be routed to its plugins for their cleanup.
    #[error("cannot route {object} to its plugins for their cleanup: {source}")]
    Route {
        /// `namespace/name` of the resource.
        object: String,
        /// Why.
        source: HostError,
    },
    /// Adding or removing the finalizer failed; retried on the next reconcile.
    #[error(
        "cannot {action} the finalizer {finalizer} on {object}: {source} (retried on the next reconcile; the \
         operator needs `patch` on the resource)"
    )]
    Patch {
        /// `add` or `remove`.
        action: &'static str,
        /// The finalizer.
        finalizer: String,
        /// `namespace/name` of the resource.
        object: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// The resource has no name, or the finalizer does not make a JSON pointer.
    #[error("cannot hold the finalizer {finalizer} on {object}: {reason}")]
    Invalid {
        /// The finalizer.
        finalizer: String,
        /// `namespace/name` of the resource, as far as known.
        object: String,
        /// What is wrong.
        reason: &'static str,
    },
}

/// What the finalizer helper's `reconcile` closure fails with inside
/// [`PluginFinalizer::reconcile`].
#[derive(Debug, thiserror::Error)]
enum Step<E: std::error::Error + 'static> {
    #[error(transparent)]
    Apply(E),
    #[error("the plugins' cleanup is pending")]
    Pending(Duration),
    #[error(transparent)]
    Route(HostError),
}

/// The finalizer of resources that enable plugins, for an operator built on
/// kube-runtime's `Controller`: see the [module](self). Cheap to share
/// (`Arc`) as the controller's context.
#[derive(Clone)]
pub struct PluginFinalizer<K> {
    host: Host<K>,
    recorder: Recorder,
    name: String,
    references: Option<ReferenceResolver>,
}

impl<K> fmt::Debug for PluginFinalizer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginFinalizer")
            .field("name", &self.name)
            .field("host", &self.host)
            .field("references", &self.references)
            .finish_non_exhaustive()
    }
}

impl<K: PluginResource> PluginFinalizer<K> {
    /// The finalizer [`FINALIZER`] for `host`'s resources, publishing the
    /// Event of an abandoned cleanup with `recorder`.
    pub fn new(host: Host<K>, recorder: Recorder) -> Self {
        Self {
            host,
            recorder,
            name: FINALIZER.to_owned(),
            references: None,
        }
    }

    /// The same, holding the finalizer `name` instead of [`FINALIZER`]
    /// (unique to this operator: a finalizer is not shared between controllers).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The same, sending the plugins the objects the resource references
    /// with it in the cleanup call, read by `resolver`
    /// ([`Host::routed_with_references`]), as in every other call.
    pub fn with_references(mut self, resolver: ReferenceResolver) -> Self {
        self.references = Some(resolver);
        self
    }

    /// The finalizer held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host whose plugins clean up.
    pub fn host(&self) -> &Host<K> {
        &self.host
    }

    /// Reconciles `resource` through kube-runtime's
    /// [`finalizer`](kube::runtime::finalizer::finalizer) helper, `api`
    /// being where it lives (its namespace): a live resource gets the
    /// finalizer, then `apply`; a deleted one gets [`Host::cleanup`], the
    /// finalizer going when that is [`Done`](CleanupOutcome::Done) or
    /// [`Abandoned`](CleanupOutcome::Abandoned) (its Event published;
    /// failing to publish it is logged, and does not hold the resource),
    /// and staying while it is [`Pending`](CleanupOutcome::Pending), with an
    /// [`Action::requeue`] after its `retry_after`.
    pub async fn reconcile<F, Fut, E>(
        &self,
        api: &Api<K>,
        resource: Arc<K>,
        apply: F,
    ) -> Result<Action, FinalizerError<E>>
    where
        F: FnOnce(Arc<K>) -> Fut,
        Fut: Future<Output = Result<Action, E>>,
        E: std::error::Error + 'static,
        K: kube::Resource<DynamicType = ()>,
    {
        let object = format!(
            "{}/{}",
            kube::ResourceExt::namespace(&*resource).unwrap_or_default(),
            kube::ResourceExt::name_any(&*resource)
        );
        let result = finalizer(api, &self.name, resource, |event| async move {
            match event {
                finalizer::Event::Apply(resource) => apply(resource).await.map_err(Step::Apply),
                finalizer::Event::Cleanup(resource) => self.clean_up(&resource).await,
            }
        })
        .await;
        let step = match result {
            Ok(action) => return Ok(action),
            Err(finalizer::Error::ApplyFailed(step) | finalizer::Error::CleanupFailed(step)) => step,
            Err(finalizer::Error::AddFinalizer(source)) => return Err(self.patch_error("add", object, source)),
            Err(finalizer::Error::RemoveFinalizer(source)) => return Err(self.patch_error("remove", object, source)),
            Err(finalizer::Error::UnnamedObject) => return Err(self.invalid(object, "the resource has no name")),
            Err(finalizer::Error::InvalidFinalizer) => {
                return Err(self.invalid(object, "the finalizer's name does not make a JSON pointer"));
            }
        };
        match step {
            Step::Apply(error) => Err(FinalizerError::Apply(error)),
            Step::Pending(retry_after) => Ok(Action::requeue(retry_after)),
            Step::Route(source) => Err(FinalizerError::Route { object, source }),
        }
    }

    /// The cleanup of a deleted resource: `Ok` lets the finalizer go.
    async fn clean_up<E: std::error::Error + 'static>(&self, resource: &K) -> Result<Action, Step<E>>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let routed = match &self.references {
            Some(resolver) => self.host.routed_with_references(resource, resolver).await,
            None => self.host.routed(resource),
        }
        .map_err(Step::Route)?;
        let outcome = self.host.cleanup(&routed).await;
        let object = kube::ResourceExt::name_any(resource);
        match &outcome {
            CleanupOutcome::Done => {
                tracing::info!(%object, "the plugins cleaned up; the finalizer goes");
                Ok(Action::await_change())
            }
            CleanupOutcome::Pending { plugins, retry_after } => {
                let which: Vec<String> = plugins.iter().map(ToString::to_string).collect();
                tracing::info!(%object, plugins = %which.join("; "), retry_after = ?retry_after,
                    "the plugins' cleanup is pending; the finalizer stays");
                Err(Step::Pending(*retry_after))
            }
            CleanupOutcome::Abandoned { plugins } => {
                let which: Vec<String> = plugins.iter().map(ToString::to_string).collect();
                tracing::warn!(%object, plugins = %which.join("; "),
                    "the cleanup deadline passed; the finalizer goes without these plugins' cleanup");
                let reference = kube::Resource::object_ref(resource, &());
                if let Err(error) =
                    publish_abandoned(&self.recorder, &reference, &outcome, self.host.cleanup_deadline()).await
                {
                    tracing::warn!(%object, %error, "cannot publish the Event {ABANDONED_REASON}");
                }
                Ok(Action::await_change())
            }
        }
    }

    fn patch_error<E: std::error::Error + 'static>(
        &self,
        action: &'static str,
        object: String,
        source: kube::Error,
    ) -> FinalizerError<E> {
        FinalizerError::Patch {
            action,
            finalizer: self.name.clone(),
            object,
            source,
        }
    }

    fn invalid<E: std::error::Error + 'static>(&self, object: String, reason: &'static str) -> FinalizerError<E> {
        FinalizerError::Invalid {
            finalizer: self.name.clone(),
            object,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_secs(300);

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn answers(list: &[(&str, Answer)]) -> Vec<(String, Answer)> {
        list.iter()
            .map(|(name, answer)| ((*name).to_owned(), answer.clone()))
            .collect()
    }

    #[test]
    fn done_when_every_plugin_continued_had_no_hook_or_is_fail_open() {
        let all = answers(&[("a", Answer::Continue), ("b", Answer::NoHook), ("c", Answer::Skipped)]);
        assert_eq!(decide(all.clone(), Some(at(0)), DEADLINE, at(10)), CleanupOutcome::Done);
        // After the deadline too: done is done, not abandoned.
        assert_eq!(decide(all, Some(at(0)), DEADLINE, at(1_000)), CleanupOutcome::Done);
        assert_eq!(decide(Vec::new(), Some(at(0)), DEADLINE, at(0)), CleanupOutcome::Done);
    }

    #[test]
    fn pending_names_each_plugin_that_did_not_answer_and_why_before_the_deadline() {
        let outcome = decide(
            answers(&[
                ("a", Answer::Requeue(Duration::from_secs(30))),
                ("b", Answer::Continue),
                ("c", Answer::Failed("unavailable: plugin c is not registered".into())),
                ("d", Answer::Terminate),
            ]),
            Some(at(0)),
            DEADLINE,
            at(60),
        );
        let CleanupOutcome::Pending { plugins, retry_after } = &outcome else {
            panic!("{outcome:?}");
        };
        let named: Vec<String> = plugins.iter().map(ToString::to_string).collect();
        assert_eq!(
            named,
            [
                "a: asked to be called again in 30 s (REQUEUE)",
                "c: unavailable: plugin c is not registered",
                "d: stopped its cleanup (TERMINATE)"
            ]
        );
        // The soonest: the failures' default retry, before a's 30 s.
        assert_eq!(*retry_after, CLEANUP_RETRY);
        assert!(!outcome.finished());
        assert!(outcome.abandoned_event(DEADLINE).is_none());
    }

    #[test]
    fn a_plugins_requeue_delay_is_kept_and_never_goes_past_the_deadline() {
        let requeue = |after| answers(&[("a", Answer::Requeue(Duration::from_secs(after)))]);
        let retry = |outcome: CleanupOutcome| match outcome {
            CleanupOutcome::Pending { retry_after, .. } => retry_after,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            retry(decide(requeue(3), Some(at(0)), DEADLINE, at(0))),
            Duration::from_secs(3)
        );
        // Zero: no delay said, the default.
        assert_eq!(retry(decide(requeue(0), Some(at(0)), DEADLINE, at(0))), CLEANUP_RETRY);
        // 100 s asked, 20 s left: asked again when the deadline comes.
        assert_eq!(
            retry(decide(requeue(100), Some(at(0)), DEADLINE, at(280))),
            Duration::from_secs(20)
        );
        // No deletionTimestamp: no deadline.
        assert_eq!(
            retry(decide(requeue(100), None, DEADLINE, at(10_000))),
            Duration::from_secs(100)
        );
    }

    #[test]
    fn abandoned_once_the_deadline_from_the_deletion_timestamp_passed() {
        let late = answers(&[("a", Answer::Requeue(Duration::from_secs(5))), ("b", Answer::Continue)]);
        assert!(matches!(
            decide(late.clone(), Some(at(0)), DEADLINE, at(299)),
            CleanupOutcome::Pending { .. }
        ));
        for now in [at(300), at(301), at(100_000)] {
            let outcome = decide(late.clone(), Some(at(0)), DEADLINE, now);
            assert_eq!(
                outcome,
                CleanupOutcome::Abandoned {
                    plugins: vec![NotCleanedUp {
                        plugin: "a".into(),
                        why: "asked to be called again in 5 s (REQUEUE)".into()
                    }]
                }
            );
            assert!(outcome.finished());
        }
        // A clock behind the deletion timestamp: not passed.
        assert!(matches!(
            decide(late, Some(at(100)), DEADLINE, at(0)),
            CleanupOutcome::Pending { .. }
        ));
    }

    #[test]
    fn the_abandoned_event_is_a_warning_naming_each_plugin_and_why() {
        let outcome = CleanupOutcome::Abandoned {
            plugins: vec![NotCleanedUp {
                plugin: "a.example.com".into(),
                why: "unavailable: plugin a.example.com is not ready".into(),
            }],
        };
        let event = outcome.abandoned_event(Duration::from_secs(120)).unwrap();
        assert_eq!(
            (event.type_, event.reason.as_str()),
            (EventType::Warning, ABANDONED_REASON)
        );
        let note = event.note.unwrap();
        assert!(
            note.contains("a.example.com: unavailable: plugin a.example.com is not ready") && note.contains("120 s"),
            "{note}"
        );
    }

    #[test]
    fn the_deletion_timestamp_is_read_from_the_resource() {
        let resource = serde_json::json!({"metadata": {"deletionTimestamp": "2023-11-14T22:13:20Z"}});
        assert_eq!(deletion_timestamp(&resource), Some(at(0)));
        assert_eq!(deletion_timestamp(&serde_json::json!({"metadata": {}})), None);
        assert_eq!(
            deletion_timestamp(&serde_json::json!({"metadata": {"deletionTimestamp": "yesterday"}})),
            None
        );
    }
}
