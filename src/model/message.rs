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

use bytes::Bytes;
use smallvec::SmallVec;

use crate::protocol::ShortStr;

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
        Message(Arc::new(MessageInner {
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

    /// Whether two handles share one message.
    pub fn ptr_eq(&self, other: &Message) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How many handles (queues, in-flight deliveries) share this message.
    pub fn share_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}
