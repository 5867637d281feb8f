//! Owns: [`Entry`], the per-queue record of one message: the shared message handle, its
//! position (sequence number), when it was enqueued, when it expires and whether it has
//! been delivered before.
//!
//! Does not: own the message bytes (they are shared with every other queue).

use std::time::Instant;

use crate::model::message::LocalMessage;

/// One message in one queue.
#[derive(Clone, Debug)]
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
    pub fn is_expired(&self, now: Instant) -> bool {
        matches!(self.expires_at, Some(at) if at <= now)
    }
}
