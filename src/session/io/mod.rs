//! A session app's terminal-like IO (docs/sessions.md#while-running: Output,
//! Input; the `GET /v1/sessions/{id}/io` socket of docs/api.md#sessions):
//!
//! ```text
//!  k8s attach ─ kube-remote-io (demux in place) ─────> push ──┐
//!  machine Command::Output ──────────────────────────> push ──┤
//!                                                             v
//!                     AppIo: replay ring (bytes-bounded) + subscribers
//!                                 │ try_send, never waits (queue: 256 frames;
//!                                 │ full = slow: closed with 4001)
//!                                 v
//!   per viewer (`serve`): session-io-out: Subscription -> Outbox -> door-conn (ws::run)
//!                         session-io-in:  client frames -> AppIo::stdin / resize
//!                                                   -> the current attach's StdinWriter / Controller
//! ```
//!
//! - [`AppIo`](ring::AppIo): one per session app, for the session's whole life (it
//!   survives pod recreates, so seq numbers continue). Output frames get seq
//!   numbers from 1; the ring keeps the newest frames within `io_ring_bytes`
//!   (grown as frames come: an idle app holds no buffer). `push` fans a
//!   frame out to every subscriber WITHOUT waiting: a subscriber whose
//!   queue is full is closed with 4001 `slow_subscriber` (it reconnects with
//!   its last seq), so a slow viewer never slows the app or other viewers.
//!   `subscribe` replays what is buffered after a seq (with one gap notice
//!   for evicted frames) and registers the live queue under the same lock:
//!   no frame is lost or duplicated between replay and live.
//! - Input: the current attach's stdin writer and resize controller live in
//!   the `AppIo` ([`AppIo::set_input`](ring::AppIo::set_input)); viewers write through
//!   [`AppIo::stdin`](ring::AppIo::stdin) (blocking while the attach's queue is full:
//!   backpressure to that viewer's socket only) and [`AppIo::resize`](ring::AppIo::resize)
//!   (tty apps only; the last size is kept for the next attach).
//! - [`attach`]: a Kubernetes attach into an `AppIo` on the stream's one
//!   thread (`kube-remote-io`, which demultiplexes and pushes in place:
//!   `kube::remote::attach_into`), reporting an end of its own through a
//!   callback.
//! - [`serve`]: one viewer's WebSocket (`kubegate.io.v1`), on the calling
//!   connection thread plus two.
//!
//! Files: [`wire`] (the socket's format: the only part the CLI and the
//! soak use), [`ring`] (the `AppIo` output ring and fan-out), [`input`],
//! [`subscription`], [`attach`], [`serve`], [`persist`] (the rings a stop
//! writes).
//!
//! Design and choices: docs/sessions.md, "IO: rings, attach, the io socket".

pub mod attach;
pub mod input;
pub mod persist;
pub mod ring;
pub mod serve;
pub mod subscription;
#[cfg(test)]
mod tests;
pub mod wire;
