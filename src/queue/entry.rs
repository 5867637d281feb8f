//! Owns: [`Entry`], the per-queue record of one message: the shared message handle, its
//! position (sequence number), when it was enqueued, when it expires, whether it has been
//! delivered before, its level in a priority queue, and the two facts about the message
//! the queue's accounting reads on every move (its size and whether it is persistent),
//! kept here so that moving an entry never touches the shared message's cache line.
//!
//! Does not: own the message bytes (they are shared with every other queue), or count
//! itself in the memory ledger (its queue does, where entries are made and dropped).

use crate::model::message::LocalMessage;
pub use crate::timer::clock::Stamp;

/// Bytes one entry costs a queue (the record itself and its slot), for the ledger.
pub const ENTRY_BYTES: i64 = std::mem::size_of::<Entry>() as i64 + 8;

/// One message in one queue.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Position in the queue; increases with every enqueue and orders requeues.
    pub seq: u64,
    pub msg: LocalMessage,
    pub enqueued_at: Stamp,
    /// Earliest of the queue's `x-message-ttl` and the message's `expiration`;
    /// [`Stamp::NEVER`] without either.
    pub expires_at: Stamp,
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
    pub fn new(seq: u64, msg: LocalMessage, enqueued_at: Stamp, expires_at: Stamp) -> Entry {
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

    /// Whether it has an expiry (a queue TTL or one of its own).
    pub fn has_expiry(&self) -> bool {
        self.expires_at != Stamp::NEVER
    }

    /// Whether it has expired by `now` ([`Stamp::NEVER`] never does): strictly after its
    /// expiry, so a message with a TTL of 0 can still go to a consumer that can take it
    /// in the turn it arrived in (whose clock reading it shares), as RabbitMQ delivers
    /// one a consumer can take at once, and expires in any later turn.
    pub fn is_expired(&self, now: Stamp) -> bool {
        self.expires_at < now
    }

    /// Bytes the entry's message counts for in its queue's depth.
    pub fn size(&self) -> u64 {
        u64::from(self.size)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A stamp gives back its instant to the nanosecond, orders as instants do, and
    /// never reaches [`Stamp::NEVER`]; a time before the queue was made is its start.
    #[test]
    fn stamps_keep_time_and_order() {
        let base = Instant::now();
        let a = base + Duration::from_nanos(1_234_567_891);
        let b = base + Duration::from_secs(86_400 * 365);
        assert_eq!(Stamp::of(a, base).instant(base), a);
        assert_eq!(Stamp::of(b, base).instant(base), b);
        assert!(Stamp::of(a, base) < Stamp::of(b, base));
        assert!(Stamp::of(b, base) < Stamp::NEVER);
        let before = base.checked_sub(Duration::from_millis(5)).unwrap_or(base);
        assert_eq!(Stamp::of(before, base), Stamp::of(base, base));
        let e = Entry::new(
            1,
            LocalMessage::new(crate::model::message::Message::new(
                "".into(),
                "q".into(),
                bytes::Bytes::from_static(&[0, 0]),
                crate::model::message::BodyChunks::new(),
                0,
            )),
            Stamp::of(base, base),
            Stamp::NEVER,
        );
        assert!(!e.has_expiry() && !e.is_expired(Stamp::of(b, base)));
    }
}
