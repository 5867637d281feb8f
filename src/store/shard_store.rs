//! Owns: one shard's message store at run time — the segment files of the durable
//! queues the shard homes, the records staged during a turn (persistent messages
//! entering durable queues, once per message however many of them it entered; what the
//! queues journaled), sealing them into groups (one write and one fdatasync per group
//! while the next group gathers), how many stored entries each segment still holds,
//! and segment garbage collection.
//!
//! Does not: decide what is durable (queues say so when they are created), read
//! segments back (`recovery`), do the I/O or hold confirms (`shard::persist` does both:
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

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use crate::model::ids::{IdMap, QueueId};
use crate::model::message::LocalMessage;

use super::message_log::{self, QueueSeqs};
use super::record;
use crate::model::journal::{self, Journal};

/// One segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub number: u32,
    /// Bytes in the file (what has been written, or is being written).
    pub size: u64,
    /// Stored entries in it that are still in their queues.
    pub live: u64,
}

/// Consecutive sequence numbers of one queue stored in one segment.
#[derive(Clone, Copy, Debug)]
struct Run {
    first_seq: u64,
    segment: u32,
    live: u64,
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
}

/// A shard's store.
pub struct ShardStore {
    dir: PathBuf,
    segment_size: u64,
    pub fsync: bool,
    segments: VecDeque<SegmentInfo>,
    /// The active segment's open file, once opened.
    pub active_file: Option<Rc<tokio_uring::fs::File>>,
    runs: IdMap<QueueId, VecDeque<Run>>,
    staged: Vec<(LocalMessage, QueueSeqs)>,
    /// Stored queue entries staged since start: a caller compares it before and after
    /// enqueueing to learn whether a publish must wait for the next group.
    staged_refs: u64,
    deleted: Vec<QueueId>,
    scratch: Journal,
    /// A group is being written.
    pub in_flight: bool,
    pub stats: StoreStats,
}

impl ShardStore {
    /// A store over the segments recovery found (oldest first, with their live counts),
    /// and the queue runs it rebuilt.
    pub fn new(
        dir: PathBuf,
        segment_size: u64,
        fsync: bool,
        segments: Vec<SegmentInfo>,
        runs: Vec<(QueueId, u64, u32, u64)>,
    ) -> ShardStore {
        let mut store = ShardStore {
            dir,
            segment_size: segment_size.max(4096),
            fsync,
            segments: segments.into(),
            active_file: None,
            runs: IdMap::default(),
            staged: Vec::new(),
            staged_refs: 0,
            deleted: Vec::new(),
            scratch: Journal::default(),
            in_flight: false,
            stats: StoreStats::default(),
        };
        for (queue, first_seq, segment, live) in runs {
            store.runs.entry(queue).or_default().push_back(Run {
                first_seq,
                segment,
                live,
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

    /// Bytes of this shard's segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
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
        if let Some((last, queues)) = self.staged.last_mut() {
            if Rc::ptr_eq(last, msg) && queues.len() < u16::MAX as usize {
                queues.push((queue, seq));
                return;
            }
        }
        let mut queues = QueueSeqs::new();
        queues.push((queue, seq));
        self.staged.push((Rc::clone(msg), queues));
    }

    /// A durable queue of this shard was deleted: its entries no longer count, and no
    /// record is needed (the definitions log says it is gone).
    pub fn queue_deleted(&mut self, queue: QueueId) {
        self.deleted.push(queue);
    }

    /// Whether there is anything to commit.
    pub fn has_work(&self) -> bool {
        !self.staged.is_empty() || !self.deleted.is_empty() || !journal::is_empty()
    }

    /// Seals what was staged and journaled into a group for the active segment (a new
    /// one when the active segment is full), and updates the live counts. `None` when a
    /// group is already being written or nothing waits.
    pub fn seal(&mut self) -> Option<Group> {
        if self.in_flight || !self.has_work() {
            return None;
        }
        journal::swap(&mut self.scratch);
        let mut new_file = false;
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
            self.segments.push_back(SegmentInfo {
                number,
                size: 0,
                live: 0,
            });
            new_file = true;
        }
        let (segment, offset) = match self.segments.back() {
            Some(s) => (s.number, s.size),
            None => (1, 0),
        };
        let mut out = BytesMut::new();
        let staged = std::mem::take(&mut self.staged);
        for (msg, queues) in &staged {
            out.reserve(record::HEADER + message_log::message_len(queues.len(), msg));
            record::append(&mut out, |o| message_log::put_message(o, queues, msg));
            for &(queue, seq) in queues {
                self.add_live(queue, seq, segment);
            }
        }
        drop(staged);
        for queue in self.deleted.drain(..) {
            if let Some(runs) = self.runs.remove(&queue) {
                for run in runs {
                    if let Some(s) = self.segments.iter_mut().find(|s| s.number == run.segment) {
                        s.live = s.live.saturating_sub(run.live);
                    }
                }
            }
        }
        let mut gone = std::mem::take(&mut self.scratch.gone);
        gone.retain(|&(queue, seq)| self.remove_live(queue, seq));
        if !gone.is_empty() {
            record::append(&mut out, |o| message_log::put_pairs(o, false, &gone));
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
                record::append(&mut out, |o| message_log::put_pairs(o, true, &highest));
            }
        }
        self.scratch.delivered = delivered;
        if let Some(s) = self.segments.back_mut() {
            s.size += out.len() as u64;
        }
        self.in_flight = true;
        Some(Group {
            data: out.freeze(),
            segment,
            offset,
            new_file,
        })
    }

    fn add_live(&mut self, queue: QueueId, seq: u64, segment: u32) {
        let runs = self.runs.entry(queue).or_default();
        match runs.back_mut() {
            Some(run) if run.segment == segment => run.live += 1,
            _ => runs.push_back(Run {
                first_seq: seq,
                segment,
                live: 1,
            }),
        }
        if let Some(s) = self.segments.back_mut() {
            if s.number == segment {
                s.live += 1;
            }
        }
    }

    /// Counts a stored entry out. False when the store does not know it (its queue was
    /// deleted meanwhile): no record is needed then.
    fn remove_live(&mut self, queue: QueueId, seq: u64) -> bool {
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
        if let Some(s) = self.segments.iter_mut().find(|s| s.number == segment) {
            s.live = s.live.saturating_sub(1);
        }
        true
    }

    /// The group was written (and synced; its confirms may go now): returns the
    /// segments that can be deleted, oldest first (never the active one).
    pub fn committed(&mut self, group: &Group) -> Vec<u32> {
        self.in_flight = false;
        self.stats.commits += 1;
        self.stats.bytes += group.data.len() as u64;
        if self.fsync {
            self.stats.fsyncs += 1;
        }
        let mut dead = Vec::new();
        while self.segments.len() > 1 && self.segments.front().is_some_and(|s| s.live == 0) {
            if let Some(s) = self.segments.pop_front() {
                dead.push(s.number);
            }
        }
        dead
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::message::{BodyChunks, Message};

    fn msg(body: &'static [u8]) -> LocalMessage {
        let mut chunks = BodyChunks::new();
        chunks.push(Bytes::from_static(body));
        Rc::new(Message::new(
            "".into(),
            "q".into(),
            Bytes::from_static(&[0x10, 0x00, 2]),
            chunks,
            body.len() as u64,
        ))
    }

    fn store(segment_size: u64) -> ShardStore {
        ShardStore::new(
            PathBuf::from("/nonexistent"),
            segment_size,
            true,
            Vec::new(),
            Vec::new(),
        )
    }

    #[test]
    fn a_message_in_two_queues_is_one_record() {
        let mut s = store(1 << 20);
        let m = msg(b"body");
        s.stage(QueueId(1), 1, &m);
        s.stage(QueueId(2), 1, &m);
        let g = s.seal().expect("group");
        let records: Vec<_> = record::Records::new(g.data.clone()).collect();
        assert_eq!(records.len(), 1);
        assert!(g.new_file);
        assert_eq!(s.segments[0].live, 2);
        assert!(s.seal().is_none(), "one group at a time");
    }

    #[test]
    fn segments_roll_and_are_collected_in_order_only() {
        let mut s = store(4096);
        let big = msg(&[7u8; 5000]);
        // Segment 1 holds q1#1, segment 2 holds q1#2.
        s.stage(QueueId(1), 1, &big);
        let g1 = s.seal().expect("g1");
        s.committed(&g1);
        s.stage(QueueId(1), 2, &big);
        let g2 = s.seal().expect("g2");
        assert_eq!((g2.segment, g2.new_file), (2, true));
        s.committed(&g2);
        // The newer message goes first: nothing can be collected, segment 1 still lives.
        journal::gone(QueueId(1), 2);
        s.stage(QueueId(1), 3, &big);
        let g3 = s.seal().expect("g3");
        let dead = s.committed(&g3);
        assert!(dead.is_empty());
        journal::gone(QueueId(1), 1);
        journal::gone(QueueId(1), 3);
        let g4 = s.seal().expect("g4");
        let dead = s.committed(&g4);
        assert_eq!(
            dead,
            vec![1, 2, 3],
            "segment 3 held only q1#3; the gone records went to 4"
        );
        assert_eq!(s.segment_count(), 1);
    }

    #[test]
    fn a_deleted_queue_frees_its_segments_without_records() {
        let mut s = store(4096);
        let big = msg(&[1u8; 5000]);
        s.stage(QueueId(5), 1, &big);
        let g = s.seal().expect("g");
        s.committed(&g);
        s.stage(QueueId(6), 1, &big);
        let g = s.seal().expect("g");
        s.committed(&g);
        s.queue_deleted(QueueId(5));
        journal::gone(QueueId(5), 1);
        let g = s.seal().expect("g");
        assert!(g.data.is_empty(), "nothing to write for a deleted queue");
        let dead = s.committed(&g);
        assert_eq!(dead, vec![1]);
    }
}
