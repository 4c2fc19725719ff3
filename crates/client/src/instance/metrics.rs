//! Plugin metrics, as CloudNativePG's instance manager exports them on each
//! scrape: `Metrics.Define` then `Metrics.Collect` on every plugin that
//! advertises `TYPE_METRICS`, each value checked against its definition,
//! and the result in the Prometheus text exposition format (0.0.4).
//!
//! Names are used as the plugin defined them (`fq_name`, no prefix). As
//! upstream, a collected value whose `fq_name` is not defined, or whose label
//! values do not match the definition's label names in number, stops that
//! plugin's collection: the values before it are kept, the rest dropped, and
//! a collection error is counted. Where upstream would stop every plugin's
//! remaining values, this stops only the faulty plugin's. Definitions that
//! the text format cannot carry (a name or label name that is not valid, no
//! value type) make the whole plugin's metrics dropped, where upstream
//! fails at collection time (or, for a missing value type, crashes).
//!
//! ```
//! use cnpgi_client::instance::metrics::{Family, MetricKind, Sample, encode};
//!
//! let family = Family {
//!     name: "archived_total".into(),
//!     help: "WAL files archived".into(),
//!     kind: MetricKind::Counter,
//!     samples: vec![Sample { labels: vec![("timeline".into(), "1".into())], value: 3.0 }],
//! };
//! assert_eq!(
//!     encode(&[family]),
//!     "# HELP archived_total WAL files archived\n# TYPE archived_total counter\narchived_total{timeline=\"1\"} 3\n"
//! );
//! ```

use std::collections::{BTreeMap, BTreeSet};

use cnpgi_core::{
    capabilities::{MetricsRpc, ServiceType},
    cluster::enabled_plugins,
    echo::bounded_string,
};
use cnpgi_proto::metrics::v1::{
    CollectMetricsRequest, CollectMetricsResult, DefineMetricsRequest, DefineMetricsResult, metric_type,
};
use serde_json::Value;

use super::{InstanceOptions, InstancePlugin, connect, sockets};

/// The content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric's type, as the text format names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// `counter`.
    Counter,
    /// `gauge`.
    Gauge,
    /// `untyped`.
    Untyped,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Untyped => "untyped",
        }
    }
}

/// One value of a family: its labels (names sorted) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Label names and values.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// A metric family: one name, help, type, and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The metric name.
    pub name: String,
    /// Its help text.
    pub help: String,
    /// Its type.
    pub kind: MetricKind,
    /// Its values.
    pub samples: Vec<Sample>,
}

/// A plugin whose metrics were (partly) dropped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionError {
    /// The plugin.
    pub plugin: String,
    /// What went wrong, one line.
    pub reason: String,
}

/// One scrape's plugin metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collection {
    /// The families, sorted by name.
    pub families: Vec<Family>,
    /// The plugins whose metrics were (partly) dropped.
    pub errors: Vec<CollectionError>,
}

/// Whether `name` is a valid Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// Whether `name` is a valid Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`,
/// not starting with the reserved `__`).
pub fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with("__")
}

/// A checked definition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Definition {
    help: String,
    kind: MetricKind,
    variable_labels: Vec<String>,
    const_labels: BTreeMap<String, String>,
}

fn quoted(text: &str) -> String {
    format!("{:?}", bounded_string(text))
}

/// Checks a `Define` answer; `taken` holds the names already in use.
pub(crate) fn definitions(
    answer: &DefineMetricsResult,
    taken: &BTreeSet<String>,
) -> Result<BTreeMap<String, Definition>, String> {
    let mut definitions = BTreeMap::new();
    for metric in &answer.metrics {
        let name = &metric.fq_name;
        if !is_metric_name(name) {
            return Err(format!("Define: {} is not a valid metric name", quoted(name)));
        }
        if taken.contains(name) || definitions.contains_key(name) {
            return Err(format!("Define: metric {name} is defined twice"));
        }
        let kind = match metric
            .value_type
            .as_ref()
            .map(|t| metric_type::Type::try_from(t.r#type))
        {
            None => return Err(format!("Define: metric {name} has no value_type")),
            Some(Ok(metric_type::Type::Counter)) => MetricKind::Counter,
            Some(Ok(metric_type::Type::Gauge)) => MetricKind::Gauge,
            Some(Ok(metric_type::Type::Untyped)) => MetricKind::Untyped,
            Some(Ok(metric_type::Type::Unspecified) | Err(_)) => {
                return Err(format!(
                    "Define: metric {name} has an unspecified or unknown value_type"
                ));
            }
        };
        let mut seen = BTreeSet::new();
        for label in metric.variable_labels.iter().chain(metric.const_labels.keys()) {
            if !is_label_name(label) {
                return Err(format!(
                    "Define: metric {name} has the invalid label name {}",
                    quoted(label)
                ));
            }
            if !seen.insert(label) {
                return Err(format!("Define: metric {name} has the label {label} twice"));
            }
        }
        definitions.insert(
            name.clone(),
            Definition {
                help: metric.help.clone(),
                kind,
                variable_labels: metric.variable_labels.clone(),
                const_labels: metric
                    .const_labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
        );
    }
    Ok(definitions)
}

/// The values of a `Collect` answer, up to the first that does not fit its
/// definition (and why it stopped there).
pub(crate) fn samples(
    definitions: &BTreeMap<String, Definition>,
    answer: &CollectMetricsResult,
) -> (Vec<(String, Sample)>, Option<String>) {
    let mut out = Vec::new();
    let mut series = BTreeSet::new();
    for metric in &answer.metrics {
        let Some(definition) = definitions.get(&metric.fq_name) else {
            return (
                out,
                Some(format!("Collect: metric {} is not defined", quoted(&metric.fq_name))),
            );
        };
        if metric.variable_labels.len() != definition.variable_labels.len() {
            return (
                out,
                Some(format!(
                    "Collect: metric {} has {} label value(s), its definition {} label name(s)",
                    metric.fq_name,
                    metric.variable_labels.len(),
                    definition.variable_labels.len()
                )),
            );
        }
        let mut labels: Vec<(String, String)> = definition
            .variable_labels
            .iter()
            .cloned()
            .zip(metric.variable_labels.iter().cloned())
            .chain(definition.const_labels.clone())
            .collect();
        labels.sort();
        if !series.insert((metric.fq_name.clone(), labels.clone())) {
            return (
                out,
                Some(format!(
                    "Collect: metric {} is collected twice with the same label values",
                    metric.fq_name
                )),
            );
        }
        out.push((
            metric.fq_name.clone(),
            Sample {
                labels,
                value: metric.value,
            },
        ));
    }
    (out, None)
}

/// Define then Collect on every plugin the Cluster enables that has a
/// socket and advertises `TYPE_METRICS`, in name order. A plugin that
/// cannot be reached, fails, or answers something unusable is reported in
/// [`Collection::errors`] and does not stop the others. `reserved` names
/// (the caller's own metrics) may not be defined by plugins.
pub async fn collect(cluster: &Value, reserved: &[&str], options: &InstanceOptions) -> Collection {
    let mut collection = Collection::default();
    let error = |plugin: &str, reason: String| CollectionError {
        plugin: plugin.to_owned(),
        reason,
    };
    let present = match sockets(&options.socket_dir) {
        Ok(present) => present,
        Err(e) => {
            collection.errors.push(error("(all)", e.to_string()));
            return collection;
        }
    };
    let definition = match serde_json::to_vec(cluster) {
        Ok(definition) => definition,
        Err(e) => {
            collection.errors.push(error("(all)", e.to_string()));
            return collection;
        }
    };
    let mut families = Families {
        taken: reserved.iter().map(|name| (*name).to_owned()).collect(),
        by_name: BTreeMap::new(),
    };
    for name in enabled_plugins(cluster)
        .into_iter()
        .map(|p| p.name)
        .filter(|name| present.contains(name))
    {
        let plugin = match metrics_plugin(&name, options).await {
            Ok(Some(plugin)) => plugin,
            Ok(None) => continue,
            Err(reason) => {
                collection.errors.push(error(&name, reason));
                continue;
            }
        };
        let (defined, collected) = match define_and_collect(&plugin, &definition, &families.taken).await {
            Ok(answers) => answers,
            Err(reason) => {
                collection.errors.push(error(&name, reason));
                continue;
            }
        };
        let (values, stopped) = samples(&defined, &collected);
        if let Some(reason) = stopped {
            collection.errors.push(error(
                &name,
                format!("{reason}; this plugin's remaining values are dropped"),
            ));
        }
        families.add(&defined, values);
    }
    // A defined metric without values has no line to show.
    collection.families = families
        .by_name
        .into_values()
        .filter(|f| !f.samples.is_empty())
        .collect();
    collection
}

/// The families collected so far, and the names no later plugin may define.
struct Families {
    taken: BTreeSet<String>,
    by_name: BTreeMap<String, Family>,
}

impl Families {
    /// One plugin's definitions and the values kept of its answer.
    fn add(&mut self, defined: &BTreeMap<String, Definition>, values: Vec<(String, Sample)>) {
        for (metric, definition) in defined {
            self.taken.insert(metric.clone());
            self.by_name.insert(
                metric.clone(),
                Family {
                    name: metric.clone(),
                    help: definition.help.clone(),
                    kind: definition.kind,
                    samples: Vec::new(),
                },
            );
        }
        for (metric, sample) in values {
            if let Some(family) = self.by_name.get_mut(&metric) {
                family.samples.push(sample);
            }
        }
    }
}

/// Plugin `name`, connected and probed for Metrics; `None` when it does not
/// advertise `TYPE_METRICS` (nothing to collect), `Err` when unreachable.
async fn metrics_plugin(name: &str, options: &InstanceOptions) -> Result<Option<InstancePlugin>, String> {
    let (mut plugins, _) = connect([name], &[ServiceType::Metrics], options)
        .await
        .map_err(|e| e.to_string())?;
    Ok(plugins.pop().filter(|plugin| {
        plugin.info.has_service(ServiceType::Metrics) && plugin.info.metrics_rpcs.contains(&MetricsRpc::Metrics)
    }))
}

/// `Define`, checked against the names already `taken`, then `Collect`.
async fn define_and_collect(
    plugin: &InstancePlugin,
    definition: &[u8],
    taken: &BTreeSet<String>,
) -> Result<(BTreeMap<String, Definition>, CollectMetricsResult), String> {
    let failed = |rpc: &str, s: tonic::Status| format!("{rpc} failed: {:?}: {}", s.code(), bounded_string(s.message()));
    let defined = plugin
        .client
        .metrics()
        .define(plugin.client.request(DefineMetricsRequest {
            cluster_definition: definition.to_vec(),
        }))
        .await
        .map_err(|s| failed("Define", s))
        .and_then(|answer| definitions(answer.get_ref(), taken))?;
    let collected = plugin
        .client
        .metrics()
        .collect(plugin.client.request(CollectMetricsRequest {
            cluster_definition: definition.to_vec(),
        }))
        .await
        .map_err(|s| failed("Collect", s))?
        .into_inner();
    Ok((defined, collected))
}

fn escape(text: &str, quote: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "+Inf".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        // Rust prints the shortest text that parses back to the same value.
        format!("{value}")
    }
}

/// The families in the Prometheus text exposition format 0.0.4: for each,
/// `# HELP` (with `\` and line feeds escaped), `# TYPE`, then one line per
/// value, label values escaped (`\`, `"`, line feeds).
pub fn encode(families: &[Family]) -> String {
    let mut out = String::new();
    for family in families {
        out.push_str(&format!("# HELP {} {}\n", family.name, escape(&family.help, false)));
        out.push_str(&format!("# TYPE {} {}\n", family.name, family.kind.as_str()));
        for sample in &family.samples {
            out.push_str(&family.name);
            if !sample.labels.is_empty() {
                let labels: Vec<String> = sample
                    .labels
                    .iter()
                    .map(|(name, value)| format!("{name}=\"{}\"", escape(value, true)))
                    .collect();
                out.push_str(&format!("{{{}}}", labels.join(",")));
            }
            out.push_str(&format!(" {}\n", number(sample.value)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use cnpgi_proto::metrics::v1::{CollectMetric, Metric, MetricType};

    use super::*;

    fn metric(name: &str, labels: &[&str], kind: Option<i32>) -> Metric {
        Metric {
            fq_name: name.to_owned(),
            help: format!("{name} help"),
            variable_labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            const_labels: Default::default(),
            value_type: kind.map(|r#type| MetricType { r#type }),
        }
    }

    fn value(name: &str, labels: &[&str], value: f64) -> CollectMetric {
        CollectMetric {
            value,
            fq_name: name.to_owned(),
            variable_labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    #[test]
    fn names() {
        for good in [
            "a",
            "_a",
            "a:b_c9",
            "barman_cloud_cloudnative_pg_io_last_available_backup_timestamp",
        ] {
            assert!(is_metric_name(good), "{good}");
        }
        for bad in ["", "9a", "a-b", "a b", "é"] {
            assert!(!is_metric_name(bad), "{bad}");
        }
        assert!(is_label_name("_x1") && !is_label_name("a:b") && !is_label_name("__name__") && !is_label_name(""));
    }

    #[test]
    fn definitions_must_be_usable() {
        let ok = DefineMetricsResult {
            metrics: vec![metric("a_total", &["x"], Some(1)), metric("b", &[], Some(3))],
        };
        let defined = definitions(&ok, &BTreeSet::new()).unwrap();
        assert_eq!(defined["a_total"].kind, MetricKind::Counter);
        assert_eq!(defined["b"].kind, MetricKind::Untyped);
        for (answer, taken, error) in [
            (vec![metric("a-b", &[], Some(2))], "", "not a valid metric name"),
            (vec![metric("a", &[], None)], "", "has no value_type"),
            (vec![metric("a", &[], Some(0))], "", "unspecified or unknown"),
            (vec![metric("a", &[], Some(9))], "", "unspecified or unknown"),
            (vec![metric("a", &["le-x"], Some(2))], "", "invalid label name"),
            (vec![metric("a", &["x", "x"], Some(2))], "", "the label x twice"),
            (
                vec![metric("a", &[], Some(2)), metric("a", &[], Some(2))],
                "",
                "defined twice",
            ),
            (vec![metric("mine", &[], Some(2))], "mine", "defined twice"),
        ] {
            let taken = BTreeSet::from([taken.to_owned()]);
            let message = definitions(&DefineMetricsResult { metrics: answer }, &taken).unwrap_err();
            assert!(message.contains(error), "{message}");
        }
    }

    #[test]
    fn collection_stops_at_the_first_value_that_does_not_fit() {
        let mut with_const = metric("c", &["x"], Some(2));
        with_const.const_labels.insert("a".into(), "const".into());
        let defined = definitions(
            &DefineMetricsResult {
                metrics: vec![with_const, metric("d", &[], Some(2))],
            },
            &BTreeSet::new(),
        )
        .unwrap();
        let (values, stopped) = samples(
            &defined,
            &CollectMetricsResult {
                metrics: vec![
                    value("c", &["1"], 1.0),
                    value("d", &["extra"], 2.0),
                    value("c", &["2"], 3.0),
                ],
            },
        );
        assert_eq!(values.len(), 1);
        assert_eq!(
            values[0].1.labels,
            [("a".to_owned(), "const".to_owned()), ("x".to_owned(), "1".to_owned())]
        );
        assert!(stopped.unwrap().contains("has 1 label value(s), its definition 0"));
        let (values, stopped) = samples(
            &defined,
            &CollectMetricsResult {
                metrics: vec![value("d", &[], 1.0), value("nope", &[], 2.0)],
            },
        );
        assert_eq!(
            (values.len(), stopped.unwrap().contains("\"nope\" is not defined")),
            (1, true)
        );
        let (_, stopped) = samples(
            &defined,
            &CollectMetricsResult {
                metrics: vec![value("d", &[], 1.0), value("d", &[], 2.0)],
            },
        );
        assert!(stopped.unwrap().contains("twice with the same label values"));
    }

    #[test]
    fn text_format_escapes_and_special_values() {
        let family = Family {
            name: "m".into(),
            help: "a \\ b\nc \"q\"".into(),
            kind: MetricKind::Gauge,
            samples: vec![
                Sample {
                    labels: vec![("l".into(), "x\"\\\ny".into())],
                    value: f64::NAN,
                },
                Sample {
                    labels: vec![],
                    value: f64::NEG_INFINITY,
                },
                Sample {
                    labels: vec![],
                    value: 0.25,
                },
                Sample {
                    labels: vec![],
                    value: 1e300,
                },
            ],
        };
        let text = encode(&[family]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# HELP m a \\\\ b\\nc \"q\"");
        assert_eq!(lines[1], "# TYPE m gauge");
        assert_eq!(lines[2], "m{l=\"x\\\"\\\\\\ny\"} NaN");
        assert_eq!(lines[3], "m -Inf");
        assert_eq!(lines[4], "m 0.25");
        assert_eq!(lines[5].parse::<f64>().ok(), None, "the name is part of the line");
        assert_eq!(lines[5].trim_start_matches("m ").parse::<f64>().unwrap(), 1e300);
    }
}
