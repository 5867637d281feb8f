//! Owns: re-publishing the messages that die in a home queue with a dead-letter exchange
//! (rejected or nacked without requeue, expired, dropped or refused by `x-max-length`,
//! and, when the queue asks for it, slow-consumer Cycle discards): the dead-lettered
//! copy gets its `x-death` headers (`model::dead_letter`), keeps the body (shared), is
//! routed through this shard's directory replica from the dead-letter exchange with the
//! queue's `x-dead-letter-routing-key` or its own routing key, loses the queues that
//! would close an automatic cycle (RabbitMQ's cycle detection), and is enqueued: local
//! queues directly, other shards' queues through their unbounded control inbox.
//!
//! Its publisher is the broker ([`ChannelRef::broker`]): no confirm, no flow control.
//! Sending on the control inbox never waits, so the inbox loop never blocks on another
//! shard; the volume is bounded by what the source queues held (each dead-lettered
//! message was in one), and each message dies at most once per queue without a
//! rejection in between (the cycle check), so chains of dead-letter queues end.
//!
//! Does not: decide when a message dies (the queue does, into its own list), or build
//! the headers (`model::dead_letter`).

use std::time::{SystemTime, UNIX_EPOCH};

use smallvec::SmallVec;

use crate::model::dead_letter::{death_queues, is_cycle, rewrite, Death, Reason};
use crate::model::exchange::Targets;
use crate::model::ids::{ChannelRef, QueueId};
use crate::model::message::{LocalMessage, Message};
use crate::model::routing::VhostIdx;
use crate::protocol::ShortStr;
use crate::queue::DeadLetterTarget;

use super::QueueSide;
use crate::shard::inbox::{Routed, ShardMsg};
use crate::shard::Shard;

/// A message that died in a home queue, waiting to be re-published this turn.
pub struct DeadLetter {
    msg: LocalMessage,
    reason: Reason,
    vhost: VhostIdx,
    /// The queue it died in.
    queue: ShortStr,
    target: DeadLetterTarget,
}

impl QueueSide<'_> {
    /// Moves the messages that died in `queue` to this turn's dead letters.
    pub fn collect_dead(&mut self, queue: QueueId) {
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        if !q.has_dead() {
            return;
        }
        let dead = q.take_dead();
        let Some(target) = q.settings.dead_letter.as_deref().cloned() else {
            return;
        };
        for (msg, reason) in dead {
            self.home.dead_letters.push(DeadLetter {
                msg,
                reason,
                vhost: q.vhost_idx,
                queue: q.name.clone(),
                target: target.clone(),
            });
        }
    }

    /// Re-publishes this turn's dead letters (and those that die on the way, e.g. pushed
    /// out of a full dead-letter queue) until none are left.
    pub fn run_dead_letters(&mut self, shard: &Shard) {
        let now = shard.clock.now();
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut remote: Vec<Vec<Routed>> = Vec::new();
        while !self.home.dead_letters.is_empty() {
            for d in std::mem::take(&mut self.home.dead_letters) {
                self.dead_letter_one(shard, d, time, now, &mut remote);
            }
        }
        for (sid, routed) in remote.into_iter().enumerate() {
            if !routed.is_empty() {
                shard.peers.send(sid as u16, ShardMsg::DeadLetter(routed));
            }
        }
    }

    fn dead_letter_one(
        &mut self,
        shard: &Shard,
        d: DeadLetter,
        time: u64,
        now: std::time::Instant,
        remote: &mut Vec<Vec<Routed>>,
    ) {
        let death = Death {
            reason: d.reason,
            queue: &d.queue,
            exchange: d.msg.exchange(),
            routing_key: d.msg.routing_key(),
            time,
        };
        // Properties that do not decode cannot carry x-death: the message is dropped.
        let Some((props, headers)) = rewrite(d.msg.raw_properties(), &death) else {
            return;
        };
        let routing_key = d
            .target
            .routing_key
            .clone()
            .unwrap_or_else(|| d.msg.routing_key().clone());
        let mut targets = Targets::new();
        let mut cycling: SmallVec<[QueueId; 2]> = SmallVec::new();
        {
            let Some(dir) = self.common.directory.vhost(d.vhost) else {
                return;
            };
            // A dead-letter exchange that does not exist drops the message (RabbitMQ).
            if dir
                .route(
                    &d.target.exchange,
                    &routing_key,
                    || Some(headers.clone()),
                    &mut targets,
                )
                .is_err()
            {
                return;
            }
            if d.reason != Reason::Rejected {
                for name in death_queues(&headers) {
                    if is_cycle(&headers, &name) {
                        if let Some(meta) = dir.queue(&ShortStr::from(name)) {
                            cycling.push(meta.queue.id);
                        }
                    }
                }
            }
        }
        targets.retain(|t| !cycling.contains(&t.id));
        if targets.is_empty() {
            return;
        }
        let msg = Message::new(
            d.target.exchange.clone(),
            routing_key,
            props,
            d.msg.body().iter().cloned().collect(),
            d.msg.body_size(),
        );
        let origin = ChannelRef::broker(shard.id);
        let mut local: Option<LocalMessage> = None;
        for t in &targets {
            if t.home == shard.id {
                let m = local.get_or_insert_with(|| std::rc::Rc::new(msg.clone()));
                let m = std::rc::Rc::clone(m);
                // What dies in the target on the way (drop-head, reject-publish-dlx)
                // joins this turn's dead letters.
                self.enqueue(shard, t.id, m, origin, now);
            } else {
                let at = usize::from(t.home);
                if remote.len() <= at {
                    remote.resize_with(at + 1, Vec::new);
                }
                match remote[at].last_mut() {
                    Some(last) if last.msg.ptr_eq(&msg) => last.queues.push(t.id),
                    _ => remote[at].push(Routed {
                        queues: SmallVec::from_slice(&[t.id]),
                        msg: msg.clone(),
                        origin,
                        confirm: 0,
                    }),
                }
            }
        }
    }
}
