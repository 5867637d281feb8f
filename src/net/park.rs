//! Owns: the task that waits on a shard's parked readers — the sockets of idle plain
//! connections whose reader task ended while they had nothing to read (`net::reader`
//! parks them) — and restarts a connection's reader when its socket has bytes (or hangs
//! up). A parked connection costs no task and no registration with the runtime's I/O
//! driver (issue 23: the two were ~700 bytes of every idle subscriber); what restarts its
//! reader waits in its `Conn`.
//!
//! Does not: keep the set of watched sockets (`shard::reader_park::ParkSet` does), decide
//! which connections park (the shard's housekeeping asks idle ones), read sockets, or
//! restart a reader for any other reason than its socket (the connection's `finish`
//! restarts a closed one).

use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::shard::Shard;

/// The epoll set as the runtime's readiness registration sees it (the set owns it).
struct SetFd(RawFd);

impl AsRawFd for SetFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Restarts the reader of every parked connection whose socket has an event, until the
/// thread ends. Without a set (or its registration refused) it returns at once, and no
/// reader parks: the shard asks readers to park only while this task waits on the set
/// (`ParkSet::available`); if its wait fails, the parked readers are restarted.
pub async fn run(shard: Rc<Shard>) {
    let Some(set) = shard.parked_readers.fd() else {
        crate::ops::event::OpsEvent::ReaderParkUnavailable {
            shard: shard.id,
            reason: "the kernel refused an epoll set".into(),
        }
        .emit();
        return;
    };
    // SAFETY: the set is the shard's and stays open while the shard lives, which this
    // task (holding the shard) outlives only by ending first.
    let registered = unsafe { AsyncFd::register_with_interest(SetFd(set), Interest::READABLE) };
    let Ok(registered) = registered else {
        crate::ops::event::OpsEvent::ReaderParkUnavailable {
            shard: shard.id,
            reason: "the epoll set could not be registered".into(),
        }
        .emit();
        return;
    };
    shard.parked_readers.set_watched(true);
    let mut ready = Vec::new();
    loop {
        let Ok(mut readiness) = registered.readable().await else {
            shard.parked_readers.set_watched(false);
            shard.restart_every_parked_reader();
            crate::ops::event::OpsEvent::ReaderParkUnavailable {
                shard: shard.id,
                reason: "the wait on the epoll set failed; parked readers restarted".into(),
            }
            .emit();
            return;
        };
        ready.clear();
        match shard.parked_readers.take_ready(&mut ready) {
            // Drained: the set reports readable again when a socket has an event.
            Ok(false) => readiness.clear_ready(),
            Ok(true) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => readiness.clear_ready(),
        }
        shard.clock.refresh();
        for conn in ready.drain(..) {
            shard.restart_parked_reader(conn);
        }
    }
}
