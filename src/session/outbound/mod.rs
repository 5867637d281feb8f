//! Owns: [`Outbound`], one connection's queue of bytes waiting for its writer: small
//! encoded frames are appended to a shared arena; large bodies are queued as their own
//! `Bytes` (the publisher's buffer, not a copy) and written with `writev`. The arena is
//! sized to the traffic (512 bytes, doubling up to 64 KiB while one write's worth fills it,
//! halving when little is written). A busy connection keeps reusing its arena (the
//! allocation comes back to it once the writer dropped what it wrote); an idle one lets
//! it go ([`Outbound::release_idle`], once per reclaim interval), so it holds no
//! outbound memory; a minimum-sized arena is let go as soon as everything is written.
//! A small delivery to a consumer of this shard's queue is not encoded here at all but
//! deferred ([`deferred`]): the write pass encodes it into the shard's scratch buffer
//! just before the `send` ([`Outbound::encode_deferred`]), and only what the socket did
//! not take is copied into the arena ([`Outbound::sent_encoded`]). Every other append
//! encodes what is deferred first, so bytes go out in the order they were queued.
//!
//! Does not: write to the socket (the writer task does) or decide when to stop filling it
//! (consumers stop getting credit above `write_high_water`).

mod deferred;

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::model::ledger;
use crate::model::message::{LocalMessage, Message};
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
    /// Small deliveries queued after everything in `chunks` and `pending`, not yet
    /// encoded (their size is in `queued` and `total`); boxed while a connection has had
    /// some since it was last idle.
    deferred: Option<Box<deferred::Deferred>>,
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
            deferred: None,
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
        self.encode_all_deferred();
        let arena = self.arena();
        let before = arena.len();
        frame::encode_method(arena, channel, method);
        let added = arena.len() - before;
        self.count(added);
    }

    /// Appends a heartbeat frame.
    pub fn heartbeat(&mut self) {
        self.encode_all_deferred();
        let arena = self.arena();
        frame::encode_heartbeat(arena);
        self.count(8);
    }

    /// Appends raw bytes (the protocol header answer to a wrong version).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.encode_all_deferred();
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
        self.encode_all_deferred();
        if let Some((tail, size)) = deferred::small_tail(consumer_tag, msg, self.inline_max) {
            let arena = self.arena();
            deferred::SmallHead::new(channel, consumer_tag.as_bytes(), redelivered).write(
                arena,
                delivery_tag,
                tail,
            );
            self.count(size);
            return;
        }
        let tag = consumer_tag.as_bytes();
        let exchange = msg.exchange().as_bytes();
        let key = msg.routing_key().as_bytes();
        let size = 4 + 1 + tag.len() + 8 + 1 + 1 + exchange.len() + 1 + key.len();
        let arena = self.arena();
        let before = arena.len();
        arena.put_u8(1);
        arena.put_u16(channel);
        arena.put_u32(size as u32);
        arena.put_slice(&[0, 60, 0, 60]);
        arena.put_u8(tag.len() as u8);
        arena.put_slice(tag);
        arena.put_u64(delivery_tag);
        arena.put_u8(u8::from(redelivered));
        arena.put_u8(exchange.len() as u8);
        arena.put_slice(exchange);
        arena.put_u8(key.len() as u8);
        arena.put_slice(key);
        arena.put_u8(FRAME_END);
        let added = arena.len() - before;
        self.count(added);
        self.content(channel, msg);
    }

    /// [`Outbound::deliver`] for a message of this shard's: a small one is queued as it
    /// is, to be encoded by the write pass (or by the next append) — a share of the
    /// message (8 bytes) instead of its encoding.
    pub fn deliver_later(
        &mut self,
        channel: u16,
        consumer_tag: &ShortStr,
        delivery_tag: u64,
        redelivered: bool,
        msg: &LocalMessage,
    ) {
        if let Some((_, size)) = deferred::small_tail(consumer_tag, msg, self.inline_max) {
            let waiting = self.deferred.get_or_insert_with(Box::default);
            if waiting.push(channel, consumer_tag, delivery_tag, redelivered, msg, size) {
                self.count(size);
                return;
            }
        }
        self.deliver(channel, consumer_tag, delivery_tag, redelivered, msg);
    }

    /// [`Outbound::deliver_later`] for a run of this shard's messages to one consumer,
    /// not redelivered, with consecutive delivery tags from `first_tag` (a pulled
    /// queue's run): when every one is small they are queued as one run, their handles
    /// moved, with one size sum; otherwise one by one. Leaves `msgs` empty.
    pub fn deliver_run_later(
        &mut self,
        channel: u16,
        consumer_tag: &ShortStr,
        first_tag: u64,
        msgs: &mut Vec<LocalMessage>,
    ) {
        let mut size = 0;
        let all_small = msgs.iter().all(|msg| {
            deferred::small_tail(consumer_tag, msg, self.inline_max)
                .map(|(_, bytes)| size += bytes)
                .is_some()
        });
        if all_small {
            let waiting = self.deferred.get_or_insert_with(Box::default);
            if waiting.push_run(channel, consumer_tag, first_tag, msgs, size) {
                self.count(size);
                return;
            }
        }
        for (msg, tag) in msgs.drain(..).zip(first_tag..) {
            self.deliver_later(channel, consumer_tag, tag, false, &msg);
        }
    }

    /// Encodes every deferred delivery into the arena (before anything else is appended,
    /// or before the writer task takes the buffers).
    fn encode_all_deferred(&mut self) {
        let Some(mut waiting) = self.deferred.take() else {
            return;
        };
        if !waiting.is_empty() {
            let bytes = waiting.bytes();
            // One reservation for all of them (the arena's sizing is for appends as
            // they come).
            if self.pending.capacity() - self.pending.len() < bytes {
                self.seal_pending();
                self.pending.reserve(bytes.max(self.arena_size));
            }
            let count = waiting.encode_front(&mut self.pending, usize::MAX);
            waiting.pop_front(count, bytes);
        }
        self.deferred = Some(waiting);
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
        self.encode_all_deferred();
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

    /// The slices [`Outbound::io_slices`] would fill, given room.
    pub fn slice_count(&self) -> usize {
        self.chunks.len() + usize::from(!self.pending.is_empty())
    }

    /// Encodes deferred deliveries, first ones first, into `into` (the write pass's
    /// scratch buffer) until about `budget` bytes; returns how many. They go out after
    /// what [`Outbound::io_slices`] offers; report what the socket took of them with
    /// [`Outbound::sent_encoded`].
    pub fn encode_deferred(&self, into: &mut BytesMut, budget: usize) -> usize {
        self.deferred
            .as_ref()
            .map_or(0, |d| d.encode_front(into, budget))
    }

    /// The socket took `sent` bytes of `encoded`, the encoding of the first `count`
    /// deferred deliveries ([`Outbound::encode_deferred`]), after everything queued as
    /// bytes: they are no longer deferred, the bytes count as written, and what the socket
    /// did not take is queued as bytes, ahead of the deliveries still deferred.
    pub fn sent_encoded(&mut self, count: usize, encoded: &[u8], sent: usize) {
        let Some(waiting) = self.deferred.as_mut() else {
            return;
        };
        waiting.pop_front(count, encoded.len());
        let sent = sent.min(encoded.len());
        self.written(sent);
        if sent < encoded.len() {
            // Counted when it was deferred.
            self.arena().extend_from_slice(&encoded[sent..]);
        }
        self.release_drained_arena();
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
        self.release_drained_arena();
    }

    /// Everything is written: an arena of the minimum size is let go. A subscriber's
    /// bytes are mostly deferred deliveries, encoded into the shard's scratch buffer, so
    /// its arena held only the handshake's replies, and 10,000 subscribers kept 5 MiB
    /// of them; a connection whose writes fill its arena has grown it and keeps it.
    fn release_drained_arena(&mut self) {
        if self.queued == 0 && self.arena_size == ARENA_MIN {
            self.pending = BytesMut::new();
        }
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
        if !idle || !self.chunks.is_empty() {
            return false;
        }
        let had_deferred = self.deferred.take().is_some();
        if self.pending.capacity() > 0 {
            self.pending = BytesMut::new();
            return true;
        }
        had_deferred
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
        if let Some(waiting) = self.deferred.as_mut() {
            waiting.clear();
        }
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
mod tests;
