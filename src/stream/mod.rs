//! Owns: one stream (`x-queue-type = stream`) on its home shard — the messages appended
//! this turn, sealing them into chunks at the next offsets (each message given its
//! `x-stream-offset` header once, `header`), what is committed (on disk) and what is
//! being written, the index of its segments (`index`), its tail cache (`cache`), its
//! readers and their dispatch (`reader`), its offset-tracking table (`tracking`),
//! retention and reader lag (`retention`).
//!
//! Does not: do I/O (a [`StreamWrite`] and the readers' [`ReadPlan`]s go to the shard,
//! which reports back), read the clock (every call takes `now`, and `now_ms`, the wall
//! clock chunks are stamped with), talk to other shards, or know sockets.
//!
//! # Invariants
//! - `committed <= assigned`; offsets below `committed` are on disk and the only ones
//!   readers are given; `assigned - committed` are in the write in flight.
//! - At most one write is in flight; nothing is sealed while it is.
//! - The cache holds consecutive offsets ending at `assigned` (when not empty).

pub mod cache;
pub mod header;
pub mod index;
pub mod reader;
pub mod retention;
pub mod tracking;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::model::ids::QueueId;
use crate::model::message::LocalMessage;
use crate::policy::rate::RateEstimator;
use crate::policy::stream_args::{ConsumerArgs, OffsetSpec, StreamSettings};
use crate::protocol::{FieldTable, ShortStr};
use crate::store::stream_log::{self, Appended, RecoveredChunk, RecoveredRecord};

use cache::{Cached, TailCache};
use index::Index;
pub use reader::{ReadDone, ReadPlan, Reader, Readers, Skipped, StreamDelivery};
use retention::Lag;
use tracking::Tracking;

/// A chunk holds at most this many bytes of entries (a turn's appends beyond it are
/// several chunks).
const CHUNK_MAX_BYTES: usize = 4 << 20;
/// How fast the publish rate forgets.
const RATE_HALF_LIFE: Duration = Duration::from_secs(5);

/// Totals since the stream was created (or recovered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// Messages appended (committed or not).
    pub appended: u64,
    pub appended_bytes: u64,
    /// Messages handed to readers.
    pub delivered: u64,
    /// Segments and messages retention removed.
    pub segments_removed: u64,
    pub messages_removed: u64,
    /// Messages whose write failed (their publishes were nacked).
    pub write_failures: u64,
}

/// What the shard writes for a stream in the group being committed: `data` at `pos` of
/// segment `segment` (a new file when `new_segment`).
#[derive(Debug)]
pub struct StreamWrite {
    pub stream: QueueId,
    pub segment: u32,
    pub pos: u64,
    pub new_segment: bool,
    pub data: Bytes,
}

/// What the write in flight holds, for its outcome.
#[derive(Debug)]
struct InFlight {
    segment: u32,
    pos: u64,
    new_segment: bool,
    first: u64,
    /// (first offset, count, timestamp, position, length) per chunk.
    chunks: Vec<(u64, u64, i64, u64, u64)>,
    len: u64,
    tracking: Vec<(ShortStr, u64)>,
    timestamp_ms: i64,
}

/// A reader whose position retention removed (STR-1002).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostPosition {
    pub tag: ShortStr,
    pub connection: String,
    /// Where it was, and where it goes on.
    pub from: u64,
    pub to: u64,
}

/// What retention did.
#[derive(Debug, Default)]
pub struct Retained {
    /// Segment files to delete.
    pub removed: Vec<u32>,
    pub lost: Vec<LostPosition>,
}

/// A reader predicted to lose its position soon (STR-1001).
#[derive(Debug, Clone, PartialEq)]
pub struct Falling {
    pub tag: ShortStr,
    pub connection: String,
    pub lag: Lag,
}

/// One stream.
#[derive(Debug)]
pub struct Stream {
    pub id: QueueId,
    pub vhost_idx: usize,
    pub vhost: String,
    pub name: ShortStr,
    /// The declare arguments.
    pub arguments: FieldTable,
    pub settings: StreamSettings,
    index: Index,
    staged: Vec<(LocalMessage, Option<Bytes>)>,
    cache: TailCache,
    readers: Readers,
    tracking: Tracking,
    assigned: u64,
    committed: u64,
    last_ts: i64,
    in_flight: Option<InFlight>,
    pub counters: StreamCounters,
    publish_rate: RateEstimator,
    publish_bytes: RateEstimator,
    /// The stream is on its shard's list of queues to dispatch this turn.
    pub in_dirty_list: bool,
}

impl Stream {
    /// A stream with nothing on disk (newly declared, or before [`Stream::recovered`]
    /// puts back what its directory holds).
    pub fn new(
        id: QueueId,
        vhost_idx: usize,
        vhost: String,
        name: ShortStr,
        arguments: FieldTable,
        max_tracked: usize,
    ) -> Stream {
        Stream {
            id,
            vhost_idx,
            vhost,
            name,
            settings: StreamSettings::from_arguments(&arguments),
            arguments,
            index: Index::default(),
            staged: Vec::new(),
            cache: TailCache::default(),
            readers: Readers::default(),
            tracking: Tracking::new(max_tracked),
            assigned: 0,
            committed: 0,
            last_ts: 0,
            in_flight: None,
            counters: StreamCounters::default(),
            publish_rate: RateEstimator::new(RATE_HALF_LIFE),
            publish_bytes: RateEstimator::new(RATE_HALF_LIFE),
            in_dirty_list: false,
        }
    }

    /// Puts back what recovery found, record by record in file order.
    pub fn recovered(&mut self, number: u32, record: RecoveredRecord) {
        match record {
            RecoveredRecord::Chunk(chunk) => self.recovered_chunk(number, chunk),
            RecoveredRecord::Tracking { snapshot, entries } => {
                self.tracking.restore(snapshot, entries)
            }
        }
    }

    /// Recovery read segment `number` up to `size` bytes (after its records). A segment
    /// without a chunk is kept only if it is the newest (it is appended to next).
    pub fn recovered_segment(&mut self, number: u32, size: u64) {
        if self.index.segment(number).is_none() {
            if self.index.active().is_some_and(|a| a.number > number) {
                return;
            }
            self.index.start_segment(number, self.committed);
        }
        self.index.grow(number, size);
    }

    fn recovered_chunk(&mut self, number: u32, chunk: RecoveredChunk) {
        if self.index.segment(number).is_none() {
            self.index.start_segment(number, chunk.header.first);
        }
        self.index.add_chunk(
            number,
            chunk.header.first,
            u64::from(chunk.header.count),
            chunk.header.timestamp_ms,
            chunk.pos,
            chunk.len,
        );
        self.committed = chunk.header.end();
        self.assigned = self.committed;
        self.last_ts = self.last_ts.max(chunk.header.timestamp_ms);
    }

    /// A message routed here, with its filter value: written with the next group.
    pub fn append(&mut self, msg: LocalMessage) {
        let filter = header::filter_value(&msg);
        self.counters.appended += 1;
        self.counters.appended_bytes += msg.accounted_size();
        self.publish_rate.record(1);
        self.publish_bytes.record(msg.accounted_size());
        self.staged.push((msg, filter));
    }

    /// Whether something waits to be sealed into a write.
    pub fn has_work(&self) -> bool {
        !self.staged.is_empty() || self.tracking.has_dirty()
    }

    /// Seals what was appended (and the tracking updates) into one write: offsets are
    /// assigned, each message is given its `x-stream-offset` header and goes to the
    /// tail cache (delivered once committed), the chunks are encoded at the end of the
    /// active segment, or at the start of a new one (with the tracking table's snapshot)
    /// once the active one holds the segment size. `None` while a write is in flight
    /// or when nothing waits.
    pub fn seal(&mut self, now_ms: i64) -> Option<StreamWrite> {
        if self.in_flight.is_some() || !self.has_work() {
            return None;
        }
        let timestamp_ms = now_ms.max(self.last_ts);
        let (segment, pos, new_segment) = match self.index.active() {
            Some(a) if a.size < self.settings.segment_size => (a.number, a.size, false),
            Some(a) => (a.number + 1, 0, true),
            None => (1, 0, true),
        };
        let mut data = BytesMut::new();
        let tracking = if new_segment && !self.tracking.is_empty() {
            let all = self.tracking.snapshot();
            stream_log::put_tracking(&mut data, segment, true, &all);
            all
        } else if self.tracking.has_dirty() {
            let changed = self.tracking.take_dirty();
            stream_log::put_tracking(&mut data, segment, false, &changed);
            changed
        } else {
            Vec::new()
        };
        let first = self.assigned;
        let staged = std::mem::take(&mut self.staged);
        let mut stored = Vec::with_capacity(staged.len());
        for (i, (msg, filter)) in staged.into_iter().enumerate() {
            let offset = first + i as u64;
            let kept = std::rc::Rc::new(header::at_offset(&msg, offset));
            stored.push((offset, kept, filter));
        }
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < stored.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < stored.len() && (end == start || bytes < CHUNK_MAX_BYTES) {
                bytes += stream_log::entry_len(stored[end].2.as_deref(), &stored[end].1);
                end += 1;
            }
            let entries: Vec<Appended<'_>> = stored[start..end]
                .iter()
                .map(|(_, msg, filter)| Appended {
                    filter: filter.as_deref(),
                    msg,
                })
                .collect();
            let at = pos + data.len() as u64;
            stream_log::put_chunk(&mut data, segment, stored[start].0, timestamp_ms, &entries);
            let len = pos + data.len() as u64 - at;
            chunks.push((stored[start].0, (end - start) as u64, timestamp_ms, at, len));
            start = end;
        }
        for (offset, msg, filter) in stored {
            self.cache.push(Cached {
                offset,
                msg,
                filter,
                timestamp_ms,
            });
        }
        self.assigned = first + chunks.iter().map(|c| c.1).sum::<u64>();
        let data = data.freeze();
        self.in_flight = Some(InFlight {
            segment,
            pos,
            new_segment,
            first,
            chunks,
            len: data.len() as u64,
            tracking,
            timestamp_ms,
        });
        Some(StreamWrite {
            stream: self.id,
            segment,
            pos,
            new_segment,
            data,
        })
    }

    /// The write in flight is on disk (`ok`) or failed. On disk: its offsets are
    /// committed, readers behind them are woken; returns whether a segment rolled over
    /// (retention should run). Failed: its offsets are taken back (nothing of it was
    /// delivered), its messages are gone (the shard nacks their publishes), its
    /// tracking entries are written again with the next write.
    pub fn write_done(&mut self, ok: bool) -> bool {
        let Some(f) = self.in_flight.take() else {
            return false;
        };
        if !ok {
            self.counters.write_failures += self.assigned - self.committed;
            self.assigned = self.committed;
            self.cache.drop_from(self.committed);
            self.tracking.unwritten(&f.tracking);
            return false;
        }
        if f.new_segment {
            self.index.start_segment(f.segment, f.first);
        }
        for (first, count, ts, pos, len) in f.chunks {
            self.index.add_chunk(f.segment, first, count, ts, pos, len);
        }
        self.index.grow(f.segment, f.pos + f.len);
        self.committed = self.assigned;
        self.last_ts = self.last_ts.max(f.timestamp_ms);
        self.readers.wake(self.committed);
        f.new_segment && self.index.segment_count() > 1
    }

    /// Applies retention: the oldest segments it removes leave the index (the shard
    /// deletes their files), readers behind the new first offset go on there.
    pub fn apply_retention(&mut self, now_ms: i64) -> Retained {
        let n = retention::segments_to_remove(&self.index, &self.settings, now_ms);
        let mut out = Retained::default();
        if n == 0 {
            return out;
        }
        for _ in 0..n {
            if let Some(seg) = self.index.remove_oldest() {
                self.counters.segments_removed += 1;
                self.counters.messages_removed += seg.messages();
                out.removed.push(seg.number);
            }
        }
        let first = self.first_offset();
        self.cache.drop_below(first);
        for (key, from) in self.readers.moved_to(first) {
            if let Some(r) = self.readers.get(key) {
                out.lost.push(LostPosition {
                    tag: r.tag.clone(),
                    connection: r.connection.clone(),
                    from,
                    to: first,
                });
            }
        }
        out
    }

    /// Where a new reader starts: after its tracked offset when it has one, else where
    /// its `x-stream-offset` says (clamped to the log). With a timestamp the reader
    /// starts at an index point and skips older chunks (the second value).
    pub fn start(&self, spec: OffsetSpec, tracked: Option<u64>, now_ms: i64) -> (u64, Option<i64>) {
        let first = self.first_offset();
        let clamp = |n: u64| n.clamp(first, self.committed);
        if let Some(t) = tracked {
            return (clamp(t.saturating_add(1)), None);
        }
        let at_time = |ts: i64| match self.index.locate_time(ts) {
            Some(r) => (r.offset.max(first), Some(ts)),
            None => (self.committed, None),
        };
        match spec {
            OffsetSpec::First => (first, None),
            OffsetSpec::Last => (
                self.index
                    .last_chunk()
                    .map_or(self.committed, |p| clamp(p.offset)),
                None,
            ),
            OffsetSpec::Next => (self.committed, None),
            OffsetSpec::Offset(n) => (clamp(u64::try_from(n).unwrap_or(0)), None),
            OffsetSpec::Timestamp(ms) => at_time(ms),
            OffsetSpec::Interval(d) => {
                at_time(now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
            }
        }
    }

    /// Adds a reader for `basic.consume` (credit comes with the consumer's grants).
    /// Returns its key and the offset it starts at.
    #[allow(clippy::too_many_arguments)]
    pub fn add_reader(
        &mut self,
        target: crate::model::ids::ConsumerTarget,
        tag: ShortStr,
        connection: String,
        prefetch: u32,
        args: &ConsumerArgs,
        generated_tag: bool,
        now_ms: i64,
    ) -> (u64, u64) {
        let tracks = args.tracks(generated_tag);
        let tracked = tracks.then(|| self.tracking.get(&tag)).flatten();
        let (next, seek) = self.start(args.offset, tracked, now_ms);
        let reader = Reader::new(
            target,
            tag,
            connection,
            prefetch,
            next,
            seek,
            args.filter.clone(),
            tracks,
        );
        (self.readers.add(reader), next)
    }

    /// Removes a reader. Returns it, and whether its tracked offset still waits to be
    /// written.
    pub fn remove_reader(&mut self, key: u64) -> Option<(Reader, bool)> {
        let r = self.readers.remove(key)?;
        let dirty = r.tracking && self.tracking.is_dirty(&r.tag);
        Some((r, dirty))
    }

    /// The readers, for the shard's bookkeeping (targets) and the views.
    pub fn readers(&self) -> &Readers {
        &self.readers
    }

    /// Credit from a reader's channel.
    pub fn grant(&mut self, key: u64, credit: u32, bytes: u64) {
        self.readers.grant(key, credit, bytes);
    }

    /// A reader's consumer acknowledged up to `offset`: a tracking reader's offset is
    /// kept (returns whether it changed: it is written with the next group).
    pub fn ack(&mut self, key: u64, offset: u64) -> bool {
        match self.readers.get(key) {
            Some(r) if r.tracking => {
                let tag = r.tag.clone();
                self.tracking.ack(&tag, offset)
            }
            _ => false,
        }
    }

    /// Hands up to `budget` steps of deliveries to readers with credit; reads they need
    /// go to `reads`. Returns whether work is left.
    pub fn dispatch(
        &mut self,
        budget: usize,
        out: &mut Vec<StreamDelivery>,
        reads: &mut Vec<ReadPlan>,
    ) -> bool {
        let messages = self.committed - self.index.first_offset(self.committed);
        let log = reader::LogView {
            cache: &self.cache,
            index: &self.index,
            committed: self.committed,
            entry_bytes: self.index.bytes() / messages.max(1),
        };
        let before = out.len();
        let more = self.readers.dispatch(&log, budget, out, reads);
        self.counters.delivered += (out.len() - before) as u64;
        more
    }

    /// Whether a dispatch would find work.
    pub fn wants_dispatch(&self) -> bool {
        self.readers.has_pending()
    }

    /// A reader's read came back.
    pub fn read_done(&mut self, done: ReadDone) -> Option<Skipped> {
        self.readers.read_done(done, &self.index)
    }

    /// Keeps at most `limit` bytes of cached messages (what is not on disk yet stays).
    pub fn trim_cache(&mut self, limit: u64) {
        self.cache.trim(limit, self.committed);
    }

    /// Folds rates; returns the readers predicted to lose their position within
    /// `horizon` (each at most once per `repeat_gap`).
    pub fn tick(
        &mut self,
        now: Instant,
        now_ms: i64,
        horizon: Duration,
        repeat_gap: Duration,
    ) -> Vec<Falling> {
        self.publish_rate.tick(now);
        self.publish_bytes.tick(now);
        self.readers.tick(now);
        if self.settings.max_bytes.is_none() && self.settings.max_age.is_none() {
            return Vec::new();
        }
        let mut falling = Vec::new();
        let mut warned = Vec::new();
        for r in self.readers.iter() {
            if r.warned_at
                .is_some_and(|at| now.saturating_duration_since(at) < repeat_gap)
            {
                continue;
            }
            let lag = self.lag(r, now_ms);
            if lag
                .seconds_to_retention
                .is_some_and(|s| s <= horizon.as_secs_f64())
            {
                warned.push(r.key);
                falling.push(Falling {
                    tag: r.tag.clone(),
                    connection: r.connection.clone(),
                    lag,
                });
            }
        }
        for key in warned {
            if let Some(r) = self.readers.get_mut(key) {
                r.warned_at = Some(now);
            }
        }
        falling
    }

    /// How far `reader` is behind, and when retention is predicted to remove its
    /// position.
    pub fn lag(&self, reader: &Reader, now_ms: i64) -> Lag {
        let rates = retention::Rates {
            publish_bytes: self.publish_bytes.rate(),
            reader_messages: reader.rate(),
        };
        retention::lag(
            &self.index,
            &self.settings,
            self.committed,
            reader.position(),
            &rates,
            now_ms,
        )
    }

    /// The first offset in the log (the committed end when it is empty).
    pub fn first_offset(&self) -> u64 {
        self.index.first_offset(self.committed)
    }

    /// One past the last offset on disk.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Messages in the log.
    pub fn messages(&self) -> u64 {
        self.committed - self.first_offset()
    }

    /// Bytes of its segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.index.bytes()
    }

    pub fn segment_count(&self) -> usize {
        self.index.segment_count()
    }

    /// Bytes of messages in its tail cache.
    pub fn cache_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    /// Messages appended per second, and bytes.
    pub fn publish_rates(&self) -> (f64, f64) {
        (self.publish_rate.rate(), self.publish_bytes.rate())
    }

    /// Whether acked offsets wait to be written.
    pub fn tracking_dirty(&self) -> bool {
        self.tracking.has_dirty()
    }

    /// Consumer tags with a tracked offset.
    pub fn tracked(&self) -> usize {
        self.tracking.len()
    }

    /// The tracked offset of `tag`.
    pub fn tracked_offset(&self, tag: &ShortStr) -> Option<u64> {
        self.tracking.get(tag)
    }

    /// Readers with a disk read planned or in flight.
    pub fn reading(&self) -> usize {
        self.readers.reading()
    }
}

#[cfg(test)]
mod tests;
