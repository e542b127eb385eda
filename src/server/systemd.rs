//! systemd's readiness protocol (sd_notify(3)): the one stdout line
//! `kubegate listening on <URL>`, then `READY=1`, `RELOADING=1` (with
//! `MONOTONIC_USEC`), `STOPPING=1` as datagrams on `NOTIFY_SOCKET` when
//! systemd set it (a path, or an abstract name written `@name`); nothing
//! otherwise (scripts/kubegate.service).

use std::io::{self, Write};
use std::path::Path;

/// Prints the one stdout line and, under systemd, sends `READY=1`.
pub fn announce_ready(url: &str) -> io::Result<()> {
    {
        let mut out = io::stdout().lock();
        writeln!(out, "kubegate listening on {url}")?;
        out.flush()?;
    }
    if let Some(sock) = std::env::var_os("NOTIFY_SOCKET") {
        notify(&sock, b"READY=1")?;
    }
    Ok(())
}

/// Under systemd, one state change on `NOTIFY_SOCKET` (a failure is only
/// logged: the service goes on either way).
pub(super) fn notify_systemd(msg: &str) {
    if let Some(sock) = std::env::var_os("NOTIFY_SOCKET") {
        if let Err(e) = notify(&sock, msg.as_bytes()) {
            log::warn!("notifying systemd ({msg:?}): {e}");
        }
    }
}

/// One datagram to systemd's notification socket (a path, or an abstract
/// name written `@name`).
fn notify(sock: &std::ffi::OsStr, msg: &[u8]) -> io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let b = sock.as_bytes();
    let d = UnixDatagram::unbound()?;
    if let Some(name) = b.strip_prefix(b"@") {
        d.send_to_addr(msg, &SocketAddr::from_abstract_name(name)?)?;
    } else {
        d.send_to(msg, Path::new(sock))?;
    }
    Ok(())
}

/// The start of a reload: `RELOADING=1` with the monotonic clock now
/// (sd_notify(3)); `READY=1` ends it.
pub(super) fn notify_reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec * 1_000_000 + now.tv_nsec / 1_000;
    notify_systemd(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_sends_ready_to_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("kubegate-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        notify(path.as_os_str(), b"READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
