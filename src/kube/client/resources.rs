//! Typed objects for the kinds kubegate uses, and the [`Resource`] trait that
//! tells [`Api`](super::api::Api) where each kind lives.
//!
//! Only the fields kubegate reads or writes are typed; every struct, at
//! every level modelled, flattens the rest into `extra`, so a
//! read-modify-write (replace, replace_status) sends back everything the
//! server gave, including fields newer than this code. Optional fields are
//! `Option` and skipped when `None`, so absent stays absent. These types
//! never talk to the network and never validate: the server does.

use crate::kube::meta::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Where a kind lives in the API and how its objects expose metadata.
pub trait Resource: Serialize + DeserializeOwned + Clone + Send + 'static {
    /// `v1`, `apps/v1`, `networking.k8s.io/v1`.
    const API_VERSION: &'static str;
    /// `Pod`.
    const KIND: &'static str;
    /// `pods` (the URL segment).
    const PLURAL: &'static str;
    /// `""` for core, `apps`, `networking.k8s.io`.
    const GROUP: &'static str;
    /// False for cluster-scoped kinds (Namespace).
    const NAMESPACED: bool = true;

    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    /// `apiVersion` and `kind` fields (absent on list items).
    fn type_fields(&mut self) -> (&mut Option<String>, &mut Option<String>);

    /// Fills `apiVersion`/`kind` when absent (list items carry neither; the
    /// server requires them on create and replace).
    fn with_type_fields(mut self) -> Self {
        let (a, k) = self.type_fields();
        a.get_or_insert_with(|| Self::API_VERSION.to_string());
        k.get_or_insert_with(|| Self::KIND.to_string());
        self
    }

    fn name(&self) -> &str {
        self.meta().name()
    }

    fn uid(&self) -> Option<&str> {
        self.meta().uid.as_deref()
    }

    fn resource_version(&self) -> Option<&str> {
        self.meta().resource_version.as_deref()
    }
}

/// `/api/v1` or `/apis/{group}/{version}`.
pub fn api_prefix(api_version: &str) -> String {
    if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    }
}

macro_rules! resource {
    ($ty:ident, $api:expr, $kind:expr, $plural:expr, $group:expr, $namespaced:expr) => {
        impl Resource for $ty {
            const API_VERSION: &'static str = $api;
            const KIND: &'static str = $kind;
            const PLURAL: &'static str = $plural;
            const GROUP: &'static str = $group;
            const NAMESPACED: bool = $namespaced;

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
            fn type_fields(&mut self) -> (&mut Option<String>, &mut Option<String>) {
                (&mut self.api_version, &mut self.kind)
            }
        }
    };
}

/// Declares an object struct: apiVersion, kind, metadata, the given typed
/// fields, and `extra`.
macro_rules! object {
    ($(#[$m:meta])* $ty:ident { $($(#[$fm:meta])* $field:ident : $fty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $ty {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub api_version: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub kind: Option<String>,
            #[serde(default)]
            pub metadata: ObjectMeta,
            $(
                $(#[$fm])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$fty>,
            )*
            #[serde(flatten)]
            pub extra: Map<String, Value>,
        }
    };
}

// ---------------------------------------------------------------- Pod

object!(
    /// `v1` Pod.
    Pod { spec: PodSpec, status: PodStatus }
);
resource!(Pod, "v1", "Pod", "pods", "", true);

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EnvVar {
    pub fn value(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..EnvVar::default()
        }
    }

    /// The downward API: `valueFrom.fieldRef.fieldPath` (`status.podIP`).
    pub fn field_ref(name: &str, field_path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: field_path.into(),
                    ..ObjectFieldSelector::default()
                }),
                extra: Map::new(),
            }),
            ..EnvVar::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectFieldSelector {
    #[serde(default)]
    pub field_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    pub container_port: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Pending | Running | Succeeded | Failed | Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, rename = "podIPs", skip_serializing_if = "Option::is_none")]
    pub pod_ips: Option<Vec<PodIp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PodIp {
    #[serde(default)]
    pub ip: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    /// "True" | "False" | "Unknown".
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerStateWaiting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContainerStateWaiting {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateRunning {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Pod {
    /// `status.phase`, or "" before the first status.
    pub fn phase(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("")
    }

    /// `status.podIP`.
    pub fn pod_ip(&self) -> Option<&str> {
        self.status.as_ref()?.pod_ip.as_deref()
    }

    /// A container's status (regular containers, then init containers).
    pub fn container_status(&self, name: &str) -> Option<&ContainerStatus> {
        let s = self.status.as_ref()?;
        s.container_statuses
            .iter()
            .chain(s.init_container_statuses.iter())
            .flatten()
            .find(|c| c.name == name)
    }
}

// ------------------------------------------------------------ Service

object!(
    /// `v1` Service.
    Service { spec: ServiceSpec, status: Value }
);
resource!(Service, "v1", "Service", "services", "", true);

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// ClusterIP | NodePort | LoadBalancer | ExternalName.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(rename = "clusterIP", default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    #[serde(
        rename = "clusterIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_ips: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ServicePort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<BTreeMap<String, String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    pub port: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A port given as a number or a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

// -------------------------------------------------- ConfigMap, Secret

object!(
    /// `v1` ConfigMap.
    ConfigMap {
        data: BTreeMap<String, String>,
        /// base64 values.
        binary_data: BTreeMap<String, String>,
        immutable: bool,
    }
);
resource!(ConfigMap, "v1", "ConfigMap", "configmaps", "", true);

object!(
    /// `v1` Secret. `data` values are base64 on the wire.
    Secret {
        data: BTreeMap<String, String>,
        string_data: BTreeMap<String, String>,
        #[serde(rename = "type")]
        type_: String,
        immutable: bool,
    }
);
resource!(Secret, "v1", "Secret", "secrets", "", true);

impl Secret {
    /// A `data` value, base64-decoded.
    pub fn decoded(&self, key: &str) -> Option<Vec<u8>> {
        use base64::Engine;
        let v = self.data.as_ref()?.get(key)?;
        base64::engine::general_purpose::STANDARD.decode(v).ok()
    }
}

// ----------------------------------------------------------- Namespace

object!(
    /// `v1` Namespace (cluster-scoped).
    Namespace { spec: Value, status: NamespaceStatus }
);
resource!(Namespace, "v1", "Namespace", "namespaces", "", false);

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NamespaceStatus {
    /// Active | Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

// ------------------------------------------------------------- Ingress

object!(
    /// `networking.k8s.io/v1` Ingress.
    Ingress { spec: IngressSpec, status: Value }
);
resource!(
    Ingress,
    "networking.k8s.io/v1",
    "Ingress",
    "ingresses",
    "networking.k8s.io",
    true
);

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Vec<IngressTls>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<IngressRule>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct IngressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpIngressRuleValue>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HttpIngressRuleValue {
    #[serde(default)]
    pub paths: Vec<HttpIngressPath>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpIngressPath {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Exact | Prefix | ImplementationSpecific (required by the server).
    #[serde(default)]
    pub path_type: String,
    #[serde(default)]
    pub backend: IngressBackend,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct IngressBackend {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<IngressServiceBackend>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct IngressServiceBackend {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub port: ServiceBackendPort,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServiceBackendPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

// ------------------------------------------------------ Gateway API

object!(
    /// `gateway.networking.k8s.io/v1` HTTPRoute (its spec and status kept
    /// as JSON: kubegate builds one shape and reads a few conditions,
    /// `session::gateway`).
    HttpRoute { spec: Value, status: Value }
);
resource!(
    HttpRoute,
    "gateway.networking.k8s.io/v1",
    "HTTPRoute",
    "httproutes",
    "gateway.networking.k8s.io",
    true
);

object!(
    /// `gateway.networking.k8s.io/v1` Gateway (read at start: the one
    /// session routes attach to).
    Gateway { spec: Value, status: Value }
);
resource!(
    Gateway,
    "gateway.networking.k8s.io/v1",
    "Gateway",
    "gateways",
    "gateway.networking.k8s.io",
    true
);

// ------------------------------------------ Deployment, ReplicaSet

object!(
    /// `apps/v1` Deployment.
    Deployment { spec: DeploymentSpec, status: DeploymentStatus }
);
resource!(
    Deployment,
    "apps/v1",
    "Deployment",
    "deployments",
    "apps",
    true
);

object!(
    /// `apps/v1` ReplicaSet.
    ReplicaSet { spec: ReplicaSetSpec, status: ReplicaSetStatus }
);
resource!(
    ReplicaSet,
    "apps/v1",
    "ReplicaSet",
    "replicasets",
    "apps",
    true
);

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LabelSelectorRequirement {
    #[serde(default)]
    pub key: String,
    /// In | NotIn | Exists | DoesNotExist.
    #[serde(default)]
    pub operator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PodTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DeploymentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: PodTemplateSpec,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReplicaSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplateSpec>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSetStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_round_trips_unknown_fields_at_every_level() {
        let v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "resourceVersion": "7", "managedFields": [{"x": 1}]},
            "spec": {
                "containers": [{
                    "name": "main", "image": "busybox", "command": ["sh"],
                    "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP", "future": 1}}}],
                    "ports": [{"containerPort": 80, "hostIP": "1.2.3.4"}],
                    "resources": {"limits": {"cpu": "1"}}
                }],
                "nodeName": "n", "dnsPolicy": "ClusterFirst"
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}],
                "containerStatuses": [{
                    "name": "main", "ready": true, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 3, "reason": "Error", "containerID": "x"}},
                    "imageID": "sha"
                }],
                "qosClass": "BestEffort"
            },
            "newTopLevel": {"a": 1}
        });
        let p: Pod = serde_json::from_value(v.clone()).expect("pod");
        assert_eq!(p.phase(), "Running");
        assert_eq!(p.pod_ip(), Some("10.0.0.1"));
        let t = p
            .container_status("main")
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        assert_eq!(t, Some(3));
        assert_eq!(serde_json::to_value(&p).expect("json"), v);
    }

    #[test]
    fn service_and_ingress_round_trip() {
        let s = json!({"metadata": {"name": "s"}, "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.5",
            "clusterIPs": ["10.96.0.5"], "ports": [{"port": 80, "targetPort": "http", "appProtocol": "h2c"}],
            "selector": {"app": "a"}, "sessionAffinity": "None"}, "status": {"loadBalancer": {}}});
        let svc: Service = serde_json::from_value(s.clone()).expect("svc");
        assert_eq!(
            svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
            Some("10.96.0.5")
        );
        assert_eq!(serde_json::to_value(&svc).expect("json"), s);
        let i = json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "nginx",
            "tls": [{"hosts": ["a.example"], "secretName": "tls"}],
            "rules": [{"host": "a.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "s", "port": {"number": 80}}}}]}}]}});
        let ing: Ingress = serde_json::from_value(i.clone()).expect("ing");
        assert_eq!(serde_json::to_value(&ing).expect("json"), i);
    }

    #[test]
    fn type_fields_fill_in() {
        let d = Deployment::default().with_type_fields();
        assert_eq!(d.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(d.kind.as_deref(), Some("Deployment"));
        assert_eq!(api_prefix("apps/v1"), "/apis/apps/v1");
        assert_eq!(api_prefix("v1"), "/api/v1");
    }
}
