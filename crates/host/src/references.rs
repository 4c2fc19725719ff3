//! References from a resource to other objects of its namespace: fetched,
//! sent to the plugins with the resource, watched, and reported on.
//!
//! A layout lists them ([`PluginLayout::references`]: `apiVersion`, `kind`,
//! `name`). Then:
//!
//! * **Fetched.** [`ReferenceResolver::resolve`] reads each object (one GET
//!   each, with a deadline); [`crate::Host::routed_with_references`] attaches
//!   them to the routed resource. A missing object (not found, forbidden, an
//!   unknown kind) is not an error of the call: it travels as a reference with
//!   an `error` and no `object`, and [`crate::Host::plugin_status`] writes the
//!   condition `ReferencesResolved` (`False`, reason `ReferenceNotFound`,
//!   naming the field and the object) into the resource's
//!   `status.conditions` ([`references_condition`]).
//! * **Sent.** In every call, inside the resource JSON CNPG-I already
//!   carries, under the top-level key `cnpgi.io/references`
//!   ([`REFERENCES_KEY`]; the format is [`cnpgi_core::references`], which the
//!   SDK re-exports with a typed reader, [`references_of`]). No CNPG-I
//!   message changes.
//! * **Watched.** [`referencing`] maps a changed object to the resources
//!   that reference it, for kube-rs' `Controller::watches_with`: a resource is
//!   reconciled again when an object it references changes.
//! * **Reported on.** A plugin's `SetStatusInCluster` answer may carry,
//!   under the same key, a [`ReferenceReport`] per object;
//!   [`crate::Host::plugin_status_and_reports`] takes them out of the
//!   plugin's entry and [`ReferenceResolver::write_reports`] merges each into
//!   its object's status, at `status.cnpgiReports.<plugin name>` (objects
//!   with a status subresource: custom resources).
//!
//! The kind's plural is kube's heuristic ([`ApiResource::from_gvk`], no
//! discovery call): a kind it pluralises wrongly shows as not found, with the
//! path tried.

use std::time::Duration;

use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    runtime::reflector::{ObjectRef, Store},
};
use serde_json::{Value, json};

pub use cnpgi_core::references::{
    ObjectReference, REFERENCES_KEY, ReferenceReport, ResolvedReference, references_of, split_reports,
};

use crate::routing::PluginLayout;

/// The condition type [`references_condition`] writes.
pub const REFERENCES_CONDITION: &str = "ReferencesResolved";

/// Reads referenced objects, and writes plugins' reports into them.
#[derive(Clone)]
pub struct ReferenceResolver {
    client: Client,
    /// The deadline of each read or write. Default 10 s.
    pub timeout: Duration,
}

impl std::fmt::Debug for ReferenceResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceResolver")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ReferenceResolver {
    /// A resolver using `client` (which needs `get` on the referenced kinds,
    /// and `patch` on their `status` for reports).
    pub fn new(client: Client) -> Self {
        Self {
            client,
            timeout: Duration::from_secs(10),
        }
    }

    fn api(&self, namespace: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }

    /// Each of `references` in `namespace`: the object, or why not.
    pub async fn resolve(&self, namespace: &str, references: &[ObjectReference]) -> Vec<ResolvedReference> {
        let mut resolved = Vec::with_capacity(references.len());
        for reference in references {
            let api = self.api(namespace, &reference.api_version, &reference.kind);
            let what = format!("{} {namespace}/{}", reference.kind, reference.name);
            let read = tokio::time::timeout(self.timeout, api.get_opt(&reference.name)).await;
            resolved.push(match read {
                Ok(Ok(Some(object))) => match serde_json::to_value(object) {
                    Ok(object) => ResolvedReference::found(reference.clone(), object),
                    Err(error) => ResolvedReference::missing(reference.clone(), format!("{what}: {error}")),
                },
                Ok(Ok(None)) => ResolvedReference::missing(
                    reference.clone(),
                    format!("{what} ({}) not found", reference.api_version),
                ),
                Ok(Err(error)) => ResolvedReference::missing(reference.clone(), format!("{what}: {error}")),
                Err(_) => ResolvedReference::missing(
                    reference.clone(),
                    format!(
                        "{what}: no answer from the API server within {} s",
                        self.timeout.as_secs()
                    ),
                ),
            });
        }
        resolved
    }

    /// Merges each report of `plugin` into its object's status, at
    /// `status.cnpgiReports.<plugin>`; returns the failures, each naming the
    /// object and why.
    pub async fn write_reports(&self, namespace: &str, plugin: &str, reports: &[ReferenceReport]) -> Vec<String> {
        let mut failures = Vec::new();
        for report in reports {
            let api = self.api(namespace, &report.api_version, &report.kind);
            let patch = json!({"status": {"cnpgiReports": {plugin: report.status}}});
            let written = tokio::time::timeout(
                self.timeout,
                api.patch_status(&report.name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await;
            let failure = match written {
                Ok(Ok(_)) => continue,
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {} s", self.timeout.as_secs()),
            };
            failures.push(format!(
                "cannot write plugin {plugin}'s report into the status of {} {namespace}/{}: {failure}",
                report.kind, report.name
            ));
        }
        failures
    }
}

/// The `ReferencesResolved` condition for `references`: `True` when every
/// object was read, else `False` with reason `ReferenceNotFound` and, for
/// each missing one, its field and why.
pub fn references_condition(references: &[ResolvedReference]) -> Value {
    let missing: Vec<String> = references
        .iter()
        .filter_map(|reference| {
            let error = reference.error.as_ref()?;
            Some(format!("{}: {error}", reference.field))
        })
        .collect();
    if missing.is_empty() {
        json!({"type": REFERENCES_CONDITION, "status": "True", "reason": "Resolved",
               "message": format!("{} referenced object(s) read", references.len())})
    } else {
        json!({"type": REFERENCES_CONDITION, "status": "False", "reason": "ReferenceNotFound",
               "message": cnpgi_core::echo::bounded_string(missing.join("; "))})
    }
}

/// Puts `condition` into `status.conditions` (replacing the one of its
/// type), keeping `lastTransitionTime` when its `status` did not change.
pub fn set_condition(status: &mut Value, mut condition: Value) {
    let Some(fields) = status.as_object_mut() else { return };
    let conditions = fields.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else { return };
    let previous = list.iter().position(|c| c["type"] == condition["type"]);
    let since = match previous.map(|i| &list[i]) {
        Some(previous) if previous["status"] == condition["status"] => previous["lastTransitionTime"].clone(),
        _ => Value::from(k8s_openapi::jiff::Timestamp::now().to_string()),
    };
    condition["lastTransitionTime"] = since;
    match previous {
        Some(i) => list[i] = condition,
        None => list.push(condition),
    }
}

/// The resources in `store` that reference `object` (same namespace,
/// `apiVersion`, `kind` and name), as `layout` reads their references: the
/// mapper for kube-rs' `Controller::watches_with`, so that a change of a
/// referenced object reconciles the resources referencing it.
pub fn referencing<K>(store: &Store<K>, layout: &dyn PluginLayout, object: &DynamicObject) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize + Clone + 'static,
{
    let (Some(types), Some(namespace)) = (&object.types, object.namespace()) else {
        return Vec::new();
    };
    let name = object.name_any();
    store
        .state()
        .iter()
        .filter(|resource| resource.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|resource| {
            serde_json::to_value(&***resource).is_ok_and(|value| {
                layout.references(&value).iter().any(|reference| {
                    reference.name == name && reference.kind == types.kind && reference.api_version == types.api_version
                })
            })
        })
        .map(|resource| ObjectRef::from_obj(&**resource))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: name.into(),
            field: "spec.settingsRef".into(),
        }
    }

    #[test]
    fn a_missing_reference_is_a_false_condition_naming_the_field() {
        let ok = references_condition(&[ResolvedReference::found(reference("a"), json!({}))]);
        assert_eq!((&ok["status"], &ok["reason"]), (&json!("True"), &json!("Resolved")));
        let missing = references_condition(&[ResolvedReference::missing(
            reference("b"),
            "ConfigMap default/b (v1) not found",
        )]);
        assert_eq!(
            (&missing["status"], &missing["reason"]),
            (&json!("False"), &json!("ReferenceNotFound"))
        );
        assert_eq!(
            missing["message"],
            "spec.settingsRef: ConfigMap default/b (v1) not found"
        );
    }

    #[test]
    fn conditions_are_replaced_by_type_and_keep_their_transition_time() {
        let mut status = json!({"conditions": [{"type": "Other", "status": "True"}]});
        set_condition(&mut status, json!({"type": REFERENCES_CONDITION, "status": "False"}));
        let first = status["conditions"][1]["lastTransitionTime"].clone();
        assert!(first.is_string());
        set_condition(
            &mut status,
            json!({"type": REFERENCES_CONDITION, "status": "False", "message": "m"}),
        );
        assert_eq!(status["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(status["conditions"][1]["lastTransitionTime"], first);
        assert_eq!(status["conditions"][1]["message"], "m");
        let mut none = json!(null);
        set_condition(&mut none, json!({"type": REFERENCES_CONDITION}));
        assert_eq!(none, json!(null));
    }
}
