//! Owns: the on-disk record format shared by message segments and the definitions log —
//! framing (`[u32 length][u32 file][u32 crc32c][payload]`, little-endian), checksums, and
//! reading a file's records back with the point where a torn or corrupt tail begins.
//!
//! Does not: know what a payload means (segments and definitions encode their own).
//!
//! # Invariants
//! - `length` counts the payload only; the checksum covers the file id and the payload.
//! - `file` is the number of the segment the record was written for (0 in the
//!   definitions log). Segment files are recycled (renamed and overwritten from the
//!   start), so what follows the last record written is old data: every write to a
//!   recycled file ends with an end mark (a header of length 0, this file's number and
//!   checksum 0) that the next write overwrites, and an intact record of the file's
//!   previous life carries another file number. Reading ends at either as at the end
//!   of a file — neither is damage.
//! - A record is never longer than [`MAX_RECORD`]; a length above it is corruption.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes of the header in front of each payload.
pub const HEADER: usize = 12;

/// The largest payload a record may have: a message of the largest allowed size plus
/// its routing facts and properties.
pub const MAX_RECORD: usize = 256 << 20;

fn checksum(file: u32, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&file.to_le_bytes()), payload)
}

/// Appends the end mark of file `file` (see the module doc): not a record, and not
/// counted in the file's length; the next write starts where it starts.
pub fn append_end_mark(out: &mut BytesMut, file: u32) {
    out.put_u32_le(0);
    out.put_u32_le(file);
    out.put_u32_le(0);
}

/// Appends one record (header and payload) of file `file` to `out`. `payload` is
/// written by `fill` after the header, so no payload is copied twice.
pub fn append(out: &mut BytesMut, file: u32, fill: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    out.put_bytes(0, HEADER);
    fill(out);
    let payload_len = out.len() - start - HEADER;
    let crc = checksum(file, &out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&file.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the checksum of the record starting at `at` in `buf` (file `file`) after
/// its payload was changed in place. False when no whole record starts there.
pub fn reseal(buf: &mut [u8], at: usize, file: u32) -> bool {
    let Some(len) = buf
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return false;
    };
    let Some(payload) = buf.get(at + HEADER..at + HEADER + len) else {
        return false;
    };
    let crc = checksum(file, payload);
    buf[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
    true
}

/// The records in `buf` (written for one file, possibly ending with an end mark): the
/// offset of each record and its payload's range.
pub fn spans(buf: &[u8]) -> Vec<(usize, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(b) = buf.get(at..at + HEADER) {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len == 0 || at + HEADER + len > buf.len() {
            break;
        }
        out.push((at, at + HEADER..at + HEADER + len));
        at += HEADER + len;
    }
    out
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
    file: u32,
    at: usize,
    damage: Option<(usize, Damage)>,
    /// Reading ended at an intact record of the file's previous life.
    stale: bool,
}

impl Records {
    /// The records of file `file` in `data`.
    pub fn new(data: Bytes, file: u32) -> Records {
        Records {
            data,
            file,
            at: 0,
            damage: None,
            stale: false,
        }
    }

    /// Whether reading ended before the end of the data at an end mark or a record of
    /// an earlier use of a recycled file (a clean end: nothing written for this file
    /// follows).
    pub fn ended_at_stale(&self) -> bool {
        self.stale
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
        if self.damage.is_some() || self.stale || self.at == self.data.len() {
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
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (len, file, stored) = (word(0), word(4), word(8));
        if len == 0 && file == self.file && stored == 0 {
            self.stale = true;
            return None;
        }
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
        let computed = checksum(file, &payload);
        if computed != stored {
            return fail(self, Damage::Checksum { stored, computed });
        }
        if file != self.file {
            self.stale = true;
            return None;
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
            append(&mut out, 7, |o| o.put_slice(p));
        }
        out
    }

    #[test]
    fn records_read_back_in_order() {
        let data = file(&[b"one", b"two", b"three"]).freeze();
        let mut r = Records::new(data.clone(), 7);
        let got: Vec<Bytes> = r.by_ref().collect();
        assert_eq!(got, vec![&b"one"[..], &b"two"[..], &b"three"[..]]);
        assert!(r.damage().is_none());
        assert_eq!(r.good_len(), data.len());
    }

    #[test]
    fn a_torn_tail_stops_at_the_last_good_record() {
        let full = file(&[b"one", b"two"]);
        let cut = full.len() - 2;
        let mut r = Records::new(full.freeze().slice(..cut), 7);
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
        let mut r = Records::new(data.freeze(), 7);
        assert_eq!(r.by_ref().count(), 1);
        assert!(matches!(
            r.damage().map(|d| &d.1),
            Some(Damage::Checksum { .. })
        ));
    }

    #[test]
    fn a_recycled_file_ends_cleanly_at_its_previous_life() {
        // File 3's old records, overwritten at the start by file 7's.
        let mut old = BytesMut::new();
        for p in [&b"old-one"[..], b"old-two", b"old-three"] {
            append(&mut old, 3, |o| o.put_slice(p));
        }
        let new = file(&[b"new"]);
        old[..new.len()].copy_from_slice(&new);
        // The new record is shorter than the old first one: what follows it is the rest
        // of that record (damage); a record-aligned overwrite ends at an old record.
        let mut aligned = file(&[b"new-one"]);
        let mut rest = BytesMut::new();
        append(&mut rest, 3, |o| o.put_slice(b"old-two"));
        aligned.extend_from_slice(&rest);
        let mut r = Records::new(aligned.freeze(), 7);
        assert_eq!(r.by_ref().count(), 1);
        assert!(r.ended_at_stale());
        assert!(r.damage().is_none());
        assert_eq!(r.good_len(), HEADER + 7);
        let mut r = Records::new(old.clone().freeze(), 7);
        assert_eq!(r.by_ref().count(), 1);
        assert!(
            r.damage().is_some(),
            "without an end mark the old fragment is damage"
        );
        // With the end mark every write to a recycled file carries, it ends cleanly.
        let mut marked = file(&[b"new"]);
        append_end_mark(&mut marked, 7);
        old[..marked.len()].copy_from_slice(&marked);
        let mut r = Records::new(old.freeze(), 7);
        assert_eq!(r.by_ref().count(), 1);
        assert!(r.ended_at_stale() && r.damage().is_none());
        assert_eq!(r.good_len(), HEADER + 3);
    }

    #[test]
    fn zero_fill_is_a_bad_length() {
        let mut data = file(&[b"one"]);
        data.put_bytes(0, 32);
        let mut r = Records::new(data.freeze(), 7);
        assert_eq!(r.by_ref().count(), 1);
        assert_eq!(r.damage().map(|d| &d.1), Some(&Damage::BadLength(0)));
    }
}
