//! Owns: the AMQP 0-9-1 a minimal fan-out server needs — cutting frames out of what a
//! socket gave, the few method arguments it reads (by hand: offsets, short strings,
//! the no-wait bit), and assembling a publish (`basic.publish` + content header +
//! body frames) into the `basic.deliver` every subscriber gets: encoded once, on
//! channel 1, with one consumer tag for all, its delivery tag left for the stream to
//! stamp.
//! Does not: keep connection state (`conn`) or touch sockets (`event_loop`).

use sluice::protocol::method::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD,
};

/// The consumer tag of every subscription (consumer tags are per channel, so every
/// connection may have the same one): deliveries are encoded once for all.
pub const CONSUMER_TAG: &str = "minimal";

/// The channel every delivery is encoded for (the one sluice-bench's wire client uses).
pub const DELIVERY_CHANNEL: u16 = 1;

/// Frame-max the server offers.
pub const FRAME_MAX: u32 = 131_072;

/// One frame cut from the input.
pub enum Frame<'a> {
    Method {
        channel: u16,
        id: (u16, u16),
        args: &'a [u8],
    },
    Header {
        channel: u16,
        payload: &'a [u8],
    },
    Body {
        channel: u16,
        payload: &'a [u8],
    },
    Heartbeat,
}

/// The next complete frame of `data` and the bytes it took, `None` if incomplete.
pub fn next_frame(data: &[u8]) -> Result<Option<(Frame<'_>, usize)>, String> {
    let Some(h) = data.get(..7) else {
        return Ok(None);
    };
    let channel = u16::from_be_bytes([h[1], h[2]]);
    let size = u32::from_be_bytes([h[3], h[4], h[5], h[6]]) as usize;
    if size > FRAME_MAX as usize {
        return Err(format!("frame of {size} bytes"));
    }
    let Some(f) = data.get(..7 + size + 1) else {
        return Ok(None);
    };
    if f[7 + size] != FRAME_END {
        return Err(format!("frame end 0x{:02x}", f[7 + size]));
    }
    let payload = &f[7..7 + size];
    let frame = match h[0] {
        FRAME_METHOD => {
            let id = payload.get(..4).ok_or("short method frame")?;
            Frame::Method {
                channel,
                id: (
                    u16::from_be_bytes([id[0], id[1]]),
                    u16::from_be_bytes([id[2], id[3]]),
                ),
                args: &payload[4..],
            }
        }
        FRAME_HEADER => Frame::Header { channel, payload },
        FRAME_BODY => Frame::Body { channel, payload },
        FRAME_HEARTBEAT => Frame::Heartbeat,
        t => return Err(format!("frame type {t}")),
    };
    Ok(Some((frame, f.len())))
}

/// Reads method arguments front to back.
pub struct Args<'a> {
    rest: &'a [u8],
}

impl<'a> Args<'a> {
    pub fn new(args: &'a [u8]) -> Args<'a> {
        Args { rest: args }
    }

    pub fn skip(&mut self, n: usize) -> Result<(), String> {
        self.rest = self.rest.get(n..).ok_or("arguments too short")?;
        Ok(())
    }

    pub fn shortstr(&mut self) -> Result<&'a [u8], String> {
        let n = usize::from(*self.rest.first().ok_or("arguments too short")?);
        let s = self.rest.get(1..1 + n).ok_or("short string too short")?;
        self.rest = &self.rest[1 + n..];
        Ok(s)
    }

    pub fn octet(&mut self) -> Result<u8, String> {
        let b = *self.rest.first().ok_or("arguments too short")?;
        self.rest = &self.rest[1..];
        Ok(b)
    }
}

fn frame_header(out: &mut Vec<u8>, kind: u8, channel: u16, size: usize) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(size as u32).to_be_bytes());
}

/// A publish being assembled into its delivery.
pub struct Assembly {
    /// The encoded delivery so far (tag bytes zero).
    pub delivery: Vec<u8>,
    /// The publishing channel (its header and body frames must follow on it).
    pub channel: u16,
    /// Body bytes still to come; `None` until the content header arrived.
    pub body_left: Option<u64>,
}

impl Assembly {
    /// Starts the delivery of a `basic.publish` (arguments: ticket, exchange,
    /// routing-key, mandatory/immediate bits).
    pub fn start(channel: u16, args: &[u8], mut reuse: Vec<u8>) -> Result<Assembly, String> {
        let mut a = Args::new(args);
        a.skip(2)?;
        let exchange = a.shortstr()?;
        let key = a.shortstr()?;
        reuse.clear();
        let d = &mut reuse;
        let size = 4 + 1 + CONSUMER_TAG.len() + 8 + 1 + 1 + exchange.len() + 1 + key.len();
        frame_header(d, FRAME_METHOD, DELIVERY_CHANNEL, size);
        d.extend_from_slice(&60u16.to_be_bytes());
        d.extend_from_slice(&60u16.to_be_bytes());
        d.push(CONSUMER_TAG.len() as u8);
        d.extend_from_slice(CONSUMER_TAG.as_bytes());
        d.extend_from_slice(&[0; 8]);
        d.push(0);
        d.push(exchange.len() as u8);
        d.extend_from_slice(exchange);
        d.push(key.len() as u8);
        d.extend_from_slice(key);
        d.push(FRAME_END);
        Ok(Assembly {
            delivery: reuse,
            channel,
            body_left: None,
        })
    }

    /// The content header (class, weight, body size, properties) copied as it came;
    /// whether the delivery is complete (an empty body).
    pub fn header(&mut self, payload: &[u8]) -> Result<bool, String> {
        if self.body_left.is_some() || payload.len() < 12 {
            return Err("unexpected content header".into());
        }
        let size = u64::from_be_bytes(payload[4..12].try_into().map_err(|_| "header")?);
        frame_header(
            &mut self.delivery,
            FRAME_HEADER,
            DELIVERY_CHANNEL,
            payload.len(),
        );
        self.delivery.extend_from_slice(payload);
        self.delivery.push(FRAME_END);
        self.body_left = Some(size);
        Ok(size == 0)
    }

    /// A body frame copied as it came; whether the delivery is complete.
    pub fn body(&mut self, payload: &[u8]) -> Result<bool, String> {
        let left = self.body_left.ok_or("body frame before its header")?;
        let left = left
            .checked_sub(payload.len() as u64)
            .ok_or("body longer than its header said")?;
        frame_header(
            &mut self.delivery,
            FRAME_BODY,
            DELIVERY_CHANNEL,
            payload.len(),
        );
        self.delivery.extend_from_slice(payload);
        self.delivery.push(FRAME_END);
        self.body_left = Some(left);
        Ok(left == 0)
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use sluice::protocol::frame::encode_method;
    use sluice::protocol::method::{BasicDeliver, BasicPublish};
    use sluice::protocol::Method;

    use super::*;

    #[test]
    fn a_publish_becomes_the_deliver_sluice_would_encode() {
        let mut w = BytesMut::new();
        encode_method(
            &mut w,
            3,
            &Method::BasicPublish(BasicPublish {
                ticket: 0,
                exchange: "x".into(),
                routing_key: "a.b".into(),
                mandatory: false,
                immediate: false,
            }),
        );
        let (frame, used) = next_frame(&w).unwrap().unwrap();
        assert_eq!(used, w.len());
        let Frame::Method { channel, id, args } = frame else {
            panic!("not a method")
        };
        assert_eq!((channel, id), (3, (60, 40)));
        let mut a = Assembly::start(channel, args, Vec::new()).unwrap();
        let mut want = BytesMut::new();
        encode_method(
            &mut want,
            DELIVERY_CHANNEL,
            &Method::BasicDeliver(BasicDeliver {
                consumer_tag: CONSUMER_TAG.into(),
                delivery_tag: 0,
                redelivered: false,
                exchange: "x".into(),
                routing_key: "a.b".into(),
            }),
        );
        assert_eq!(a.delivery, &want[..]);
        let mut header = vec![0, 60, 0, 0];
        header.extend_from_slice(&3u64.to_be_bytes());
        header.extend_from_slice(&[0x10, 0, 2]);
        assert!(!a.header(&header).unwrap());
        assert!(!a.body(b"ab").unwrap());
        assert!(a.body(b"c").unwrap());
        assert!(a.body(b"d").is_err());
    }

    #[test]
    fn incomplete_and_bad_frames() {
        assert!(next_frame(&[1, 0, 0]).unwrap().is_none());
        assert!(next_frame(&[8, 0, 0, 0, 0, 0, 0]).unwrap().is_none());
        assert!(next_frame(&[8, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(next_frame(&[9, 0, 0, 0, 0, 0, 0, 0xCE]).is_err());
    }
}
