//! Owns: a stream's index of what is on disk — its segments in order (number, offsets,
//! first and last chunk timestamps, bytes written) and, per segment, a sparse list of
//! points (a chunk's first offset, where its record starts, its timestamp) at least
//! [`POINT_GAP`] bytes apart, plus the last chunk's start (`x-stream-offset = last`).
//! Finding where an offset or a time is reads the points, then the reader scans
//! forward from there.
//!
//! Does not: read files, or know readers (it answers where; they decide what to read).
//!
//! # Invariants
//! - Segments are in number order; each one's offsets follow the previous one's
//!   (`first_offset >= previous end`), and within a segment points are in offset and
//!   position order, the first point at the segment's first chunk.
//! - Timestamps only grow (the stream seals chunks with `max(now, last)`).

use std::collections::VecDeque;

/// Bytes between two index points of a segment, at least.
pub const POINT_GAP: u64 = 64 * 1024;

/// A chunk's start, kept as an index point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub offset: u64,
    pub pos: u64,
    pub timestamp_ms: i64,
}

/// One segment file as the index knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub number: u32,
    /// The first offset in it; the end offset when it holds no chunk.
    pub first_offset: u64,
    /// One past its last offset.
    pub end_offset: u64,
    pub first_ts: i64,
    pub last_ts: i64,
    /// Bytes of whole records in it (what readers may read).
    pub size: u64,
    points: Vec<Point>,
    /// The last chunk's start.
    last_chunk: Option<Point>,
}

impl Segment {
    fn new(number: u32, at_offset: u64) -> Segment {
        Segment {
            number,
            first_offset: at_offset,
            end_offset: at_offset,
            first_ts: 0,
            last_ts: 0,
            size: 0,
            points: Vec::new(),
            last_chunk: None,
        }
    }

    /// Messages in it.
    pub fn messages(&self) -> u64 {
        self.end_offset - self.first_offset
    }

    pub fn has_chunks(&self) -> bool {
        self.last_chunk.is_some()
    }

    /// The point to start reading at for `offset` (in this segment): the last point at
    /// or before it.
    fn point_for(&self, offset: u64) -> Point {
        let at = self.points.partition_point(|p| p.offset <= offset);
        match at.checked_sub(1).and_then(|i| self.points.get(i)) {
            Some(p) => *p,
            None => Point {
                offset: self.first_offset,
                pos: 0,
                timestamp_ms: self.first_ts,
            },
        }
    }
}

/// Where a reader starts reading: a segment and a record boundary in it, and the
/// offset of the chunk that starts there (a lower bound of the wanted offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadFrom {
    pub segment: u32,
    pub pos: u64,
    pub offset: u64,
}

/// A stream's segments.
#[derive(Clone, Debug, Default)]
pub struct Index {
    segments: VecDeque<Segment>,
    /// Bytes over every segment.
    bytes: u64,
}

impl Index {
    /// The segments, oldest first.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The newest segment (the one written to).
    pub fn active(&self) -> Option<&Segment> {
        self.segments.back()
    }

    pub fn segment(&self, number: u32) -> Option<&Segment> {
        let at = self.segments.partition_point(|s| s.number < number);
        self.segments.get(at).filter(|s| s.number == number)
    }

    /// The segment after `number`.
    pub fn next_segment(&self, number: u32) -> Option<&Segment> {
        let at = self.segments.partition_point(|s| s.number <= number);
        self.segments.get(at)
    }

    /// Bytes over every segment.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The first offset in the log (`end` when it is empty).
    pub fn first_offset(&self, end: u64) -> u64 {
        self.segments
            .iter()
            .find(|s| s.has_chunks())
            .map_or(end, |s| s.first_offset)
    }

    /// The start of the newest chunk.
    pub fn last_chunk(&self) -> Option<Point> {
        self.segments.iter().rev().find_map(|s| s.last_chunk)
    }

    /// The newest chunk's timestamp.
    pub fn last_ts(&self) -> Option<i64> {
        self.last_chunk().map(|_| {
            self.segments
                .iter()
                .rev()
                .find(|s| s.has_chunks())
                .map_or(0, |s| s.last_ts)
        })
    }

    /// Starts segment `number`, empty, at `offset` (a new segment file).
    pub fn start_segment(&mut self, number: u32, offset: u64) {
        self.segments.push_back(Segment::new(number, offset));
    }

    /// A chunk of `count` messages from `first`, written at `timestamp_ms`, is in
    /// segment `number` at `pos`, `len` bytes (with the records written before it in
    /// the same write, from `written_from`): the segment grows to `pos + len`.
    pub fn add_chunk(
        &mut self,
        number: u32,
        first: u64,
        count: u64,
        timestamp_ms: i64,
        pos: u64,
        len: u64,
    ) {
        let Some(seg) = self.segments.iter_mut().rev().find(|s| s.number == number) else {
            return;
        };
        let point = Point {
            offset: first,
            pos,
            timestamp_ms,
        };
        if !seg.has_chunks() {
            seg.first_offset = first;
            seg.first_ts = timestamp_ms;
        }
        let gap = seg
            .points
            .last()
            .is_none_or(|p| pos.saturating_sub(p.pos) >= POINT_GAP);
        if gap {
            seg.points.push(point);
        }
        seg.last_chunk = Some(point);
        seg.end_offset = first + count;
        seg.last_ts = timestamp_ms;
        self.grow(number, pos + len);
    }

    /// Segment `number` holds `size` bytes of whole records (records other than chunks
    /// extend it too).
    pub fn grow(&mut self, number: u32, size: u64) {
        if let Some(seg) = self.segments.iter_mut().rev().find(|s| s.number == number) {
            if size > seg.size {
                self.bytes += size - seg.size;
                seg.size = size;
            }
        }
    }

    /// Takes the oldest segment away (retention).
    pub fn remove_oldest(&mut self) -> Option<Segment> {
        let seg = self.segments.pop_front()?;
        self.bytes -= seg.size;
        Some(seg)
    }

    /// Where to read for `offset`: the segment holding it and the last index point at
    /// or before it. `None` when the offset is past every segment.
    pub fn locate(&self, offset: u64) -> Option<ReadFrom> {
        let seg = self
            .segments
            .iter()
            .find(|s| s.has_chunks() && offset < s.end_offset)?;
        let p = seg.point_for(offset.max(seg.first_offset));
        Some(ReadFrom {
            segment: seg.number,
            pos: p.pos,
            offset: p.offset,
        })
    }

    /// Where to read for the first chunk written at or after `ts` (osiris' timestamp
    /// attach): `None` when every chunk is older (attach at the end). A time before the
    /// first chunk is the first chunk.
    pub fn locate_time(&self, ts: i64) -> Option<ReadFrom> {
        let seg = self
            .segments
            .iter()
            .find(|s| s.has_chunks() && s.last_ts >= ts)?;
        // The last point older than `ts`: the wanted chunk is at or after it.
        let at = seg.points.partition_point(|p| p.timestamp_ms < ts);
        let p = match at.checked_sub(1).and_then(|i| seg.points.get(i)) {
            Some(p) => *p,
            None => seg.point_for(seg.first_offset),
        };
        Some(ReadFrom {
            segment: seg.number,
            pos: p.pos,
            offset: p.offset,
        })
    }

    /// Bytes from `offset` to the end of the log (through the index points: the
    /// chunk holding the offset counts whole).
    pub fn bytes_from(&self, offset: u64) -> u64 {
        let mut total = 0;
        let mut counting = false;
        for seg in &self.segments {
            if counting {
                total += seg.size;
            } else if seg.has_chunks() && offset < seg.end_offset {
                counting = true;
                let pos = if offset <= seg.first_offset {
                    0
                } else {
                    seg.point_for(offset).pos
                };
                total += seg.size - pos;
            }
        }
        total
    }

    /// The segment holding `offset`.
    pub fn segment_of(&self, offset: u64) -> Option<&Segment> {
        self.segments
            .iter()
            .find(|s| s.has_chunks() && offset < s.end_offset)
    }

    /// Bytes from the start of the segment holding `offset` to the end of the log.
    pub fn bytes_from_segment_of(&self, offset: u64) -> u64 {
        let mut total = 0;
        let mut counting = false;
        for seg in &self.segments {
            counting |= seg.has_chunks() && offset < seg.end_offset;
            if counting {
                total += seg.size;
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two segments: 1 holds offsets 0..100 in chunks of 10 (each 40 KiB, at t = 1000 +
    /// offset), 2 holds 100..120 in chunks of 10.
    fn index() -> Index {
        let mut ix = Index::default();
        ix.start_segment(1, 0);
        for c in 0..10u64 {
            ix.add_chunk(1, c * 10, 10, 1000 + (c * 10) as i64, c * 40_960, 40_960);
        }
        ix.start_segment(2, 100);
        for c in 0..2u64 {
            ix.add_chunk(
                2,
                100 + c * 10,
                10,
                1100 + (c * 10) as i64,
                c * 40_960,
                40_960,
            );
        }
        ix
    }

    #[test]
    fn points_are_sparse_and_locate_reads_from_the_last_one_before() {
        let ix = index();
        // Chunks are 40 KiB apart, points 64 KiB: every other chunk.
        let seg = ix.segment(1).expect("segment");
        assert_eq!(seg.points.len(), 5);
        assert_eq!(
            ix.locate(35),
            Some(ReadFrom {
                segment: 1,
                pos: 2 * 40_960,
                offset: 20
            })
        );
        assert_eq!(
            ix.locate(105),
            Some(ReadFrom {
                segment: 2,
                pos: 0,
                offset: 100
            })
        );
        assert_eq!(ix.locate(120), None);
        assert_eq!(ix.first_offset(120), 0);
        assert_eq!(ix.last_chunk().map(|p| p.offset), Some(110));
        assert_eq!(ix.bytes(), 12 * 40_960);
    }

    #[test]
    fn time_attaches_to_the_first_chunk_at_or_after_it() {
        let ix = index();
        // Chunk 30..40 was written at 1030: a time of 1025 reads from the point at or
        // before it (chunk 20, pos 2 × 40 KiB) and the reader skips older chunks.
        assert_eq!(ix.locate_time(1025).map(|r| r.offset), Some(20));
        assert_eq!(ix.locate_time(0).map(|r| r.offset), Some(0));
        assert_eq!(
            ix.locate_time(1105).map(|r| (r.segment, r.offset)),
            Some((2, 100))
        );
        assert_eq!(ix.locate_time(1111), None);
    }

    #[test]
    fn bytes_from_and_retention() {
        let mut ix = index();
        assert_eq!(ix.bytes_from(0), 12 * 40_960);
        // 110 has no point of its own (40 KiB after 100's): its bytes count from 100.
        assert_eq!(ix.bytes_from(115), 2 * 40_960);
        assert_eq!(ix.bytes_from(35), 10 * 40_960);
        assert_eq!(ix.bytes_from_segment_of(115), 2 * 40_960);
        let gone = ix.remove_oldest().expect("segment 1");
        assert_eq!(gone.number, 1);
        assert_eq!(ix.first_offset(120), 100);
        assert_eq!(ix.bytes(), 2 * 40_960);
        assert_eq!(
            ix.locate(50),
            Some(ReadFrom {
                segment: 2,
                pos: 0,
                offset: 100
            })
        );
    }
}
