//! Owns: [`Outbound`], one connection's queue of bytes waiting for its writer: small
//! encoded frames are appended to a shared arena; large bodies are queued as their own
//! `Bytes` (the publisher's buffer, not a copy) and written with `writev`. The arena is
//! sized to the traffic (512 bytes, doubling up to 64 KiB while one write's worth fills it,
//! halving when little is written). A busy connection keeps reusing its arena (the
//! allocation comes back to it once the writer dropped what it wrote); an idle one lets
//! it go ([`Outbound::release_idle`], once per reclaim interval), so it holds no
//! outbound memory.
//!
//! Does not: write to the socket (the writer task does) or decide when to stop filling it
//! (consumers stop getting credit above `write_high_water`).

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::model::ledger;
use crate::model::message::Message;
use crate::protocol::frame;
use crate::protocol::method::FRAME_END;
use crate::protocol::{Method, ShortStr};

/// The arena a connection starts with and shrinks back to: a few small deliveries' worth,
/// so that thousands of lightly loaded subscribers hold little (issue 23).
const ARENA_MIN: usize = 512;
/// Free room below which the arena is sealed and the next one started (a delivery with a
/// small body fits in it; a larger inlined one may grow the arena, which copies only
/// what it holds since it was last sealed).
const ARENA_FREE_MIN: usize = 256;
/// The largest arena (a busy subscriber's).
const ARENA_MAX: usize = 64 * 1024;

/// Bytes queued for one socket.
pub struct Outbound {
    chunks: VecDeque<Bytes>,
    pending: BytesMut,
    queued: usize,
    /// Bytes ever queued (monotonic): `total - queued` is what has been written, so a
    /// delivery queued at total `t` is on the wire once that passes `t`.
    total: u64,
    inline_max: usize,
    frame_max: u32,
    /// The size of the next arena.
    arena_size: usize,
    /// Arenas started since the writer last took the buffers.
    arenas_this_cycle: u32,
    /// `total` when the writer last took the buffers.
    total_at_take: u64,
    /// `total` at the last [`Outbound::release_idle`].
    total_at_idle_check: u64,
}

impl Outbound {
    pub fn new(inline_max: usize, frame_max: u32) -> Outbound {
        Outbound {
            chunks: VecDeque::new(),
            pending: BytesMut::new(),
            queued: 0,
            total: 0,
            inline_max,
            frame_max,
            arena_size: ARENA_MIN,
            arenas_this_cycle: 0,
            total_at_take: 0,
            total_at_idle_check: 0,
        }
    }

    pub fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// Bytes queued and not yet handed to the writer.
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// Bytes ever queued on this connection.
    pub fn total_queued(&self) -> u64 {
        self.total
    }

    /// Bytes ever written from this connection.
    pub fn total_written(&self) -> u64 {
        self.total - self.queued as u64
    }

    fn count(&mut self, n: usize) {
        self.queued += n;
        self.total += n as u64;
        ledger::outbound(n as i64);
    }

    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    /// The buffer small frames are encoded into, with at least `ARENA_FREE_MIN` free. A full arena is
    /// sealed into the chunk list first, so growing never copies what was already encoded
    /// (a frame split across two chunks is fine: the writer sends chunks in order).
    fn arena(&mut self) -> &mut BytesMut {
        if self.pending.capacity() - self.pending.len() < ARENA_FREE_MIN {
            self.seal_pending();
            if self.arenas_this_cycle > 0 {
                self.arena_size = (self.arena_size * 2).min(ARENA_MAX);
            }
            self.arenas_this_cycle += 1;
            self.pending.reserve(self.arena_size);
        }
        &mut self.pending
    }

    fn seal_pending(&mut self) {
        if !self.pending.is_empty() {
            let sealed = self.pending.split().freeze();
            self.chunks.push_back(sealed);
        }
    }

    /// Appends `len` bytes of `bytes` from `offset`: copied when small, otherwise queued as
    /// a slice of the shared buffer. Borrowing avoids a reference-count round trip on the
    /// (cross-thread) shared buffer for the common, inlined case.
    fn put_shared(&mut self, bytes: &Bytes, offset: usize, len: usize) {
        if len <= self.inline_max {
            if let Some(part) = bytes.get(offset..offset + len) {
                self.arena().extend_from_slice(part);
            }
        } else {
            self.seal_pending();
            if offset == 0 && len == bytes.len() {
                self.chunks.push_back(bytes.clone());
            } else {
                self.chunks.push_back(bytes.slice(offset..offset + len));
            }
        }
        self.count(len);
    }

    /// Appends a method frame.
    pub fn method(&mut self, channel: u16, method: &Method) {
        let arena = self.arena();
        let before = arena.len();
        frame::encode_method(arena, channel, method);
        let added = arena.len() - before;
        self.count(added);
    }

    /// Appends a heartbeat frame.
    pub fn heartbeat(&mut self) {
        let arena = self.arena();
        frame::encode_heartbeat(arena);
        self.count(8);
    }

    /// Appends raw bytes (the protocol header answer to a wrong version).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.arena().extend_from_slice(bytes);
        self.count(bytes.len());
    }

    /// Appends `basic.deliver` plus the message's content, encoded by hand on this hot path.
    /// A small message's invariant part (exchange, routing key, content frames) was
    /// encoded once at publish; it is copied in one piece and its channel numbers patched.
    pub fn deliver(
        &mut self,
        channel: u16,
        consumer_tag: &ShortStr,
        delivery_tag: u64,
        redelivered: bool,
        msg: &Message,
    ) {
        let tag = consumer_tag.as_bytes();
        let exchange = msg.exchange().as_bytes();
        let key = msg.routing_key().as_bytes();
        let size = 4 + 1 + tag.len() + 8 + 1 + 1 + exchange.len() + 1 + key.len();
        let small = msg.body_size() <= self.inline_max as u64;
        let arena = self.arena();
        let before = arena.len();
        // Frame header, class/method, consumer tag, delivery tag and redelivered flag are
        // assembled on the stack and copied once (server-generated tags are ~20 bytes).
        const SHORT_TAG: usize = 56;
        if tag.len() <= SHORT_TAG {
            let mut head = [0u8; 12 + SHORT_TAG + 9];
            head[0] = 1;
            head[1..3].copy_from_slice(&channel.to_be_bytes());
            head[3..7].copy_from_slice(&(size as u32).to_be_bytes());
            head[7..11].copy_from_slice(&[0, 60, 0, 60]);
            head[11] = tag.len() as u8;
            let at = 12 + tag.len();
            head[12..at].copy_from_slice(tag);
            head[at..at + 8].copy_from_slice(&delivery_tag.to_be_bytes());
            head[at + 8] = u8::from(redelivered);
            arena.extend_from_slice(&head[..at + 9]);
        } else {
            arena.put_u8(1);
            arena.put_u16(channel);
            arena.put_u32(size as u32);
            arena.put_slice(&[0, 60, 0, 60]);
            arena.put_u8(tag.len() as u8);
            arena.put_slice(tag);
            arena.put_u64(delivery_tag);
            arena.put_u8(u8::from(redelivered));
        }
        if let Some(tail) = msg.wire_tail().filter(|_| small) {
            let at = arena.len();
            arena.extend_from_slice(&tail.bytes);
            let ch = channel.to_be_bytes();
            arena[at + tail.header_channel_at..at + tail.header_channel_at + 2]
                .copy_from_slice(&ch);
            if msg.body_size() > 0 {
                arena[at + tail.body_channel_at..at + tail.body_channel_at + 2]
                    .copy_from_slice(&ch);
            }
            let added = arena.len() - before;
            self.count(added);
            return;
        }
        arena.put_u8(exchange.len() as u8);
        arena.put_slice(exchange);
        arena.put_u8(key.len() as u8);
        arena.put_slice(key);
        arena.put_u8(FRAME_END);
        let added = arena.len() - before;
        self.count(added);
        self.content(channel, msg);
    }

    /// Appends a method that carries content (`get-ok`, `return`) plus the content.
    pub fn method_with_content(&mut self, channel: u16, method: &Method, msg: &Message) {
        self.method(channel, method);
        self.content(channel, msg);
    }

    /// Content header and body frames, the body split to the negotiated frame size.
    fn content(&mut self, channel: u16, msg: &Message) {
        let props = msg.raw_properties();
        let arena = self.arena();
        let before = arena.len();
        frame::encode_content_header_prefix(arena, channel, 60, msg.body_size(), props.len());
        let added = arena.len() - before;
        self.count(added);
        self.put_shared(props, 0, props.len());
        self.arena().put_u8(FRAME_END);
        self.count(1);
        let max_payload = (self.frame_max as usize).saturating_sub(8).max(1);
        for chunk in msg.body() {
            let mut offset = 0;
            while offset < chunk.len() {
                let len = (chunk.len() - offset).min(max_payload);
                let arena = self.arena();
                frame::encode_body_prefix(arena, channel, len as u32);
                self.count(7);
                self.put_shared(chunk, offset, len);
                self.arena().put_u8(FRAME_END);
                self.count(1);
                offset += len;
            }
        }
    }

    /// Takes up to `max_iov` buffers for one `writev`. The caller reports what was written
    /// with [`Outbound::written`].
    pub fn take(&mut self, max_iov: usize) -> Vec<Bytes> {
        self.seal_pending();
        let n = self.chunks.len().min(max_iov);
        let taken = self.chunks.drain(..n).collect();
        self.end_cycle();
        taken
    }

    /// The bytes queued, in order, as up to `out.len()` slices (the sealed chunks, then
    /// the arena being filled), for a write straight from the buffer; returns how many
    /// were filled. Report what was written with [`Outbound::consume`].
    pub fn io_slices<'a>(&'a self, out: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut n = 0;
        for chunk in &self.chunks {
            if n == out.len() {
                return n;
            }
            out[n] = std::io::IoSlice::new(chunk);
            n += 1;
        }
        if n < out.len() && !self.pending.is_empty() {
            out[n] = std::io::IoSlice::new(&self.pending);
            n += 1;
        }
        n
    }

    /// Drops the first `n` queued bytes, written straight from the buffer
    /// ([`Outbound::io_slices`]): whole chunks are let go, a partly written one and
    /// the arena are advanced (the arena's allocation goes on being filled), and the
    /// bytes count as written. Sizes the next arena as [`Outbound::take`] does.
    pub fn consume(&mut self, n: usize) {
        let mut left = n.min(self.queued);
        self.written(left);
        while left > 0 {
            match self.chunks.front_mut() {
                Some(chunk) if chunk.len() <= left => {
                    left -= chunk.len();
                    self.chunks.pop_front();
                }
                Some(chunk) => {
                    chunk.advance(left);
                    left = 0;
                }
                None => {
                    let k = left.min(self.pending.len());
                    self.pending.advance(k);
                    left = 0;
                }
            }
        }
        self.end_cycle();
    }

    /// One write's cycle is over: light traffic halves the next arena.
    fn end_cycle(&mut self) {
        let cycle = self.total - self.total_at_take;
        if cycle < (self.arena_size / 4) as u64 {
            self.arena_size = (self.arena_size / 2).max(ARENA_MIN);
        }
        self.total_at_take = self.total;
        self.arenas_this_cycle = 0;
    }

    /// Lets the arena go if nothing has been queued since the last call and nothing is
    /// waiting: the connection is idle. Returns whether memory was released.
    pub fn release_idle(&mut self) -> bool {
        let idle = self.total == self.total_at_idle_check && self.queued == 0;
        self.total_at_idle_check = self.total;
        if idle && self.chunks.is_empty() && self.pending.capacity() > 0 {
            self.pending = BytesMut::new();
            return true;
        }
        false
    }

    /// Accounts for bytes the writer has written.
    pub fn written(&mut self, n: usize) {
        let n = n.min(self.queued);
        self.queued -= n;
        ledger::outbound(-(n as i64));
    }

    /// Drops everything queued (the connection is gone).
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.pending.clear();
        ledger::outbound(-(self.queued as i64));
        self.queued = 0;
    }
}

impl Drop for Outbound {
    fn drop(&mut self) {
        ledger::outbound(-(self.queued as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::BodyChunks;
    use crate::protocol::method::BasicDeliver;

    fn message(body: &[u8]) -> Message {
        let mut chunks = BodyChunks::new();
        if !body.is_empty() {
            chunks.push(Bytes::copy_from_slice(body));
        }
        let props = crate::protocol::BasicProperties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            ..Default::default()
        };
        Message::new(
            "amq.topic".into(),
            "a.b.c".into(),
            props.to_bytes(),
            chunks,
            body.len() as u64,
        )
    }

    fn expected(channel: u16, msg: &Message, body: &[u8], frame_max: u32) -> Vec<u8> {
        let mut want = BytesMut::new();
        frame::encode_method(
            &mut want,
            channel,
            &Method::BasicDeliver(BasicDeliver {
                consumer_tag: "ctag".into(),
                delivery_tag: 42,
                redelivered: true,
                exchange: "amq.topic".into(),
                routing_key: "a.b.c".into(),
            }),
        );
        frame::encode_content(
            &mut want,
            channel,
            60,
            msg.raw_properties(),
            body,
            frame_max,
        );
        want.to_vec()
    }

    fn written(out: &mut Outbound) -> Vec<u8> {
        out.take(1024)
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect()
    }

    #[test]
    fn prebuilt_tail_matches_the_generic_encoding() {
        for body in [&b""[..], b"x", &[7u8; 300][..]] {
            let msg = message(body);
            assert!(msg.wire_tail().is_some());
            let mut out = Outbound::new(512, 4096);
            out.deliver(9, &"ctag".into(), 42, true, &msg);
            assert_eq!(written(&mut out), expected(9, &msg, body, 4096));
        }
    }

    #[test]
    fn many_deliveries_span_arenas_intact() {
        let msg = message(b"payload");
        let mut out = Outbound::new(512, 4096);
        let mut want = Vec::new();
        for _ in 0..2000 {
            out.deliver(1, &"ctag".into(), 42, true, &msg);
            want.extend(expected(1, &msg, b"payload", 4096));
        }
        assert!(
            out.chunks.len() >= 2,
            "the arena is sealed as it fills, not regrown: {} chunks for {} bytes",
            out.chunks.len(),
            want.len()
        );
        assert_eq!(out.queued_bytes(), want.len());
        assert_eq!(written(&mut out), want);
    }

    #[test]
    fn large_bodies_are_split_to_frame_max_without_copy() {
        let body = vec![5u8; 10_000];
        let msg = message(&body);
        assert!(msg.wire_tail().is_none());
        let mut out = Outbound::new(512, 4096);
        out.deliver(3, &"ctag".into(), 42, true, &msg);
        let queued = out.queued_bytes();
        let bytes = written(&mut out);
        assert_eq!(bytes.len(), queued);
        assert_eq!(bytes, expected(3, &msg, &body, 4096));
    }

    /// Writing straight from the buffer, a few bytes at a time, sends exactly what
    /// `take` would have, and the arena goes on being filled in place.
    #[test]
    fn partial_writes_from_the_slices_keep_every_byte_in_order() {
        let small = message(b"payload");
        let big = message(&[9u8; 3000]);
        let mut out = Outbound::new(512, 4096);
        let mut want = Vec::new();
        let mut got = Vec::new();
        for round in 0..50u64 {
            let msg = if round % 7 == 3 { &big } else { &small };
            let body: &[u8] = if round % 7 == 3 {
                &[9u8; 3000]
            } else {
                b"payload"
            };
            out.deliver(1, &"ctag".into(), 42, true, msg);
            want.extend(expected(1, msg, body, 4096));
            // Write at most 100 bytes of what is queued, as a full socket would.
            let mut slices = [std::io::IoSlice::new(&[]); 8];
            let n = out.io_slices(&mut slices);
            let mut budget = 100;
            for s in &slices[..n] {
                let k = s.len().min(budget);
                got.extend_from_slice(&s[..k]);
                budget -= k;
            }
            let written = 100 - budget;
            out.consume(written);
        }
        while !out.is_empty() {
            let mut slices = [std::io::IoSlice::new(&[]); 8];
            let n = out.io_slices(&mut slices);
            let all: usize = slices[..n].iter().map(|s| s.len()).sum();
            for s in &slices[..n] {
                got.extend_from_slice(s);
            }
            out.consume(all);
        }
        assert_eq!(got, want);
        assert_eq!(out.total_written(), want.len() as u64);
        assert_eq!(out.queued_bytes(), 0);
    }

    #[test]
    fn an_idle_connection_holds_no_arena_and_a_busy_one_grows_it() {
        let msg = message(b"payload");
        let mut out = Outbound::new(512, 4096);
        out.deliver(1, &"ctag".into(), 1, false, &msg);
        assert_eq!(out.pending.capacity(), ARENA_MIN);
        let _ = out.take(1024);
        out.written(out.queued_bytes());
        assert!(!out.release_idle(), "just written to: kept");
        assert!(out.release_idle(), "idle since the last check: let go");
        assert_eq!(out.pending.capacity(), 0);
        for tag in 0..2000 {
            out.deliver(1, &"ctag".into(), tag, false, &msg);
        }
        assert_eq!(
            out.arena_size, ARENA_MAX,
            "one write's worth filled several arenas"
        );
        let _ = out.take(1024);
        for _ in 0..8 {
            out.deliver(1, &"ctag".into(), 1, false, &msg);
            let _ = out.take(1024);
        }
        assert_eq!(out.arena_size, ARENA_MIN, "light traffic shrinks it back");
    }
}
