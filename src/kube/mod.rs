//! Kubernetes wire formats shared by the client and the simulated cluster:
//! object metadata helpers, Status, watch event encoding and decoding, the
//! exec/attach channel framing and channel-3 statuses, and time formatting.
//! Everything here is sans-IO: bytes and values in, bytes and values out.

pub mod channel;
pub mod jsonstream;
pub mod status;
pub mod time;
pub mod watch;
