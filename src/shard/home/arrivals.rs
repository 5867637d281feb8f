//! Owns: taking the publishes other shards routed here into their home queues, and the
//! one race that comes with it. A publisher's shard routes by its own replica of the
//! directory, so it can route to a queue declared a moment ago before this shard (the
//! queue's home) has applied the declaration: the coordinator put the `Apply` in this
//! shard's control inbox first, but this shard may take its publish inbox first (to
//! serve a queue request that came in between). Such a publish is *parked* until the
//! declaration is applied, then enqueued in arrival order, confirmed only then — never
//! dropped and confirmed as if it had been routed nowhere.
//!
//! How a queue that is not there yet is told apart from one already deleted: the
//! coordinator hands out queue ids in increasing order and broadcasts each declaration
//! as it allocates the id, so every shard applies declarations in id order. An unknown
//! id above the highest this shard has applied is still coming; at or below it, the
//! queue is gone and the publish to it is dropped (as for any queue deleted while a
//! publish was on its way).
//!
//! Does not: route, or apply directory changes (`control`).

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use smallvec::SmallVec;

use super::QueueSide;
use crate::model::ids::QueueId;
use crate::model::message::LocalMessage;
use crate::shard::inbox::{ConfirmDone, Routed};
use crate::shard::Shard;

/// A publish waiting for the declaration of some of its queues.
pub struct Parked {
    msg: LocalMessage,
    /// Queues of this publish not yet known here.
    waiting: SmallVec<[QueueId; 2]>,
    origin: crate::model::ids::ChannelRef,
    confirm: u64,
    /// Whether every queue it reached so far took it.
    accepted: bool,
    /// Whether it entered a durable queue here (its confirm then waits for the store).
    stored: bool,
}

/// Publishes waiting for queue declarations, in arrival order, and the highest queue id
/// whose declaration this shard has applied.
#[derive(Default)]
pub struct Arrivals {
    parked: VecDeque<Parked>,
    highest_declared: u64,
}

impl Arrivals {
    /// Publishes parked now (for tests and metrics).
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Whether a queue unknown on this shard is still to be declared.
    fn is_coming(&self, queue: QueueId) -> bool {
        queue.0 > self.highest_declared
    }
}

impl QueueSide<'_> {
    /// Enqueues one publish routed here by another shard (or parks it), and queues its
    /// confirm once every queue has it.
    pub fn take_routed(&mut self, shard: &Shard, routed: Routed, now: Instant) {
        let msg = Rc::new(routed.msg);
        let mut waiting = SmallVec::new();
        let mut accepted = true;
        let staged_before = (routed.confirm != 0).then(|| shard.store.borrow().staged_refs());
        for (i, &queue) in routed.queues.iter().enumerate() {
            self.home.prefetch_ahead(&routed.queues, i, |&q| Some(q));
            if !self.home.queues.contains_key(&queue) && self.home.arrivals.is_coming(queue) {
                waiting.push(queue);
                continue;
            }
            accepted &= self.enqueue(shard, queue, Rc::clone(&msg), routed.origin, now);
        }
        let stored = staged_before.is_some_and(|b| b != shard.store.borrow().staged_refs());
        if waiting.is_empty() {
            self.confirm_routed(routed.origin, routed.confirm, accepted, stored);
        } else {
            self.home.arrivals.parked.push_back(Parked {
                msg,
                waiting,
                origin: routed.origin,
                confirm: routed.confirm,
                accepted,
                stored,
            });
        }
    }

    /// A queue declaration was applied on this shard: parked publishes whose queues are
    /// all known now go into them, in the order they arrived.
    pub fn queue_declared(&mut self, shard: &Shard, queue: QueueId, now: Instant) {
        self.home.arrivals.highest_declared = self.home.arrivals.highest_declared.max(queue.0);
        if self.home.arrivals.parked.is_empty() {
            return;
        }
        let parked = std::mem::take(&mut self.home.arrivals.parked);
        for mut p in parked {
            let mut still = SmallVec::new();
            let staged_before = shard.store.borrow().staged_refs();
            for q in p.waiting.drain(..) {
                if self.home.queues.contains_key(&q) || !self.home.arrivals.is_coming(q) {
                    p.accepted &= self.enqueue(shard, q, Rc::clone(&p.msg), p.origin, now);
                } else {
                    still.push(q);
                }
            }
            p.stored |= shard.store.borrow().staged_refs() != staged_before;
            if still.is_empty() {
                self.confirm_routed(p.origin, p.confirm, p.accepted, p.stored);
            } else {
                p.waiting = still;
                self.home.arrivals.parked.push_back(p);
            }
        }
    }

    fn confirm_routed(
        &mut self,
        origin: crate::model::ids::ChannelRef,
        seq: u64,
        ok: bool,
        stored: bool,
    ) {
        if seq != 0 && stored {
            self.hold_confirm(origin, seq, ok);
        } else if seq != 0 {
            self.common.outbox.confirm(
                origin.shard,
                ConfirmDone {
                    channel: origin,
                    first: seq,
                    last: seq,
                    rejected: !ok,
                },
            );
        }
    }
}
