//! `cnpgi-operator doctor` (also `kubectl cnpgi doctor`): why an operator
//! cannot use a plugin behind a Kubernetes Service, field by field.
//!
//! For each plugin Service (found by its `cnpg.io/pluginName` label in the
//! operator's namespace), as CloudNativePG v1.30 and cnpgi-operator read it:
//!
//! 1. the label and annotations ([`service`]);
//! 2. its ready endpoints ([`service::ready_endpoints`]);
//! 3. the Secrets the annotations name and their certificates as both sides
//!    use them: dates, the server certificate's names against the name the
//!    operator verifies, key usages, the key pair, the chains against what
//!    each side trusts, the plugin's side read from its Pod's flags
//!    ([`secrets`], [`certs`], [`plugin_pod`]);
//! 4. a dial of every ready Pod with the operator's own TLS configuration and
//!    the probing sequence ([`dial`]);
//! 5. what the Clusters, Backups and ScheduledBackups that use the plugin
//!    need of it, against what it advertises ([`clusters`]).
//!
//! Every finding is one line ([`finding`]); exit 0 when everything holds, 1
//! when something does not, 2 when the doctor itself cannot run (no
//! kubeconfig, the API server unreachable).

mod certs;
mod clusters;
mod dial;
mod finding;
mod plugin_pod;
mod secrets;
mod service;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use cnpgi_client::{client::TlsTransport, probe::PluginInfo};
use cnpgi_host::discovery::kubernetes::{
    CLIENT_SECRET_ANNOTATION, PLUGIN_NAME_LABEL, PORT_ANNOTATION, SERVER_SECRET_ANNOTATION, SERVICE_NAME_LABEL,
};
use k8s_openapi::api::{
    core::v1::{Pod, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    config::{KubeConfigOptions, Kubeconfig},
};
use rustls_pki_types::UnixTime;

use self::{
    clusters::Use,
    dial::{Failure, Outcome},
    finding::{Finding, Object, PluginSummary, Report},
    plugin_pod::Located,
    secrets::Chain,
    service::{PluginService, annotation_field, label_field},
};

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// One line per finding, one per plugin, and a verdict.
    Text,
    /// One JSON document (`passed`, `plugins`, `findings`).
    Json,
}

/// `--dial`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Dial {
    /// `service` inside a Pod (KUBERNETES_SERVICE_HOST set), `port-forward` elsewhere.
    Auto,
    /// `<service>.<namespace>.svc:<port>`, as the operator dials it (needs the cluster's DNS).
    Service,
    /// Every ready Pod behind the Service, through the API server's port-forward.
    PortForward,
}

/// Flags of `cnpgi-operator doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The plugins to examine, by name (their Service's `cnpg.io/pluginName`
    /// label); none: every plugin Service found.
    #[arg(value_name = "PLUGIN")]
    pub(crate) plugins: Vec<String>,

    /// The namespace of the plugin Services: the operator's (CloudNativePG's
    /// `cnpg-system`, cnpgi-operator's `cnpgi-system`). Default: the
    /// kubeconfig context's.
    #[arg(long, short = 'n', env = "CNPGI_NAMESPACE", value_name = "NS")]
    pub(crate) namespace: Option<String>,

    /// Look for plugin Services in every namespace.
    #[arg(long, short = 'A', env = "CNPGI_ALL_NAMESPACES", conflicts_with = "namespace")]
    pub(crate) all_namespaces: bool,

    /// The kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then the
    /// in-cluster service account).
    #[arg(long, env = "CNPGI_KUBECONFIG", value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,

    /// The kubeconfig context (default: its current context).
    #[arg(long, env = "CNPGI_CONTEXT", value_name = "NAME")]
    pub(crate) context: Option<String>,

    /// `text`: one line per finding; `json`: one document, for scripts.
    #[arg(long, short = 'o', env = "CNPGI_OUTPUT", value_enum, default_value = "text")]
    pub(crate) output: Output,

    /// How the plugin is dialled: `service` as the operator dials it (from
    /// inside the cluster), `port-forward` each ready Pod through the API
    /// server, with the same TLS server name; `auto`: `service` inside a
    /// Pod, `port-forward` elsewhere.
    #[arg(long, env = "CNPGI_DIAL", value_enum, default_value = "auto")]
    pub(crate) dial: Dial,

    /// Deadline of each Kubernetes API call, each connection and each
    /// plugin call, in seconds.
    #[arg(long, env = "CNPGI_TIMEOUT_SECONDS", value_name = "SECONDS", default_value = "10",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout_seconds: u64,
}

/// Runs the doctor; prints the report; exit 0, 1 or 2.
pub(crate) async fn doctor(args: DoctorArgs) -> ExitCode {
    match examine_all(&args).await {
        Ok(report) => {
            match args.output {
                Output::Text => print!("{}", report.text()),
                Output::Json => match serde_json::to_string_pretty(&report.json()) {
                    Ok(json) => println!("{json}"),
                    Err(error) => {
                        eprintln!("error: cannot write the report as JSON: {error}");
                        return ExitCode::from(2);
                    }
                },
            }
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// What every examination shares.
struct Context {
    client: Client,
    timeout: Duration,
    dial: Dial,
    now: UnixTime,
}

impl Context {
    /// `call` within the deadline, its error naming `what`.
    async fn call<T>(&self, what: &str, call: impl Future<Output = Result<T, kube::Error>>) -> anyhow::Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.with_context(|| format!("cannot {what}")),
            Err(_) => anyhow::bail!("cannot {what}: no answer within {} s", self.timeout.as_secs()),
        }
    }
}

/// The kube client of `--kubeconfig`/`--context` (or the usual inference),
/// every request bounded by `timeout`; and the context's namespace.
async fn kube_client(args: &DoctorArgs, timeout: Duration) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("cannot use the kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("cannot use the kubeconfig")?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a cluster")?,
    };
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).context("cannot make a Kubernetes client")?;
    Ok((client, namespace))
}

async fn examine_all(args: &DoctorArgs) -> anyhow::Result<Report> {
    let timeout = Duration::from_secs(args.timeout_seconds);
    let (client, context_namespace) = kube_client(args, timeout).await?;
    let namespace = (!args.all_namespaces).then(|| args.namespace.clone().unwrap_or(context_namespace));
    let cx = Context {
        client,
        timeout,
        dial: match args.dial {
            Dial::Auto if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => Dial::Service,
            Dial::Auto => Dial::PortForward,
            other => other,
        },
        now: UnixTime::now(),
    };
    let searched = match &namespace {
        Some(namespace) => format!("namespace {namespace}"),
        None => "any namespace".to_owned(),
    };
    let services_api: Api<Service> = match &namespace {
        Some(namespace) => Api::namespaced(cx.client.clone(), namespace),
        None => Api::all(cx.client.clone()),
    };
    let all_services = cx
        .call(
            &format!("list the Services of {searched}"),
            services_api.list(&ListParams::default()),
        )
        .await?
        .items;
    let labelled: Vec<&Service> = all_services
        .iter()
        .filter(|s| s.labels().contains_key(PLUGIN_NAME_LABEL))
        .collect();

    let mut report = Report::default();
    let (uses, notes) = clusters::list_uses(&cx.client, timeout).await;
    report.findings.extend(notes);

    let mut chosen: Vec<&Service> = Vec::new();
    if args.plugins.is_empty() {
        chosen.extend(labelled.iter().copied());
        report
            .findings
            .extend(all_services.iter().filter_map(service::unlabelled));
        if chosen.is_empty() {
            report.findings.push(Finding {
                problem: format!(
                    "no Service in {searched} carries the label {PLUGIN_NAME_LABEL}: no plugin is registered there"
                ),
                fix: "deploy the plugins in the operator's namespace (--namespace), or label their Services".into(),
                plugin: None,
                ..service::missing_plugin("*", &searched, namespace.as_deref(), &all_services)
            });
        }
    } else {
        for plugin in &args.plugins {
            let found: Vec<&Service> = labelled
                .iter()
                .copied()
                .filter(|s| s.labels().get(PLUGIN_NAME_LABEL) == Some(plugin))
                .collect();
            if found.is_empty() {
                report.findings.push(service::missing_plugin(
                    plugin,
                    &searched,
                    namespace.as_deref(),
                    &all_services,
                ));
            }
            chosen.extend(found);
        }
    }
    let mut seen = BTreeSet::new();
    chosen.retain(|s| seen.insert((s.namespace(), s.name_any())));

    let read: Vec<(&Service, PluginService, Vec<Finding>)> = chosen
        .into_iter()
        .map(|s| {
            let (resolved, findings) = service::check_service(s);
            (s, resolved, findings)
        })
        .collect();
    let resolved: Vec<PluginService> = labelled.iter().map(|s| service::check_service(s).0).collect();
    let duplicates = service::duplicates(&resolved);
    for (service, resolved, mut findings) in read {
        findings.extend(duplicates.iter().filter(|f| f.object == resolved.object()).cloned());
        let (summary, more) = examine(&cx, service, &resolved, &uses).await;
        findings.extend(more);
        for finding in &mut findings {
            finding.service = Some(summary.service.clone());
        }
        report.findings.extend(findings);
        report.plugins.push(summary);
    }
    Ok(report)
}

/// Everything about one plugin Service past its label and annotations.
async fn examine(
    cx: &Context,
    service: &Service,
    resolved: &PluginService,
    uses: &[Use],
) -> (PluginSummary, Vec<Finding>) {
    let mut summary = PluginSummary {
        name: resolved.plugin.clone(),
        service: format!("{}/{}", resolved.namespace, resolved.name),
        address: resolved.address(),
        server_name: Some(resolved.server_name.clone()),
        ..PluginSummary::default()
    };
    let mut used_by: Vec<String> = uses
        .iter()
        .filter(|u| u.plugin == resolved.plugin)
        .map(|u| u.object.to_string())
        .collect();
    used_by.dedup();
    summary.used_by = used_by;
    let mut findings = Vec::new();
    let namespace = &resolved.namespace;
    let broken = |check: &'static str, what: &str, error: anyhow::Error| {
        Finding::error(
            check,
            resolved.object(),
            None,
            format!("{what} failed: {error:#}"),
            "let the doctor read it (RBAC: get and list), or run it again".into(),
        )
        .for_plugin(&resolved.plugin)
    };

    // Endpoints, and the Pods behind them.
    let pods_api: Api<Pod> = Api::namespaced(cx.client.clone(), namespace);
    let selector = service.spec.as_ref().and_then(|s| s.selector.clone());
    let selected: Vec<Pod> = match selector.as_ref().filter(|s| !s.is_empty()) {
        None => Vec::new(),
        Some(labels) => {
            let selector = labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            match cx
                .call(
                    &format!("list the Pods {selector} of namespace {namespace}"),
                    pods_api.list(&ListParams::default().labels(&selector)),
                )
                .await
            {
                Ok(list) => list.items,
                Err(error) => {
                    findings.push(broken("service.pods", "listing the Service's Pods", error).note());
                    Vec::new()
                }
            }
        }
    };
    let mut endpoints = Vec::new();
    if resolved.port.is_some() {
        let slices: Api<EndpointSlice> = Api::namespaced(cx.client.clone(), namespace);
        let listed = cx
            .call(
                &format!("list the EndpointSlices of Service {}", summary.service),
                slices.list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={}", resolved.name))),
            )
            .await;
        match listed {
            Ok(list) => {
                endpoints = service::ready_endpoints(&list.items, &resolved.port_name);
                if endpoints.is_empty() {
                    findings.push(service::no_ready_endpoint(resolved, selector.as_ref(), &selected));
                }
            }
            Err(error) => findings.push(broken("service.endpoints", "listing the EndpointSlices", error)),
        }
    }
    summary.ready_endpoints = endpoints.len();

    // The Secrets.
    let secrets_api: Api<Secret> = Api::namespaced(cx.client.clone(), namespace);
    let mut secrets = SecretCache {
        api: &secrets_api,
        cx,
        service: resolved,
        fetched: BTreeMap::new(),
    };
    let pinned: Option<Chain> = secrets
        .check(
            SERVER_SECRET_ANNOTATION,
            resolved.server_secret.as_deref(),
            "trust the plugin's certificate",
            &mut findings,
            |secret| secrets::check_server_secret(resolved, secret, cx.now),
        )
        .await;
    let presented = secrets
        .check(
            CLIENT_SECRET_ANNOTATION,
            resolved.client_secret.as_deref(),
            "present a client certificate",
            &mut findings,
            |secret| secrets::check_client_secret(resolved, secret, cx.now),
        )
        .await;

    // What the plugin's Pod serves and trusts.
    let ready_pods: BTreeSet<&str> = endpoints.iter().filter_map(|e| e.pod.as_deref()).collect();
    let pod = selected
        .iter()
        .find(|p| ready_pods.contains(p.name_any().as_str()))
        .or(selected.first());
    let has_cert_error = |findings: &[Finding], secret: &str| {
        findings
            .iter()
            .any(|f| f.object == Object::secret(namespace, secret) && f.field.as_deref() == Some("data[\"tls.crt\"]"))
    };
    if let Some(pod) = pod {
        let files = plugin_pod::plugin_files(pod);
        let pod_name = format!("Pod {namespace}/{}", files.pod);
        // The server side: what the plugin serves, verified as the operator verifies it.
        if let (Some(pinned), Some(server_secret)) = (&pinned, &resolved.server_secret) {
            let served: Option<(Chain, String)> = match &files.server_cert {
                Located::Secret(file) if file.secret != *server_secret || file.key != "tls.crt" => {
                    match secrets.get(&file.secret, &mut findings).await {
                        Ok(Some(secret)) => secrets::data(
                            &resolved.plugin,
                            &secret,
                            &file.key,
                            "the certificate the plugin serves",
                        )
                        .ok()
                        .and_then(|pem| {
                            cnpgi_tls::pem::parse_certificates(pem, std::path::Path::new(&file.key), "certificate").ok()
                        })
                        .map(|chain| {
                            (
                                chain,
                                format!(
                                    "{pod_name} serves Secret {}'s {} ({} {})",
                                    file.secret, file.key, file.named_by, file.path
                                ),
                            )
                        }),
                        Ok(None) | Err(()) => None,
                    }
                }
                _ => Some((pinned.clone(), String::new())),
            };
            if let Some((chain, how)) = served
                && let Err(reason) = certs::verify_server(&chain, pinned, &resolved.server_name, cx.now)
            {
                if how.is_empty() {
                    if !has_cert_error(&findings, server_secret) {
                        findings.push(
                            Finding::error(
                                "cert.chain",
                                Object::secret(namespace, server_secret),
                                Some("data[\"tls.crt\"]"),
                                format!("the operator would refuse this certificate: {reason}"),
                                "issue the plugin a certificate the operator accepts".into(),
                            )
                            .for_plugin(&resolved.plugin),
                        );
                    }
                } else {
                    findings.push(
                        Finding::error(
                            "cert.served",
                            resolved.object(),
                            Some(&annotation_field(SERVER_SECRET_ANNOTATION)),
                            format!(
                                "names the Secret {server_secret}, whose tls.crt the operator trusts, but {how}: {} is refused ({reason})",
                                certs::subject(&chain[0])
                            ),
                            "name the Secret the plugin serves here, or make the plugin serve this one (--server-cert)".into(),
                        )
                        .for_plugin(&resolved.plugin),
                    );
                }
            }
        }
        // The client side: what the operator presents, verified as the plugin verifies it.
        match &files.client_cert {
            Located::Secret(file) => {
                if let (Some((chain, _)), Some(client_secret)) = (&presented, &resolved.client_secret) {
                    let trusted = match secrets.get(&file.secret, &mut findings).await {
                        Ok(None) => {
                            findings.push(
                                Finding::error(
                                    "cert.trust",
                                    Object::new("Pod", namespace, &files.pod),
                                    Some("spec.volumes"),
                                    format!("mounts the Secret {} for {} {}, which does not exist: the Pod cannot start as it is", file.secret, file.named_by, file.path),
                                    format!("create the Secret {} or mount the client Secret {client_secret}", file.secret),
                                )
                                .for_plugin(&resolved.plugin),
                            );
                            None
                        }
                        Err(()) => None,
                        Ok(Some(secret)) => match secrets::data(&resolved.plugin, &secret, &file.key, "what the plugin trusts") {
                            Err(finding) => {
                                findings.push(*finding);
                                None
                            }
                            Ok(pem) => match cnpgi_tls::pem::parse_certificates(pem, std::path::Path::new(&file.key), "certificate") {
                                Ok(trusted) => Some(trusted),
                                Err(error) => {
                                    findings.push(
                                        Finding::error(
                                            "cert.parse",
                                            Object::secret(namespace, &file.secret),
                                            Some(&format!("data[\"{}\"]", file.key)),
                                            format!("is not PEM certificates ({error}); the plugin trusts it ({} {})", file.named_by, file.path),
                                            "store the client CA or certificate there".into(),
                                        )
                                        .for_plugin(&resolved.plugin),
                                    );
                                    None
                                }
                            },
                        },
                    };
                    if let Some(trusted) = trusted
                        && let Err(reason) = certs::verify_client(chain, &trusted, cx.now)
                        && !has_cert_error(&findings, client_secret)
                    {
                        let shown: Vec<String> = trusted
                            .iter()
                            .map(|c| format!("{}{}", certs::subject(c), if certs::is_ca(c) { " (CA)" } else { "" }))
                            .collect();
                        findings.push(
                            Finding::error(
                                "cert.trust",
                                Object::secret(namespace, client_secret),
                                Some("data[\"tls.crt\"]"),
                                format!(
                                    "certificate {} is refused by the plugin, which trusts {} from Secret {}'s {} ({pod_name}: {} {}): {reason}",
                                    certs::subject(&chain[0]),
                                    shown.join(", "),
                                    file.secret,
                                    file.key,
                                    file.named_by,
                                    file.path
                                ),
                                format!(
                                    "issue the client certificate from the CA in Secret {} ({}), or point the plugin's {} at this Secret's tls.crt",
                                    file.secret, file.key, file.named_by
                                ),
                            )
                            .for_plugin(&resolved.plugin),
                        );
                    }
                }
            }
            Located::NotSet => findings.push(
                Finding::error(
                    "cert.trust",
                    Object::new("Pod", namespace, &files.pod),
                    Some("spec.containers[].args"),
                    "sets neither --client-cert nor CLIENT_CERT: what the plugin trusts is not checked here (the dial below still tests it)".into(),
                    String::new(),
                )
                .for_plugin(&resolved.plugin)
                .note(),
            ),
            Located::Elsewhere { path, reason } => findings.push(
                Finding::error(
                    "cert.trust",
                    Object::new("Pod", namespace, &files.pod),
                    Some("spec.containers[].volumeMounts"),
                    format!("the plugin trusts {path}, which the doctor cannot trace to a Secret ({reason}): it is not checked here (the dial below still tests it)"),
                    String::new(),
                )
                .for_plugin(&resolved.plugin)
                .note(),
            ),
        }
    }

    // The dial, and what the users need.
    let mut info: Option<PluginInfo> = None;
    if let (Some(address), Some(pinned), Some((client_cert, client_key))) = (resolved.address(), &pinned, &presented) {
        let transport = |dial_address: String| TlsTransport {
            address: dial_address,
            server_name: resolved.server_name.clone(),
            client_cert: client_cert.clone(),
            client_key: client_key.clone_key(),
            server_cert: pinned.clone(),
        };
        let mut targets: Vec<(String, Option<dial::Forward>, String)> = Vec::new();
        match cx.dial {
            Dial::Service | Dial::Auto => targets.push((address.clone(), None, address.clone())),
            Dial::PortForward => {
                for endpoint in &endpoints {
                    let Some(pod) = &endpoint.pod else { continue };
                    let via = format!("Pod {namespace}/{pod} port {} (port-forward)", endpoint.port);
                    match dial::forward(pods_api.clone(), pod, endpoint.port).await {
                        Ok(forward) => targets.push((forward.address.clone(), Some(forward), via)),
                        Err(error) => findings.push(
                            Finding::error(
                                "dial.forward",
                                resolved.object(),
                                None,
                                format!("cannot listen on loopback to port-forward {via}: {error}"),
                                "run the doctor with --dial service from inside the cluster".into(),
                            )
                            .for_plugin(&resolved.plugin)
                            .note(),
                        ),
                    }
                }
            }
        }
        for (dial_address, forward, via) in targets {
            let outcome = dial::dial(&resolved.plugin, transport(dial_address), cx.timeout).await;
            drop(forward);
            match outcome {
                Outcome::Probed(probed) => {
                    summary.dialled.push((via, true));
                    if info.is_none() {
                        summary.version = Some(probed.metadata.version.clone());
                        summary.services = probed.service_names();
                        info = Some(*probed);
                    }
                }
                Outcome::Failed(failure) => {
                    findings.push(dial_finding(resolved, &address, &via, failure));
                    summary.dialled.push((via, false));
                }
            }
        }
    }
    let needs: Vec<&Use> = uses
        .iter()
        .filter(|u| u.plugin == resolved.plugin && u.need != clusters::Need::Enabled)
        .collect();
    match &info {
        Some(info) => findings.extend(clusters::unmet(uses, &resolved.plugin, &summary.service, info)),
        None if !needs.is_empty() => findings.push(
            Finding::error(
                "clusters.need",
                resolved.object(),
                None,
                format!(
                    "the plugin could not be probed, so what {} need of it is not checked",
                    needs
                        .iter()
                        .map(|u| u.object.to_string())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "fix the findings above".into(),
            )
            .for_plugin(&resolved.plugin)
            .note(),
        ),
        None => {}
    }
    (summary, findings)
}

/// The Secrets of a plugin's namespace, each read once.
struct SecretCache<'a> {
    api: &'a Api<Secret>,
    cx: &'a Context,
    service: &'a PluginService,
    fetched: BTreeMap<String, Option<Secret>>,
}

impl SecretCache<'_> {
    /// `Ok(None)` when it does not exist; `Err(())` when it cannot be read
    /// (a finding says why).
    async fn get(&mut self, name: &str, findings: &mut Vec<Finding>) -> Result<Option<Secret>, ()> {
        if let Some(secret) = self.fetched.get(name) {
            return Ok(secret.clone());
        }
        let namespace = &self.service.namespace;
        match self
            .cx
            .call(&format!("get the Secret {namespace}/{name}"), self.api.get_opt(name))
            .await
        {
            Ok(secret) => {
                self.fetched.insert(name.to_owned(), secret.clone());
                Ok(secret)
            }
            Err(error) => {
                findings.push(
                    Finding::error(
                        "secret.read",
                        self.service.object(),
                        None,
                        format!("reading the Secret {name} failed: {error:#}"),
                        "let the doctor read Secrets of this namespace (RBAC: get secrets), or run it again".into(),
                    )
                    .for_plugin(&self.service.plugin),
                );
                Err(())
            }
        }
    }

    /// The Secret the Service's `annotation` names (`name`, if it names
    /// one) checked by `check`: what the check makes of it, its findings
    /// added to `findings`. `None` when it is not named, cannot be read or
    /// is missing (then a finding says the plugin's side cannot `needed_to`
    /// without it).
    async fn check<T>(
        &mut self,
        annotation: &str,
        name: Option<&str>,
        needed_to: &str,
        findings: &mut Vec<Finding>,
        check: impl FnOnce(&Secret) -> (Option<T>, Vec<Finding>),
    ) -> Option<T> {
        let name = name?;
        match self.get(name, findings).await {
            Err(()) => None,
            Ok(None) => {
                findings.push(secrets::missing(self.service, annotation, name, needed_to));
                None
            }
            Ok(Some(secret)) => {
                let (checked, more) = check(&secret);
                findings.extend(more);
                checked
            }
        }
    }
}

/// The finding of a failed dial, on the object whose field caused it.
fn dial_finding(resolved: &PluginService, address: &str, via: &str, failure: Failure) -> Finding {
    let plugin = &resolved.plugin;
    let dialled = if via == address {
        format!("dialling {address}")
    } else {
        format!("dialling {address} through {via}")
    };
    let on_service = |check: &'static str, field: Option<String>, problem: String, fix: &str| {
        Finding::error(check, resolved.object(), field.as_deref(), problem, fix.to_owned()).for_plugin(plugin)
    };
    let on_secret = |check: &'static str, secret: &Option<String>, problem: String, fix: &str| {
        Finding::error(
            check,
            Object::secret(&resolved.namespace, secret.as_deref().unwrap_or("?")),
            Some("data[\"tls.crt\"]"),
            problem,
            fix.to_owned(),
        )
        .for_plugin(plugin)
    };
    match failure {
        Failure::Connect(reason) => on_service(
            "dial.connect",
            Some(annotation_field(PORT_ANNOTATION)),
            format!("{dialled}: {reason}"),
            "make the Service port reach the port the plugin listens on (spec.ports[].targetPort, the plugin's --server-address)",
        ),
        Failure::ServerCertificate(reason) => on_secret(
            "dial.server-certificate",
            &resolved.server_secret,
            format!("{dialled}: {reason}"),
            "make the plugin serve a certificate of this Secret (its --server-cert) valid for the server name",
        ),
        Failure::ClientCertificate(reason) => on_secret(
            "dial.client-certificate",
            &resolved.client_secret,
            format!("{dialled}: {reason}"),
            "issue the client certificate from what the plugin trusts (its --client-cert), or make it trust this one",
        ),
        Failure::Tls(reason) => on_service(
            "dial.tls",
            None,
            format!("{dialled}: {reason}"),
            "serve TLS 1.3 with ALPN h2 (any CNPG-I SDK does)",
        ),
        Failure::Name { actual } => on_service(
            "dial.name",
            Some(label_field()),
            format!(
                "is {plugin:?}, but the plugin answers GetPluginMetadata with the name {actual:?}: Clusters name it by the latter, the operator registers the former"
            ),
            &format!("set the label to {actual}"),
        ),
        Failure::Probe(reason) => on_service(
            "dial.probe",
            None,
            format!("{dialled}: {reason}"),
            "see the plugin's logs",
        ),
        Failure::NotReady => on_service(
            "dial.ready",
            None,
            format!("{dialled}: Identity/Probe answers ready: false"),
            "see the plugin's logs: it says it cannot serve yet",
        ),
        Failure::Timeout(step) => on_service(
            "dial.timeout",
            None,
            format!("{dialled}: {step} did not complete in time"),
            "see the plugin's logs; raise --timeout-seconds if it is only slow",
        ),
    }
}
