//! The simulated cluster (`kubegate sim`): an in-memory Kubernetes API server,
//! controllers, and a kubelet that runs containers as local processes.
//! Spec: shared/spec/sim.md. Uses only `kube`'s wire formats and `http`.

pub mod admission;
pub mod patch;
pub mod resources;
pub mod selector;
pub mod store;
