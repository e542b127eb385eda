//! Kubernetes wire formats shared by the client and the simulated cluster:
//! object metadata helpers, Status, watch event encoding and decoding, the
//! exec/attach channel framing and channel-3 statuses, and time formatting.
//! Everything here is sans-IO: bytes and values in, bytes and values out.
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
//! - `time`: RFC 3339 timestamps.

pub mod channel;
pub mod connection;
pub mod jsonstream;
pub mod meta;
pub mod protobuf;
pub mod remote;
pub mod status;
pub mod time;
pub mod tls_client;
pub mod watch;
