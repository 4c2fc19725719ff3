//! The metric definitions of `cnpgi.metrics.v1.Metrics` ([`MetricSet`]):
//! defined once, and every value collected on a scrape checked against them.
//!
//! CloudNativePG's instance manager calls `Define` then `Collect` on each
//! scrape and uses `fq_name` as it is (no prefix). A collected value whose
//! name is not defined, or whose label values do not match the definition's
//! label names in number, makes it drop the plugin's remaining metrics and
//! count a collection error. [`MetricSet`] keeps the definitions and checks
//! every collected value against them before answering, so the plugin fails
//! loudly in its own logs instead.
//!
//! ```
//! use cnpgi_pluginhelper::lowlevel::metric_set::MetricSet;
//!
//! let metrics = MetricSet::new()
//!     .counter("wal_archive_failures_total", "WAL files that could not be archived", &[])
//!     .gauge("wal_archive_last_segment_age_seconds", "Age of the last archived segment", &["timeline"]);
//! let answer = metrics
//!     .collect([
//!         ("wal_archive_failures_total", 0.0, vec![]),
//!         ("wal_archive_last_segment_age_seconds", 12.5, vec!["1".to_owned()]),
//!     ])
//!     .unwrap();
//! assert_eq!(answer.metrics.len(), 2);
//! assert!(metrics.collect([("undefined", 1.0, vec![])]).is_err());
//! ```

use std::collections::BTreeMap;

use cnpgi_proto::metrics::v1::{
    CollectMetric, CollectMetricsResult, DefineMetricsResult, Metric, MetricType, MetricsCapabilitiesResult,
    metric_type, metrics_capability,
};

/// A collected value that does not fit the definitions.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MetricsError {
    /// No metric of that name was defined.
    #[error("metric {0:?} is collected but not defined")]
    Undefined(String),
    /// The number of label values differs from the definition's label names.
    #[error("metric {name:?} is defined with {expected} label(s) but collected with {found}")]
    LabelCount {
        /// The metric.
        name: String,
        /// Label names in the definition.
        expected: usize,
        /// Label values collected.
        found: usize,
    },
    /// A counter collected with a negative, NaN or infinite value.
    #[error("counter {name:?} collected with {value}, which a counter cannot have")]
    BadCounter {
        /// The metric.
        name: String,
        /// The value.
        value: f64,
    },
}

impl From<MetricsError> for tonic::Status {
    /// `INTERNAL`: the plugin collected something it did not define.
    fn from(error: MetricsError) -> Self {
        tonic::Status::internal(error.to_string())
    }
}

/// The metric definitions of a plugin, by name.
#[derive(Debug, Clone, Default)]
pub struct MetricSet {
    metrics: BTreeMap<String, Metric>,
}

impl MetricSet {
    /// No metrics yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn with(mut self, kind: metric_type::Type, name: &str, help: &str, labels: &[&str]) -> Self {
        self.metrics.insert(
            name.to_owned(),
            Metric {
                fq_name: name.to_owned(),
                help: help.to_owned(),
                variable_labels: labels.iter().map(|l| (*l).to_owned()).collect(),
                const_labels: Default::default(),
                value_type: Some(MetricType { r#type: kind.into() }),
            },
        );
        self
    }

    /// Adds a counter with these label names (values come with each sample).
    pub fn counter(self, name: &str, help: &str, labels: &[&str]) -> Self {
        self.with(metric_type::Type::Counter, name, help, labels)
    }

    /// Adds a gauge with these label names.
    pub fn gauge(self, name: &str, help: &str, labels: &[&str]) -> Self {
        self.with(metric_type::Type::Gauge, name, help, labels)
    }

    /// The `Define` answer.
    pub fn define(&self) -> DefineMetricsResult {
        DefineMetricsResult {
            metrics: self.metrics.values().cloned().collect(),
        }
    }

    /// The `Collect` answer for `(name, value, label values)` samples, each
    /// checked against its definition.
    ///
    /// # Errors
    ///
    /// The first sample that is not defined, has the wrong number of label
    /// values, or gives a counter a negative or non-finite value.
    pub fn collect<N: AsRef<str>>(
        &self,
        samples: impl IntoIterator<Item = (N, f64, Vec<String>)>,
    ) -> Result<CollectMetricsResult, MetricsError> {
        let mut metrics = Vec::new();
        for (name, value, labels) in samples {
            let name = name.as_ref();
            let definition = self
                .metrics
                .get(name)
                .ok_or_else(|| MetricsError::Undefined(name.chars().take(256).collect()))?;
            if labels.len() != definition.variable_labels.len() {
                return Err(MetricsError::LabelCount {
                    name: name.to_owned(),
                    expected: definition.variable_labels.len(),
                    found: labels.len(),
                });
            }
            let is_counter = definition
                .value_type
                .as_ref()
                .is_some_and(|t| t.r#type() == metric_type::Type::Counter);
            if is_counter && !(value.is_finite() && value >= 0.0) {
                return Err(MetricsError::BadCounter {
                    name: name.to_owned(),
                    value,
                });
            }
            metrics.push(CollectMetric {
                value,
                fq_name: name.to_owned(),
                variable_labels: labels,
            });
        }
        Ok(CollectMetricsResult { metrics })
    }

    /// The `GetCapabilities` answer.
    pub fn capabilities(&self) -> MetricsCapabilitiesResult {
        MetricsCapabilitiesResult {
            capabilities: vec![cnpgi_core::capabilities::metrics_rpc(
                metrics_capability::rpc::Type::Metrics,
            )],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> MetricSet {
        MetricSet::new()
            .counter("failures_total", "failures", &["reason"])
            .gauge("age_seconds", "age", &[])
    }

    #[test]
    fn definitions_carry_their_type() {
        let defined = set().define();
        assert_eq!(defined.metrics.len(), 2);
        for metric in defined.metrics {
            let kind = metric.value_type.unwrap().r#type();
            let expected = if metric.fq_name == "failures_total" {
                metric_type::Type::Counter
            } else {
                metric_type::Type::Gauge
            };
            assert_eq!(kind, expected, "{}", metric.fq_name);
        }
    }

    #[test]
    fn collected_values_must_fit_their_definition() {
        let set = set();
        assert!(
            set.collect([("age_seconds", -3.0, vec![])]).is_ok(),
            "gauges may go negative"
        );
        assert_eq!(
            set.collect([("nope", 1.0, vec![])]).unwrap_err(),
            MetricsError::Undefined("nope".into())
        );
        assert_eq!(
            set.collect([("failures_total", 1.0, vec![])]).unwrap_err(),
            MetricsError::LabelCount {
                name: "failures_total".into(),
                expected: 1,
                found: 0
            }
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let err = set
                .collect([("failures_total", bad, vec!["x".to_owned()])])
                .unwrap_err();
            assert!(matches!(err, MetricsError::BadCounter { .. }), "{bad}");
            assert_eq!(tonic::Status::from(err).code(), tonic::Code::Internal);
        }
    }
}
