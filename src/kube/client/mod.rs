//! The hand-written Kubernetes client: synchronous, on OS threads, over
//! ureq (no async runtime).
//!
//! - `rest`: [`Client`], built from a [`Connection`](crate::kube::connection::Connection):
//!   one ureq agent, bearer tokens, the 401 refresh, narrow retries.
//! - `transport`: the ureq connector that uses our rustls `ClientConfig`
//!   (tls-server-name, client certificates, the kubeconfig CA).
//! - `error`: [`KubeError`], one variant per thing a caller can act on.
//! - `resources`: typed objects that keep unknown fields, and [`Resource`].
//! - `api`: [`Api<K>`] (create, get, replace, patch, delete, list, status)
//!   and the pod -> ReplicaSet -> Deployment walk.
//! - `watch`: [`Watcher<K>`], a resuming, relisting, stoppable watch.
//! - `proxy`: HTTP to a pod's port through the API server.
//! - `backoff`: exponential backoff with jitter.
//!
//! What it never does: load kubeconfigs (`kube::config`), exec/attach
//! (`kube::remote`), or spawn threads of its own. Wire formats (Status,
//! watch events, metadata) come from the sans-IO modules beside it, so the
//! simulated server and the client cannot drift apart.

pub mod api;
pub mod backoff;
pub mod error;
pub mod proxy;
pub mod resources;
pub mod rest;
pub mod transport;
pub mod watch;

pub use api::{
    pod_deployment, pod_replicaset, Api, DeleteParams, Deleted, List, ListParams, LogParams,
    PodLog, Preconditions, Propagation,
};
pub use error::KubeError;
pub use proxy::{ProxyError, ProxyRequest, ProxyResponse};
pub use resources::{
    ConfigMap, Deployment, Gateway, HttpRoute, Ingress, Namespace, Pod, ReplicaSet, Resource,
    Secret, Service,
};
pub use rest::{Client, ClientOptions, RetryPolicy};
pub use watch::{WatchEvent, WatchParams, WatchStopper, Watcher};
