//! The Metrics service of a declarative plugin: definitions given once,
//! samples collected on every scrape and checked against them.

use std::sync::Arc;

use cnpgi_proto::metrics::v1::{
    CollectMetricsRequest, CollectMetricsResult, DefineMetricsRequest, DefineMetricsResult, MetricsCapabilitiesRequest,
    MetricsCapabilitiesResult, metrics_server,
};
use tonic::{Request, Response, Status};

use super::{AsyncHandler, BoxedHandler, Plugin, Shared, boxed};
use crate::{
    cluster::{Cluster, decode_cluster},
    lowlevel::MetricSet,
    parameters::Parameters,
};

/// One collected value of a defined metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric's name, as defined.
    pub name: String,
    /// The value.
    pub value: f64,
    /// The label values, in the order of the definition's label names.
    pub labels: Vec<String>,
}

impl Sample {
    /// A sample without labels.
    pub fn new(name: impl Into<String>, value: f64) -> Self {
        Self {
            name: name.into(),
            value,
            labels: Vec::new(),
        }
    }

    /// The same sample with these label values.
    pub fn with_labels<I, S>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.labels = labels.into_iter().map(Into::into).collect();
        self
    }
}

/// What the collect handler receives.
#[derive(Debug, Clone)]
pub struct MetricsCall<P> {
    /// The Cluster.
    pub cluster: Cluster,
    /// This plugin's parameters in it.
    pub parameters: P,
}

/// The definitions and the collect handler, once registered.
pub(super) type Handlers<P> = Option<Registered<P>>;

/// The definitions and the collect handler.
pub(super) struct Registered<P> {
    set: MetricSet,
    collect: BoxedHandler<MetricsCall<P>, Vec<Sample>>,
}

impl<P: Parameters> Plugin<P> {
    /// The plugin's metrics: `set` is what `Define` answers; `collect`
    /// gives the values on each scrape, which the SDK checks against `set`
    /// (an undefined name, a wrong number of labels or a bad counter value is
    /// an `INTERNAL` error, rather than metrics CloudNativePG drops).
    pub fn metrics(mut self, set: MetricSet, collect: impl AsyncHandler<MetricsCall<P>, Vec<Sample>>) -> Self {
        self.handlers.metrics = Some(Registered {
            set,
            collect: boxed(collect),
        });
        self
    }
}

/// The Metrics service of a [`Plugin`], dispatching to its handler.
pub struct MetricsService<P>(pub(super) Arc<Shared<P>>);

impl<P: Parameters> MetricsService<P> {
    fn handlers(&self) -> Result<&Registered<P>, Status> {
        self.0
            .handlers
            .metrics
            .as_ref()
            .ok_or_else(|| Status::unimplemented("Metrics is not implemented by this plugin"))
    }
}

#[tonic::async_trait]
impl<P: Parameters> metrics_server::Metrics for MetricsService<P> {
    async fn get_capabilities(
        &self,
        _: Request<MetricsCapabilitiesRequest>,
    ) -> Result<Response<MetricsCapabilitiesResult>, Status> {
        Ok(Response::new(self.handlers()?.set.capabilities()))
    }

    async fn define(&self, _: Request<DefineMetricsRequest>) -> Result<Response<DefineMetricsResult>, Status> {
        Ok(Response::new(self.handlers()?.set.define()))
    }

    async fn collect(&self, request: Request<CollectMetricsRequest>) -> Result<Response<CollectMetricsResult>, Status> {
        let handlers = self.handlers()?;
        let cluster = decode_cluster(&request.into_inner().cluster_definition)?;
        let parameters = self.0.parameters(&cluster)?;
        let samples = (handlers.collect)(MetricsCall { cluster, parameters }).await?;
        let answer = handlers
            .set
            .collect(samples.into_iter().map(|s| (s.name, s.value, s.labels)))?;
        Ok(Response::new(answer))
    }
}
