//! AMQP 0-9-1 frame splitting and frame writers.
//!
//! Owns: the 7-byte frame header (type, channel, size), the `0xCE` frame-end
//! check, an O(1) completeness test over a read buffer, and writers that put
//! method, heartbeat, content-header and body frames into a `BytesMut`.
//! Does not: do I/O, read clocks, or interpret payloads (methods are decoded
//! by [`Method::decode`], content headers by `properties`). Payloads are
//! handed out as zero-copy `Bytes` split off the read buffer.
//!
//! Frame layout: `type:u8 channel:u16 size:u32 payload[size] 0xCE`.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::method::{Method, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD};

/// The protocol header a client sends before its first frame.
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";

/// Bytes of frame header (type, channel, size).
pub const FRAME_HEADER_LEN: usize = 7;

/// Bytes a frame adds around its payload: header plus frame-end octet.
pub const FRAME_OVERHEAD: usize = FRAME_HEADER_LEN + 1;

/// The four frame types of AMQP 0-9-1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Type 1: a method.
    Method,
    /// Type 2: a content header.
    Header,
    /// Type 3: a content body chunk.
    Body,
    /// Type 8: a heartbeat.
    Heartbeat,
}

impl FrameKind {
    /// The type octet for this kind.
    pub const fn type_octet(self) -> u8 {
        match self {
            FrameKind::Method => FRAME_METHOD,
            FrameKind::Header => FRAME_HEADER,
            FrameKind::Body => FRAME_BODY,
            FrameKind::Heartbeat => FRAME_HEARTBEAT,
        }
    }

    /// The kind for a type octet, if it is one of the four.
    pub const fn from_octet(octet: u8) -> Option<FrameKind> {
        match octet {
            FRAME_METHOD => Some(FrameKind::Method),
            FRAME_HEADER => Some(FrameKind::Header),
            FRAME_BODY => Some(FrameKind::Body),
            FRAME_HEARTBEAT => Some(FrameKind::Heartbeat),
            _ => None,
        }
    }
}

/// One frame split off the read buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The frame type.
    pub kind: FrameKind,
    /// The channel number (0 for connection-level frames).
    pub channel: u16,
    /// The payload, without header or frame-end octet (zero-copy slice).
    pub payload: Bytes,
    /// Bytes of the buffer the payload was cut from that it keeps alive beyond its own
    /// length, for the memory ledger to charge whoever keeps the payload (0 when the
    /// payload has an allocation of its own; set by the reader, which knows the buffer).
    pub pinned: u32,
}

/// A frame-level protocol violation. All are connection errors (501
/// `FRAME_ERROR`, or 505 `UNEXPECTED_FRAME` for unknown types at the
/// session's discretion).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The octet after the payload was not `0xCE`.
    BadFrameEnd {
        /// The octet found instead.
        found: u8,
    },
    /// The frame type octet is not 1, 2, 3 or 8.
    UnknownType(u8),
    /// The frame (header + payload + end octet) exceeds the negotiated maximum.
    TooLarge {
        /// The payload size announced in the header.
        size: u32,
        /// The negotiated `frame_max`.
        max: u32,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::BadFrameEnd { found } => {
                write!(
                    f,
                    "frame end octet is 0x{found:02x}, expected 0x{FRAME_END:02x}"
                )
            }
            FrameError::UnknownType(t) => write!(f, "unknown frame type {t}"),
            FrameError::TooLarge { size, max } => write!(
                f,
                "frame of {} bytes exceeds frame_max {max}",
                u64::from(*size) + FRAME_OVERHEAD as u64
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Splits one complete frame off the front of `buf`.
///
/// Returns `Ok(None)` if more bytes are needed. The check is O(1): it looks at
/// the 7-byte header only. As soon as the header is present, an unknown type
/// or a size over `frame_max` is reported without waiting for the payload.
/// `frame_max` counts the whole frame (header, payload and end octet); `0`
/// means no limit. On success the frame, including its end octet, is removed
/// from `buf` and the payload is a zero-copy slice of it.
pub fn split_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, FrameError> {
    let Some(&[type_octet, c0, c1, s0, s1, s2, s3]) = buf.get(..FRAME_HEADER_LEN) else {
        return Ok(None);
    };
    let channel = u16::from_be_bytes([c0, c1]);
    let size = u32::from_be_bytes([s0, s1, s2, s3]);
    let kind = FrameKind::from_octet(type_octet).ok_or(FrameError::UnknownType(type_octet))?;
    if frame_max != 0 && u64::from(size) + FRAME_OVERHEAD as u64 > u64::from(frame_max) {
        return Err(FrameError::TooLarge {
            size,
            max: frame_max,
        });
    }
    // Reserving room for the rest is left to the caller: it knows its budget,
    // and a peer-chosen size must not drive an allocation here.
    let payload_len = size as usize;
    let total = payload_len.saturating_add(FRAME_OVERHEAD);
    let Some(&end) = buf.get(total - 1) else {
        return Ok(None);
    };
    if end != FRAME_END {
        return Err(FrameError::BadFrameEnd { found: end });
    }
    let mut frame = buf.split_to(total);
    frame.advance(FRAME_HEADER_LEN);
    frame.truncate(payload_len);
    Ok(Some(Frame {
        kind,
        channel,
        payload: frame.freeze(),
        pinned: 0,
    }))
}

fn put_header(out: &mut BytesMut, kind: u8, channel: u16, size: u32) {
    out.put_u8(kind);
    out.put_u16(channel);
    out.put_u32(size);
}

/// Writes a complete method frame; the size is back-patched after encoding.
pub fn encode_method(out: &mut BytesMut, channel: u16, method: &Method) {
    put_header(out, FRAME_METHOD, channel, 0);
    let start = out.len();
    method.encode(out);
    let size = (out.len() - start) as u32;
    out[start - 4..start].copy_from_slice(&size.to_be_bytes());
    out.put_u8(FRAME_END);
}

/// Writes a heartbeat frame (channel 0, empty payload).
pub fn encode_heartbeat(out: &mut BytesMut) {
    put_header(out, FRAME_HEARTBEAT, 0, 0);
    out.put_u8(FRAME_END);
}

/// Writes the start of a content-header frame: the 7-byte frame header,
/// class-id, weight (0) and body size. The caller then appends exactly
/// `props_len` bytes of raw properties and `FRAME_END`.
pub fn encode_content_header_prefix(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    body_size: u64,
    props_len: usize,
) {
    put_header(out, FRAME_HEADER, channel, (12 + props_len) as u32);
    out.put_u16(class_id);
    out.put_u16(0);
    out.put_u64(body_size);
}

/// Writes the 7-byte header of a body frame carrying `len` payload bytes; the
/// caller supplies the payload and `FRAME_END`.
pub fn encode_body_prefix(out: &mut BytesMut, channel: u16, len: u32) {
    put_header(out, FRAME_BODY, channel, len);
}

/// Writes a content-header frame followed by body frames, each at most
/// `frame_max` bytes in total (`0` = one body frame). An empty body writes no
/// body frame. A `frame_max` too small to carry any payload (1..=8) is
/// treated as no limit. Copies the body; for clients and tests (the broker
/// forwards bodies zero-copy with [`encode_body_prefix`]).
pub fn encode_content(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    raw_props: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    encode_content_header_prefix(out, channel, class_id, body.len() as u64, raw_props.len());
    out.put_slice(raw_props);
    out.put_u8(FRAME_END);
    let chunk = match (frame_max as usize).checked_sub(FRAME_OVERHEAD) {
        Some(n) if frame_max != 0 && n > 0 => n,
        _ => body.len().max(1),
    };
    for part in body.chunks(chunk) {
        encode_body_prefix(out, channel, part.len() as u32);
        out.put_slice(part);
        out.put_u8(FRAME_END);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::method::{BasicAck, ConnectionTune};

    fn frame_bytes(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&channel.to_be_bytes());
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v.push(FRAME_END);
        v
    }

    #[test]
    fn incomplete_header_and_body_wait_for_more() {
        let full = frame_bytes(1, 3, b"hello");
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(split_frame(&mut buf, 0), Ok(None), "cut at {cut}");
            assert_eq!(buf.len(), cut, "nothing consumed");
        }
        let mut buf = BytesMut::from(&full[..]);
        let f = split_frame(&mut buf, 0).unwrap().unwrap();
        assert_eq!(
            (f.kind, f.channel, &f.payload[..]),
            (FrameKind::Method, 3, &b"hello"[..])
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn bad_frame_end() {
        let mut v = frame_bytes(3, 1, b"ab");
        *v.last_mut().unwrap() = 0x00;
        let mut buf = BytesMut::from(&v[..]);
        assert_eq!(
            split_frame(&mut buf, 0),
            Err(FrameError::BadFrameEnd { found: 0 })
        );
    }

    #[test]
    fn unknown_type_reported_with_header_only() {
        let mut buf = BytesMut::from(&[4u8, 0, 0, 0, 0, 0, 9][..]);
        assert_eq!(split_frame(&mut buf, 0), Err(FrameError::UnknownType(4)));
    }

    #[test]
    fn too_large_reported_before_body_arrives() {
        // Header only, announcing 4089 bytes: 4089 + 8 = 4097 > 4096.
        let mut buf = BytesMut::from(&[3u8, 0, 1, 0, 0, 0x0f, 0xf9][..]);
        assert_eq!(
            split_frame(&mut buf, 4096),
            Err(FrameError::TooLarge {
                size: 4089,
                max: 4096
            })
        );
        // Exactly frame_max is fine (and still incomplete).
        let mut buf = BytesMut::from(&[3u8, 0, 1, 0, 0, 0x0f, 0xf8][..]);
        assert_eq!(split_frame(&mut buf, 4096), Ok(None));
        // u32::MAX size with no limit does not overflow.
        let mut buf = BytesMut::from(&[3u8, 0, 1, 0xff, 0xff, 0xff, 0xff][..]);
        assert_eq!(split_frame(&mut buf, 0), Ok(None));
        assert_eq!(
            split_frame(&mut buf, u32::MAX),
            Err(FrameError::TooLarge {
                size: u32::MAX,
                max: u32::MAX
            })
        );
    }

    #[test]
    fn two_frames_back_to_back_and_zero_copy() {
        let mut v = frame_bytes(1, 1, b"first");
        v.extend(frame_bytes(8, 0, b""));
        v.extend_from_slice(&[2, 0]); // start of a third frame
        let mut buf = BytesMut::from(&v[..]);
        let base = buf.as_ptr() as usize;
        let len = buf.len();
        let a = split_frame(&mut buf, 0).unwrap().unwrap();
        let addr = a.payload.as_ptr() as usize;
        assert!(
            addr >= base && addr + a.payload.len() <= base + len,
            "payload is inside the read buffer"
        );
        assert_eq!(addr, base + FRAME_HEADER_LEN);
        assert_eq!(&a.payload[..], b"first");
        let b = split_frame(&mut buf, 0).unwrap().unwrap();
        assert_eq!(
            (b.kind, b.channel, b.payload.len()),
            (FrameKind::Heartbeat, 0, 0)
        );
        assert_eq!(split_frame(&mut buf, 0), Ok(None));
        assert_eq!(&buf[..], &[2, 0]);
    }

    #[test]
    fn method_and_heartbeat_encoders() {
        let m = Method::ConnectionTune(ConnectionTune {
            channel_max: 1,
            frame_max: 4096,
            heartbeat: 5,
        });
        let mut out = BytesMut::new();
        encode_method(&mut out, 0, &m);
        encode_heartbeat(&mut out);
        let f = split_frame(&mut out, 4096).unwrap().unwrap();
        assert_eq!(f.kind, FrameKind::Method);
        assert_eq!(f.payload.len(), 12);
        assert_eq!(Method::decode(f.payload), Ok(m));
        assert_eq!(&out[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
        let mut out = BytesMut::new();
        encode_method(
            &mut out,
            7,
            &BasicAck {
                delivery_tag: 1,
                multiple: false,
            }
            .into(),
        );
        assert_eq!(&out[..7], &[1, 0, 7, 0, 0, 0, 13]);
    }

    #[test]
    fn content_is_split_by_frame_max() {
        let props = [0x80u8, 0x00, 0x04, b't', b'e', b'x', b't'];
        let body = [7u8; 20];
        let mut out = BytesMut::new();
        // 16-byte frames carry 8 payload bytes: 8 + 8 + 4.
        encode_content(&mut out, 2, 60, &props, &body, 16);
        let h = split_frame(&mut out, 0).unwrap().unwrap();
        assert_eq!(h.kind, FrameKind::Header);
        assert_eq!(&h.payload[..12], &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20]);
        assert_eq!(&h.payload[12..], &props);
        let sizes: Vec<usize> = std::iter::from_fn(|| split_frame(&mut out, 16).unwrap())
            .map(|f| {
                assert_eq!((f.kind, f.channel), (FrameKind::Body, 2));
                f.payload.len()
            })
            .collect();
        assert_eq!(sizes, [8, 8, 4]);
        let mut out = BytesMut::new();
        encode_content(&mut out, 2, 60, &props, &[], 16);
        assert!(split_frame(&mut out, 0).unwrap().is_some());
        assert!(out.is_empty(), "empty body writes no body frame");
        let mut out = BytesMut::new();
        encode_content(&mut out, 2, 60, &props, &body, 0);
        split_frame(&mut out, 0).unwrap();
        assert_eq!(
            split_frame(&mut out, 0).unwrap().map(|f| f.payload.len()),
            Some(20)
        );
    }

    #[test]
    fn frame_error_display() {
        assert_eq!(
            FrameError::TooLarge {
                size: 4089,
                max: 4096
            }
            .to_string(),
            "frame of 4097 bytes exceeds frame_max 4096"
        );
        assert_eq!(
            FrameError::BadFrameEnd { found: 0 }.to_string(),
            "frame end octet is 0x00, expected 0xce"
        );
    }
}
