//! The pod side of a forward: dialling the pod's port, the kubelet's
//! error text when that fails, and the registry of open pod sockets that
//! lets a forward's end unblock every thread still reading or writing one.

use super::PodRef;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// How long a dial to the pod may take (loopback: refused or accepted at
/// once; the bound is for a pod whose accept queue is full).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a TCP connection to `port` on the pod, or the text the kubelet
/// writes on the error stream when that fails.
pub(crate) fn dial(pod: &PodRef, port: u16) -> Result<TcpStream, String> {
    let addr: SocketAddr = format!("{}:{port}", pod.ip)
        .parse()
        .map_err(|_| error_text(pod, port, &format!("invalid pod address {}", pod.ip)))?;
    match TcpStream::connect_timeout(&addr, DIAL_TIMEOUT) {
        Ok(s) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Err(e) => Err(error_text(pod, port, &dial_failure(pod, port, &e))),
    }
}

/// What containerd's `portForward` returns when it cannot connect, in its
/// shape (`failed to execute portforward in network namespace %q: failed
/// to connect to localhost:%d inside namespace %q, IPv4: %v IPv6 %v `,
/// trailing space included). The sim dials the pod's IPv4 address only;
/// the IPv6 part repeats the same failure for `[::1]`.
fn dial_failure(pod: &PodRef, port: u16, e: &io::Error) -> String {
    let why = match e.kind() {
        io::ErrorKind::ConnectionRefused => "connect: connection refused".to_string(),
        io::ErrorKind::TimedOut => "i/o timeout".to_string(),
        _ => format!("connect: {e}"),
    };
    let sandbox = sandbox_id(&pod.uid);
    format!(
        "failed to execute portforward in network namespace \"/var/run/netns/cni-{uid}\": failed to connect to localhost:{port} inside namespace \"{sandbox}\", IPv4: dial tcp4 {ip}:{port}: {why} IPv6 dial tcp6 [::1]:{port}: {why} ",
        uid = pod.uid,
        ip = pod.ip,
    )
}

/// The kubelet's line on the error stream (channel): `error forwarding
/// port %d to pod %s, uid %v: %v`. Under CRI the "pod" is the sandbox id
/// and the uid is empty, as a containerd node writes it.
pub(crate) fn error_text(pod: &PodRef, port: u16, why: &str) -> String {
    format!(
        "error forwarding port {port} to pod {}, uid : {why}",
        sandbox_id(&pod.uid)
    )
}

/// A stable 64-hex-digit sandbox id for a pod (SHA-256 of its uid).
fn sandbox_id(uid: &str) -> String {
    Sha256::digest(uid.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The pod sockets a forward has open, by key: shutting them all down
/// ends every reader and unblocks every writer (a pod that stopped
/// reading cannot hold a forward's thread once the forward ends).
#[derive(Clone, Default)]
pub(crate) struct Sockets(Arc<Mutex<HashMap<String, TcpStream>>>);

impl Sockets {
    /// Keeps a clone of `sock` under `key`.
    pub fn add(&self, key: &str, sock: &TcpStream) {
        if let Ok(c) = sock.try_clone() {
            self.0.lock().insert(key.to_string(), c);
        }
    }

    /// Forgets `key` (its connection ended).
    pub fn remove(&self, key: &str) {
        self.0.lock().remove(key);
    }

    /// Shuts `key`'s socket down both ways.
    pub fn shut(&self, key: &str) {
        if let Some(s) = self.0.lock().get(key) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Shuts every socket down both ways.
    pub fn shut_all(&self) {
        for s in self.0.lock().values() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}
