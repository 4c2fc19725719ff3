//! Every Kubernetes API permission `cnpgi-operator` needs, in one place.
//!
//! The RBAC manifests are checked against [`PERMISSIONS`] (exactly: nothing
//! missing, nothing extra), and the end-to-end tests check that every request
//! the operator makes is covered by it ([`permission_for_request`]).

/// Where a permission is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide (ClusterRole): Clusters and their Pods in any namespace.
    Cluster,
    /// The operator's namespace only (Role): plugin discovery.
    OperatorNamespace,
}

/// A set of verbs on one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource, with a subresource after `/` (`clusters/status`).
    pub resource: &'static str,
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Where.
    pub scope: Scope,
}

/// What the code calls: the reconciler (Clusters, their status, Pods,
/// Events; `update` on `clusters/finalizers` lets it set
/// `blockOwnerDeletion` on the Pods it owns), and Kubernetes plugin discovery
/// (Services, Secrets, Events).
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        group: "cnpgi.io",
        resource: "clusters",
        verbs: &["get", "list", "watch"],
        scope: Scope::Cluster,
    },
    Permission {
        group: "cnpgi.io",
        resource: "clusters/status",
        verbs: &["patch"],
        scope: Scope::Cluster,
    },
    // Instance Pods name their Cluster as owner with `blockOwnerDeletion:
    // true`; with the OwnerReferencesPermissionEnforcement admission plugin
    // (on in OpenShift), that needs `update` on the owner's finalizers.
    Permission {
        group: "cnpgi.io",
        resource: "clusters/finalizers",
        verbs: &["update"],
        scope: Scope::Cluster,
    },
    Permission {
        group: "",
        resource: "pods",
        verbs: &["list", "watch", "create", "delete"],
        scope: Scope::Cluster,
    },
    Permission {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        scope: Scope::Cluster,
    },
    Permission {
        group: "",
        resource: "services",
        verbs: &["list", "watch"],
        scope: Scope::OperatorNamespace,
    },
    Permission {
        group: "",
        resource: "secrets",
        verbs: &["list", "watch"],
        scope: Scope::OperatorNamespace,
    },
];

/// The `(verb, group, resource)` an HTTP request to the API server needs.
///
/// ```
/// use cnpgi_operator::rbac::permission_for_request;
///
/// assert_eq!(
///     permission_for_request("GET", "/api/v1/namespaces/default/pods", "labelSelector=x&watch=true"),
///     Some(("watch", "".into(), "pods".into()))
/// );
/// assert_eq!(
///     permission_for_request("PATCH", "/apis/cnpgi.io/v1/namespaces/db/clusters/pg/status", ""),
///     Some(("patch", "cnpgi.io".into(), "clusters/status".into()))
/// );
/// ```
pub fn permission_for_request(method: &str, path: &str, query: &str) -> Option<(&'static str, String, String)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    let (resource, has_name) = match rest {
        [resource] => ((*resource).to_owned(), false),
        [resource, _name] => ((*resource).to_owned(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => return None,
    };
    let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
    let verb = match (method, has_name) {
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some((verb, group.to_owned(), resource))
}

/// Whether [`PERMISSIONS`] allows `verb` on `group`/`resource`.
pub fn is_allowed(verb: &str, group: &str, resource: &str) -> bool {
    PERMISSIONS
        .iter()
        .any(|p| p.group == group && p.resource == resource && p.verbs.contains(&verb))
}
