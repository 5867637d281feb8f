//! Owns: the queue side of a shard — the queues whose home this shard is, their
//! consumers and credit, dispatch, settlements and queue requests (`queues`), the queue
//! policies (`policy`) and the run-time policies put in force on them
//! (`runtime_policy`), publishes arriving from other shards (`arrivals`), dead letters
//! (`dead_letter`), paging bodies out and back (`paging`), the durable queues'
//! persistence and held confirms (`persist`), and the streams whose home this shard is
//! (`streams`, their I/O in `stream_io`).
//!
//! Does not: touch connections. What the queue side has for connections on this shard is
//! handed over as data: deliveries for local consumers (the `Vec<Delivery>` of
//! [`QueueSide::dispatch_queue`], and a pulled queue's run of messages from
//! [`QueueSide::pull_queue`]), queues waiting for their consumer's connection's
//! write ([`HomeQueues::take_pulls`]), consumers whose queue is gone and slow-consumer
//! verdicts ([`ForConnections`]), flow notices and confirm outcomes through the
//! [`super::Outbox`] slot of its own shard. Fields are private to this room.

pub mod arrivals;
pub mod dead_letter;
pub mod paging;
pub mod persist;
pub mod policy;
pub mod queues;
pub mod runtime_policy;
pub mod stream_io;
pub mod streams;

use std::time::Instant;

use crate::model::ids::{ConnId, ConsumerTarget, IdMap, QueueId};
use crate::model::message::LocalMessage;
use crate::queue::{Dispatch, Queue};
use crate::timer::wheel::TimerId;

use super::outbox::Rotation;
use super::Common;
use crate::shard::inbox::{Delivery, SlowTarget};

/// What the queue side tells connections on its own shard (the connection side takes
/// it at the turn's end, before dispatch).
#[derive(Default)]
pub struct ForConnections {
    /// Consumers whose queue was deleted.
    pub consumers_gone: Vec<ConsumerTarget>,
    /// Consuming channels the slow-consumer `delete` verdict closes with 506.
    pub slow_closes: Vec<(ConnId, SlowTarget, QueueId)>,
}

impl ForConnections {
    pub fn is_empty(&self) -> bool {
        self.consumers_gone.is_empty() && self.slow_closes.is_empty()
    }
}

/// How many queues ahead a loop over queues hints a queue.
const PREFETCH_QUEUE_AHEAD: usize = 6;
/// Loops over fewer queues (or deliveries) than this do not hint: what they visit stays
/// in the cache, and each hint costs a lookup (at 16 subscribers, +7 % instructions per
/// delivery for nothing).
pub const PREFETCH_FROM: usize = 64;

/// The queues whose home is this shard, and the queue side's per-turn lists.
#[derive(Default)]
pub struct HomeQueues {
    /// Boxed: the map's buckets (and its growth by doubling) then hold pointers, not
    /// whole queues (issue 23).
    queues: IdMap<QueueId, Box<Queue>>,
    /// Queues with something to dispatch this turn.
    dirty: Vec<QueueId>,
    /// Queues with something to dispatch when the write pass reaches their consumer's
    /// connection (`Queue::pull_conn`), for the connection side to note
    /// ([`HomeQueues::take_pulls`]).
    pulls: Vec<(ConnId, QueueId)>,
    rotation: Rotation,
    scratch: Vec<Dispatch>,
    /// Deliveries for consumers on this shard, gathered by a round of dispatch for the
    /// connection side (kept between turns so that its room is not grown again each
    /// turn; [`HomeQueues::take_deliveries`]).
    deliveries: Vec<Delivery<LocalMessage>>,
    /// The messages of a pulled queue's run ([`QueueSide::pull_queue`]) for the
    /// connection side, kept between writes like `deliveries`
    /// ([`HomeQueues::take_pulled`]).
    pulled: Vec<LocalMessage>,
    /// Housekeeping timer armed per queue, with its deadline.
    timers: IdMap<QueueId, (TimerId, Instant)>,
    /// Confirms of publishes that entered durable queues this turn: they go out once
    /// the group sealed at the turn's end is on disk (`persist`).
    held_confirms: Vec<super::inbox::ConfirmDone>,
    /// Management API publishes of persistent messages waiting, like the confirms, for
    /// the group sealed at the turn's end: told true once it is on disk, false when it
    /// could not be written.
    sync_waiters: Vec<tokio::sync::oneshot::Sender<bool>>,
    /// Home queues with evicted entries (`paging`), and those being read back now.
    evicting: Vec<QueueId>,
    paging_in: Vec<QueueId>,
    /// Home queues the slow-consumer policy deleted, with when (kept one rate window).
    slow_deleted: Vec<(QueueId, Instant)>,
    /// Publishes from other shards waiting for their queue's declaration.
    arrivals: arrivals::Arrivals,
    /// Messages that died in home queues with a dead-letter exchange, to re-publish
    /// before this turn ends.
    dead_letters: Vec<dead_letter::DeadLetter>,
    /// What connections on this shard must be told.
    for_connections: ForConnections,
    /// The streams whose home this shard is (`streams`).
    streams: IdMap<QueueId, crate::stream::Stream>,
    /// Their files, disk reads and deletions (`stream_io`).
    stream_io: stream_io::StreamIo,
    /// When the streams next check retention by age and their readers' lag.
    next_stream_check: Option<Instant>,
}

impl HomeQueues {
    pub fn get(&self, id: QueueId) -> Option<&Queue> {
        self.queues.get(&id).map(|q| &**q)
    }

    /// The home stream `id`.
    pub fn stream(&self, id: QueueId) -> Option<&crate::stream::Stream> {
        self.streams.get(&id)
    }

    /// The home streams.
    pub fn streams(&self) -> impl Iterator<Item = &crate::stream::Stream> {
        self.streams.values()
    }

    /// Bytes of this shard's stream segment files (the disk quota counts them with the
    /// shard's segments).
    pub fn stream_disk_bytes(&self) -> u64 {
        self.streams.values().map(|s| s.disk_bytes()).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Queue> {
        self.queues.values().map(|q| &**q)
    }

    /// Home queues, streams included.
    pub fn len(&self) -> usize {
        self.queues.len() + self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.streams.is_empty()
    }

    /// Whether anything waits for dispatch or dead-lettering this turn.
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub fn has_dead_letters(&self) -> bool {
        !self.dead_letters.is_empty()
    }

    /// Takes this turn's dirty queues, rotated so that which subscriber is served first
    /// does not depend on when its queue was bound or declared. Give the list back with
    /// [`HomeQueues::give_back_round`].
    pub fn take_round(&mut self) -> Vec<QueueId> {
        let mut round = std::mem::take(&mut self.dirty);
        let start = self.rotation.next(round.len());
        round.rotate_left(start);
        round
    }

    /// Takes the (empty) list a round of dispatch gathers local deliveries in; give it
    /// back, empty, with [`HomeQueues::give_back_deliveries`].
    pub fn take_deliveries(&mut self) -> Vec<Delivery<LocalMessage>> {
        std::mem::take(&mut self.deliveries)
    }

    pub fn give_back_deliveries(&mut self, mut list: Vec<Delivery<LocalMessage>>) {
        list.clear();
        self.deliveries = list;
    }

    /// Takes the (empty) list a pulled queue's run is moved to; give it back with
    /// [`HomeQueues::give_back_pulled`].
    pub fn take_pulled(&mut self) -> Vec<LocalMessage> {
        std::mem::take(&mut self.pulled)
    }

    pub fn give_back_pulled(&mut self, mut list: Vec<LocalMessage>) {
        list.clear();
        self.pulled = list;
    }

    /// Hints a home queue a few queues ahead of a loop over queues (`model::prefetch`).
    /// One lookup in the queue table per hint; hinting the queue's ready list and
    /// consumer list too (a second lookup, a step later) cost 75 instructions per
    /// delivery at 1,000 subscribers and gained nothing measurable at 10,000.
    pub fn prefetch(&self, queue: QueueId) {
        if let Some(q) = self.queues.get(&queue) {
            q.prefetch_hot();
        }
    }

    /// Hints the head entry and first consumer of a home queue hinted a step before
    /// ([`HomeQueues::prefetch`], then this): what a dispatch of it waits on next.
    pub fn prefetch_dispatch(&self, queue: QueueId) {
        if let Some(q) = self.queues.get(&queue) {
            q.prefetch_dispatch();
        }
    }

    /// Hints the queue a loop over `items` reaches [`PREFETCH_QUEUE_AHEAD`] after the one
    /// at `at`, when `home` finds one of this shard's queues there; nothing for a list
    /// shorter than [`PREFETCH_FROM`].
    pub fn prefetch_ahead<T>(
        &self,
        items: &[T],
        at: usize,
        home: impl FnOnce(&T) -> Option<QueueId>,
    ) {
        if items.len() < PREFETCH_FROM {
            return;
        }
        if let Some(q) = items.get(at + PREFETCH_QUEUE_AHEAD).and_then(home) {
            self.prefetch(q);
        }
    }

    /// Takes the queues to dispatch when their consumer's connection is written, each
    /// with that connection; give the list back, empty, with
    /// [`HomeQueues::give_back_pulls`].
    pub fn take_pulls(&mut self) -> Vec<(ConnId, QueueId)> {
        std::mem::take(&mut self.pulls)
    }

    pub fn give_back_pulls(&mut self, mut list: Vec<(ConnId, QueueId)>) {
        list.clear();
        self.pulls = list;
    }

    /// Whether queues wait to be handed to their connections ([`HomeQueues::take_pulls`]).
    pub fn has_pulls(&self) -> bool {
        !self.pulls.is_empty()
    }

    /// A queue asked of a connection that is gone (or going) is dispatched this turn
    /// instead; it is still marked as waiting for dispatch.
    pub fn dispatch_this_turn(&mut self, queue: QueueId) {
        if let Some(q) = self.queues.get_mut(&queue) {
            q.in_dirty_list = true;
            self.dirty.push(queue);
        }
    }

    /// Takes what connections on this shard must be told.
    pub fn take_for_connections(&mut self) -> ForConnections {
        std::mem::take(&mut self.for_connections)
    }

    /// Marks a queue as having something to dispatch (O(1): the queue carries a flag,
    /// so a turn with many dirty queues does not scan the list): this turn, or, for a
    /// queue its consumer's connection pulls, when the write pass reaches that
    /// connection — then only if it has messages (credit granted to an empty queue
    /// needs no visit).
    pub fn mark_dirty(&mut self, queue: QueueId) {
        if let Some(q) = self.queues.get_mut(&queue) {
            if !q.in_dirty_list {
                match q.pull_conn() {
                    Some(conn) if q.ready_count() > 0 => {
                        q.in_dirty_list = true;
                        self.pulls.push((conn, queue));
                    }
                    Some(_) => {}
                    None => {
                        q.in_dirty_list = true;
                        self.dirty.push(queue);
                    }
                }
            }
        } else if let Some(s) = self.streams.get_mut(&queue) {
            if !s.in_dirty_list {
                s.in_dirty_list = true;
                self.dirty.push(queue);
            }
        }
    }

    /// Gives back the room of tables that are mostly empty and of per-turn lists that
    /// grew in a burst (`reclaim`, between turns).
    pub fn release_spare(&mut self) {
        use crate::model::worth_shrinking;
        if worth_shrinking(self.queues.len(), self.queues.capacity()) {
            self.queues.shrink_to_fit();
        }
        if worth_shrinking(self.timers.len(), self.timers.capacity()) {
            self.timers.shrink_to_fit();
        }
        if self.dirty.is_empty() && self.dirty.capacity() > 64 {
            self.dirty = Vec::new();
        }
        if self.pulls.is_empty() && self.pulls.capacity() > 64 {
            self.pulls = Vec::new();
        }
        if self.scratch.is_empty() && self.scratch.capacity() > 64 {
            self.scratch = Vec::new();
        }
        if self.deliveries.is_empty() && self.deliveries.capacity() > 64 {
            self.deliveries = Vec::new();
        }
    }
}

/// The queue side at work in one call: its own state, and the shard's common parts (the
/// outbox, the wheel, the directory replica). Made by [`super::State::queue_side`] or by
/// the connection side's [`super::conns::ConnSide::queues`].
pub struct QueueSide<'a> {
    home: &'a mut HomeQueues,
    common: &'a mut Common,
}

impl<'a> QueueSide<'a> {
    pub fn new(home: &'a mut HomeQueues, common: &'a mut Common) -> QueueSide<'a> {
        QueueSide { home, common }
    }

    /// [`HomeQueues::dispatch_this_turn`], for a connection that goes with queues
    /// waiting for its write.
    pub fn dispatch_this_turn(&mut self, queue: QueueId) {
        self.home.dispatch_this_turn(queue);
    }

    /// [`HomeQueues::prefetch_ahead`] for a loop on the connection side.
    pub fn prefetch_ahead<T>(
        &self,
        items: &[T],
        at: usize,
        home: impl FnOnce(&T) -> Option<QueueId>,
    ) {
        self.home.prefetch_ahead(items, at, home);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{QueueLimits, QueueSettings};

    fn plain_queue(i: u64, now: Instant) -> Queue {
        Queue::new(
            QueueId(i),
            0,
            "/".into(),
            format!("q{i}").into(),
            QueueSettings {
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: Default::default(),
                message_ttl: None,
                expires: None,
                max_priority: None,
                single_active_consumer: false,
                dead_letter: None,
                stored: false,
            },
            QueueLimits::default(),
            now,
        )
    }

    #[test]
    fn a_queue_marked_dirty_many_times_is_listed_once() {
        let mut home = HomeQueues::default();
        let now = Instant::now();
        for i in 1..=100 {
            home.queues
                .insert(QueueId(i), Box::new(plain_queue(i, now)));
        }
        for _ in 0..10 {
            for i in 1..=100 {
                home.mark_dirty(QueueId(i));
            }
        }
        home.mark_dirty(QueueId(999));
        assert_eq!(home.dirty.len(), 100);
        assert!(home.queues.values().all(|q| q.in_dirty_list));
        let round = home.take_round();
        assert_eq!(round.len(), 100);
        assert!(!home.has_dirty());
    }

    /// A queue its consumer's connection pulls is asked of that connection once however
    /// often it is marked, only while it has messages (credit for an empty queue needs
    /// no visit), and never put on the turn's list; asked of a connection that is gone,
    /// it goes on the turn's list still marked.
    #[test]
    fn a_pulled_queue_is_asked_of_its_connection_once_and_only_with_messages() {
        use crate::model::message::{BodyChunks, Message};
        let mut home = HomeQueues::default();
        let now = Instant::now();
        let conn = ConnId {
            slot: 3,
            generation: 7,
        };
        let mut q = plain_queue(1, now);
        let target = ConsumerTarget {
            shard: 0,
            conn,
            channel: 1,
            consumer: 1,
        };
        q.add_consumer(target, true, false, 0, now)
            .expect("consume");
        q.refresh_pull(0, true);
        home.queues.insert(QueueId(1), Box::new(q));
        home.mark_dirty(QueueId(1));
        assert!(
            !home.has_pulls() && !home.has_dirty(),
            "an empty queue is not asked"
        );
        let msg = LocalMessage::new(Message::new(
            "".into(),
            "q1".into(),
            bytes::Bytes::from_static(&[0, 0]),
            BodyChunks::new(),
            0,
        ));
        if let Some(q) = home.queues.get_mut(&QueueId(1)) {
            q.enqueue(msg, now);
        }
        for _ in 0..5 {
            home.mark_dirty(QueueId(1));
        }
        assert_eq!(home.take_pulls(), vec![(conn, QueueId(1))]);
        assert!(!home.has_dirty());
        assert!(home.get(QueueId(1)).is_some_and(|q| q.in_dirty_list));
        home.dispatch_this_turn(QueueId(1));
        assert_eq!(home.take_round(), vec![QueueId(1)]);
    }
}
