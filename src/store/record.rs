//! Owns: the on-disk record format shared by message segments and the definitions log —
//! framing (`[u32 length][u32 file][u32 crc32c][payload]`, little-endian), checksums, and
//! reading a file's records back: stopping at damage (a chunk of a file), or, for a
//! whole file, skipping a damaged region and resynchronising on the next record that
//! checks, so that only a damaged tail is lost.
//!
//! Does not: know what a payload means (segments and definitions encode their own), or
//! change files (`recovery` repairs and truncates what this reports).
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
//! - Resynchronising accepts only a whole record of *this* file's number whose checksum
//!   matches, at least [`HEADER`] + 1 bytes (the smallest record) past the damaged one.
//!   Segment numbers only grow in a shard directory (a new segment, recycled spare or
//!   not, takes the newest number + 1; the newest segment is never deleted; re-homing
//!   starts a new directory with no spare), so every earlier life of a recycled file
//!   has a smaller number and a resync can never bring one of its records back.

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

/// A damaged region that reading a whole file skipped: it starts at `at` (where the
/// record that failed starts) and ends `len` bytes later, where the next record that
/// checks starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub at: usize,
    pub len: usize,
    /// Why the record at `at` failed.
    pub damage: Damage,
    /// How many records the region held, when the announced lengths still lead from its
    /// start to its end; `None` when the framing is damaged too (at least one).
    pub records: Option<usize>,
}

/// What reading one record position found.
enum Step {
    /// A good record of this file, with its payload length.
    Record(usize),
    /// An end mark or a record of an earlier life of a recycled file.
    End,
    Bad(Damage),
}

/// The records of one file's contents, in order.
pub struct Records {
    data: Bytes,
    file: u32,
    at: usize,
    damage: Option<(usize, Damage)>,
    /// Reading ended at an intact record of the file's previous life.
    stale: bool,
    /// Skip damaged regions (the data is the whole file) instead of stopping.
    resync: bool,
    skipped: Vec<Skipped>,
}

impl Records {
    /// The records of file `file` in `data`, stopping at the first damage (`data` may
    /// be a chunk of a file: a record cut by its end is not damage of the file).
    pub fn new(data: Bytes, file: u32) -> Records {
        Records {
            data,
            file,
            at: 0,
            damage: None,
            stale: false,
            resync: false,
            skipped: Vec::new(),
        }
    }

    /// The records of file `file` in `data`, the whole file: a damaged record with a
    /// good record of this file after it is skipped (see [`Records::skipped`]); only
    /// damage with nothing good after it ends reading ([`Records::damage`]).
    pub fn resyncing(data: Bytes, file: u32) -> Records {
        Records {
            resync: true,
            ..Records::new(data, file)
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

    /// The damaged regions skipped so far, in file order (only when resyncing).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The offset just past the last good record.
    pub fn good_len(&self) -> usize {
        self.at
    }

    fn word(&self, at: usize) -> u32 {
        let b = &self.data[at..at + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    fn step(&self, at: usize) -> Step {
        let left = self.data.len() - at;
        if left < HEADER {
            return Step::Bad(Damage::Short {
                wanted: HEADER,
                left,
            });
        }
        let (len, file, stored) = (self.word(at), self.word(at + 4), self.word(at + 8));
        if len == 0 && file == self.file && stored == 0 {
            return Step::End;
        }
        if len == 0 || len as usize > MAX_RECORD {
            return Step::Bad(Damage::BadLength(len));
        }
        let wanted = HEADER + len as usize;
        if left < wanted {
            return Step::Bad(Damage::Short { wanted, left });
        }
        let computed = checksum(file, &self.data[at + HEADER..at + wanted]);
        if computed != stored {
            return Step::Bad(Damage::Checksum { stored, computed });
        }
        if file != self.file {
            return Step::End;
        }
        Step::Record(len as usize)
    }

    /// The first position from `from` on where a whole record of this file checks.
    fn next_good(&self, from: usize) -> Option<usize> {
        let end = self.data.len().checked_sub(HEADER + 1)?;
        let file = self.file.to_le_bytes();
        (from..=end).find(|&p| {
            // The file number first: it rules out almost every position at once.
            self.data[p + 4..p + 8] == file && matches!(self.step(p), Step::Record(_))
        })
    }

    /// How many records the announced lengths frame in `at..end`, if they end exactly
    /// at `end`.
    fn framed(&self, mut at: usize, end: usize) -> Option<usize> {
        let mut n = 0;
        while at < end {
            if end - at < HEADER {
                return None;
            }
            let len = self.word(at) as usize;
            if len == 0 || len > MAX_RECORD {
                return None;
            }
            at += HEADER + len;
            n += 1;
        }
        (at == end).then_some(n)
    }

    /// The next record and the offset it starts at.
    pub fn next_record(&mut self) -> Option<(usize, Bytes)> {
        loop {
            if self.damage.is_some() || self.stale || self.at == self.data.len() {
                return None;
            }
            match self.step(self.at) {
                Step::Record(len) => {
                    let at = self.at;
                    self.at += HEADER + len;
                    return Some((at, self.data.slice(at + HEADER..self.at)));
                }
                Step::End => {
                    self.stale = true;
                    return None;
                }
                Step::Bad(damage) => {
                    let next = if self.resync {
                        self.next_good(self.at + HEADER + 1)
                    } else {
                        None
                    };
                    let Some(next) = next else {
                        self.damage = Some((self.at, damage));
                        return None;
                    };
                    self.skipped.push(Skipped {
                        at: self.at,
                        len: next - self.at,
                        damage,
                        records: self.framed(self.at, next),
                    });
                    self.at = next;
                }
            }
        }
    }
}

impl Iterator for Records {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        self.next_record().map(|(_, payload)| payload)
    }
}

/// The bytes to write at the start of skipped region `region` of `data` (file `file`)
/// so that it reads as one good record: a header and `first`, the first payload byte,
/// with the region's other bytes kept as the rest of the payload. Readers step over it
/// by its length, and a resync later cannot start inside it (no position in it did).
pub fn reframe(data: &[u8], region: &Skipped, file: u32, first: u8) -> [u8; HEADER + 1] {
    let rest = &data[region.at + HEADER + 1..region.at + region.len];
    let crc = crc32c::crc32c_append(checksum(file, &[first]), rest);
    let mut out = [0u8; HEADER + 1];
    out[..4].copy_from_slice(&((region.len - HEADER) as u32).to_le_bytes());
    out[4..8].copy_from_slice(&file.to_le_bytes());
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out[HEADER] = first;
    out
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

    /// Five records of file 7, and where each starts.
    fn five() -> (BytesMut, Vec<usize>) {
        let mut out = BytesMut::new();
        let mut starts = Vec::new();
        for i in 0..5u8 {
            starts.push(out.len());
            append(&mut out, 7, |o| o.put_bytes(b'a' + i, 40 + usize::from(i)));
        }
        (out, starts)
    }

    fn read_all(data: BytesMut, file: u32) -> (Vec<(usize, Bytes)>, Records) {
        let mut r = Records::resyncing(data.freeze(), file);
        let mut got = Vec::new();
        while let Some(rec) = r.next_record() {
            got.push(rec);
        }
        (got, r)
    }

    fn firsts(got: &[(usize, Bytes)]) -> Vec<u8> {
        got.iter().map(|(_, p)| p[0]).collect()
    }

    #[test]
    fn a_flipped_payload_byte_costs_only_that_record() {
        let (mut data, starts) = five();
        let len = data.len();
        data[starts[2] + HEADER + 20] ^= 0x01;
        let (got, r) = read_all(data, 7);
        assert_eq!(firsts(&got), b"abde");
        assert_eq!(got[2].0, starts[3], "offsets are the records' own");
        assert!(r.damage().is_none());
        assert_eq!(r.good_len(), len);
        let skipped = r.skipped();
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].at, starts[2]);
        assert_eq!(skipped[0].len, starts[3] - starts[2]);
        assert_eq!(skipped[0].records, Some(1));
        assert!(matches!(skipped[0].damage, Damage::Checksum { .. }));
    }

    #[test]
    fn a_damaged_length_is_skipped_whatever_it_became() {
        for (what, length) in [
            ("zero", 0u32),
            ("above MAX_RECORD", 1 << 30),
            ("past the end", 100_000),
            ("shorter", 20),
            ("longer, inside the file", 43 + 44 + HEADER as u32),
        ] {
            let (mut data, starts) = five();
            data[starts[1]..starts[1] + 4].copy_from_slice(&length.to_le_bytes());
            let (got, r) = read_all(data, 7);
            assert_eq!(firsts(&got), b"acde", "length {what}");
            assert!(r.damage().is_none(), "length {what}");
            let skipped = r.skipped();
            assert_eq!(skipped.len(), 1, "length {what}");
            assert_eq!(
                (skipped[0].at, skipped[0].len),
                (starts[1], starts[2] - starts[1]),
                "length {what}"
            );
            assert_eq!(
                skipped[0].records, None,
                "length {what}: framing is damaged"
            );
        }
    }

    #[test]
    fn two_damaged_records_are_two_regions() {
        let (mut data, starts) = five();
        data[starts[1] + HEADER + 3] ^= 0x80;
        data[starts[3] + 9] ^= 0x04; // the stored checksum
        let (got, r) = read_all(data, 7);
        assert_eq!(firsts(&got), b"ace");
        let regions: Vec<(usize, usize)> = r.skipped().iter().map(|s| (s.at, s.len)).collect();
        assert_eq!(
            regions,
            vec![
                (starts[1], starts[2] - starts[1]),
                (starts[3], starts[4] - starts[3])
            ]
        );
        assert!(r.damage().is_none());
    }

    #[test]
    fn adjacent_damaged_records_are_one_region_counting_both() {
        let (mut data, starts) = five();
        data[starts[1] + HEADER] ^= 0x01;
        data[starts[2] + HEADER] ^= 0x01;
        let (got, r) = read_all(data, 7);
        assert_eq!(firsts(&got), b"ade");
        assert_eq!(r.skipped().len(), 1);
        assert_eq!(r.skipped()[0].records, Some(2));
        assert_eq!(r.skipped()[0].len, starts[3] - starts[1]);
    }

    #[test]
    fn a_damaged_last_record_is_a_tail() {
        let (mut data, starts) = five();
        let last = data.len() - 1;
        data[last] ^= 0x10;
        let (got, r) = read_all(data.clone(), 7);
        assert_eq!(firsts(&got), b"abcd");
        assert!(r.skipped().is_empty());
        assert_eq!(r.good_len(), starts[4]);
        assert!(matches!(r.damage(), Some((at, Damage::Checksum { .. })) if *at == starts[4]));
        // Torn instead: the same.
        let (got, r) = read_all(data.split_to(last - 3), 7);
        assert_eq!(firsts(&got), b"abcd");
        assert!(r.skipped().is_empty());
        assert!(matches!(r.damage(), Some((at, Damage::Short { .. })) if *at == starts[4]));
    }

    #[test]
    fn a_damaged_first_record_is_skipped() {
        let (mut data, starts) = five();
        data[2] ^= 0x01; // its length
        let (got, r) = read_all(data, 7);
        assert_eq!(firsts(&got), b"bcde");
        assert_eq!((r.skipped()[0].at, r.skipped()[0].len), (0, starts[1]));
    }

    #[test]
    fn resync_never_takes_a_record_of_another_file_number() {
        // File 7 recycled as file 9: two new records, then file 7's last three.
        let (mut data, starts) = five();
        let mut new = BytesMut::new();
        append(&mut new, 9, |o| o.put_bytes(b'x', 40));
        append(&mut new, 9, |o| o.put_bytes(b'y', 41));
        assert_eq!(new.len(), starts[2]);
        data[..new.len()].copy_from_slice(&new);
        // Undamaged: the old life ends reading cleanly.
        let (got, r) = read_all(data.clone(), 9);
        assert_eq!(firsts(&got), b"xy");
        assert!(r.ended_at_stale() && r.damage().is_none());
        // The second new record damaged: the old ones after it are not a resync point.
        data[starts[1] + HEADER + 1] ^= 0x01;
        let (got, r) = read_all(data, 9);
        assert_eq!(firsts(&got), b"x");
        assert!(r.skipped().is_empty(), "{:?}", r.skipped());
        assert_eq!(r.damage().map(|d| d.0), Some(starts[1]));
        assert_eq!(r.good_len(), starts[1]);
    }

    #[test]
    fn a_damaged_end_mark_leaves_the_old_life_alone() {
        let (mut data, starts) = five();
        let mut new = BytesMut::new();
        append(&mut new, 9, |o| o.put_bytes(b'x', 40));
        append_end_mark(&mut new, 9);
        new[HEADER + 40 + 8] ^= 0x01; // the end mark's checksum, no longer 0
        data[..new.len()].copy_from_slice(&new);
        let (got, r) = read_all(data, 9);
        assert_eq!(firsts(&got), b"x");
        assert!(r.skipped().is_empty());
        assert_eq!(r.damage().map(|d| d.0), Some(starts[1]));
    }

    #[test]
    fn a_chunk_reader_still_stops_at_damage() {
        let (mut data, starts) = five();
        data[starts[2] + HEADER + 20] ^= 0x01;
        let mut r = Records::new(data.freeze(), 7);
        assert_eq!(r.by_ref().count(), 2);
        assert!(r.skipped().is_empty());
        assert_eq!(r.damage().map(|d| d.0), Some(starts[2]));
    }

    #[test]
    fn a_reframed_region_reads_as_one_record_with_the_rest_intact() {
        let (mut data, starts) = five();
        data[starts[1]..starts[1] + 4].copy_from_slice(&1_000u32.to_le_bytes());
        data[starts[3] + HEADER + 5] ^= 0x01;
        let (_, r) = read_all(data.clone(), 7);
        let regions = r.skipped().to_vec();
        assert_eq!(regions.len(), 2);
        for region in &regions {
            let head = reframe(&data, region, 7, 0xEE);
            data[region.at..region.at + head.len()].copy_from_slice(&head);
        }
        let (got, r) = read_all(data, 7);
        assert!(r.skipped().is_empty() && r.damage().is_none());
        assert_eq!(firsts(&got), [b'a', 0xEE, b'c', 0xEE, b'e']);
        assert_eq!(got[1].1.len(), starts[2] - starts[1] - HEADER);
        assert_eq!(
            &got[1].1[1..],
            &[b'b'; 40][..],
            "the region's other bytes stay"
        );
    }
}
