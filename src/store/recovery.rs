//! Owns: reading the message segments back at start — every shard directory's records
//! in file order, skipping a damaged region in the middle of a file (reframed in place
//! as a hole record, every good record after it kept) and cutting a damaged tail off
//! (the file is truncated there), both logged as MST-1010 — and turning what the
//! records say into each durable queue's entries (in sequence order, redelivered when
//! the queue had delivered them) plus the segment live counts and queue runs the shard
//! store continues from.
//!
//! Does not: decide which queues exist (the definitions do; entries of a queue that is
//! no longer defined are dropped) or re-home queues (`rehome` rewrites the segments when
//! the shard count changed, then this reads the result).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::model::ids::QueueId;
use crate::model::message::{BodyChunks, Message};
use crate::ops::store_event::{SkippedRegions, StoreEvent};
use crate::protocol::ShortStr;

use super::message_log::{self, Logged};
use super::record::{self, Damage, Records, Skipped};
use super::shard_store::SegmentInfo;

/// A recovered message as read: the shard that homes its queues builds the
/// [`Message`] on its own thread, where its memory is counted (the ledger is per
/// thread).
pub struct MessageParts {
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    pub properties: Bytes,
    pub body: Bytes,
}

impl MessageParts {
    /// The message, its body copied out of the segment read it was cut from (a read
    /// of many records must not be kept alive by one of them).
    pub fn build(&self) -> Message {
        let mut chunks = BodyChunks::new();
        let size = self.body.len() as u64;
        if size > 0 {
            chunks.push(Bytes::copy_from_slice(&self.body));
        }
        Message::new(
            self.exchange.clone(),
            self.routing_key.clone(),
            self.properties.clone(),
            chunks,
            size,
        )
    }
}

/// One recovered queue entry: its sequence number, its message (an index into
/// [`RecoveredShard::messages`]) and whether it had been delivered.
pub struct RecoveredEntry {
    pub seq: u64,
    pub message: usize,
    pub redelivered: bool,
}

/// What one shard directory held.
#[derive(Default)]
pub struct RecoveredShard {
    /// Segment files, oldest first, with their live entries.
    pub segments: Vec<SegmentInfo>,
    /// `(queue, first seq, segment, live, offset of the first record)` runs for the
    /// shard store.
    pub runs: Vec<(QueueId, u64, u32, u64, u64)>,
    /// Each queue's entries in sequence order.
    pub queues: BTreeMap<QueueId, Vec<RecoveredEntry>>,
    /// The messages the entries point at (one per message record, shared by the queues
    /// of this shard it entered; `None` when no known queue holds it).
    pub messages: Vec<Option<MessageParts>>,
}

impl RecoveredShard {
    pub fn message_count(&self) -> usize {
        self.queues.values().map(Vec::len).sum()
    }
}

/// The segment files of a directory, by number, oldest first.
pub fn segment_files(dir: &Path) -> std::io::Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(number) = number {
            out.push((number, path));
        }
    }
    out.sort_unstable_by_key(|(n, _)| *n);
    Ok(out)
}

/// The MST-1010 line for file `path`, if reading it skipped or met damage.
pub fn damage_event(
    path: &Path,
    skipped: &[Skipped],
    tail: Option<&(usize, Damage)>,
) -> Option<StoreEvent> {
    if skipped.is_empty() && tail.is_none() {
        return None;
    }
    let skipped = skipped.first().map(|first| SkippedRegions {
        regions: skipped.len() as u64,
        records: skipped.iter().map(|s| s.records.unwrap_or(1) as u64).sum(),
        at_least: skipped.iter().any(|s| s.records.is_none()),
        bytes: skipped.iter().map(|s| s.len as u64).sum(),
        first_offset: first.at as u64,
        first_reason: first.damage.to_string(),
    });
    Some(StoreEvent::Damaged {
        path: path.display().to_string(),
        skipped,
        truncated: tail.map(|(at, damage)| (*at as u64, damage.to_string())),
    })
}

/// Reads segment `number`: its good records with their offsets, and its size (where
/// the next write goes: just past the last good record). A damaged region with good
/// records after it is skipped and reframed in place as one [`message_log::HOLE`]
/// record (so that later reads, page-ins and restarts step over it); what follows the
/// last good record — a damaged tail (logged) or the rest of a recycled file's
/// previous life (silently) — is cut off.
fn read_segment(path: &Path, number: u32) -> std::io::Result<(u64, Vec<(u64, Bytes)>)> {
    let data = Bytes::from(std::fs::read(path)?);
    let mut records = Records::resyncing(data.clone(), number);
    let mut payloads = Vec::new();
    while let Some((at, payload)) = records.next_record() {
        payloads.push((at as u64, payload));
    }
    let end = records.good_len();
    if let Some(event) = damage_event(path, records.skipped(), records.damage()) {
        event.emit();
    }
    if records.skipped().is_empty() && end == data.len() {
        return Ok((end as u64, payloads));
    }
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    for region in records.skipped() {
        let head = record::reframe(&data, region, number, message_log::HOLE);
        f.write_all_at(&head, region.at as u64)?;
    }
    if end < data.len() {
        f.set_len(end as u64)?;
    }
    f.sync_all()?;
    Ok((end as u64, payloads))
}

/// A name copied out of a file's buffer (a slice would keep the whole buffer alive).
pub fn copy_name(name: &ShortStr) -> ShortStr {
    ShortStr::new(Bytes::copy_from_slice(name.as_bytes())).unwrap_or_default()
}

/// The last exchange and routing key copied out of a segment buffer, reused while
/// the next messages have the same ones.
#[derive(Default)]
struct LastNames([Option<ShortStr>; 2]);

impl LastNames {
    fn copy(&mut self, name: &ShortStr, slot: usize) -> ShortStr {
        if let Some(last) = &self.0[slot] {
            if last.as_bytes() == name.as_bytes() {
                return last.clone();
            }
        }
        let copied = copy_name(name);
        self.0[slot] = Some(copied.clone());
        copied
    }
}

/// A live entry while reading: its message (index into the shard's messages), the
/// segment it is in.
struct Live {
    message: usize,
    segment: u32,
    offset: u64,
}

/// Reads shard directory `dir`, keeping the entries of the queues `known` says exist.
/// Segments left with nothing live before the newest are deleted.
pub fn read_shard(dir: &Path, known: &dyn Fn(QueueId) -> bool) -> std::io::Result<RecoveredShard> {
    let mut messages: Vec<Option<MessageParts>> = Vec::new();
    let mut live: HashMap<QueueId, BTreeMap<u64, Live>> = HashMap::new();
    let mut delivered: HashMap<QueueId, u64> = HashMap::new();
    let mut segments = Vec::new();
    let mut names = LastNames::default();
    for (number, path) in segment_files(dir)? {
        let (size, payloads) = read_segment(&path, number)?;
        segments.push(SegmentInfo {
            number,
            size,
            live: 0,
            entries: 0,
            recycled_len: 0,
        });
        for (record_at, payload) in payloads {
            let logged = match message_log::decode(payload) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(target: "sluice::ops", "{}: skipped a record: {e}", path.display());
                    continue;
                }
            };
            match logged {
                Logged::Message {
                    queues,
                    exchange,
                    routing_key,
                    properties,
                    body,
                } => {
                    let index = messages.len();
                    if let Some(s) = segments.last_mut() {
                        s.entries += queues.len() as u64;
                    }
                    let mut kept = false;
                    for (queue, seq) in queues {
                        if known(queue) {
                            kept = true;
                            live.entry(queue).or_default().insert(
                                seq,
                                Live {
                                    message: index,
                                    segment: number,
                                    offset: record_at,
                                },
                            );
                        }
                    }
                    // Copied out of the file's buffer (a slice would keep the whole
                    // segment in memory); runs of one exchange and routing key share
                    // one copy.
                    messages.push(kept.then(|| MessageParts {
                        exchange: names.copy(&exchange, 0),
                        routing_key: names.copy(&routing_key, 1),
                        properties: Bytes::copy_from_slice(&properties),
                        body: Bytes::copy_from_slice(&body),
                    }));
                }
                Logged::Gone(pairs) => {
                    for (queue, seq) in pairs {
                        if let Some(q) = live.get_mut(&queue) {
                            q.remove(&seq);
                        }
                    }
                }
                Logged::Hole => {}
                Logged::Delivered(pairs) => {
                    for (queue, seq) in pairs {
                        let d = delivered.entry(queue).or_default();
                        *d = (*d).max(seq);
                    }
                }
                // Nacked after a failed write: never stored.
                Logged::Withdrawn => {}
            }
        }
    }
    let mut out = RecoveredShard::default();
    let mut live_per_segment: HashMap<u32, u64> = HashMap::new();
    for (queue, entries) in live {
        if entries.is_empty() {
            continue;
        }
        let delivered_upto = delivered.get(&queue).copied().unwrap_or(0);
        let mut list = Vec::with_capacity(entries.len());
        for (seq, l) in entries {
            *live_per_segment.entry(l.segment).or_default() += 1;
            match out.runs.last_mut() {
                Some(run) if run.0 == queue && run.2 == l.segment && run.4 <= l.offset => {
                    run.3 += 1
                }
                _ => out.runs.push((queue, seq, l.segment, 1, l.offset)),
            }
            list.push(RecoveredEntry {
                seq,
                message: l.message,
                redelivered: seq <= delivered_upto,
            });
        }
        out.queues.insert(queue, list);
    }
    out.messages = messages;
    for s in &mut segments {
        s.live = live_per_segment.get(&s.number).copied().unwrap_or(0);
    }
    // Segments with nothing live go, oldest first, as they would at run time.
    while segments.len() > 1 && segments.first().is_some_and(|s| s.live == 0) {
        let s = segments.remove(0);
        std::fs::remove_file(dir.join(super::shard_store::segment_name(s.number)))?;
    }
    out.segments = segments;
    Ok(out)
}

#[cfg(test)]
mod tests;
