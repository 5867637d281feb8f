//! Owns: the queue side of a shard — enqueueing routed messages into home queues (with
//! the policy hooks of `policy`), the dispatch pass that turns queue credit into
//! deliveries (written by `deliver`), settlements (ack, requeue, discard, credit, written,
//! cancel), requests that need an answer (consume, get, stats, purge, delete checks), and
//! queue housekeeping timers (TTL, `x-expires`).
//!
//! Does not: parse frames or decide protocol replies beyond encoding deliveries into a
//! connection's outbound buffer.

use std::time::Instant;

use crate::config::Config;
use crate::model::dead_letter::Reason;
use crate::model::ids::{ChannelRef, QueueId, QueueRef};
use crate::model::message::{LocalMessage, Message};
use crate::model::routing::{QueueMeta, VhostIdx};
use crate::ops::event::OpsEvent;
use crate::policy::max_length::Overflow;
use crate::queue::{dispatch_args, PulledRun, Queue, QueueSettings};

use super::QueueSide;

/// Whether the write pass dispatches `q` follows its consumers, limits and TTL
/// ([`Queue::refresh_pull`]), on this shard and with `shard.dispatch_at_write`: call it
/// after changing any of them.
pub fn refresh_pull(shard: &Shard, q: &mut Queue) {
    q.refresh_pull(shard.id, shard.config.shard.dispatch_at_write);
}
use crate::shard::inbox::{
    AddressedQueueOp, DeleteRefused, Delivery, GotMessage, QueueOp, QueueReply, QueueRequest,
    RemoteDelivery,
};
use crate::shard::{Shard, TimerKey};

impl QueueSide<'_> {
    /// Appends a message routed by `origin` to a home queue, applying the queue's
    /// policies. Returns false when the queue refused it (`reject-publish`); a queue that
    /// is gone or condemned accepts (and drops) it, as if it had not been routed there.
    pub fn enqueue(
        &mut self,
        shard: &Shard,
        queue: QueueId,
        msg: LocalMessage,
        origin: ChannelRef,
        now: Instant,
    ) -> bool {
        let Some(q) = self.home.queues.get_mut(&queue) else {
            self.stream_append(shard, queue, msg);
            return true;
        };
        if q.condemned {
            return true;
        }
        if q.limits.max_length.is_some() && !super::policy::admits(q, msg.accounted_size()) {
            if q.limits
                .max_length
                .as_ref()
                .is_some_and(|m| m.overflow == Overflow::RejectPublishDlx)
            {
                q.died_message(msg, Reason::Maxlen);
                self.collect_dead(queue);
            }
            self.ensure_policy_timer(shard, queue);
            return false;
        }
        let has_ttl = q.settings.message_ttl.is_some() || msg.ttl_ms().is_some();
        // The head's expiry arms the queue's timer: a message with a TTL that becomes the
        // head (of an empty queue; in a priority queue, possibly of a non-empty one) may
        // expire before whatever the timer waits for.
        let new_head = has_ttl && (q.ready_count() == 0 || q.is_priority());
        let stored = (q.settings.stored && msg.is_persistent()).then(|| LocalMessage::clone(&msg));
        // The turn's stamp, converted once by the clock for every queue (their base is
        // its start, `create_home_queue`).
        let seq = if now == shard.clock.now() {
            q.enqueue_at(msg, now, shard.clock.stamp())
        } else {
            q.enqueue(msg, now)
        };
        if let Some(msg) = stored {
            shard.store.borrow_mut().stage(queue, seq, &msg);
        }
        let checks = q.limits.max_length.is_some()
            || q.limits.capacity.is_some()
            || q.limits.slow.active().is_some();
        // Drop-head rings and Cycle discards (in the checks) may kill messages.
        let dead_letters = checks && q.settings.dead_letter.is_some();
        if q.has_consumers() && !q.in_dirty_list {
            q.in_dirty_list = true;
            match q.pull_conn() {
                // A message with a TTL of its own is dispatched this turn, as it was
                // before dispatch at the write (waiting for the pass, it could expire);
                // one that finds its queue already waiting for the pass waits with it.
                Some(conn) if !has_ttl => self.home.pulls.push((conn, queue)),
                _ => self.home.dirty.push(queue),
            }
        }
        if new_head {
            self.ensure_queue_timer(queue);
        }
        if checks {
            self.after_enqueue(shard, queue, origin, now);
        }
        if dead_letters {
            self.collect_dead(queue);
        }
        true
    }

    /// Dispatches one dirty queue as far as consumer credit allows: deliveries for
    /// consumers on other shards go to the outbox, those for consumers here are handed
    /// over in `local` (the connection side writes them, [`State::dispatch`]).
    ///
    /// [`State::dispatch`]: crate::shard::State
    pub fn dispatch_queue(
        &mut self,
        shard: &Shard,
        qid: QueueId,
        now: Instant,
        local: &mut Vec<Delivery<LocalMessage>>,
    ) {
        let budget = shard.config.shard.dispatch_budget;
        self.dispatch_within(shard, qid, now, budget, local);
    }

    /// Dispatches a queue the write pass pulls, for its consumer's connection: the
    /// plain run at its head moved to `msgs` ([`Queue::dispatch_pulled`]: no record per
    /// message) and returned with the queue for the connection side to deliver; what the
    /// run stopped at (an entry with an expiry of its own, evicted or redelivered) is
    /// dispatched the general way into `local` ([`QueueSide::dispatch_within`], which
    /// reads an evicted head back or drops an expired one), after the run and within
    /// what is left of the budget. A queue that is not pulled (any more) is dispatched
    /// the general way. A queue left with more to give asks for another pull.
    pub fn pull_queue(
        &mut self,
        shard: &Shard,
        qid: QueueId,
        now: Instant,
        msgs: &mut Vec<LocalMessage>,
        local: &mut Vec<Delivery<LocalMessage>>,
    ) -> Option<(QueueRef, PulledRun)> {
        let budget = shard.config.shard.dispatch_budget;
        let pulled = self.home.queues.get_mut(&qid).and_then(|q| {
            let run = q.dispatch_pulled(now, budget, msgs)?;
            q.in_dirty_list = false;
            Some((run, q.can_dispatch()))
        });
        let Some((run, more)) = pulled else {
            self.dispatch_queue(shard, qid, now, local);
            return None;
        };
        let left = budget.saturating_sub(run.count as usize);
        if run.general_next && left > 0 {
            self.dispatch_within(shard, qid, now, left, local);
        } else if more {
            self.home.mark_dirty(qid);
        }
        let queue = QueueRef {
            id: qid,
            home: shard.id,
        };
        (run.count > 0).then_some((queue, run))
    }

    /// [`QueueSide::dispatch_queue`] with `budget` messages at most.
    fn dispatch_within(
        &mut self,
        shard: &Shard,
        qid: QueueId,
        now: Instant,
        budget: usize,
        local: &mut Vec<Delivery<LocalMessage>>,
    ) {
        let mut out = std::mem::take(&mut self.home.scratch);
        let (more, dead) = match self.home.queues.get_mut(&qid) {
            Some(q) => {
                q.in_dirty_list = false;
                q.dispatch(now, budget, &mut out);
                (q.can_dispatch(), q.has_dead())
            }
            None => {
                self.home.scratch = out;
                if self.is_stream(qid) {
                    self.dispatch_stream(shard, qid, local);
                }
                return;
            }
        };
        if dead {
            self.collect_dead(qid);
        }
        let queue = QueueRef {
            id: qid,
            home: shard.id,
        };
        for d in out.drain(..) {
            if d.target.shard == shard.id {
                local.push(Delivery {
                    target: d.target,
                    queue,
                    seq: d.seq,
                    msg: d.msg,
                    redelivered: d.redelivered,
                    no_ack: d.no_ack,
                });
            } else if let Some(v) = self
                .common
                .outbox
                .deliver
                .get_mut(usize::from(d.target.shard))
            {
                v.push(RemoteDelivery {
                    target: d.target,
                    queue,
                    seq: d.seq,
                    msg: Message::clone(&d.msg),
                    redelivered: d.redelivered,
                    no_ack: d.no_ack,
                });
            }
        }
        self.home.scratch = out;
        if more {
            self.home.mark_dirty(qid);
        }
    }

    /// Sends a settlement to a queue, locally or through the outbox.
    pub fn settle_to(&mut self, shard: &Shard, queue: QueueRef, op: QueueOp) {
        if queue.home == shard.id {
            self.settle(
                shard,
                AddressedQueueOp {
                    queue: queue.id,
                    op,
                },
            );
        } else {
            self.common.outbox.settle(
                queue.home,
                AddressedQueueOp {
                    queue: queue.id,
                    op,
                },
            );
        }
    }

    /// Applies a settlement to a home queue.
    pub fn settle(&mut self, shard: &Shard, s: AddressedQueueOp) {
        let now = shard.clock.now();
        let Some(q) = self.home.queues.get_mut(&s.queue) else {
            return self.settle_stream(shard, s);
        };
        let mut dirty = false;
        let mut shrunk = false;
        let mut dead = false;
        let limited = q.limits.capacity.is_some();
        match s.op {
            QueueOp::Ack(seq) => {
                shrunk = q.ack(seq);
            }
            QueueOp::Discard(seq) => {
                shrunk = q.discard(seq);
                dead = q.has_dead();
            }
            QueueOp::Requeue(seq) => {
                dirty = q.requeue(seq);
            }
            QueueOp::Grant { key, credit, bytes } => {
                q.grant(key, credit, bytes);
                dirty = true;
            }
            QueueOp::Written { key, count, bytes } => {
                q.written(key, u64::from(count), bytes);
                shrunk = true;
            }
            // Only a stream's readers send it.
            QueueOp::StreamAck { .. } => {}
            QueueOp::Cancel { key } => {
                q.remove_consumer(key, now);
                refresh_pull(shard, q);
                if q.auto_delete_due() {
                    self.common.outbox.delete_home_queue(
                        q.vhost_idx,
                        q.name.clone(),
                        s.queue,
                        shard.id,
                    );
                }
                shrunk = true;
                self.ensure_queue_timer(s.queue);
            }
        }
        if dirty {
            self.home.mark_dirty(s.queue);
        }
        if dead {
            self.collect_dead(s.queue);
        }
        if shrunk && limited {
            self.queue_shrunk(shard, s.queue);
        }
    }

    /// Serves a request to a home queue.
    pub fn queue_request(&mut self, shard: &Shard, req: QueueRequest) -> QueueReply {
        let now = shard.clock.now();
        let qid = match &req {
            QueueRequest::Consume { queue, .. }
            | QueueRequest::ConsumeStream { queue, .. }
            | QueueRequest::Cancel { queue, .. }
            | QueueRequest::Get { queue, .. }
            | QueueRequest::Stats { queue, .. }
            | QueueRequest::Purge { queue }
            | QueueRequest::CheckDelete { queue, .. } => *queue,
        };
        if self.is_stream(qid) {
            return self.stream_request(shard, req);
        }
        let consumes = matches!(req, QueueRequest::Consume { .. } | QueueRequest::Get { .. });
        // A channel that would consume from a queue the slow-consumer policy deleted (or
        // is deleting) is told so, whichever arrives first: this answer or the close.
        if consumes && self.slow_deleted(qid, now, &shard.config) {
            return QueueReply::SlowConsumerClosed;
        }
        if matches!(req, QueueRequest::Get { .. })
            && self.home.queues.get(&qid).is_some_and(|q| q.head_evicted())
        {
            self.read_back_now(shard, qid);
        }
        let Some(q) = self.home.queues.get_mut(&qid) else {
            return QueueReply::Gone;
        };
        let reply = match req {
            QueueRequest::Consume {
                target,
                no_ack,
                exclusive,
                priority,
                ..
            } => {
                let added = q.add_consumer(target, no_ack, exclusive, priority, now);
                refresh_pull(shard, q);
                QueueReply::Consumed(added)
            }
            QueueRequest::Cancel { key, .. } => {
                q.remove_consumer(key, now);
                refresh_pull(shard, q);
                if q.auto_delete_due() {
                    self.common.outbox.delete_home_queue(
                        q.vhost_idx,
                        q.name.clone(),
                        qid,
                        shard.id,
                    );
                }
                QueueReply::Cancelled
            }
            QueueRequest::Get { no_ack, from, .. } => QueueReply::Got(
                q.get(now, no_ack, Some(from))
                    .map(|(e, remaining)| GotMessage {
                        seq: e.seq,
                        msg: Message::clone(&e.msg),
                        redelivered: e.redelivered,
                        remaining,
                    }),
            ),
            QueueRequest::Stats { touch, .. } => {
                if touch {
                    q.touch(now);
                }
                QueueReply::Stats(q.stats())
            }
            QueueRequest::Purge { .. } => QueueReply::Purged(q.purge()),
            // A stream's reader on a queue that is not (or no longer) a stream.
            QueueRequest::ConsumeStream { .. } => QueueReply::Gone,
            QueueRequest::CheckDelete {
                if_unused,
                if_empty,
                ..
            } => {
                let stats = q.stats();
                QueueReply::DeleteChecked(if if_unused && stats.consumers > 0 {
                    Err(DeleteRefused::InUse)
                } else if if_empty && stats.messages > 0 {
                    Err(DeleteRefused::NotEmpty)
                } else {
                    Ok(stats.messages)
                })
            }
        };
        self.collect_dead(qid);
        self.ensure_queue_timer(qid);
        self.queue_shrunk(shard, qid);
        reply
    }

    /// Creates a home queue from its directory entry; its entries' times are stamps from
    /// `stamps_from`, the shard clock's start (`Queue::with_base`).
    pub fn create_home_queue(
        &mut self,
        config: &Config,
        vhost: VhostIdx,
        meta: &QueueMeta,
        now: Instant,
        stamps_from: Instant,
    ) {
        if self.home.queues.contains_key(&meta.queue.id) {
            return;
        }
        if crate::policy::stream_args::is_stream(&meta.arguments) {
            return self.create_home_stream(config, vhost, meta);
        }
        let vhost_name = self
            .common
            .directory
            .vhost(vhost)
            .map(|v| v.name.clone())
            .unwrap_or_default();
        let (policy, effective) = super::runtime_policy::effective_arguments(
            config,
            &vhost_name,
            meta.name.as_str_lossy().as_ref(),
            &meta.arguments,
        );
        let derived = super::runtime_policy::Derived::of(&effective);
        let settings = QueueSettings {
            durable: meta.durable,
            exclusive: meta.exclusive_owner.is_some(),
            auto_delete: meta.auto_delete,
            arguments: meta.arguments.clone(),
            message_ttl: derived.message_ttl,
            expires: derived.expires,
            // Validated by the coordinator; a value that slipped through is ignored.
            max_priority: dispatch_args::max_priority(&meta.arguments),
            single_active_consumer: dispatch_args::single_active_consumer(&meta.arguments),
            dead_letter: derived.dead_letter,
            stored: meta.durable && meta.exclusive_owner.is_none(),
        };
        OpsEvent::QueueCreate {
            vhost: vhost_name.clone(),
            queue: meta.name.to_string(),
            durable: settings.durable,
            exclusive: settings.exclusive,
            auto_delete: settings.auto_delete,
        }
        .emit();
        let mut limits = super::policy::queue_limits(
            config,
            &vhost_name,
            meta.name.as_str_lossy().as_ref(),
            &effective,
        );
        limits.policy = policy;
        let queue = Queue::new(
            meta.queue.id,
            vhost,
            vhost_name,
            meta.name.clone(),
            settings,
            limits,
            now,
        )
        .with_base(stamps_from);
        self.home.queues.insert(meta.queue.id, Box::new(queue));
        self.ensure_queue_timer(meta.queue.id);
    }

    /// Deletes a home queue: its consumers are told (basic.cancel where the client
    /// supports it), its messages released.
    pub fn delete_home_queue(&mut self, shard: &Shard, queue: QueueId) {
        let Some(mut q) = self.home.queues.remove(&queue) else {
            self.delete_home_stream(shard, queue);
            return;
        };
        // Publishers it stopped may go on; its messages are released now.
        let blocked: Vec<_> = q.limits.blocked_publishers.take_all();
        self.release_publishers(shard, queue, blocked);
        if q.settings.stored {
            shard.store.borrow_mut().queue_deleted(queue);
        }
        q.release_all();
        if let Some((timer, _)) = self.home.timers.remove(&queue) {
            self.common.wheel.cancel(timer);
        }
        self.home.dirty.retain(|id| *id != queue);
        OpsEvent::QueueDeleted {
            vhost: q.vhost.clone(),
            queue: q.name.to_string(),
        }
        .emit();
        for c in q.consumers() {
            if c.target.shard == shard.id {
                self.home.for_connections.consumers_gone.push(c.target);
            } else {
                shard.peers.send(
                    c.target.shard,
                    crate::shard::inbox::ShardMsg::ConsumerGone(c.target),
                );
            }
        }
    }

    /// Arms (or re-arms earlier) the housekeeping timer of a queue that needs one.
    pub fn ensure_queue_timer(&mut self, queue: QueueId) {
        let Some(q) = self.home.queues.get(&queue) else {
            return;
        };
        let want = match (q.head_expiry(), q.expiry_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(want) = want else {
            return;
        };
        if let Some((timer, at)) = self.home.timers.get(&queue).copied() {
            if at <= want {
                return;
            }
            self.common.wheel.cancel(timer);
        }
        let timer = self
            .common
            .wheel
            .arm(want, TimerKey::QueueHousekeeping(queue));
        self.home.timers.insert(queue, (timer, want));
    }

    /// A queue's housekeeping timer fired: expire head messages, delete an unused queue
    /// whose `x-expires` has passed, re-arm.
    pub fn queue_housekeeping(&mut self, shard: &Shard, queue: QueueId, now: Instant) {
        self.home.timers.remove(&queue);
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        let expired = q.expire_head(now);
        self.collect_dead(queue);
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        if q.expiry_deadline().is_some_and(|at| at <= now) {
            self.common
                .outbox
                .delete_home_queue(q.vhost_idx, q.name.clone(), queue, shard.id);
            return;
        }
        self.ensure_queue_timer(queue);
        if expired > 0 {
            self.queue_shrunk(shard, queue);
        }
    }
}
