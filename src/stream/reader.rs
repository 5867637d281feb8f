//! Owns: a stream's readers — each one's next offset, credit (messages and bytes,
//! granted by its consumer's channel exactly as a queue consumer's), filter, tracking,
//! the messages read back from disk for it (at most its credit), its disk read in
//! flight — and the dispatch pass over them: from what was read back, from the tail
//! cache, or a read plan when the next offset is only on disk.
//!
//! Does not: read files (a [`ReadPlan`] goes to the shard, which reads and returns a
//! [`ReadDone`]), or know where a consumer lives beyond its [`ConsumerTarget`].
//!
//! # Invariants
//! - `list` is sorted by key (keys only grow and readers are appended).
//! - `pending` lists each reader at most once (`queued` says whether it is listed);
//!   a reader with credit and something to deliver is listed, or is waiting for its
//!   read (`reading`). `parked` lists the readers that have credit and are caught up
//!   with the committed end (`parked` flag): new offsets wake those alone, so a commit
//!   costs nothing for readers without credit.
//! - `loaded` holds at most the reader's credit, in offset order, all below `next`.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::model::ids::ConsumerTarget;
use crate::model::message::LocalMessage;
use crate::policy::rate::RateEstimator;
use crate::policy::stream_args::FilterSpec;
use crate::protocol::ShortStr;
use crate::store::stream_log::Scanned;

use super::cache::TailCache;
use super::index::{Index, ReadFrom};

/// Bytes a read-back reads at least, and at most (more only for one larger record).
pub const READ_MIN: u64 = 64 * 1024;
pub const READ_MAX: u64 = 1 << 20;
/// How fast a reader's delivery rate forgets.
const RATE_HALF_LIFE: Duration = Duration::from_secs(5);

/// One reader of a stream.
#[derive(Debug)]
pub struct Reader {
    pub key: u64,
    pub target: ConsumerTarget,
    pub tag: ShortStr,
    /// The consumer's connection, for the operator views.
    pub connection: String,
    pub prefetch: u32,
    pub credit: u32,
    pub credit_bytes: u64,
    /// Whether its acknowledged offset is tracked (under its tag).
    pub tracking: bool,
    /// The offset it started at.
    pub started_at: u64,
    /// Messages delivered to it.
    pub delivered: u64,
    next: u64,
    /// A `timestamp` start not yet resolved: skip chunks written before it.
    seek_ts: Option<i64>,
    filter: Option<FilterSpec>,
    loaded: VecDeque<(u64, LocalMessage)>,
    reading: bool,
    /// Where its next disk read starts, when known (a record boundary at or before
    /// `next`), and how much to read there when the last read was too short for a
    /// record.
    read_at: Option<ReadFrom>,
    read_len: Option<u64>,
    /// Bumped whenever its position moves under a read in flight: that read's result
    /// is dropped.
    epoch: u64,
    queued: bool,
    parked: bool,
    rate: RateEstimator,
    /// When STR-1001 was last logged about it.
    pub warned_at: Option<Instant>,
}

impl Reader {
    /// A reader at `next` (and, for a timestamp start, skipping chunks before
    /// `seek_ts`), with no credit yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        target: ConsumerTarget,
        tag: ShortStr,
        connection: String,
        prefetch: u32,
        next: u64,
        seek_ts: Option<i64>,
        filter: Option<FilterSpec>,
        tracking: bool,
    ) -> Reader {
        Reader {
            key: 0,
            target,
            tag,
            connection,
            prefetch,
            credit: 0,
            credit_bytes: 0,
            tracking,
            started_at: next,
            delivered: 0,
            next,
            seek_ts,
            filter,
            loaded: VecDeque::new(),
            reading: false,
            read_at: None,
            read_len: None,
            epoch: 0,
            queued: false,
            parked: false,
            rate: RateEstimator::new(RATE_HALF_LIFE),
            warned_at: None,
        }
    }

    /// The next offset it will be given (read-back messages not yet delivered count as
    /// not given).
    pub fn position(&self) -> u64 {
        self.loaded.front().map_or(self.next, |(o, _)| *o)
    }

    /// Messages delivered per second (an EWMA).
    pub fn rate(&self) -> f64 {
        self.rate.rate()
    }

    /// Messages read back from disk and waiting for it.
    pub fn loaded(&self) -> usize {
        self.loaded.len()
    }

    /// Whether a disk read for it is planned or running.
    pub fn is_reading(&self) -> bool {
        self.reading
    }

    fn has_credit(&self) -> bool {
        self.credit > 0 && self.credit_bytes > 0
    }

    fn wants(&self, filter: Option<&[u8]>) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(filter))
    }
}

/// One message for one reader.
#[derive(Debug)]
pub struct StreamDelivery {
    pub target: ConsumerTarget,
    pub offset: u64,
    pub msg: LocalMessage,
}

/// A disk read one reader needs: `len` bytes of segment `segment` at `pos`.
#[derive(Clone, Debug)]
pub struct ReadPlan {
    pub reader: u64,
    pub epoch: u64,
    pub segment: u32,
    pub pos: u64,
    pub len: u64,
    pub next: u64,
    pub seek_ts: Option<i64>,
    pub filter: Option<FilterSpec>,
    pub max_messages: usize,
    pub max_bytes: u64,
}

/// What a read brought back.
#[derive(Debug)]
pub struct ReadDone {
    pub reader: u64,
    pub epoch: u64,
    pub segment: u32,
    pub pos: u64,
    /// The scan of what was read, or the read failed (the file is gone: retention
    /// removed it meanwhile).
    pub scanned: Option<Scanned>,
}

/// A reader that skipped unreadable data (a chunk whose checksum fails).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub tag: ShortStr,
    pub connection: String,
    pub segment: u32,
    pub from: u64,
    pub to: u64,
}

/// What dispatch reads of the stream.
pub struct LogView<'a> {
    pub cache: &'a TailCache,
    pub index: &'a Index,
    /// One past the last committed offset: nothing at or above it is delivered.
    pub committed: u64,
    /// Average bytes per entry on disk (sizes reads to credit).
    pub entry_bytes: u64,
}

/// A stream's readers.
#[derive(Debug, Default)]
pub struct Readers {
    list: Vec<Reader>,
    pending: VecDeque<u64>,
    parked: Vec<u64>,
    next_key: u64,
    /// Readers with a read planned or in flight.
    reading: usize,
}

impl Readers {
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Reader> {
        self.list.iter()
    }

    pub fn get(&self, key: u64) -> Option<&Reader> {
        self.at(key).map(|i| &self.list[i])
    }

    fn at(&self, key: u64) -> Option<usize> {
        self.list.binary_search_by_key(&key, |r| r.key).ok()
    }

    /// Adds a reader; returns its key.
    pub fn add(&mut self, mut reader: Reader) -> u64 {
        self.next_key += 1;
        reader.key = self.next_key;
        self.list.push(reader);
        self.next_key
    }

    /// Removes a reader.
    pub fn remove(&mut self, key: u64) -> Option<Reader> {
        let i = self.at(key)?;
        let r = self.list.remove(i);
        if r.reading {
            self.reading -= 1;
        }
        Some(r)
    }

    /// Readers with a disk read planned or in flight.
    pub fn reading(&self) -> usize {
        self.reading
    }

    fn enqueue(&mut self, i: usize) {
        if let Some(r) = self.list.get_mut(i) {
            if !r.queued {
                r.queued = true;
                self.pending.push_back(r.key);
            }
        }
    }

    /// More credit for a reader.
    pub fn grant(&mut self, key: u64, credit: u32, bytes: u64) {
        if let Some(i) = self.at(key) {
            let r = &mut self.list[i];
            r.credit = r.credit.saturating_add(credit);
            r.credit_bytes = r.credit_bytes.saturating_add(bytes);
            self.enqueue(i);
        }
    }

    /// New offsets are committed: the readers waiting for them are listed (a new
    /// reader, one with credit returned, or one whose read came back is listed when
    /// that happens).
    pub fn wake(&mut self, committed: u64) {
        for key in std::mem::take(&mut self.parked) {
            let Some(i) = self.at(key) else {
                continue;
            };
            let r = &mut self.list[i];
            r.parked = false;
            if r.has_credit() && !r.reading && r.next < committed {
                self.enqueue(i);
            } else if r.has_credit() && !r.reading {
                r.parked = true;
                self.parked.push(key);
            }
        }
    }

    /// Whether dispatch has anything to look at.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Hands up to `budget` steps of work (a delivery, or a cached message passed by a
    /// filter) to the listed readers, in turn. Deliveries go to `out`, reads the
    /// readers now need to `reads`. Returns whether work is left for another call.
    pub fn dispatch(
        &mut self,
        log: &LogView<'_>,
        budget: usize,
        out: &mut Vec<StreamDelivery>,
        reads: &mut Vec<ReadPlan>,
    ) -> bool {
        let mut steps = 0;
        while let Some(key) = self.pending.pop_front() {
            let Some(i) = self.at(key) else {
                continue;
            };
            self.list[i].queued = false;
            let r = &mut self.list[i];
            let more = serve(r, log, budget - steps, &mut steps, out);
            match more {
                Serve::CaughtUp => {
                    if !r.parked {
                        r.parked = true;
                        self.parked.push(key);
                    }
                }
                Serve::Done => {}
                Serve::Budget => {
                    self.enqueue(i);
                    return true;
                }
                Serve::Disk => match plan_read(r, log) {
                    Some(plan) => {
                        r.reading = true;
                        self.reading += 1;
                        reads.push(plan);
                    }
                    // Nothing on disk it can read now: it waits for new offsets.
                    None if !r.parked => {
                        r.parked = true;
                        self.parked.push(key);
                    }
                    None => {}
                },
            }
            if steps >= budget {
                return self.has_pending();
            }
        }
        false
    }

    /// A read came back: its messages wait in the reader's list, its position moves
    /// on. Returns a skip when the read hit unreadable data.
    pub fn read_done(&mut self, done: ReadDone, index: &Index) -> Option<Skipped> {
        let i = self.at(done.reader)?;
        let r = &mut self.list[i];
        if r.epoch != done.epoch || !r.reading {
            return None;
        }
        r.reading = false;
        self.reading -= 1;
        let mut skipped = None;
        match done.scanned {
            Some(s) => {
                for (offset, msg) in s.found {
                    r.loaded.push_back((offset, Rc::new(msg)));
                }
                r.next = r.next.max(s.next);
                if s.seek_resolved {
                    r.seek_ts = None;
                }
                let segment = index.segment(done.segment);
                if let Some(len) = s.wants_len {
                    r.read_at = Some(ReadFrom {
                        segment: done.segment,
                        pos: done.pos,
                        offset: r.next,
                    });
                    r.read_len = Some(len);
                } else if s.damaged {
                    // Past the damage nothing of this segment is readable for sure:
                    // the reader goes on at the next one.
                    let to = segment.map_or(r.next, |seg| seg.end_offset.max(r.next));
                    skipped = Some(Skipped {
                        tag: r.tag.clone(),
                        connection: r.connection.clone(),
                        segment: done.segment,
                        from: r.next,
                        to,
                    });
                    r.next = to;
                    r.read_at = None;
                    r.read_len = None;
                } else {
                    r.read_len = None;
                    r.read_at = match segment {
                        Some(seg) if s.resume < seg.size => Some(ReadFrom {
                            segment: done.segment,
                            pos: s.resume,
                            offset: r.next,
                        }),
                        Some(_) => index.next_segment(done.segment).map(|n| ReadFrom {
                            segment: n.number,
                            pos: 0,
                            offset: n.first_offset,
                        }),
                        None => None,
                    };
                }
            }
            None => {
                r.read_at = None;
                r.read_len = None;
            }
        }
        if r.has_credit() {
            self.enqueue(i);
        }
        skipped
    }

    /// Retention removed every offset below `first`: readers behind it go on at
    /// `first` (a read in flight is dropped). Returns (reader key, its old position)
    /// for each one moved.
    pub fn moved_to(&mut self, first: u64) -> Vec<(u64, u64)> {
        let mut moved = Vec::new();
        for i in 0..self.list.len() {
            let r = &mut self.list[i];
            if r.next >= first {
                continue;
            }
            moved.push((r.key, r.position()));
            r.next = first;
            r.read_at = None;
            r.read_len = None;
            r.epoch += 1;
            if r.reading {
                r.reading = false;
                self.reading -= 1;
            }
            if r.has_credit() {
                self.enqueue(i);
            }
        }
        moved
    }

    /// Folds each reader's deliveries into its rate.
    pub fn tick(&mut self, now: Instant) {
        for r in &mut self.list {
            r.rate.tick(now);
        }
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut Reader> {
        self.at(key).map(|i| &mut self.list[i])
    }
}

/// How serving a reader ended.
enum Serve {
    /// Nothing more to do until credit or a read arrives.
    Done,
    /// It has credit and is at the committed end: new offsets wake it.
    CaughtUp,
    /// The budget ran out with work left.
    Budget,
    /// Its next offset is only on disk.
    Disk,
}

fn serve(
    r: &mut Reader,
    log: &LogView<'_>,
    budget: usize,
    steps: &mut usize,
    out: &mut Vec<StreamDelivery>,
) -> Serve {
    let mut spent = 0;
    let deliver = |r: &mut Reader, offset: u64, msg: &LocalMessage, out: &mut Vec<_>| {
        let size = msg.accounted_size();
        r.credit -= 1;
        r.credit_bytes = r.credit_bytes.saturating_sub(size);
        r.delivered += 1;
        r.rate.record(1);
        out.push(StreamDelivery {
            target: r.target,
            offset,
            msg: Rc::clone(msg),
        });
    };
    loop {
        if !r.has_credit() {
            *steps += spent;
            return Serve::Done;
        }
        if spent >= budget {
            *steps += spent;
            return Serve::Budget;
        }
        if let Some((offset, msg)) = r.loaded.pop_front() {
            deliver(r, offset, &msg, out);
            spent += 1;
            continue;
        }
        if r.reading {
            *steps += spent;
            return Serve::Done;
        }
        if r.next >= log.committed {
            *steps += spent;
            return Serve::CaughtUp;
        }
        let Some(entry) = log.cache.get(r.next) else {
            *steps += spent;
            return Serve::Disk;
        };
        spent += 1;
        if let Some(ts) = r.seek_ts {
            if entry.timestamp_ms < ts {
                r.next += 1;
                continue;
            }
            r.seek_ts = None;
        }
        r.next += 1;
        r.read_at = None;
        if r.wants(entry.filter.as_deref()) {
            deliver(r, entry.offset, &entry.msg, out);
        }
    }
}

/// Where and how much to read for a reader whose next offset is not in the cache.
fn plan_read(r: &mut Reader, log: &LogView<'_>) -> Option<ReadPlan> {
    let index = log.index;
    let mut from = match r.read_at {
        Some(at) if at.offset <= r.next => at,
        _ => {
            let located = match r.seek_ts {
                Some(ts) => index.locate_time(ts),
                None => index.locate(r.next),
            };
            match located {
                Some(at) => at,
                None => {
                    // Nothing on disk at or after it that is not in the cache: it is
                    // caught up with what is committed.
                    r.next = r.next.max(log.committed);
                    return None;
                }
            }
        }
    };
    if index.segment(from.segment).is_none() {
        // Retention removed the segment it was to read: where its next offset is now.
        from = index.locate(r.next)?;
    }
    // Past a segment's end: the next segment's start.
    let seg = loop {
        let seg = index.segment(from.segment)?;
        if from.pos < seg.size {
            break seg;
        }
        let next = index.next_segment(from.segment)?;
        from = ReadFrom {
            segment: next.number,
            pos: 0,
            offset: next.first_offset,
        };
    };
    let max_messages = r.credit as usize;
    let want = (max_messages as u64)
        .saturating_mul(log.entry_bytes.max(64))
        .saturating_mul(5)
        / 4;
    let len = r
        .read_len
        .unwrap_or_else(|| want.clamp(READ_MIN, READ_MAX))
        .min(seg.size - from.pos);
    r.read_at = Some(from);
    Some(ReadPlan {
        reader: r.key,
        epoch: r.epoch,
        segment: from.segment,
        pos: from.pos,
        len,
        next: r.next,
        seek_ts: r.seek_ts,
        filter: r.filter.clone(),
        max_messages,
        max_bytes: r.credit_bytes,
    })
}
