//! The plugin's sidecar in the Pods that need it (the OperatorLifecycle
//! hooks of [`crate::plugin`]).
//!
//! * **Instance Pods** (`CREATE`, `EVALUATE`): the sidecar archives WAL,
//!   restores it, takes backups and serves metrics next to PostgreSQL.
//! * **The `full-recovery` Job** (`CREATE`): the sidecar restores the backup
//!   (RestoreJobHooks) and the WAL replayed afterwards.
//!
//! The sidecar is a Kubernetes native sidecar (an init container with
//! `restartPolicy: Always`, so it runs before and alongside PostgreSQL),
//! mounts what the PostgreSQL container mounts (PGDATA, `/controller` with
//! PostgreSQL's socket) and the shared `/plugins` directory where it serves
//! its socket, and gets the `restricted` Pod Security Standard's security
//! context ([`cnpgi_pluginhelper::sidecar`]). With `s3CredentialsSecret`,
//! `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` come from that Secret's
//! `ACCESS_KEY_ID` and `ACCESS_SECRET_KEY`: the sidecar never reads Secrets
//! itself and needs no Kubernetes permissions.
//!
//! It requests what it uses at rest (10m CPU, 64Mi: one 16 MiB segment in
//! flight with its compression buffers), so a namespace whose ResourceQuota
//! requires requests admits the Pods, and sets no limit: archiving must not
//! be throttled or OOM-killed behind PostgreSQL's back.
//!
//! The image is `$SIDECAR_IMAGE` of the operator-side plugin process, by
//! default [`default_sidecar_image`] ([`crate::Settings`]).

use cnpgi_pluginhelper::{
    cluster::Cluster,
    sidecar::{POSTGRES_CONTAINER_NAME, SidecarOptions, inject_sidecar},
};
use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Container, EnvVar, EnvVarSource, ResourceRequirements, SecretKeySelector},
    apimachinery::pkg::api::resource::Quantity,
};
use serde_json::Value;
use tonic::Status;

use crate::cluster::ClusterView;
use crate::metadata::PLUGIN_NAME;
use crate::parameters::{self, Config};

/// Name of the sidecar container.
pub const SIDECAR_NAME: &str = "plugin-wal-archive";
/// The environment variable naming the sidecar image.
pub const SIDECAR_IMAGE_ENV: &str = "SIDECAR_IMAGE";
/// CloudNativePG's label giving a Job's role; its container has that name.
pub const JOB_ROLE_LABEL: &str = "cnpg.io/jobRole";

/// `cnpgi-wal-archive:<version>`, when `$SIDECAR_IMAGE` is unset.
pub fn default_sidecar_image() -> String {
    format!("cnpgi-wal-archive:{}", env!("CARGO_PKG_VERSION"))
}

/// The sidecar, running `image`, for a Pod whose main container is `main`
/// (its `PGDATA` is passed on), with the credentials of `config`.
fn sidecar(image: &str, main: &Value, config: &Config) -> Container {
    let mut env = Vec::new();
    if let Some(pgdata) = main
        .get("env")
        .and_then(Value::as_array)
        .and_then(|vars| {
            vars.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some("PGDATA"))
        })
        .and_then(|v| v.get("value"))
        .and_then(Value::as_str)
    {
        env.push(EnvVar {
            name: "PGDATA".into(),
            value: Some(pgdata.to_owned()),
            ..EnvVar::default()
        });
    }
    if let Some(secret) = config.credentials_secret.as_deref() {
        for (variable, key) in [
            ("AWS_ACCESS_KEY_ID", "ACCESS_KEY_ID"),
            ("AWS_SECRET_ACCESS_KEY", "ACCESS_SECRET_KEY"),
        ] {
            env.push(EnvVar {
                name: variable.into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.to_owned(),
                        key: key.into(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            });
        }
    }
    Container {
        name: SIDECAR_NAME.into(),
        image: Some(image.to_owned()),
        args: Some(vec![
            "plugin".into(),
            "--plugin-path=/plugins".into(),
            "--log-format=json".into(),
        ]),
        env: (!env.is_empty()).then_some(env),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("10m".to_owned())),
                ("memory".to_owned(), Quantity("64Mi".to_owned())),
            ])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    }
}

/// Adds the sidecar running `image` to an instance Pod of `cluster`, with
/// the credentials of the Cluster's own archive.
///
/// # Errors
///
/// The Cluster's parameters' errors, or a Pod the sidecar cannot be added to.
pub fn add_to_pod(image: &str, cluster: &Cluster, pod: &mut Value) -> Result<(), Status> {
    let config = parameters::own(cluster)?;
    let main = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(POSTGRES_CONTAINER_NAME))
        })
        .cloned()
        .unwrap_or(Value::Null);
    inject_sidecar(
        pod,
        &sidecar(image, &main, &config),
        SidecarOptions {
            inject_postgres_volume_mounts: true,
        },
    )?;
    Ok(())
}

/// Adds the sidecar running `image` to the `full-recovery` Job of a Cluster
/// recovering from an archive of this plugin, with the credentials of that
/// archive; other Jobs are left alone. The Job's container is named after
/// its role; it is treated as the `postgres` container of a Pod for the
/// injection, then renamed back.
///
/// # Errors
///
/// The recovery source's parameters' errors, or a Job without a Pod
/// template or containers.
pub fn add_to_recovery_job(image: &str, cluster: &Cluster, job: &mut Value) -> Result<(), Status> {
    let role = job
        .pointer("/metadata/labels")
        .and_then(|l| l.get(JOB_ROLE_LABEL))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if role != "full-recovery" {
        return Ok(());
    }
    let Some(source) = ClusterView::new(cluster).recovery_source_using(PLUGIN_NAME) else {
        return Ok(());
    };
    let config = parameters::external(&source)?;
    let template = job
        .pointer_mut("/spec/template")
        .filter(|t| t.is_object())
        .ok_or_else(|| Status::invalid_argument("the Job has no spec.template object"))?;
    let containers = template
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| Status::invalid_argument("the Job's Pod template has no containers"))?;
    let index = containers
        .iter()
        .position(|c| c.get("name").and_then(Value::as_str) == Some(role.as_str()))
        .unwrap_or(0);
    let main = containers
        .get(index)
        .cloned()
        .ok_or_else(|| Status::invalid_argument("the Job's Pod template has no containers"))?;
    let rename = |containers: &mut Vec<Value>, name: &str| {
        if let Some(container) = containers.get_mut(index).and_then(Value::as_object_mut) {
            container.insert("name".into(), Value::String(name.to_owned()));
        }
    };
    rename(containers, POSTGRES_CONTAINER_NAME);
    let result = inject_sidecar(
        template,
        &sidecar(image, &main, &config),
        SidecarOptions {
            inject_postgres_volume_mounts: true,
        },
    );
    if let Some(containers) = template.pointer_mut("/spec/containers").and_then(Value::as_array_mut) {
        rename(containers, &role);
    }
    result?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use cnpgi_pluginhelper::cluster::decode_cluster;

    fn cluster(parameters: Value) -> Cluster {
        let json = json!({
            "metadata": {"name": "pg1"},
            "spec": {
                "plugins": [{"name": PLUGIN_NAME, "isWALArchiver": true, "parameters": parameters}],
                "bootstrap": {"recovery": {"source": "origin"}},
                "externalClusters": [{"name": "origin", "plugin": {"name": PLUGIN_NAME,
                    "parameters": {"destinationPath": "s3://backups/x", "s3CredentialsSecret": "origin-creds"}}}]
            }
        });
        decode_cluster(json.to_string().as_bytes()).unwrap()
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pg1-1"},
            "spec": {"containers": [{"name": "postgres", "image": "postgres",
                "env": [{"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}],
                "volumeMounts": [{"name": "pgdata", "mountPath": "/var/lib/postgresql/data"},
                                 {"name": "scratch-data", "mountPath": "/controller"}]}]}
        })
    }

    #[test]
    fn instance_pods_get_the_sidecar_with_postgres_mounts_and_credentials() {
        let mut patched = pod();
        add_to_pod(
            "example/wal:1",
            &cluster(json!({"destinationPath": "s3://bucket", "s3CredentialsSecret": "creds"})),
            &mut patched,
        )
        .unwrap();
        let sidecar = &patched["spec"]["initContainers"][0];
        assert_eq!(sidecar["name"], SIDECAR_NAME);
        assert_eq!(sidecar["image"], "example/wal:1");
        assert_eq!(sidecar["restartPolicy"], "Always");
        assert_eq!(
            sidecar["resources"],
            json!({"requests": {"cpu": "10m", "memory": "64Mi"}}),
            "requests, no limits"
        );
        assert_eq!(sidecar["securityContext"]["runAsNonRoot"], true);
        let mounts: Vec<&str> = sidecar["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts, ["/var/lib/postgresql/data", "/controller", "/plugins"]);
        assert_eq!(
            sidecar["env"][0],
            json!({"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"})
        );
        assert_eq!(
            sidecar["env"][1]["valueFrom"]["secretKeyRef"],
            json!({"name": "creds", "key": "ACCESS_KEY_ID", "optional": false})
        );
        // Twice is once.
        let mut again = patched.clone();
        add_to_pod("example/wal:1", &cluster(json!({})), &mut again).unwrap();
        assert_eq!(again, patched);
    }

    #[test]
    fn the_recovery_job_gets_the_sidecar_with_the_sources_credentials() {
        let job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pg1-1-full-recovery", "labels": {"cnpg.io/jobRole": "full-recovery"}},
            "spec": {"template": {"spec": {"containers": [{"name": "full-recovery", "image": "postgres",
                "env": [{"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}],
                "volumeMounts": [{"name": "pgdata", "mountPath": "/var/lib/postgresql/data"}]}]}}}
        });
        let mut patched = job.clone();
        add_to_recovery_job("example/wal:1", &cluster(json!({})), &mut patched).unwrap();
        let spec = &patched["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["name"], "full-recovery");
        assert_eq!(spec["containers"][0]["volumeMounts"][1]["mountPath"], "/plugins");
        assert_eq!(spec["initContainers"][0]["name"], SIDECAR_NAME);
        assert_eq!(
            spec["initContainers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["name"],
            "origin-creds"
        );
        // Other Jobs are not touched.
        let mut initdb = job.clone();
        initdb["metadata"]["labels"]["cnpg.io/jobRole"] = json!("initdb");
        let untouched = initdb.clone();
        add_to_recovery_job("example/wal:1", &cluster(json!({})), &mut initdb).unwrap();
        assert_eq!(initdb, untouched);
    }
}
