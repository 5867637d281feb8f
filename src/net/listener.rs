//! Owns: listening sockets — bound with `SO_REUSEPORT` so every shard accepts its own
//! connections on the same port, after a probe that refuses a port another process
//! already listens on; `[::]` dual-stack, or `0.0.0.0` where the kernel has no IPv6 —
//! and each shard's accept loop.
//!
//! Does not: know AMQP; an accepted socket is handed to `reader::serve`, or on a TLS
//! listener to `tls::serve` (handshake first).

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::limits::report::Reporter;
use crate::shard::Shard;

/// Binds one `SO_REUSEPORT` listener per shard on each address, each address first
/// checked with [`probe`] (an address another process listens on is an error naming
/// it). A port of 0 is resolved once (by the probe) and reused, so all shards share the
/// same ephemeral port.
pub fn bind_all(
    addrs: &[SocketAddr],
    shards: usize,
) -> io::Result<(Vec<Vec<std::net::TcpListener>>, Vec<SocketAddr>)> {
    let mut per_shard: Vec<Vec<std::net::TcpListener>> = (0..shards).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    for addr in addrs {
        let mut actual = match probe(*addr) {
            Ok(actual) => actual,
            // `[::]` where the kernel has no IPv6: every IPv4 address instead.
            Err(e) if is_ipv6_any(addr) && ipv6_unavailable(&e) => {
                let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
                crate::ops::config_event::ConfigEvent::Ipv4Only {
                    addr: *addr,
                    instead: v4,
                    error: e.to_string(),
                }
                .emit();
                probe(v4)?
            }
            Err(e) => return Err(e),
        };
        for listeners in per_shard.iter_mut() {
            let listener = bind_one(actual)?;
            actual = listener.local_addr()?;
            listeners.push(listener);
        }
        bound.push(actual);
    }
    Ok((per_shard, bound))
}

/// Binds `addr` once without `SO_REUSEPORT` and lets the socket go again, returning the
/// address it got (a port of 0 resolved). `SO_REUSEPORT` lets every process of the same
/// user bind a port that already has such listeners, so without this a second broker
/// started on the same port would bind too and take a share of the connections. A
/// socket without it cannot bind next to a listener (with or without `SO_REUSEPORT`),
/// so the probe fails with `EADDRINUSE`, reported as [`AddressInUse`]. It keeps
/// `SO_REUSEADDR`, which on Linux lets a bind pass over connections in `TIME_WAIT` (a
/// restart) but never over a listening socket.
///
/// Between the probe and the shards' binds a second broker could still probe the same
/// free port; both would then bind. The window is the few microseconds between two
/// system calls, at start only.
pub fn probe(addr: SocketAddr) -> io::Result<SocketAddr> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    dual_stack(&socket, addr)?;
    if let Err(e) = socket.bind(&addr.into()) {
        return Err(match e.kind() {
            io::ErrorKind::AddrInUse => io::Error::new(e.kind(), AddressInUse(addr)),
            kind => io::Error::new(kind, format!("{addr}: {e}")),
        });
    }
    socket
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other(format!("{addr}: bound to a non-IP address")))
}

/// Another process listens on this address (the probe of [`probe`] failed).
#[derive(Debug)]
pub struct AddressInUse(pub SocketAddr);

impl std::fmt::Display for AddressInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is already in use: another process (another sluice?) listens on it",
            self.0
        )
    }
}

impl std::error::Error for AddressInUse {}

/// The accept backlog asked for per listening socket (one per shard and address). The
/// kernel caps it at `net.core.somaxconn`, so that sysctl decides (4096 by default since
/// Linux 5.4); asking for less would cap what an operator sets for reconnect storms of
/// tens of thousands of clients (deploy/README.md).
const LISTEN_BACKLOG: i32 = 65_535;

/// `[::]` (any IPv6 address) listens dual-stack whatever `net.ipv6.bindv6only` says:
/// `IPV6_V6ONLY` off, so IPv4 clients (`localhost` resolving to 127.0.0.1) reach it
/// too, as RabbitMQ's default listener does. IPv4 peers then arrive IPv4-mapped, which
/// the accept loop turns back into IPv4.
fn dual_stack(socket: &Socket, addr: SocketAddr) -> io::Result<()> {
    if is_ipv6_any(&addr) {
        socket.set_only_v6(false)?;
    }
    Ok(())
}

fn is_ipv6_any(addr: &SocketAddr) -> bool {
    matches!(addr, SocketAddr::V6(v6) if v6.ip().is_unspecified())
}

/// The kernel has no IPv6: no such socket family (`EAFNOSUPPORT`), or IPv6 disabled
/// (`EADDRNOTAVAIL` binding `[::]`).
fn ipv6_unavailable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAFNOSUPPORT) | Some(libc::EADDRNOTAVAIL)
    ) || e.kind() == io::ErrorKind::AddrNotAvailable
}

fn bind_one(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    dual_stack(&socket, addr)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// How long accepting pauses after a failure (the connection waits in the backlog).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Accept failures are logged (CON-1005) at most this often, summed.
const ACCEPT_REPORT_GAP: Duration = Duration::from_secs(10);

/// Accepts connections on one listener of one shard until the shard stops. When accept
/// fails (EMFILE/ENFILE: out of descriptors) the loop backs off, logs at most once per
/// [`ACCEPT_REPORT_GAP`] with the number of failures, and goes on: connections already
/// open are served meanwhile, and a connection waiting in the backlog is accepted once
/// a descriptor is free.
/// On a TLS listener (`tls` set) each socket goes through `tls::serve` first.
pub async fn accept_loop(
    shard: Rc<Shard>,
    listener: std::net::TcpListener,
    tls: Option<std::sync::Arc<super::tls::TlsListener>>,
) {
    let listener = tokio_uring::net::TcpListener::from_std(listener);
    let failures = Reporter::new(ACCEPT_REPORT_GAP, 1);
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // A dual-stack (`[::]`) listener reports an IPv4 client IPv4-mapped
                // (`::ffff:a.b.c.d`): it is that IPv4 address for the loopback-only
                // users, the per-address limit, the login throttle and the logs.
                let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                if shard.stopping.get() || !shard.limits.admit_socket(peer, shard.clock.now()) {
                    continue;
                }
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!("set_nodelay failed for {peer}: {e}");
                }
                match &tls {
                    None => {
                        tokio_uring::spawn(super::reader::serve(Rc::clone(&shard), stream, peer));
                    }
                    Some(tls) => {
                        tokio_uring::spawn(super::tls::serve(
                            Rc::clone(&shard),
                            stream,
                            peer,
                            std::sync::Arc::clone(tls),
                        ));
                    }
                }
            }
            Err(e) => {
                if let Some(failures) = failures.note(shard.clock.now()) {
                    crate::ops::event::OpsEvent::AcceptFailed {
                        shard: shard.id,
                        error: e.to_string(),
                        failures,
                    }
                    .emit();
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}
