//! Owns: [`Message`], the published message as every queue and every shard sees it: one
//! shared, immutable handle to the raw content-header properties and the body chunks as
//! they were read from the publisher's socket, plus the routing facts a queue needs.
//!
//! Does not: mutate a message after publish, re-encode its properties, or copy a large
//! body.
//!
//! # Invariants
//! - A body chunk above `WIRE_TAIL_MAX_BODY` is a `Bytes` slice of the publisher's read
//!   buffer (or of an allocation the reader gave that frame alone); the same slices are
//!   written to every subscriber. Names, properties and smaller bodies are copied out
//!   of the read buffer, so that nothing a queue keeps pins more than the ledger charges.
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

/// A publish's body as it was received: its chunks, and how many bytes of the read
/// buffers they were cut from they keep alive beyond their own (`Frame::pinned`), which
/// the memory ledger charges to the message.
#[derive(Debug, Default)]
pub struct ReceivedBody {
    pub chunks: BodyChunks,
    pub pinned: u64,
}

impl ReceivedBody {
    /// A body with no read-buffer bytes beyond its own.
    pub fn owned(chunks: BodyChunks) -> ReceivedBody {
        ReceivedBody { chunks, pinned: 0 }
    }
}

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

impl WireTail {
    /// The part of `basic.deliver`'s payload the tail holds: the exchange and routing key
    /// with their length octets.
    pub fn method_rest(&self) -> usize {
        let exchange = usize::from(self.bytes.first().copied().unwrap_or(0));
        let key = usize::from(self.bytes.get(1 + exchange).copied().unwrap_or(0));
        2 + exchange + key
    }

    /// Where the body frame's channel number is, if the message has a body frame.
    pub fn body_channel(&self) -> Option<usize> {
        (self.body_channel_at + 2 <= self.bytes.len()).then_some(self.body_channel_at)
    }

    /// The exchange and routing key, as slices of the tail (the tail starts with them,
    /// each after its length octet).
    fn names(&self, exchange_len: usize, routing_key_len: usize) -> (ShortStr, ShortStr) {
        let exchange = self.bytes.slice(1..1 + exchange_len);
        let at = 2 + exchange_len;
        let routing_key = self.bytes.slice(at..at + routing_key_len);
        (ShortStr::from(exchange), ShortStr::from(routing_key))
    }
}

/// The exchange, routing key and properties copied into one allocation of their own.
fn copy_names_and_properties(
    exchange: &ShortStr,
    routing_key: &ShortStr,
    raw_properties: &Bytes,
) -> (ShortStr, ShortStr, Bytes) {
    let (e, r) = (exchange.len(), routing_key.len());
    let mut out = BytesMut::with_capacity(e + r + raw_properties.len());
    out.put_slice(exchange.as_bytes());
    out.put_slice(routing_key.as_bytes());
    out.put_slice(raw_properties);
    let all = out.freeze();
    (
        ShortStr::from(all.slice(..e)),
        ShortStr::from(all.slice(e..e + r)),
        all.slice(e + r..),
    )
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
            ReceivedBody::owned(body),
            body_size,
            ttl_ms,
        )
    }

    /// [`Message::new`] with the `expiration` property already parsed (the publish path
    /// parses it once, to refuse an invalid one), for a body as received.
    ///
    /// Nothing the message keeps may pin more memory than the ledger charges it: the
    /// names and properties are slices of the publisher's read buffer, so they are
    /// copied out — into the delivery tail for a small message (which then holds every
    /// byte the message keeps), else into one allocation of their own; body chunks too
    /// small to have been given their own allocation are copied as well. A large chunk
    /// stays the publisher's bytes, and what it pins beyond itself is charged.
    pub fn with_ttl(
        exchange: ShortStr,
        routing_key: ShortStr,
        raw_properties: Bytes,
        body: ReceivedBody,
        body_size: u64,
        ttl_ms: Option<u64>,
    ) -> Message {
        let persistent = crate::protocol::properties::raw_delivery_mode(&raw_properties) == Some(2);
        let wire_tail = build_wire_tail(
            &exchange,
            &routing_key,
            &raw_properties,
            &body.chunks,
            body_size,
        );
        let (exchange, routing_key, raw_properties, chunks, memory) = match &wire_tail {
            Some(tail) => {
                let (exchange, routing_key) = tail.names(exchange.len(), routing_key.len());
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
                let memory = MESSAGE_OVERHEAD + tail.bytes.len() as u64;
                (exchange, routing_key, props, chunks, memory)
            }
            None => {
                let (exchange, routing_key, props) =
                    copy_names_and_properties(&exchange, &routing_key, &raw_properties);
                let mut chunks = body.chunks;
                for chunk in chunks.iter_mut() {
                    if chunk.len() as u64 <= WIRE_TAIL_MAX_BODY {
                        *chunk = Bytes::copy_from_slice(chunk);
                    }
                }
                let memory = MESSAGE_OVERHEAD
                    + exchange.len() as u64
                    + routing_key.len() as u64
                    + props.len() as u64
                    + body_size
                    + body.pinned;
                (exchange, routing_key, props, chunks, memory)
            }
        };
        super::ledger::messages(memory as i64);
        Message(Arc::new(MessageInner {
            memory,
            wire_tail,
            exchange,
            routing_key,
            raw_properties,
            body: chunks,
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

    /// The names and properties of a publish are slices of its method and header frames
    /// in the read buffer: no message keeps them there, small or large.
    #[test]
    fn names_and_properties_never_pin_the_read_buffer() {
        let read_buffer = Bytes::from(b"..amq.topic..a.b.c..\x10\x00\x02".to_vec());
        let exchange = ShortStr::from(read_buffer.slice(2..11));
        let key = ShortStr::from(read_buffer.slice(13..18));
        let props = read_buffer.slice(20..);
        for size in [8usize, 4000] {
            let body = Bytes::from(vec![1u8; size]);
            let mut chunks = BodyChunks::new();
            chunks.push(body);
            let msg = Message::new(
                exchange.clone(),
                key.clone(),
                props.clone(),
                chunks,
                size as u64,
            );
            assert_eq!(msg.exchange(), &exchange);
            assert_eq!(msg.routing_key(), &key);
            assert_eq!(msg.raw_properties(), &props);
            assert!(!within(msg.exchange().as_bytes(), &read_buffer), "{size}");
            assert!(
                !within(msg.routing_key().as_bytes(), &read_buffer),
                "{size}"
            );
            assert!(!within(msg.raw_properties(), &read_buffer), "{size}");
        }
    }

    /// A body chunk too small to have had an allocation of its own (a small frame of a
    /// multi-frame message) is copied; what a large one pins is charged.
    #[test]
    fn small_chunks_of_a_large_message_are_copied_and_pinned_bytes_charged() {
        let read_buffer = Bytes::from(vec![5u8; 65_536]);
        let mut chunks = BodyChunks::new();
        chunks.push(read_buffer.slice(0..400));
        chunks.push(read_buffer.slice(400..40_400));
        let body = ReceivedBody {
            chunks,
            pinned: 25_136,
        };
        let msg = Message::with_ttl("".into(), "q".into(), Bytes::new(), body, 40_400, None);
        assert!(!within(&msg.body()[0], &read_buffer));
        assert!(within(&msg.body()[1], &read_buffer));
        assert_eq!(msg.memory_size(), MESSAGE_OVERHEAD + 1 + 40_400 + 25_136);
    }
}
