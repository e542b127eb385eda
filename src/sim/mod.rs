//! The simulated cluster (`kubegate sim`): an in-memory Kubernetes API server,
//! controllers, and a kubelet that runs containers as local processes.
//! Spec: docs/sim.md. Uses only `kube`'s wire formats and `http`
//! (never session, server, config or cli).
//!
//! The API side: [`api`] (routes), [`store`] (objects, resource versions,
//! watches), [`admission`] (defaults, validation, the ClusterIP/NodePort
//! allocator), [`rules`] (the syntax rules on names, keys and ports),
//! [`selector`], [`patch`], [`table`], [`discovery`], [`resources`],
//! [`decode`] and [`apitime`] (typed fields and times as Go decodes them),
//! [`difflib`] (the diffs upstream's messages carry). The
//! node side: [`kubelet`], [`node`] (the Node and its Lease), [`podspec`] (a container as a process plan),
//! [`runtime`] (processes, the shim, logs), [`podio`] (exec, attach,
//! logs), [`proxy`] (pod proxy), [`pod_users`]. Around them: [`cluster`]
//! (start and stop), [`standalone`] (`kubegate sim` as a process), [`events`] (both Event groups, the recorder, the TTL), [`reviews`] (`auth can-i`, `auth whoami`), [`authn`], [`impersonate`], [`rbac`] and [`audit`] (who calls, as whom, whether they may, the audit log), [`controllers`], [`gateway`], [`gc`], [`lifecycle`], [`faults`], [`serviceaccounts`],
//! [`tls`], [`kubeconfig`].

pub mod admission;
pub mod api;
pub mod apitime;
pub mod args;
pub mod audit;
pub mod authn;
pub mod cluster;
pub mod controllers;
pub mod decode;
pub mod difflib;
pub mod discovery;
pub mod events;
pub mod faults;
pub mod gateway;
pub mod gc;
pub mod impersonate;
pub mod kubeconfig;
pub mod kubelet;
pub mod kubelet_api;
pub mod lifecycle;
pub mod managed;
pub mod node;
pub mod nodemode;
pub mod patch;
pub mod pod_users;
pub mod podio;
pub mod podspec;
pub mod portforward;
pub mod proxy;
pub mod rbac;
pub mod resources;
pub mod reviews;
pub mod rules;
pub mod runtime;
pub mod selector;
pub mod serviceaccounts;
pub mod standalone;
pub mod store;
pub mod table;
pub mod tls;
