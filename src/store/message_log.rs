//! Owns: what a message segment's records say — a persistent message with the durable
//! queues (and their sequence numbers) it entered on this shard, the (queue, sequence)
//! pairs that left, and the highest sequence each queue delivered — encoded into and
//! decoded from record payloads.
//!
//! Does not: frame or checksum records (`record`), or decide when to write (`shard_store`).
//!
//! # Layout (little-endian)
//! - message: `1, u16 n, n × (u64 queue, u64 seq), shortstr exchange, shortstr
//!   routing key, u32 property length, properties, body` — the body runs to the end, so
//!   a segment's last bytes are the last message's body.
//! - gone: `2, u32 n, n × (u64 queue, u64 seq)`
//! - delivered: `3, u32 n, n × (u64 queue, u64 highest delivered seq)`
//! - hole: `4`, then anything — a damaged region recovery skipped and reframed as one
//!   record ([`super::record::reframe`]) so that every reader steps over it; it means
//!   nothing.
//! - withdrawn: `5`, then a message record's bytes — a message whose write failed and
//!   whose publish was nacked (`shard::home::persist`): the group is written again with the
//!   same bytes and offsets, this one type byte changed, and recovery skips it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use smallvec::SmallVec;

use crate::model::ids::QueueId;
use crate::model::message::Message;
use crate::protocol::codec::put_shortstr;
use crate::protocol::ShortStr;

const MESSAGE: u8 = 1;
/// The type byte a message record's payload starts with.
pub const MESSAGE_TYPE: u8 = MESSAGE;
const GONE: u8 = 2;
const DELIVERED: u8 = 3;
/// The first payload byte of a reframed damaged region.
pub const HOLE: u8 = 4;
/// The first payload byte of a message record withdrawn after a failed write.
const WITHDRAWN: u8 = 5;

/// The queues a message entered on one shard, with its sequence number in each.
pub type QueueSeqs = SmallVec<[(QueueId, u64); 2]>;

/// One decoded record.
#[derive(Debug)]
pub enum Logged {
    Message {
        queues: QueueSeqs,
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: Bytes,
        body: Bytes,
    },
    Gone(Vec<(QueueId, u64)>),
    Delivered(Vec<(QueueId, u64)>),
    /// A damaged region skipped at recovery: nothing to apply.
    Hole,
    /// A message record withdrawn after a failed write: it counts for nothing.
    Withdrawn,
}

/// Turns a message record's payload into a withdrawn one in place and returns the
/// (queue, seq) pairs it named; `None` (and no change) for any other payload. The
/// caller reseals the record's checksum.
pub fn withdraw(payload: &mut [u8]) -> Option<QueueSeqs> {
    if payload.first() != Some(&MESSAGE) {
        return None;
    }
    let mut buf = Bytes::copy_from_slice(payload.get(1..3)?);
    let n = buf.get_u16_le() as usize;
    let pairs = payload.get(3..3 + n * 16)?;
    let mut pairs = Bytes::copy_from_slice(pairs);
    let queues = get_pairs(&mut pairs, n).ok()?.into_iter().collect();
    payload[0] = WITHDRAWN;
    Some(queues)
}

/// Writes a message record's payload.
pub fn put_message(out: &mut BytesMut, queues: &[(QueueId, u64)], msg: &Message) {
    put_parts(
        out,
        queues,
        msg.exchange(),
        msg.routing_key(),
        msg.raw_properties(),
        msg.body(),
    );
}

/// Writes a message record's payload from its parts.
pub fn put_parts(
    out: &mut BytesMut,
    queues: &[(QueueId, u64)],
    exchange: &ShortStr,
    routing_key: &ShortStr,
    properties: &[u8],
    body: &[Bytes],
) {
    out.put_u8(MESSAGE);
    out.put_u16_le(queues.len() as u16);
    for (q, seq) in queues {
        out.put_u64_le(q.0);
        out.put_u64_le(*seq);
    }
    put_shortstr(out, exchange);
    put_shortstr(out, routing_key);
    out.put_u32_le(properties.len() as u32);
    out.put_slice(properties);
    for chunk in body {
        out.put_slice(chunk);
    }
}

/// Bytes a message record's payload takes.
pub fn message_len(queues: usize, msg: &Message) -> usize {
    1 + 2
        + queues * 16
        + 2
        + msg.exchange().len()
        + msg.routing_key().len()
        + 4
        + msg.raw_properties().len()
        + msg.body_size() as usize
}

/// Writes a gone or delivered record's payload.
pub fn put_pairs(out: &mut BytesMut, delivered: bool, pairs: &[(QueueId, u64)]) {
    out.put_u8(if delivered { DELIVERED } else { GONE });
    out.put_u32_le(pairs.len() as u32);
    for (q, seq) in pairs {
        out.put_u64_le(q.0);
        out.put_u64_le(*seq);
    }
}

/// Why a payload that passed its checksum still does not decode (a format bug or a
/// file from another program).
#[derive(Debug)]
pub struct Malformed(&'static str);

impl Malformed {
    /// The payload's `what` is missing or wrong.
    pub fn new(what: &'static str) -> Malformed {
        Malformed(what)
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed {}", self.0)
    }
}

fn need(buf: &Bytes, n: usize, what: &'static str) -> Result<(), Malformed> {
    if buf.remaining() < n {
        Err(Malformed(what))
    } else {
        Ok(())
    }
}

fn get_short(buf: &mut Bytes) -> Result<ShortStr, Malformed> {
    need(buf, 1, "short string")?;
    let len = buf.get_u8() as usize;
    need(buf, len, "short string")?;
    ShortStr::new(buf.split_to(len)).map_err(|_| Malformed("short string"))
}

fn get_pairs(buf: &mut Bytes, n: usize) -> Result<Vec<(QueueId, u64)>, Malformed> {
    need(buf, n.saturating_mul(16), "queue list")?;
    Ok((0..n)
        .map(|_| (QueueId(buf.get_u64_le()), buf.get_u64_le()))
        .collect())
}

/// Decodes one payload.
pub fn decode(mut buf: Bytes) -> Result<Logged, Malformed> {
    need(&buf, 1, "record type")?;
    match buf.get_u8() {
        MESSAGE => {
            need(&buf, 2, "queue count")?;
            let n = buf.get_u16_le() as usize;
            let queues: QueueSeqs = get_pairs(&mut buf, n)?.into_iter().collect();
            let exchange = get_short(&mut buf)?;
            let routing_key = get_short(&mut buf)?;
            need(&buf, 4, "property length")?;
            let plen = buf.get_u32_le() as usize;
            need(&buf, plen, "properties")?;
            let properties = buf.split_to(plen);
            Ok(Logged::Message {
                queues,
                exchange,
                routing_key,
                properties,
                body: buf,
            })
        }
        tag @ (GONE | DELIVERED) => {
            need(&buf, 4, "pair count")?;
            let n = buf.get_u32_le() as usize;
            let pairs = get_pairs(&mut buf, n)?;
            Ok(if tag == GONE {
                Logged::Gone(pairs)
            } else {
                Logged::Delivered(pairs)
            })
        }
        HOLE => Ok(Logged::Hole),
        WITHDRAWN => Ok(Logged::Withdrawn),
        _ => Err(Malformed("record type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::BodyChunks;

    #[test]
    fn a_message_record_round_trips_with_its_body_last() {
        let mut chunks = BodyChunks::new();
        chunks.push(Bytes::from_static(b"hello "));
        chunks.push(Bytes::from_static(b"world"));
        let msg = Message::new(
            "amq.topic".into(),
            "a.b".into(),
            Bytes::from_static(&[0x10, 0x00, 2]),
            chunks,
            11,
        );
        let queues = [(QueueId(7), 3), (QueueId(9), 1)];
        let mut out = BytesMut::new();
        put_message(&mut out, &queues, &msg);
        assert_eq!(out.len(), message_len(2, &msg));
        assert!(out.ends_with(b"hello world"));
        match decode(out.freeze()).expect("decodes") {
            Logged::Message {
                queues: q,
                exchange,
                routing_key,
                properties,
                body,
            } => {
                assert_eq!(&q[..], &queues[..]);
                assert_eq!(exchange.as_bytes(), b"amq.topic");
                assert_eq!(routing_key.as_bytes(), b"a.b");
                assert_eq!(&properties[..], &[0x10, 0x00, 2]);
                assert_eq!(&body[..], b"hello world");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn pairs_round_trip_and_truncation_is_malformed() {
        let mut out = BytesMut::new();
        put_pairs(&mut out, true, &[(QueueId(1), 5), (QueueId(2), 6)]);
        let bytes = out.freeze();
        assert!(matches!(
            decode(bytes.clone()),
            Ok(Logged::Delivered(p)) if p == vec![(QueueId(1), 5), (QueueId(2), 6)]
        ));
        assert!(decode(bytes.slice(..bytes.len() - 1)).is_err());
    }
}
