//! HTTP/1.1 + WebSocket machinery on OS threads: the server half, shared
//! by the simulated cluster and the daemon's front door, and the client
//! half, shared by every outbound connection. It knows no domain: no
//! Kubernetes, no kubegate type or rule; callers pass what they need (TLS
//! settings, headers, subprotocols, limits).
//!
//! Server half: it parses requests (with limits, `parse`), routes nothing
//! itself, and hands each request to a [`Handler`], which answers with a
//! full response, a chunked stream, a WebSocket upgrade, or a raw upgrade
//! to another protocol ([`raw`]). Shape: one
//! listener thread; one thread per connection, bounded in number;
//! keep-alive; a streaming response runs on its connection's thread; an
//! upgraded WebSocket is driven by [`ws::run`], which waits in poll(2) on
//! the socket and on an eventfd waker signalled by the senders of its
//! bounded outbound channel.
//!
//! Client half: [`endpoint`] (a server URL split for dialling),
//! [`client`] (TCP, TLS and the exchange under one deadline, the WebSocket
//! upgrade) and [`response`] (the sans-IO response head parser and body
//! framing every client reads answers with).

pub mod client;
mod conn;
pub mod endpoint;
pub mod hop;
pub(crate) mod parse;
pub mod raw;
pub mod response;
pub mod server;
pub mod stream;
pub mod tls;
pub mod tunnel;
pub mod types;
pub mod ws;

pub use server::{Server, ServerConfig, Stats};
pub use stream::{PollStream, Socket, TlsStream};
pub use types::*;
