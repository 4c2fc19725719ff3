//! Remote plugins behind Kubernetes Services, as CloudNativePG finds them.
//!
//! A Service in the operator's namespace is a plugin when it carries the
//! label `cnpg.io/pluginName` and the annotations `cnpg.io/pluginClientSecret`,
//! `cnpg.io/pluginServerSecret` and `cnpg.io/pluginPort` (and optionally
//! `cnpg.io/pluginServerName`). The operator dials
//! `<service>.<namespace>.svc:<port>` with the client Secret's certificate,
//! trusting the server Secret's `tls.crt` for the server name.
//!
//! Services and Secrets are watched. [`ServiceCatalog`] holds what the
//! watches saw (in kube-runtime reflector stores) and resolves, without any
//! Kubernetes call, each plugin Service with its Secrets
//! ([`ServiceCatalog::resolve_services`]); [`KubernetesServices`] feeds it
//! watch events and applies the difference to the registry: a new
//! Service is connected, a deleted one forgotten, and a change of the Service
//! or of either Secret rebuilds the connection. A Service that is not
//! usable (missing annotation, bad port, missing Secret, bad PEM) is logged,
//! reported as an Event on the Service, and retried; other plugins carry on.
//!
//! The Services' EndpointSlices are watched too: when a registered plugin
//! that is not routable yet (its Pods were starting) gets a ready endpoint,
//! it is probed at once, not at the registry's next interval, so a plugin
//! installed with the resources that use it is routable as soon as it can be.

use std::{
    collections::{BTreeMap, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
    path::Path,
    sync::Arc,
    time::Duration,
};

use futures_util::StreamExt;
use k8s_openapi::api::{
    core::v1::{Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store, store::Writer},
        watcher,
    },
};

use cnpgi_client::client::{ClientOptions, PluginClient, TlsTransport, Transport};

use super::{DiscoveryFuture, DiscoverySource};
use crate::registry::Registry;

/// Label naming the plugin a Service exposes.
pub const PLUGIN_NAME_LABEL: &str = "cnpg.io/pluginName";
/// Annotation naming the Secret with the certificate the operator presents.
pub const CLIENT_SECRET_ANNOTATION: &str = "cnpg.io/pluginClientSecret";
/// Annotation naming the Secret with the plugin's server certificate.
pub const SERVER_SECRET_ANNOTATION: &str = "cnpg.io/pluginServerSecret";
/// Annotation with the plugin's port number.
pub const PORT_ANNOTATION: &str = "cnpg.io/pluginPort";
/// Optional annotation with the name to verify in the server certificate.
pub const SERVER_NAME_ANNOTATION: &str = "cnpg.io/pluginServerName";
/// The label naming the Service an EndpointSlice belongs to (Kubernetes').
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What a plugin Service asks for, read from its label and annotations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginService {
    /// The plugin name (label value).
    pub plugin: String,
    /// The Service name.
    pub service: String,
    /// Its namespace.
    pub namespace: String,
    /// The port to dial.
    pub port: u16,
    /// Secret with the client certificate and key.
    pub client_secret: String,
    /// Secret with the pinned server certificate.
    pub server_secret: String,
    /// Name to verify in the server certificate.
    pub server_name: String,
}

/// Why a plugin Service cannot be used (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// A required annotation is missing or empty.
    #[error("plugin Service {service} is missing the annotation {annotation}")]
    MissingAnnotation {
        /// The Service.
        service: String,
        /// The annotation.
        annotation: &'static str,
    },
    /// The port annotation is not a port number.
    #[error("plugin Service {service} has {PORT_ANNOTATION}={value:?}, which is not a port number")]
    BadPort {
        /// The Service.
        service: String,
        /// The annotation value.
        value: String,
    },
    /// A referenced Secret does not exist (yet).
    #[error("plugin Service {service}: Secret {secret} does not exist")]
    MissingSecret {
        /// The Service.
        service: String,
        /// The Secret.
        secret: String,
    },
    /// A Secret lacks a key or holds unusable PEM.
    #[error("plugin Service {service}: Secret {secret}: {reason}")]
    BadSecret {
        /// The Service.
        service: String,
        /// The Secret.
        secret: String,
        /// What is wrong.
        reason: String,
    },
}

impl ServiceError {
    /// The Event reason for this error (`kubectl describe` shows it).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::MissingAnnotation { .. } => "PluginAnnotationMissing",
            Self::BadPort { .. } => "PluginPortInvalid",
            Self::MissingSecret { .. } => "PluginSecretMissing",
            Self::BadSecret { .. } => "PluginSecretInvalid",
        }
    }
}

impl PluginService {
    /// Reads a Service: `Ok(None)` when it is not a plugin Service (no label).
    pub fn from_service(service: &Service) -> Result<Option<Self>, ServiceError> {
        let Some(plugin) = service.labels().get(PLUGIN_NAME_LABEL).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let name = service.name_any();
        let annotations = service.annotations();
        let required = |annotation: &'static str| {
            annotations
                .get(annotation)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| ServiceError::MissingAnnotation {
                    service: name.clone(),
                    annotation,
                })
        };
        let client_secret = required(CLIENT_SECRET_ANNOTATION)?;
        let server_secret = required(SERVER_SECRET_ANNOTATION)?;
        let port_value = required(PORT_ANNOTATION)?;
        let port = port_value
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| ServiceError::BadPort {
                service: name.clone(),
                value: port_value.clone(),
            })?;
        let server_name = annotations
            .get(SERVER_NAME_ANNOTATION)
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| name.clone());
        Ok(Some(Self {
            plugin: plugin.clone(),
            namespace: service.namespace().unwrap_or_default(),
            service: name,
            port,
            client_secret,
            server_secret,
            server_name,
        }))
    }

    /// `<service>.<namespace>.svc:<port>`: fully qualified, so that
    /// `NO_PROXY` patterns match.
    pub fn address(&self) -> String {
        format!("{}.{}.svc:{}", self.service, self.namespace, self.port)
    }

    /// The TLS transport from the two Secrets' contents.
    pub fn transport(&self, client_secret: &Secret, server_secret: &Secret) -> Result<TlsTransport, ServiceError> {
        let key = |secret: &Secret, secret_name: &str, key: &str| {
            secret
                .data
                .as_ref()
                .and_then(|data| data.get(key))
                .map(|bytes| bytes.0.clone())
                .ok_or_else(|| ServiceError::BadSecret {
                    service: self.service.clone(),
                    secret: secret_name.to_owned(),
                    reason: format!("no {key} key"),
                })
        };
        let bad = |secret: &str| {
            let service = self.service.clone();
            let secret = secret.to_owned();
            move |e: cnpgi_tls::TlsError| ServiceError::BadSecret {
                service,
                secret,
                reason: e.to_string(),
            }
        };
        let client_path = format!("secret {}/{}", self.namespace, self.client_secret);
        let server_path = format!("secret {}/{}", self.namespace, self.server_secret);
        Ok(TlsTransport {
            address: self.address(),
            server_name: self.server_name.clone(),
            client_cert: cnpgi_tls::pem::parse_certificates(
                &key(client_secret, &self.client_secret, "tls.crt")?,
                Path::new(&client_path),
                "tls.crt",
            )
            .map_err(bad(&self.client_secret))?,
            client_key: cnpgi_tls::pem::parse_private_key(
                &key(client_secret, &self.client_secret, "tls.key")?,
                Path::new(&client_path),
                "tls.key",
            )
            .map_err(bad(&self.client_secret))?,
            server_cert: cnpgi_tls::pem::parse_certificates(
                &key(server_secret, &self.server_secret, "tls.crt")?,
                Path::new(&server_path),
                "tls.crt",
            )
            .map_err(bad(&self.server_secret))?,
        })
    }
}

/// A plugin Service resolved with its two Secrets: ready to be connected,
/// with a fingerprint of everything the connection depends on (Service
/// fields and both Secrets' data).
#[derive(Debug)]
pub struct ResolvedService {
    /// What the Service asks for.
    pub spec: PluginService,
    /// Changes whenever the connection must be rebuilt.
    pub fingerprint: u64,
    /// The TLS transport.
    pub transport: TlsTransport,
}

/// Services and Secrets as last seen by the watches.
///
/// Each kind is kept in a kube-runtime reflector store, whose writer buffers
/// a relist and swaps it in when complete (`InitDone`), so that a restarted
/// watch does not make every plugin vanish for a moment.
#[derive(Debug, Default)]
pub struct ServiceCatalog {
    services: Watched<Service>,
    secrets: Watched<Secret>,
}

/// One kind of object: the reflector store, and whether it was listed once
/// (the store's own readiness is only awaitable).
#[derive(Debug)]
struct Watched<K: Resource<DynamicType = ()> + Clone + 'static> {
    writer: Writer<K>,
    listed: bool,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Default for Watched<K> {
    fn default() -> Self {
        Self {
            writer: Writer::default(),
            listed: false,
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Watched<K> {
    fn apply(&mut self, event: &watcher::Event<K>) {
        self.writer.apply_watcher_event(event);
        if matches!(event, watcher::Event::InitDone) {
            self.listed = true;
        }
    }

    fn store(&self) -> Store<K> {
        self.writer.as_reader()
    }
}

impl ServiceCatalog {
    /// Applies a Service watch event.
    pub fn apply_service(&mut self, event: watcher::Event<Service>) {
        self.services.apply(&event);
    }

    /// Applies a Secret watch event.
    pub fn apply_secret(&mut self, event: watcher::Event<Secret>) {
        self.secrets.apply(&event);
    }

    /// Whether both Services and Secrets have been listed once. Before that,
    /// a Service's Secret may only look missing.
    pub fn is_complete(&self) -> bool {
        self.services.listed && self.secrets.listed
    }

    /// Every plugin Service, by Service name: resolved and ready to
    /// connect, or why not.
    pub fn resolve_services(&self) -> BTreeMap<String, Result<ResolvedService, ServiceError>> {
        let secrets = self.secrets.store();
        let mut resolved = BTreeMap::new();
        for service in self.services.store().state() {
            let result = match PluginService::from_service(&service) {
                Ok(None) => continue,
                Ok(Some(spec)) => Self::resolve(&secrets, spec),
                Err(error) => Err(error),
            };
            resolved.insert(service.name_any(), result);
        }
        resolved
    }

    fn resolve(secrets: &Store<Secret>, spec: PluginService) -> Result<ResolvedService, ServiceError> {
        let secret = |name: &str| {
            secrets
                .get(&ObjectRef::new(name).within(&spec.namespace))
                .ok_or_else(|| ServiceError::MissingSecret {
                    service: spec.service.clone(),
                    secret: name.to_owned(),
                })
        };
        let client_secret = secret(&spec.client_secret)?;
        let server_secret = secret(&spec.server_secret)?;
        let transport = spec.transport(&client_secret, &server_secret)?;
        let mut hasher = DefaultHasher::new();
        spec.hash(&mut hasher);
        for secret in [&client_secret, &server_secret] {
            if let Some(data) = &secret.data {
                for (key, value) in data {
                    key.hash(&mut hasher);
                    value.0.hash(&mut hasher);
                }
            }
        }
        Ok(ResolvedService {
            fingerprint: hasher.finish(),
            spec,
            transport,
        })
    }

    /// The Service named `name`, if seen.
    pub fn service(&self, name: &str) -> Option<Arc<Service>> {
        self.services.store().find(|service| service.name_any() == name)
    }
}

/// Watches plugin Services (and their Secrets) in one namespace.
pub struct KubernetesServices {
    client: Client,
    namespace: String,
    options: ClientOptions,
    reporter: Reporter,
    /// How often Services in error are retried when no event arrives. Default 30 s.
    pub retry_interval: Duration,
    /// Addresses to dial instead of `<service>.<namespace>.svc:<port>`, keyed
    /// by that address: for an operator running outside the cluster (e.g.
    /// through `kubectl port-forward`). The server name verified is unchanged.
    pub dial_overrides: BTreeMap<String, String>,
}

impl std::fmt::Debug for KubernetesServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesServices")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl KubernetesServices {
    /// Watches `namespace` (the operator's own) with `client`; Events are
    /// reported as `controller`.
    pub fn new(client: Client, namespace: &str, controller: &str, options: ClientOptions) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            options,
            reporter: Reporter {
                controller: controller.to_owned(),
                instance: std::env::var("POD_NAME").ok(),
            },
            retry_interval: Duration::from_secs(30),
            dial_overrides: BTreeMap::new(),
        }
    }
}

/// What the source registered in the registry (plugin name and
/// fingerprint) and the errors it reported, by Service name.
#[derive(Debug, Default)]
struct Registrations {
    registered: BTreeMap<String, (String, u64)>,
    reported: BTreeMap<String, String>,
}

/// What wakes the source up: a Service or Secret watch event, or the retry
/// timer. Boxed: watch events are large, and every one moves through the
/// merged stream.
enum WakeUp {
    Service(Box<Result<watcher::Event<Service>, watcher::Error>>),
    Secret(Box<Result<watcher::Event<Secret>, watcher::Error>>),
    Endpoints(Box<Result<watcher::Event<EndpointSlice>, watcher::Error>>),
    Retry,
}

/// The Service an EndpointSlice of an add or change belongs to, when it
/// lists a ready endpoint: the moment a plugin behind it can answer.
fn ready_service(event: &watcher::Event<EndpointSlice>) -> Option<&str> {
    let (watcher::Event::Apply(slice) | watcher::Event::InitApply(slice)) = event else {
        return None;
    };
    let ready = slice
        .endpoints
        .iter()
        .flatten()
        .any(|endpoint| endpoint.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false));
    if !ready {
        return None;
    }
    slice.labels().get(SERVICE_NAME_LABEL).map(String::as_str)
}

impl DiscoverySource for KubernetesServices {
    fn name(&self) -> String {
        format!("kubernetes-services:{}", self.namespace)
    }

    fn run(self: Box<Self>, registry: Arc<Registry>) -> DiscoveryFuture {
        Box::pin(async move {
            let services: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
            let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
            let service_events = watcher(services, watcher::Config::default().labels(PLUGIN_NAME_LABEL))
                .default_backoff()
                .map(|event| WakeUp::Service(Box::new(event)));
            let secret_events = watcher(secrets, watcher::Config::default())
                .default_backoff()
                .map(|event| WakeUp::Secret(Box::new(event)));
            let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &self.namespace);
            let endpoint_events = watcher(slices, watcher::Config::default().labels(SERVICE_NAME_LABEL))
                .default_backoff()
                .map(|event| WakeUp::Endpoints(Box::new(event)));
            let retries = futures_util::stream::unfold(self.retry_interval, |interval| async move {
                tokio::time::sleep(interval).await;
                Some((WakeUp::Retry, interval))
            });
            let mut inputs = std::pin::pin!(futures_util::stream::select(
                futures_util::stream::select(service_events, secret_events),
                futures_util::stream::select(endpoint_events, retries),
            ));
            let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
            let mut catalog = ServiceCatalog::default();
            let mut registrations = Registrations::default();
            let source = self.name();
            while let Some(input) = inputs.next().await {
                match input {
                    WakeUp::Service(event) => match *event {
                        Ok(event) => catalog.apply_service(event),
                        Err(error) => {
                            tracing::warn!(%error, "Kubernetes watch of Services failed; retrying with backoff");
                            continue;
                        }
                    },
                    WakeUp::Secret(event) => match *event {
                        Ok(event) => catalog.apply_secret(event),
                        Err(error) => {
                            tracing::warn!(%error, "Kubernetes watch of Secrets failed; retrying with backoff");
                            continue;
                        }
                    },
                    WakeUp::Endpoints(event) => {
                        match *event {
                            Ok(event) => probe_if_arriving(&registry, &registrations, ready_service(&event)),
                            Err(error) => {
                                tracing::warn!(%error, "Kubernetes watch of EndpointSlices failed; retrying with backoff");
                            }
                        }
                        // Endpoints change no registration.
                        continue;
                    }
                    // Nothing changed, but Services in error get another attempt.
                    WakeUp::Retry if registrations.reported.is_empty() => continue,
                    WakeUp::Retry => {}
                }
                if !catalog.is_complete() {
                    continue;
                }
                update_registry(
                    &catalog,
                    &mut registrations,
                    &registry,
                    &recorder,
                    &source,
                    &self.options,
                    &self.dial_overrides,
                )
                .await;
                // The Services and Secrets listed at start are registered.
                registry.first_pass_done(&source);
            }
        })
    }
}

/// Probes at once the plugin registered for `service`, when there is one and
/// it is not routable yet: its Service just got a ready endpoint. In the
/// background: the watches go on meanwhile.
fn probe_if_arriving(registry: &Registry, registrations: &Registrations, service: Option<&str>) {
    let Some((plugin, _)) = service.and_then(|service| registrations.registered.get(service)) else {
        return;
    };
    let Some(plugin) = registry.plugin(plugin) else {
        return;
    };
    if plugin.state().is_routable() {
        return;
    }
    tracing::debug!(
        plugin = plugin.name(),
        "plugin Service has a ready endpoint: probing it now"
    );
    tokio::spawn(async move { plugin.refresh().await });
}

/// Applies the difference between the plugin Services the catalog resolves
/// and what was registered; Services that failed before are attempted again.
async fn update_registry(
    catalog: &ServiceCatalog,
    registrations: &mut Registrations,
    registry: &Registry,
    recorder: &Recorder,
    source_prefix: &str,
    options: &ClientOptions,
    dial_overrides: &BTreeMap<String, String>,
) {
    let resolved = catalog.resolve_services();
    let source = |service: &str| format!("{source_prefix}/{service}");

    // Forget Services that are gone or no longer usable.
    let stale: Vec<String> = registrations
        .registered
        .keys()
        .filter(|service| !matches!(resolved.get(*service), Some(Ok(_))))
        .cloned()
        .collect();
    for service in stale {
        if let Some((plugin, _)) = registrations.registered.remove(&service) {
            registry.remove(&plugin, &source(&service));
        }
    }
    registrations
        .reported
        .retain(|service, _| resolved.contains_key(service));

    for (service, wanted) in resolved {
        let outcome = match wanted {
            Err(error) => Err((error.reason(), error.to_string())),
            Ok(wanted) => {
                let current = registrations.registered.get(&service);
                if current.is_some_and(|(plugin, fp)| *plugin == wanted.spec.plugin && *fp == wanted.fingerprint) {
                    Ok(())
                } else {
                    if let Some((old_plugin, _)) = current
                        && *old_plugin != wanted.spec.plugin
                    {
                        registry.remove(old_plugin, &source(&service));
                    }
                    let plugin = wanted.spec.plugin.clone();
                    let mut transport = wanted.transport;
                    if let Some(address) = dial_overrides.get(&transport.address) {
                        transport.address = address.clone();
                    }
                    match PluginClient::new(&plugin, Transport::Tls(transport), options) {
                        Err(error) => Err(("PluginClientInvalid", error.to_string())),
                        Ok(client) => match registry.add(&source(&service), client).await {
                            Ok(_) => {
                                registrations
                                    .registered
                                    .insert(service.clone(), (plugin, wanted.fingerprint));
                                Ok(())
                            }
                            Err(error) => Err(("PluginNameDuplicate", error.to_string())),
                        },
                    }
                }
            }
        };
        match outcome {
            Ok(()) => {
                registrations.reported.remove(&service);
            }
            Err((reason, message)) => {
                if registrations.reported.get(&service) != Some(&message) {
                    registry.options().metrics.discovery_error(source_prefix);
                    tracing::error!(service, reason, error = %message, "plugin Service cannot be used");
                    if let Some(object) = catalog.service(&service) {
                        report(recorder, &object, reason, &message).await;
                    }
                    registrations.reported.insert(service, message);
                }
            }
        }
    }
}

/// Records a Warning Event on the Service. Each kind of problem has its own
/// reason: the recorder folds repeated Events with the same reason into a
/// series, which would hide a new problem behind an old one.
async fn report(recorder: &Recorder, service: &Service, reason: &str, message: &str) {
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(message.chars().take(1000).collect()),
        action: "DiscoverPlugin".into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &service.object_ref(&())).await {
        tracing::warn!(%error, "cannot record an Event on the plugin Service");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::{ByteString, apimachinery::pkg::apis::meta::v1::ObjectMeta};

    use super::*;

    fn service(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Service {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        Service {
            metadata: ObjectMeta {
                name: Some("hello-world".into()),
                namespace: Some("cnpg-system".into()),
                labels: map(labels),
                annotations: map(annotations),
                ..ObjectMeta::default()
            },
            ..Service::default()
        }
    }

    fn plugin_service(port: &str) -> Service {
        service(
            &[(PLUGIN_NAME_LABEL, "hello.example.com")],
            &[
                (CLIENT_SECRET_ANNOTATION, "client-tls"),
                (SERVER_SECRET_ANNOTATION, "server-tls"),
                (PORT_ANNOTATION, port),
            ],
        )
    }

    fn secret(name: &str, pairs: &[(&str, Vec<u8>)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.clone())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn pem_pair() -> (Vec<u8>, Vec<u8>) {
        let cert = cnpgi_tls::testing::TestCert::builder(&["hello-world"]).self_signed();
        (cert.cert_pem().into_bytes(), cert.key_pem().into_bytes())
    }

    #[test]
    fn reads_a_plugin_service_like_cloudnative_pg() {
        let spec = PluginService::from_service(&plugin_service("9090")).unwrap().unwrap();
        assert_eq!(spec.plugin, "hello.example.com");
        assert_eq!(spec.address(), "hello-world.cnpg-system.svc:9090");
        assert_eq!(spec.server_name, "hello-world", "defaults to the Service name");

        let mut named = plugin_service("9090");
        named
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(SERVER_NAME_ANNOTATION.into(), "plugin.example.com".into());
        assert_eq!(
            PluginService::from_service(&named).unwrap().unwrap().server_name,
            "plugin.example.com"
        );
    }

    #[test]
    fn unlabelled_services_are_not_plugins_and_broken_ones_say_why() {
        assert_eq!(PluginService::from_service(&service(&[], &[])).unwrap(), None);
        let err = PluginService::from_service(&service(&[(PLUGIN_NAME_LABEL, "p")], &[])).unwrap_err();
        assert!(err.to_string().contains(CLIENT_SECRET_ANNOTATION), "{err}");
        for bad in ["http", "0", "70000", ""] {
            let err = PluginService::from_service(&plugin_service(bad)).unwrap_err();
            assert!(
                matches!(
                    err,
                    ServiceError::BadPort { .. } | ServiceError::MissingAnnotation { .. }
                ),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn catalog_needs_both_secrets_with_usable_pem_and_fingerprints_their_data() {
        let (client_crt, client_key) = pem_pair();
        let (server_crt, _) = pem_pair();
        let mut catalog = ServiceCatalog::default();
        assert!(!catalog.is_complete());
        catalog.apply_service(watcher::Event::InitDone);
        assert!(!catalog.is_complete(), "Secrets not listed yet");
        catalog.apply_secret(watcher::Event::InitDone);
        assert!(catalog.is_complete());
        catalog.apply_service(watcher::Event::Apply(plugin_service("9090")));
        let resolved = catalog.resolve_services();
        assert!(
            matches!(&resolved["hello-world"], Err(ServiceError::MissingSecret { secret, .. }) if secret == "client-tls")
        );

        catalog.apply_secret(watcher::Event::Apply(secret(
            "client-tls",
            &[("tls.crt", client_crt.clone()), ("tls.key", client_key.clone())],
        )));
        catalog.apply_secret(watcher::Event::Apply(secret(
            "server-tls",
            &[("tls.crt", b"garbage".to_vec())],
        )));
        let err = catalog.resolve_services().remove("hello-world").unwrap().unwrap_err();
        assert!(
            err.to_string().contains("server-tls") && err.to_string().contains("not valid PEM"),
            "{err}"
        );

        catalog.apply_secret(watcher::Event::Apply(secret("server-tls", &[("tls.crt", server_crt)])));
        let first = catalog.resolve_services().remove("hello-world").unwrap().unwrap();
        assert_eq!(first.transport.address, "hello-world.cnpg-system.svc:9090");

        // Rotation of the server certificate changes the fingerprint.
        let (rotated, _) = pem_pair();
        catalog.apply_secret(watcher::Event::Apply(secret("server-tls", &[("tls.crt", rotated)])));
        let second = catalog.resolve_services().remove("hello-world").unwrap().unwrap();
        assert_ne!(first.fingerprint, second.fingerprint);

        // A relist in progress changes nothing; once done, what it did not
        // return is forgotten.
        catalog.apply_service(watcher::Event::Init);
        assert_eq!(catalog.resolve_services().len(), 1);
        catalog.apply_service(watcher::Event::InitDone);
        assert!(catalog.resolve_services().is_empty());
    }

    fn slice(service: Option<&str>, ready: &[Option<bool>]) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "s",
                "labels": service.map(|s| serde_json::json!({SERVICE_NAME_LABEL: s})).unwrap_or_default(),
            },
            "addressType": "IPv4",
            "endpoints": ready
                .iter()
                .map(|r| serde_json::json!({"addresses": ["10.0.0.1"], "conditions": {"ready": r}}))
                .collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn a_slice_with_a_ready_endpoint_names_its_service() {
        let event = watcher::Event::Apply(slice(Some("hello"), &[Some(false), Some(true)]));
        assert_eq!(ready_service(&event), Some("hello"));
        let event = watcher::Event::InitApply(slice(Some("hello"), &[Some(true)]));
        assert_eq!(ready_service(&event), Some("hello"));
    }

    #[test]
    fn no_ready_endpoint_a_deletion_or_no_service_label_names_nothing() {
        // Unknown readiness counts as not ready, as kube-proxy counts it.
        for ready in [&[][..], &[Some(false)], &[None]] {
            assert_eq!(ready_service(&watcher::Event::Apply(slice(Some("hello"), ready))), None);
        }
        assert_eq!(
            ready_service(&watcher::Event::Delete(slice(Some("hello"), &[Some(true)]))),
            None
        );
        assert_eq!(ready_service(&watcher::Event::Apply(slice(None, &[Some(true)]))), None);
    }
}
