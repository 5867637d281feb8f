//! Owns: what a shard's turn sends elsewhere, collected during the turn and sent once at
//! its end by [`super::Shard::flush`] — publishes and direct replies, deliveries,
//! settlements, returned direct replies, confirm outcomes and flow notices per
//! destination shard, and the queues the broker itself
//! wants deleted (for the coordinator) — plus the small helpers both sides of a shard
//! use to spread work (a rotating start, wall-clock seeds).
//!
//! Does not: send anything itself or decide what is sent.

use crate::model::ids::{ConnOwner, QueueId, QueueRef, ShardId};
use crate::model::routing::VhostIdx;
use crate::protocol::ShortStr;

use super::inbox::{
    AddressedQueueOp, ConfirmDone, DirectReply, FlowNotice, OwnDelete, RemoteDelivery,
    ReturnedReply, Routed, StillThe,
};

/// Messages to other shards, collected during a turn and sent once at its end.
pub struct Outbox {
    pub publish: Vec<Vec<Routed>>,
    /// Direct replies for reply consumers on other shards (sent with the publishes).
    pub replies: Vec<Vec<DirectReply>>,
    /// Mandatory direct replies whose consumer was gone, back to their publishers.
    pub returns: Vec<Vec<ReturnedReply>>,
    pub deliver: Vec<Vec<RemoteDelivery>>,
    pub settle: Vec<Vec<AddressedQueueOp>>,
    pub confirms: Vec<Vec<ConfirmDone>>,
    pub flow: Vec<Vec<FlowNotice>>,
    /// Queues the broker itself wants deleted (auto-delete, x-expires, an exclusive
    /// owner gone); the turn's end starts the task that hands them to the coordinator
    /// (`control::own_deletes`).
    pub queue_deletes: Vec<OwnDelete>,
}

impl Outbox {
    pub fn new(shards: usize) -> Outbox {
        Outbox {
            publish: (0..shards).map(|_| Vec::new()).collect(),
            replies: (0..shards).map(|_| Vec::new()).collect(),
            returns: (0..shards).map(|_| Vec::new()).collect(),
            deliver: (0..shards).map(|_| Vec::new()).collect(),
            settle: (0..shards).map(|_| Vec::new()).collect(),
            confirms: (0..shards).map(|_| Vec::new()).collect(),
            flow: (0..shards).map(|_| Vec::new()).collect(),
            queue_deletes: Vec::new(),
        }
    }

    pub fn settle(&mut self, shard: ShardId, s: AddressedQueueOp) {
        if let Some(v) = self.settle.get_mut(usize::from(shard)) {
            v.push(s);
        }
    }

    /// A confirm outcome for a publisher on `shard`; consecutive publishes of one
    /// channel with the same outcome travel as one range.
    pub fn confirm(&mut self, shard: ShardId, done: ConfirmDone) {
        if let Some(v) = self.confirms.get_mut(usize::from(shard)) {
            push_confirm(v, done);
        }
    }

    pub fn flow(&mut self, shard: ShardId, notice: FlowNotice) {
        if let Some(v) = self.flow.get_mut(usize::from(shard)) {
            v.push(notice);
        }
    }

    /// Asks the coordinator to delete `queue`, a home queue of shard `home` (if the queue
    /// of that name is still that one then).
    pub fn delete_home_queue(
        &mut self,
        vhost: VhostIdx,
        name: ShortStr,
        queue: QueueId,
        home: ShardId,
    ) {
        self.queue_deletes.push(OwnDelete {
            vhost,
            name,
            only_if: StillThe::Queue(QueueRef { id: queue, home }),
        });
    }

    /// Asks the coordinator to delete the exclusive queues of a connection that is gone
    /// (those of these names that are still its own then).
    pub fn delete_exclusive_queues(
        &mut self,
        vhost: VhostIdx,
        owner: ConnOwner,
        names: impl IntoIterator<Item = ShortStr>,
    ) {
        self.queue_deletes
            .extend(names.into_iter().map(|name| OwnDelete {
                vhost,
                name,
                only_if: StillThe::ExclusiveOf(owner),
            }));
    }
}

/// Appends a confirm outcome; consecutive publishes of one channel with the same
/// outcome become one range.
pub fn push_confirm(v: &mut Vec<ConfirmDone>, done: ConfirmDone) {
    if let Some(last) = v.last_mut() {
        if last.channel == done.channel
            && last.rejected == done.rejected
            && last.last + 1 == done.first
        {
            last.last = done.last;
            return;
        }
    }
    v.push(done);
}

/// A starting point in `0..len` that moves on every call, spread over the range
/// (Fibonacci hashing of a counter), for rotating work lists.
#[derive(Default)]
pub struct Rotation(u64);

impl Rotation {
    pub fn next(&mut self, len: usize) -> usize {
        self.0 = self.0.wrapping_add(1);
        if len < 2 {
            return 0;
        }
        let spread = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((spread >> 32) as usize) % len
    }
}

/// Nanoseconds of the wall clock, for seeds (never for time).
pub fn wall_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_starts_anywhere_in_the_list() {
        let mut rotation = Rotation::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let start = rotation.next(10);
            assert!(start < 10);
            seen.insert(start);
        }
        assert_eq!(seen.len(), 10, "every start is used: {seen:?}");
        assert_eq!(rotation.next(1), 0);
        assert_eq!(rotation.next(0), 0);
    }
}
