//! Owns: the wire subscriber's frame parser — a streaming cut through AMQP 0-9-1
//! frames that takes from each delivery only its delivery tag and the body's first
//! [`STAMP_LEN`] bytes, skips the rest of content-header and body frames without
//! holding them (so a body of any size needs no buffer), and hands every other method
//! to the caller. It never allocates: a frame it cannot finish is left in the input
//! for the caller to carry over to the next read (at most one method frame, or a
//! frame header plus a stamp).
//! Does not: read sockets, or know what a method means beyond `basic.deliver`.

use sluice::protocol::frame::FRAME_HEADER_LEN as HDR;
use sluice::protocol::method::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
};

use crate::stats::STAMP_LEN;

/// What the parser hands its caller.
pub trait Sink {
    /// A complete delivery: its tag and the start of its body (up to the stamp).
    fn delivery(&mut self, tag: u64, stamp: &[u8]);
    /// Any other method on any channel: `(class, method)` and its arguments.
    /// Returning `false` stops parsing (the rest stays unconsumed).
    fn method(&mut self, channel: u16, id: (u16, u16), args: &[u8]) -> bool;
}

/// A protocol error the parser cannot go past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    UnknownFrameType(u8),
    BadFrameEnd(u8),
    TooLarge(usize),
    Malformed(&'static str),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::UnknownFrameType(t) => write!(f, "unknown frame type {t}"),
            ParseError::BadFrameEnd(b) => write!(f, "frame end octet 0x{b:02x}"),
            ParseError::TooLarge(n) => write!(f, "method frame of {n} bytes"),
            ParseError::Malformed(what) => write!(f, "malformed {what}"),
        }
    }
}

/// Parser state carried between reads.
#[derive(Debug)]
pub struct Parser {
    /// Largest method frame accepted (the negotiated frame-max).
    frame_max: usize,
    /// Bytes of the current header or body frame still to skip (end octet included).
    skip: usize,
    /// A delivery to report once `skip` runs out (its last body frame is being skipped).
    emit_after_skip: bool,
    /// Delivery tag of the message in progress.
    tag: u64,
    /// Body bytes of the message in progress not seen yet.
    body_left: u64,
    stamp: [u8; STAMP_LEN],
    stamp_len: usize,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_be_bytes(a)
}

impl Parser {
    pub fn new(frame_max: usize) -> Parser {
        Parser {
            frame_max: frame_max.max(4096),
            skip: 0,
            emit_after_skip: false,
            tag: 0,
            body_left: 0,
            stamp: [0; STAMP_LEN],
            stamp_len: 0,
        }
    }

    /// Skips up to `skip` bytes of `data[pos..]`; reports the delivery whose last
    /// frame that finished.
    #[inline]
    fn skip_from<S: Sink>(&mut self, data: &[u8], pos: usize, sink: &mut S) -> usize {
        let n = self.skip.min(data.len() - pos);
        self.skip -= n;
        if self.skip == 0 && self.emit_after_skip {
            self.emit_after_skip = false;
            sink.delivery(self.tag, &self.stamp[..self.stamp_len]);
        }
        pos + n
    }

    /// The message in progress is complete once the current frame is skipped.
    #[inline]
    fn finish_message<S: Sink>(&mut self, data: &[u8], pos: usize, sink: &mut S) -> usize {
        self.emit_after_skip = true;
        self.skip_from(data, pos, sink)
    }

    /// Parses what it can of `data`; returns how many bytes it consumed. The rest (an
    /// incomplete frame's start) must be passed again, followed by newer bytes.
    pub fn parse<S: Sink>(&mut self, data: &[u8], sink: &mut S) -> Result<usize, ParseError> {
        let mut pos = self.skip_from(data, 0, sink);
        if self.skip > 0 {
            return Ok(pos);
        }
        loop {
            let Some(h) = data.get(pos..pos + HDR) else {
                return Ok(pos);
            };
            let (ty, channel, size) = (h[0], u16_at(h, 1), u32_at(h, 3) as usize);
            match ty {
                FRAME_METHOD => {
                    let total = HDR + size + 1;
                    if total > self.frame_max + 8 {
                        return Err(ParseError::TooLarge(total));
                    }
                    let Some(f) = data.get(pos..pos + total) else {
                        return Ok(pos);
                    };
                    if f[total - 1] != FRAME_END {
                        return Err(ParseError::BadFrameEnd(f[total - 1]));
                    }
                    let p = &f[HDR..total - 1];
                    if p.len() < 4 {
                        return Err(ParseError::Malformed("method frame"));
                    }
                    let id = (u16_at(p, 0), u16_at(p, 2));
                    if id == (60, 60) {
                        // basic.deliver: consumer-tag (shortstr), delivery-tag (u64), …
                        let ctag = usize::from(*p.get(4).ok_or(ParseError::Malformed("deliver"))?);
                        let at = 5 + ctag;
                        if p.len() < at + 8 {
                            return Err(ParseError::Malformed("basic.deliver"));
                        }
                        self.tag = u64_at(p, at);
                        self.stamp_len = 0;
                        pos += total;
                    } else if sink.method(channel, id, &p[4..]) {
                        pos += total;
                    } else {
                        return Ok(pos + total);
                    }
                }
                FRAME_HEADER => {
                    // class (2), weight (2), body size (8), then properties.
                    if size < 12 {
                        return Err(ParseError::Malformed("content header"));
                    }
                    let Some(f) = data.get(pos..pos + HDR + 12) else {
                        return Ok(pos);
                    };
                    self.body_left = u64_at(f, HDR + 4);
                    self.skip = size - 12 + 1;
                    pos += HDR + 12;
                    pos = if self.body_left == 0 {
                        self.finish_message(data, pos, sink)
                    } else {
                        self.skip_from(data, pos, sink)
                    };
                    if self.skip > 0 {
                        return Ok(pos);
                    }
                }
                FRAME_BODY => {
                    let want = size.min(STAMP_LEN - self.stamp_len);
                    let Some(f) = data.get(pos..pos + HDR + want) else {
                        return Ok(pos);
                    };
                    self.stamp[self.stamp_len..self.stamp_len + want].copy_from_slice(&f[HDR..]);
                    self.stamp_len += want;
                    self.body_left = self.body_left.saturating_sub(size as u64);
                    self.skip = size - want + 1;
                    pos += HDR + want;
                    pos = if self.body_left == 0 {
                        self.finish_message(data, pos, sink)
                    } else {
                        self.skip_from(data, pos, sink)
                    };
                    if self.skip > 0 {
                        return Ok(pos);
                    }
                }
                FRAME_HEARTBEAT => {
                    self.skip = size + 1;
                    pos = self.skip_from(data, pos + HDR, sink);
                    if self.skip > 0 {
                        return Ok(pos);
                    }
                }
                other => return Err(ParseError::UnknownFrameType(other)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use sluice::protocol::frame::{encode_content, encode_method};
    use sluice::protocol::method::{BasicDeliver, ChannelClose, CLASS_BASIC};
    use sluice::protocol::Method;

    use super::*;

    #[derive(Default)]
    struct Got {
        deliveries: Vec<(u64, Vec<u8>)>,
        methods: Vec<(u16, (u16, u16))>,
    }

    impl Sink for Got {
        fn delivery(&mut self, tag: u64, stamp: &[u8]) {
            self.deliveries.push((tag, stamp.to_vec()));
        }
        fn method(&mut self, channel: u16, id: (u16, u16), _args: &[u8]) -> bool {
            self.methods.push((channel, id));
            true
        }
    }

    fn stream(n: u64, size: usize, frame_max: u32) -> Vec<u8> {
        let mut w = BytesMut::new();
        for i in 0..n {
            let m = Method::BasicDeliver(BasicDeliver {
                consumer_tag: "amq.ctag-1".into(),
                delivery_tag: i + 1,
                redelivered: false,
                exchange: "sluice.bench.fanout".into(),
                routing_key: "sluice.bench".into(),
            });
            encode_method(&mut w, 1, &m);
            let body: Vec<u8> = (0..size).map(|b| (b as u64 + i) as u8).collect();
            encode_content(&mut w, 1, CLASS_BASIC, &[0x10, 0, 2], &body, frame_max);
            if i == n / 2 {
                w.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0xCE]);
            }
        }
        encode_method(
            &mut w,
            1,
            &Method::ChannelClose(ChannelClose {
                reply_code: 506,
                reply_text: "Consuming too slow.".into(),
                class_id: 0,
                method_id: 0,
            }),
        );
        w.to_vec()
    }

    /// Feeds `data` in chunks of `chunk`, carrying the unconsumed rest as a caller does.
    fn feed(data: &[u8], chunk: usize) -> Got {
        let mut p = Parser::new(131_072);
        let mut got = Got::default();
        let mut carry: Vec<u8> = Vec::new();
        for part in data.chunks(chunk) {
            carry.extend_from_slice(part);
            let used = p.parse(&carry, &mut got).expect("parses");
            carry.drain(..used);
        }
        assert!(carry.is_empty(), "everything consumed");
        got
    }

    #[test]
    fn any_split_gives_the_same_deliveries() {
        for (size, frame_max) in [(64, 131_072), (0, 131_072), (5, 4096), (10_000, 4096)] {
            let data = stream(20, size, frame_max);
            let whole = feed(&data, data.len());
            assert_eq!(whole.deliveries.len(), 20, "size {size}");
            assert_eq!(whole.methods, vec![(1, (20, 40))]);
            for (i, (tag, stamp)) in whole.deliveries.iter().enumerate() {
                assert_eq!(*tag, i as u64 + 1);
                let want: Vec<u8> = (0..size.min(STAMP_LEN))
                    .map(|b| (b as u64 + i as u64) as u8)
                    .collect();
                assert_eq!(stamp, &want);
            }
            for chunk in [1, 2, 3, 7, 13, 64, 1000] {
                let got = feed(&data, chunk);
                assert_eq!(
                    got.deliveries, whole.deliveries,
                    "size {size} chunk {chunk}"
                );
                assert_eq!(got.methods, whole.methods);
            }
        }
    }

    #[test]
    fn garbage_is_an_error() {
        let mut p = Parser::new(131_072);
        let mut got = Got::default();
        assert_eq!(
            p.parse(&[9, 0, 0, 0, 0, 0, 0, 0xCE], &mut got),
            Err(ParseError::UnknownFrameType(9))
        );
        let mut p = Parser::new(131_072);
        assert_eq!(
            p.parse(&[1, 0, 0, 0, 0, 0, 4, 0, 10, 0, 11, 0], &mut got),
            Err(ParseError::BadFrameEnd(0))
        );
    }
}
