//! Owns: [`Entry`], the per-queue record of one message: the shared message handle, its
//! position (sequence number), when it was enqueued, when it expires and whether it has
//! been delivered before. Every live entry is counted in the shard's memory ledger.
//!
//! Does not: own the message bytes (they are shared with every other queue).

use std::time::Instant;

use crate::model::ledger;
use crate::model::message::LocalMessage;

/// Bytes one entry costs a queue (the record itself and its slot), for the ledger.
pub const ENTRY_BYTES: i64 = std::mem::size_of::<Entry>() as i64 + 8;

/// One message in one queue.
#[derive(Debug)]
pub struct Entry {
    /// Position in the queue; increases with every enqueue and orders requeues.
    pub seq: u64,
    pub msg: LocalMessage,
    pub enqueued_at: Instant,
    /// Earliest of the queue's `x-message-ttl` and the message's `expiration`.
    pub expires_at: Option<Instant>,
    /// Set once the entry has been delivered and returned (nack/reject/recover/close).
    pub redelivered: bool,
}

impl Entry {
    pub fn new(
        seq: u64,
        msg: LocalMessage,
        enqueued_at: Instant,
        expires_at: Option<Instant>,
    ) -> Entry {
        ledger::entries(ENTRY_BYTES);
        Entry {
            seq,
            msg,
            enqueued_at,
            expires_at,
            redelivered: false,
        }
    }

    pub fn is_expired(&self, now: Instant) -> bool {
        matches!(self.expires_at, Some(at) if at <= now)
    }

    /// Bytes the entry's message counts for in its queue's depth.
    pub fn size(&self) -> u64 {
        self.msg.accounted_size()
    }
}

impl Clone for Entry {
    fn clone(&self) -> Entry {
        ledger::entries(ENTRY_BYTES);
        Entry {
            seq: self.seq,
            msg: self.msg.clone(),
            enqueued_at: self.enqueued_at,
            expires_at: self.expires_at,
            redelivered: self.redelivered,
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        ledger::entries(-ENTRY_BYTES);
    }
}
