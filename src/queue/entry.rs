//! Owns: [`Entry`], the per-queue record of one message: the shared message handle, its
//! position (sequence number), when it was enqueued, when it expires, whether it has been
//! delivered before, its level in a priority queue, and the two facts about the message
//! the queue's accounting reads on every move (its size and whether it is persistent),
//! kept here so that moving an entry never touches the shared message's cache line.
//!
//! Does not: own the message bytes (they are shared with every other queue), or count
//! itself in the memory ledger (its queue does, where entries are made and dropped).

use std::time::Instant;

use crate::model::message::LocalMessage;

/// Bytes one entry costs a queue (the record itself and its slot), for the ledger.
pub const ENTRY_BYTES: i64 = std::mem::size_of::<Entry>() as i64 + 8;

/// One message in one queue.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Position in the queue; increases with every enqueue and orders requeues.
    pub seq: u64,
    pub msg: LocalMessage,
    pub enqueued_at: Instant,
    /// Earliest of the queue's `x-message-ttl` and the message's `expiration`.
    pub expires_at: Option<Instant>,
    /// Bytes the message counts for in its queue's depth.
    pub size: u32,
    /// Set once the entry has been delivered and returned (nack/reject/recover/close).
    pub redelivered: bool,
    /// Delivery mode 2.
    pub persistent: bool,
    /// Level in a priority queue: the `priority` property capped at the queue's
    /// `x-max-priority` (no property: 0). Always 0 in a plain queue. Fits in the
    /// record's padding.
    pub priority: u8,
    /// The message's body was released from memory (it is on disk): `msg` is a
    /// placeholder until it is read back (`queue::paging`). Also in the padding.
    pub evicted: bool,
}

impl Entry {
    #[inline]
    pub fn new(
        seq: u64,
        msg: LocalMessage,
        enqueued_at: Instant,
        expires_at: Option<Instant>,
    ) -> Entry {
        Entry {
            seq,
            size: u32::try_from(msg.accounted_size()).unwrap_or(u32::MAX),
            persistent: msg.is_persistent(),
            msg,
            enqueued_at,
            expires_at,
            redelivered: false,
            priority: 0,
            evicted: false,
        }
    }

    pub fn is_expired(&self, now: Instant) -> bool {
        matches!(self.expires_at, Some(at) if at <= now)
    }

    /// Bytes the entry's message counts for in its queue's depth.
    pub fn size(&self) -> u64 {
        u64::from(self.size)
    }
}
