//! Owns: writing deliveries to consumers on this shard — encoding runs of deliveries into
//! their connection's outbound buffer, spending the consumer's credit (messages and
//! bytes), topping it up again while the socket has room, marking no-ack runs so that
//! their queue learns when they are on the wire — and turning written bytes back into
//! `Written` settlements.
//!
//! Does not: decide what to deliver (queues dispatch against credit) or write to sockets
//! (the connection's writer task does).

use std::borrow::Borrow;

use smallvec::SmallVec;

use crate::model::ids::{ConnId, ConsumerTarget, QueueRef};
use crate::model::message::{LocalMessage, Message};
use crate::model::spare::SpareLists;
use crate::queue::PulledRun;
use crate::session::channel::{Channel, ChannelPhase};
use crate::session::channel_table::ChannelTable;
use crate::session::connection::WriteMark;
use crate::session::consumer::{Credit, Window};

use super::ConnSide;
use crate::shard::inbox::{Delivery, QueueOp};
use crate::shard::Shard;

/// Credit granted to consumers in one pass (delivery or top-up), for the queues it goes
/// to: (queue, consumer key, credit). A few per pass, so on the stack.
pub type Grants = SmallVec<[(QueueRef, u64, Credit); 4]>;

/// How far ahead `deliver_local` hints a delivery's connection, and its channel.
const PREFETCH_CONN_AHEAD: usize = 8;
const PREFETCH_CHANNEL_AHEAD: usize = 4;

/// A delivery's message handle: one of this shard's (`LocalMessage`) is deferred when
/// small, for the write pass to encode just before the `send`; one from another shard
/// (`Message`) is encoded at once.
pub trait DeliveredMessage: Borrow<Message> {
    /// The handle, if it is this shard's.
    fn local(&self) -> Option<&LocalMessage>;
}

impl DeliveredMessage for LocalMessage {
    fn local(&self) -> Option<&LocalMessage> {
        Some(self)
    }
}

impl DeliveredMessage for Message {
    fn local(&self) -> Option<&LocalMessage> {
        None
    }
}

impl ConnSide<'_> {
    /// Writes deliveries to consumers on this shard. Consecutive deliveries to the same
    /// consumer from the same queue (the common case: a queue dispatches a run to its
    /// consumer) look the connection, channel and consumer up once. A delivery for a
    /// consumer that is gone goes back to its queue.
    pub fn deliver_local<M: DeliveredMessage>(
        &mut self,
        shard: &Shard,
        batch: &mut Vec<Delivery<M>>,
    ) {
        let window = no_ack_window(shard);
        let high_water = shard.config.net.write_high_water;
        // Called once per dispatch round (or per 1,024 deliveries): the connections
        // written and the credit grants stay on the stack while they are few.
        let mut requeue = Vec::new();
        let mut grants = Grants::new();
        let mut start = 0;
        let hint = batch.len() >= crate::shard::home::PREFETCH_FROM;
        while start < batch.len() {
            // At thousands of subscribers every delivery's connection and channel are
            // cold: hint them ahead (the connection 8 deliveries ahead; 4 ahead, its
            // lines then loaded, the channel it holds).
            if let Some(d) = batch.get(start + PREFETCH_CONN_AHEAD).filter(|_| hint) {
                self.conns.prefetch(d.target.conn);
            }
            if let Some(d) = batch.get(start + PREFETCH_CHANNEL_AHEAD).filter(|_| hint) {
                if let Some(ch) = self
                    .conns
                    .get(d.target.conn)
                    .and_then(|c| c.channels.get(&d.target.channel))
                {
                    ch.prefetch_for_delivery();
                }
            }
            let (target, queue) = (batch[start].target, batch[start].queue);
            let mut end = start + 1;
            while end < batch.len() && batch[end].target == target && batch[end].queue == queue {
                end += 1;
            }
            let run = &batch[start..end];
            start = end;
            let Some((conn, mut writes)) = self.conns.get_mut_with_writes(target.conn) else {
                requeue.extend(run.iter().filter(|d| !d.no_ack).map(|d| (queue, d.seq)));
                continue;
            };
            let has_room = conn.out.queued_bytes() < high_water;
            let (out, marks) = (&mut conn.out, &mut conn.write_marks);
            let Some(ch) = consuming_channel(&mut conn.channels, target) else {
                requeue.extend(run.iter().filter(|d| !d.no_ack).map(|d| (queue, d.seq)));
                continue;
            };
            let first_tag = ch.next_delivery_tag();
            for d in run {
                ch.record_delivery(queue, d.seq, Some(target.consumer), d.no_ack, d.redelivered);
            }
            let global = if ch.global_prefetch > 0 {
                ch.global_room()
            } else {
                None
            };
            let flow_active = ch.flow_active;
            if let Some(c) = ch.consumers.get_mut(&target.consumer) {
                let bytes: u64 = run.iter().map(|d| d.msg.borrow().accounted_size()).sum();
                c.credit = c.credit.saturating_sub(run.len() as u32);
                c.credit_bytes = c.credit_bytes.saturating_sub(bytes);
                for (d, tag) in run.iter().zip(first_tag..) {
                    let (channel, redelivered) = (target.channel, d.redelivered);
                    match d.msg.local() {
                        Some(msg) => out.deliver_later(channel, &c.tag, tag, redelivered, msg),
                        None => out.deliver(channel, &c.tag, tag, redelivered, d.msg.borrow()),
                    }
                }
                if c.no_ack {
                    let mark = WriteMark {
                        end: out.total_queued(),
                        queue,
                        key: c.queue_key,
                        count: run.len() as u32,
                        bytes,
                    };
                    mark_no_ack_run(marks, mark);
                }
                if (c.no_ack || c.prefetch == 0) && flow_active {
                    if let Some(grant) = c.take_top_up(has_room, window, global) {
                        grants.push(grant);
                    }
                }
            }
            writes.mark(conn);
        }
        batch.clear();
        self.send_grants(shard, &grants);
        for (queue, seq) in requeue {
            self.queues().settle_to(shard, queue, QueueOp::Requeue(seq));
        }
    }

    /// Writes a pulled queue's run ([`QueueSide::pull_queue`]: `run.count` no-ack
    /// deliveries of `msgs`, in order, to the queue's one consumer) as `deliver_local`
    /// would write the same deliveries, with the connection, channel and consumer looked
    /// up once and the channel's tags and counts, the consumer's credit and the write
    /// mark settled once for the run. A consumer gone meanwhile loses them (no-ack:
    /// nothing goes back, as in `deliver_local`). Leaves `msgs` empty. The consumer's
    /// credit is topped up right after the run; a remainder of the same pull that went
    /// the general way (`deliver_local`, after this) may top it up again — the queue's
    /// and the channel's view of the credit stay equal either way.
    ///
    /// [`QueueSide::pull_queue`]: crate::shard::home::QueueSide::pull_queue
    pub fn deliver_pulled(
        &mut self,
        shard: &Shard,
        queue: QueueRef,
        run: PulledRun,
        msgs: &mut Vec<LocalMessage>,
    ) {
        let target = run.target;
        let mut grants = Grants::new();
        if let Some((conn, mut writes)) = self.conns.get_mut_with_writes(target.conn) {
            let has_room = conn.out.queued_bytes() < shard.config.net.write_high_water;
            let (out, marks) = (&mut conn.out, &mut conn.write_marks);
            if let Some(ch) = consuming_channel(&mut conn.channels, target) {
                let first_tag = ch.record_no_ack_deliveries(u64::from(run.count));
                let global = ch.global_room();
                let flow_active = ch.flow_active;
                if let Some(c) = ch.consumers.get_mut(&target.consumer) {
                    c.credit = c.credit.saturating_sub(run.count);
                    c.credit_bytes = c.credit_bytes.saturating_sub(run.bytes);
                    out.deliver_run_later(target.channel, &c.tag, first_tag, msgs);
                    let mark = WriteMark {
                        end: out.total_queued(),
                        queue,
                        key: c.queue_key,
                        count: run.count,
                        bytes: run.bytes,
                    };
                    mark_no_ack_run(marks, mark);
                    if flow_active {
                        if let Some(grant) = c.take_top_up(has_room, no_ack_window(shard), global) {
                            grants.push(grant);
                        }
                    }
                }
                writes.mark(conn);
            }
        }
        msgs.clear();
        self.send_grants(shard, &grants);
    }

    /// Gives queues the credit their consumers here were granted.
    pub fn send_grants(&mut self, shard: &Shard, grants: &Grants) {
        for &(queue, key, n) in grants {
            self.queues().settle_to(
                shard,
                queue,
                QueueOp::Grant {
                    key,
                    credit: n.messages,
                    bytes: n.bytes,
                },
            );
        }
    }

    /// The writer wrote some of a connection's bytes: no-ack runs now on the wire are
    /// reported to their queues (one settlement per consecutive run of one consumer).
    /// Runs once per connection and write pass: the connection is looked up again after
    /// each settlement rather than the runs gathered in a list (one consumer per
    /// connection is the common case).
    pub fn settle_written(&mut self, shard: &Shard, conn: ConnId) {
        loop {
            let Some(c) = self.conn_mut(conn) else {
                return;
            };
            let written = c.out.total_written();
            let Some(mut run) = c.write_marks.front().copied() else {
                // All written (the common case): the list's room goes to the spares.
                SPARE_MARKS.with_borrow_mut(|s| s.give_back(&mut c.write_marks));
                return;
            };
            if run.end > written {
                return;
            }
            c.write_marks.pop_front();
            while let Some(next) = c.write_marks.front() {
                if next.end > written || next.queue != run.queue || next.key != run.key {
                    break;
                }
                run.count += next.count;
                run.bytes += next.bytes;
                c.write_marks.pop_front();
            }
            self.queues().settle_to(
                shard,
                run.queue,
                QueueOp::Written {
                    key: run.key,
                    count: run.count,
                    bytes: run.bytes,
                },
            );
        }
    }
}

/// The open channel of `target` while its consumer is still there: where a delivery to
/// it goes (a delivery to a consumer gone meanwhile goes back, or is lost for no-ack).
fn consuming_channel(channels: &mut ChannelTable, target: ConsumerTarget) -> Option<&mut Channel> {
    channels
        .get_mut(&target.channel)
        .filter(|ch| ch.phase == ChannelPhase::Open && ch.consumers.contains_key(&target.consumer))
}

/// Notes that a no-ack run's queue learns it is written once the connection's bytes up
/// to `mark.end` are: every mark waiting is for bytes not yet written, so one for the
/// same consumer just before it is extended (a wide fan-out gives each subscriber a
/// delivery per round) and a subscriber waiting for the write pass holds one mark, not
/// one per delivery.
fn mark_no_ack_run(marks: &mut std::collections::VecDeque<WriteMark>, mark: WriteMark) {
    if marks.capacity() == 0 {
        SPARE_MARKS.with_borrow_mut(|s| s.lend(marks));
    }
    match marks.back_mut() {
        Some(last) if last.queue == mark.queue && last.key == mark.key => {
            last.end = mark.end;
            last.count += mark.count;
            last.bytes += mark.bytes;
        }
        _ => marks.push_back(mark),
    }
}

thread_local! {
    /// Emptied write-mark lists of this shard's connections (`model::spare`): a
    /// connection holds one only while it has no-ack deliveries not yet written.
    static SPARE_MARKS: std::cell::RefCell<SpareLists<WriteMark>> =
        const { std::cell::RefCell::new(SpareLists::new()) };
}

/// The no-ack window from the configuration.
pub fn no_ack_window(shard: &Shard) -> Window {
    Window {
        messages: shard.config.shard.no_ack_window,
        bytes: shard.config.shard.no_ack_window_bytes,
    }
}
