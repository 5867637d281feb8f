//! Content headers and basic properties.
//!
//! Owns: [`ContentHeader`], which keeps the property flags and list exactly as
//! received (`raw_properties`) so the broker forwards them byte-for-byte, the
//! typed [`BasicProperties`] view with its byte-exact codec, and cheap
//! scanners (`raw_delivery_mode`, `raw_expiration`, `raw_headers`) that read
//! one property without decoding the rest.
//! Does not: copy or re-encode properties or bodies on the delivery path.
//!
//! Wire layout of the property part: one or more 16-bit flag words (bit 15 of
//! the first word is the first property, bit 0 set means another flag word
//! follows), then the present properties in order. Basic (class 60) defines
//! 14 properties, all in the first word; bit 1 is reserved.

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{put_shortstr, DecodeError, Reader, ShortStr};
use super::method::CLASS_BASIC;
use super::table::{FieldTable, FieldValue};

/// A decoded content-header frame payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentHeader {
    /// The content class (60, basic, is the only one in 0-9-1).
    pub class_id: u16,
    /// Total size of the body that follows in body frames.
    pub body_size: u64,
    /// Property flags and property list exactly as received (zero-copy).
    pub raw_properties: Bytes,
}

impl ContentHeader {
    /// Decodes a content-header payload: class-id, weight (ignored),
    /// body-size, then the property part, which is validated by walking it
    /// once but kept raw.
    pub fn decode(payload: Bytes) -> Result<ContentHeader, DecodeError> {
        let mut r = Reader::new(payload);
        let class_id = r.u16("content header class-id")?;
        let _weight = r.u16("content header weight")?;
        let body_size = r.u64("content header body-size")?;
        let raw_properties = r.rest();
        if class_id != CLASS_BASIC {
            return Err(DecodeError::UnknownClass(class_id));
        }
        let end = walk(&raw_properties, None)?.end;
        if end != raw_properties.len() {
            return Err(DecodeError::TrailingBytes {
                what: "basic properties",
                extra: raw_properties.len() - end,
            });
        }
        // The walk only checked the headers table's length; check its contents
        // too, so nothing malformed is stored or forwarded.
        if let Some(at) = walk(&raw_properties, Some(IDX_HEADERS))?.target {
            FieldTable::validate(&mut Reader::new(raw_properties.slice(at..)))?;
        }
        Ok(ContentHeader {
            class_id,
            body_size,
            raw_properties,
        })
    }

    /// The typed properties (decodes `raw_properties`).
    pub fn properties(&self) -> Result<BasicProperties, DecodeError> {
        BasicProperties::decode(&self.raw_properties)
    }
}

/// How a property is laid out on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Short,
    Table,
    Octet,
    Timestamp,
}

/// The 14 basic properties in flag order (bit 15 downwards).
const BASIC: [(Kind, &str); 14] = [
    (Kind::Short, "content-type"),
    (Kind::Short, "content-encoding"),
    (Kind::Table, "headers"),
    (Kind::Octet, "delivery-mode"),
    (Kind::Octet, "priority"),
    (Kind::Short, "correlation-id"),
    (Kind::Short, "reply-to"),
    (Kind::Short, "expiration"),
    (Kind::Short, "message-id"),
    (Kind::Timestamp, "timestamp"),
    (Kind::Short, "type"),
    (Kind::Short, "user-id"),
    (Kind::Short, "app-id"),
    (Kind::Short, "cluster-id"),
];

const IDX_HEADERS: usize = 2;
const IDX_DELIVERY_MODE: usize = 3;
const IDX_PRIORITY: usize = 4;
const IDX_REPLY_TO: usize = 6;
const IDX_EXPIRATION: usize = 7;
const IDX_USER_ID: usize = 11;

/// Result of walking the property part.
struct Walk {
    /// Offset just past the last byte examined.
    end: usize,
    /// With a target: `Some(offset)` of the target property's value if present.
    target: Option<usize>,
}

/// Walks the flag words and property list of a basic content header over a
/// plain slice. With `target = Some(i)`, stops at property `i`.
fn walk(raw: &[u8], target: Option<usize>) -> Result<Walk, DecodeError> {
    const WHAT: &str = "basic properties";
    let truncated = || DecodeError::Truncated { what: WHAT };
    let read_u16 = |pos: &mut usize| -> Result<u16, DecodeError> {
        let Some(&[a, b]) = raw.get(*pos..*pos + 2) else {
            return Err(truncated());
        };
        *pos += 2;
        Ok(u16::from_be_bytes([a, b]))
    };
    let mut pos = 0usize;
    let flags = read_u16(&mut pos)?;
    if flags & 0b10 != 0 {
        return Err(DecodeError::BadPropertyFlags {
            class_id: CLASS_BASIC,
            flags,
        });
    }
    // Continuation words may follow, but basic has no properties beyond the
    // first word, so they must carry no property bits.
    let mut cont = flags & 1 != 0;
    while cont {
        let more = read_u16(&mut pos)?;
        if more & !1 != 0 {
            return Err(DecodeError::BadPropertyFlags {
                class_id: CLASS_BASIC,
                flags: more,
            });
        }
        cont = more & 1 != 0;
    }
    for (i, (kind, _)) in BASIC.iter().enumerate() {
        let present = flags & (1 << (15 - i)) != 0;
        if target == Some(i) {
            return Ok(Walk {
                end: pos,
                target: present.then_some(pos),
            });
        }
        if !present {
            continue;
        }
        let len = match kind {
            Kind::Octet => 1,
            Kind::Timestamp => 8,
            Kind::Short => 1 + usize::from(*raw.get(pos).ok_or_else(truncated)?),
            Kind::Table => {
                let Some(&[a, b, c, d]) = raw.get(pos..pos + 4) else {
                    return Err(truncated());
                };
                4 + u32::from_be_bytes([a, b, c, d]) as usize
            }
        };
        pos = pos
            .checked_add(len)
            .filter(|end| *end <= raw.len())
            .ok_or_else(truncated)?;
    }
    Ok(Walk {
        end: pos,
        target: None,
    })
}

/// The delivery-mode property (1 transient, 2 persistent), read without
/// decoding the rest. `None` if absent or malformed.
pub fn raw_delivery_mode(raw: &[u8]) -> Option<u8> {
    let at = walk(raw, Some(IDX_DELIVERY_MODE)).ok()?.target?;
    raw.get(at).copied()
}

/// The priority property, read without decoding the rest. `None` if absent or
/// malformed.
pub fn raw_priority(raw: &[u8]) -> Option<u8> {
    let at = walk(raw, Some(IDX_PRIORITY)).ok()?.target?;
    raw.get(at).copied()
}

/// The expiration property's bytes, read without decoding the rest. `None`
/// if absent or malformed.
pub fn raw_expiration(raw: &[u8]) -> Option<&[u8]> {
    let at = walk(raw, Some(IDX_EXPIRATION)).ok()?.target?;
    let len = usize::from(*raw.get(at)?);
    raw.get(at + 1..at + 1 + len)
}

/// The user-id property's bytes, read without decoding the rest (one flag test when
/// it is absent, the usual case). `None` if absent or malformed.
pub fn raw_user_id(raw: &[u8]) -> Option<&[u8]> {
    let flags = u16::from_be_bytes([*raw.first()?, *raw.get(1)?]);
    if flags & (1 << (15 - IDX_USER_ID)) == 0 {
        return None;
    }
    let at = walk(raw, Some(IDX_USER_ID)).ok()?.target?;
    let len = usize::from(*raw.get(at)?);
    raw.get(at + 1..at + 1 + len)
}

/// The reply-to property's bytes, read without decoding the rest (one flag test when
/// it is absent). `None` if absent or malformed.
pub fn raw_reply_to(raw: &[u8]) -> Option<&[u8]> {
    let flags = u16::from_be_bytes([*raw.first()?, *raw.get(1)?]);
    if flags & (1 << (15 - IDX_REPLY_TO)) == 0 {
        return None;
    }
    let at = walk(raw, Some(IDX_REPLY_TO)).ok()?.target?;
    let len = usize::from(*raw.get(at)?);
    raw.get(at + 1..at + 1 + len)
}

/// `raw` with its reply-to property (present) replaced by `reply_to` (at most 255
/// bytes); every other property stays byte for byte. `None` when `raw` has no
/// reply-to, is malformed, or `reply_to` is too long.
pub fn with_reply_to(raw: &[u8], reply_to: &[u8]) -> Option<Bytes> {
    let len = u8::try_from(reply_to.len()).ok()?;
    let at = walk(raw, Some(IDX_REPLY_TO)).ok()?.target?;
    let old = usize::from(*raw.get(at)?);
    let rest = raw.get(at + 1 + old..)?;
    let mut out = BytesMut::with_capacity(raw.len() + reply_to.len());
    out.extend_from_slice(&raw[..at]);
    out.put_u8(len);
    out.extend_from_slice(reply_to);
    out.extend_from_slice(rest);
    Some(out.freeze())
}

/// `raw` (a property part without headers) with the encoded field table `table`
/// (length prefix included) as its headers: the flags gain the headers bit and the
/// table goes where headers belong; every other property stays byte for byte. `None`
/// when `raw` has headers already or is malformed.
pub fn with_headers(raw: &[u8], table: &[u8]) -> Option<Bytes> {
    let w = walk(raw, Some(IDX_HEADERS)).ok()?;
    if w.target.is_some() {
        return None;
    }
    let (&[a, b], rest) = raw.split_first_chunk::<2>()?;
    let flags = u16::from_be_bytes([a, b]) | (1 << (15 - IDX_HEADERS));
    let mut out = BytesMut::with_capacity(raw.len() + table.len());
    out.put_u16(flags);
    out.extend_from_slice(&rest[..w.end - 2]);
    out.extend_from_slice(table);
    out.extend_from_slice(&rest[w.end - 2..]);
    Some(out.freeze())
}

/// `raw` with header `key` set to `value`: a new headers table when there is none, the
/// entry spliced onto the end of the table when the key is not in it (the table's
/// other bytes untouched, nothing decoded), the table decoded and encoded again only
/// when the key is there already. Every other property stays byte for byte. `None`
/// when `raw` is malformed.
pub fn with_header(raw: &Bytes, key: &str, value: &FieldValue) -> Option<Bytes> {
    let mut entry = BytesMut::new();
    put_shortstr(&mut entry, &ShortStr::from(key));
    value.encode(&mut entry);
    let Some(at) = walk(raw, Some(IDX_HEADERS)).ok()?.target else {
        let mut table = BytesMut::with_capacity(4 + entry.len());
        table.put_u32(entry.len() as u32);
        table.extend_from_slice(&entry);
        return with_headers(raw, &table);
    };
    let len = u32::from_be_bytes(raw.get(at..at + 4)?.try_into().ok()?) as usize;
    let end = at.checked_add(4 + len).filter(|e| *e <= raw.len())?;
    let mut headers = raw_headers(raw)?;
    if headers.get(key).is_some() {
        headers.insert(key, value.clone());
        let mut out = BytesMut::with_capacity(raw.len() + entry.len());
        out.extend_from_slice(&raw[..at]);
        headers.encode(&mut out);
        out.extend_from_slice(&raw[end..]);
        return Some(out.freeze());
    }
    let mut out = BytesMut::with_capacity(raw.len() + entry.len());
    out.extend_from_slice(&raw[..at]);
    out.put_u32((len + entry.len()) as u32);
    out.extend_from_slice(&raw[at + 4..end]);
    out.extend_from_slice(&entry);
    out.extend_from_slice(&raw[end..]);
    Some(out.freeze())
}

/// The headers table, decoding only that property. `None` if absent or
/// malformed. Strings in the table are zero-copy slices of `raw`.
pub fn raw_headers(raw: &Bytes) -> Option<FieldTable> {
    let at = walk(raw, Some(IDX_HEADERS)).ok()?.target?;
    let mut r = Reader::new(raw.slice(at..));
    FieldTable::decode(&mut r).ok()
}

/// The typed view of the 14 basic properties.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BasicProperties {
    /// `content-type`, a MIME type.
    pub content_type: Option<ShortStr>,
    /// `content-encoding`, a MIME encoding.
    pub content_encoding: Option<ShortStr>,
    /// `headers`, application headers.
    pub headers: Option<FieldTable>,
    /// `delivery-mode`: 1 transient, 2 persistent.
    pub delivery_mode: Option<u8>,
    /// `priority`, 0 to 9.
    pub priority: Option<u8>,
    /// `correlation-id`.
    pub correlation_id: Option<ShortStr>,
    /// `reply-to`.
    pub reply_to: Option<ShortStr>,
    /// `expiration`, per-message TTL in milliseconds as text.
    pub expiration: Option<ShortStr>,
    /// `message-id`.
    pub message_id: Option<ShortStr>,
    /// `timestamp`, seconds since the epoch.
    pub timestamp: Option<u64>,
    /// `type` (renamed: `type` is a Rust keyword).
    pub kind: Option<ShortStr>,
    /// `user-id`.
    pub user_id: Option<ShortStr>,
    /// `app-id`.
    pub app_id: Option<ShortStr>,
    /// `cluster-id` (deprecated in 0-9-1).
    pub cluster_id: Option<ShortStr>,
}

impl BasicProperties {
    /// Decodes flags and property list (the `raw_properties` of a
    /// [`ContentHeader`]). Strings are zero-copy slices of `raw`.
    pub fn decode(raw: &Bytes) -> Result<Self, DecodeError> {
        let walked = walk(raw, None)?;
        if walked.end != raw.len() {
            return Err(DecodeError::TrailingBytes {
                what: "basic properties",
                extra: raw.len() - walked.end,
            });
        }
        let mut r = Reader::new(raw.clone());
        let flags = r.u16("basic property flags")?;
        let mut cont = flags & 1 != 0;
        while cont {
            cont = r.u16("basic property flags")? & 1 != 0;
        }
        let has = |i: usize| flags & (1 << (15 - i)) != 0;
        let mut p = BasicProperties::default();
        macro_rules! opt {
            ($i:expr, $read:expr) => {
                if has($i) {
                    Some($read)
                } else {
                    None
                }
            };
        }
        p.content_type = opt!(0, r.shortstr("content-type")?);
        p.content_encoding = opt!(1, r.shortstr("content-encoding")?);
        p.headers = opt!(2, FieldTable::decode(&mut r)?);
        p.delivery_mode = opt!(3, r.u8("delivery-mode")?);
        p.priority = opt!(4, r.u8("priority")?);
        p.correlation_id = opt!(5, r.shortstr("correlation-id")?);
        p.reply_to = opt!(6, r.shortstr("reply-to")?);
        p.expiration = opt!(7, r.shortstr("expiration")?);
        p.message_id = opt!(8, r.shortstr("message-id")?);
        p.timestamp = opt!(9, r.u64("timestamp")?);
        p.kind = opt!(10, r.shortstr("type")?);
        p.user_id = opt!(11, r.shortstr("user-id")?);
        p.app_id = opt!(12, r.shortstr("app-id")?);
        p.cluster_id = opt!(13, r.shortstr("cluster-id")?);
        r.finish("basic properties")?;
        Ok(p)
    }

    fn flags(&self) -> u16 {
        let present = [
            self.content_type.is_some(),
            self.content_encoding.is_some(),
            self.headers.is_some(),
            self.delivery_mode.is_some(),
            self.priority.is_some(),
            self.correlation_id.is_some(),
            self.reply_to.is_some(),
            self.expiration.is_some(),
            self.message_id.is_some(),
            self.timestamp.is_some(),
            self.kind.is_some(),
            self.user_id.is_some(),
            self.app_id.is_some(),
            self.cluster_id.is_some(),
        ];
        present
            .iter()
            .enumerate()
            .fold(0u16, |acc, (i, &p)| acc | (u16::from(p) << (15 - i)))
    }

    /// Writes the flag word and the present properties.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u16(self.flags());
        let short = |out: &mut BytesMut, s: &Option<ShortStr>| {
            if let Some(s) = s {
                put_shortstr(out, s);
            }
        };
        short(out, &self.content_type);
        short(out, &self.content_encoding);
        if let Some(h) = &self.headers {
            h.encode(out);
        }
        if let Some(v) = self.delivery_mode {
            out.put_u8(v);
        }
        if let Some(v) = self.priority {
            out.put_u8(v);
        }
        short(out, &self.correlation_id);
        short(out, &self.reply_to);
        short(out, &self.expiration);
        short(out, &self.message_id);
        if let Some(v) = self.timestamp {
            out.put_u64(v);
        }
        short(out, &self.kind);
        short(out, &self.user_id);
        short(out, &self.app_id);
        short(out, &self.cluster_id);
    }

    /// The encoded flags and property list as one buffer.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::table::FieldValue;

    fn all_set() -> BasicProperties {
        let mut headers = FieldTable::new();
        headers.insert("h", FieldValue::Bool(true));
        BasicProperties {
            content_type: Some(ShortStr::from("text/plain")),
            content_encoding: Some(ShortStr::from("gzip")),
            headers: Some(headers),
            delivery_mode: Some(2),
            priority: Some(5),
            correlation_id: Some(ShortStr::from("corr")),
            reply_to: Some(ShortStr::from("rq")),
            expiration: Some(ShortStr::from("60000")),
            message_id: Some(ShortStr::from("m1")),
            timestamp: Some(1_700_000_000),
            kind: Some(ShortStr::from("t")),
            user_id: Some(ShortStr::from("guest")),
            app_id: Some(ShortStr::from("app")),
            cluster_id: Some(ShortStr::from("c")),
        }
    }

    /// The all-set properties written out by hand.
    const ALL_SET: &[u8] = b"\xff\xfc\
\x0atext/plain\x04gzip\x00\x00\x00\x04\x01ht\x01\x02\x05\x04corr\x02rq\x0560000\x02m1\
\x00\x00\x00\x00\x65\x53\xf1\x00\x01t\x05guest\x03app\x01c";

    #[test]
    fn all_fourteen_set() {
        let p = all_set();
        let bytes = p.to_bytes();
        assert_eq!(&bytes[..], ALL_SET);
        assert_eq!(BasicProperties::decode(&bytes), Ok(p));
        assert_eq!(raw_delivery_mode(&bytes), Some(2));
        assert_eq!(raw_priority(&bytes), Some(5));
        assert_eq!(raw_expiration(&bytes), Some(&b"60000"[..]));
        assert_eq!(raw_user_id(&bytes), Some(&b"guest"[..]));
        assert_eq!(
            raw_headers(&bytes).and_then(|h| h.get("h").cloned()),
            Some(FieldValue::Bool(true))
        );
    }

    #[test]
    fn none_set() {
        let p = BasicProperties::default();
        let bytes = p.to_bytes();
        assert_eq!(&bytes[..], &[0, 0]);
        assert_eq!(BasicProperties::decode(&bytes), Ok(p));
        assert_eq!(raw_delivery_mode(&bytes), None);
        assert_eq!(raw_priority(&bytes), None);
        assert_eq!(raw_expiration(&bytes), None);
        assert_eq!(raw_user_id(&bytes), None);
        assert_eq!(raw_headers(&bytes), None);
    }

    #[test]
    fn scanners_skip_earlier_properties() {
        // content-type, delivery-mode and expiration set.
        let p = BasicProperties {
            content_type: Some(ShortStr::from("a/b")),
            delivery_mode: Some(1),
            expiration: Some(ShortStr::from("5")),
            ..Default::default()
        };
        let bytes = p.to_bytes();
        assert_eq!(&bytes[..2], &[0b1001_0001, 0]);
        assert_eq!(raw_delivery_mode(&bytes), Some(1));
        assert_eq!(raw_priority(&bytes), None);
        assert_eq!(raw_expiration(&bytes), Some(&b"5"[..]));
        assert_eq!(raw_headers(&bytes), None);
        // Malformed: expiration length runs past the end.
        assert_eq!(raw_expiration(&bytes[..bytes.len() - 1]), None);
        assert_eq!(raw_delivery_mode(&[0x10]), None);
    }

    #[test]
    fn content_header_keeps_raw_properties() {
        let mut payload = BytesMut::new();
        payload.put_slice(&[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        payload.put_slice(ALL_SET);
        let payload = payload.freeze();
        let h = ContentHeader::decode(payload.clone()).unwrap();
        assert_eq!((h.class_id, h.body_size), (60, 256));
        assert_eq!(&h.raw_properties[..], ALL_SET);
        assert_eq!(
            h.raw_properties.as_ptr() as usize,
            payload.as_ptr() as usize + 12
        );
        assert_eq!(h.properties(), Ok(all_set()));
    }

    #[test]
    fn malformed_content_headers_are_rejected() {
        let hdr = |props: &[u8]| {
            let mut v = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            v.extend_from_slice(props);
            ContentHeader::decode(Bytes::from(v))
        };
        assert!(hdr(&[0, 0]).is_ok());
        assert!(matches!(hdr(&[0]), Err(DecodeError::Truncated { .. })));
        assert!(matches!(
            hdr(&[0x80, 0, 5, b'a']),
            Err(DecodeError::Truncated { .. })
        ));
        assert!(matches!(
            hdr(&[0, 0, 9]),
            Err(DecodeError::TrailingBytes { extra: 1, .. })
        ));
        assert_eq!(
            hdr(&[0, 2]),
            Err(DecodeError::BadPropertyFlags {
                class_id: 60,
                flags: 2
            })
        );
        // A continuation word is accepted only if it names no properties.
        assert!(hdr(&[0, 1, 0, 0]).is_ok());
        assert_eq!(
            hdr(&[0, 1, 0x80, 0]),
            Err(DecodeError::BadPropertyFlags {
                class_id: 60,
                flags: 0x8000
            })
        );
        assert!(matches!(
            hdr(&[0x20, 0, 0, 0, 0, 3, 1, b'k']),
            Err(DecodeError::Truncated { .. })
        ));
        // Headers table whose length fits but whose contents are malformed.
        assert_eq!(
            hdr(&[0x20, 0, 0, 0, 0, 3, 1, b'k', b'Z']),
            Err(DecodeError::BadFieldType(b'Z'))
        );
        let mut v = vec![0, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0];
        assert_eq!(
            ContentHeader::decode(Bytes::from(v.clone())),
            Err(DecodeError::UnknownClass(50))
        );
        v.truncate(5);
        assert!(matches!(
            ContentHeader::decode(Bytes::from(v)),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn continuation_words_decode_to_typed_view() {
        let raw = Bytes::from_static(&[0x00, 0x01, 0x00, 0x00]);
        assert_eq!(
            BasicProperties::decode(&raw),
            Ok(BasicProperties::default())
        );
    }

    #[test]
    fn with_headers_inserts_where_headers_belong() {
        let mut table = FieldTable::new();
        table.insert("k", crate::protocol::FieldValue::LongStr("v".into()));
        let mut encoded = BytesMut::new();
        table.encode(&mut encoded);
        let before = BasicProperties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            message_id: Some("m-1".into()),
            ..BasicProperties::default()
        };
        let raw = before.to_bytes();
        let after = with_headers(&raw, &encoded).expect("no headers yet");
        let decoded = BasicProperties::decode(&after).expect("valid");
        assert_eq!(
            decoded,
            BasicProperties {
                headers: Some(table),
                ..before
            }
        );
        assert_eq!(
            with_headers(&after, &encoded),
            None,
            "headers already there"
        );
        assert_eq!(with_headers(&[0x80], &encoded), None, "truncated");
    }

    #[test]
    fn reply_to_is_read_and_replaced_in_place() {
        let all = all_set();
        let raw = all.to_bytes();
        assert_eq!(raw_reply_to(&raw), Some(&b"rq"[..]));
        let after = with_reply_to(&raw, b"amq.rabbitmq.reply-to.abc").expect("has reply-to");
        assert_eq!(
            BasicProperties::decode(&after).expect("valid"),
            BasicProperties {
                reply_to: Some("amq.rabbitmq.reply-to.abc".into()),
                ..all
            }
        );
        let none = BasicProperties::default().to_bytes();
        assert_eq!(raw_reply_to(&none), None);
        assert_eq!(with_reply_to(&none, b"x"), None);
        assert_eq!(with_reply_to(&raw, &[b'x'; 256]), None, "too long");
    }

    #[test]
    fn validate_fails_as_decode_does() {
        use crate::protocol::codec::Reader;
        let cases: [&[u8]; 6] = [
            &[0, 0, 0, 3, 1, b'k', b'Z'],
            &[0, 0, 0, 9, 1, b'k', b'S', 0, 0, 0, 9, b'a', b'b'],
            &[0, 0, 0, 2, 1],
            &[0, 0, 0, 7, 1, b'k', b'A', 0, 0, 0, 9],
            &[0, 0, 0, 6, 1, b'k', b't', 1, 1, b'j'],
            &[0, 0, 0, 5, 1, b'k', b'F', 0, 0],
        ];
        for bytes in cases {
            let b = Bytes::copy_from_slice(bytes);
            let decoded = FieldTable::decode(&mut Reader::new(b.clone())).map(|_| ());
            let validated = FieldTable::validate(&mut Reader::new(b));
            assert_eq!(validated, decoded, "{bytes:?}");
        }
        let mut ok = BytesMut::new();
        let mut t = FieldTable::new();
        t.insert(
            "a",
            crate::protocol::FieldValue::Array(vec![crate::protocol::FieldValue::I64(1)]),
        );
        t.encode(&mut ok);
        assert_eq!(FieldTable::validate(&mut Reader::new(ok.freeze())), Ok(()));
    }

    #[test]
    fn with_header_adds_splices_or_replaces_one_entry() {
        let offset = FieldValue::I64(42);
        let read = |raw: &Bytes| BasicProperties::decode(raw).expect("decodes");
        // No headers: a table of one entry, the other properties kept.
        let none = BasicProperties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            ..Default::default()
        }
        .to_bytes();
        let got = read(&with_header(&none, "x-stream-offset", &offset).expect("ok"));
        assert_eq!(
            got.content_type.as_ref().map(|c| c.as_bytes()),
            Some(&b"text/plain"[..])
        );
        assert_eq!(got.delivery_mode, Some(2));
        let h = got.headers.expect("headers");
        assert_eq!(h.len(), 1);
        assert_eq!(h.get("x-stream-offset"), Some(&offset));
        // Headers without the key: spliced onto the end, the others kept in order.
        let mut table = FieldTable::new();
        table.insert("a", FieldValue::I32(1));
        table.insert("x-stream-filter-value", FieldValue::LongStr("red".into()));
        let some = BasicProperties {
            headers: Some(table),
            priority: Some(3),
            ..Default::default()
        }
        .to_bytes();
        let got = read(&with_header(&some, "x-stream-offset", &offset).expect("ok"));
        assert_eq!(got.priority, Some(3));
        let h = got.headers.expect("headers");
        let keys: Vec<String> = h.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["a", "x-stream-filter-value", "x-stream-offset"]);
        // The key there already (a publisher set it): replaced, not doubled.
        let again = with_header(&some, "x-stream-offset", &FieldValue::I64(1)).expect("ok");
        let got = read(&with_header(&again, "x-stream-offset", &offset).expect("ok"));
        let h = got.headers.expect("headers");
        assert_eq!(h.len(), 3);
        assert_eq!(h.get("x-stream-offset"), Some(&offset));
        assert_eq!(
            with_header(&Bytes::from_static(&[0x20]), "k", &offset),
            None
        );
    }
}
