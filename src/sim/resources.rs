//! The resource kinds the sim serves: one table that the store, the REST
//! router and discovery all read, so a kind is described in exactly one place.

/// A kind of object the sim stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    Namespace,
    Pod,
    Service,
    ConfigMap,
    Secret,
    Deployment,
    ReplicaSet,
    Ingress,
    GatewayClass,
    Gateway,
    HttpRoute,
    ServiceAccount,
    Lease,
    Node,
    /// core/v1 Events: what the store keeps (docs/sim.md#events).
    Event,
    /// `events.k8s.io/v1` Events: a view of the same objects, converted by
    /// the API layer (`sim::events`); the store never holds one.
    EventV1,
    PersistentVolumeClaim,
    /// `kubectl auth can-i` (docs/sim.md#access-reviews): answered, never
    /// stored.
    SelfSubjectAccessReview,
    /// `kubectl auth whoami`: answered, never stored.
    SelfSubjectReview,
    /// RBAC (`rbac.authorization.k8s.io/v1`, docs/sim.md#authorization):
    /// stored, and read by `sim::rbac` on every request.
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

/// Static facts about a resource kind, as discovery reports them.
#[derive(Debug, Clone, Copy)]
pub struct ResourceInfo {
    pub resource: Resource,
    /// API group; "" for core.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Subresources served, e.g. `status`, `exec`.
    pub subresources: &'static [&'static str],
    /// True when `metadata.generation` is maintained (spec changes bump it).
    pub has_generation: bool,
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl ResourceInfo {
    /// The verbs discovery lists: a review is only ever created.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.resource.is_review() {
            &["create"]
        } else {
            VERBS
        }
    }

    /// `v1` for core, `apps/v1` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of the list object, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

/// Number of resource kinds (the length of [`ALL`]).
pub const COUNT: usize = 23;

pub const ALL: &[ResourceInfo; COUNT] = &[
    ResourceInfo {
        resource: Resource::Namespace,
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        namespaced: false,
        short_names: &["ns"],
        subresources: &["status"],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::Pod,
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        namespaced: true,
        short_names: &["po"],
        subresources: &["status", "exec", "attach", "log", "proxy", "portforward"],
        has_generation: true,
    },
    ResourceInfo {
        resource: Resource::Service,
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        singular: "service",
        namespaced: true,
        short_names: &["svc"],
        subresources: &["status"],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::ConfigMap,
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        namespaced: true,
        short_names: &["cm"],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::Secret,
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::Deployment,
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        singular: "deployment",
        namespaced: true,
        short_names: &["deploy"],
        subresources: &["status", "scale"],
        has_generation: true,
    },
    ResourceInfo {
        resource: Resource::ReplicaSet,
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        singular: "replicaset",
        namespaced: true,
        short_names: &["rs"],
        subresources: &["status", "scale"],
        has_generation: true,
    },
    ResourceInfo {
        resource: Resource::Ingress,
        group: "networking.k8s.io",
        version: "v1",
        kind: "Ingress",
        plural: "ingresses",
        singular: "ingress",
        namespaced: true,
        short_names: &["ing"],
        subresources: &["status"],
        has_generation: true,
    },
    // Gateway API (docs/sim.md#gateway-api): served as the CRDs are, with
    // their short names.
    ResourceInfo {
        resource: Resource::GatewayClass,
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "GatewayClass",
        plural: "gatewayclasses",
        singular: "gatewayclass",
        namespaced: false,
        short_names: &["gc"],
        subresources: &["status"],
        has_generation: true,
    },
    ResourceInfo {
        resource: Resource::Gateway,
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "Gateway",
        plural: "gateways",
        singular: "gateway",
        namespaced: true,
        short_names: &["gtw"],
        subresources: &["status"],
        has_generation: true,
    },
    ResourceInfo {
        resource: Resource::HttpRoute,
        group: "gateway.networking.k8s.io",
        version: "v1",
        kind: "HTTPRoute",
        plural: "httproutes",
        singular: "httproute",
        namespaced: true,
        short_names: &[],
        subresources: &["status"],
        has_generation: true,
    },
    // The `serviceaccounts/token` subresource (TokenRequest) is not
    // served: the sim issues no service-account tokens (docs/sim.md).
    ResourceInfo {
        resource: Resource::ServiceAccount,
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        namespaced: true,
        short_names: &["sa"],
        subresources: &[],
        has_generation: false,
    },
    // docs/sim.md#leases.
    ResourceInfo {
        resource: Resource::Lease,
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        singular: "lease",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    // docs/sim.md#nodes. The `proxy` subresource is not served.
    ResourceInfo {
        resource: Resource::Node,
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        singular: "node",
        namespaced: false,
        short_names: &["no"],
        subresources: &["status"],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::Event,
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::EventV1,
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        namespaced: true,
        short_names: &["ev"],
        subresources: &[],
        has_generation: false,
    },
    // docs/sim.md#persistentvolumeclaims.
    ResourceInfo {
        resource: Resource::PersistentVolumeClaim,
        group: "",
        version: "v1",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        namespaced: true,
        short_names: &["pvc"],
        subresources: &["status"],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::SelfSubjectAccessReview,
        group: "authorization.k8s.io",
        version: "v1",
        kind: "SelfSubjectAccessReview",
        plural: "selfsubjectaccessreviews",
        singular: "",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::SelfSubjectReview,
        group: "authentication.k8s.io",
        version: "v1",
        kind: "SelfSubjectReview",
        plural: "selfsubjectreviews",
        singular: "",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::Role,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "Role",
        plural: "roles",
        singular: "role",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::ClusterRole,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRole",
        plural: "clusterroles",
        singular: "clusterrole",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::RoleBinding,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "RoleBinding",
        plural: "rolebindings",
        singular: "rolebinding",
        namespaced: true,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
    ResourceInfo {
        resource: Resource::ClusterRoleBinding,
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
        namespaced: false,
        short_names: &[],
        subresources: &[],
        has_generation: false,
    },
];

impl Resource {
    pub fn info(self) -> &'static ResourceInfo {
        &ALL[self.index()]
    }

    /// Position of this kind in [`ALL`] (dense, `0..COUNT`): lets per-kind
    /// tables be plain arrays.
    pub const fn index(self) -> usize {
        // The table lists every variant once; the index is its position.
        match self {
            Resource::Namespace => 0,
            Resource::Pod => 1,
            Resource::Service => 2,
            Resource::ConfigMap => 3,
            Resource::Secret => 4,
            Resource::Deployment => 5,
            Resource::ReplicaSet => 6,
            Resource::Ingress => 7,
            Resource::GatewayClass => 8,
            Resource::Gateway => 9,
            Resource::HttpRoute => 10,
            Resource::ServiceAccount => 11,
            Resource::Lease => 12,
            Resource::Node => 13,
            Resource::Event => 14,
            Resource::EventV1 => 15,
            Resource::PersistentVolumeClaim => 16,
            Resource::SelfSubjectAccessReview => 17,
            Resource::SelfSubjectReview => 18,
            Resource::Role => 19,
            Resource::ClusterRole => 20,
            Resource::RoleBinding => 21,
            Resource::ClusterRoleBinding => 22,
        }
    }

    /// A review: answered for the caller on create, never stored.
    pub fn is_review(self) -> bool {
        matches!(
            self,
            Resource::SelfSubjectAccessReview | Resource::SelfSubjectReview
        )
    }

    /// A PUT to a name that does not exist creates it (the registry
    /// strategy's `AllowCreateOnUpdate`), answering 201.
    pub fn allows_create_on_update(self) -> bool {
        matches!(self, Resource::Lease | Resource::Event | Resource::EventV1)
    }

    /// A PUT without `metadata.resourceVersion` replaces whatever is
    /// stored (`AllowUnconditionalUpdate`); where it does not, such a PUT
    /// is refused with 422 (optimistic concurrency is mandatory).
    pub fn allows_unconditional_update(self) -> bool {
        !matches!(self, Resource::Lease)
    }

    /// `pods`, or `deployments.apps`: the group-qualified resource that
    /// upstream error messages name.
    pub fn qualified_resource(self) -> String {
        let i = self.info();
        if i.group.is_empty() {
            i.plural.to_string()
        } else {
            format!("{}.{}", i.plural, i.group)
        }
    }

    /// `Pod`, or `Deployment.apps`: the group-qualified kind that upstream
    /// `Invalid` messages name.
    pub fn qualified_kind(self) -> String {
        let i = self.info();
        if i.group.is_empty() {
            i.kind.to_string()
        } else {
            format!("{}.{}", i.kind, i.group)
        }
    }

    /// True when writes to the main resource keep the stored `status`
    /// (the kind has a `status` subresource).
    pub fn has_status_subresource(self) -> bool {
        self.info().subresources.contains(&"status")
    }

    /// Finds a kind by group and plural name as it appears in a URL.
    pub fn from_path(group: &str, plural: &str) -> Option<Resource> {
        ALL.iter()
            .find(|r| r.group == group && r.plural == plural)
            .map(|r| r.resource)
    }

    /// Finds a kind by `apiVersion` and `kind` as they appear in an object.
    pub fn from_kind(api_version: &str, kind: &str) -> Option<Resource> {
        ALL.iter()
            .find(|r| r.kind == kind && r.api_version() == api_version)
            .map(|r| r.resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_variants() {
        for info in ALL {
            assert_eq!(info.resource.info().kind, info.kind);
            assert_eq!(
                Resource::from_path(info.group, info.plural),
                Some(info.resource)
            );
            assert_eq!(
                Resource::from_kind(&info.api_version(), info.kind),
                Some(info.resource)
            );
        }
        assert_eq!(Resource::from_path("apps", "pods"), None);
        for (i, info) in ALL.iter().enumerate() {
            assert_eq!(info.resource.index(), i);
        }
        assert_eq!(
            Resource::Deployment.qualified_resource(),
            "deployments.apps"
        );
        assert_eq!(Resource::Pod.qualified_kind(), "Pod");
    }
}
