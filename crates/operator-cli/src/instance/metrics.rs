//! `metrics`: the plugins' metrics on `/metrics`, collected on each scrape.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context as _;
use axum::{Router as HttpRouter, extract::State, http::header, response::IntoResponse, routing::get};
use clap::Args;
use cnpgi_client::instance::{
    InstanceOptions,
    metrics::{CONTENT_TYPE, Collection, Family, MetricKind, Sample, collect, encode},
};
use cnpgi_host::serving::{self, ServerLimits};

use super::{InstanceFlags, Severity, deadline};
use cnpgi_process::logging;

/// CloudNativePG's counter of failed collections, by collector.
const ERRORS_TOTAL: &str = "cnpg_collector_collection_errors_total";
/// CloudNativePG's gauge: 1 when the last collection failed.
const LAST_ERROR: &str = "cnpg_collector_last_collection_error";
/// Failed collections, by plugin.
const PLUGIN_ERRORS_TOTAL: &str = "cnpgi_plugin_collection_errors_total";
/// The `collector` label value CloudNativePG uses for plugin metrics.
const COLLECTOR: &str = "Collect.PluginMetrics";

/// Flags of `cnpgi-operator metrics`.
#[derive(Debug, Args)]
pub(crate) struct MetricsArgs {
    #[command(flatten)]
    pub(crate) instance: InstanceFlags,

    /// Address of the plain HTTP server for `/metrics` (CloudNativePG's
    /// instances use port 9187; `0.0.0.0:9187` to be scraped from elsewhere).
    #[arg(long, env = "CNPGI_METRICS_ADDRESS", default_value = "127.0.0.1:9187")]
    pub(crate) address: SocketAddr,

    /// Deadline of each plugin call, in seconds (0: none).
    #[arg(
        long = "plugin-timeout-seconds",
        alias = "plugin-timeout",
        env = "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = 10
    )]
    pub(crate) plugin_timeout: u64,

    /// Log level (an EnvFilter directive; RUST_LOG wins).
    #[arg(long, env = "CNPGI_LOG_LEVEL", default_value = "info")]
    pub(crate) log_level: String,
}

/// Errors counted since start.
#[derive(Debug, Default)]
struct Counts {
    total: u64,
    by_plugin: BTreeMap<String, u64>,
}

#[derive(Clone)]
struct Scraper {
    instance: InstanceFlags,
    options: InstanceOptions,
    counts: Arc<Mutex<Counts>>,
}

fn family(name: &str, help: &str, kind: MetricKind, samples: Vec<Sample>) -> Family {
    Family {
        name: name.to_owned(),
        help: help.to_owned(),
        kind,
        samples,
    }
}

impl Scraper {
    /// One scrape: the Cluster file is read again (it may have changed), the
    /// plugins asked, the errors counted.
    async fn scrape(&self) -> String {
        let collection = match self.instance.read_cluster(false) {
            Ok(cluster) => {
                collect(
                    &cluster,
                    &[ERRORS_TOTAL, LAST_ERROR, PLUGIN_ERRORS_TOTAL],
                    &self.options,
                )
                .await
            }
            Err(error) => Collection {
                families: Vec::new(),
                errors: vec![cnpgi_client::instance::metrics::CollectionError {
                    plugin: "(all)".to_owned(),
                    reason: format!("{error:#}"),
                }],
            },
        };
        for error in &collection.errors {
            tracing::warn!(plugin = %error.plugin, reason = %error.reason, "plugin metrics dropped");
        }
        let own = {
            let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !collection.errors.is_empty() {
                counts.total += 1;
            }
            for error in &collection.errors {
                *counts.by_plugin.entry(error.plugin.clone()).or_default() += 1;
            }
            vec![
                family(
                    ERRORS_TOTAL,
                    "Total errors occurred accessing PostgreSQL for metrics.",
                    MetricKind::Counter,
                    vec![Sample {
                        labels: vec![("collector".to_owned(), COLLECTOR.to_owned())],
                        value: counts.total as f64,
                    }],
                ),
                family(
                    LAST_ERROR,
                    "1 if the last collection ended with error, 0 otherwise.",
                    MetricKind::Gauge,
                    vec![Sample {
                        labels: Vec::new(),
                        value: if collection.errors.is_empty() { 0.0 } else { 1.0 },
                    }],
                ),
                family(
                    PLUGIN_ERRORS_TOTAL,
                    "Scrapes in which a plugin's metrics were (partly) dropped, by plugin.",
                    MetricKind::Counter,
                    counts
                        .by_plugin
                        .iter()
                        .map(|(plugin, count)| Sample {
                            labels: vec![("plugin".to_owned(), plugin.clone())],
                            value: *count as f64,
                        })
                        .collect(),
                ),
            ]
        };
        let mut families = collection.families;
        families.extend(own.into_iter().filter(|f| !f.samples.is_empty()));
        families.sort_by(|a, b| a.name.cmp(&b.name));
        encode(&families)
    }
}

async fn metrics_text(State(scraper): State<Scraper>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], scraper.scrape().await)
}

/// Serves `/metrics` until SIGTERM or SIGINT; exit 1 when the address
/// cannot be listened on.
pub(crate) async fn run_metrics(args: MetricsArgs) -> ExitCode {
    let instance = args.instance.clone();
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            instance.report(Severity::Error, &format!("metrics: {error:#}"));
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: MetricsArgs) -> anyhow::Result<()> {
    logging::init(args.instance.log_format, &args.log_level);
    // Old environment variable names in use, through the subscriber just set up.
    crate::env_names::log_deprecated();
    let scraper = Scraper {
        options: args.instance.options(deadline(args.plugin_timeout)),
        instance: args.instance,
        counts: Arc::default(),
    };
    let app = HttpRouter::new()
        .route("/metrics", get(metrics_text))
        .with_state(scraper);
    let listener =
        std::net::TcpListener::bind(args.address).with_context(|| format!("cannot listen on {}", args.address))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "serving /metrics");
    let handle = axum_server::Handle::new();
    let server = {
        let handle = handle.clone();
        tokio::spawn(async move { serving::serve_plain(listener, app, handle, &ServerLimits::default()).await })
    };
    cnpgi_process::signals::shutdown_signal().await;
    handle.graceful_shutdown(Some(Duration::from_secs(5)));
    server.await.context("the server task failed")??;
    Ok(())
}
