//! A plugin's Service as CloudNativePG and cnpgi-operator read it: the
//! `cnpg.io/pluginName` label, the `cnpg.io/pluginPort`,
//! `cnpg.io/pluginServerSecret`, `cnpg.io/pluginClientSecret` and optional
//! `cnpg.io/pluginServerName` annotations, and its ready endpoints.
//!
//! The two operators read the same fields, with small differences the
//! findings name: CloudNativePG skips a Service missing an annotation
//! without a word (its `isPluginService`), and parses the port with Go's
//! `strconv.Atoi`; cnpgi-operator reports either as an Event.

use std::collections::BTreeMap;

use cnpgi_host::discovery::kubernetes::{
    CLIENT_SECRET_ANNOTATION, PLUGIN_NAME_LABEL, PORT_ANNOTATION, SERVER_NAME_ANNOTATION, SERVER_SECRET_ANNOTATION,
};
use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::ResourceExt;

use super::finding::{Finding, Object};

/// `metadata.annotations["<annotation>"]`.
pub(crate) fn annotation_field(annotation: &str) -> String {
    format!("metadata.annotations[\"{annotation}\"]")
}

/// `metadata.labels["cnpg.io/pluginName"]`.
pub(crate) fn label_field() -> String {
    format!("metadata.labels[\"{PLUGIN_NAME_LABEL}\"]")
}

/// What a plugin Service says, each field `None` where it is missing or wrong
/// (a finding says why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginService {
    /// The plugin name (label value).
    pub(crate) plugin: String,
    /// The Service's namespace.
    pub(crate) namespace: String,
    /// The Service's name.
    pub(crate) name: String,
    /// `cnpg.io/pluginPort`, when a port of the Service.
    pub(crate) port: Option<u16>,
    /// The name of that Service port (`""` when unnamed): EndpointSlices name their ports so.
    pub(crate) port_name: String,
    /// `cnpg.io/pluginClientSecret`.
    pub(crate) client_secret: Option<String>,
    /// `cnpg.io/pluginServerSecret`.
    pub(crate) server_secret: Option<String>,
    /// The TLS server name the operator verifies: `cnpg.io/pluginServerName`, else the Service name.
    pub(crate) server_name: String,
}

impl PluginService {
    /// The Service, as an object of findings.
    pub(crate) fn object(&self) -> Object {
        Object::service(&self.namespace, &self.name)
    }

    /// `<service>.<namespace>.svc:<port>`, what both operators dial.
    pub(crate) fn address(&self) -> Option<String> {
        self.port
            .map(|port| format!("{}.{}.svc:{port}", self.name, self.namespace))
    }

    fn finding(&self, check: &'static str, field: &str, problem: String, fix: String) -> Finding {
        Finding::error(check, self.object(), Some(field), problem, fix).for_plugin(&self.plugin)
    }
}

/// Reads a Service that carries the label (even empty): what it says, and
/// every finding about its label and annotations.
pub(crate) fn check_service(service: &Service) -> (PluginService, Vec<Finding>) {
    let labels = service.labels();
    let annotations = service.annotations();
    let mut resolved = PluginService {
        plugin: labels.get(PLUGIN_NAME_LABEL).cloned().unwrap_or_default(),
        namespace: service.namespace().unwrap_or_default(),
        name: service.name_any(),
        port: None,
        port_name: String::new(),
        client_secret: None,
        server_secret: None,
        server_name: service.name_any(),
    };
    let mut findings = Vec::new();
    if resolved.plugin.trim().is_empty() {
        findings.push(
            resolved.finding(
                "service.label",
                &label_field(),
                "is empty: neither operator takes the Service for a plugin".into(),
                "set it to the plugin's name (its GetPluginMetadata name, e.g. cnpg-i-hello-world.cloudnative-pg.io)"
                    .into(),
            ),
        );
    } else if let Err(reason) = cnpgi_core::names::validate_plugin_name(&resolved.plugin) {
        findings.push(resolved.finding(
            "service.label",
            &label_field(),
            format!("{:?} is not a valid plugin name: {reason}", resolved.plugin),
            "set it to the plugin's name, as its GetPluginMetadata answers".into(),
        ));
    }
    let mut missing = Vec::new();
    let mut required = |annotation: &'static str, what: &'static str| match annotations.get(annotation) {
        Some(value) if !value.trim().is_empty() => Some(value.clone()),
        present => {
            missing.push((annotation, what, present.is_some()));
            None
        }
    };
    let client_secret = required(
        CLIENT_SECRET_ANNOTATION,
        "the name of the Secret holding the certificate and key the operator presents (tls.crt, tls.key)",
    );
    let server_secret = required(
        SERVER_SECRET_ANNOTATION,
        "the name of the Secret holding the plugin's server certificate (tls.crt), which the operator trusts",
    );
    let port = required(
        PORT_ANNOTATION,
        "the port of the plugin's gRPC server, one of the Service's spec.ports",
    );
    resolved.client_secret = client_secret;
    resolved.server_secret = server_secret;
    for (annotation, what, empty) in missing {
        findings.push(resolved.finding(
            "service.annotation",
            &annotation_field(annotation),
            format!(
                "is {}: CloudNativePG ignores the Service without a word, cnpgi-operator reports PluginAnnotationMissing",
                if empty { "empty" } else { "missing" }
            ),
            format!("annotate the Service with {what}"),
        ));
    }
    let ports: Vec<(i32, String)> = service
        .spec
        .as_ref()
        .and_then(|spec| spec.ports.as_ref())
        .map(|ports| {
            ports
                .iter()
                .map(|p| (p.port, p.name.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let listed = ports
        .iter()
        .map(|(port, name)| {
            if name.is_empty() {
                port.to_string()
            } else {
                format!("{port} ({name})")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let fix_port = match ports.as_slice() {
        [(only, _)] => format!("set it to {only}, the Service's port"),
        [] => "give the Service a port (spec.ports) reaching the plugin's gRPC server, and name it here".into(),
        _ => format!("set it to the one of the Service's ports ({listed}) that reaches the plugin's gRPC server"),
    };
    if let Some(value) = port {
        // Plain decimal digits: both Go's Atoi and a u16 read them alike.
        match value.parse::<u16>().ok().filter(|p| *p != 0 && value.bytes().all(|b| b.is_ascii_digit())) {
            None => findings.push(resolved.finding(
                "service.port",
                &annotation_field(PORT_ANNOTATION),
                format!("{value:?} is not a port number (1 to 65535)"),
                fix_port,
            )),
            Some(number) => match ports.iter().find(|(port, _)| *port == i32::from(number)) {
                Some((_, name)) => {
                    resolved.port = Some(number);
                    resolved.port_name = name.clone();
                }
                None => findings.push(resolved.finding(
                    "service.port",
                    &annotation_field(PORT_ANNOTATION),
                    format!(
                        "{value:?} is not a port of the Service (spec.ports: {}): the operator dials {}.{}.svc:{number}, which nothing serves",
                        if listed.is_empty() { "none".to_owned() } else { listed.clone() },
                        resolved.name,
                        resolved.namespace
                    ),
                    fix_port,
                )),
            },
        }
    }
    if let Some(name) = annotations.get(SERVER_NAME_ANNOTATION).filter(|v| !v.is_empty()) {
        match cnpgi_tls::client::server_name(name) {
            Ok(_) => resolved.server_name = name.clone(),
            Err(error) => findings.push(
                resolved.finding(
                    "service.server-name",
                    &annotation_field(SERVER_NAME_ANNOTATION),
                    format!("{error}"),
                    "set it to a DNS name of the server certificate, or remove it (the Service name is then verified)"
                        .into(),
                ),
            ),
        }
    }
    (resolved, findings)
}

/// The same plugin name on several Services of one namespace: the operator
/// registers one of them (which one is not said) and refuses the others.
pub(crate) fn duplicates(services: &[PluginService]) -> Vec<Finding> {
    let mut by_name: BTreeMap<(&str, &str), Vec<&PluginService>> = BTreeMap::new();
    for service in services.iter().filter(|s| !s.plugin.is_empty()) {
        by_name
            .entry((service.namespace.as_str(), service.plugin.as_str()))
            .or_default()
            .push(service);
    }
    let mut findings = Vec::new();
    for ((_, plugin), services) in by_name.into_iter().filter(|(_, s)| s.len() > 1) {
        let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
        for service in services {
            findings.push(service.finding(
                "service.duplicate",
                &label_field(),
                format!(
                    "names the plugin {plugin:?}, as do the Services {} of the same namespace: the operator registers one (CloudNativePG: the first it sees) and refuses the others",
                    names.join(", ")
                ),
                "keep the label on one Service only".into(),
            ));
        }
    }
    findings
}

/// A ready endpoint of the plugin's Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The Pod behind it, when the EndpointSlice names one.
    pub(crate) pod: Option<String>,
    /// Its address.
    pub(crate) address: String,
    /// The Pod's port the Service port reaches (the target port).
    pub(crate) port: u16,
}

/// The ready endpoints of the Service's port named `port_name`, in the
/// Service's EndpointSlices. Unknown readiness is not ready (kube-proxy's rule).
pub(crate) fn ready_endpoints(slices: &[EndpointSlice], port_name: &str) -> Vec<Endpoint> {
    let mut endpoints = Vec::new();
    for slice in slices {
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or("") == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in slice.endpoints.iter().flatten() {
            if endpoint.conditions.as_ref().and_then(|c| c.ready) != Some(true) {
                continue;
            }
            let pod = endpoint
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name.clone());
            if let Some(address) = endpoint.addresses.first() {
                endpoints.push(Endpoint {
                    pod,
                    address: address.clone(),
                    port,
                });
            }
        }
    }
    endpoints
}

/// The finding when the Service has no ready endpoint: which Pods its
/// selector matches, and why they are not ready.
pub(crate) fn no_ready_endpoint(
    service: &PluginService,
    spec_selector: Option<&BTreeMap<String, String>>,
    pods: &[Pod],
) -> Finding {
    let selector = spec_selector
        .map(|s| s.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    let (problem, fix) = if selector.is_empty() {
        (
            "has no selector and no ready endpoint: the operator's connections are refused".to_owned(),
            "select the plugin's Pods with spec.selector".to_owned(),
        )
    } else if pods.is_empty() {
        (
            format!("selects no Pod ({selector}): the Service has no ready endpoint, the operator's connections are refused"),
            "make spec.selector match the labels of the plugin's Pods (its Deployment's spec.template.metadata.labels), or start the plugin".to_owned(),
        )
    } else {
        let states: Vec<String> = pods.iter().map(pod_state).collect();
        (
            format!(
                "selects {} Pod(s) ({selector}), none ready behind port {}: {}",
                pods.len(),
                service.port.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                states.join("; ")
            ),
            "make the plugin's Pods ready (kubectl describe pod; the plugin's logs), or point spec.selector at Pods that are".to_owned(),
        )
    };
    service.finding("service.endpoints", "spec.selector", problem, fix)
}

/// `name: phase, not ready (reason)` for a message.
fn pod_state(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Unknown".into());
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let why = ready
        .and_then(|c| c.message.clone().or_else(|| c.reason.clone()))
        .unwrap_or_default();
    let waiting: Vec<String> = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .map(|w| format!("{} {}", c.name, w.reason.clone().unwrap_or_default()))
        })
        .collect();
    let mut text = format!("{} {phase}", pod.name_any());
    if pod.metadata.deletion_timestamp.is_some() {
        text.push_str(", terminating");
    }
    if ready.is_some_and(|c| c.status == "True") {
        text.push_str(", ready");
    } else {
        text.push_str(", not ready");
        if !why.is_empty() {
            text.push_str(&format!(" ({why})"));
        }
    }
    if !waiting.is_empty() {
        text.push_str(&format!(", waiting: {}", waiting.join(", ")));
    }
    text
}

/// A Service with a plugin annotation but no `cnpg.io/pluginName` label:
/// neither operator takes it for a plugin (a label lost in an edit, say).
pub(crate) fn unlabelled(service: &Service) -> Option<Finding> {
    if service.labels().contains_key(PLUGIN_NAME_LABEL) {
        return None;
    }
    let annotations: Vec<&str> = service
        .annotations()
        .keys()
        .map(String::as_str)
        .filter(|k| [CLIENT_SECRET_ANNOTATION, SERVER_SECRET_ANNOTATION, PORT_ANNOTATION].contains(k))
        .collect();
    if annotations.is_empty() {
        return None;
    }
    Some(Finding::error(
        "service.label",
        Object::service(&service.namespace().unwrap_or_default(), &service.name_any()),
        Some(&label_field()),
        format!(
            "is missing, but the Service has the plugin annotations {}: neither operator takes it for a plugin",
            annotations.join(", ")
        ),
        format!(
            "label it with the plugin's name: kubectl label service {} {PLUGIN_NAME_LABEL}=<plugin name>",
            service.name_any()
        ),
    ))
}

/// The finding for a plugin asked for by name that no Service labels: the
/// namespaces searched, and the Services that look like it.
pub(crate) fn missing_plugin(plugin: &str, searched: &str, namespace: Option<&str>, services: &[Service]) -> Finding {
    let stem = plugin.split('.').next().unwrap_or(plugin).to_ascii_lowercase();
    let mut alike = Vec::new();
    for service in services {
        let name = service.name_any();
        let label = service.labels().get(PLUGIN_NAME_LABEL);
        let annotated = service
            .annotations()
            .keys()
            .any(|k| [CLIENT_SECRET_ANNOTATION, SERVER_SECRET_ANNOTATION, PORT_ANNOTATION].contains(&k.as_str()));
        let lower = name.to_ascii_lowercase();
        let similar_name = !stem.is_empty() && (lower.contains(&stem) || stem.contains(&lower));
        let similar_label = label.is_some_and(|l| {
            let l = l.to_ascii_lowercase();
            l.split('.').next() == Some(stem.as_str()) || l.contains(&stem)
        });
        if !(annotated || similar_name || similar_label) {
            continue;
        }
        let why = match label {
            None => format!("no {PLUGIN_NAME_LABEL} label"),
            Some(value) if value.is_empty() => format!("an empty {PLUGIN_NAME_LABEL} label"),
            Some(value) => format!("labelled {PLUGIN_NAME_LABEL}={value}"),
        };
        alike.push(format!("{}/{} ({why})", service.namespace().unwrap_or_default(), name));
    }
    let mut problem = format!("no Service in {searched} carries the label {PLUGIN_NAME_LABEL}={plugin}");
    if alike.is_empty() {
        problem.push_str("; no Service there looks like it");
    } else {
        problem.push_str(&format!("; Services that look like it: {}", alike.join(", ")));
    }
    let fix = format!(
        "label the plugin's Service (kubectl label service NAME {PLUGIN_NAME_LABEL}={plugin}) in the operator's namespace, or deploy the plugin there"
    );
    Finding::error(
        "service.missing",
        Object::new("Service", namespace.unwrap_or("*"), "*"),
        Some(&label_field()),
        problem,
        fix,
    )
    .for_plugin(plugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(labels: serde_json::Value, annotations: serde_json::Value, ports: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello", "namespace": "cnpgi-system", "labels": labels, "annotations": annotations},
            "spec": {"selector": {"app": "hello"}, "ports": ports},
        }))
        .unwrap()
    }

    fn good() -> Service {
        service(
            serde_json::json!({PLUGIN_NAME_LABEL: "hello.example.com"}),
            serde_json::json!({CLIENT_SECRET_ANNOTATION: "c", SERVER_SECRET_ANNOTATION: "s", PORT_ANNOTATION: "9090"}),
            serde_json::json!([{"name": "grpc", "port": 9090, "targetPort": "grpc"}]),
        )
    }

    #[test]
    fn a_good_service_reads_as_the_operators_read_it() {
        let (resolved, findings) = check_service(&good());
        assert_eq!(findings, []);
        assert_eq!(resolved.address().as_deref(), Some("hello.cnpgi-system.svc:9090"));
        assert_eq!(resolved.server_name, "hello");
        assert_eq!(resolved.port_name, "grpc");
        assert_eq!(resolved.client_secret.as_deref(), Some("c"));
    }

    #[test]
    fn a_wrong_port_annotation_names_the_field_and_the_services_port() {
        for (value, expected) in [
            ("9091", "is not a port of the Service"),
            ("grpc", "is not a port number"),
            ("0", "is not a port number"),
            ("+9090", "is not a port number"),
        ] {
            let mut s = good();
            s.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(PORT_ANNOTATION.into(), value.into());
            let (resolved, findings) = check_service(&s);
            assert_eq!(findings.len(), 1, "{value}: {findings:?}");
            assert_eq!(
                findings[0].field.as_deref(),
                Some(r#"metadata.annotations["cnpg.io/pluginPort"]"#)
            );
            assert!(
                findings[0].problem.contains(expected),
                "{value}: {}",
                findings[0].problem
            );
            assert_eq!(findings[0].fix, "set it to 9090, the Service's port");
            assert_eq!(resolved.port, None);
        }
    }

    #[test]
    fn missing_annotations_and_an_empty_label_are_each_named() {
        let s = service(
            serde_json::json!({PLUGIN_NAME_LABEL: ""}),
            serde_json::json!({SERVER_SECRET_ANNOTATION: ""}),
            serde_json::json!([{"port": 9090}]),
        );
        let (_, findings) = check_service(&s);
        let fields: Vec<&str> = findings.iter().filter_map(|f| f.field.as_deref()).collect();
        assert_eq!(
            fields,
            [
                r#"metadata.labels["cnpg.io/pluginName"]"#,
                r#"metadata.annotations["cnpg.io/pluginClientSecret"]"#,
                r#"metadata.annotations["cnpg.io/pluginServerSecret"]"#,
                r#"metadata.annotations["cnpg.io/pluginPort"]"#,
            ]
        );
        assert!(findings[2].problem.starts_with("is empty"), "{}", findings[2].problem);
    }

    #[test]
    fn the_server_name_annotation_replaces_the_service_name() {
        let mut s = good();
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(SERVER_NAME_ANNOTATION.into(), "plugin.example.com".into());
        assert_eq!(check_service(&s).0.server_name, "plugin.example.com");
    }

    #[test]
    fn duplicates_are_named_on_each_service() {
        let (a, _) = check_service(&good());
        let mut b = a.clone();
        b.name = "hello-2".into();
        let findings = duplicates(&[a, b]);
        assert_eq!(findings.len(), 2);
        assert!(
            findings[0].problem.contains("hello, hello-2"),
            "{}",
            findings[0].problem
        );
    }

    #[test]
    fn only_ready_endpoints_of_the_plugin_port_count() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello-x"},
            "addressType": "IPv4",
            "ports": [{"name": "grpc", "port": 9090}, {"name": "metrics", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "hello-1"}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}, "targetRef": {"kind": "Pod", "name": "hello-2"}},
                {"addresses": ["10.0.0.3"], "conditions": {}},
            ],
        }))
        .unwrap();
        assert_eq!(
            ready_endpoints(std::slice::from_ref(&slice), "grpc"),
            [Endpoint {
                pod: Some("hello-1".into()),
                address: "10.0.0.1".into(),
                port: 9090
            }]
        );
        assert_eq!(ready_endpoints(&[slice], "other"), []);
    }

    #[test]
    fn no_ready_endpoint_says_what_the_selector_matches() {
        let (resolved, _) = check_service(&good());
        let selector = BTreeMap::from([("app".to_owned(), "hello".to_owned())]);
        let finding = no_ready_endpoint(&resolved, Some(&selector), &[]);
        assert_eq!(finding.field.as_deref(), Some("spec.selector"));
        assert!(
            finding.problem.contains("selects no Pod (app=hello)"),
            "{}",
            finding.problem
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello-1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
                       "containerStatuses": [{"name": "p", "ready": false, "restartCount": 3, "image": "i", "imageID": "",
                                              "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
        }))
        .unwrap();
        let finding = no_ready_endpoint(&resolved, Some(&selector), &[pod]);
        assert!(
            finding
                .problem
                .contains("hello-1 Running, not ready (ContainersNotReady), waiting: p CrashLoopBackOff"),
            "{}",
            finding.problem
        );
    }

    #[test]
    fn an_annotated_service_without_the_label_is_named() {
        let mut service = good();
        assert_eq!(unlabelled(&service), None);
        service.metadata.labels = None;
        let finding = unlabelled(&service).unwrap();
        assert_eq!(
            finding.field.as_deref(),
            Some(r#"metadata.labels["cnpg.io/pluginName"]"#)
        );
        assert!(finding.problem.contains("cnpg.io/pluginPort"), "{}", finding.problem);
    }

    #[test]
    fn a_missing_plugin_lists_services_that_look_like_it() {
        let mut unlabelled = good();
        unlabelled.metadata.labels = None;
        let mut other: Service =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "postgres", "namespace": "cnpgi-system"}}))
                .unwrap();
        other.metadata.labels = None;
        let finding = missing_plugin(
            "hello.example.com",
            "namespace cnpgi-system",
            Some("cnpgi-system"),
            &[unlabelled, other],
        );
        assert_eq!(finding.check, "service.missing");
        assert!(
            finding.problem.contains(
                "no Service in namespace cnpgi-system carries the label cnpg.io/pluginName=hello.example.com"
            ),
            "{}",
            finding.problem
        );
        assert!(
            finding
                .problem
                .contains("cnpgi-system/hello (no cnpg.io/pluginName label)"),
            "{}",
            finding.problem
        );
        assert!(!finding.problem.contains("postgres"), "{}", finding.problem);
    }
}
