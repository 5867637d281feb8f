//! Owns: one shard's message store at run time — the segment files of the durable
//! queues the shard homes, the records staged during a turn (persistent messages
//! entering durable queues, once per message however many of them it entered; what the
//! queues journaled), sealing them into groups (one write and one fdatasync per group
//! while the next group gathers), how many stored entries each segment still holds,
//! and segment garbage collection.
//!
//! Does not: decide what is durable (queues say so when they are created), read
//! segments back (`recovery`), do the I/O or hold confirms (`shard::home::persist` does both:
//! the confirms held during a turn belong to the group sealed at its end).
//!
//! # Invariants
//! - `segments` is in file order; the last one is the active segment, the only one
//!   written to. A segment is deleted only when it holds no live entry *and* every older
//!   segment is gone, so a later segment's "gone" records never outlive the message
//!   records they cancel.
//! - `runs[q]` maps queue `q`'s sequence numbers to segments: runs in increasing
//!   `first_seq` and segment order (a queue's sequence numbers and the segments both
//!   only grow), each counting its live entries; the sums per segment equal
//!   `SegmentInfo::live`.
//! - At most one group is being written; confirms are released only once the group that
//!   holds their messages is written and synced.
//! - A group whose write failed stays the one in flight (`failed`) until it is written:
//!   its new messages are withdrawn (same bytes, so every offset kept here stays
//!   true), their entries are in `withdrawn` (in memory only: never evicted, never
//!   copied forward, still counted live until they leave their queues), and nothing
//!   after it is sealed meanwhile.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use crate::model::ids::{IdMap, QueueId};
use crate::model::message::LocalMessage;

use super::message_log::{self, QueueSeqs};
use super::record;
use crate::model::journal::{self, Journal};

/// The oldest segment is compacted when it holds at most this many live entries, at
/// most one in `COMPACT_LIVE_FRACTION` of the entries written to it (so copying it
/// forward costs at most a quarter of what it frees), and pins at least
/// `COMPACT_MIN_PINNED` newer segments.
pub const COMPACT_MAX_LIVE: u64 = 4096;
const COMPACT_LIVE_FRACTION: u64 = 4;
const COMPACT_MIN_PINNED: usize = 2;

/// One segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub number: u32,
    /// Bytes in the file (what has been written, or is being written).
    pub size: u64,
    /// Stored entries in it that are still in their queues.
    pub live: u64,
    /// Stored entries ever written to it (live or not).
    pub entries: u64,
    /// Bytes the file takes on disk beyond `size`: a recycled file keeps its old length
    /// until it is written past it.
    pub recycled_len: u64,
}

impl SegmentInfo {
    fn disk_bytes(&self) -> u64 {
        self.size.max(self.recycled_len)
    }
}

/// The spare segment file: a deleted segment kept (as `spare`) to be the next one.
/// Deleting a file frees its blocks (with `discard`, a device TRIM) inside the file
/// system's journal, and writes and fsyncs of the active segment wait behind that
/// (20 ms for a 64 MiB segment here); a renamed file is overwritten in place instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spare {
    None,
    /// A spare file of this many bytes.
    Ready(u64),
    /// Being renamed (to or from `spare`).
    Busy,
}

/// The spare file's name in a shard directory.
pub const SPARE: &str = "spare";

/// Consecutive sequence numbers of one queue stored in one segment.
#[derive(Clone, Copy, Debug)]
struct Run {
    first_seq: u64,
    segment: u32,
    live: u64,
    /// Where the run's first record starts in its segment (a page-in reads from here).
    offset: u64,
}

/// Where reading a queue's evicted entries back starts: a segment and a record-aligned
/// offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadAt {
    pub segment: u32,
    pub offset: u64,
}

/// The file name of segment `number`.
pub fn segment_name(number: u32) -> String {
    format!("{number:08}.seg")
}

/// The directory of shard `shard`'s segments under the data dir.
pub fn shard_dir(data_dir: &Path, shard: usize) -> PathBuf {
    data_dir.join("messages").join(format!("shard-{shard}"))
}

/// Counters for the shutdown line and the benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreStats {
    pub commits: u64,
    pub fsyncs: u64,
    pub bytes: u64,
}

/// A group sealed for writing.
pub struct Group {
    pub data: Bytes,
    /// The segment it goes to and where.
    pub segment: u32,
    pub offset: u64,
    /// The segment is new: its file must be created first.
    pub new_file: bool,
    /// The new segment's file is the spare, renamed.
    pub recycle: bool,
    /// The highest sequence number of each queue written in this group.
    pub upto: IdMap<QueueId, u64>,
    /// How many of its first message records are compaction copies.
    pub copies: usize,
}

/// A shard's store.
pub struct ShardStore {
    dir: PathBuf,
    segment_size: u64,
    pub fsync: bool,
    segments: VecDeque<SegmentInfo>,
    /// The active segment's open file, once opened, with its segment number.
    pub active_file: Option<(u32, Rc<tokio_uring::fs::File>)>,
    runs: IdMap<QueueId, VecDeque<Run>>,
    /// Per queue, every entry up to this sequence number is on disk (written in a
    /// committed group): only those may be evicted from memory.
    committed_seq: IdMap<QueueId, u64>,
    /// Per queue, where the last page-in stopped.
    cursors: IdMap<QueueId, (u64, ReadAt)>,
    /// Entries copied forward out of a compacted segment: (queue, seq) → the segment
    /// holding the copy. Checked before `runs`, whose segments they left.
    relocated: IdMap<QueueId, BTreeMap<u64, u32>>,
    staged: Vec<(LocalMessage, QueueSeqs)>,
    /// How many of the first `staged` are copies (compaction), counted in `relocated`.
    staged_copies: usize,
    /// Stored queue entries staged since start: a caller compares it before and after
    /// enqueueing to learn whether a publish must wait for the next group.
    staged_refs: u64,
    deleted: Vec<QueueId>,
    /// Something outside these segments (a stream's chunk or tracking record) rides on
    /// the next group: it is sealed even with nothing of its own.
    external: bool,
    scratch: Journal,
    /// A group is being written.
    pub in_flight: bool,
    pub spare: Spare,
    /// The active segment is a recycled file: groups end with an end mark.
    recycled_active: bool,
    /// No compaction is tried before this (see `shard::home::persist`).
    pub compact_after: Option<std::time::Instant>,
    pub stats: StoreStats,
    /// The group whose write failed, waiting to be written again (`in_flight` stays
    /// set meanwhile).
    pub failed: Option<Group>,
    /// The failed group is not tried again before this.
    pub retry_at: Option<std::time::Instant>,
    /// Entries whose records were withdrawn after a failed write (their publishes
    /// nacked): in memory only.
    withdrawn: IdMap<QueueId, BTreeSet<u64>>,
}

impl ShardStore {
    /// A store over the segments recovery found (oldest first, with their live counts),
    /// and the queue runs it rebuilt.
    pub fn new(
        dir: PathBuf,
        segment_size: u64,
        fsync: bool,
        segments: Vec<SegmentInfo>,
        runs: Vec<(QueueId, u64, u32, u64, u64)>,
    ) -> ShardStore {
        let spare = match std::fs::metadata(dir.join(SPARE)) {
            Ok(m) if m.is_file() => Spare::Ready(m.len()),
            _ => Spare::None,
        };
        let mut store = ShardStore {
            dir,
            segment_size: segment_size.max(4096),
            fsync,
            segments: segments.into(),
            active_file: None,
            runs: IdMap::default(),
            committed_seq: IdMap::default(),
            cursors: IdMap::default(),
            relocated: IdMap::default(),
            staged: Vec::new(),
            staged_copies: 0,
            staged_refs: 0,
            deleted: Vec::new(),
            external: false,
            scratch: Journal::default(),
            in_flight: false,
            spare,
            recycled_active: false,
            compact_after: None,
            stats: StoreStats::default(),
            failed: None,
            retry_at: None,
            withdrawn: IdMap::default(),
        };
        for (queue, first_seq, segment, live, offset) in runs {
            store.runs.entry(queue).or_default().push_back(Run {
                first_seq,
                segment,
                live,
                offset,
            });
        }
        store
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn segment_path(&self, number: u32) -> PathBuf {
        self.dir.join(segment_name(number))
    }

    /// Bytes of this shard's segment files (and its spare).
    pub fn disk_bytes(&self) -> u64 {
        let spare = match self.spare {
            Spare::Ready(n) => n,
            _ => 0,
        };
        self.segments
            .iter()
            .map(SegmentInfo::disk_bytes)
            .sum::<u64>()
            + spare
    }

    /// Segment files this shard holds.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Stored entries staged so far (see `staged_refs`).
    #[inline]
    pub fn staged_refs(&self) -> u64 {
        self.staged_refs
    }

    /// A persistent message entered durable queue `queue` as `seq`. The message record
    /// is written once per group however many queues of this shard it entered (they
    /// are enqueued one after the other, so the last staged message is the one to
    /// extend).
    pub fn stage(&mut self, queue: QueueId, seq: u64, msg: &LocalMessage) {
        self.staged_refs += 1;
        let copies = self.staged_copies;
        if let Some((last, queues)) = self.staged.get_mut(copies..).and_then(|s| s.last_mut()) {
            if Rc::ptr_eq(last, msg) && queues.len() < u16::MAX as usize {
                queues.push((queue, seq));
                return;
            }
        }
        let mut queues = QueueSeqs::new();
        queues.push((queue, seq));
        self.staged.push((Rc::clone(msg), queues));
    }

    /// Something outside the shard's segments must be written with the next group (a
    /// stream's appends or tracked offsets, written by the group's task after this
    /// group's own data): the next turn's end seals a group even with nothing of its
    /// own, and a confirmed publish that did this waits for that group, as for a
    /// staged message.
    pub fn stage_external(&mut self) {
        self.staged_refs += 1;
        self.external = true;
    }

    /// A group's writes outside these segments (streams) are on disk: `bytes` in
    /// `files` writes (each synced when `fsync` is on), counted in the shard's store
    /// figures (MST-1003); a group with nothing of its own counts as a commit here.
    pub fn external_written(&mut self, bytes: u64, files: u64, group_was_empty: bool) {
        if files == 0 {
            return;
        }
        self.stats.bytes += bytes;
        if self.fsync {
            self.stats.fsyncs += files;
        }
        if group_was_empty {
            self.stats.commits += 1;
        }
    }

    /// A durable queue of this shard was deleted: its entries no longer count, and no
    /// record is needed (the definitions log says it is gone).
    pub fn queue_deleted(&mut self, queue: QueueId) {
        self.deleted.push(queue);
    }

    /// Whether there is anything to commit.
    pub fn has_work(&self) -> bool {
        self.external || !self.staged.is_empty() || !self.deleted.is_empty() || !journal::is_empty()
    }

    /// Seals what was staged and journaled into a group for the active segment (a new
    /// one when the active segment is full), and updates the live counts. `None` when a
    /// group is already being written or nothing waits.
    pub fn seal(&mut self) -> Option<Group> {
        if self.in_flight || !self.has_work() {
            return None;
        }
        journal::swap(&mut self.scratch);
        self.external = false;
        let mut new_file = false;
        let mut recycle = false;
        let was_recycled_active = self.recycled_active;
        let roll = match self.segments.back() {
            None => true,
            Some(s) => s.size >= self.segment_size,
        };
        if roll
            && (!self.staged.is_empty()
                || !self.scratch.gone.is_empty()
                || self.segments.is_empty())
        {
            let number = self.segments.back().map_or(1, |s| s.number + 1);
            let recycled_len = match self.spare {
                Spare::Ready(n) => {
                    self.spare = Spare::Busy;
                    recycle = true;
                    n
                }
                _ => 0,
            };
            self.recycled_active = recycle;
            self.segments.push_back(SegmentInfo {
                number,
                size: 0,
                live: 0,
                entries: 0,
                recycled_len,
            });
            new_file = true;
        }
        let (segment, offset) = match self.segments.back() {
            Some(s) => (s.number, s.size),
            None => (1, 0),
        };
        let mut out = BytesMut::new();
        let staged = std::mem::take(&mut self.staged);
        let copies = std::mem::take(&mut self.staged_copies);
        let mut upto: IdMap<QueueId, u64> = IdMap::default();
        for (i, (msg, queues)) in staged.iter().enumerate() {
            let at = offset + out.len() as u64;
            out.reserve(record::HEADER + message_log::message_len(queues.len(), msg));
            record::append(&mut out, segment, |o| {
                message_log::put_message(o, queues, msg)
            });
            for &(queue, seq) in queues {
                if i < copies {
                    self.relocated
                        .entry(queue)
                        .or_default()
                        .insert(seq, segment);
                    self.count_in(segment, 1);
                } else {
                    self.add_live(queue, seq, segment, at);
                    let u = upto.entry(queue).or_default();
                    *u = (*u).max(seq);
                }
            }
        }
        drop(staged);
        for queue in std::mem::take(&mut self.deleted) {
            self.committed_seq.remove(&queue);
            self.withdrawn.remove(&queue);
            self.cursors.remove(&queue);
            if let Some(runs) = self.runs.remove(&queue) {
                for run in runs {
                    self.count_out(run.segment, run.live);
                }
            }
            if let Some(moved) = self.relocated.remove(&queue) {
                for segment in moved.into_values() {
                    self.count_out(segment, 1);
                }
            }
        }
        let mut gone = std::mem::take(&mut self.scratch.gone);
        gone.retain(|&(queue, seq)| self.remove_live(queue, seq));
        if !gone.is_empty() {
            record::append(&mut out, segment, |o| {
                message_log::put_pairs(o, false, &gone)
            });
        }
        gone.clear();
        self.scratch.gone = gone;
        let mut delivered = std::mem::take(&mut self.scratch.delivered);
        if !delivered.is_empty() {
            delivered.sort_unstable();
            // The highest sequence delivered per queue is all recovery needs.
            let mut highest: Vec<(QueueId, u64)> = Vec::new();
            for (queue, seq) in delivered.drain(..) {
                match highest.last_mut() {
                    Some(last) if last.0 == queue => last.1 = last.1.max(seq),
                    _ => highest.push((queue, seq)),
                }
            }
            highest.retain(|(q, _)| self.runs.contains_key(q));
            if !highest.is_empty() {
                record::append(&mut out, segment, |o| {
                    message_log::put_pairs(o, true, &highest)
                });
            }
        }
        self.scratch.delivered = delivered;
        if new_file && out.is_empty() {
            // Nothing to write after all (the group only dropped a deleted queue's
            // entries): the new segment is not started, and its file not taken.
            if let Some(s) = self.segments.pop_back() {
                if recycle {
                    self.spare = Spare::Ready(s.recycled_len);
                }
            }
            self.recycled_active = was_recycled_active;
            new_file = false;
            recycle = false;
        }
        if let Some(s) = self.segments.back_mut() {
            s.size += out.len() as u64;
        }
        if self.recycled_active && !out.is_empty() {
            // Not counted in the size: the next group starts on it.
            record::append_end_mark(&mut out, segment);
        }
        self.in_flight = true;
        Some(Group {
            data: out.freeze(),
            segment,
            offset,
            new_file,
            recycle,
            upto,
            copies,
        })
    }

    /// A group's write failed (its file is cut back to where the group starts): its new
    /// messages' records are withdrawn in place and their entries remembered as in
    /// memory only, and the group is kept in `failed`, to be written again as it is
    /// now. Returns how many queue entries were withdrawn.
    pub fn withdraw(&mut self, group: Group) -> u64 {
        let mut data = BytesMut::from(&group.data[..]);
        let mut messages = 0;
        let mut entries = 0;
        for (at, payload) in record::spans(&data) {
            if data.get(payload.start) != Some(&message_log::MESSAGE_TYPE) {
                continue;
            }
            messages += 1;
            if messages <= group.copies {
                // A copy of a live entry: it must reach the disk.
                continue;
            }
            let Some(queues) = message_log::withdraw(&mut data[payload]) else {
                continue;
            };
            record::reseal(&mut data, at, group.segment);
            for (queue, seq) in queues {
                self.withdrawn.entry(queue).or_default().insert(seq);
                entries += 1;
            }
        }
        if let Some(s) = self.segments.iter_mut().find(|s| s.number == group.segment) {
            // The file was cut back to the group's start.
            s.recycled_len = 0;
        }
        self.failed = Some(Group {
            data: data.freeze(),
            // Nothing of it may be evicted as if on disk.
            upto: IdMap::default(),
            ..group
        });
        entries
    }

    /// Whether `(queue, seq)` was withdrawn after a failed write (in memory only).
    pub fn is_withdrawn(&self, queue: QueueId, seq: u64) -> bool {
        self.withdrawn.get(&queue).is_some_and(|s| s.contains(&seq))
    }

    fn count_in(&mut self, segment: u32, n: u64) {
        if let Some(s) = self.segments.iter_mut().rev().find(|s| s.number == segment) {
            s.live += n;
            s.entries += n;
        }
    }

    fn count_out(&mut self, segment: u32, n: u64) {
        // Segments are in number order.
        let at = self.segments.partition_point(|s| s.number < segment);
        if let Some(s) = self.segments.get_mut(at).filter(|s| s.number == segment) {
            s.live = s.live.saturating_sub(n);
        }
    }

    /// Every entry of `queue` up to `seq` is on disk.
    pub fn mark_committed(&mut self, queue: QueueId, seq: u64) {
        let c = self.committed_seq.entry(queue).or_default();
        *c = (*c).max(seq);
    }

    /// The highest sequence number of `queue` known to be on disk (0: none).
    pub fn committed_seq(&self, queue: QueueId) -> u64 {
        self.committed_seq.get(&queue).copied().unwrap_or(0)
    }

    /// Whether `(queue, seq)` was copied forward by compaction (such entries are not
    /// evicted: reading them back would need their exact place).
    pub fn is_relocated(&self, queue: QueueId, seq: u64) -> bool {
        self.relocated
            .get(&queue)
            .is_some_and(|m| m.contains_key(&seq))
    }

    /// Where to start reading `queue`'s entries from `seq` on: where the last page-in
    /// stopped, if that is in the run holding `seq` and not past its record, otherwise
    /// the start of that run.
    pub fn read_from(&self, queue: QueueId, seq: u64) -> Option<ReadAt> {
        let runs = self.runs.get(&queue)?;
        let at = runs
            .partition_point(|r| r.first_seq <= seq)
            .checked_sub(1)?;
        let run = runs.get(at)?;
        let start = ReadAt {
            segment: run.segment,
            offset: run.offset,
        };
        match self.cursors.get(&queue) {
            Some(&(below, c))
                if c.segment == run.segment && c.offset > run.offset && below <= seq =>
            {
                Some(c)
            }
            _ => Some(start),
        }
    }

    /// A page-in of `queue` read up to `at`, having passed every record of it with a
    /// sequence number below `below`.
    pub fn set_cursor(&mut self, queue: QueueId, below: u64, at: ReadAt) {
        self.cursors.insert(queue, (below, at));
    }

    /// The oldest segment, when compacting it is worth it: it holds a few live entries
    /// and keeps newer segments from being deleted (they may only go after it). Only
    /// between groups, so that the copies are in the very next group and the segment
    /// is deleted when that group is on disk, never before.
    pub fn compaction_candidate(&self) -> Option<u32> {
        if self.in_flight || self.segments.len() < COMPACT_MIN_PINNED + 1 {
            return None;
        }
        self.segments
            .front()
            .filter(|s| {
                s.live > 0
                    && s.live <= COMPACT_MAX_LIVE
                    && s.live * COMPACT_LIVE_FRACTION <= s.entries
            })
            .map(|s| s.number)
    }

    /// Where the live entries of segment `number` may be: (queue, sequence range) per
    /// run in it, and each entry copied into it before.
    pub fn ranges_in(&self, number: u32) -> Vec<(QueueId, std::ops::Range<u64>)> {
        let mut out = Vec::new();
        for (queue, runs) in &self.runs {
            for (i, run) in runs.iter().enumerate() {
                if run.segment == number && run.live > 0 {
                    let end = runs.get(i + 1).map_or(u64::MAX, |next| next.first_seq);
                    out.push((*queue, run.first_seq..end));
                }
            }
        }
        for (queue, moved) in &self.relocated {
            for (&seq, &segment) in moved {
                if segment == number {
                    out.push((*queue, seq..seq + 1));
                }
            }
        }
        out
    }

    /// Copies a live entry of segment `from` forward: it counts out of `from` now and
    /// into the segment of the next group, which writes the copy. Returns false if the
    /// store does not count it in `from` (nothing is copied then).
    pub fn relocate(&mut self, queue: QueueId, seq: u64, msg: &LocalMessage, from: u32) -> bool {
        if self.is_withdrawn(queue, seq) {
            // Nacked: it stays out of the durable state.
            return false;
        }
        let copied_to = self
            .relocated
            .get(&queue)
            .and_then(|moved| moved.get(&seq).copied());
        let counted = match copied_to {
            Some(segment) if segment == from => self
                .relocated
                .get_mut(&queue)
                .is_some_and(|moved| moved.remove(&seq).is_some()),
            // Copied elsewhere already: its run no longer counts it.
            Some(_) => false,
            None => self.runs.get_mut(&queue).is_some_and(|runs| {
                let at = runs.partition_point(|r| r.first_seq <= seq);
                match at.checked_sub(1).and_then(|i| runs.get_mut(i)) {
                    Some(run) if run.segment == from && run.live > 0 => {
                        run.live -= 1;
                        true
                    }
                    _ => false,
                }
            }),
        };
        if !counted {
            return false;
        }
        self.count_out(from, 1);
        let mut queues = QueueSeqs::new();
        queues.push((queue, seq));
        // Copies go first in the group (`staged_copies` of them).
        self.staged
            .insert(self.staged_copies, (Rc::clone(msg), queues));
        self.staged_copies += 1;
        true
    }

    fn add_live(&mut self, queue: QueueId, seq: u64, segment: u32, offset: u64) {
        let runs = self.runs.entry(queue).or_default();
        match runs.back_mut() {
            Some(run) if run.segment == segment => run.live += 1,
            _ => runs.push_back(Run {
                first_seq: seq,
                segment,
                live: 1,
                offset,
            }),
        }
        self.count_in(segment, 1);
    }

    /// Counts a stored entry out. False when the store does not know it (its queue was
    /// deleted meanwhile): no record is needed then.
    fn remove_live(&mut self, queue: QueueId, seq: u64) -> bool {
        if let Some(w) = self.withdrawn.get_mut(&queue) {
            if w.remove(&seq) && w.is_empty() {
                self.withdrawn.remove(&queue);
            }
        }
        if let Some(segment) = self.relocated.get_mut(&queue).and_then(|m| m.remove(&seq)) {
            self.count_out(segment, 1);
            return true;
        }
        let Some(runs) = self.runs.get_mut(&queue) else {
            return false;
        };
        let at = runs.partition_point(|r| r.first_seq <= seq);
        if at == 0 {
            return false;
        }
        let run = &mut runs[at - 1];
        if run.live == 0 {
            return false;
        }
        run.live -= 1;
        let segment = run.segment;
        // Runs emptied at the front are done; the last one may still grow.
        while runs.len() > 1 && runs.front().is_some_and(|r| r.live == 0) {
            runs.pop_front();
        }
        self.count_out(segment, 1);
        true
    }

    /// The group was written (and synced; its confirms may go now): returns the
    /// segments that can be deleted, oldest first (never the active one).
    pub fn committed(&mut self, group: &Group) -> Vec<(u32, u64)> {
        self.in_flight = false;
        for (&queue, &seq) in &group.upto {
            self.mark_committed(queue, seq);
        }
        if !group.data.is_empty() {
            self.stats.commits += 1;
            self.stats.bytes += group.data.len() as u64;
            if self.fsync {
                self.stats.fsyncs += 1;
            }
        }
        self.dead_segments()
    }

    /// Takes the segments that can be deleted, oldest first (never the active one):
    /// those at the front with nothing live. Also right after a failed write: what the
    /// failed group counted out is gone from its queues, so its records can only
    /// cancel messages of those segments.
    pub fn dead_segments(&mut self) -> Vec<(u32, u64)> {
        let mut dead = Vec::new();
        while self.segments.len() > 1 && self.segments.front().is_some_and(|s| s.live == 0) {
            if let Some(s) = self.segments.pop_front() {
                dead.push((s.number, s.disk_bytes()));
            }
        }
        dead
    }
}

#[cfg(test)]
mod tests;
