//! Injecting a plugin sidecar into an instance Pod.
//!
//! A lifecycle plugin that runs next to PostgreSQL (for example to archive
//! WAL, or to serve CNPG-I on a Unix socket) adds a container to the instance
//! Pods. This follows cnpg-i-machinery's `InjectPluginInitContainerSidecarSpec`:
//! the sidecar becomes a Kubernetes native sidecar (an init container with
//! `restartPolicy: Always`), and the `plugins` `emptyDir` volume is mounted on
//! `/plugins` in both the `postgres` container and the sidecar, so the sidecar
//! can put its socket there. The sidecar gets the security context the
//! `restricted` Pod Security Standard requires, unless the caller set those
//! fields itself ([`restricted_security_context`]).
//!
//! The Pod is handled as a [`serde_json::Value`], so fields this crate's
//! Kubernetes types do not know are never lost.
//!
//! ```
//! use cnpgi_pluginhelper::sidecar::{inject_sidecar, SidecarOptions};
//! use k8s_openapi::api::core::v1::Container;
//! use serde_json::json;
//!
//! let mut pod = json!({
//!     "apiVersion": "v1",
//!     "kind": "Pod",
//!     "spec": {"containers": [{"name": "postgres", "image": "postgres:17"}]}
//! });
//! let sidecar = Container {
//!     name: "plugin-sidecar".into(),
//!     image: Some("example.com/plugin:1.0".into()),
//!     ..Container::default()
//! };
//! inject_sidecar(&mut pod, &sidecar, SidecarOptions::default())?;
//!
//! assert_eq!(pod["spec"]["initContainers"][0]["name"], "plugin-sidecar");
//! assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
//! assert_eq!(pod["spec"]["initContainers"][0]["securityContext"]["allowPrivilegeEscalation"], false);
//! assert_eq!(pod["spec"]["volumes"], json!([{"name": "plugins", "emptyDir": {}}]));
//! assert_eq!(
//!     pod["spec"]["containers"][0]["volumeMounts"],
//!     json!([{"name": "plugins", "mountPath": "/plugins"}]),
//! );
//! # Ok::<(), cnpgi_pluginhelper::sidecar::SidecarError>(())
//! ```

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{Capabilities, Container, SeccompProfile, SecurityContext};
use serde_json::{Map, Value, json};

use cnpgi_core::cluster::json_type_name;

/// Name of the container running PostgreSQL in a CloudNativePG instance Pod.
pub const POSTGRES_CONTAINER_NAME: &str = "postgres";
/// Name of the volume shared between PostgreSQL and plugin sidecars.
pub const PLUGINS_VOLUME_NAME: &str = "plugins";
/// Where the plugins volume is mounted.
pub const PLUGINS_MOUNT_PATH: &str = "/plugins";

/// The container security context of the `restricted` Pod Security
/// Standard: no privilege escalation, every capability dropped, non-root, the
/// runtime's default seccomp profile. [`inject_sidecar`] gives these to a
/// sidecar for each field its container leaves unset, so that instance Pods
/// stay admissible in namespaces that enforce `restricted`.
pub fn restricted_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..SeccompProfile::default()
        }),
        ..SecurityContext::default()
    }
}

/// How [`inject_sidecar`] injects a sidecar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SidecarOptions {
    /// Also mount every volume of the `postgres` container in the sidecar, at
    /// the same paths (mounts whose path the sidecar already uses are
    /// skipped). This gives the sidecar access to the PostgreSQL data.
    pub inject_postgres_volume_mounts: bool,
}

/// A sidecar could not be injected.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// The value has no `spec` object.
    #[error("not a Pod: expected an object with an object field \"spec\"")]
    NotAPod,
    /// The Pod has no PostgreSQL container to share the plugins volume with.
    #[error("Pod has no container named \"postgres\"")]
    NoPostgresContainer,
    /// A field of the Pod does not have the type Kubernetes gives it.
    #[error("invalid Pod: {path} must be {expected}, found {found}")]
    InvalidField {
        /// The field, like `spec.volumes`.
        path: String,
        /// The expected JSON type, like `an array`.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// The sidecar container could not be serialized.
    #[error("cannot serialize the sidecar container: {0}")]
    Serialize(#[source] serde_json::Error),
}

impl From<SidecarError> for tonic::Status {
    fn from(err: SidecarError) -> Self {
        match err {
            SidecarError::Serialize(_) => tonic::Status::internal(err.to_string()),
            _ => tonic::Status::invalid_argument(err.to_string()),
        }
    }
}

/// Injects `sidecar` into `pod` (a Pod as JSON), as described in the module
/// documentation:
///
/// 1. the volume `plugins` (`emptyDir: {}`) is added to `spec.volumes` unless
///    a volume of that name exists;
/// 2. the `postgres` container mounts it on `/plugins` unless it already
///    mounts a volume named `plugins` or something on `/plugins`;
/// 3. unless `spec.initContainers` already has a container with the
///    sidecar's name, the sidecar is appended there with `restartPolicy:
///    Always`, the `postgres` container's mounts when
///    [`SidecarOptions::inject_postgres_volume_mounts`] is set, the
///    `/plugins` mount, and each field of [`restricted_security_context`]
///    that the sidecar's `securityContext` does not set (a field the caller
///    set, even to a less restrictive value, is kept).
///
/// Injecting twice gives the same Pod as injecting once. `sidecar` itself is
/// not modified.
///
/// # Errors
///
/// [`SidecarError::NotAPod`] without an object `spec`,
/// [`SidecarError::NoPostgresContainer`] without a `postgres` container in
/// `spec.containers`, [`SidecarError::InvalidField`] when a field used here
/// has the wrong JSON type. On error `pod` is unchanged.
pub fn inject_sidecar(pod: &mut Value, sidecar: &Container, options: SidecarOptions) -> Result<(), SidecarError> {
    let Value::Object(mut container) = serde_json::to_value(sidecar).map_err(SidecarError::Serialize)? else {
        return Err(SidecarError::Serialize(serde::ser::Error::custom(
            "the container did not serialize to a JSON object",
        )));
    };
    let spec = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or(SidecarError::NotAPod)?;

    // Check everything before changing anything, so errors leave the Pod as it was.
    let postgres_index = array_field(spec, "containers")?
        .and_then(|containers| {
            containers
                .iter()
                .position(|c| name_of(c) == Some(POSTGRES_CONTAINER_NAME))
        })
        .ok_or(SidecarError::NoPostgresContainer)?;
    array_field(spec, "volumes")?;
    let already_injected = array_field(spec, "initContainers")?
        .is_some_and(|init| init.iter().any(|c| name_of(c) == Some(sidecar.name.as_str())));
    let postgres_mounts = postgres_container(spec, postgres_index)
        .map(|postgres| mounts_field(postgres, "spec.containers[postgres]"))
        .transpose()?
        .flatten();
    if let Some(mounts) = postgres_mounts {
        check_mounts(mounts, "spec.containers[postgres].volumeMounts")?;
    }

    // 1. The plugins volume.
    with_array(spec, "volumes", |volumes| {
        if !volumes.iter().any(|v| name_of(v) == Some(PLUGINS_VOLUME_NAME)) {
            volumes.push(json!({"name": PLUGINS_VOLUME_NAME, "emptyDir": {}}));
        }
    });

    // 2. The plugins mount on postgres.
    let postgres_mounts: Vec<Value> = spec
        .get_mut("containers")
        .and_then(Value::as_array_mut)
        .and_then(|containers| containers.get_mut(postgres_index))
        .and_then(Value::as_object_mut)
        .map(|postgres| {
            with_array(postgres, "volumeMounts", |mounts| {
                ensure_plugins_mount(mounts);
                mounts.clone()
            })
        })
        .unwrap_or_default();

    // 3. The sidecar itself.
    if already_injected {
        return Ok(());
    }
    container.insert("restartPolicy".to_owned(), json!("Always"));
    apply_restricted_defaults(&mut container)?;
    with_array(&mut container, "volumeMounts", |mounts| {
        if options.inject_postgres_volume_mounts {
            for mount in postgres_mounts {
                let path = mount_path_of(&mount);
                if !mounts.iter().any(|m| mount_path_of(m) == path) {
                    mounts.push(mount);
                }
            }
        }
        ensure_plugins_mount(mounts);
    });
    with_array(spec, "initContainers", |init| {
        init.push(Value::Object(container));
    });
    Ok(())
}

/// Sets each field of [`restricted_security_context`] that the container's
/// `securityContext` leaves unset.
fn apply_restricted_defaults(container: &mut Map<String, Value>) -> Result<(), SidecarError> {
    // Serialized once: every injection into every Pod uses the same fields.
    static DEFAULTS: LazyLock<Option<Map<String, Value>>> =
        LazyLock::new(|| match serde_json::to_value(restricted_security_context()) {
            Ok(Value::Object(defaults)) => Some(defaults),
            _ => None,
        });
    let Some(defaults) = DEFAULTS.clone() else {
        return Err(SidecarError::Serialize(serde::ser::Error::custom(
            "the security context did not serialize to a JSON object",
        )));
    };
    let slot = container
        .entry("securityContext".to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(context) = slot {
        for (field, value) in defaults {
            context.entry(field).or_insert(value);
        }
    }
    Ok(())
}

fn name_of(value: &Value) -> Option<&str> {
    value.get("name").and_then(Value::as_str)
}

fn mount_path_of(value: &Value) -> Option<&str> {
    value.get("mountPath").and_then(Value::as_str)
}

fn postgres_container(spec: &Map<String, Value>, index: usize) -> Option<&Value> {
    spec.get("containers")
        .and_then(Value::as_array)
        .and_then(|c| c.get(index))
}

/// `object[key]` as an array: `None` when absent or `null`, an error when of
/// another type.
fn array_field<'a>(object: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Vec<Value>>, SidecarError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(SidecarError::InvalidField {
            path: format!("spec.{key}"),
            expected: "an array",
            found: json_type_name(other),
        }),
    }
}

fn mounts_field<'a>(container: &'a Value, container_path: &str) -> Result<Option<&'a Vec<Value>>, SidecarError> {
    match container.get("volumeMounts") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(SidecarError::InvalidField {
            path: format!("{container_path}.volumeMounts"),
            expected: "an array",
            found: json_type_name(other),
        }),
    }
}

fn check_mounts(mounts: &[Value], path: &str) -> Result<(), SidecarError> {
    match mounts.iter().find(|m| !m.is_object()) {
        Some(other) => Err(SidecarError::InvalidField {
            path: format!("{path}[]"),
            expected: "an object",
            found: json_type_name(other),
        }),
        None => Ok(()),
    }
}

/// Runs `f` on `object[key]` as an array, created when absent (a `null` or a
/// value of another type, which callers have ruled out, is replaced).
fn with_array<R>(object: &mut Map<String, Value>, key: &str, f: impl FnOnce(&mut Vec<Value>) -> R) -> R {
    let slot = object.entry(key.to_owned()).or_insert(Value::Null);
    let mut items = match std::mem::take(slot) {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    let result = f(&mut items);
    *slot = Value::Array(items);
    result
}

fn ensure_plugins_mount(mounts: &mut Vec<Value>) {
    let present = mounts
        .iter()
        .any(|m| name_of(m) == Some(PLUGINS_VOLUME_NAME) || mount_path_of(m) == Some(PLUGINS_MOUNT_PATH));
    if !present {
        mounts.push(json!({"name": PLUGINS_VOLUME_NAME, "mountPath": PLUGINS_MOUNT_PATH}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, VolumeMount};

    fn instance_pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "cluster-example-1", "labels": {"cnpg.io/cluster": "cluster-example"}},
            "spec": {
                "containers": [
                    {"name": "other", "image": "busybox"},
                    {
                        "name": "postgres",
                        "image": "ghcr.io/cloudnative-pg/postgresql:17",
                        "volumeMounts": [
                            {"name": "pgdata", "mountPath": "/var/lib/postgresql/data"},
                            {"name": "scratch-data", "mountPath": "/controller"}
                        ],
                        "someFutureContainerField": {"x": 1}
                    }
                ],
                "initContainers": [{"name": "bootstrap-controller", "image": "op"}],
                "volumes": [
                    {"name": "pgdata", "persistentVolumeClaim": {"claimName": "cluster-example-1"}},
                    {"name": "scratch-data", "emptyDir": {}}
                ],
                "someFutureSpecField": [1, 2, 3],
                "schedulerName": "default-scheduler"
            },
            "status": {"phase": "Pending"},
            "someTopLevelExtension": "kept"
        })
    }

    fn sidecar() -> Container {
        Container {
            name: "plugin-sidecar".to_owned(),
            image: Some("example.com/plugin:1".to_owned()),
            args: Some(vec!["instance".to_owned()]),
            env: Some(vec![EnvVar {
                name: "X".to_owned(),
                value: Some("1".to_owned()),
                ..EnvVar::default()
            }]),
            ..Container::default()
        }
    }

    fn inject(pod: &mut Value, options: SidecarOptions) {
        inject_sidecar(pod, &sidecar(), options).unwrap();
    }

    #[test]
    fn injects_volume_mounts_and_sidecar() {
        let mut pod = instance_pod();
        inject(&mut pod, SidecarOptions::default());
        let spec = &pod["spec"];
        assert_eq!(
            spec["volumes"],
            json!([
                {"name": "pgdata", "persistentVolumeClaim": {"claimName": "cluster-example-1"}},
                {"name": "scratch-data", "emptyDir": {}},
                {"name": "plugins", "emptyDir": {}}
            ])
        );
        assert_eq!(
            spec["containers"][1]["volumeMounts"],
            json!([
                {"name": "pgdata", "mountPath": "/var/lib/postgresql/data"},
                {"name": "scratch-data", "mountPath": "/controller"},
                {"name": "plugins", "mountPath": "/plugins"}
            ])
        );
        assert!(spec["containers"][0].get("volumeMounts").is_none());
        assert_eq!(spec["containers"].as_array().unwrap().len(), 2);
        assert_eq!(
            spec["initContainers"],
            json!([
                {"name": "bootstrap-controller", "image": "op"},
                {
                    "name": "plugin-sidecar",
                    "image": "example.com/plugin:1",
                    "args": ["instance"],
                    "env": [{"name": "X", "value": "1"}],
                    "restartPolicy": "Always",
                    "volumeMounts": [{"name": "plugins", "mountPath": "/plugins"}],
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": true,
                        "seccompProfile": {"type": "RuntimeDefault"}
                    }
                }
            ])
        );
    }

    #[test]
    fn the_callers_security_fields_win_over_the_restricted_defaults() {
        let mut pod = instance_pod();
        let mut sidecar = sidecar();
        sidecar.security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_BIND_SERVICE".to_owned()]),
                drop: Some(vec!["ALL".to_owned()]),
            }),
            ..SecurityContext::default()
        });
        inject_sidecar(&mut pod, &sidecar, SidecarOptions::default()).unwrap();
        assert_eq!(
            pod["spec"]["initContainers"][1]["securityContext"],
            json!({
                "runAsUser": 1000,
                "readOnlyRootFilesystem": true,
                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                "allowPrivilegeEscalation": false,
                "runAsNonRoot": true,
                "seccompProfile": {"type": "RuntimeDefault"}
            })
        );
        assert_eq!(sidecar.security_context.as_ref().unwrap().run_as_non_root, None);
    }

    #[test]
    fn unknown_fields_survive() {
        let mut pod = instance_pod();
        inject(&mut pod, SidecarOptions::default());
        assert_eq!(pod["someTopLevelExtension"], "kept");
        assert_eq!(pod["status"], json!({"phase": "Pending"}));
        assert_eq!(pod["metadata"], instance_pod()["metadata"]);
        assert_eq!(pod["spec"]["someFutureSpecField"], json!([1, 2, 3]));
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(
            pod["spec"]["containers"][1]["someFutureContainerField"],
            json!({"x": 1})
        );
        assert_eq!(
            pod["spec"]["containers"][0],
            json!({"name": "other", "image": "busybox"})
        );
    }

    #[test]
    fn injection_is_idempotent() {
        for options in [
            SidecarOptions::default(),
            SidecarOptions {
                inject_postgres_volume_mounts: true,
            },
        ] {
            let mut once = instance_pod();
            inject(&mut once, options);
            let mut twice = once.clone();
            inject(&mut twice, options);
            assert_eq!(once, twice, "{options:?}");
        }
    }

    #[test]
    fn existing_sidecar_is_left_alone() {
        let mut pod = instance_pod();
        pod["spec"]["initContainers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "plugin-sidecar", "image": "old"}));
        inject(&mut pod, SidecarOptions::default());
        let init = pod["spec"]["initContainers"].as_array().unwrap();
        assert_eq!(init.len(), 2);
        assert_eq!(init[1], json!({"name": "plugin-sidecar", "image": "old"}));
        // The shared volume is still ensured.
        assert_eq!(pod["spec"]["volumes"][2]["name"], "plugins");
    }

    #[test]
    fn postgres_mounts_are_shared_on_request() {
        let mut pod = instance_pod();
        let mut sidecar = sidecar();
        sidecar.volume_mounts = Some(vec![
            VolumeMount {
                name: "own".to_owned(),
                mount_path: "/own".to_owned(),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "mine".to_owned(),
                mount_path: "/controller".to_owned(),
                ..VolumeMount::default()
            },
        ]);
        inject_sidecar(
            &mut pod,
            &sidecar,
            SidecarOptions {
                inject_postgres_volume_mounts: true,
            },
        )
        .unwrap();
        assert_eq!(
            pod["spec"]["initContainers"][1]["volumeMounts"],
            json!([
                {"name": "own", "mountPath": "/own"},
                {"name": "mine", "mountPath": "/controller"},
                {"name": "pgdata", "mountPath": "/var/lib/postgresql/data"},
                {"name": "plugins", "mountPath": "/plugins"}
            ])
        );
        // The caller's container is not modified.
        assert_eq!(sidecar.restart_policy, None);
    }

    #[test]
    fn minimal_pod_gets_all_fields_created() {
        let mut pod = json!({"spec": {"containers": [{"name": "postgres", "volumeMounts": null}], "volumes": null}});
        inject(&mut pod, SidecarOptions::default());
        assert_eq!(pod["spec"]["volumes"], json!([{"name": "plugins", "emptyDir": {}}]));
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "plugins", "mountPath": "/plugins"}])
        );
        assert_eq!(pod["spec"]["initContainers"][0]["name"], "plugin-sidecar");
    }

    #[test]
    fn existing_plugins_volume_and_mount_are_kept() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "postgres", "volumeMounts": [{"name": "plugins", "mountPath": "/custom"}]}],
            "volumes": [{"name": "plugins", "hostPath": {"path": "/tmp"}}]
        }});
        inject(&mut pod, SidecarOptions::default());
        assert_eq!(
            pod["spec"]["volumes"],
            json!([{"name": "plugins", "hostPath": {"path": "/tmp"}}])
        );
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "plugins", "mountPath": "/custom"}])
        );
    }

    #[test]
    fn errors_leave_the_pod_unchanged() {
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"kind": "Pod"}),
                "not a Pod: expected an object with an object field \"spec\"",
            ),
            (
                json!({"spec": []}),
                "not a Pod: expected an object with an object field \"spec\"",
            ),
            (
                json!("pod"),
                "not a Pod: expected an object with an object field \"spec\"",
            ),
            (json!({"spec": {}}), "Pod has no container named \"postgres\""),
            (
                json!({"spec": {"containers": [{"name": "app"}]}}),
                "Pod has no container named \"postgres\"",
            ),
            (
                json!({"spec": {"containers": {"name": "postgres"}}}),
                "invalid Pod: spec.containers must be an array, found object",
            ),
            (
                json!({"spec": {"containers": [{"name": "postgres"}], "volumes": "x"}}),
                "invalid Pod: spec.volumes must be an array, found string",
            ),
            (
                json!({"spec": {"containers": [{"name": "postgres"}], "initContainers": 1}}),
                "invalid Pod: spec.initContainers must be an array, found number",
            ),
            (
                json!({"spec": {"containers": [{"name": "postgres", "volumeMounts": {}}]}}),
                "invalid Pod: spec.containers[postgres].volumeMounts must be an array, found object",
            ),
            (
                json!({"spec": {"containers": [{"name": "postgres", "volumeMounts": ["x"]}]}}),
                "invalid Pod: spec.containers[postgres].volumeMounts[] must be an object, found string",
            ),
        ];
        for (pod, message) in cases {
            let mut injected = pod.clone();
            let err = inject_sidecar(&mut injected, &sidecar(), SidecarOptions::default()).unwrap_err();
            assert_eq!(err.to_string(), message, "{pod}");
            assert_eq!(injected, pod);
        }
        let status = tonic::Status::from(SidecarError::NoPostgresContainer);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
}
