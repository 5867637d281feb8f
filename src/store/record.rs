//! Owns: the on-disk record format shared by message segments and the definitions log —
//! framing (`[u32 length][u32 crc32c][payload]`, little-endian), checksums, and reading
//! a file's records back with the point where a torn or corrupt tail begins.
//!
//! Does not: know what a payload means (segments and definitions encode their own).
//!
//! # Invariants
//! - `length` counts the payload only; the checksum covers the payload only.
//! - A record is never longer than [`MAX_RECORD`]; a length above it is corruption.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes of the header in front of each payload.
pub const HEADER: usize = 8;

/// The largest payload a record may have: a message of the largest allowed size plus
/// its routing facts and properties.
pub const MAX_RECORD: usize = 256 << 20;

/// Appends one record (header and payload) to `out`. `payload` is written by `fill`
/// after the header, so no payload is copied twice.
pub fn append(out: &mut BytesMut, fill: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    out.put_u64_le(0);
    fill(out);
    let payload_len = out.len() - start - HEADER;
    let crc = crc32c::crc32c(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Why a file's records stop before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Fewer bytes left than a header, or than the header announces.
    Short { wanted: usize, left: usize },
    /// The length is zero or above [`MAX_RECORD`].
    BadLength(u32),
    /// The payload's checksum does not match.
    Checksum { stored: u32, computed: u32 },
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Short { wanted, left } => {
                write!(f, "torn record: {wanted} bytes announced, {left} present")
            }
            Damage::BadLength(n) => write!(f, "impossible record length {n}"),
            Damage::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
        }
    }
}

/// The records of one file's contents, in order.
pub struct Records {
    data: Bytes,
    at: usize,
    damage: Option<(usize, Damage)>,
}

impl Records {
    pub fn new(data: Bytes) -> Records {
        Records {
            data,
            at: 0,
            damage: None,
        }
    }

    /// Where reading stopped on damage, and why. `None` while records are good or the
    /// file ended cleanly.
    pub fn damage(&self) -> Option<&(usize, Damage)> {
        self.damage.as_ref()
    }

    /// The offset just past the last good record.
    pub fn good_len(&self) -> usize {
        self.at
    }
}

impl Iterator for Records {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.damage.is_some() || self.at == self.data.len() {
            return None;
        }
        let left = self.data.len() - self.at;
        let fail = |this: &mut Records, d: Damage| {
            this.damage = Some((this.at, d));
            None
        };
        if left < HEADER {
            return fail(
                self,
                Damage::Short {
                    wanted: HEADER,
                    left,
                },
            );
        }
        let head = &self.data[self.at..self.at + HEADER];
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let stored = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if len == 0 || len as usize > MAX_RECORD {
            return fail(self, Damage::BadLength(len));
        }
        let wanted = HEADER + len as usize;
        if left < wanted {
            return fail(self, Damage::Short { wanted, left });
        }
        let payload = self
            .data
            .slice(self.at + HEADER..self.at + HEADER + len as usize);
        let computed = crc32c::crc32c(&payload);
        if computed != stored {
            return fail(self, Damage::Checksum { stored, computed });
        }
        self.at += wanted;
        Some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(payloads: &[&[u8]]) -> BytesMut {
        let mut out = BytesMut::new();
        for p in payloads {
            append(&mut out, |o| o.put_slice(p));
        }
        out
    }

    #[test]
    fn records_read_back_in_order() {
        let data = file(&[b"one", b"two", b"three"]).freeze();
        let mut r = Records::new(data.clone());
        let got: Vec<Bytes> = r.by_ref().collect();
        assert_eq!(got, vec![&b"one"[..], &b"two"[..], &b"three"[..]]);
        assert!(r.damage().is_none());
        assert_eq!(r.good_len(), data.len());
    }

    #[test]
    fn a_torn_tail_stops_at_the_last_good_record() {
        let full = file(&[b"one", b"two"]);
        let cut = full.len() - 2;
        let mut r = Records::new(full.freeze().slice(..cut));
        assert_eq!(r.by_ref().count(), 1);
        let (at, damage) = r.damage().cloned().expect("damage");
        assert_eq!(at, HEADER + 3);
        assert!(matches!(damage, Damage::Short { .. }));
    }

    #[test]
    fn a_flipped_bit_is_a_checksum_mismatch() {
        let mut data = file(&[b"one", b"two"]);
        let last = data.len() - 1;
        data[last] ^= 0x10;
        let mut r = Records::new(data.freeze());
        assert_eq!(r.by_ref().count(), 1);
        assert!(matches!(
            r.damage().map(|d| &d.1),
            Some(Damage::Checksum { .. })
        ));
    }

    #[test]
    fn zero_fill_is_a_bad_length() {
        let mut data = file(&[b"one"]);
        data.put_bytes(0, 32);
        let mut r = Records::new(data.freeze());
        assert_eq!(r.by_ref().count(), 1);
        assert_eq!(r.damage().map(|d| &d.1), Some(&Damage::BadLength(0)));
    }
}
