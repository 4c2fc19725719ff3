//! Building and rendering CNPG-I [`ValidationError`]s.
//!
//! `ValidateClusterCreate` and `ValidateClusterChange` answer with a list of
//! `ValidationError { path_components, value, message }`. An error about a
//! plugin parameter follows cnpg-i-machinery's convention
//! (`validation.BuildErrorForParameter`), so that CloudNativePG and
//! `cnpgi-operator` both place it on the right field:
//!
//! * `path_components` = `["spec", "plugins", "<index of the plugin in spec.plugins>", "<parameter name>"]`,
//! * `value` = the raw parameter string, as the user wrote it,
//! * `message` = why it is wrong.
//!
//! `cnpgi-operator` reports such an error on the field
//! `spec.plugins[<index>].parameters.<name>` ([`field_path`]); CloudNativePG
//! joins the components with dots (`spec.plugins.0.<name>`). Other shapes of
//! `path_components`, including an empty one, must be accepted by the caller
//! without crashing.
//!
//! The builders and [`describe`] keep at most 1 KiB of each value, message
//! and path component ([`cnpgi_core::echo::bounded`]), so that a huge bad
//! parameter is not echoed whole into an answer, a `grpc-message` or a log.
//!
//! ```
//! use cnpgi_pluginhelper::validation::{field_path, parameter_error};
//!
//! let err = parameter_error(0, "labels", "{", "expected a JSON object");
//! assert_eq!(err.path_components, ["spec", "plugins", "0", "labels"]);
//! assert_eq!(field_path(&err.path_components, None), "spec.plugins[0].parameters.labels");
//! ```

use cnpgi_core::echo::{bounded, bounded_string};
pub use cnpgi_proto::operator::v1::ValidationError;

/// A validation error about the parameter `parameter` of the plugin at
/// `plugin_index` in `spec.plugins`, with machinery's
/// `["spec", "plugins", "<index>", "<parameter>"]` path. Pass the raw
/// parameter string as `value` (empty when the parameter is missing).
///
/// ```
/// use cnpgi_pluginhelper::validation::parameter_error;
///
/// let err = parameter_error(2, "mode", "fastest", r#"must be one of: "fast", "safe""#);
/// assert_eq!(err.path_components, ["spec", "plugins", "2", "mode"]);
/// assert_eq!(err.value, "fastest");
/// ```
pub fn parameter_error(
    plugin_index: usize,
    parameter: &str,
    value: impl Into<String>,
    message: impl Into<String>,
) -> ValidationError {
    ValidationError {
        path_components: vec![
            "spec".to_owned(),
            "plugins".to_owned(),
            plugin_index.to_string(),
            bounded(parameter).into_owned(),
        ],
        value: bounded_string(value),
        message: bounded_string(message),
    }
}

/// A validation error with arbitrary path components.
///
/// ```
/// use cnpgi_pluginhelper::validation::{error, field_path};
///
/// let err = error(["spec", "instances"], "0", "at least one instance is needed");
/// assert_eq!(field_path(&err.path_components, None), "spec.instances");
/// ```
pub fn error<I, S>(path_components: I, value: impl Into<String>, message: impl Into<String>) -> ValidationError
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    ValidationError {
        path_components: path_components.into_iter().map(bounded_string).collect(),
        value: bounded_string(value),
        message: bounded_string(message),
    }
}

/// Renders `path_components` as a Cluster field path, given the index of the
/// plugin that reported it when known (the convention shared with the
/// operator): see [`cnpgi_core::path::field_path`].
pub use cnpgi_core::path::field_path;

/// One line per error: `<field path>: <message> (value "<value>")`, the value
/// part left out when it is empty.
///
/// ```
/// use cnpgi_pluginhelper::validation::{describe, parameter_error};
///
/// let errors = [parameter_error(0, "mode", "x", "must be one of: \"fast\", \"safe\"")];
/// assert_eq!(
///     describe(&errors),
///     r#"spec.plugins[0].parameters.mode: must be one of: "fast", "safe" (value "x")"#,
/// );
/// ```
pub fn describe(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(|err| {
            let path = field_path(&err.path_components, None);
            let (path, message) = (bounded(&path), bounded(&err.message));
            if err.value.is_empty() {
                format!("{path}: {message}")
            } else {
                format!("{path}: {message} (value {:?})", bounded(&err.value))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A `tonic::Status` with code `InvalidArgument` listing `errors` (see
/// [`describe`]), for RPCs that have no `validation_errors` field, such as
/// `MutateCluster` or a lifecycle hook that finds bad parameters.
///
/// ```
/// use cnpgi_pluginhelper::validation::{parameter_error, to_status};
///
/// let status = to_status(&[parameter_error(1, "replicas", "0", "must be at least 1")]);
/// assert_eq!(status.code(), tonic::Code::InvalidArgument);
/// assert!(status.message().contains("spec.plugins[1].parameters.replicas: must be at least 1"));
/// ```
pub fn to_status(errors: &[ValidationError]) -> tonic::Status {
    tonic::Status::invalid_argument(format!("invalid plugin configuration:\n{}", describe(errors)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(components: &[&str]) -> Vec<String> {
        components.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parameter_error_uses_the_convention() {
        let err = parameter_error(7, "labels", "{", "bad JSON");
        assert_eq!(
            err,
            ValidationError {
                path_components: strings(&["spec", "plugins", "7", "labels"]),
                value: "{".to_owned(),
                message: "bad JSON".to_owned(),
            }
        );
    }

    #[test]
    fn error_accepts_any_components() {
        let err = error(vec!["spec".to_owned(), "instances".to_owned()], "", "m");
        assert_eq!(err.path_components, strings(&["spec", "instances"]));
        let err = error(Vec::<String>::new(), "v", "m");
        assert!(err.path_components.is_empty());
        assert_eq!(err.value, "v");
    }

    #[test]
    fn describe_and_status() {
        let errors = vec![
            parameter_error(0, "mode", "", "parameter is required"),
            parameter_error(0, "replicas", "0", "must be at least 1"),
            error(Vec::<String>::new(), "", "whole spec is wrong"),
        ];
        let text = describe(&errors);
        assert_eq!(
            text,
            "spec.plugins[0].parameters.mode: parameter is required\n\
             spec.plugins[0].parameters.replicas: must be at least 1 (value \"0\")\n\
             spec: whole spec is wrong"
        );
        let status = to_status(&errors);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), format!("invalid plugin configuration:\n{text}"));
        assert_eq!(describe(&[]), "");
    }

    /// Issue 13, point 5: a huge value, name or message is echoed bounded.
    #[test]
    fn huge_values_names_and_messages_are_echoed_bounded() {
        let huge = "x".repeat(3 * 1024 * 1024);
        let err = parameter_error(0, &huge, huge.clone(), huge.clone());
        assert!(
            err.value.len() <= 1024 && err.message.len() <= 1024,
            "{}",
            err.value.len()
        );
        assert!(err.path_components.iter().all(|c| c.len() <= 1024));
        let err = error([huge.clone()], huge.clone(), huge.clone());
        assert!(err.value.len() <= 1024 && err.message.len() <= 1024 && err.path_components[0].len() <= 1024);
        // Errors built by hand are bounded when described.
        let by_hand = ValidationError {
            path_components: vec![huge.clone()],
            value: huge.clone(),
            message: huge.clone(),
        };
        let status = to_status(&[err, by_hand]);
        assert!(status.message().len() < 8 * 1024, "{}", status.message().len());
        assert!(status.message().contains("bytes in all"));
    }
}
