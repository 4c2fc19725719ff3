//! Field paths of the Cluster, as validation errors locate them.
//!
//! A `ValidationError` carries `path_components`; [`field_path`] renders
//! them as the Cluster field a user wrote, with cnpg-i-machinery's
//! convention for plugin parameters
//! (`["spec", "plugins", "<index>", "<parameter>"]` →
//! `spec.plugins[<index>].parameters.<parameter>`). Plugins build such
//! errors (the SDK's `validation` module), the operator renders them in
//! webhook denials and `render`, and the conformance suite checks them.
//!
//! ```
//! use cnpgi_core::path::field_path;
//!
//! let components = ["spec", "plugins", "0", "labels"].map(String::from);
//! assert_eq!(field_path(&components, None), "spec.plugins[0].parameters.labels");
//! ```

/// Renders a `ValidationError`'s `path_components` as a field path of the
/// Cluster, for messages.
///
/// # The CNPG-I convention for plugin parameters
///
/// An error about a plugin parameter is built the way cnpg-i-machinery's
/// `validation.BuildErrorForParameter` builds it, which is what Go plugins
/// send:
///
/// * `path_components` = `["spec", "plugins", "<index in spec.plugins>", "<parameter name>"]`,
///   or `["spec", "plugins", "<parameter name>"]` when the plugin is not in
///   `spec.plugins` (machinery's index `-1`);
/// * `value` = the raw parameter string;
/// * `message` = what is wrong.
///
/// CloudNativePG shows the components joined by dots
/// (`spec.plugins.0.labels`); this project reports the field the user wrote,
/// `spec.plugins[0].parameters.labels`.
///
/// # Rendering
///
/// * `["spec", "plugins", "<i>", "<name>", rest...]` → `spec.plugins[<i>].parameters.<name>` then `.<rest>`;
/// * `["spec", "plugins", "<name>", rest...]` → the same with the index of the
///   plugin that reported the error (`plugin_index`), when known;
/// * `["<i>", "<name>", rest...]` (an older short form, still accepted) → `spec.plugins[<i>].parameters.<name>`;
/// * `[]` → `spec` (the error is about the Cluster spec as a whole);
/// * any other path → its components joined with `.`, numeric ones rendered
///   as an index: `["spec", "foo", "2", "bar"]` → `spec.foo[2].bar`.
///
/// Never panics, whatever the input.
///
/// ```
/// use cnpgi_core::path::field_path;
///
/// let path = |c: &[&str], index| field_path(&c.iter().map(|s| s.to_string()).collect::<Vec<_>>(), index);
/// assert_eq!(path(&["spec", "plugins", "0", "labels"], None), "spec.plugins[0].parameters.labels");
/// assert_eq!(path(&["spec", "plugins", "labels"], Some(2)), "spec.plugins[2].parameters.labels");
/// assert_eq!(path(&["0", "labels"], None), "spec.plugins[0].parameters.labels");
/// assert_eq!(path(&[], None), "spec");
/// assert_eq!(path(&["spec", "foo", "2", "bar"], Some(0)), "spec.foo[2].bar");
/// ```
pub fn field_path(path_components: &[String], plugin_index: Option<usize>) -> String {
    let is = |component: &String, text: &str| component == text;
    match path_components {
        [] => "spec".to_owned(),
        [spec, plugins, index, name, rest @ ..] if is(spec, "spec") && is(plugins, "plugins") && is_index(index) => {
            parameter_path(index, name, rest)
        }
        [spec, plugins, name, rest @ ..] if is(spec, "spec") && is(plugins, "plugins") && !is_index(name) => {
            match plugin_index {
                Some(index) => parameter_path(&index.to_string(), name, rest),
                None => joined(path_components),
            }
        }
        [index, name, rest @ ..] if is_index(index) => parameter_path(index, name, rest),
        [index] if is_index(index) => format!("spec.plugins[{index}]"),
        _ => joined(path_components),
    }
}

/// `spec.plugins[<index>].parameters.<name>`, then `.<c>` for each of `rest`.
fn parameter_path(index: &str, name: &str, rest: &[String]) -> String {
    let mut out = format!("spec.plugins[{index}].parameters.{name}");
    for component in rest {
        out.push('.');
        out.push_str(component);
    }
    out
}

/// The components joined with `.`, numeric ones rendered as `[n]`: the
/// field path of a resource that is not a Cluster (its layout's own
/// convention, without `spec.plugins[]`).
///
/// ```
/// use cnpgi_core::path::joined;
///
/// assert_eq!(joined(&["spec".into(), "columns".into(), "1".into(), "type".into()]), "spec.columns[1].type");
/// ```
pub fn joined(components: &[String]) -> String {
    let mut out = String::new();
    for (i, component) in components.iter().enumerate() {
        if is_index(component) {
            out.push('[');
            out.push_str(component);
            out.push(']');
        } else {
            if i > 0 {
                out.push('.');
            }
            out.push_str(component);
        }
    }
    out
}

/// Whether a path component is an array index (non-empty, ASCII digits only).
fn is_index(component: &str) -> bool {
    !component.is_empty() && component.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::field_path;

    fn strings(components: &[&str]) -> Vec<String> {
        components.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn field_paths() {
        let cases: &[(&[&str], Option<usize>, &str)] = &[
            (&[], None, "spec"),
            // cnpg-i-machinery's BuildErrorForParameter, with and without an index.
            (
                &["spec", "plugins", "0", "labels"],
                None,
                "spec.plugins[0].parameters.labels",
            ),
            (
                &["spec", "plugins", "3", "a.b"],
                Some(1),
                "spec.plugins[3].parameters.a.b",
            ),
            (
                &["spec", "plugins", "labels"],
                Some(2),
                "spec.plugins[2].parameters.labels",
            ),
            (&["spec", "plugins", "labels"], None, "spec.plugins.labels"),
            (
                &["spec", "plugins", "1", "labels", "x"],
                None,
                "spec.plugins[1].parameters.labels.x",
            ),
            (&["spec", "plugins", "1"], None, "spec.plugins[1]"),
            (&["spec", "plugins"], Some(0), "spec.plugins"),
            // The older short form.
            (&["0"], None, "spec.plugins[0]"),
            (&["0", "labels"], Some(5), "spec.plugins[0].parameters.labels"),
            (
                &["1", "labels", "extra"],
                None,
                "spec.plugins[1].parameters.labels.extra",
            ),
            // Anything else is a field path.
            (&["spec", "instances"], Some(0), "spec.instances"),
            (&["spec", "foo", "2", "bar"], None, "spec.foo[2].bar"),
            (&["metadata", "name"], None, "metadata.name"),
            (&["labels"], Some(0), "labels"),
            (&["-1", "x"], None, "-1.x"),
            (&["+1"], None, "+1"),
            (
                &["99999999999999999999999999", "x"],
                None,
                "spec.plugins[99999999999999999999999999].parameters.x",
            ),
        ];
        for (components, index, expected) in cases {
            assert_eq!(
                field_path(&strings(components), *index),
                *expected,
                "{components:?} {index:?}"
            );
        }
    }

    #[test]
    fn field_path_never_panics_on_odd_input() {
        for components in [
            strings(&[""]),
            strings(&["", ""]),
            strings(&["0", ""]),
            strings(&["spec", "plugins", ""]),
            strings(&["spec", "plugins", "", ""]),
            strings(&["é", "💥", "0"]),
            strings(&["[", "]", "."]),
        ] {
            let _ = field_path(&components, None);
            let _ = field_path(&components, Some(usize::MAX));
        }
        assert_eq!(field_path(&strings(&["", "0"]), None), "[0]");
    }
}
