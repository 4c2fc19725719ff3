//! References from a resource to other objects, and how they travel to
//! plugins on the CNPG-I wire.
//!
//! A layout says where a resource lists references to other objects of its
//! namespace ([`crate::layout::PluginLayout::references`]): `apiVersion`,
//! `kind`, `name`. A host fetches them and sends them with the resource in
//! **every** call, inside the resource JSON CNPG-I already carries
//! (`definition`, `cluster_definition`, `cluster`...), under the top-level
//! key [`REFERENCES_KEY`] (`"cnpgi.io/references"`): a list of
//! [`ResolvedReference`], each with the object as the host read it, or why
//! it could not. No CNPG-I message changes: a plugin that does not know
//! the key ignores it, as Go's `encoding/json` ignores unknown fields, and a
//! plugin on the SDK reads them with [`references_of`].
//!
//! ```
//! use cnpgi_core::references::{REFERENCES_KEY, references_of};
//!
//! let definition = serde_json::json!({
//!     "kind": "DatabaseTable",
//!     "spec": {"server": {"secretRef": {"apiVersion": "v1", "kind": "Secret", "name": "db"}}},
//!     REFERENCES_KEY: [{
//!         "apiVersion": "v1", "kind": "Secret", "name": "db", "field": "spec.server.secretRef",
//!         "object": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "data": {}}
//!     }],
//! });
//! let references = references_of(&definition);
//! assert_eq!(references[0].name, "db");
//! assert!(references[0].object.is_some() && references[0].error.is_none());
//! ```
//!
//! A plugin reports something about a referenced object in its
//! `SetStatusInCluster` answer, under the same key: a list of
//! [`ReferenceReport`] (`apiVersion`, `kind`, `name`, `status`); the host
//! writes each `status` into that object's status, under
//! `status.cnpgiReports.<plugin name>`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The top-level key of the resource JSON under which references travel
/// to plugins, and under which a plugin's status answer reports on them.
pub const REFERENCES_KEY: &str = "cnpgi.io/references";

/// A reference from a resource to an object of its namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// The object's `apiVersion`, e.g. `v1` or `apps/v1`.
    pub api_version: String,
    /// Its kind, e.g. `Secret`.
    pub kind: String,
    /// Its name, in the resource's namespace.
    pub name: String,
    /// Where the resource names it, e.g. `spec.server.secretRef` (for
    /// messages and conditions).
    pub field: String,
}

/// A reference as sent to plugins: the object, or why it is not there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedReference {
    /// The object's `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Where the resource names it.
    pub field: String,
    /// The object as the host read it; `None` when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// Why the object is not there (not found, forbidden, unknown kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ResolvedReference {
    /// The reference found: `object`.
    pub fn found(reference: ObjectReference, object: Value) -> Self {
        Self::new(reference, Some(object), None)
    }

    /// The reference not found, and why.
    pub fn missing(reference: ObjectReference, error: impl Into<String>) -> Self {
        Self::new(reference, None, Some(error.into()))
    }

    fn new(reference: ObjectReference, object: Option<Value>, error: Option<String>) -> Self {
        Self {
            api_version: reference.api_version,
            kind: reference.kind,
            name: reference.name,
            field: reference.field,
            object,
            error,
        }
    }
}

/// What a plugin reports about a referenced object, in its status answer
/// under [`REFERENCES_KEY`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceReport {
    /// The object's `apiVersion`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// What to write into its status (`status.cnpgiReports.<plugin>`).
    pub status: Value,
}

/// The references a resource JSON carries (what a plugin is sent); none
/// when it carries none or they do not decode.
pub fn references_of(resource: &Value) -> Vec<ResolvedReference> {
    resource
        .get(REFERENCES_KEY)
        .and_then(|references| serde_json::from_value(references.clone()).ok())
        .unwrap_or_default()
}

/// `resource` with `references` under [`REFERENCES_KEY`] (replacing any
/// there); a resource that is not a JSON object is left as it is.
pub fn with_references(resource: &Value, references: &[ResolvedReference]) -> Value {
    let mut carried = resource.clone();
    if let Some(fields) = carried.as_object_mut() {
        fields.insert(
            REFERENCES_KEY.to_owned(),
            serde_json::to_value(references).unwrap_or_default(),
        );
    }
    carried
}

/// The reports a plugin's status answer carries under [`REFERENCES_KEY`],
/// and the status without them (what stays the plugin's own entry).
pub fn split_reports(status: &Value) -> (Value, Vec<ReferenceReport>) {
    let mut own = status.clone();
    let reports = own
        .as_object_mut()
        .and_then(|fields| fields.remove(REFERENCES_KEY))
        .and_then(|reports| serde_json::from_value(reports).ok())
        .unwrap_or_default();
    (own, reports)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn secret() -> ObjectReference {
        ObjectReference {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "db".into(),
            field: "spec.secretRef".into(),
        }
    }

    #[test]
    fn references_travel_under_their_key_and_come_back_typed() {
        let resource = json!({"spec": {"a": 1}});
        let carried = with_references(
            &resource,
            &[
                ResolvedReference::found(secret(), json!({"data": {}})),
                ResolvedReference::missing(secret(), "not found"),
            ],
        );
        assert_eq!(carried["spec"], resource["spec"]);
        assert_eq!(carried[REFERENCES_KEY][1]["error"], "not found");
        assert!(carried[REFERENCES_KEY][1].get("object").is_none());
        let back = references_of(&carried);
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].object, Some(json!({"data": {}})));
        assert!(references_of(&resource).is_empty());
        assert_eq!(with_references(&json!([1]), &[]), json!([1]));
    }

    #[test]
    fn reports_are_split_from_the_plugins_own_status() {
        let status = json!({"lastSync": "x", REFERENCES_KEY: [
            {"apiVersion": "v1", "kind": "Secret", "name": "db", "status": {"usedBy": "t"}}]});
        let (own, reports) = split_reports(&status);
        assert_eq!(own, json!({"lastSync": "x"}));
        assert_eq!(reports[0].status, json!({"usedBy": "t"}));
        assert_eq!(split_reports(&json!({"a": 1})), (json!({"a": 1}), Vec::new()));
    }
}
