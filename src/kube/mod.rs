//! kubegate's hand-written Kubernetes client, and the wire formats it shares
//! with the simulated cluster.
//!
//! Sans-IO (bytes and values in, bytes and values out), shared with the sim:
//! `status`, `meta`, `watch`, `channel`, `jsonstream`, `protobuf`, `spdy`,
//! `time`, `quantity`.
//! The client, which does I/O: `connection` (what a cluster is reached
//! with), `config` (kubeconfig, in-cluster, credentials), `tls_client` (the
//! one rustls configuration), `client` (REST, errors, typed resources,
//! resumable watch, pod proxy) and `remote` (exec and attach).
//!
//! - `status`: the Status object, upstream-exact error constructors, field
//!   errors, and decoding of any error response (including plain-text 429s).
//! - `meta`: typed ObjectMeta/OwnerReference/ListMeta that keep unknown
//!   fields, and path/label/owner helpers over `serde_json::Value` objects.
//! - `watch`: watch event lines (encode, with a pre-serialised fast path) and
//!   a chunk-agnostic `WatchDecoder`.
//! - `channel`: the v4/v5 exec/attach channel subprotocols, exit statuses and
//!   resize messages.
//! - `jsonstream`: the incremental JSON-value splitter under `watch` and
//!   `channel`.
//! - `protobuf`: decoding of kubectl's protobuf request bodies into the JSON
//!   the same request would have carried.
//! - `spdy`: SPDY/3 frames and zlib header blocks for `pods/portforward`
//!   (server and client roles).
//! - `time`: RFC 3339 timestamps.
//! - `names`: Kubernetes' name rules (DNS labels and subdomains, label
//!   keys and values).
//! - `labels`: the label keys kubegate puts on cluster objects.
//! - `quantity`: resource quantities (`500m`, `1Gi`) parsed exactly, compared
//!   and clamped to a ceiling.
//! - `config`: kubeconfig and in-cluster loading into a `Connection`, and
//!   the refreshing credentials (token files, exec plugins). The one
//!   exception to sans-IO here: it reads files and runs credential plugins.

pub mod channel;
pub mod client;
pub mod config;
pub mod connection;
pub mod image;
pub mod jsonstream;
pub mod labels;
pub mod meta;
pub mod names;
pub mod protobuf;
pub mod quantity;
pub mod remote;
pub mod spdy;
pub mod status;
pub mod time;
pub mod tls_client;
pub mod watch;
