//! The AMQP 0-9-1 wire format.
//!
//! Owns: turning bytes into typed frames, methods, content headers and field
//! tables, and back: [`frame`] splits and writes frames, [`method`] holds the
//! generated method codecs, [`properties`] keeps content headers as raw
//! `Bytes` with lazy typed views, [`table`] the field tables, [`reply`] the
//! reply codes, and [`codec`] the primitive types and [`DecodeError`].
//! Does not: do I/O, read clocks, or know about shards, queues or sessions.
//! Decoding never panics on peer input and never copies strings or bodies:
//! they are `Bytes` slices of the frame that carried them.

pub mod codec;
pub mod frame;
pub mod method;
pub mod properties;
pub mod reply;
pub mod table;

pub use codec::{DecodeError, LongStr, ShortStr};
pub use method::Method;
pub use properties::{BasicProperties, ContentHeader};
pub use reply::ReplyCode;
pub use table::{FieldTable, FieldValue};

/// Runs arbitrary peer input through every decoder a peer's bytes reach: the frame
/// splitter, then each frame's payload through the method, content-header, property and
/// field-table decoders. Used by the fuzz target and the corpus replay test; it must never
/// panic, whatever the input.
pub fn check_input(data: &[u8]) {
    let mut buf = bytes::BytesMut::from(data);
    while let Ok(Some(frame)) = frame::split_frame(&mut buf, 131_072) {
        let payload = frame.payload;
        let _ = Method::decode(payload.clone());
        if let Ok(header) = ContentHeader::decode(payload.clone()) {
            let _ = BasicProperties::decode(&header.raw_properties);
            let _ = properties::raw_delivery_mode(&header.raw_properties);
            let _ = properties::raw_expiration(&header.raw_properties);
            let _ = properties::raw_headers(&header.raw_properties);
        }
        let _ = FieldTable::decode(&mut codec::Reader::new(payload));
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::codec::Reader;
    use super::frame::split_frame;
    use super::*;

    /// Deterministic pseudo-random bytes (xorshift64), biased towards small
    /// lengths so decoders get past their first fields.
    fn garbage(seed: &mut u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                let b = (*seed >> 24) as u8;
                if b & 0x80 != 0 {
                    b & 0x07
                } else {
                    b
                }
            })
            .collect()
    }

    #[test]
    fn decoders_never_panic_on_garbage() {
        let mut seed = 0x9E37_79B9_7F4A_7C15;
        let samples = method::sample_methods();
        for i in 0..20_000 {
            let len = i % 64;
            let mut bytes = garbage(&mut seed, len);
            // Steer half of the inputs to known class/method ids.
            if i % 2 == 0 && len >= 4 {
                let m = &samples[i % samples.len()];
                bytes[..2].copy_from_slice(&m.class_id().to_be_bytes());
                bytes[2..4].copy_from_slice(&m.method_id().to_be_bytes());
            }
            let b = Bytes::from(bytes.clone());
            let _ = Method::decode(b.clone());
            let _ = ContentHeader::decode(b.clone());
            let _ = BasicProperties::decode(&b);
            let _ = properties::raw_delivery_mode(&b);
            let _ = properties::raw_expiration(&b);
            let _ = properties::raw_headers(&b);
            let _ = FieldTable::decode(&mut Reader::new(b.clone()));
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = split_frame(&mut buf, 4096) {}
        }
    }
}
