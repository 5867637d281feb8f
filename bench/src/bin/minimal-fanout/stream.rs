//! Owns: one event-loop thread's stream of encoded deliveries — every publish, encoded
//! once as `basic.deliver` + content header + body frames, appended in arrival order
//! to fixed-size chunks addressed by a byte offset that only grows; the delivery tag
//! stamped on append (one counter per stream: a subscriber's tags increase, and
//! start wherever the stream was when it consumed); the iovecs of a subscriber's
//! unsent range; the chunks every subscriber has passed given back — and the inbox
//! through which another thread hands over the deliveries it assembled.
//! Does not: know connections or sockets (the event loop sends and keeps each
//! subscriber's position).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Mutex;

/// Bytes per chunk of the stream.
pub const CHUNK: usize = 64 * 1024;

/// Where the delivery tag sits in an encoded delivery: frame header (7), class and
/// method (4), the consumer tag (a shortstr: 1 + its length).
pub const TAG_AT: usize = 7 + 4 + 1 + crate::wire::CONSUMER_TAG.len();

/// The encoded deliveries of one thread, from the oldest a subscriber still needs.
pub struct Stream {
    /// Full chunks, then the one being filled (always at least one).
    chunks: VecDeque<Box<[u8]>>,
    /// Stream offset of `chunks[0][0]`.
    base: u64,
    /// Stream offset one past the last byte appended.
    end: u64,
    /// The tag of the last delivery appended.
    tag: u64,
    /// One chunk kept back for reuse.
    spare: Option<Box<[u8]>>,
}

fn new_chunk() -> Box<[u8]> {
    vec![0u8; CHUNK].into_boxed_slice()
}

impl Stream {
    pub fn new() -> Stream {
        Stream {
            chunks: VecDeque::from([new_chunk()]),
            base: 0,
            end: 0,
            tag: 0,
            spare: None,
        }
    }

    /// Offset one past the last byte.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Oldest offset still held.
    pub fn base(&self) -> u64 {
        self.base
    }

    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let at = (self.end - self.base) as usize;
            let (idx, off) = (at / CHUNK, at % CHUNK);
            if idx == self.chunks.len() {
                let c = self.spare.take().unwrap_or_else(new_chunk);
                self.chunks.push_back(c);
            }
            let n = (CHUNK - off).min(bytes.len());
            self.chunks[idx][off..off + n].copy_from_slice(&bytes[..n]);
            self.end += n as u64;
            bytes = &bytes[n..];
        }
    }

    /// Appends one encoded delivery (built by `wire::Assembly`), stamping the next tag.
    pub fn append(&mut self, delivery: &[u8]) {
        self.tag += 1;
        self.put(&delivery[..TAG_AT]);
        self.put(&self.tag.to_be_bytes());
        self.put(&delivery[TAG_AT + 8..]);
    }

    /// Fills `iov` with the bytes from `from` to the end (at most `iov.len()` pieces);
    /// returns how many were filled.
    pub fn iovecs(&self, from: u64, iov: &mut [libc::iovec]) -> usize {
        let mut at = (from - self.base) as usize;
        let last = (self.end - self.base) as usize;
        let mut n = 0;
        while at < last && n < iov.len() {
            let (idx, off) = (at / CHUNK, at % CHUNK);
            let len = (CHUNK - off).min(last - at);
            iov[n] = libc::iovec {
                iov_base: self.chunks[idx][off..].as_ptr() as *mut libc::c_void,
                iov_len: len,
            };
            at += len;
            n += 1;
        }
        n
    }

    /// Gives back the chunks wholly before `oldest` (every subscriber is past them).
    pub fn trim(&mut self, oldest: u64) {
        while self.chunks.len() > 1 && oldest >= self.base + CHUNK as u64 {
            if let Some(c) = self.chunks.pop_front() {
                if self.spare.is_none() {
                    self.spare = Some(c);
                }
            }
            self.base += CHUNK as u64;
        }
    }
}

/// Deliveries handed to a thread by the others: each a little-endian `u32` length and
/// the encoded delivery; `eventfd` wakes the thread when the first one arrives.
pub struct Inbox {
    queue: Mutex<Vec<u8>>,
    pub eventfd: RawFd,
}

impl Inbox {
    pub fn new() -> std::io::Result<Inbox> {
        // SAFETY: eventfd with valid flags; the descriptor is owned by the inbox.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Inbox {
            queue: Mutex::new(Vec::new()),
            eventfd: fd,
        })
    }

    /// Adds a batch of framed deliveries; wakes the owner if the inbox was empty.
    pub fn push(&self, framed: &[u8]) {
        let was_empty = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            let was_empty = q.is_empty();
            q.extend_from_slice(framed);
            was_empty
        };
        if was_empty {
            let one = 1u64.to_ne_bytes();
            // SAFETY: an 8-byte write to an eventfd this inbox owns.
            unsafe { libc::write(self.eventfd, one.as_ptr().cast(), 8) };
        }
    }

    /// Takes everything waiting (swapped into `into`, which must be empty).
    pub fn take(&self, into: &mut Vec<u8>) {
        let mut counter = [0u8; 8];
        // SAFETY: an 8-byte read from an eventfd this inbox owns (non-blocking).
        unsafe { libc::read(self.eventfd, counter.as_mut_ptr().cast(), 8) };
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::swap(&mut *q, into);
    }
}

/// Splits a framed batch (see [`Inbox`]) into its deliveries.
pub fn framed(batch: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = batch;
    std::iter::from_fn(move || {
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let d = rest.get(4..4 + len)?;
        rest = &rest[4 + len..];
        Some(d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(fill: u8, len: usize) -> Vec<u8> {
        let mut d = vec![fill; len];
        d[TAG_AT..TAG_AT + 8].fill(0);
        d
    }

    fn gather(s: &Stream, from: u64) -> Vec<u8> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 64];
        let n = s.iovecs(from, &mut iov);
        let mut out = Vec::new();
        for v in &iov[..n] {
            // SAFETY: the iovecs point into the stream's live chunks.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
            });
        }
        out
    }

    #[test]
    fn appends_across_chunks_stamp_tags_and_trim() {
        let mut s = Stream::new();
        let len = 1000;
        let count = 3 * CHUNK / len;
        for i in 0..count {
            s.append(&delivery(i as u8, len));
        }
        assert_eq!(s.end(), (count * len) as u64);
        let all = gather(&s, 0);
        assert_eq!(all.len(), count * len);
        for (i, d) in all.chunks(len).enumerate() {
            let tag = u64::from_be_bytes(d[TAG_AT..TAG_AT + 8].try_into().unwrap());
            assert_eq!(tag, i as u64 + 1);
            assert_eq!(d[0], i as u8);
            assert_eq!(d[len - 1], i as u8);
        }
        let mid = (count / 2 * len) as u64;
        s.trim(mid);
        assert!(s.base() > 0 && s.base() <= mid);
        assert_eq!(gather(&s, mid), all[mid as usize..]);
    }

    #[test]
    fn framed_batches_split_back() {
        let mut b = Vec::new();
        for d in [&b"abc"[..], b"", b"defgh"] {
            b.extend_from_slice(&(d.len() as u32).to_le_bytes());
            b.extend_from_slice(d);
        }
        let got: Vec<&[u8]> = framed(&b).collect();
        assert_eq!(got, vec![&b"abc"[..], b"", b"defgh"]);
    }
}
