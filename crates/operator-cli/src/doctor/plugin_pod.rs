//! What a plugin's Pod serves and trusts, read from its spec: the files its
//! `--server-cert` and `--client-cert` flags (or `SERVER_CERT`,
//! `CLIENT_CERT`, the names upstream's Go plugins read too) name, traced
//! through the container's volume mounts to a Secret and a key.

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

/// A file of a Pod that comes from a key of a Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SecretFile {
    /// The Secret.
    pub(crate) secret: String,
    /// Its key.
    pub(crate) key: String,
    /// The path in the container, and the flag that names it.
    pub(crate) path: String,
    /// `--client-cert` or `CLIENT_CERT`.
    pub(crate) named_by: String,
}

/// Where a flag of the plugin's container points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Located {
    /// No such flag or variable in any container.
    NotSet,
    /// A file from a Secret.
    Secret(SecretFile),
    /// A file the doctor cannot trace to a Secret (another kind of volume, no mount).
    Elsewhere {
        /// The path.
        path: String,
        /// Why it is not traced.
        reason: String,
    },
}

/// The server certificate and the client trust of a plugin Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginFiles {
    /// The Pod.
    pub(crate) pod: String,
    /// `--server-cert`.
    pub(crate) server_cert: Located,
    /// `--client-cert`.
    pub(crate) client_cert: Located,
}

/// Reads `pod`'s containers for the two flags.
pub(crate) fn plugin_files(pod: &Pod) -> PluginFiles {
    let mut files = PluginFiles {
        pod: pod.name_any(),
        server_cert: Located::NotSet,
        client_cert: Located::NotSet,
    };
    let Some(spec) = &pod.spec else {
        return files;
    };
    for container in &spec.containers {
        for (flag, variable, slot) in [
            ("--server-cert", "SERVER_CERT", &mut files.server_cert),
            ("--client-cert", "CLIENT_CERT", &mut files.client_cert),
        ] {
            if *slot != Located::NotSet {
                continue;
            }
            if let Some((path, named_by)) = flag_value(container, flag, variable) {
                *slot = locate(pod, container, &path, named_by);
            }
        }
    }
    files
}

/// The value of `--flag=V`, `--flag V` or the literal variable `variable`.
fn flag_value(container: &Container, flag: &str, variable: &str) -> Option<(String, String)> {
    let words: Vec<&String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .collect();
    for (i, word) in words.iter().enumerate() {
        if let Some(value) = word.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')) {
            return Some((value.to_owned(), flag.to_owned()));
        }
        if word.as_str() == flag
            && let Some(value) = words.get(i + 1)
        {
            return Some(((*value).clone(), flag.to_owned()));
        }
    }
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == variable)
        .and_then(|e| e.value.clone())
        .map(|value| (value, variable.to_owned()))
}

/// Traces `path` through `container`'s mounts to a Secret's key.
fn locate(pod: &Pod, container: &Container, path: &str, named_by: String) -> Located {
    let elsewhere = |reason: String| Located::Elsewhere {
        path: path.to_owned(),
        reason,
    };
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| {
            let dir = m.mount_path.trim_end_matches('/');
            path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
        })
        .max_by_key(|m| m.mount_path.len());
    let Some(mount) = mount else {
        return elsewhere(format!("no volume of container {} is mounted there", container.name));
    };
    let mut relative = path[mount.mount_path.trim_end_matches('/').len() + 1..].to_owned();
    if let Some(sub) = mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
        relative = format!("{sub}/{relative}");
    }
    let volume = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == mount.name));
    let Some(secret) = volume.and_then(|v| v.secret.as_ref()) else {
        return elsewhere(format!("volume {} is not a Secret volume", mount.name));
    };
    let Some(name) = secret.secret_name.clone() else {
        return elsewhere(format!("volume {} names no Secret", mount.name));
    };
    let key = match &secret.items {
        Some(items) => match items.iter().find(|i| i.path == relative) {
            Some(item) => item.key.clone(),
            None => return elsewhere(format!("volume {} does not project {relative}", mount.name)),
        },
        None => relative,
    };
    Located::Secret(SecretFile {
        secret: name,
        key,
        path: path.to_owned(),
        named_by,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(args: serde_json::Value, env: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello-1"},
            "spec": {
                "containers": [{"name": "plugin", "args": args, "env": env, "volumeMounts": [
                    {"name": "server", "mountPath": "/server"},
                    {"name": "client", "mountPath": "/client/"},
                    {"name": "scratch", "mountPath": "/tmp"},
                ]}],
                "volumes": [
                    {"name": "server", "secret": {"secretName": "hello-server-tls"}},
                    {"name": "client", "secret": {"secretName": "hello-ca", "items": [{"key": "ca.crt", "path": "trusted.pem"}]}},
                    {"name": "scratch", "emptyDir": {}},
                ],
            },
        }))
        .unwrap()
    }

    #[test]
    fn flags_are_traced_to_a_secret_and_its_key() {
        let files = plugin_files(&pod(
            serde_json::json!([
                "plugin",
                "--server-cert=/server/tls.crt",
                "--client-cert",
                "/client/trusted.pem"
            ]),
            serde_json::json!([]),
        ));
        assert_eq!(
            files.server_cert,
            Located::Secret(SecretFile {
                secret: "hello-server-tls".into(),
                key: "tls.crt".into(),
                path: "/server/tls.crt".into(),
                named_by: "--server-cert".into()
            })
        );
        let Located::Secret(client) = files.client_cert else {
            panic!("{:?}", files.client_cert)
        };
        assert_eq!((client.secret.as_str(), client.key.as_str()), ("hello-ca", "ca.crt"));
    }

    #[test]
    fn variables_count_and_untraceable_files_say_why() {
        let files = plugin_files(&pod(
            serde_json::json!(["plugin"]),
            serde_json::json!([{"name": "CLIENT_CERT", "value": "/tmp/ca.pem"}, {"name": "SERVER_CERT", "value": "/etc/x.pem"}]),
        ));
        assert!(
            matches!(&files.client_cert, Located::Elsewhere { reason, .. } if reason.contains("not a Secret volume"))
        );
        assert!(matches!(&files.server_cert, Located::Elsewhere { reason, .. } if reason.contains("no volume")));
        let files = plugin_files(&pod(serde_json::json!(["plugin"]), serde_json::json!([])));
        assert_eq!(
            (files.server_cert, files.client_cert),
            (Located::NotSet, Located::NotSet)
        );
    }
}
