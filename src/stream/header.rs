//! Owns: what a stream reads and writes in a message's headers — the filter value a
//! publisher set (`x-stream-filter-value`, read once at append) and the
//! `x-stream-offset` header (a long) every delivery carries, written once into the
//! message the stream stores and delivers.
//!
//! Does not: decide offsets (the stream assigns them when it seals a chunk).

use bytes::Bytes;

use crate::model::message::{LocalMessage, Message, ReceivedBody};
use crate::policy::stream_args::arg;
use crate::protocol::properties::{raw_headers, with_header};
use crate::protocol::FieldValue;

/// The message's `x-stream-filter-value` (a string), copied out of its properties.
pub fn filter_value(msg: &Message) -> Option<Bytes> {
    let headers = raw_headers(msg.raw_properties())?;
    match headers.get(arg::FILTER_VALUE)? {
        FieldValue::LongStr(s) => Some(Bytes::copy_from_slice(s.as_bytes())),
        FieldValue::Bytes(b) => Some(Bytes::copy_from_slice(b)),
        _ => None,
    }
}

/// The message as the stream keeps it at `offset`: the same exchange, routing key and
/// body (shared, not copied, beyond what a small message's prebuilt delivery tail
/// copies), its properties with `x-stream-offset = offset`. A message whose properties
/// cannot be read keeps them as they are.
pub fn at_offset(msg: &LocalMessage, offset: u64) -> Message {
    let value = FieldValue::I64(i64::try_from(offset).unwrap_or(i64::MAX));
    let Some(props) = with_header(msg.raw_properties(), arg::OFFSET, &value) else {
        return Message::clone(msg);
    };
    let body = ReceivedBody::owned(msg.body().iter().cloned().collect());
    Message::with_ttl(
        msg.exchange().clone(),
        msg.routing_key().clone(),
        props,
        body,
        msg.body_size(),
        msg.ttl_ms(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::BodyChunks;
    use crate::protocol::{BasicProperties, FieldTable};

    fn message(headers: Option<FieldTable>, body: &[u8]) -> LocalMessage {
        let props = BasicProperties {
            headers,
            delivery_mode: Some(2),
            ..Default::default()
        };
        let mut chunks = BodyChunks::new();
        chunks.push(Bytes::copy_from_slice(body));
        std::rc::Rc::new(Message::new(
            "ex".into(),
            "rk".into(),
            props.to_bytes(),
            chunks,
            body.len() as u64,
        ))
    }

    #[test]
    fn the_offset_header_is_added_and_the_rest_kept() {
        let mut t = FieldTable::new();
        t.insert(arg::FILTER_VALUE, FieldValue::LongStr("red".into()));
        let msg = message(Some(t), b"hello");
        assert_eq!(filter_value(&msg).as_deref(), Some(&b"red"[..]));
        let stored = at_offset(&msg, 7);
        let props = BasicProperties::decode(stored.raw_properties()).expect("decodes");
        let h = props.headers.expect("headers");
        assert_eq!(h.get(arg::OFFSET), Some(&FieldValue::I64(7)));
        assert_eq!(
            h.get(arg::FILTER_VALUE),
            Some(&FieldValue::LongStr("red".into()))
        );
        assert_eq!(props.delivery_mode, Some(2));
        assert_eq!(stored.exchange().as_bytes(), b"ex");
        assert_eq!(stored.routing_key().as_bytes(), b"rk");
        assert_eq!(&stored.body()[0][..], b"hello");
        assert!(stored.is_persistent());
    }

    #[test]
    fn a_large_body_is_shared_not_copied() {
        let body = vec![3u8; 10_000];
        let msg = message(None, &body);
        assert_eq!(filter_value(&msg), None);
        let stored = at_offset(&msg, 1);
        assert_eq!(stored.body()[0].as_ptr(), msg.body()[0].as_ptr());
    }
}
