//! Owns: [`ReadBuffer`], one connection's read buffer, how big it is, and what a frame
//! cut from it may keep alive. It starts small (`net.read_buffer_min`), doubles while
//! reads fill it (a busy publisher ends up reading `net.read_buffer` bytes per call),
//! halves again after a run of small reads, and is given back whole when it holds no
//! partial frame and a smaller one would do — so ten thousand idle subscribers hold a
//! few KiB of read buffer each, not the publisher-sized maximum.
//!
//! Zero copy must not become zero accounting: a body frame cut from the buffer is a
//! slice that keeps the whole allocation alive for as long as a queue keeps the message.
//! So the buffer knows the size of the allocation it lives in, and [`ReadBuffer::next_frame`]
//! lets a body payload share it only when the payload is more than half of it (at most
//! one such payload per allocation), telling the ledger the rest (`Frame::pinned`);
//! smaller bodies above the wire-tail size are copied into an allocation of their own.
//! A frame larger than half the read target that is still arriving gets an allocation
//! of exactly its size, so a large body pins nothing beyond itself.
//!
//! Does not: read the socket (`net::reader` does), interpret frames, or copy what the
//! message builder copies anyway (properties, names and bodies up to
//! `model::message::WIRE_TAIL_MAX_BODY`, see `Message::with_ttl`).

use bytes::{Bytes, BytesMut};

use crate::model::message::WIRE_TAIL_MAX_BODY;
use crate::protocol::frame::{split_frame, Frame, FrameError, FrameKind, FRAME_OVERHEAD};

/// Consecutive small reads after which the target size halves.
const SMALL_READS_TO_SHRINK: u32 = 8;

/// A read buffer that sizes itself to the connection's traffic.
pub struct ReadBuffer {
    buf: BytesMut,
    /// Size of the allocation `buf` lives in (frames split off earlier share it).
    alloc: usize,
    /// The capacity the next read asks for.
    target: usize,
    min: usize,
    max: usize,
    small_reads: u32,
}

impl ReadBuffer {
    /// A buffer of `min` bytes that may grow to `max`. No memory is taken until the
    /// first read.
    pub fn new(min: usize, max: usize) -> ReadBuffer {
        let min = min.clamp(64, max.max(64));
        ReadBuffer {
            buf: BytesMut::new(),
            alloc: 0,
            target: min,
            min,
            max: max.max(min),
            small_reads: 0,
        }
    }

    /// Whether it holds no bytes (no partial frame).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes read and not yet consumed (a partial frame, or frames not yet handled).
    pub fn bytes(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The size the next read is offered (at least what a partial frame still needs is
    /// taken care of by the caller's frame check: a partial frame keeps its bytes and the
    /// buffer grows around it).
    pub fn target(&self) -> usize {
        self.target
    }

    /// Makes room for the next read and hands out the buffer; give it back with
    /// [`ReadBuffer::put_back`]. `frame_max` is the connection's (0 before tune).
    pub fn take_for_read(&mut self, frame_max: u32) -> BytesMut {
        self.make_room(self.target / 2, 1, frame_max);
        std::mem::take(&mut self.buf)
    }

    /// Makes room to append `n` bytes (TLS plaintext) and returns the buffer to append to.
    pub fn room_for(&mut self, n: usize, frame_max: u32) -> &mut BytesMut {
        self.make_room(n, n, frame_max);
        &mut self.buf
    }

    /// Ensures spare capacity for a read of `wanted` bytes (at least `needed`). A
    /// partial frame whose header is here and that is larger than half the target gets
    /// an allocation of exactly its size (or what `needed` adds to it); anything else
    /// an allocation of the target size.
    fn make_room(&mut self, wanted: usize, needed: usize, frame_max: u32) {
        let len = self.buf.len();
        let spare = self.buf.capacity() - len;
        let rest = self.partial_frame_rest(frame_max);
        let big_frame = rest > 0 && len + rest > self.target / 2;
        let room = if big_frame {
            rest.max(needed)
        } else {
            wanted.max(needed).max(rest)
        };
        if spare >= room.max(1) {
            return;
        }
        let cap = if big_frame {
            len + room
        } else {
            len + self.target.max(room)
        };
        if self.buf.try_reclaim(cap - len) {
            self.alloc = self.alloc.max(self.buf.capacity());
            return;
        }
        let mut fresh = BytesMut::with_capacity(cap);
        fresh.extend_from_slice(&self.buf);
        self.alloc = fresh.capacity();
        self.buf = fresh;
    }

    /// Bytes still missing of the frame whose header starts the buffer (0 if there is
    /// none, it is complete, or it is larger than this connection may send: the frame
    /// check refuses it, and a peer-chosen size never drives an allocation).
    fn partial_frame_rest(&self, frame_max: u32) -> usize {
        let Some(&[_, _, _, s0, s1, s2, s3]) = self.buf.get(..7) else {
            return 0;
        };
        let total = (u32::from_be_bytes([s0, s1, s2, s3]) as usize).saturating_add(FRAME_OVERHEAD);
        let limit = if frame_max == 0 {
            self.max
        } else {
            frame_max as usize
        };
        if total > limit.max(self.min) {
            return 0;
        }
        total.saturating_sub(self.buf.len())
    }

    /// Splits the next complete frame off the buffer. A body payload that would keep
    /// more than its own size of the allocation alive is copied out; one that stays a
    /// slice says in `pinned` how much more of the allocation it keeps.
    pub fn next_frame(&mut self, frame_max: u32) -> Result<Option<Frame>, FrameError> {
        let Some(mut frame) = split_frame(&mut self.buf, frame_max)? else {
            return Ok(None);
        };
        let len = frame.payload.len();
        if frame.kind == FrameKind::Body && len as u64 > WIRE_TAIL_MAX_BODY {
            if len * 2 <= self.alloc {
                frame.payload = Bytes::copy_from_slice(&frame.payload);
            } else {
                frame.pinned = u32::try_from(self.alloc.saturating_sub(len)).unwrap_or(u32::MAX);
            }
        }
        Ok(Some(frame))
    }

    /// Takes back the buffer after a read of `n` bytes that offered `offered`.
    pub fn put_back(&mut self, buf: BytesMut, n: usize, offered: usize) {
        self.buf = buf;
        if n >= offered && self.target < self.max {
            self.target = (self.target * 2).min(self.max);
            self.small_reads = 0;
        } else if n < self.target / 8 {
            self.small_reads += 1;
            if self.small_reads >= SMALL_READS_TO_SHRINK && self.target > self.min {
                self.target = (self.target / 2).max(self.min);
                self.small_reads = 0;
            }
        } else {
            self.small_reads = 0;
        }
    }

    /// Sizes the next read after a read of `n` bytes that offered `offered` into a
    /// buffer of its own (TLS reads ciphertext elsewhere and appends the plaintext).
    pub fn note_read(&mut self, n: usize, offered: usize) {
        let buf = std::mem::take(&mut self.buf);
        self.put_back(buf, n, offered);
    }

    /// Called once the frames in the buffer have been handled: an empty buffer much
    /// larger than the target is dropped, so the next read allocates only the target.
    pub fn settle(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > self.target * 2 {
            self.buf = BytesMut::new();
            self.alloc = 0;
        }
    }

    /// Gives the memory back when it holds nothing and the connection has not needed
    /// more than the smallest buffer (a publisher that grew it keeps it): between reads,
    /// an idle connection holds no read buffer.
    pub fn release_if_idle(&mut self) {
        if self.target == self.min {
            self.release_if_empty();
        }
    }

    /// Gives the memory back while the connection is not being read (held or paused).
    pub fn release_if_empty(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
            self.alloc = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(rb: &mut ReadBuffer, n: usize) -> usize {
        let mut buf = rb.take_for_read(0);
        let offered = buf.capacity() - buf.len();
        let n = n.min(offered);
        buf.extend(std::iter::repeat_n(0u8, n));
        rb.put_back(buf, n, offered);
        offered
    }

    #[test]
    fn starts_small_and_takes_nothing_before_the_first_read() {
        let rb = ReadBuffer::new(2048, 131_072);
        assert_eq!(rb.buf.capacity(), 0);
        assert_eq!(rb.target(), 2048);
    }

    #[test]
    fn grows_while_reads_fill_it_up_to_the_maximum() {
        let mut rb = ReadBuffer::new(2048, 16_384);
        for _ in 0..10 {
            let offered = read(&mut rb, usize::MAX);
            rb.bytes().clear();
            assert!(offered <= 2 * 16_384, "offered {offered}");
        }
        assert_eq!(rb.target(), 16_384);
    }

    #[test]
    fn shrinks_after_a_run_of_small_reads_and_gives_the_big_buffer_back() {
        let mut rb = ReadBuffer::new(2048, 131_072);
        for _ in 0..10 {
            read(&mut rb, usize::MAX);
            rb.bytes().clear();
        }
        assert_eq!(rb.target(), 131_072);
        for _ in 0..SMALL_READS_TO_SHRINK * 8 {
            read(&mut rb, 8);
            rb.bytes().clear();
            rb.settle();
        }
        assert_eq!(rb.target(), 2048);
        assert!(rb.buf.capacity() <= 2 * 2048, "kept {}", rb.buf.capacity());
    }

    fn body_frame(len: usize) -> Vec<u8> {
        let mut f = vec![3, 0, 1];
        f.extend((len as u32).to_be_bytes());
        f.extend(std::iter::repeat_n(b'b', len));
        f.push(0xCE);
        f
    }

    /// Reads `bytes` the way the reader does, in reads of at most `step`.
    fn feed(rb: &mut ReadBuffer, bytes: &[u8], step: usize) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let mut buf = rb.take_for_read(131_072);
            let offered = buf.capacity() - buf.len();
            let n = offered.min(step).min(bytes.len() - at);
            buf.extend_from_slice(&bytes[at..at + n]);
            at += n;
            rb.put_back(buf, n, offered);
            while let Some(f) = rb.next_frame(131_072).expect("frame") {
                frames.push(f);
            }
        }
        frames
    }

    #[test]
    fn a_body_much_smaller_than_its_buffer_is_copied_out() {
        let mut rb = ReadBuffer::new(131_072, 131_072);
        let mut bytes = body_frame(1024);
        bytes.extend(body_frame(100_000));
        let frames = feed(&mut rb, &bytes, usize::MAX);
        assert_eq!(frames.len(), 2);
        // The small body has an allocation of its own and pins nothing.
        assert_eq!(frames[0].pinned, 0);
        assert_eq!(frames[0].payload.len(), 1024);
        // The large one stays a slice; the rest of its buffer is charged to it.
        assert!(
            frames[1].pinned > 0 && frames[1].pinned < 100_000,
            "{}",
            frames[1].pinned
        );
        assert!(frames[1].payload.len() as u32 + frames[1].pinned >= 131_072 - 1024);
    }

    #[test]
    fn a_large_frame_still_arriving_gets_an_allocation_of_its_size() {
        let mut rb = ReadBuffer::new(2048, 131_072);
        // A small frame first, then a large one that arrives in many small reads.
        let mut bytes = body_frame(600);
        bytes.extend(body_frame(120_000));
        let frames = feed(&mut rb, &bytes, 4096);
        assert_eq!(frames.len(), 2);
        let large = &frames[1];
        assert_eq!(large.payload.len(), 120_000);
        // Whatever the reads were, the large frame pins at most the bytes of the read
        // that carried its start beyond its own.
        assert!(large.pinned <= 4096 + 8, "pinned {}", large.pinned);
    }

    #[test]
    fn small_bodies_are_left_for_the_message_to_copy() {
        let mut rb = ReadBuffer::new(131_072, 131_072);
        let frames = feed(&mut rb, &body_frame(100), usize::MAX);
        assert_eq!(frames[0].pinned, 0);
        assert_eq!(frames[0].payload.len(), 100);
    }

    #[test]
    fn a_partial_frame_is_kept_when_settling() {
        let mut rb = ReadBuffer::new(2048, 131_072);
        for _ in 0..10 {
            read(&mut rb, usize::MAX);
        }
        let len = rb.bytes().len();
        rb.settle();
        rb.release_if_empty();
        assert_eq!(rb.bytes().len(), len);
    }
}
