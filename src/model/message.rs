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

use crate::protocol::reply::{erlang_term, ErlangShape};
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
    /// Bytes this message occupies, as counted in the memory ledger.
    memory: u64,
}

impl Drop for MessageInner {
    fn drop(&mut self) {
        super::ledger::messages(-(self.memory as i64));
    }
}

/// What a message costs beyond its bytes: the shared record itself, its reference
/// counts, the exchange and routing key (an estimate used by the memory ledger).
pub const MESSAGE_OVERHEAD: u64 = 256;

/// The invariant tail of a delivery of a small message: the exchange and routing key of
/// `basic.deliver` with its frame end, the content-header frame and the single body
/// frame, all for channel 0. A delivery copies it in one piece and patches the two
/// channel numbers at `header_channel_at` and `body_channel_at`.
///
/// # Invariants
/// Only built when the body fits one body frame of the smallest legal frame size
/// (4096), so it is valid for every connection. The message's properties and body are
/// slices of the same allocation.
#[derive(Debug)]
pub struct WireTail {
    pub bytes: Bytes,
    pub header_channel_at: usize,
    pub body_channel_at: usize,
    props_at: usize,
    body_at: usize,
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
    let props_at = out.len();
    out.put_slice(raw_properties);
    out.put_u8(crate::protocol::method::FRAME_END);
    let body_channel_at = out.len() + 1;
    let mut body_at = out.len();
    if body_size > 0 {
        crate::protocol::frame::encode_body_prefix(&mut out, 0, body_size as u32);
        body_at = out.len();
        for chunk in body {
            out.put_slice(chunk);
        }
        out.put_u8(crate::protocol::method::FRAME_END);
    }
    Some(WireTail {
        bytes: out.freeze(),
        header_channel_at,
        body_channel_at,
        props_at,
        body_at,
    })
}

impl Message {
    /// Builds a message from its parts (an `expiration` that is not a TTL is ignored).
    pub fn new(
        exchange: ShortStr,
        routing_key: ShortStr,
        raw_properties: Bytes,
        body: BodyChunks,
        body_size: u64,
    ) -> Message {
        let ttl_ms = crate::protocol::properties::raw_expiration(&raw_properties)
            .and_then(|raw| parse_expiration(raw).ok());
        Message::with_ttl(
            exchange,
            routing_key,
            raw_properties,
            body,
            body_size,
            ttl_ms,
        )
    }

    /// [`Message::new`] with the `expiration` property already parsed (the publish path
    /// parses it once, to refuse an invalid one).
    pub fn with_ttl(
        exchange: ShortStr,
        routing_key: ShortStr,
        raw_properties: Bytes,
        body: BodyChunks,
        body_size: u64,
        ttl_ms: Option<u64>,
    ) -> Message {
        let persistent = crate::protocol::properties::raw_delivery_mode(&raw_properties) == Some(2);
        let wire_tail = build_wire_tail(&exchange, &routing_key, &raw_properties, &body, body_size);
        // A small message's properties and body are re-pointed into its own tail, so a
        // queued message does not keep the publisher's whole read buffer alive.
        let (raw_properties, body) = match &wire_tail {
            Some(tail) => {
                let props = tail
                    .bytes
                    .slice(tail.props_at..tail.props_at + raw_properties.len());
                let mut chunks = BodyChunks::new();
                if body_size > 0 {
                    chunks.push(
                        tail.bytes
                            .slice(tail.body_at..tail.body_at + body_size as usize),
                    );
                }
                (props, chunks)
            }
            None => (raw_properties, body),
        };
        let memory = MESSAGE_OVERHEAD
            + match &wire_tail {
                Some(tail) => tail.bytes.len() as u64,
                None => body_size + raw_properties.len() as u64,
            };
        super::ledger::messages(memory as i64);
        Message(Arc::new(MessageInner {
            memory,
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

    /// Bytes of memory this message occupies (body, properties, prebuilt delivery tail
    /// and a fixed overhead), counted once however many queues share it.
    pub fn memory_size(&self) -> u64 {
        self.0.memory
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

/// The largest per-message TTL RabbitMQ accepts (`rabbit_misc:check_expiry`).
pub const MAX_EXPIRY_MS: u64 = 4_294_967_295;

/// Parses the `expiration` property as RabbitMQ's `rabbit_basic:parse_expiration` does:
/// an optionally signed decimal integer, nothing after it, from 0 to [`MAX_EXPIRY_MS`].
/// The error is RabbitMQ's reason term as it prints it (`no_integer`,
/// `{leftover_string,"x"}`, `{value_negative,-5}`, `{value_too_large,N}`), for the
/// `invalid expiration` channel error.
pub fn parse_expiration(raw: &[u8]) -> Result<u64, String> {
    let (negative, unsigned) = match raw.first() {
        Some(b'-') => (true, &raw[1..]),
        Some(b'+') => (false, &raw[1..]),
        _ => (false, raw),
    };
    let digits = unsigned.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return Err("no_integer".to_string());
    }
    let rest = &unsigned[digits..];
    if !rest.is_empty() {
        return Err(format!(
            "{{leftover_string,{}}}",
            erlang_term(rest, ErlangShape::List)
        ));
    }
    let text = &unsigned[..digits];
    let trimmed = match text.iter().position(|&b| b != b'0') {
        Some(at) => &text[at..],
        None => &b"0"[..],
    };
    let number = String::from_utf8_lossy(trimmed);
    let value = number.parse::<u64>().ok();
    if negative && value != Some(0) {
        return Err(format!("{{value_negative,-{number}}}"));
    }
    match value {
        Some(ms) if ms <= MAX_EXPIRY_MS => Ok(ms),
        _ => Err(format!("{{value_too_large,{number}}}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiration_parses_as_rabbitmq_does() {
        assert_eq!(parse_expiration(b"60000"), Ok(60_000));
        assert_eq!(parse_expiration(b"0"), Ok(0));
        assert_eq!(parse_expiration(b"+5"), Ok(5));
        assert_eq!(parse_expiration(b"-0"), Ok(0));
        assert_eq!(parse_expiration(b"abc"), Err("no_integer".into()));
        assert_eq!(parse_expiration(b""), Err("no_integer".into()));
        assert_eq!(parse_expiration(b" 5"), Err("no_integer".into()));
        assert_eq!(
            parse_expiration(b"12ab"),
            Err("{leftover_string,\"ab\"}".into())
        );
        assert_eq!(
            parse_expiration(b"1\n"),
            Err("{leftover_string,[10]}".into())
        );
        assert_eq!(parse_expiration(b"-5"), Err("{value_negative,-5}".into()));
        assert_eq!(parse_expiration(b"4294967295"), Ok(MAX_EXPIRY_MS));
        assert_eq!(
            parse_expiration(b"4294967296"),
            Err("{value_too_large,4294967296}".into())
        );
        assert_eq!(
            parse_expiration(b"99999999999999999999999"),
            Err("{value_too_large,99999999999999999999999}".into())
        );
    }

    fn within(inner: &[u8], outer: &[u8]) -> bool {
        let (a, b) = (inner.as_ptr() as usize, outer.as_ptr() as usize);
        a >= b && a + inner.len() <= b + outer.len()
    }

    #[test]
    fn small_messages_release_the_read_buffer() {
        let read_buffer = Bytes::from(vec![9u8; 4096]);
        let mut chunks = BodyChunks::new();
        chunks.push(read_buffer.slice(100..164));
        let msg = Message::new(
            "ex".into(),
            "k".into(),
            Bytes::from_static(&[0, 0]),
            chunks,
            64,
        );
        let tail = msg.wire_tail().expect("small message has a tail");
        assert!(within(&msg.body()[0], &tail.bytes));
        assert!(!within(&msg.body()[0], &read_buffer));
        assert_eq!(&msg.body()[0][..], &read_buffer[100..164]);
        assert_eq!(&msg.raw_properties()[..], &[0, 0]);
    }

    #[test]
    fn large_messages_stay_zero_copy() {
        let read_buffer = Bytes::from(vec![7u8; 8192]);
        let mut chunks = BodyChunks::new();
        chunks.push(read_buffer.slice(0..4000));
        let msg = Message::new("ex".into(), "k".into(), Bytes::new(), chunks, 4000);
        assert!(msg.wire_tail().is_none());
        assert!(within(&msg.body()[0], &read_buffer));
    }
}
