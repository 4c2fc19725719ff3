//! Every Kubernetes API permission `cnpgi-operator` needs, in one place.
//!
//! The RBAC manifests are checked against [`PERMISSIONS`] (exactly: nothing
//! missing, nothing extra), and the end-to-end suite (`tests/e2e`) runs the
//! operator under those manifests, with a ServiceAccount token, against a
//! real API server: a missing permission fails it.

/// Where a permission is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide (ClusterRole): Clusters and their Pods in any namespace.
    Cluster,
    /// The operator's namespace only (Role): plugin discovery, leader election.
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
/// `blockOwnerDeletion` on the Pods it owns), Kubernetes plugin discovery
/// (Services, Secrets, Events), and leader election (a Lease).
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
        verbs: &["get", "list", "watch", "create", "delete"],
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
    // The plugin Services' EndpointSlices: a plugin is probed as soon as it
    // has a ready endpoint.
    Permission {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: &["list", "watch"],
        scope: Scope::OperatorNamespace,
    },
    // Leader election: the Lease of `crate::leader`, in the operator's namespace.
    Permission {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update"],
        scope: Scope::OperatorNamespace,
    },
];
