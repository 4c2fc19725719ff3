//! Declared, typed plugin parameters.
//!
//! A plugin's configuration is the `parameters` map (string to string) of its
//! entry in `spec.plugins[]`. There are two ways to declare what a plugin
//! understands; both report **every** problem at once, as CNPG-I
//! [`ValidationError`]s with machinery's path
//! `["spec", "plugins", "<plugin index>", "<parameter>"]` and the raw value,
//! and both give the defaults that `MutateCluster` writes back:
//!
//! * a struct with `#[derive(Parameters)]` ([`Parameters`]): each field is a
//!   parameter, parsed into its type; this is what the declarative
//!   [`Plugin`](crate::plugin::Plugin) uses;
//! * a [`ParameterSchema`] built at run time: [`ParameterSchema::parse`] gives
//!   [`ParsedParameters`], read by name and type;
//!   [`ParameterSchema::with_defaults`] fills the defaults in.
//!
//! A parameter whose value is the empty string counts as missing.
//!
//! ```
//! use std::collections::BTreeMap;
//! use cnpgi_pluginhelper::parameters::{Parameter, ParameterSchema};
//! use serde_json::json;
//!
//! let schema = ParameterSchema::new()
//!     .with(Parameter::json::<BTreeMap<String, String>>("labels")
//!         .default_json(json!({"plugin-metadata": "default"})))
//!     .with(Parameter::string("mode").allowed(["fast", "safe"]).required())
//!     .with(Parameter::boolean("verbose").default("false"))
//!     .with(Parameter::integer("replicas").range(1..=10));
//!
//! let params = BTreeMap::from([("mode".to_owned(), "fast".to_owned())]);
//! let parsed = schema.parse(0, &params).expect("valid parameters");
//! let labels: BTreeMap<String, String> = parsed.json("labels")?;
//! assert_eq!(labels["plugin-metadata"], "default");
//! assert_eq!(parsed.string("mode")?, "fast");
//! assert!(!parsed.bool("verbose")?);
//! assert!(!parsed.is_set("replicas"));
//!
//! // Every problem is reported, each on its own parameter.
//! let bad = BTreeMap::from([
//!     ("replicas".to_owned(), "0".to_owned()),
//!     ("labels".to_owned(), "[1]".to_owned()),
//! ]);
//! let errors = schema.parse(3, &bad).unwrap_err();
//! let paths: Vec<_> = errors.iter().map(|e| e.path_components.join("/")).collect();
//! assert_eq!(paths, ["spec/plugins/3/labels", "spec/plugins/3/mode", "spec/plugins/3/replicas"]);
//!
//! // Defaults are written back only where a parameter is missing.
//! let defaulted = schema.with_defaults(&params);
//! assert_eq!(defaulted["verbose"], "false");
//! assert_eq!(defaulted["labels"], r#"{"plugin-metadata":"default"}"#);
//! # Ok::<(), cnpgi_pluginhelper::parameters::ParameterError>(())
//! ```

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use serde::de::DeserializeOwned;

use crate::validation::{ValidationError, parameter_error};

mod typed;
/// Derives [`Parameters`] for a struct; see the trait for the attributes.
pub use cnpgi_pluginhelper_derive::Parameters;
#[doc(hidden)]
pub use typed::Reader;
pub use typed::{ParameterInfo, ParameterValue, Parameters, from_json, from_str_value};

/// The type of a declared parameter.
#[derive(Clone, Copy, Debug)]
enum Kind {
    String,
    Boolean,
    Integer,
    Json {
        type_name: &'static str,
        validate: fn(&str) -> Result<(), String>,
    },
}

impl Kind {
    fn tag(self) -> Tag {
        match self {
            Kind::String => Tag::String,
            Kind::Boolean => Tag::Boolean,
            Kind::Integer => Tag::Integer,
            Kind::Json { .. } => Tag::Json,
        }
    }
}

/// A [`Kind`] without its data, to compare and name types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    String,
    Boolean,
    Integer,
    Json,
}

impl Tag {
    fn name(self) -> &'static str {
        match self {
            Tag::String => "a string",
            Tag::Boolean => "a boolean",
            Tag::Integer => "an integer",
            Tag::Json => "JSON",
        }
    }
}

fn validate_json<T: DeserializeOwned>(raw: &str) -> Result<(), String> {
    serde_json::from_str::<T>(raw)
        .map(drop)
        .map_err(|err| format!("invalid JSON value: {err}"))
}

/// Parses a boolean the way Go's `strconv.ParseBool` does, as upstream plugins
/// written in Go accept those spellings.
fn parse_bool(raw: &str) -> Option<bool> {
    match raw {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The declaration of one parameter: name, type, and constraints.
///
/// Build one with [`Parameter::string`], [`Parameter::boolean`],
/// [`Parameter::integer`] or [`Parameter::json`], then refine it.
///
/// ```
/// use cnpgi_pluginhelper::parameters::Parameter;
///
/// let mode = Parameter::string("mode").allowed(["fast", "safe"]).default("safe");
/// let replicas = Parameter::integer("replicas").range(1..).required();
/// # let _ = (mode, replicas);
/// ```
#[derive(Clone, Debug)]
pub struct Parameter {
    name: String,
    kind: Kind,
    required: bool,
    default: Option<String>,
    allowed: Vec<String>,
    range: (Bound<i64>, Bound<i64>),
}

impl Parameter {
    fn new(name: impl Into<String>, kind: Kind) -> Self {
        Self {
            name: name.into(),
            kind,
            required: false,
            default: None,
            allowed: Vec::new(),
            range: (Bound::Unbounded, Bound::Unbounded),
        }
    }

    /// A parameter taken as it is.
    pub fn string(name: impl Into<String>) -> Self {
        Self::new(name, Kind::String)
    }

    /// A boolean parameter: `true`/`false` (also `1`, `t`, `T`, `TRUE`,
    /// `True` and their false counterparts, as Go's `strconv.ParseBool`).
    pub fn boolean(name: impl Into<String>) -> Self {
        Self::new(name, Kind::Boolean)
    }

    /// A 64-bit signed integer parameter, in decimal.
    pub fn integer(name: impl Into<String>) -> Self {
        Self::new(name, Kind::Integer)
    }

    /// A parameter holding JSON that must deserialize into `T`; the error
    /// message of a bad value includes `serde_json`'s.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use cnpgi_pluginhelper::parameters::{Parameter, ParameterSchema};
    ///
    /// let schema = ParameterSchema::new()
    ///     .with(Parameter::json::<BTreeMap<String, String>>("labels"));
    /// let params = BTreeMap::from([("labels".to_owned(), r#"{"a":1}"#.to_owned())]);
    /// let errors = schema.parse(0, &params).unwrap_err();
    /// assert!(errors[0].message.contains("invalid type: integer `1`, expected a string"));
    /// ```
    pub fn json<T: DeserializeOwned>(name: impl Into<String>) -> Self {
        Self::new(
            name,
            Kind::Json {
                type_name: std::any::type_name::<T>(),
                validate: validate_json::<T>,
            },
        )
    }

    /// Makes the parameter required: a missing (or empty) value is a
    /// validation error, unless the parameter also has a default.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// The value used when the parameter is missing or empty, written as the
    /// parameter would be (`"false"`, `"3"`, `"safe"`). It is validated like
    /// any value when it is used.
    pub fn default(mut self, value: impl Into<String>) -> Self {
        self.default = Some(value.into());
        self
    }

    /// [`Parameter::default`] for a JSON parameter: the value is stored
    /// serialized (compact).
    pub fn default_json(mut self, value: serde_json::Value) -> Self {
        self.default = Some(value.to_string());
        self
    }

    /// Restricts the value to one of `values` (compared as written).
    pub fn allowed<I, S>(mut self, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed = values.into_iter().map(Into::into).collect();
        self
    }

    /// Restricts an integer parameter to `range` (`1..=10`, `1..`, `..100`);
    /// no effect on other types.
    pub fn range(mut self, range: impl RangeBounds<i64>) -> Self {
        self.range = (range.start_bound().cloned(), range.end_bound().cloned());
        self
    }

    /// The parameter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks a (non-empty) value and returns its typed form.
    fn check(&self, raw: &str) -> Result<Typed, String> {
        let text = || raw.to_owned();
        if !self.allowed.is_empty() && !self.allowed.iter().any(|a| a == raw) {
            let allowed: Vec<String> = self.allowed.iter().map(|a| format!("{a:?}")).collect();
            return Err(format!("must be one of: {}", allowed.join(", ")));
        }
        match self.kind {
            Kind::String => Ok(Typed::Text(text())),
            Kind::Boolean => parse_bool(raw)
                .map(Typed::Bool)
                .ok_or_else(|| "expected a boolean: true or false".to_owned()),
            Kind::Integer => {
                let value: i64 = raw.parse().map_err(|err| format!("expected an integer: {err}"))?;
                if self.range.contains(&value) {
                    Ok(Typed::Integer(value))
                } else {
                    Err(self.range_message())
                }
            }
            Kind::Json { type_name, validate } => validate(raw).map(|()| Typed::Json { raw: text(), type_name }),
        }
    }

    fn range_message(&self) -> String {
        let lower = match self.range.0 {
            Bound::Included(n) => Some(format!("at least {n}")),
            Bound::Excluded(n) => Some(format!("greater than {n}")),
            Bound::Unbounded => None,
        };
        let upper = match self.range.1 {
            Bound::Included(n) => Some(format!("at most {n}")),
            Bound::Excluded(n) => Some(format!("less than {n}")),
            Bound::Unbounded => None,
        };
        match (lower, upper) {
            (Some(l), Some(u)) => format!("must be {l} and {u}"),
            (Some(b), None) | (None, Some(b)) => format!("must be {b}"),
            (None, None) => "out of range".to_owned(),
        }
    }
}

/// A valid value in its typed form; JSON keeps its text, deserialized on
/// demand into the type the caller asks for.
#[derive(Clone, Debug)]
enum Typed {
    Text(String),
    Bool(bool),
    Integer(i64),
    Json { raw: String, type_name: &'static str },
}

impl Typed {
    fn tag(&self) -> Tag {
        match self {
            Typed::Text(_) => Tag::String,
            Typed::Bool(_) => Tag::Boolean,
            Typed::Integer(_) => Tag::Integer,
            Typed::Json { .. } => Tag::Json,
        }
    }
}

/// The set of parameters a plugin understands.
///
/// Unknown parameters are allowed unless [`ParameterSchema::deny_unknown`] is
/// called. Parameters are checked in declaration order.
#[derive(Clone, Debug, Default)]
pub struct ParameterSchema {
    parameters: Vec<Parameter>,
    deny_unknown: bool,
}

impl ParameterSchema {
    /// An empty schema.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a parameter; a parameter of the same name declared before is
    /// replaced.
    pub fn with(mut self, parameter: Parameter) -> Self {
        if let Some(existing) = self.parameters.iter_mut().find(|p| p.name == parameter.name) {
            *existing = parameter;
        } else {
            self.parameters.push(parameter);
        }
        self
    }

    /// Makes parameters not declared in the schema validation errors.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use cnpgi_pluginhelper::parameters::{Parameter, ParameterSchema};
    ///
    /// let schema = ParameterSchema::new().with(Parameter::string("mode")).deny_unknown();
    /// let params = BTreeMap::from([("mdoe".to_owned(), "fast".to_owned())]);
    /// let errors = schema.parse(0, &params).unwrap_err();
    /// assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "mdoe"]);
    /// ```
    pub fn deny_unknown(mut self) -> Self {
        self.deny_unknown = true;
        self
    }

    /// The declared parameters, in declaration order.
    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    fn get(&self, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.name == name)
    }

    /// Checks `params`, the parameters of the plugin at `plugin_index` in
    /// `spec.plugins`, against the schema.
    ///
    /// Missing or empty parameters take their default; a required parameter
    /// without a default must be present.
    ///
    /// # Errors
    ///
    /// Every problem found, one [`ValidationError`] per bad parameter, with
    /// path `["spec", "plugins", "<plugin_index>", "<name>"]`, the value, and what is wrong:
    /// declared parameters first (declaration order), then unknown ones
    /// (name order) when [`ParameterSchema::deny_unknown`] is set.
    pub fn parse(
        &self,
        plugin_index: usize,
        params: &BTreeMap<String, String>,
    ) -> Result<ParsedParameters, Vec<ValidationError>> {
        let mut errors = Vec::new();
        let mut values = BTreeMap::new();
        for parameter in &self.parameters {
            let given = params
                .get(&parameter.name)
                .map(String::as_str)
                .filter(|v| !v.is_empty());
            let (raw, from_default) = match (given, parameter.default.as_deref()) {
                (Some(raw), _) => (raw, false),
                (None, Some(default)) => (default, true),
                (None, None) => {
                    if parameter.required {
                        errors.push(parameter_error(
                            plugin_index,
                            &parameter.name,
                            "",
                            "parameter is required",
                        ));
                    }
                    values.insert(
                        parameter.name.clone(),
                        Slot {
                            declared: parameter.kind.tag(),
                            value: None,
                        },
                    );
                    continue;
                }
            };
            match parameter.check(raw) {
                Ok(typed) => {
                    values.insert(
                        parameter.name.clone(),
                        Slot {
                            declared: parameter.kind.tag(),
                            value: Some(typed),
                        },
                    );
                }
                Err(message) => {
                    let message = if from_default {
                        format!("the plugin's default value is invalid: {message}")
                    } else {
                        message
                    };
                    errors.push(parameter_error(plugin_index, &parameter.name, raw, message));
                }
            }
        }
        if self.deny_unknown {
            let known: Vec<&str> = self.parameters.iter().map(|p| p.name.as_str()).collect();
            for (name, value) in params {
                if value.is_empty() || self.get(name).is_some() {
                    continue;
                }
                let message = if known.is_empty() {
                    "unknown parameter: this plugin takes no parameters".to_owned()
                } else {
                    format!("unknown parameter; known parameters: {}", known.join(", "))
                };
                errors.push(parameter_error(plugin_index, name, value.as_str(), message));
            }
        }
        if errors.is_empty() {
            Ok(ParsedParameters { values })
        } else {
            Err(errors)
        }
    }

    /// `params` with the default of every declared parameter that is missing
    /// or empty filled in. Parameters that are present are never changed, even
    /// when they are invalid, so that validation can still report them.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use cnpgi_pluginhelper::parameters::{Parameter, ParameterSchema};
    ///
    /// let schema = ParameterSchema::new()
    ///     .with(Parameter::boolean("verbose").default("false"))
    ///     .with(Parameter::integer("replicas").default("1"));
    /// let params = BTreeMap::from([("replicas".to_owned(), "many".to_owned())]);
    /// let filled = schema.with_defaults(&params);
    /// assert_eq!(filled["verbose"], "false");
    /// assert_eq!(filled["replicas"], "many");
    /// ```
    pub fn with_defaults(&self, params: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut out = params.clone();
        for parameter in &self.parameters {
            let Some(default) = &parameter.default else {
                continue;
            };
            if out.get(&parameter.name).is_none_or(String::is_empty) {
                out.insert(parameter.name.clone(), default.clone());
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
struct Slot {
    declared: Tag,
    /// The effective value (given or default); `None` for an optional
    /// parameter without default that is not set.
    value: Option<Typed>,
}

/// Valid parameters, as returned by [`ParameterSchema::parse`], read by name
/// and type.
///
/// Parameters declared `required()` or with a default are always set; an
/// optional parameter without default may not be ([`ParsedParameters::is_set`]).
#[derive(Clone, Debug)]
pub struct ParsedParameters {
    values: BTreeMap<String, Slot>,
}

/// A parameter was read in a way the schema does not allow.
///
/// These are mistakes in the plugin's code rather than in the user's Cluster,
/// so the conversion into [`tonic::Status`] gives `Internal`.
#[derive(Debug, thiserror::Error)]
pub enum ParameterError {
    /// The name is not declared in the schema.
    #[error("parameter {name:?} is not declared in the parameter schema")]
    NotDeclared {
        /// The parameter name.
        name: String,
    },
    /// The parameter is declared with another type.
    #[error("parameter {name:?} is declared as {declared}, not as {requested}")]
    WrongType {
        /// The parameter name.
        name: String,
        /// The declared type.
        declared: &'static str,
        /// The type that was asked for.
        requested: &'static str,
    },
    /// The parameter is optional, has no default, and is not set.
    #[error("parameter {name:?} is not set and has no default")]
    NotSet {
        /// The parameter name.
        name: String,
    },
    /// The JSON value does not deserialize into the requested type (which
    /// differs from the declared one, since the value was validated with it).
    #[error("parameter {name:?} cannot be read as {requested} (declared as {declared}): {source}")]
    Json {
        /// The parameter name.
        name: String,
        /// The type given to `Parameter::json`.
        declared: &'static str,
        /// The type asked for.
        requested: &'static str,
        /// The `serde_json` error.
        #[source]
        source: serde_json::Error,
    },
}

impl From<ParameterError> for tonic::Status {
    fn from(err: ParameterError) -> Self {
        tonic::Status::internal(cnpgi_core::echo::bounded_string(err.to_string()))
    }
}

impl ParsedParameters {
    /// The value of `name`, checked to be declared as `requested` and set.
    fn value(&self, name: &str, requested: Tag) -> Result<&Typed, ParameterError> {
        let slot = self
            .values
            .get(name)
            .ok_or_else(|| ParameterError::NotDeclared { name: name.to_owned() })?;
        let value = slot.value.as_ref();
        let declared = value.map_or(slot.declared, Typed::tag);
        if declared != requested {
            return Err(ParameterError::WrongType {
                name: name.to_owned(),
                declared: declared.name(),
                requested: requested.name(),
            });
        }
        value.ok_or_else(|| ParameterError::NotSet { name: name.to_owned() })
    }

    /// Whether the parameter has a value (given or default). `false` for a
    /// name not in the schema.
    pub fn is_set(&self, name: &str) -> bool {
        self.values.get(name).is_some_and(|s| s.value.is_some())
    }

    /// The value of a [`Parameter::string`].
    ///
    /// # Errors
    ///
    /// [`ParameterError`] if `name` is not declared, not a string parameter,
    /// or not set.
    pub fn string(&self, name: &str) -> Result<&str, ParameterError> {
        match self.value(name, Tag::String)? {
            Typed::Text(value) => Ok(value),
            other => Err(wrong_type(name, other, Tag::String)),
        }
    }

    /// The value of a [`Parameter::boolean`].
    ///
    /// # Errors
    ///
    /// [`ParameterError`] if `name` is not declared, not a boolean parameter,
    /// or not set.
    pub fn bool(&self, name: &str) -> Result<bool, ParameterError> {
        match self.value(name, Tag::Boolean)? {
            Typed::Bool(value) => Ok(*value),
            other => Err(wrong_type(name, other, Tag::Boolean)),
        }
    }

    /// The value of a [`Parameter::integer`].
    ///
    /// # Errors
    ///
    /// [`ParameterError`] if `name` is not declared, not an integer parameter,
    /// or not set.
    pub fn integer(&self, name: &str) -> Result<i64, ParameterError> {
        match self.value(name, Tag::Integer)? {
            Typed::Integer(value) => Ok(*value),
            other => Err(wrong_type(name, other, Tag::Integer)),
        }
    }

    /// The value of a [`Parameter::json`], deserialized into `T` (normally
    /// the type it was declared with).
    ///
    /// # Errors
    ///
    /// [`ParameterError`] if `name` is not declared, not a JSON parameter, not
    /// set, or its value does not deserialize into `T`.
    pub fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T, ParameterError> {
        match self.value(name, Tag::Json)? {
            Typed::Json { raw, type_name } => serde_json::from_str(raw).map_err(|source| ParameterError::Json {
                name: name.to_owned(),
                declared: type_name,
                requested: std::any::type_name::<T>(),
                source,
            }),
            other => Err(wrong_type(name, other, Tag::Json)),
        }
    }
}

/// `value` is not of the `requested` type (`ParsedParameters::value` has already
/// checked it is, so this is only a defensive fallback).
fn wrong_type(name: &str, value: &Typed, requested: Tag) -> ParameterError {
    ParameterError::WrongType {
        name: name.to_owned(),
        declared: value.tag().name(),
        requested: requested.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn schema() -> ParameterSchema {
        ParameterSchema::new()
            .with(
                Parameter::json::<BTreeMap<String, String>>("labels")
                    .default_json(json!({"plugin-metadata": "default"})),
            )
            .with(Parameter::string("mode").allowed(["fast", "safe"]).required())
            .with(Parameter::boolean("verbose").default("false"))
            .with(Parameter::integer("replicas").range(1..=10))
    }

    fn messages(errors: &[ValidationError]) -> Vec<(String, String, String)> {
        errors
            .iter()
            .map(|e| (e.path_components.join("/"), e.value.clone(), e.message.clone()))
            .collect()
    }

    #[test]
    fn valid_parameters_are_typed() {
        let parsed = schema()
            .parse(
                4,
                &params(&[
                    ("labels", r#"{"a":"b"}"#),
                    ("mode", "safe"),
                    ("verbose", "True"),
                    ("replicas", "10"),
                    ("unknown", "kept"),
                ]),
            )
            .unwrap();
        let labels: BTreeMap<String, String> = parsed.json("labels").unwrap();
        assert_eq!(labels, BTreeMap::from([("a".to_owned(), "b".to_owned())]));
        assert_eq!(parsed.string("mode").unwrap(), "safe");
        assert!(parsed.bool("verbose").unwrap());
        assert_eq!(parsed.integer("replicas").unwrap(), 10);
        assert!(parsed.is_set("replicas"));
        assert!(!parsed.is_set("unknown"));
    }

    #[test]
    fn defaults_apply_when_missing_or_empty() {
        for p in [
            params(&[("mode", "fast")]),
            params(&[("mode", "fast"), ("verbose", ""), ("labels", "")]),
        ] {
            let parsed = schema().parse(0, &p).unwrap();
            assert!(!parsed.bool("verbose").unwrap());
            let labels: serde_json::Value = parsed.json("labels").unwrap();
            assert_eq!(labels, json!({"plugin-metadata": "default"}));
            assert!(!parsed.is_set("replicas"));
            assert!(matches!(
                parsed.integer("replicas"),
                Err(ParameterError::NotSet { name }) if name == "replicas"
            ));
        }
    }

    #[test]
    fn all_errors_are_reported_at_once() {
        let errors = schema()
            .parse(
                2,
                &params(&[
                    ("labels", r#"{"a":1}"#),
                    ("mode", "fastest"),
                    ("verbose", "yes"),
                    ("replicas", "11"),
                ]),
            )
            .unwrap_err();
        let got = messages(&errors);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0].0, "spec/plugins/2/labels");
        assert_eq!(got[0].1, r#"{"a":1}"#);
        assert!(
            got[0]
                .2
                .starts_with("invalid JSON value: invalid type: integer `1`, expected a string"),
            "{}",
            got[0].2
        );
        assert_eq!(
            got[1],
            (
                "spec/plugins/2/mode".into(),
                "fastest".into(),
                r#"must be one of: "fast", "safe""#.into()
            )
        );
        assert_eq!(
            got[2],
            (
                "spec/plugins/2/verbose".into(),
                "yes".into(),
                "expected a boolean: true or false".into()
            )
        );
        assert_eq!(
            got[3],
            (
                "spec/plugins/2/replicas".into(),
                "11".into(),
                "must be at least 1 and at most 10".into()
            )
        );
    }

    #[test]
    fn required_parameter_missing_or_empty() {
        for p in [params(&[]), params(&[("mode", "")])] {
            let errors = schema().parse(1, &p).unwrap_err();
            assert_eq!(
                messages(&errors),
                vec![(
                    "spec/plugins/1/mode".to_owned(),
                    String::new(),
                    "parameter is required".to_owned()
                )]
            );
        }
        // A required parameter with a default is satisfied by the default.
        let schema = ParameterSchema::new().with(Parameter::string("m").required().default("x"));
        assert_eq!(schema.parse(0, &params(&[])).unwrap().string("m").unwrap(), "x");
    }

    #[test]
    fn integer_errors() {
        let schema = ParameterSchema::new()
            .with(Parameter::integer("a"))
            .with(Parameter::integer("b").range(1..))
            .with(Parameter::integer("c").range(..5))
            .with(Parameter::integer("d").range(0..=0));
        let errors = schema
            .parse(
                0,
                &params(&[("a", "1.5"), ("b", "0"), ("c", "5"), ("d", "99999999999999999999")]),
            )
            .unwrap_err();
        let got = messages(&errors);
        assert_eq!(got[0].2, "expected an integer: invalid digit found in string");
        assert_eq!(got[1].2, "must be at least 1");
        assert_eq!(got[2].2, "must be less than 5");
        assert_eq!(got[3].2, "expected an integer: number too large to fit in target type");
        let ok = schema
            .parse(0, &params(&[("a", "-7"), ("b", "1"), ("c", "4"), ("d", "0")]))
            .unwrap();
        assert_eq!(ok.integer("a").unwrap(), -7);
        assert_eq!(ok.integer("d").unwrap(), 0);
    }

    #[test]
    fn booleans_follow_go_parse_bool() {
        let schema = ParameterSchema::new().with(Parameter::boolean("b"));
        for (raw, expected) in [
            ("1", true),
            ("t", true),
            ("TRUE", true),
            ("0", false),
            ("F", false),
            ("False", false),
        ] {
            assert_eq!(
                schema.parse(0, &params(&[("b", raw)])).unwrap().bool("b").unwrap(),
                expected,
                "{raw}"
            );
        }
        for raw in ["yes", "on", " true", "tRuE"] {
            assert!(schema.parse(0, &params(&[("b", raw)])).is_err(), "{raw}");
        }
    }

    #[test]
    fn unknown_parameters() {
        let p = params(&[("mode", "fast"), ("zzz", "1"), ("aaa", "2"), ("empty", "")]);
        assert!(schema().parse(0, &p).is_ok());
        let errors = schema().deny_unknown().parse(5, &p).unwrap_err();
        let got = messages(&errors);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "spec/plugins/5/aaa");
        assert_eq!(got[0].1, "2");
        assert_eq!(
            got[0].2,
            "unknown parameter; known parameters: labels, mode, verbose, replicas"
        );
        assert_eq!(got[1].0, "spec/plugins/5/zzz");

        let errors = ParameterSchema::new()
            .deny_unknown()
            .parse(0, &params(&[("x", "1")]))
            .unwrap_err();
        assert_eq!(errors[0].message, "unknown parameter: this plugin takes no parameters");
    }

    #[test]
    fn invalid_default_is_reported() {
        let schema = ParameterSchema::new().with(Parameter::integer("n").default("ten"));
        let errors = schema.parse(0, &params(&[])).unwrap_err();
        assert_eq!(errors[0].value, "ten");
        assert!(
            errors[0]
                .message
                .starts_with("the plugin's default value is invalid: expected an integer")
        );
    }

    #[test]
    fn accessors_return_typed_errors() {
        let parsed = schema().parse(0, &params(&[("mode", "fast")])).unwrap();
        assert!(matches!(parsed.string("nope"), Err(ParameterError::NotDeclared { name }) if name == "nope"));
        assert!(matches!(
            parsed.bool("mode"),
            Err(ParameterError::WrongType {
                declared: "a string",
                requested: "a boolean",
                ..
            })
        ));
        assert!(matches!(
            parsed.string("verbose"),
            Err(ParameterError::WrongType { .. })
        ));
        assert!(matches!(
            parsed.integer("labels"),
            Err(ParameterError::WrongType { .. })
        ));
        assert!(matches!(
            parsed.json::<bool>("mode"),
            Err(ParameterError::WrongType { .. })
        ));
        let err = parsed.json::<Vec<String>>("labels").unwrap_err();
        assert!(matches!(err, ParameterError::Json { .. }));
        assert!(
            err.to_string()
                .contains("cannot be read as alloc::vec::Vec<alloc::string::String>"),
            "{err}"
        );
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(status.message().contains("\"labels\""));
    }

    #[test]
    fn with_defaults_fills_only_missing() {
        let original = params(&[("mode", "fast"), ("verbose", ""), ("replicas", "bogus"), ("other", "x")]);
        let filled = schema().with_defaults(&original);
        assert_eq!(
            filled,
            params(&[
                ("labels", r#"{"plugin-metadata":"default"}"#),
                ("mode", "fast"),
                ("verbose", "false"),
                ("replicas", "bogus"),
                ("other", "x"),
            ])
        );
        // Idempotent, and the input is untouched.
        assert_eq!(schema().with_defaults(&filled), filled);
        assert_eq!(original["verbose"], "");
        // Present-but-invalid values stay so validation reports them.
        let errors = schema().parse(0, &filled).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "replicas"]);
    }

    #[test]
    fn redeclaring_replaces() {
        let schema = ParameterSchema::new()
            .with(Parameter::integer("x"))
            .with(Parameter::string("x"));
        assert_eq!(schema.parameters().len(), 1);
        assert_eq!(schema.parameters()[0].name(), "x");
        assert_eq!(
            schema.parse(0, &params(&[("x", "abc")])).unwrap().string("x").unwrap(),
            "abc"
        );
    }

    /// Issue 13, point 5: a 3 MB bad value or unknown name is not echoed whole.
    #[test]
    fn huge_bad_values_and_names_are_echoed_bounded() {
        let huge_json = format!("{{\"{}", "x".repeat(3 * 1024 * 1024));
        let huge_name = "n".repeat(3 * 1024 * 1024);
        let huge_string = format!("\"{}\"", "s".repeat(3 * 1024 * 1024));
        let errors = schema()
            .parse(
                0,
                &params(&[("labels", &huge_json), ("mode", &huge_string), (&huge_name, "1")]),
            )
            .unwrap_err();
        let paths: Vec<String> = errors
            .iter()
            .map(|e| e.path_components.join("/").chars().take(40).collect())
            .collect();
        assert!(errors.len() >= 2, "{paths:?}");
        for e in &errors {
            assert!(e.value.len() <= 1024, "value of {} bytes", e.value.len());
            assert!(e.message.len() <= 1024, "message of {} bytes", e.message.len());
            assert!(e.path_components.iter().all(|c| c.len() <= 1024));
        }
        let status = crate::validation::to_status(&errors);
        assert!(status.message().len() < 16 * 1024, "{}", status.message().len());
    }
}
