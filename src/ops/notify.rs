//! Owns: the systemd readiness protocol (`sd_notify(3)`), spoken directly: one datagram
//! of `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET` — a path, or an
//! abstract address written with a leading `@`. `Type=notify` units start sluice and
//! wait for `READY=1`; `STOPPING=1` tells systemd the stop is the broker's own.
//!
//! Does not: decide when the broker is ready or stopping (`server` does), retry, or fail
//! anything: without `$NOTIFY_SOCKET` nothing happens, and a failed send is logged once
//! (BRK-1013) and otherwise ignored — a broker that serves clients must not stop because
//! its supervisor's socket went away.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};

use super::event::OpsEvent;

/// Set once a failed send has been logged: the warning is written once per process.
static WARNED: AtomicBool = AtomicBool::new(false);

/// `READY=1` with the main pid and a status line: every shard accepts connections.
pub fn ready(status: &str) {
    notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS={}\n",
        std::process::id(),
        one_line(status)
    ));
}

/// `STOPPING=1` with a status line: shutdown has begun.
pub fn stopping(status: &str) {
    notify(&format!("STOPPING=1\nSTATUS={}\n", one_line(status)));
}

/// Sends `state` to `$NOTIFY_SOCKET`, if set; logs the first failure (BRK-1013).
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let target = target.to_string_lossy().into_owned();
    if let Err(error) = send(&target, state) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            OpsEvent::NotifyFailed {
                socket: target,
                error: error.to_string(),
            }
            .emit();
        }
    }
}

/// Sends one datagram holding `state` to the socket `target` names.
pub fn send(target: &str, state: &str) -> io::Result<()> {
    let addr = address(target)?;
    let socket = UnixDatagram::unbound()?;
    let sent = socket.send_to_addr(state.as_bytes(), &addr)?;
    if sent != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes", state.len()),
        ));
    }
    Ok(())
}

/// `@name` is an abstract socket address, anything else a path (as `sd_notify` reads it).
fn address(target: &str) -> io::Result<SocketAddr> {
    match target.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None if target.starts_with('/') => SocketAddr::from_pathname(target),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "neither an absolute path nor an abstract address (@name)",
        )),
    }
}

/// A status is one line of the datagram.
fn one_line(status: &str) -> String {
    status.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_abstract_sockets_receive_the_state() {
        let dir = std::env::temp_dir().join(format!("sluice-notify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).expect("bind path socket");
        send(&path.to_string_lossy(), "READY=1\n").expect("send to path");
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1\n");
        let _ = std::fs::remove_dir_all(&dir);

        use std::os::linux::net::SocketAddrExt;
        let name = format!("sluice-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let rx = UnixDatagram::bind_addr(&addr).expect("bind abstract socket");
        send(&format!("@{name}"), "STOPPING=1\n").expect("send to abstract");
        let n = rx.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"STOPPING=1\n");
    }

    #[test]
    fn bad_targets_are_errors_not_panics() {
        assert!(send("relative/path", "READY=1\n").is_err());
        assert!(send("/nonexistent-dir-sluice/notify.sock", "READY=1\n").is_err());
    }

    #[test]
    fn status_is_one_line() {
        assert_eq!(one_line("a\nb"), "a b");
    }
}
