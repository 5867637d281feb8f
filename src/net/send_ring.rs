//! Owns: a shard's send ring — an io_uring of its own (not tokio-uring's) through which
//! the write pass submits a whole batch of non-blocking sends with one system call:
//! one `SENDMSG` (`SEND` for a single slice) per socket with `MSG_DONTWAIT`, so each
//! completes while it is submitted — with what the socket took, or `EAGAIN` when it is
//! full — and the call returns with every result. Nothing stays in flight after
//! [`SendRing::send`] returns, so the slices and headers it points the kernel at only
//! need to live for the call.
//! Does not: wait for room in a socket (the connection's writer task does), or account
//! for what was written (`shard::turn`).

use std::io;

use io_uring::{opcode, types, IoUring};

use crate::shard::turn::Write;

/// Flags of every send: never wait for room, never raise SIGPIPE.
const FLAGS: i32 = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;

/// The private ring and the message headers of the batch being sent.
pub struct SendRing {
    ring: IoUring,
    headers: Vec<libc::msghdr>,
    /// Set when a submission failed: entries the kernel did not take may still be in
    /// the submission queue, pointing at slices that no longer live, so the ring must
    /// never be entered again ([`SendRing::broken`]).
    broken: Option<String>,
}

impl SendRing {
    /// A ring for batches of up to `entries` sends.
    pub fn new(entries: u32) -> io::Result<SendRing> {
        Ok(SendRing {
            ring: IoUring::new(entries)?,
            headers: Vec::with_capacity(entries as usize),
            broken: None,
        })
    }

    /// Whether a submission failed; the write pass then drops the ring and sends with
    /// one system call per connection.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Most sends one batch may hold.
    pub fn capacity(&self) -> usize {
        self.ring.params().sq_entries() as usize
    }

    /// Sends every write of `writes` (at most [`SendRing::capacity`]) and pushes each
    /// one's outcome onto `results`, in order: the bytes the socket took (0 when full or
    /// when there was nothing to send), or the error.
    pub fn send(&mut self, writes: &[Write<'_>], results: &mut Vec<io::Result<usize>>) {
        let base = results.len();
        results.extend(writes.iter().map(|_| Ok(0)));
        self.headers.clear();
        for w in writes {
            // SAFETY: a zeroed msghdr is a valid empty header.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            // `IoSlice` is ABI-compatible with `iovec` on Unix.
            h.msg_iov = w.slices.as_ptr() as *mut libc::iovec;
            h.msg_iovlen = w.slices.len();
            self.headers.push(h);
        }
        let mut pushed = 0;
        {
            let mut sq = self.ring.submission();
            for (i, w) in writes.iter().enumerate() {
                let entry = match w.slices {
                    [] => continue,
                    [one] => opcode::Send::new(types::Fd(w.socket), one.as_ptr(), one.len() as u32)
                        .flags(FLAGS)
                        .build(),
                    _ => opcode::SendMsg::new(types::Fd(w.socket), &self.headers[i])
                        .flags(FLAGS as u32)
                        .build(),
                };
                // SAFETY: the slices and headers the entry points at live until every
                // entry pushed has completed, which `submit_and_wait` below waits for.
                if unsafe { sq.push(&entry.user_data(i as u64)) }.is_err() {
                    results[base + i] = Err(io::Error::other("send ring full"));
                    continue;
                }
                pushed += 1;
            }
        }
        if pushed == 0 {
            return;
        }
        // MSG_DONTWAIT: every send completes while it is submitted, so this returns
        // without sleeping.
        loop {
            match self.ring.submit_and_wait(pushed) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    // The ring itself failed: nothing was sent; each writer task takes
                    // over its connection, and the ring is not entered again.
                    self.broken = Some(e.to_string());
                    for r in &mut results[base..] {
                        *r = Err(io::Error::new(e.kind(), e.to_string()));
                    }
                    return;
                }
            }
        }
        let mut got = 0;
        while got < pushed {
            for cqe in self.ring.completion() {
                got += 1;
                let i = cqe.user_data() as usize;
                let res = cqe.result();
                results[base + i] = match res {
                    n if n >= 0 => Ok(n as usize),
                    e if -e == libc::EAGAIN => Ok(0),
                    e => Err(io::Error::from_raw_os_error(-e)),
                };
            }
            if got < pushed {
                // Not expected (they complete inline); wait for the rest so that nothing
                // outlives the slices.
                if let Err(e) = self.ring.submit_and_wait(pushed - got) {
                    self.broken = Some(e.to_string());
                    break;
                }
            }
        }
    }
}
