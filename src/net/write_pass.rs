//! Owns: a shard's write pass — one task per shard that takes the connections with
//! bytes to write in the order they got them and writes each one's whole queue straight
//! from its outbound buffer, [`BATCH`] connections at a time in one system call (the
//! shard's `send_ring`: non-blocking sends submitted together), so a connection the pass
//! reaches later gets more deliveries per write instead of more writes. Between two
//! batches it lets the event
//! loop run (an io_uring no-op on tokio-uring's ring: pending reads are submitted and
//! completed ones handled), so publishes that arrive during a long pass reach the
//! connections later in it.
//!
//! Does not: wait for a full socket (the connection's writer task does, `writer`),
//! write TLS connections, or account for what was written (`shard::turn`).

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::rc::Rc;

use super::send_ring::SendRing;
use crate::shard::turn::Write;
use crate::shard::Shard;

/// Connections written in one batch (one system call), between two turns of the event
/// loop.
pub const BATCH: usize = 64;

/// Runs the shard's write pass until the thread ends.
pub async fn run(shard: Rc<Shard>) {
    // Without a ring of its own (io_uring refused), one `send` per connection.
    let mut ring = match SendRing::new(BATCH as u32) {
        Ok(ring) => Some(ring),
        Err(e) => {
            unavailable(&shard, e.to_string());
            None
        }
    };
    // Deferred deliveries are encoded here just before their `send` (`Shard::write_batch`).
    let mut scratch = bytes::BytesMut::new();
    loop {
        shard.write_wanted.wait().await;
        loop {
            let more = match ring.as_mut() {
                Some(ring) => shard.write_batch(BATCH, &mut scratch, |writes, results| {
                    ring.send(writes, results)
                }),
                None => shard.write_batch(BATCH, &mut scratch, send_each),
            };
            if let Some(error) = ring.as_ref().and_then(SendRing::broken) {
                unavailable(&shard, error.to_string());
                ring = None;
            }
            if !more {
                break;
            }
            // Not `yield_now`: tokio-uring submits queued operations (the reads re-armed
            // meanwhile) only when its runtime parks, which a no-op makes it do.
            let _ = tokio_uring::no_op().await;
        }
    }
}

/// BRK-1027: the shard goes on without its send ring.
fn unavailable(shard: &Shard, error: String) {
    crate::ops::event::OpsEvent::SendRingUnavailable {
        shard: shard.id,
        error,
    }
    .emit();
}

/// One `send`/`sendmsg` per write, without waiting.
fn send_each(writes: &[Write<'_>], results: &mut Vec<io::Result<usize>>) {
    results.extend(writes.iter().map(|w| send(w.socket, w.slices)));
}

/// Writes `slices` to `socket` without waiting; the bytes the socket took (0 when it
/// is full).
fn send(socket: RawFd, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    let n = match slices {
        [] => return Ok(0),
        // SAFETY: the socket is open while its connection is (the reader task owns the
        // stream until the connection is released); the slice is live for the call.
        [one] => unsafe { libc::send(socket, one.as_ptr().cast(), one.len(), flags) },
        many => {
            // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix; the slices and
            // the header live for the call; the kernel only reads them.
            unsafe {
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = many.as_ptr() as *mut libc::iovec;
                msg.msg_iovlen = many.len();
                libc::sendmsg(socket, &msg, flags)
            }
        }
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(0)
    } else {
        Err(e)
    }
}
