//! Owns: [`Message`], the published message as every queue and every shard sees it: one
//! shared, immutable handle to the raw content-header properties and the body chunks as
//! they were read from the publisher's socket, plus the routing facts a queue needs.
//!
//! Does not: mutate a message after publish, re-encode its properties, or copy its body.
//!
//! # Invariants
//! - `raw_properties` and `body` are `Bytes` slices of the publisher's read buffer; the
//!   same slices are written to every subscriber.
//! - `body_size` is the sum of the chunk lengths and equals the content header's
//!   announced body size.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use smallvec::SmallVec;

use crate::protocol::ShortStr;

/// A shard-local handle to a message. Queues on one shard share one `Arc` reference
/// through `Rc` clones, so enqueueing a message into many local queues and delivering it
/// costs no atomic operations on a cache line the publisher's shard also writes.
pub type LocalMessage = std::rc::Rc<Message>;

/// Body chunks as received: one per body frame.
pub type BodyChunks = SmallVec<[Bytes; 1]>;

/// A shared handle to a published message. Cloning is a reference-count increment.
#[derive(Clone, Debug)]
pub struct Message(Arc<MessageInner>);

#[derive(Debug)]
struct MessageInner {
    exchange: ShortStr,
    routing_key: ShortStr,
    raw_properties: Bytes,
    body: BodyChunks,
    body_size: u64,
    persistent: bool,
    /// Per-message TTL from the `expiration` property, in milliseconds.
    ttl_ms: Option<u64>,
    /// For small messages: everything a delivery writes after the delivery tag and
    /// redelivered flag, encoded once at publish for every subscriber to copy.
    wire_tail: Option<WireTail>,
}

/// The invariant tail of a delivery of a small message: the exchange and routing key of
/// `basic.deliver` with its frame end, the content-header frame and the single body
/// frame, all for channel 0. A delivery copies it in one piece and patches the two
/// channel numbers at `header_channel_at` and `body_channel_at`.
///
/// # Invariants
/// Only built when the body fits one body frame of the smallest legal frame size
/// (4096), so it is valid for every connection.
#[derive(Debug)]
pub struct WireTail {
    pub bytes: Bytes,
    pub header_channel_at: usize,
    pub body_channel_at: usize,
}

/// Largest body for which a [`WireTail`] is built, bytes.
pub const WIRE_TAIL_MAX_BODY: u64 = 512;

fn build_wire_tail(
    exchange: &ShortStr,
    routing_key: &ShortStr,
    raw_properties: &Bytes,
    body: &[Bytes],
    body_size: u64,
) -> Option<WireTail> {
    if body_size > WIRE_TAIL_MAX_BODY {
        return None;
    }
    let mut out = BytesMut::with_capacity(
        4 + exchange.len() + routing_key.len() + 20 + raw_properties.len() + 8 + body_size as usize,
    );
    out.put_u8(exchange.len() as u8);
    out.put_slice(exchange.as_bytes());
    out.put_u8(routing_key.len() as u8);
    out.put_slice(routing_key.as_bytes());
    out.put_u8(crate::protocol::method::FRAME_END);
    let header_channel_at = out.len() + 1;
    crate::protocol::frame::encode_content_header_prefix(
        &mut out,
        0,
        60,
        body_size,
        raw_properties.len(),
    );
    out.put_slice(raw_properties);
    out.put_u8(crate::protocol::method::FRAME_END);
    let body_channel_at = out.len() + 1;
    if body_size > 0 {
        crate::protocol::frame::encode_body_prefix(&mut out, 0, body_size as u32);
        for chunk in body {
            out.put_slice(chunk);
        }
        out.put_u8(crate::protocol::method::FRAME_END);
    }
    Some(WireTail {
        bytes: out.freeze(),
        header_channel_at,
        body_channel_at,
    })
}

impl Message {
    /// Builds a message from its parts as assembled by the publishing channel.
    pub fn new(
        exchange: ShortStr,
        routing_key: ShortStr,
        raw_properties: Bytes,
        body: BodyChunks,
        body_size: u64,
    ) -> Message {
        let persistent = crate::protocol::properties::raw_delivery_mode(&raw_properties) == Some(2);
        let ttl_ms = crate::protocol::properties::raw_expiration(&raw_properties)
            .and_then(|raw| std::str::from_utf8(raw).ok())
            .and_then(|text| text.trim().parse::<u64>().ok());
        let wire_tail = build_wire_tail(&exchange, &routing_key, &raw_properties, &body, body_size);
        Message(Arc::new(MessageInner {
            wire_tail,
            exchange,
            routing_key,
            raw_properties,
            body,
            body_size,
            persistent,
            ttl_ms,
        }))
    }

    pub fn exchange(&self) -> &ShortStr {
        &self.0.exchange
    }

    pub fn routing_key(&self) -> &ShortStr {
        &self.0.routing_key
    }

    /// Property flags and property list exactly as the publisher sent them.
    pub fn raw_properties(&self) -> &Bytes {
        &self.0.raw_properties
    }

    pub fn body(&self) -> &[Bytes] {
        &self.0.body
    }

    pub fn body_size(&self) -> u64 {
        self.0.body_size
    }

    /// Delivery mode 2.
    pub fn is_persistent(&self) -> bool {
        self.0.persistent
    }

    /// The `expiration` property parsed as milliseconds, if present and valid.
    pub fn ttl_ms(&self) -> Option<u64> {
        self.0.ttl_ms
    }

    /// Bytes this message accounts for in a queue's depth: body plus properties.
    pub fn accounted_size(&self) -> u64 {
        self.0.body_size
    }

    /// The prebuilt delivery tail, for small messages.
    pub fn wire_tail(&self) -> Option<&WireTail> {
        self.0.wire_tail.as_ref()
    }

    /// Whether two handles share one message.
    pub fn ptr_eq(&self, other: &Message) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How many handles (queues, in-flight deliveries) share this message.
    pub fn share_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}
