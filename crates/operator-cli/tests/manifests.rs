//! The delivery files, read and cross-checked: every manifest parses into
//! typed objects, and names, ports, paths, flags, Secrets and RBAC agree with
//! each other and with the code.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use cnpgi_operator::{
    crd::Cluster,
    rbac::{PERMISSIONS, Scope},
    webhook::{MUTATE_PATH, VALIDATE_PATH},
};
use common::{BIN, workspace_binary};
use k8s_openapi::{
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        apps::v1::Deployment,
        core::v1::{Container, Namespace, Service, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::util::intstr::IntOrString,
};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every object of every manifest under `manifests/<dir>`, with its file.
fn objects(dir: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(root().join("manifests").join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = <Value as serde::Deserialize>::deserialize(doc).unwrap();
            if !value.is_null() {
                out.push((file.display().to_string(), value));
            }
        }
    }
    out
}

fn of_kind<T: serde::de::DeserializeOwned>(objects: &[(String, Value)], kind: &str) -> Vec<T> {
    objects
        .iter()
        .filter(|(_, o)| o["kind"] == kind)
        .map(|(_, o)| serde_json::from_value(o.clone()).unwrap())
        .collect()
}

fn by_kind<'a>(objects: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|(_, o)| o["kind"] == kind)
        .map(|(_, o)| o)
        .collect()
}

#[test]
fn every_manifest_parses_into_typed_objects() {
    for dir in ["operator", "hello-world", "samples"] {
        let objects = objects(dir);
        assert!(!objects.is_empty(), "{dir}");
        for (file, object) in &objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            let value = object.clone();
            let parsed = match kind {
                "Namespace" => serde_json::from_value::<Namespace>(value).map(drop),
                "CustomResourceDefinition" => serde_json::from_value::<CustomResourceDefinition>(value).map(drop),
                "ServiceAccount" => serde_json::from_value::<ServiceAccount>(value).map(drop),
                "ClusterRole" => serde_json::from_value::<ClusterRole>(value).map(drop),
                "ClusterRoleBinding" => serde_json::from_value::<ClusterRoleBinding>(value).map(drop),
                "Role" => serde_json::from_value::<Role>(value).map(drop),
                "RoleBinding" => serde_json::from_value::<RoleBinding>(value).map(drop),
                "Deployment" => serde_json::from_value::<Deployment>(value).map(drop),
                "PodDisruptionBudget" => {
                    serde_json::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(value).map(drop)
                }
                "Service" => serde_json::from_value::<Service>(value).map(drop),
                "MutatingWebhookConfiguration" => {
                    serde_json::from_value::<MutatingWebhookConfiguration>(value).map(drop)
                }
                "ValidatingWebhookConfiguration" => {
                    serde_json::from_value::<ValidatingWebhookConfiguration>(value).map(drop)
                }
                "Cluster" => serde_json::from_value::<Cluster>(value).map(drop),
                "Issuer" => {
                    assert!(
                        object["spec"]["selfSigned"].is_object(),
                        "{file}: Issuer must be selfSigned"
                    );
                    Ok(())
                }
                "Certificate" => {
                    assert!(
                        object["spec"]["secretName"].is_string(),
                        "{file}: Certificate without secretName"
                    );
                    assert_eq!(object["spec"]["issuerRef"]["kind"], "Issuer", "{file}");
                    Ok(())
                }
                other => panic!("{file}: unexpected kind {other:?}"),
            };
            parsed.unwrap_or_else(|e| panic!("{file}: {kind}: {e}"));
        }
        // Every file a kustomization lists exists.
        let kustomization: Value = serde_yaml_ng::from_str(
            &std::fs::read_to_string(root().join("manifests").join(dir).join("kustomization.yaml")).unwrap(),
        )
        .unwrap();
        for resource in kustomization["resources"].as_array().unwrap() {
            let path = root().join("manifests").join(dir).join(resource.as_str().unwrap());
            assert!(
                path.exists(),
                "{dir}/kustomization.yaml lists missing {}",
                path.display()
            );
        }
    }
}

#[test]
fn the_crd_equals_cnpgi_operator_crd() {
    let output = Command::new(BIN).arg("crd").output().unwrap();
    let generated: CustomResourceDefinition = serde_yaml_ng::from_slice(&output.stdout).unwrap();
    let committed: Vec<CustomResourceDefinition> = of_kind(&objects("operator"), "CustomResourceDefinition");
    assert_eq!(committed.len(), 1);
    assert!(
        committed[0] == generated,
        "manifests/operator/crd.yaml is stale: run `cnpgi-operator crd > manifests/operator/crd.yaml`"
    );
}

fn container(deployment: &Deployment) -> &Container {
    &deployment.spec.template.spec.as_ref().unwrap().containers[0]
}

fn pod_labels(deployment: &Deployment) -> BTreeMap<String, String> {
    deployment
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap()
}

fn arg<'a>(container: &'a Container, flag: &str) -> &'a str {
    container
        .args
        .as_ref()
        .unwrap()
        .iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .unwrap_or_else(|| panic!("{} has no {flag}", container.name))
}

fn port_of(address: &str) -> i32 {
    address.rsplit_once(':').unwrap().1.parse().unwrap()
}

fn container_port(container: &Container, target: &IntOrString) -> i32 {
    match target {
        IntOrString::Int(port) => *port,
        IntOrString::String(name) => {
            container
                .ports
                .as_ref()
                .unwrap()
                .iter()
                .find(|p| p.name.as_deref() == Some(name))
                .unwrap_or_else(|| panic!("no container port named {name}"))
                .container_port
        }
    }
}

#[test]
fn services_select_their_deployments_and_mounted_secrets_come_from_certificates() {
    for dir in ["operator", "hello-world"] {
        let objects = objects(dir);
        let deployments: Vec<Deployment> = of_kind(&objects, "Deployment");
        let secrets_made: BTreeSet<String> = by_kind(&objects, "Certificate")
            .iter()
            .map(|c| c["spec"]["secretName"].as_str().unwrap().to_owned())
            .collect();
        for service in of_kind::<Service>(&objects, "Service") {
            let selector = service.spec.as_ref().unwrap().selector.clone().unwrap();
            assert!(
                deployments
                    .iter()
                    .any(|d| selector.iter().all(|(k, v)| pod_labels(d).get(k) == Some(v))),
                "{dir}: Service {:?} selects no Deployment",
                service.metadata.name
            );
        }
        for deployment in &deployments {
            let pod = deployment.spec.template.spec.as_ref().unwrap();
            for volume in pod.volumes.iter().flatten() {
                if let Some(secret) = &volume.secret {
                    let name = secret.secret_name.as_ref().unwrap();
                    assert!(
                        secrets_made.contains(name),
                        "{dir}: Secret {name} is mounted but no Certificate makes it"
                    );
                }
            }
            // Restricted Pod security: non-root, no escalation, no capabilities.
            assert_eq!(
                pod.security_context.as_ref().unwrap().run_as_non_root,
                Some(true),
                "{dir}"
            );
            let security = container(deployment).security_context.as_ref().unwrap();
            assert_eq!(security.allow_privilege_escalation, Some(false), "{dir}");
            assert_eq!(security.read_only_root_filesystem, Some(true), "{dir}");
            assert_eq!(
                security.capabilities.as_ref().unwrap().drop,
                Some(vec!["ALL".to_owned()]),
                "{dir}"
            );
        }
    }
}

/// The container's args are accepted by the binary's real clap parser:
/// `--help` after them only succeeds if everything before it parses.
fn assert_args_parse(binary: &Path, container: &Container) {
    let output = Command::new(binary)
        .args(container.args.as_ref().unwrap())
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{} rejects the manifest's args {:?}: {}",
        binary.display(),
        container.args,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn container_args_are_accepted_by_the_binaries() {
    let operator: Vec<Deployment> = of_kind(&objects("operator"), "Deployment");
    assert_args_parse(Path::new(BIN), container(&operator[0]));
    let plugin: Vec<Deployment> = of_kind(&objects("hello-world"), "Deployment");
    assert_args_parse(&workspace_binary("cnpg-i-hello-world"), container(&plugin[0]));
}

#[test]
fn webhook_paths_ports_and_service_match_the_server() {
    let objects = objects("operator");
    let deployment = &of_kind::<Deployment>(&objects, "Deployment")[0];
    let operator = container(deployment);
    let service = &of_kind::<Service>(&objects, "Service")[0];
    let service_name = service.metadata.name.clone().unwrap();
    let webhook_port = port_of(arg(operator, "--webhook-address"));
    let deadline: u64 = 8; // the default of --webhook-timeout-seconds

    let mutating: Vec<MutatingWebhookConfiguration> = of_kind(&objects, "MutatingWebhookConfiguration");
    let validating: Vec<ValidatingWebhookConfiguration> = of_kind(&objects, "ValidatingWebhookConfiguration");
    let mut configs = Vec::new();
    for webhook in mutating[0].webhooks.iter().flatten() {
        configs.push((
            MUTATE_PATH,
            webhook.client_config.clone(),
            webhook.failure_policy.clone(),
            webhook.side_effects.clone(),
            webhook.timeout_seconds,
        ));
    }
    for webhook in validating[0].webhooks.iter().flatten() {
        configs.push((
            VALIDATE_PATH,
            webhook.client_config.clone(),
            webhook.failure_policy.clone(),
            webhook.side_effects.clone(),
            webhook.timeout_seconds,
        ));
    }
    assert_eq!(configs.len(), 2);
    for (path, client, failure, side_effects, timeout) in configs {
        let reference = client.service.unwrap();
        assert_eq!(reference.path.as_deref(), Some(path));
        assert_eq!(reference.name, service_name);
        assert_eq!(reference.namespace, service.metadata.namespace.clone().unwrap());
        let service_port = service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| Some(p.port) == reference.port)
            .unwrap();
        assert_eq!(
            container_port(operator, service_port.target_port.as_ref().unwrap()),
            webhook_port
        );
        assert_eq!(failure.as_deref(), Some("Fail"));
        assert_eq!(side_effects, "None");
        assert!(
            timeout.unwrap() as u64 > deadline,
            "timeoutSeconds must exceed the operator's webhook deadline"
        );
    }
    // The certificate is for the Service, and is what the operator mounts.
    let certificate = by_kind(&objects, "Certificate")[0];
    let dns: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        dns.contains(&format!("{service_name}.cnpgi-system.svc").as_str()),
        "{dns:?}"
    );
    let cert_dir = arg(operator, "--webhook-cert-dir");
    let mount = operator
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == cert_dir)
        .unwrap();
    let volume = deployment
        .spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert_eq!(
        volume.secret.as_ref().unwrap().secret_name.as_deref(),
        certificate["spec"]["secretName"].as_str()
    );
    let inject = mutating[0].metadata.annotations.as_ref().unwrap()["cert-manager.io/inject-ca-from"].clone();
    assert_eq!(
        inject,
        format!("cnpgi-system/{}", certificate["metadata"]["name"].as_str().unwrap())
    );
}

/// Issue 24, point 2: the kubelet's probes go to a port of their own, on
/// every interface, and the unauthenticated metrics stay on loopback with
/// no container port.
#[test]
fn probes_have_their_own_port_and_metrics_stay_on_loopback() {
    let objects = objects("operator");
    let deployment = &of_kind::<Deployment>(&objects, "Deployment")[0];
    let operator = container(deployment);
    let health = arg(operator, "--health-probe-bind-address");
    let metrics = arg(operator, "--metrics-bind-address");
    assert!(health.starts_with(':') || health.starts_with("0.0.0.0:"), "{health}");
    assert!(metrics.starts_with("127.0.0.1:"), "{metrics}");
    assert_ne!(port_of(health), port_of(metrics));
    for (probe, path) in [
        (operator.readiness_probe.as_ref().unwrap(), "/readyz"),
        (operator.liveness_probe.as_ref().unwrap(), "/healthz"),
    ] {
        let get = probe.http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(container_port(operator, &get.port), port_of(health), "{path}");
    }
    let exposed: Vec<i32> = operator.ports.iter().flatten().map(|p| p.container_port).collect();
    assert!(!exposed.contains(&port_of(metrics)), "{exposed:?}");
}

#[test]
fn the_plugin_service_is_what_cnpg_i_discovery_expects() {
    let objects = objects("hello-world");
    let service = &of_kind::<Service>(&objects, "Service")[0];
    let deployment = &of_kind::<Deployment>(&objects, "Deployment")[0];
    let plugin = container(deployment);
    let labels = service.metadata.labels.clone().unwrap();
    assert_eq!(labels["cnpg.io/pluginName"], cnpg_i_hello_world::metadata::PLUGIN_NAME);
    let annotations = service.metadata.annotations.clone().unwrap();
    let port: i32 = annotations["cnpg.io/pluginPort"].parse().unwrap();
    let service_port = service
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.port == port)
        .expect("pluginPort is a Service port");
    assert_eq!(
        container_port(plugin, service_port.target_port.as_ref().unwrap()),
        port_of(arg(plugin, "--server-address"))
    );

    let certificates = by_kind(&objects, "Certificate");
    let made_by = |secret: &str| {
        certificates
            .iter()
            .find(|c| c["spec"]["secretName"] == secret)
            .copied()
            .unwrap_or_else(|| panic!("no Certificate makes {secret}"))
    };
    let server = made_by(&annotations["cnpg.io/pluginServerSecret"]);
    let client = made_by(&annotations["cnpg.io/pluginClientSecret"]);
    // Without cnpg.io/pluginServerName, the operator verifies the Service name.
    assert!(!annotations.contains_key("cnpg.io/pluginServerName"));
    let service_name = service.metadata.name.clone().unwrap();
    assert!(
        server["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d == service_name.as_str())
    );
    assert_eq!(server["spec"]["usages"][0], "server auth");
    assert_eq!(client["spec"]["usages"][0], "client auth");

    // The plugin reads its files from the Secrets the annotations name.
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    for (flag, secret) in [
        ("--server-cert", &annotations["cnpg.io/pluginServerSecret"]),
        ("--server-key", &annotations["cnpg.io/pluginServerSecret"]),
        ("--client-cert", &annotations["cnpg.io/pluginClientSecret"]),
    ] {
        let file = Path::new(arg(plugin, flag));
        let mount = plugin
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| Path::new(&m.mount_path) == file.parent().unwrap())
            .unwrap_or_else(|| panic!("{flag}: nothing mounted at {}", file.display()));
        let volume = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap();
        assert_eq!(
            volume.secret.as_ref().unwrap().secret_name.as_ref(),
            Some(secret),
            "{flag}"
        );
    }
}

fn granted(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_grants_exactly_what_the_operator_uses() {
    let objects = objects("operator");
    let cluster_roles: Vec<ClusterRole> = of_kind(&objects, "ClusterRole");
    let roles: Vec<Role> = of_kind(&objects, "Role");
    let cluster_wide = granted(cluster_roles[0].rules.as_deref().unwrap_or_default());
    let namespaced = granted(roles[0].rules.as_deref().unwrap_or_default());
    let want = |scope: Scope| -> BTreeSet<(String, String, String)> {
        PERMISSIONS
            .iter()
            .filter(|p| p.scope == scope)
            .flat_map(|p| {
                p.verbs
                    .iter()
                    .map(move |v| (p.group.to_owned(), p.resource.to_owned(), (*v).to_owned()))
            })
            .collect()
    };
    assert_eq!(
        cluster_wide,
        want(Scope::Cluster),
        "ClusterRole differs from cnpgi_operator::rbac::PERMISSIONS"
    );
    assert_eq!(
        namespaced,
        want(Scope::OperatorNamespace),
        "Role differs from cnpgi_operator::rbac::PERMISSIONS"
    );
    // The bindings bind the operator's ServiceAccount, which the Deployment uses.
    let account: Vec<ServiceAccount> = of_kind(&objects, "ServiceAccount");
    let account = account[0].metadata.name.clone().unwrap();
    let deployment = &of_kind::<Deployment>(&objects, "Deployment")[0];
    assert_eq!(
        deployment
            .spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .service_account_name
            .as_ref(),
        Some(&account)
    );
    for binding in of_kind::<ClusterRoleBinding>(&objects, "ClusterRoleBinding") {
        assert_eq!(binding.subjects.unwrap()[0].name, account);
    }
    for binding in of_kind::<RoleBinding>(&objects, "RoleBinding") {
        assert_eq!(binding.subjects.unwrap()[0].name, account);
    }
}

#[test]
fn samples_use_the_plugin() {
    for cluster in of_kind::<Cluster>(&objects("samples"), "Cluster") {
        assert!(
            cluster
                .spec
                .plugins
                .iter()
                .any(|p| p.name == cnpg_i_hello_world::metadata::PLUGIN_NAME)
        );
    }
}

/// Leader election: two replicas, a PodDisruptionBudget over them that lets
/// one go, and each replica named (POD_NAME) for the Lease.
#[test]
fn replicas_pdb_and_leader_identity() {
    let objects = objects("operator");
    let deployment = &of_kind::<Deployment>(&objects, "Deployment")[0];
    let replicas = deployment.spec.replicas.unwrap_or(1);
    assert!(
        replicas >= 2,
        "leader election wants at least 2 replicas, got {replicas}"
    );
    let pdbs: Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget> = of_kind(&objects, "PodDisruptionBudget");
    let pdb = pdbs[0].spec.as_ref().unwrap();
    let selected = pdb.selector.as_ref().unwrap().match_labels.clone().unwrap();
    let labels = pod_labels(deployment);
    assert!(
        selected.iter().all(|(k, v)| labels.get(k) == Some(v)),
        "the PodDisruptionBudget selects {selected:?}, the Pods have {labels:?}"
    );
    match pdb.min_available.as_ref().unwrap() {
        IntOrString::Int(n) => assert!(*n >= 1 && *n < replicas, "minAvailable {n} of {replicas}"),
        other => panic!("minAvailable {other:?}"),
    }
    let env = container(deployment).env.clone().unwrap_or_default();
    let pod_name = env.iter().find(|e| e.name == "POD_NAME").expect("POD_NAME is set");
    let field = pod_name.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
    assert_eq!(field.field_path, "metadata.name");
}
