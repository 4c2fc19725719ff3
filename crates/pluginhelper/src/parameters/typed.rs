//! Parameters as a typed struct: the [`Parameters`] trait, derived with
//! `#[derive(Parameters)]`.

use std::{collections::BTreeMap, fmt::Display, str::FromStr};

use serde::de::DeserializeOwned;

use crate::{
    cluster::Cluster,
    validation::{ValidationError, parameter_error},
};

/// A plugin's parameters as a typed value: parsed from the `parameters` map
/// of its entry in `spec.plugins[]`, with every error in machinery's
/// convention, defaults to write back, and values that may not change.
///
/// Derive it: each named field is a parameter.
///
/// ```
/// use std::collections::BTreeMap;
/// use cnpgi_pluginhelper::parameters::Parameters;
///
/// #[derive(Parameters, Debug, PartialEq)]
/// #[params(rename_all = "camelCase", deny_unknown)]
/// struct Config {
///     /// Where backups go (required: no default, not an `Option`).
///     bucket_name: String,
///     /// Upload workers.
///     #[param(default = 2, validate = at_least_one)]
///     max_parallel: u16,
///     /// How uploads are compressed.
///     #[param(from_str, default = "gzip")]
///     compression: Compression,
///     /// Extra labels, as a JSON object; fixed once the Cluster exists.
///     #[param(json, immutable = "labels cannot be changed")]
///     labels: Option<BTreeMap<String, String>>,
///     /// Also archive WAL (Go's `strconv.ParseBool` spellings).
///     #[param(rename = "wal", default = true)]
///     archive_wal: bool,
/// }
///
/// #[derive(Debug, PartialEq)]
/// enum Compression { Gzip, Zstd }
///
/// impl std::str::FromStr for Compression {
///     type Err = String;
///     fn from_str(s: &str) -> Result<Self, String> {
///         match s {
///             "gzip" => Ok(Self::Gzip),
///             "zstd" => Ok(Self::Zstd),
///             _ => Err(format!("unknown compression {s:?}: expected gzip or zstd")),
///         }
///     }
/// }
///
/// fn at_least_one(n: &u16) -> Result<(), &'static str> {
///     if *n == 0 { Err("must be at least 1") } else { Ok(()) }
/// }
///
/// let params = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
///     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// };
///
/// let config = Config::parse(0, &params(&[("bucketName", "pg"), ("compression", "zstd")])).unwrap();
/// assert_eq!(config.max_parallel, 2);
/// assert_eq!(config.compression, Compression::Zstd);
/// assert!(config.archive_wal && config.labels.is_none());
///
/// // Every error at once, in machinery's convention, with the raw value.
/// let errors = Config::parse(3, &params(&[("maxParallel", "0"), ("wal", "maybe"), ("other", "x")])).unwrap_err();
/// let found: Vec<_> = errors.iter().map(|e| (e.path_components.join("/"), e.value.as_str())).collect();
/// assert_eq!(found, [
///     ("spec/plugins/3/bucketName".to_owned(), ""),
///     ("spec/plugins/3/maxParallel".to_owned(), "0"),
///     ("spec/plugins/3/wal".to_owned(), "maybe"),
///     ("spec/plugins/3/other".to_owned(), "x"),
/// ]);
///
/// // Defaults, for MutateCluster to write back; given values are kept.
/// let filled = Config::with_defaults(&params(&[("maxParallel", "8")]));
/// assert_eq!(filled, params(&[("compression", "gzip"), ("maxParallel", "8"), ("wal", "true")]));
///
/// // A change of an immutable value, for ValidateClusterChange.
/// let old = params(&[("bucketName", "pg"), ("labels", r#"{"a":"1"}"#)]);
/// let new = params(&[("bucketName", "pg"), ("labels", r#"{"a": "2"}"#)]);
/// assert_eq!(Config::check_change(0, &old, &new)[0].message, "labels cannot be changed");
/// ```
///
/// Field options, `#[param(...)]`:
///
/// * `rename = "key"`: the parameter key (default: the field name, or as
///   `#[params(rename_all = "camelCase" | "kebab-case" | "snake_case")]` says);
/// * how the value is parsed: by default with [`ParameterValue`] (`bool`,
///   integers, floats, `String`); `json` ([`from_json`]); `from_str` (the
///   type's `FromStr`, e.g. an enum); `with = f` (`f(&str) -> Result<T, E:
///   Display>`);
/// * `default = expr`: the value when the parameter is missing, written as the
///   parameter would be (anything `ToString`: `"gzip"`, `2`, `true`, a
///   `const`). It is parsed like a given value; a bad default is reported as
///   "the plugin's default value is invalid". A field of type `Option<T>` is
///   optional and has no default; any other field without a default is
///   required;
/// * `map = f` (`fn(T) -> T`), then `validate = f` (`fn(&T) -> Result<(), E:
///   Display>`): run on every parsed value, given or default;
/// * `immutable` or `immutable = "message"`: [`Parameters::check_change`]
///   refuses a change of the parsed value (compared with `PartialEq`).
///
/// Struct options, `#[params(...)]`: `rename_all`, `deny_unknown` (refuse
/// parameters that are not declared), `crate = "path"` (where
/// `cnpgi_pluginhelper` is, when re-exported). A field's doc comment becomes
/// its [`ParameterInfo::description`].
///
/// A parameter whose value is the empty string counts as missing, as with Go
/// plugins. `()` is the `Parameters` of a plugin that takes none (and ignores
/// any it is given).
pub trait Parameters: Sized + Send + Sync + 'static {
    /// The parameters, in declaration order.
    fn declared() -> Vec<ParameterInfo>;

    /// Parses the parameter map of the plugin at `plugin_index` in
    /// `spec.plugins`.
    ///
    /// # Errors
    ///
    /// Every problem, one [`ValidationError`] each, with machinery's path
    /// `["spec", "plugins", "<plugin_index>", "<key>"]` and the raw value:
    /// declared parameters in declaration order, then unknown ones.
    fn parse(plugin_index: usize, params: &BTreeMap<String, String>) -> Result<Self, Vec<ValidationError>>;

    /// The errors of changing the parameters from `old` to `new` (the plugin
    /// at `plugin_index` in the new Cluster): the `immutable` parameters whose
    /// value, valid on both sides, changed. Errors of `new` itself are
    /// [`Parameters::parse`]'s.
    fn check_change(
        plugin_index: usize,
        old: &BTreeMap<String, String>,
        new: &BTreeMap<String, String>,
    ) -> Vec<ValidationError> {
        let _ = (plugin_index, old, new);
        Vec::new()
    }

    /// Whether [`Parameters::parse`] can refuse anything: a plugin whose
    /// parameters validate nothing needs no `ValidateCluster*` RPC.
    fn validates() -> bool {
        !Self::declared().is_empty()
    }

    /// `params` with the default of every declared parameter that is missing
    /// or empty filled in; given values are kept, even invalid ones, for
    /// validation to report.
    fn with_defaults(params: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut filled = params.clone();
        for info in Self::declared() {
            if let Some(default) = info.default
                && filled.get(info.name).is_none_or(String::is_empty)
            {
                filled.insert(info.name.to_owned(), default);
            }
        }
        filled
    }

    /// Whether any parameter has a default (to write back in `MutateCluster`).
    fn has_defaults() -> bool {
        Self::declared().iter().any(|info| info.default.is_some())
    }

    /// The parameters of the plugin `plugin_name` in `cluster`; a plugin not
    /// listed in `spec.plugins` gets an empty map (its defaults).
    ///
    /// # Errors
    ///
    /// As [`Parameters::parse`].
    fn from_cluster(cluster: &Cluster, plugin_name: &str) -> Result<Self, Vec<ValidationError>> {
        match cluster.plugin(plugin_name) {
            Some(entry) => Self::parse(entry.index, entry.parameters()),
            None => Self::parse(0, &BTreeMap::new()),
        }
    }
}

/// No parameters: any map is accepted and ignored.
impl Parameters for () {
    fn declared() -> Vec<ParameterInfo> {
        Vec::new()
    }

    fn parse(_: usize, _: &BTreeMap<String, String>) -> Result<Self, Vec<ValidationError>> {
        Ok(())
    }
}

/// What [`Parameters::declared`] tells about one parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParameterInfo {
    /// The key in the parameter map.
    pub name: &'static str,
    /// The field's doc comment, on one line.
    pub description: &'static str,
    /// The value used when it is missing, as written back by `MutateCluster`.
    pub default: Option<String>,
    /// Missing is an error (no default, not an `Option`).
    pub required: bool,
    /// May not change once the plugin is configured in a Cluster.
    pub immutable: bool,
}

/// A type a parameter string parses into (without an attribute saying how).
///
/// ```
/// use cnpgi_pluginhelper::parameters::ParameterValue;
///
/// assert_eq!(bool::parse_parameter("T"), Ok(true));
/// assert_eq!(u8::parse_parameter("300").unwrap_err(), "expected an integer: number too large to fit in target type");
/// ```
pub trait ParameterValue: Sized {
    /// Parses a (non-empty) parameter value; the error says why it is wrong.
    ///
    /// # Errors
    ///
    /// The message of the validation error.
    fn parse_parameter(raw: &str) -> Result<Self, String>;
}

impl ParameterValue for String {
    fn parse_parameter(raw: &str) -> Result<Self, String> {
        Ok(raw.to_owned())
    }
}

impl ParameterValue for bool {
    /// `true`/`false`, and the other spellings of Go's `strconv.ParseBool`.
    fn parse_parameter(raw: &str) -> Result<Self, String> {
        super::parse_bool(raw).ok_or_else(|| "expected a boolean: true or false".to_owned())
    }
}

macro_rules! parameter_values {
    ($what:literal: $($ty:ty),*) => {$(
        impl ParameterValue for $ty {
            fn parse_parameter(raw: &str) -> Result<Self, String> {
                raw.parse().map_err(|err| format!(concat!("expected ", $what, ": {}"), err))
            }
        }
    )*};
}
parameter_values!("an integer": i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
parameter_values!("a number": f32, f64);

/// Parses a JSON parameter (`#[param(json)]`); the message includes
/// `serde_json`'s.
///
/// # Errors
///
/// `invalid JSON value: <serde_json's message>`.
pub fn from_json<T: DeserializeOwned>(raw: &str) -> Result<T, String> {
    serde_json::from_str(raw).map_err(|err| format!("invalid JSON value: {err}"))
}

/// Parses with the type's `FromStr` (`#[param(from_str)]`); the message is
/// the error's.
///
/// # Errors
///
/// The `FromStr` error, as text.
pub fn from_str_value<T>(raw: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: Display,
{
    raw.parse().map_err(|err: T::Err| err.to_string())
}

/// Reads values out of a parameter map, collecting every error: the code
/// `#[derive(Parameters)]` generates calls it.
#[doc(hidden)]
#[derive(Debug)]
pub struct Reader<'a> {
    index: usize,
    params: &'a BTreeMap<String, String>,
    errors: Vec<ValidationError>,
}

/// The effective raw value of `key`: given (non-empty), or the default.
/// `Some((raw, from_default))`.
fn effective<'a>(params: &'a BTreeMap<String, String>, key: &str, default: Option<&'a str>) -> Option<(&'a str, bool)> {
    match params.get(key).map(String::as_str).filter(|raw| !raw.is_empty()) {
        Some(raw) => Some((raw, false)),
        None => default.map(|raw| (raw, true)),
    }
}

impl<'a> Reader<'a> {
    /// Reads the parameters of the plugin at `index` in `spec.plugins`.
    pub fn new(index: usize, params: &'a BTreeMap<String, String>) -> Self {
        Self {
            index,
            params,
            errors: Vec::new(),
        }
    }

    /// `None` when the value is invalid (the error is recorded);
    /// `Some(None)` when it is missing without default.
    pub fn optional<T>(
        &mut self,
        key: &str,
        default: Option<&str>,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<Option<T>> {
        let Some((raw, from_default)) = effective(self.params, key, default) else {
            return Some(None);
        };
        match parse(raw) {
            Ok(value) => Some(Some(value)),
            Err(message) => {
                let message = if from_default {
                    format!("the plugin's default value is invalid: {message}")
                } else {
                    message
                };
                self.errors.push(parameter_error(self.index, key, raw, message));
                None
            }
        }
    }

    /// As [`Reader::optional`], and a missing value is an error.
    pub fn required<T>(
        &mut self,
        key: &str,
        default: Option<&str>,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        match self.optional(key, default, parse)? {
            Some(value) => Some(value),
            None => {
                self.errors
                    .push(parameter_error(self.index, key, "", "parameter is required"));
                None
            }
        }
    }

    /// Records an error for every non-empty parameter not in `known`.
    pub fn deny_unknown(&mut self, known: &[&str]) {
        for (name, value) in self.params {
            if value.is_empty() || known.contains(&name.as_str()) {
                continue;
            }
            let message = if known.is_empty() {
                "unknown parameter: this plugin takes no parameters".to_owned()
            } else {
                format!("unknown parameter; known parameters: {}", known.join(", "))
            };
            self.errors
                .push(parameter_error(self.index, name, value.as_str(), message));
        }
    }

    /// Every error recorded.
    pub fn finish(self) -> Vec<ValidationError> {
        self.errors
    }

    /// Records an error when `key`'s value, valid in both maps, differs.
    #[allow(clippy::too_many_arguments)]
    pub fn immutable<T: PartialEq>(
        errors: &mut Vec<ValidationError>,
        index: usize,
        old: &BTreeMap<String, String>,
        new: &BTreeMap<String, String>,
        key: &str,
        default: Option<&str>,
        parse: impl Fn(&str) -> Result<T, String>,
        message: &str,
    ) {
        let value = |params| effective(params, key, default).map(|(raw, _)| parse(raw)).transpose();
        if let (Ok(before), Ok(after)) = (value(old), value(new))
            && before != after
        {
            let raw = new.get(key).map(String::as_str).unwrap_or_default();
            errors.push(parameter_error(index, key, raw, message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parameters::Parameters;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn errors<P: Parameters>(pairs: &[(&str, &str)]) -> Vec<(String, String, String)> {
        P::parse(1, &params(pairs))
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.path_components.join("/"), e.value, e.message))
            .collect()
    }

    #[derive(Parameters, Debug, PartialEq)]
    struct Mixed {
        /// A count.
        #[param(default = 3)]
        count: u8,
        name: String,
        ratio: Option<f64>,
        #[param(json, default = r#"["a"]"#, map = sorted, immutable)]
        list: Vec<String>,
        #[param(with = parse_even, validate = below_100)]
        even: Option<u32>,
        #[param(rename = "flag", default = false)]
        r#type: bool,
    }

    fn sorted(mut list: Vec<String>) -> Vec<String> {
        list.sort();
        list
    }

    fn parse_even(raw: &str) -> Result<u32, String> {
        let n: u32 = raw.parse().map_err(|_| "not a number".to_owned())?;
        if n.is_multiple_of(2) {
            Ok(n)
        } else {
            Err(format!("{n} is odd"))
        }
    }

    fn below_100(n: &u32) -> Result<(), String> {
        if *n < 100 {
            Ok(())
        } else {
            Err("must be below 100".into())
        }
    }

    #[test]
    fn parses_with_defaults_maps_and_optionals() {
        let parsed = Mixed::parse(0, &params(&[("name", "x"), ("list", r#"["c","b"]"#), ("even", "")])).unwrap();
        assert_eq!(
            parsed,
            Mixed {
                count: 3,
                name: "x".into(),
                ratio: None,
                list: vec!["b".into(), "c".into()],
                even: None,
                r#type: false,
            }
        );
        let parsed = Mixed::parse(
            0,
            &params(&[("name", "x"), ("even", "42"), ("flag", "1"), ("ratio", "0.5")]),
        )
        .unwrap();
        assert_eq!((parsed.even, parsed.r#type, parsed.ratio), (Some(42), true, Some(0.5)));
        assert_eq!(parsed.list, ["a"]);
    }

    #[test]
    fn reports_every_error_in_declaration_order() {
        let got = errors::<Mixed>(&[
            ("count", "300"),
            ("ratio", "half"),
            ("list", "{"),
            ("even", "7"),
            ("flag", "yes"),
            ("unknown", "fine"),
        ]);
        let expected = [
            (
                "spec/plugins/1/count",
                "300",
                "expected an integer: number too large to fit in target type",
            ),
            ("spec/plugins/1/name", "", "parameter is required"),
            (
                "spec/plugins/1/ratio",
                "half",
                "expected a number: invalid float literal",
            ),
            (
                "spec/plugins/1/list",
                "{",
                "invalid JSON value: invalid type: map, expected a sequence at line 1 column 0",
            ),
            ("spec/plugins/1/even", "7", "7 is odd"),
            ("spec/plugins/1/flag", "yes", "expected a boolean: true or false"),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(
            errors::<Mixed>(&[("name", "x"), ("even", "200")])[0].2,
            "must be below 100"
        );
    }

    #[test]
    fn a_bad_default_is_the_plugins_fault() {
        #[derive(Parameters, Debug)]
        #[allow(dead_code)]
        struct Bad {
            #[param(default = "ten")]
            n: u8,
        }
        let got = errors::<Bad>(&[]);
        assert_eq!(got[0].1, "ten");
        assert!(
            got[0]
                .2
                .starts_with("the plugin's default value is invalid: expected an integer")
        );
    }

    #[test]
    fn unknown_parameters_are_refused_when_asked() {
        #[derive(Parameters, Debug)]
        #[params(deny_unknown, rename_all = "camelCase")]
        #[allow(dead_code)]
        struct Strict {
            max_parallel: Option<u8>,
        }
        #[derive(Parameters, Debug)]
        #[params(deny_unknown)]
        struct Nothing {}
        let got = errors::<Strict>(&[("maxParallel", "1"), ("zzz", "2"), ("empty", "")]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "spec/plugins/1/zzz");
        assert_eq!(got[0].2, "unknown parameter; known parameters: maxParallel");
        assert_eq!(
            errors::<Nothing>(&[("x", "1")])[0].2,
            "unknown parameter: this plugin takes no parameters"
        );
        assert!(Nothing::validates() && Strict::validates());
        assert!(!<()>::validates());
        assert!(<()>::parse(0, &params(&[("x", "1")])).is_ok());
    }

    #[test]
    fn declared_describes_each_parameter() {
        let declared = Mixed::declared();
        let names: Vec<_> = declared.iter().map(|i| i.name).collect();
        assert_eq!(names, ["count", "name", "ratio", "list", "even", "flag"]);
        assert_eq!(
            declared[0],
            ParameterInfo {
                name: "count",
                description: "A count.",
                default: Some("3".into()),
                required: false,
                immutable: false,
            }
        );
        assert!(declared[1].required && !declared[2].required && declared[3].immutable);
        assert!(Mixed::has_defaults() && !<()>::has_defaults());
    }

    #[test]
    fn defaults_fill_only_missing_values() {
        let filled = Mixed::with_defaults(&params(&[("count", ""), ("list", "bad"), ("other", "x")]));
        assert_eq!(
            filled,
            params(&[("count", "3"), ("list", "bad"), ("other", "x"), ("flag", "false")])
        );
    }

    #[test]
    fn immutable_values_compare_parsed_and_valid_values() {
        let old = params(&[("list", r#"["a","b"]"#)]);
        // Same value once parsed and mapped: not a change.
        assert!(Mixed::check_change(0, &old, &params(&[("list", r#"[ "b", "a" ]"#)])).is_empty());
        // Missing means the default on both sides.
        assert!(Mixed::check_change(0, &params(&[]), &params(&[("list", r#"["a"]"#)])).is_empty());
        // Invalid on one side: parse reports it, not check_change.
        assert!(Mixed::check_change(0, &old, &params(&[("list", "{")])).is_empty());
        let errors = Mixed::check_change(2, &old, &params(&[("list", r#"["c"]"#)]));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path_components, ["spec", "plugins", "2", "list"]);
        assert_eq!(errors[0].value, r#"["c"]"#);
        assert_eq!(errors[0].message, "cannot be changed");
        // Missing in the new map: the default differs from the old value.
        let errors = Mixed::check_change(0, &old, &params(&[]));
        assert_eq!((errors[0].value.as_str(), errors.len()), ("", 1));
    }

    #[test]
    fn from_cluster_reads_the_plugins_own_entry() {
        let cluster = crate::cluster::decode_cluster(
            br#"{"spec":{"plugins":[{"name":"a.example.com"},{"name":"b.example.com","parameters":{"name":"n","count":"x"}}]}}"#,
        )
        .unwrap();
        let errors = Mixed::from_cluster(&cluster, "b.example.com").unwrap_err();
        assert_eq!(errors[0].path_components, ["spec", "plugins", "1", "count"]);
        // Not listed: the empty map, whose errors point at index 0.
        let errors = Mixed::from_cluster(&cluster, "c.example.com").unwrap_err();
        assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "name"]);
    }
}
