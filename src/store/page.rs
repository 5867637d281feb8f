//! Owns: finding evicted entries of one queue in a chunk of a segment file — the
//! records are read from a record-aligned offset, the wanted sequence numbers picked
//! out, and the point reading stopped (the end of the last whole record) reported, so
//! the next read continues there.
//!
//! Does not: read files (the shard reads chunks through io_uring, or with a plain read
//! for `basic.get`) or put messages back in queues.

use bytes::Bytes;

use crate::model::ids::QueueId;

use super::message_log::{self, Logged};
use super::record::Records;
use super::recovery::{copy_name, MessageParts};

/// What one chunk gave.
pub struct Scan {
    /// Wanted entries found, with their messages.
    pub found: Vec<(u64, MessageParts)>,
    /// Bytes of whole records read from the chunk's start.
    pub consumed: usize,
    /// The highest sequence number of the queue seen (0: none).
    pub max_seen: u64,
    /// Reading reached the end of what the segment holds (not just of the chunk).
    pub segment_done: bool,
}

/// Reads the records of segment `segment` in `chunk` (starting on a record) and picks
/// out queue `queue`'s entries whose sequence numbers are in `wanted` (sorted).
/// `last_chunk` says the chunk ends where the file ends.
pub fn scan(chunk: Bytes, segment: u32, queue: QueueId, wanted: &[u64], last_chunk: bool) -> Scan {
    let len = chunk.len();
    let mut records = Records::new(chunk, segment);
    let mut out = Scan {
        found: Vec::new(),
        consumed: 0,
        max_seen: 0,
        segment_done: false,
    };
    for payload in records.by_ref() {
        let Ok(Logged::Message {
            queues,
            exchange,
            routing_key,
            properties,
            body,
        }) = message_log::decode(payload)
        else {
            continue;
        };
        for (q, seq) in queues {
            if q != queue {
                continue;
            }
            out.max_seen = out.max_seen.max(seq);
            if wanted.binary_search(&seq).is_ok() {
                out.found.push((
                    seq,
                    MessageParts {
                        // Copies: a slice would keep the whole chunk in memory.
                        exchange: copy_name(&exchange),
                        routing_key: copy_name(&routing_key),
                        properties: Bytes::copy_from_slice(&properties),
                        body: Bytes::copy_from_slice(&body),
                    },
                ));
            }
        }
    }
    out.consumed = records.good_len();
    // A record cut by the chunk's end is read again from its start next time; the
    // segment is done at its end, at an end mark, or at damage in the last chunk.
    out.segment_done = records.ended_at_stale()
        || (last_chunk && (out.consumed == len || records.damage().is_some()));
    out
}
