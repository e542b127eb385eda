//! ConfigMaps and Secrets for a node's pods, read from the API server by
//! GET when a container's env or a volume needs one. `None` (the pod
//! worker waits and tries again, as for a missing object) when it is
//! missing, refused, or unreachable: the Node authorizer learns of a pod's
//! Secrets from its graph a moment after the pod is bound, so a first read
//! can be a 403 that a second one is not.

use crate::kube::client::rest::Request;
use crate::kube::client::{Client, KubeError};
use crate::sim::kubelet::{decode_config_data, ConfigSource};
use serde_json::Value;
use std::collections::BTreeMap;

pub struct RemoteConfig {
    client: Client,
}

impl RemoteConfig {
    pub fn new(client: Client) -> RemoteConfig {
        RemoteConfig { client }
    }
}

impl ConfigSource for RemoteConfig {
    fn lookup(&self, ns: &str, kind: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let plural = match kind {
            "ConfigMap" => "configmaps",
            "Secret" => "secrets",
            _ => return None,
        };
        let path = format!("/api/v1/namespaces/{ns}/{plural}/{name}");
        match self.client.send_json::<Value>(&Request::get(path)) {
            Ok(o) => Some(decode_config_data(kind, &o)),
            Err(KubeError::NotFound(_)) => None,
            Err(e) => {
                log::debug!(
                    "node: reading {kind} {ns}/{name}: {e} (the pod waits and tries again)"
                );
                None
            }
        }
    }
}
