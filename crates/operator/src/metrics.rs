//! Prometheus metrics of plugin calls, readiness and discovery.
//!
//! One [`Metrics`] value is shared (cheaply cloned) by every client (as their
//! [`CallObserver`]), the registry and the discovery sources;
//! [`Metrics::register`] exposes it in a `prometheus_client` registry, under
//! the `cnpgi_plugin_` prefix.

use std::time::Duration;

use cnpgi_client::client::CallObserver;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// Labels of a call: which plugin, which RPC (`Service/Method`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Plugin name.
    pub plugin: String,
    /// RPC, e.g. `OperatorLifecycle/LifecycleHook`.
    pub method: String,
}

/// Labels of a failed call: plugin, RPC and gRPC code name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Plugin name.
    pub plugin: String,
    /// RPC.
    pub method: String,
    /// gRPC status code, e.g. `Unavailable`.
    pub code: String,
}

/// Labels naming one plugin.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// Plugin name.
    pub plugin: String,
}

/// Labels naming one discovery source.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// Source name, e.g. `kubernetes-services:cnpg-system`.
    pub source: String,
}

fn latency_histogram() -> Histogram {
    // 0.1 ms to about 3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// The operator's plugin metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    latency: Family<CallLabels, Histogram, fn() -> Histogram>,
    ready: Family<PluginLabels, Gauge>,
    discovery_errors: Family<SourceLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            ready: Family::default(),
            discovery_errors: Family::default(),
        }
    }
}

impl Metrics {
    /// Adds every metric to `registry`.
    ///
    /// ```
    /// let metrics = cnpgi_operator::metrics::Metrics::default();
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// metrics.register(&mut registry);
    /// metrics.record_call("p.example.com", "Identity/Probe", std::time::Duration::from_millis(2), None);
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    /// assert!(text.contains(r#"cnpgi_plugin_calls_total{plugin="p.example.com",method="Identity/Probe"} 1"#));
    /// ```
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("cnpgi_plugin");
        registry.register("calls", "Calls made to plugins", self.calls.clone());
        registry.register(
            "call_errors",
            "Plugin calls that failed, by gRPC code",
            self.errors.clone(),
        );
        registry.register_with_unit(
            "call_duration",
            "Duration of plugin calls",
            prometheus_client::registry::Unit::Seconds,
            self.latency.clone(),
        );
        registry.register(
            "ready",
            "1 when the plugin is routable, 0 otherwise",
            self.ready.clone(),
        );
        registry.register(
            "discovery_errors",
            "Plugins a discovery source could not register",
            self.discovery_errors.clone(),
        );
    }

    /// Records one call; `code` is `None` for success.
    pub fn record_call(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
        let labels = CallLabels {
            plugin: plugin.to_owned(),
            method: method.to_owned(),
        };
        self.calls.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if let Some(code) = code {
            self.errors
                .get_or_create(&ErrorLabels {
                    plugin: labels.plugin,
                    method: labels.method,
                    code: format!("{code:?}"),
                })
                .inc();
        }
    }

    /// Sets the readiness gauge of `plugin`.
    pub fn set_ready(&self, plugin: &str, ready: bool) {
        self.ready
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .set(i64::from(ready));
    }

    /// Forgets the readiness gauge of a removed plugin.
    pub fn forget(&self, plugin: &str) {
        self.ready.remove(&PluginLabels {
            plugin: plugin.to_owned(),
        });
    }

    /// Counts a discovery error of `source`.
    pub fn discovery_error(&self, source: &str) {
        self.discovery_errors
            .get_or_create(&SourceLabels {
                source: source.to_owned(),
            })
            .inc();
    }

    /// Calls recorded for `plugin`/`method` so far (for tests and diagnostics).
    pub fn calls(&self, plugin: &str, method: &str) -> u64 {
        self.calls
            .get_or_create(&CallLabels {
                plugin: plugin.to_owned(),
                method: method.to_owned(),
            })
            .get()
    }

    /// Failures of `plugin`/`method` with `code` so far.
    pub fn errors(&self, plugin: &str, method: &str, code: tonic::Code) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                plugin: plugin.to_owned(),
                method: method.to_owned(),
                code: format!("{code:?}"),
            })
            .get()
    }
}

/// Plugin clients report their calls here (`ClientOptions::observer`).
impl CallObserver for Metrics {
    fn call_ended(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
        self.record_call(plugin, method, elapsed, code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_observed_by_a_client_are_counted() {
        let metrics = Metrics::default();
        let observer: std::sync::Arc<dyn CallObserver> = std::sync::Arc::new(metrics.clone());
        observer.call_ended("p", "Identity/Probe", Duration::from_millis(1), None);
        observer.call_ended(
            "p",
            "Identity/Probe",
            Duration::from_millis(1),
            Some(tonic::Code::Unavailable),
        );
        assert_eq!(metrics.calls("p", "Identity/Probe"), 2);
        assert_eq!(metrics.errors("p", "Identity/Probe", tonic::Code::Unavailable), 1);
    }
}
