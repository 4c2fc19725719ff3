//! One implementation among several: which plugin a resource is routed to
//! when the one it prefers is not there.
//!
//! A layout says so with
//! [`PluginLayout::implementation_choice`](crate::routing::PluginLayout::implementation_choice):
//! the plugin the resource names (at [`ImplementationChoice::preferred_pointer`])
//! is its *preferred* implementation of a kind
//! ([`ImplementationChoice::kind`]); plugins say which kinds they implement in
//! their metadata manifest, under [`IMPLEMENTS_MANIFEST_KEY`] (a map already
//! on the CNPG-I wire: `cnpgi.io/implements: tables.example.cnpgi.io`).
//!
//! # The rule, in order
//!
//! 1. **Sticky.** If the resource's status records a choice of a plugin
//!    (`status.<status_field>`, written by [`crate::Host::plugin_status`])
//!    made for the same preferred plugin and the same
//!    [`RESELECT_ANNOTATION`] value, that plugin stays chosen, **whether it
//!    is available now or not**. When it is not (stopped, not ready,
//!    forgotten after its registration expired), routing to it fails with
//!    its lookup error, [`ImplementationDecision::unavailable`] says why, and
//!    the resource is served again when it is back.
//! 2. **Preferred.** Else, if the preferred plugin is routable, or arriving
//!    (just discovered and not answered yet: at start, or during its
//!    rollout), it is chosen.
//! 3. **Fallback.** Else the first by name of the routable plugins that
//!    implement the kind is chosen.
//! 4. **None.** Else nothing is: routing goes to the preferred plugin and
//!    fails with its lookup error, which says why it is unavailable, and the
//!    recorded reason says that no implementation of the kind is ready. The
//!    choice is made again on the next reconcile.
//!
//! # No flapping, and no move by itself
//!
//! A resource stays with the implementation that serves it. The preferred
//! plugin appearing (or coming back) later does **not** move a resource
//! routed to a fallback back to it, and the chosen plugin going away does
//! **not** move the resource to another: switching implementations has a
//! cost (a table would be created on another database server, empty, while
//! its rows stay on the first), and a plugin that comes and goes would make
//! resources go back and forth. The choice is made again only when the
//! resource names another preferred plugin, or when it *asks again*: a new
//! value of its annotation [`RESELECT_ANNOTATION`] (any value: a date, a
//! counter). Each new choice is recorded with its reason and published as
//! an Event ([`publish_event`]).
//!
//! The status is written as a merge patch: the optional fields of a
//! decision are written as `null` when absent, so that a previous value
//! does not stay.

use kube::runtime::events::{Event, EventType, Recorder};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use cnpgi_core::layout::{IMPLEMENTS_MANIFEST_KEY, ImplementationChoice, implements};

use crate::registry::Registry;

/// The annotation a resource sets to a new value to have its implementation
/// chosen again (the sticky choice otherwise stays).
pub const RESELECT_ANNOTATION: &str = "cnpgi.io/reselect-implementation";

/// Why an implementation was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChoiceReason {
    /// The preferred implementation is ready (or arriving).
    PreferredReady,
    /// The preferred implementation is not available; another is chosen.
    PreferredUnavailable,
    /// Neither the preferred implementation nor any other is ready.
    NoImplementationReady,
}

/// A choice of implementation, as recorded in the resource's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImplementationDecision {
    /// The kind of implementation.
    pub kind: String,
    /// The plugin the resource prefers.
    pub preferred: String,
    /// The plugin routed to; `None` when no implementation is ready.
    /// (Optional fields are written as `null` when absent: the status is a
    /// merge patch.)
    #[serde(default)]
    pub chosen: Option<String>,
    /// Why, as a condition reason.
    pub reason: ChoiceReason,
    /// Why, in words (what was unavailable, what was available).
    pub message: String,
    /// The resource's [`RESELECT_ANNOTATION`] when the choice was made.
    #[serde(default)]
    pub reselect: Option<String>,
    /// Why the chosen plugin is not available now, when it is not: it stays
    /// chosen (the [module](self)'s rule 1), and the resource is not served
    /// until it is back or the resource asks again.
    #[serde(default)]
    pub unavailable: Option<String>,
}

impl ImplementationDecision {
    /// The decision recorded in `resource`'s status for `choice`, if any.
    pub fn recorded(choice: &ImplementationChoice, resource: &Value) -> Option<Self> {
        let recorded = resource.get("status")?.get(&choice.status_field)?;
        serde_json::from_value(recorded.clone()).ok()
    }

    /// Whether this decision routes elsewhere than `previous` (or there was
    /// none): what deserves an Event.
    pub fn changed_from(&self, previous: Option<&Self>) -> bool {
        previous.is_none_or(|previous| previous.chosen != self.chosen || previous.preferred != self.preferred)
    }

    /// The Event announcing this decision (`Normal` when the preferred
    /// implementation is chosen, `Warning` otherwise).
    pub fn event(&self) -> Event {
        Event {
            type_: match self.reason {
                ChoiceReason::PreferredReady => EventType::Normal,
                ChoiceReason::PreferredUnavailable | ChoiceReason::NoImplementationReady => EventType::Warning,
            },
            reason: format!("{:?}", self.reason),
            note: Some(cnpgi_core::echo::bounded_string(self.message.clone())),
            action: "ChooseImplementation".to_owned(),
            secondary: None,
        }
    }
}

/// Chooses the implementation `resource` is routed to, by the rule of the
/// [module](self); `None` when the resource names no preferred plugin.
pub fn decide(registry: &Registry, choice: &ImplementationChoice, resource: &Value) -> Option<ImplementationDecision> {
    let preferred = choice.preferred(resource)?.to_owned();
    let reselect = resource
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get(RESELECT_ANNOTATION))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let available =
        |name: &str| registry.get(name).is_ok() || registry.plugin(name).is_some_and(|plugin| plugin.is_arriving());
    if let Some(recorded) = ImplementationDecision::recorded(choice, resource)
        && recorded.preferred == preferred
        && recorded.kind == choice.kind
        && recorded.reselect == reselect
        && let Some(chosen) = recorded.chosen.clone()
    {
        let unavailable = (!available(&chosen)).then(|| {
            let why = match registry.get(&chosen) {
                Err(error) => error.to_string(),
                Ok(_) => "it stopped being ready".to_owned(),
            };
            format!(
                "{chosen}, the implementation serving this resource, is not available ({why}); it stays chosen, and \
                 the resource is served again when it is back (to choose again, change the annotation \
                 {RESELECT_ANNOTATION})"
            )
        });
        return Some(ImplementationDecision {
            unavailable,
            ..recorded
        });
    }
    let decision = |chosen: Option<String>, reason, message| ImplementationDecision {
        kind: choice.kind.clone(),
        preferred: preferred.clone(),
        chosen,
        reason,
        message,
        reselect: reselect.clone(),
        unavailable: None,
    };
    if available(&preferred) {
        return Some(decision(
            Some(preferred.clone()),
            ChoiceReason::PreferredReady,
            format!("the preferred implementation {preferred} is ready"),
        ));
    }
    let why = match registry.get(&preferred) {
        Err(error) => error.to_string(),
        Ok(_) => "it stopped being ready".to_owned(),
    };
    let ready: Vec<String> = registry
        .plugins()
        .iter()
        .filter(|plugin| plugin.name() != preferred)
        .filter_map(|plugin| registry.get(plugin.name()).ok())
        .filter(|routable| implements(&routable.info.metadata.manifest, &choice.kind))
        .map(|routable| routable.client.name().to_owned())
        .collect();
    Some(match ready.first() {
        Some(first) => decision(
            Some(first.clone()),
            ChoiceReason::PreferredUnavailable,
            format!(
                "the preferred implementation {preferred} is not available ({why}); chose {first}, the first by name of \
                 the ready implementations of {} ({}); it stays chosen when {preferred} comes back, unless the \
                 annotation {RESELECT_ANNOTATION} changes",
                choice.kind,
                ready.join(", ")
            ),
        ),
        None => decision(
            None,
            ChoiceReason::NoImplementationReady,
            format!(
                "the preferred implementation {preferred} is not available ({why}), and no other plugin implementing \
                 {} is ready (a plugin says it implements it with {IMPLEMENTS_MANIFEST_KEY}: {} in its metadata manifest)",
                choice.kind, choice.kind
            ),
        ),
    })
}

/// How long [`publish_event`] waits for the API server.
pub const EVENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Publishes `decision`'s Event about the object `reference` with
/// `recorder`, when it routes elsewhere than `previous` (the decision the
/// resource's status recorded before, [`ImplementationDecision::recorded`]);
/// returns whether it published. The API server has [`EVENT_TIMEOUT`] to
/// answer; past it, the error says so (`kube::Error::Service`).
pub async fn publish_event(
    recorder: &Recorder,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    previous: Option<&ImplementationDecision>,
    decision: &ImplementationDecision,
) -> Result<bool, kube::Error> {
    if !decision.changed_from(previous) {
        return Ok(false);
    }
    publish_within_deadline(recorder, &decision.event(), reference, "the implementation choice").await?;
    Ok(true)
}

/// Publishes `event` about `reference` with `recorder`, the API server
/// having [`EVENT_TIMEOUT`] to take it; past it, the error says so
/// (`kube::Error::Service`, naming `about`). Every Event the host publishes
/// goes through here.
pub(crate) async fn publish_within_deadline(
    recorder: &Recorder,
    event: &Event,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    about: &str,
) -> Result<(), kube::Error> {
    match tokio::time::timeout(EVENT_TIMEOUT, recorder.publish(event, reference)).await {
        Ok(published) => published,
        Err(_) => Err(kube::Error::Service(
            format!(
                "the API server did not take the Event about {about} within {} s",
                EVENT_TIMEOUT.as_secs()
            )
            .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn decisions_round_trip_through_the_status() {
        let choice = ImplementationChoice::new("tables.example.com", "/spec/implementation");
        let decision = ImplementationDecision {
            kind: "tables.example.com".into(),
            preferred: "a.example.com".into(),
            chosen: Some("b.example.com".into()),
            reason: ChoiceReason::PreferredUnavailable,
            message: "m".into(),
            reselect: None,
            unavailable: None,
        };
        let resource = json!({"status": {"implementationChoice": decision}});
        assert_eq!(
            resource["status"]["implementationChoice"]["reason"],
            "PreferredUnavailable"
        );
        // Absent optional fields are written as null: a merge patch removes them.
        assert_eq!(resource["status"]["implementationChoice"]["reselect"], Value::Null);
        assert!(resource["status"]["implementationChoice"].get("unavailable").is_some());
        assert_eq!(
            ImplementationDecision::recorded(&choice, &resource),
            Some(decision.clone())
        );
        assert!(decision.changed_from(None));
        assert!(!decision.changed_from(Some(&decision)));
        let event = decision.event();
        assert_eq!(
            (event.type_, event.reason.as_str()),
            (EventType::Warning, "PreferredUnavailable")
        );
    }

    #[test]
    fn no_preferred_plugin_no_decision() {
        let choice = ImplementationChoice::new("tables.example.com", "/spec/implementation");
        assert_eq!(decide(&Registry::default(), &choice, &json!({"spec": {}})), None);
        // Named, nothing registered: no implementation, and the message says how one declares itself.
        let decision = decide(
            &Registry::default(),
            &choice,
            &json!({"spec": {"implementation": "a.example.com"}}),
        )
        .unwrap();
        assert_eq!(
            (decision.chosen, decision.reason),
            (None, ChoiceReason::NoImplementationReady)
        );
        assert!(
            decision.message.contains("cnpgi.io/implements: tables.example.com"),
            "{}",
            decision.message
        );
    }
}
