//! Owns: the on-disk format of streams — where a stream's segments live
//! (`DATA_DIR/streams/<queue id>/<n>.seg`), the records in them (each a
//! `store::record` frame: length, segment number, crc32c), encoding a chunk of messages
//! and a tracking record, decoding a read-back buffer for one reader ([`scan`]), reading
//! a stream's directory back at start ([`recover`]) and removing the directories of
//! streams that no longer exist.
//!
//! Does not: do I/O at run time (the shard writes and reads through io_uring), keep any
//! state (the `stream` module keeps the index), or know what a reader's filter means
//! (it is handed a predicate).
//!
//! # Layout (little-endian)
//! - chunk: `1, u64 first offset, u32 count, i64 timestamp (ms since the epoch), count
//!   × entry`; an entry is `u32 length of the rest, u8 filter length, filter value,
//!   shortstr exchange, shortstr routing key, u32 property length, properties, body`
//!   (the body runs to the entry's end). Offsets are consecutive: entry `i` is offset
//!   `first + i`.
//! - tracking: `2, u8 snapshot (1: the whole table, 0: updates), u32 n, n × (shortstr
//!   consumer tag, u64 offset)`. Every segment starts with a snapshot when the table
//!   is not empty, so deleting older segments never loses a tracked offset.
//!
//! # Invariants
//! - A segment holds whole chunks; chunk offsets only grow, within a segment and from
//!   one segment to the next.
//! - Only the newest segment is ever appended to, so only it can end in a torn record;
//!   recovery cuts that tail off.

use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::model::ids::QueueId;
use crate::model::message::{BodyChunks, Message};
use crate::protocol::codec::put_shortstr;
use crate::protocol::ShortStr;

use super::message_log::Malformed;
use super::record::{self, Records, HEADER, MAX_RECORD};

const CHUNK: u8 = 1;
const TRACKING: u8 = 2;
/// Bytes of a chunk record's payload before its first entry.
pub const CHUNK_HEADER: usize = 1 + 8 + 4 + 8;
/// Bytes read from a segment at a time at recovery.
const RECOVERY_READ: usize = 4 << 20;

/// The directory holding every stream's directory.
pub fn streams_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("streams")
}

/// The directory of stream `id`'s segments.
pub fn stream_dir(data_dir: &Path, id: QueueId) -> PathBuf {
    streams_dir(data_dir).join(id.0.to_string())
}

/// The file of segment `number` in a stream's directory.
pub fn segment_path(dir: &Path, number: u32) -> PathBuf {
    dir.join(super::shard_store::segment_name(number))
}

/// One message of a chunk being encoded: its filter value and the message (with its
/// `x-stream-offset` header already in its properties).
pub struct Appended<'a> {
    pub filter: Option<&'a [u8]>,
    pub msg: &'a Message,
}

/// Bytes one entry takes in a chunk.
pub fn entry_len(filter: Option<&[u8]>, msg: &Message) -> usize {
    4 + 1
        + filter.map_or(0, |f| f.len().min(255))
        + 1
        + msg.exchange().len()
        + 1
        + msg.routing_key().len()
        + 4
        + msg.raw_properties().len()
        + msg.body_size() as usize
}

/// Appends a chunk record of segment `segment` to `out`: the messages, offsets from
/// `first`, written at `timestamp_ms`.
pub fn put_chunk(
    out: &mut BytesMut,
    segment: u32,
    first: u64,
    timestamp_ms: i64,
    entries: &[Appended<'_>],
) {
    let len: usize = entries.iter().map(|e| entry_len(e.filter, e.msg)).sum();
    out.reserve(HEADER + CHUNK_HEADER + len);
    record::append(out, segment, |o| {
        o.put_u8(CHUNK);
        o.put_u64_le(first);
        o.put_u32_le(entries.len() as u32);
        o.put_i64_le(timestamp_ms);
        for e in entries {
            let filter = e.filter.map_or(&[][..], |f| &f[..f.len().min(255)]);
            let len = entry_len(e.filter, e.msg) - 4;
            o.put_u32_le(len as u32);
            o.put_u8(filter.len() as u8);
            o.put_slice(filter);
            put_shortstr(o, e.msg.exchange());
            put_shortstr(o, e.msg.routing_key());
            o.put_u32_le(e.msg.raw_properties().len() as u32);
            o.put_slice(e.msg.raw_properties());
            for chunk in e.msg.body() {
                o.put_slice(chunk);
            }
        }
    });
}

/// Appends a tracking record of segment `segment`: consumer tags and their offsets, the
/// whole table (`snapshot`) or updates.
pub fn put_tracking(out: &mut BytesMut, segment: u32, snapshot: bool, entries: &[(ShortStr, u64)]) {
    record::append(out, segment, |o| {
        o.put_u8(TRACKING);
        o.put_u8(u8::from(snapshot));
        o.put_u32_le(entries.len() as u32);
        for (tag, offset) in entries {
            put_shortstr(o, tag);
            o.put_u64_le(*offset);
        }
    });
}

/// A chunk's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub first: u64,
    pub count: u32,
    pub timestamp_ms: i64,
}

impl ChunkHeader {
    /// One past the chunk's last offset.
    pub fn end(&self) -> u64 {
        self.first + u64::from(self.count)
    }
}

/// One decoded record.
#[derive(Debug)]
pub enum StreamRecord {
    /// A chunk: its header and its entries' bytes.
    Chunk(ChunkHeader, Bytes),
    Tracking {
        snapshot: bool,
        entries: Vec<(ShortStr, u64)>,
    },
}

fn need(buf: &Bytes, n: usize, what: &'static str) -> Result<(), Malformed> {
    if buf.remaining() < n {
        Err(Malformed::new(what))
    } else {
        Ok(())
    }
}

fn chunk_header(buf: &mut Bytes) -> Result<ChunkHeader, Malformed> {
    need(buf, CHUNK_HEADER - 1, "chunk header")?;
    Ok(ChunkHeader {
        first: buf.get_u64_le(),
        count: buf.get_u32_le(),
        timestamp_ms: buf.get_i64_le(),
    })
}

/// Decodes one record's payload.
pub fn decode(mut buf: Bytes) -> Result<StreamRecord, Malformed> {
    need(&buf, 1, "record type")?;
    match buf.get_u8() {
        CHUNK => Ok(StreamRecord::Chunk(chunk_header(&mut buf)?, buf)),
        TRACKING => {
            need(&buf, 5, "tracking header")?;
            let snapshot = buf.get_u8() == 1;
            let n = buf.get_u32_le() as usize;
            let mut entries = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                need(&buf, 1, "consumer tag")?;
                let len = buf.get_u8() as usize;
                need(&buf, len + 8, "tracked offset")?;
                let tag = ShortStr::new(Bytes::copy_from_slice(&buf.split_to(len)))
                    .map_err(|_| Malformed::new("consumer tag"))?;
                entries.push((tag, buf.get_u64_le()));
            }
            Ok(StreamRecord::Tracking { snapshot, entries })
        }
        _ => Err(Malformed::new("record type")),
    }
}

/// One entry of a chunk, its parts slices of the chunk's bytes.
#[derive(Debug)]
pub struct Entry {
    pub filter: Option<Bytes>,
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    pub properties: Bytes,
    pub body: Bytes,
}

impl Entry {
    /// The message, every part copied out of the read buffer it was cut from (a
    /// reader keeps a few messages of a large read; they must not keep the read).
    pub fn build(&self) -> Message {
        let mut chunks = BodyChunks::new();
        if !self.body.is_empty() {
            chunks.push(Bytes::copy_from_slice(&self.body));
        }
        Message::new(
            super::recovery::copy_name(&self.exchange),
            super::recovery::copy_name(&self.routing_key),
            Bytes::copy_from_slice(&self.properties),
            chunks,
            self.body.len() as u64,
        )
    }
}

/// The entries of a chunk, in offset order.
pub struct Entries {
    buf: Bytes,
}

impl Entries {
    pub fn new(entries: Bytes) -> Entries {
        Entries { buf: entries }
    }

    /// The next entry's filter value only, skipping the rest of it (how a reader whose
    /// filter does not want a message passes it without building it).
    pub fn next_filter(&mut self) -> Result<Option<(Option<Bytes>, Bytes)>, Malformed> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        need(&self.buf, 4, "entry length")?;
        let len = self.buf.get_u32_le() as usize;
        need(&self.buf, len, "entry")?;
        let mut entry = self.buf.split_to(len);
        need(&entry, 1, "filter length")?;
        let flen = entry.get_u8() as usize;
        need(&entry, flen, "filter value")?;
        let filter = entry.split_to(flen);
        Ok(Some(((flen > 0).then_some(filter), entry)))
    }

    /// The parts of an entry whose filter [`Entries::next_filter`] returned.
    pub fn parts(filter: Option<Bytes>, mut rest: Bytes) -> Result<Entry, Malformed> {
        let short = |buf: &mut Bytes| -> Result<ShortStr, Malformed> {
            need(buf, 1, "short string")?;
            let len = buf.get_u8() as usize;
            need(buf, len, "short string")?;
            ShortStr::new(buf.split_to(len)).map_err(|_| Malformed::new("short string"))
        };
        let exchange = short(&mut rest)?;
        let routing_key = short(&mut rest)?;
        need(&rest, 4, "property length")?;
        let plen = rest.get_u32_le() as usize;
        need(&rest, plen, "properties")?;
        let properties = rest.split_to(plen);
        Ok(Entry {
            filter,
            exchange,
            routing_key,
            properties,
            body: rest,
        })
    }
}

/// What one reader wants from a read-back buffer.
pub struct ScanFor<'a> {
    /// The segment the buffer was read from, and where in it the buffer starts (a
    /// record boundary).
    pub segment: u32,
    pub base: u64,
    /// The reader's next offset.
    pub next: u64,
    /// Skip whole chunks written before this (a `timestamp` start not yet resolved).
    pub seek_ts: Option<i64>,
    /// Whether the reader wants a message with this filter value.
    pub wanted: &'a dyn Fn(Option<&[u8]>) -> bool,
    /// At most this many messages, and (past the first) this many bytes.
    pub max_messages: usize,
    pub max_bytes: u64,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scanned {
    pub found: Vec<(u64, Message)>,
    /// The reader's next offset after the scan.
    pub next: u64,
    /// Where the next read starts: the start of the chunk the scan stopped in, or past
    /// the last whole record read.
    pub resume: u64,
    /// The `timestamp` start resolved in this buffer.
    pub seek_resolved: bool,
    /// A record that does not check (not a record cut by the buffer's end) stopped it.
    pub damaged: bool,
    /// The buffer did not hold its first record whole: read this many bytes at `base`.
    pub wants_len: Option<u64>,
}

/// Scans a buffer read at `want.base` of segment `want.segment` for one reader: the
/// wanted messages from its next offset on, up to its credit.
pub fn scan(buf: Bytes, want: &ScanFor<'_>) -> Scanned {
    let mut out = Scanned {
        next: want.next,
        resume: want.base,
        ..Scanned::default()
    };
    let mut seek = want.seek_ts;
    let mut bytes = 0u64;
    let mut records = Records::new(buf, want.segment);
    while let Some((at, payload)) = records.next_record() {
        let record_end = want.base + (at + HEADER + payload.len()) as u64;
        let (header, entries) = match decode(payload) {
            Ok(StreamRecord::Chunk(h, e)) => (h, e),
            Ok(StreamRecord::Tracking { .. }) => {
                out.resume = record_end;
                continue;
            }
            Err(_) => {
                out.damaged = true;
                return out;
            }
        };
        if let Some(ts) = seek {
            if header.timestamp_ms < ts {
                out.next = out.next.max(header.end());
                out.resume = record_end;
                continue;
            }
            seek = None;
            out.seek_resolved = true;
            out.next = header.first;
        }
        if header.end() <= out.next {
            out.resume = record_end;
            continue;
        }
        let mut entries = Entries::new(entries);
        let mut offset = header.first;
        loop {
            let next = match entries.next_filter() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(_) => {
                    out.damaged = true;
                    return out;
                }
            };
            let this = offset;
            offset += 1;
            if this < out.next {
                continue;
            }
            let (filter, rest) = next;
            if !(want.wanted)(filter.as_deref()) {
                out.next = this + 1;
                continue;
            }
            let Ok(entry) = Entries::parts(filter, rest) else {
                out.damaged = true;
                return out;
            };
            let msg = entry.build();
            bytes += msg.accounted_size();
            out.found.push((this, msg));
            out.next = this + 1;
            if out.found.len() >= want.max_messages || bytes >= want.max_bytes {
                // Stopped inside (or at the end of) this chunk: the next read starts
                // at the chunk and skips what was delivered.
                out.resume = if out.next >= header.end() {
                    record_end
                } else {
                    want.base + at as u64
                };
                return out;
            }
        }
        out.next = out.next.max(header.end());
        out.resume = record_end;
    }
    // A record cut by the buffer's end is read again from its start (the caller reads
    // no further than the segment is written); a bad one is damage.
    match records.damage() {
        Some((0, record::Damage::Short { wanted, .. })) => {
            out.wants_len = Some(*wanted as u64);
        }
        Some((_, record::Damage::Short { .. })) => {}
        Some(_) => out.damaged = true,
        None => {}
    }
    out
}

/// What recovery found of one chunk: its header, and where its record starts and how
/// long it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveredChunk {
    pub header: ChunkHeader,
    pub pos: u64,
    pub len: u64,
}

/// One segment file as recovery left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveredSegment {
    pub number: u32,
    /// Bytes of whole, good records (the newest file is cut back to this).
    pub size: u64,
}

/// Damage recovery found in one file (for the MST-1010 line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryDamage {
    pub path: PathBuf,
    pub offset: u64,
    pub reason: String,
    /// The newest segment: cut back to `offset`. Otherwise kept, read up to it.
    pub truncated: bool,
}

/// A stream's directory read back.
#[derive(Debug, Default)]
pub struct Recovered {
    pub segments: Vec<RecoveredSegment>,
    pub damage: Vec<RecoveryDamage>,
}

/// A record recovery found, in file order.
#[derive(Debug)]
pub enum RecoveredRecord {
    Chunk(RecoveredChunk),
    Tracking {
        snapshot: bool,
        entries: Vec<(ShortStr, u64)>,
    },
}

/// Reads stream directory `dir` back: every segment in order, every record's checksum
/// checked; `on_record` is called for each chunk (with its segment number and where it
/// is) and each tracking record, in file order. The newest segment is cut back to its
/// last good record. A missing directory is an empty stream.
pub fn recover(
    dir: &Path,
    mut on_record: impl FnMut(u32, RecoveredRecord),
) -> std::io::Result<Recovered> {
    let mut numbers: Vec<u32> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                name.strip_suffix(".seg")?.parse().ok()
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    numbers.sort_unstable();
    let mut out = Recovered::default();
    let mut last_end = 0u64;
    for (i, &number) in numbers.iter().enumerate() {
        let newest = i + 1 == numbers.len();
        let path = segment_path(dir, number);
        let mut file = std::fs::File::open(&path)?;
        let mut pos = 0u64;
        let mut carry = BytesMut::new();
        let mut damage = None;
        loop {
            let mut block = vec![0u8; RECOVERY_READ.max(carry.len() + HEADER)];
            let n = read_full(&mut file, &mut block)?;
            let at_eof = n < block.len();
            carry.extend_from_slice(&block[..n]);
            let data = carry.split().freeze();
            let mut records = Records::new(data.clone(), number);
            while let Some((at, payload)) = records.next_record() {
                let record_pos = pos + at as u64;
                let len = (HEADER + payload.len()) as u64;
                match decode(payload) {
                    Ok(StreamRecord::Chunk(header, _)) if header.first >= last_end => {
                        last_end = header.end();
                        on_record(
                            number,
                            RecoveredRecord::Chunk(RecoveredChunk {
                                header,
                                pos: record_pos,
                                len,
                            }),
                        );
                    }
                    Ok(StreamRecord::Chunk(header, _)) => {
                        damage = Some((
                            record_pos,
                            format!("chunk at offset {} after offset {last_end}", header.first),
                        ));
                        break;
                    }
                    Ok(StreamRecord::Tracking { snapshot, entries }) => {
                        on_record(number, RecoveredRecord::Tracking { snapshot, entries })
                    }
                    Err(e) => {
                        damage = Some((record_pos, e.to_string()));
                        break;
                    }
                }
            }
            if damage.is_some() {
                break;
            }
            let good = records.good_len();
            pos += good as u64;
            let rest = data.slice(good..);
            match records.damage() {
                // A record cut by this block's end: read on.
                Some((_, record::Damage::Short { .. }))
                    if !at_eof && rest.len() < HEADER + MAX_RECORD =>
                {
                    carry.extend_from_slice(&rest);
                }
                Some((_, d)) => {
                    damage = Some((pos, d.to_string()));
                    break;
                }
                None if at_eof => break,
                None => {}
            }
        }
        if let Some((offset, reason)) = damage {
            if newest {
                file = std::fs::OpenOptions::new().write(true).open(&path)?;
                file.set_len(offset)?;
                file.sync_all()?;
            }
            out.damage.push(RecoveryDamage {
                path: path.clone(),
                offset,
                reason,
                truncated: newest,
            });
            pos = offset;
        }
        out.segments.push(RecoveredSegment { number, size: pos });
    }
    Ok(out)
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Removes the directories of streams `keep` says no longer exist (deleted while the
/// broker was down, or before a crash finished removing them). Returns how many.
pub fn remove_orphans(data_dir: &Path, keep: impl Fn(QueueId) -> bool) -> std::io::Result<usize> {
    let entries = match std::fs::read_dir(streams_dir(data_dir)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let Some(id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !keep(QueueId(id)) {
            std::fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests;
