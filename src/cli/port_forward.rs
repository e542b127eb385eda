//! `kubegate port-forward SESSION [LOCAL:]REMOTE...` and `kubegate
//! port-forward --workspace P/U DEPLOYMENT [LOCAL:]REMOTE...`: local TCP
//! listeners whose every accepted connection becomes one tunnel through
//! the daemon (`…/tunnels/{port}` or `/v1/exec/tunnel`, a
//! `kubegate.tunnel.v1` WebSocket, docs/api.md#tunnels), any TCP carried
//! (HTTP with keep-alive included), kubectl's lines on stdout.
//!
//! Half-close: the local client shutting its write side sends the eof
//! through; the pod's eof shuts our write side of the local socket (the
//! client reads its end of file); the tunnel's end closes the local socket.
//!
//! The target is looked up before listening (an unknown session or
//! Deployment fails at once); afterwards every connection resolves it
//! anew at the daemon, so a session that is suspended, resumed or
//! re-created is reached again by the same local port. A connection the
//! daemon refuses is closed and said on stderr once per outage ("is not
//! reachable now …"), and "reachable again" when a connection goes through
//! after that; the listeners stay.
//!
//! Threads: main (listens, then waits for SIGINT/SIGTERM/SIGHUP, then
//! drains), one `kubegate-pf-listen` per listening socket (accepts; at
//! [`MAX_CONNECTIONS`] it waits), one `kubegate-pf-conn` per connection
//! (the WebSocket's pump) with its `tunnel-read` and `tunnel-write`
//! (`http::tunnel::splice`).

use super::args::{ForwardTarget, PortForwardArgs, PortPair};
use super::net::Client;
use super::{local_io, CliError};
use crate::exit::codes;
use crate::http::tunnel::{splice, Duplex, End, SpliceOptions, SUBPROTOCOL};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections tunnelled at once; more wait in the listen backlog (the
/// daemon has its own per-principal cap, `server.max_tunnels_per_principal`).
pub const MAX_CONNECTIONS: usize = 128;
/// On a stop, how long connections under way may still run.
const DRAIN: Duration = Duration::from_secs(5);

/// What every connection shares.
struct Forwarder {
    client: Client,
    target: ForwardTarget,
    /// The target refused the last connection (the outage was said).
    down: AtomicBool,
    /// Connections under way; the condvar says when one ends.
    active: parking_lot::Mutex<usize>,
    ended: parking_lot::Condvar,
    /// Disconnected at a stop: every tunnel ends.
    stop: Receiver<()>,
}

impl Forwarder {
    /// The daemon's path of a tunnel to `remote`.
    fn path(&self, remote: u16) -> String {
        match &self.target {
            ForwardTarget::Session(id) => self
                .client
                .path(&format!("/v1/sessions/{id}/tunnels/{remote}")),
            ForwardTarget::Deployment {
                project,
                uid,
                deployment,
            } => self.client.path(&format!(
                "/v1/exec/tunnel?project={}&uid={}&deployment={}&port={remote}",
                enc(project),
                enc(uid),
                enc(deployment)
            )),
        }
    }

    fn what(&self) -> String {
        match &self.target {
            ForwardTarget::Session(id) => format!("session {id}"),
            ForwardTarget::Deployment {
                project,
                uid,
                deployment,
            } => format!("deployment {deployment} of {project}/{uid}"),
        }
    }

    /// A connection ended.
    fn done(&self) {
        let mut active = self.active.lock();
        *active = active.saturating_sub(1);
        self.ended.notify_all();
    }

    /// One accepted connection, to its end.
    fn serve(&self, local: TcpStream, pair: PortPair, local_port: u16) {
        let ws = match self.client.open_ws(&self.path(pair.remote), SUBPROTOCOL) {
            Ok(ws) => ws,
            // Our own cap at the daemon: not an outage of the target.
            Err(e) if e.code == "TOO_MANY_CONNECTIONS" => {
                eprintln!("kubegate: connection for {local_port} refused by the daemon: {e}");
                let _ = local.shutdown(std::net::Shutdown::Both);
                return;
            }
            Err(e) => {
                if !self.down.swap(true, Ordering::SeqCst) {
                    eprintln!(
                        "kubegate: {} is not reachable now on port {} ({e}); connections to {local_port} are closed until it is back, the listener stays",
                        self.what(),
                        pair.remote
                    );
                }
                let _ = local.shutdown(std::net::Shutdown::Both);
                return;
            }
        };
        if self.down.swap(false, Ordering::SeqCst) {
            eprintln!(
                "kubegate: {} is reachable again on port {}",
                self.what(),
                pair.remote
            );
        }
        let far = match Duplex::tcp(local) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("kubegate: connection for {local_port}: {e}");
                return;
            }
        };
        let opts = SpliceOptions {
            stop: Some(self.stop.clone()),
            ..SpliceOptions::default()
        };
        let totals = splice(ws, far, opts);
        match totals.end {
            // The local client going away (a reset, a write refused) is
            // its own business, as with kubectl.
            End::Done | End::Shutdown | End::FarError(_) | End::Idle | End::MaxDuration => {}
            End::PeerClosed(code, reason) => {
                eprintln!(
                    "kubegate: connection for {local_port} ended by the daemon ({code}): {reason}"
                );
            }
            End::Socket(e) => {
                eprintln!(
                    "kubegate: connection for {local_port}: the daemon's connection failed: {e}"
                );
            }
            End::Protocol(m) => {
                eprintln!("kubegate: connection for {local_port}: the daemon broke the tunnel protocol: {m}");
            }
        }
    }
}

/// A query value, percent-encoded (names are DNS labels and uids are
/// free text).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The addresses `--address` names: `localhost` is 127.0.0.1 and ::1
/// (the second may fail: no IPv6), others IP literals. With the bool:
/// whether a failure to listen there is only a warning.
fn addresses(given: &[String]) -> Result<Vec<(IpAddr, bool)>, CliError> {
    let mut out = Vec::new();
    for a in given {
        if a == "localhost" {
            out.push((IpAddr::V4(Ipv4Addr::LOCALHOST), false));
            out.push((IpAddr::V6(Ipv6Addr::LOCALHOST), true));
            continue;
        }
        let ip: IpAddr = a
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| {
                CliError::usage(format!("--address {a:?} is not an IP address or localhost"))
            })?;
        out.push((ip, false));
    }
    // `localhost,127.0.0.1` names one address twice: listen once.
    let mut seen = Vec::new();
    out.retain(|(ip, _)| {
        let new = !seen.contains(ip);
        seen.push(*ip);
        new
    });
    Ok(out)
}

/// The listeners of one `[LOCAL:]REMOTE` on every address: a free port
/// (`:REMOTE`) is picked on the first address and used on the others.
fn listen(
    addrs: &[(IpAddr, bool)],
    pair: PortPair,
) -> Result<Vec<(TcpListener, SocketAddr)>, CliError> {
    let mut port = pair.local;
    let mut out = Vec::new();
    for (ip, optional) in addrs {
        let addr = SocketAddr::new(*ip, port);
        match TcpListener::bind(addr) {
            Ok(l) => {
                let bound = l
                    .local_addr()
                    .map_err(|e| local_io("the listening address", e))?;
                port = bound.port();
                out.push((l, bound));
            }
            Err(e) if *optional => {
                eprintln!("kubegate: warning: listening on {addr}: {e}");
            }
            Err(e) => {
                return Err(CliError::new(
                    codes::LOCAL_IO,
                    format!("listening on {addr}: {e}"),
                ));
            }
        }
    }
    if out.is_empty() {
        return Err(CliError::new(
            codes::LOCAL_IO,
            format!("could not listen on any address for port {}", pair.local),
        ));
    }
    Ok(out)
}

/// The target exists and is the caller's, before anything listens.
fn check_target(client: &Client, target: &ForwardTarget) -> Result<(), CliError> {
    match target {
        ForwardTarget::Session(id) => client.get(&format!("/v1/sessions/{id}")).map(|_| ()),
        ForwardTarget::Deployment {
            project,
            uid,
            deployment,
        } => {
            let body = client.get("/v1/workspaces")?;
            let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                CliError::new(
                    codes::PROTOCOL,
                    format!("the daemon's workspaces do not decode: {e}"),
                )
            })?;
            let ws = v["workspaces"].as_array().and_then(|l| {
                l.iter()
                    .find(|w| w["project"] == project.as_str() && w["uid"] == uid.as_str())
            });
            let Some(ws) = ws else {
                return Err(CliError::new(
                    "EXEC_TARGET_FORBIDDEN",
                    format!("workspace {project}/{uid} is not one this token may act on"),
                ));
            };
            let found = ws["deployments"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["name"] == deployment.as_str()));
            if !found {
                return Err(CliError::new(
                    "EXEC_TARGET_NOT_FOUND",
                    format!("deployment {deployment} was not found in workspace {project}/{uid}"),
                ));
            }
            Ok(())
        }
    }
}

pub fn run(a: &PortForwardArgs) -> Result<(), CliError> {
    if a.deprecated_local {
        if let Some(p) = a.ports.first() {
            eprintln!(
                "kubegate: warning: `port-forward SESSION PORT LOCAL` is deprecated; write `port-forward SESSION {}:{}` (kubectl's order)",
                p.local, p.remote
            );
        }
    }
    let client = Client::new(&a.common)?;
    check_target(&client, &a.target)?;
    let addrs = addresses(&a.addresses)?;
    let mut listeners = Vec::new();
    for pair in &a.ports {
        for (l, bound) in listen(&addrs, *pair)? {
            listeners.push((l, bound, *pair));
        }
    }
    // Only once every listener is bound is anything said or accepted. The
    // lines are information: a reader that took the first and closed our
    // stdout does not stop the forwarding.
    {
        let text: String = listeners
            .iter()
            .map(|(_, bound, pair)| format!("Forwarding from {bound} -> {}\n", pair.remote))
            .collect();
        let mut out = io::stdout().lock();
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| local_io("installing signal handlers", e))?;
    let (stop_tx, stop_rx): (Sender<()>, Receiver<()>) = bounded(0);
    let fwd = Arc::new(Forwarder {
        client,
        target: a.target.clone(),
        down: AtomicBool::new(false),
        active: parking_lot::Mutex::new(0),
        ended: parking_lot::Condvar::new(),
        stop: stop_rx,
    });
    for (l, bound, pair) in listeners {
        let fwd = fwd.clone();
        std::thread::Builder::new()
            .name("kubegate-pf-listen".into())
            .spawn(move || accept_loop(&fwd, &l, bound.port(), pair))
            .map_err(|e| local_io("spawning a listener thread", e))?;
    }
    let _ = signals.forever().next();
    drop(stop_tx);
    let deadline = Instant::now() + DRAIN;
    let mut active = fwd.active.lock();
    while *active > 0 {
        if fwd.ended.wait_until(&mut active, deadline).timed_out() {
            break;
        }
    }
    Ok(())
}

/// Accepts on one listener until the stop; each connection its own thread.
fn accept_loop(fwd: &Arc<Forwarder>, l: &TcpListener, local_port: u16, pair: PortPair) {
    for conn in l.incoming() {
        if matches!(
            fwd.stop.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ) {
            return;
        }
        let sock = match conn {
            Ok(s) => s,
            Err(e) => {
                eprintln!("kubegate: warning: accepting a connection on {local_port}: {e}");
                // Out of file descriptors, say: do not spin.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        {
            let mut active = fwd.active.lock();
            while *active >= MAX_CONNECTIONS {
                fwd.ended.wait(&mut active);
            }
            *active += 1;
        }
        {
            let mut out = io::stdout().lock();
            let _ =
                writeln!(out, "Handling connection for {local_port}").and_then(|()| out.flush());
        }
        let f = fwd.clone();
        let spawned = std::thread::Builder::new()
            .name("kubegate-pf-conn".into())
            .spawn(move || {
                f.serve(sock, pair, local_port);
                f.done();
            });
        if let Err(e) = spawned {
            fwd.done();
            eprintln!("kubegate: warning: no thread for a connection on {local_port}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_is_both_loopbacks_once_each() {
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(
            addresses(&["localhost".into()]).unwrap(),
            [(v4, false), (v6, true)]
        );
        assert_eq!(
            addresses(&["localhost".into(), "127.0.0.1".into(), "[::1]".into()]).unwrap(),
            [(v4, false), (v6, true)]
        );
        assert_eq!(
            addresses(&["0.0.0.0".into()]).unwrap(),
            [(IpAddr::V4(Ipv4Addr::UNSPECIFIED), false)]
        );
        let e = addresses(&["example.com".into()]).unwrap_err();
        assert!(
            e.is_usage() && e.message.contains("not an IP address"),
            "{e}"
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(enc("demo-uid_1.x~"), "demo-uid_1.x~");
        assert_eq!(enc("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
