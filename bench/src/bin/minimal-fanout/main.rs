//! `minimal-fanout`: the least a fan-out server must do, as a floor to measure sluice
//! against (issue 23). It speaks just enough AMQP 0-9-1 for sluice-bench's clients —
//! the handshake, channels, every declare, bind, qos and consume answered with its
//! `-ok`, publishes assembled — and has no routing, queues, flow control or
//! accounting: every publish is encoded once as a `basic.deliver` (one consumer tag
//! for every subscriber, on channel 1) and every subscriber gets every publish.
//!
//! Each event-loop thread (`--shards N`, 1 or more) accepts its own connections on a
//! `SO_REUSEPORT` listener and keeps a stream of the deliveries of every publish, its
//! own and the other threads' (handed over through an inbox). Subscribers are served
//! by a rolling pass: each, in turn, gets everything it missed in one `send`; every
//! `--read-every` subscribers the thread reads new publishes without waiting.
//!
//! It takes the flags sluice-bench starts an embedded broker with (`--listen`,
//! `--shards`; `--http-listen`, `--data-dir` and `--pin-cores` are accepted and
//! ignored) and prints the two lines sluice-bench waits for, so that
//! `sluice-bench … --embedded process --broker-bin target/release/minimal-fanout`
//! measures it exactly as it measures sluice (its CPU and RSS from /proc).
//!
//! Owns: the command line, the listeners and the threads.
//! Does not: serve connections (`event_loop`), speak AMQP (`conn`, `wire`) or keep
//! deliveries (`stream`).

mod conn;
mod event_loop;
mod stream;
mod wire;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::sync::Arc;

use clap::Parser;

use event_loop::{EventLoop, Settings};
use stream::Inbox;

#[derive(Parser, Debug)]
#[command(
    name = "minimal-fanout",
    about = "A minimal AMQP 0-9-1 fan-out server: the floor sluice is measured against"
)]
struct Args {
    /// IPv4 address and port to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:5673")]
    listen: SocketAddrV4,
    /// Event-loop threads.
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Subscribers sent to between two looks for new publishes during a pass.
    #[arg(long, default_value_t = 64)]
    read_every: usize,
    /// MiB a subscriber may fall behind before it is disconnected.
    #[arg(long, default_value_t = 256)]
    max_behind_mib: u64,
    /// Accepted for sluice-bench's embedded start; ignored.
    #[arg(long, hide = true)]
    http_listen: Option<String>,
    /// Accepted for sluice-bench's embedded start; ignored.
    #[arg(long, hide = true)]
    data_dir: Option<String>,
    /// Accepted for sluice-bench's embedded start; ignored.
    #[arg(long, hide = true)]
    pin_cores: Option<String>,
}

fn os_err(what: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A non-blocking `SO_REUSEPORT` listener on `addr`; returns it and the port it got.
fn listen(addr: SocketAddrV4) -> std::io::Result<(RawFd, u16)> {
    // SAFETY: plain socket calls on a descriptor created here, with live arguments.
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return Err(os_err("socket"));
        }
        let one: libc::c_int = 1;
        for opt in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_port = addr.port().to_be();
        sa.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(os_err(&format!("bind {addr}")));
        }
        if libc::listen(fd, 4096) != 0 {
            return Err(os_err("listen"));
        }
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut got_len = len;
        if libc::getsockname(
            fd,
            (&mut got as *mut libc::sockaddr_in).cast(),
            &mut got_len,
        ) != 0
        {
            return Err(os_err("getsockname"));
        }
        Ok((fd, u16::from_be(got.sin_port)))
    }
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let threads = args.shards.max(1);
    let settings = Settings {
        read_every: args.read_every.max(1),
        max_behind: args.max_behind_mib.saturating_mul(1 << 20),
    };
    let (first, port) = listen(args.listen)?;
    let mut listeners = vec![first];
    let addr = SocketAddrV4::new(*args.listen.ip(), port);
    for _ in 1..threads {
        listeners.push(listen(addr)?.0);
    }
    let inboxes: Vec<Arc<Inbox>> = (0..threads)
        .map(|_| Inbox::new().map(Arc::new))
        .collect::<Result<_, _>>()?;
    let mut handles = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let inbox = Arc::clone(&inboxes[i]);
        let peers = (0..threads)
            .filter(|&j| j != i)
            .map(|j| Arc::clone(&inboxes[j]))
            .collect();
        let lp = EventLoop::new(listener, inbox, peers, settings)?;
        handles.push(
            std::thread::Builder::new()
                .name(format!("minimal-{i}"))
                .spawn(move || lp.run())?,
        );
    }
    let shown = if *addr.ip() == Ipv4Addr::UNSPECIFIED {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
    } else {
        addr
    };
    // The two lines sluice-bench's embedded start waits for.
    println!("minimal-fanout: Listening on TCP {shown}");
    println!("minimal-fanout: ready with {threads} event-loop thread(s) (BRK-1004)");
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}
