//! Owns: [`ReadBuffer`], one connection's read buffer and how big it is. It starts small
//! (`net.read_buffer_min`), doubles while reads fill it (a busy publisher ends up reading
//! `net.read_buffer` bytes per call), halves again after a run of small reads, and is
//! given back whole when it holds no partial frame and a smaller one would do — so ten
//! thousand idle subscribers hold a few KiB of read buffer each, not the publisher-sized
//! maximum.
//!
//! Does not: read the socket or split frames (`net::reader` does both). Frames already
//! split off keep their part of an old allocation alive until their messages go.

use bytes::BytesMut;

/// Consecutive small reads after which the target size halves.
const SMALL_READS_TO_SHRINK: u32 = 8;

/// A read buffer that sizes itself to the connection's traffic.
pub struct ReadBuffer {
    buf: BytesMut,
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
            target: min,
            min,
            max: max.max(min),
            small_reads: 0,
        }
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
    /// [`ReadBuffer::put_back`].
    pub fn take_for_read(&mut self) -> BytesMut {
        let spare = self.buf.capacity() - self.buf.len();
        if spare < self.target / 2 {
            self.buf.reserve(self.target);
        }
        std::mem::take(&mut self.buf)
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
        }
    }

    /// Gives the memory back while the connection is not being read (held or paused).
    pub fn release_if_empty(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(rb: &mut ReadBuffer, n: usize) -> usize {
        let mut buf = rb.take_for_read();
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
