//! Owns: [`Outbound`], one connection's queue of bytes waiting for its writer: small
//! encoded frames are appended to a shared arena; large bodies are queued as their own
//! `Bytes` (the publisher's buffer, not a copy) and written with `writev`.
//!
//! Does not: write to the socket (the writer task does) or decide when to stop filling it
//! (consumers stop getting credit above `write_high_water`).

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};

use crate::model::message::Message;
use crate::protocol::frame;
use crate::protocol::method::FRAME_END;
use crate::protocol::{Method, ShortStr};

const ARENA: usize = 64 * 1024;

/// Bytes queued for one socket.
pub struct Outbound {
    chunks: VecDeque<Bytes>,
    pending: BytesMut,
    queued: usize,
    inline_max: usize,
    frame_max: u32,
}

impl Outbound {
    pub fn new(inline_max: usize, frame_max: u32) -> Outbound {
        Outbound {
            chunks: VecDeque::new(),
            pending: BytesMut::new(),
            queued: 0,
            inline_max,
            frame_max,
        }
    }

    pub fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// Bytes queued and not yet handed to the writer.
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    fn arena(&mut self) -> &mut BytesMut {
        if self.pending.capacity() - self.pending.len() < 1024 {
            self.pending.reserve(ARENA);
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
        self.queued += len;
    }

    /// Appends a method frame.
    pub fn method(&mut self, channel: u16, method: &Method) {
        let arena = self.arena();
        let before = arena.len();
        frame::encode_method(arena, channel, method);
        let added = arena.len() - before;
        self.queued += added;
    }

    /// Appends a heartbeat frame.
    pub fn heartbeat(&mut self) {
        let arena = self.arena();
        frame::encode_heartbeat(arena);
        self.queued += 8;
    }

    /// Appends raw bytes (the protocol header answer to a wrong version).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.arena().extend_from_slice(bytes);
        self.queued += bytes.len();
    }

    /// Appends `basic.deliver` plus the message's content, encoded by hand on this hot path.
    pub fn deliver(
        &mut self,
        channel: u16,
        consumer_tag: &ShortStr,
        delivery_tag: u64,
        redelivered: bool,
        msg: &Message,
    ) {
        let arena = self.arena();
        let before = arena.len();
        let exchange = msg.exchange().as_bytes();
        let key = msg.routing_key().as_bytes();
        let tag = consumer_tag.as_bytes();
        let size = 4 + 1 + tag.len() + 8 + 1 + 1 + exchange.len() + 1 + key.len();
        arena.put_u8(1);
        arena.put_u16(channel);
        arena.put_u32(size as u32);
        arena.put_u16(60);
        arena.put_u16(60);
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
        self.queued += added;
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
        self.queued += added;
        self.put_shared(props, 0, props.len());
        self.arena().put_u8(FRAME_END);
        self.queued += 1;
        let max_payload = (self.frame_max as usize).saturating_sub(8).max(1);
        for chunk in msg.body() {
            let mut offset = 0;
            while offset < chunk.len() {
                let len = (chunk.len() - offset).min(max_payload);
                let arena = self.arena();
                frame::encode_body_prefix(arena, channel, len as u32);
                self.queued += 7;
                self.put_shared(chunk, offset, len);
                self.arena().put_u8(FRAME_END);
                self.queued += 1;
                offset += len;
            }
        }
    }

    /// Takes up to `max_iov` buffers for one `writev`. The caller reports what was written
    /// with [`Outbound::written`].
    pub fn take(&mut self, max_iov: usize) -> Vec<Bytes> {
        self.seal_pending();
        let n = self.chunks.len().min(max_iov);
        self.chunks.drain(..n).collect()
    }

    /// Accounts for bytes the writer has written.
    pub fn written(&mut self, n: usize) {
        self.queued = self.queued.saturating_sub(n);
    }

    /// Drops everything queued (the connection is gone).
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.pending.clear();
        self.queued = 0;
    }
}
