//! Owns: one channel's state — open/closing, the publish it is assembling
//! (`session::content`), delivery tags and the unacknowledged list, consumers, qos,
//! confirm mode, the transaction buffer and the direct reply-to consumer.
//!
//! Does not: route, enqueue or touch another shard's queues. The shard's handler drives
//! it and turns what it returns into deliveries, settlements and frames.
//!
//! # Invariants
//! - `unacked` is sorted by delivery tag (tags are assigned in increasing order).
//! - Per consumer, `unacked` counts the entries in `unacked` with that consumer.

use std::collections::VecDeque;

use crate::model::ids::QueueRef;
use crate::model::message::Message;
use crate::model::prefetch;
use crate::protocol::method::BasicPublish;
use crate::protocol::ShortStr;
use crate::session::channel_consumers::ChannelConsumers;
use crate::session::confirm::ConfirmTracker;
use crate::session::consumer::ChannelConsumer;
use crate::session::content::ContentSlot;
use crate::session::error::ChannelError;
use crate::session::publisher::{PublisherFlow, Publishing};
use crate::session::reply_consumer::ReplyConsumer;

/// Where a channel is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelPhase {
    Open,
    /// The broker sent `channel.close`; everything but close/close-ok is discarded.
    Closing,
}

/// A delivery waiting for the client's acknowledgement.
#[derive(Debug, Clone, Copy)]
pub struct Unacked {
    pub tag: u64,
    pub queue: QueueRef,
    pub seq: u64,
    /// The consumer it was delivered to, or `None` for `basic.get`.
    pub consumer: Option<u32>,
}

/// An operation held back until `tx.commit`.
#[derive(Debug)]
pub enum TxOp {
    Publish {
        publish: BasicPublish,
        msg: Message,
    },
    Ack {
        tag: u64,
        multiple: bool,
    },
    Reject {
        tag: u64,
        multiple: bool,
        requeue: bool,
    },
}

/// One open channel.
#[derive(Debug)]
pub struct Channel {
    pub number: u16,
    /// Tells this channel apart from later ones reusing its number on the connection.
    pub epoch: u32,
    pub phase: ChannelPhase,
    pub content: ContentSlot,
    next_tag: u64,
    pub unacked: VecDeque<Unacked>,
    pub consumers: ChannelConsumers,
    next_consumer: u32,
    /// Prefetch for consumers created from now on (basic.qos global=false).
    pub prefetch: u32,
    /// Channel-wide prefetch (basic.qos global=true), 0 = none.
    pub global_prefetch: u32,
    /// Confirm mode: the publishes awaiting `basic.ack` / `basic.nack`. This and the
    /// other modes' state are boxed: a subscriber's channel has none of them, and the
    /// channel is held once per subscriber (issue 23).
    pub confirms: Option<Box<ConfirmTracker>>,
    /// Transaction mode: the publishes and acknowledgements of the open transaction.
    #[allow(clippy::box_collection)]
    pub tx: Option<Box<Vec<TxOp>>>,
    /// In a transaction: its committed publishes (from the first publish in tx mode).
    tx_commits: Option<Box<TxCommits>>,
    /// Producer flow control and publish counts, from the channel's first publish.
    publishing: Option<Box<Publishing>>,
    /// `channel.flow` from the client: false stops deliveries.
    pub flow_active: bool,
    /// The queue most recently declared on this channel; an empty queue name in later
    /// methods means this one (AMQP 0-9-1).
    pub last_queue: ShortStr,
    next_generated_tag: u64,
    /// While this channel waits for its own `queue.delete`: the tags of consumers whose
    /// queue went meanwhile, told with `basic.cancel` only after `delete-ok` (RabbitMQ's
    /// order; py-amqp fails on a cancel while it waits for the delete-ok).
    #[allow(clippy::box_collection)]
    held_cancels: Option<Box<Vec<ShortStr>>>,
    /// Its delivery-side counts; with the publish counts, what the management API shows
    /// as the channel's `message_stats` ([`Channel::counts`]).
    pub stats: DeliveryStats,
    /// Its direct reply-to consumer (`basic.consume` on `amq.rabbitmq.reply-to`), at
    /// most one, no-ack, with the replies it holds while `flow_active` is false.
    pub direct_reply: Option<Box<ReplyConsumer>>,
}

/// A transactional channel's committed publishes, tracked as confirms are (never
/// answered with `basic.ack`), so that `tx.commit-ok` waits for them.
#[derive(Debug, Default)]
struct TxCommits {
    tracker: ConfirmTracker,
    /// The last publish of each commit not answered yet, oldest first.
    marks: VecDeque<u64>,
}

/// A channel's delivery-side counts since it opened: plain adds where it delivers,
/// answers a get and takes an ack (its publish counts are `Publishing`'s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    pub deliver: u64,
    pub deliver_no_ack: u64,
    pub get: u64,
    pub get_no_ack: u64,
    pub redeliver: u64,
    pub ack: u64,
    /// `basic.get` answered `get-empty`.
    pub get_empty: u64,
}

impl DeliveryStats {
    /// Messages delivered: to consumers and to gets, with or without ack.
    pub fn delivered(&self) -> u64 {
        self.deliver + self.deliver_no_ack + self.get + self.get_no_ack
    }

    pub fn add(&mut self, o: &DeliveryStats) {
        self.deliver += o.deliver;
        self.deliver_no_ack += o.deliver_no_ack;
        self.get += o.get;
        self.get_no_ack += o.get_no_ack;
        self.redeliver += o.redeliver;
        self.ack += o.ack;
        self.get_empty += o.get_empty;
    }
}

/// A channel's message counts since it opened (RabbitMQ's channel `message_stats`):
/// its delivery-side counts and its publish counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    pub delivery: DeliveryStats,
    pub publish: u64,
    /// Publishes no queue took: returned (mandatory) or dropped.
    pub return_unroutable: u64,
    pub drop_unroutable: u64,
    /// In confirm mode: publishes received and those answered (ack or nack), read from
    /// the confirm tracker when asked ([`Channel::totals`]), never counted per message.
    pub publish_confirm: u64,
    pub confirm: u64,
}

impl ChannelStats {
    pub fn add(&mut self, o: &ChannelStats) {
        self.delivery.add(&o.delivery);
        self.publish += o.publish;
        self.return_unroutable += o.return_unroutable;
        self.drop_unroutable += o.drop_unroutable;
        self.publish_confirm += o.publish_confirm;
        self.confirm += o.confirm;
    }
}

thread_local! {
    /// The totals of the channels this thread (a shard) has dropped: with the open
    /// channels' they are the shard's message totals since start (RabbitMQ's global
    /// counters), kept without any work per message.
    static RETIRED: std::cell::Cell<ChannelStats> = std::cell::Cell::new(ChannelStats::default());
}

/// The totals of the channels closed on this thread so far.
pub fn retired_totals() -> ChannelStats {
    RETIRED.with(std::cell::Cell::get)
}

impl Drop for Channel {
    fn drop(&mut self) {
        let mine = self.totals();
        RETIRED.with(|r| {
            let mut all = r.get();
            all.add(&mine);
            r.set(all);
        });
    }
}

impl Channel {
    /// Hints what a delivery on this channel touches (`model::prefetch`): its phase,
    /// delivery tag, consumers and counters. Computes field addresses only.
    #[inline(always)]
    pub fn prefetch_for_delivery(&self) {
        prefetch::line(&self.phase);
        prefetch::line(&self.next_tag);
        prefetch::line(&self.consumers);
        prefetch::line(&self.stats);
    }

    pub fn new(number: u16, epoch: u32) -> Channel {
        Channel {
            number,
            epoch,
            phase: ChannelPhase::Open,
            content: ContentSlot::default(),
            next_tag: 1,
            unacked: VecDeque::new(),
            consumers: ChannelConsumers::default(),
            next_consumer: 1,
            prefetch: 0,
            global_prefetch: 0,
            confirms: None,
            tx: None,
            tx_commits: None,
            publishing: None,
            flow_active: true,
            last_queue: ShortStr::default(),
            next_generated_tag: 1,
            held_cancels: None,
            stats: DeliveryStats::default(),
            direct_reply: None,
        }
    }

    /// The tracker a publish on this channel reports to: the transaction's while in tx
    /// mode, the confirms' in confirm mode, none otherwise.
    pub fn tracker_mut(&mut self) -> Option<&mut ConfirmTracker> {
        if self.tx.is_some() {
            Some(&mut self.tx_commits.get_or_insert_with(Box::default).tracker)
        } else {
            self.confirms.as_deref_mut()
        }
    }

    /// A `tx.commit` routed its publishes: its commit-ok waits for them.
    pub fn committed(&mut self) {
        let commits = self.tx_commits.get_or_insert_with(Box::default);
        commits.marks.push_back(commits.tracker.last_assigned());
    }

    /// How many commits are complete now (their commit-ok may go out, in order).
    pub fn take_committed(&mut self) -> usize {
        let Some(commits) = self.tx_commits.as_mut().filter(|c| !c.marks.is_empty()) else {
            return 0;
        };
        let mut replies = Vec::new();
        commits.tracker.take_ready(&mut replies);
        let settled = commits.tracker.settled();
        let mut done = 0;
        while commits.marks.front().is_some_and(|&m| m <= settled) {
            commits.marks.pop_front();
            done += 1;
        }
        done
    }

    /// From now on, server-sent `basic.cancel`s wait for [`Channel::release_cancels`].
    pub fn hold_cancels(&mut self) {
        self.held_cancels.get_or_insert_with(Box::default);
    }

    /// Holds `tag`'s `basic.cancel` if cancels are held; gives it back otherwise.
    pub fn hold_cancel(&mut self, tag: ShortStr) -> Option<ShortStr> {
        match self.held_cancels.as_mut() {
            Some(held) => {
                held.push(tag);
                None
            }
            None => Some(tag),
        }
    }

    /// Stops holding cancels and returns the tags held, in order.
    pub fn release_cancels(&mut self) -> Vec<ShortStr> {
        self.held_cancels
            .take()
            .map(|held| *held)
            .unwrap_or_default()
    }

    /// A server-generated consumer tag, unique on this channel.
    pub fn generate_tag(&mut self, conn_serial: u64) -> ShortStr {
        let tag = format!(
            "amq.ctag-{conn_serial}-{}-{}",
            self.number, self.next_generated_tag
        );
        self.next_generated_tag += 1;
        ShortStr::from(tag)
    }

    pub fn consumer_by_tag(&self, tag: &ShortStr) -> Option<u32> {
        self.consumers.by_tag(tag)
    }

    /// Registers a consumer (before the queue knows it). Returns its channel-local id.
    pub fn add_consumer(&mut self, consumer: ChannelConsumer) -> u32 {
        let id = self.next_consumer;
        self.next_consumer += 1;
        self.consumers.insert(id, consumer);
        id
    }

    /// Forgets a consumer; returns it if it was there.
    pub fn remove_consumer(&mut self, id: u32) -> Option<ChannelConsumer> {
        self.consumers.remove(&id)
    }

    /// Forgets every consumer (the channel is closing).
    pub fn drain_consumers(&mut self) -> Vec<ChannelConsumer> {
        self.consumers.drain().map(|(_, c)| c).collect()
    }

    /// The tag the next delivery will get.
    pub fn next_delivery_tag(&self) -> u64 {
        self.next_tag
    }

    /// The channel's counts, without the confirm figures.
    pub fn counts(&self) -> ChannelStats {
        let mut stats = ChannelStats {
            delivery: self.stats,
            ..ChannelStats::default()
        };
        if let Some(p) = &self.publishing {
            stats.publish = p.publish;
            stats.return_unroutable = p.return_unroutable;
            stats.drop_unroutable = p.drop_unroutable;
        }
        stats
    }

    /// The channel's counts, with the confirm figures read from its tracker.
    pub fn totals(&self) -> ChannelStats {
        let mut stats = self.counts();
        if let Some(t) = &self.confirms {
            stats.publish_confirm = t.last_assigned();
            stats.confirm = t.settled();
        }
        stats
    }

    /// Its producer flow state, if it ever published (or was stopped).
    pub fn publisher(&self) -> Option<&PublisherFlow> {
        self.publishing.as_deref().map(|p| &p.flow)
    }

    /// Its producer flow state, if it ever published (or was stopped).
    pub fn publisher_mut(&mut self) -> Option<&mut PublisherFlow> {
        self.publishing.as_deref_mut().map(|p| &mut p.flow)
    }

    /// What the channel has as a publisher, made at its first use.
    pub fn publishing_mut(&mut self) -> &mut Publishing {
        self.publishing.get_or_insert_with(Box::default)
    }

    /// Counts a publish on this channel (`message_stats.publish`); returns the channel.
    pub fn count_publish(&mut self) -> &mut Channel {
        self.publishing_mut().publish += 1;
        self
    }

    /// Assigns `count` consecutive delivery tags to no-ack deliveries to one of the
    /// channel's consumers (none redelivered) and counts them, as `count` calls of
    /// [`Channel::record_delivery`] would; returns the first tag.
    pub fn record_no_ack_deliveries(&mut self, count: u64) -> u64 {
        let first = self.next_tag;
        self.next_tag += count;
        self.stats.deliver_no_ack += count;
        first
    }

    /// Assigns the next delivery tag and, unless `no_ack`, remembers the delivery;
    /// counts it in `stats` (a consumer's delivery or a get, with or without ack).
    pub fn record_delivery(
        &mut self,
        queue: QueueRef,
        seq: u64,
        consumer: Option<u32>,
        no_ack: bool,
        redelivered: bool,
    ) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        let stats = &mut self.stats;
        let count = match (consumer.is_some(), no_ack) {
            (true, false) => &mut stats.deliver,
            (true, true) => &mut stats.deliver_no_ack,
            (false, false) => &mut stats.get,
            (false, true) => &mut stats.get_no_ack,
        };
        *count += 1;
        stats.redeliver += u64::from(redelivered);
        if !no_ack {
            self.unacked.push_back(Unacked {
                tag,
                queue,
                seq,
                consumer,
            });
            if let Some(c) = consumer.and_then(|id| self.consumers.get_mut(&id)) {
                c.unacked += 1;
            }
        }
        tag
    }

    /// Removes the deliveries an ack/nack/reject names: `multiple` takes every tag up to
    /// and including `tag` (0 = all). An unknown single tag is a 406.
    pub fn take_unacked(&mut self, tag: u64, multiple: bool) -> Result<Vec<Unacked>, ChannelError> {
        let taken: Vec<Unacked> = if multiple {
            let upto = if tag == 0 { u64::MAX } else { tag };
            let n = self.unacked.partition_point(|u| u.tag <= upto);
            if n == 0 && tag != 0 {
                return Err(ChannelError::UnknownDeliveryTag(tag));
            }
            self.unacked.drain(..n).collect()
        } else {
            let pos = self
                .unacked
                .binary_search_by_key(&tag, |u| u.tag)
                .map_err(|_| ChannelError::UnknownDeliveryTag(tag))?;
            self.unacked.remove(pos).into_iter().collect()
        };
        for u in &taken {
            if let Some(c) = u.consumer.and_then(|id| self.consumers.get_mut(&id)) {
                c.unacked = c.unacked.saturating_sub(1);
            }
        }
        Ok(taken)
    }

    /// Removes every unacknowledged delivery (channel close, `basic.recover`).
    pub fn take_all_unacked(&mut self) -> Vec<Unacked> {
        for c in self.consumers.values_mut() {
            c.unacked = 0;
        }
        self.unacked.drain(..).collect()
    }

    /// Room left under the channel-wide prefetch, if one is set.
    pub fn global_room(&self) -> Option<u32> {
        if self.global_prefetch == 0 {
            return None;
        }
        let in_flight: u32 = self
            .consumers
            .values()
            .filter(|c| !c.no_ack)
            .map(|c| c.credit.saturating_add(c.unacked))
            .sum();
        Some(self.global_prefetch.saturating_sub(in_flight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::QueueId;

    fn q() -> QueueRef {
        QueueRef {
            id: QueueId(7),
            home: 0,
        }
    }

    fn consumer(tag: &str) -> ChannelConsumer {
        ChannelConsumer::new(tag.into(), q(), true, 0)
    }

    #[test]
    fn a_subscribers_channel_holds_no_publishing_state() {
        // Every subscriber has one channel: the publish assembly, transactions,
        // confirms, flow state and publish counts are boxed until used (issue 23). 256
        // bytes is one of the allocator's size classes; 264 would take 320.
        assert!(std::mem::size_of::<Channel>() <= 256);
        let mut ch = Channel::new(1, 1);
        assert!(ch.content.is_idle());
        assert!(ch.publisher().is_none());
        // Its counts read the same either way.
        ch.record_no_ack_deliveries(3);
        assert_eq!(ch.counts().delivery.deliver_no_ack, 3);
        assert_eq!(ch.counts().publish, 0);
        ch.count_publish().publishing_mut().drop_unroutable += 1;
        let counts = ch.totals();
        assert_eq!(
            (
                counts.publish,
                counts.drop_unroutable,
                counts.delivery.deliver_no_ack
            ),
            (1, 1, 3)
        );
        assert!(ch.publisher().is_some_and(|p| !p.published));
    }

    #[test]
    fn consumer_tags_are_found_and_forgotten_through_the_index() {
        let mut ch = Channel::new(1, 1);
        let ids: Vec<u32> = (0..10_000)
            .map(|i| ch.add_consumer(consumer(&format!("c{i}"))))
            .collect();
        assert_eq!(ch.consumer_by_tag(&"c9999".into()), Some(ids[9999]));
        assert_eq!(ch.consumer_by_tag(&"nope".into()), None);
        let gone = ch.remove_consumer(ids[5]).map(|c| c.tag);
        assert_eq!(gone, Some("c5".into()));
        assert_eq!(ch.consumer_by_tag(&"c5".into()), None);
        assert!(ch.remove_consumer(ids[5]).is_none());
        let id = ch.add_consumer(consumer("c5"));
        assert_eq!(ch.consumer_by_tag(&"c5".into()), Some(id));
        assert_eq!(ch.drain_consumers().len(), 10_000);
        assert_eq!(ch.consumer_by_tag(&"c1".into()), None);
        assert!(ch.consumers.is_empty());
    }

    #[test]
    fn ack_single_multiple_and_unknown() {
        let mut ch = Channel::new(1, 1);
        for seq in 1..=5 {
            ch.record_delivery(q(), seq, None, false, false);
        }
        assert_eq!(ch.take_unacked(2, false).map(|v| v.len()), Ok(1));
        assert_eq!(
            ch.take_unacked(2, false).map(|v| v.len()),
            Err(ChannelError::UnknownDeliveryTag(2))
        );
        let taken = ch.take_unacked(4, true).expect("multiple");
        assert_eq!(
            taken.iter().map(|u| u.tag).collect::<Vec<_>>(),
            vec![1, 3, 4]
        );
        assert_eq!(ch.take_unacked(0, true).map(|v| v.len()), Ok(1));
        assert!(ch.unacked.is_empty());
    }

    #[test]
    fn no_ack_deliveries_are_not_tracked() {
        let mut ch = Channel::new(1, 1);
        assert_eq!(ch.record_delivery(q(), 1, None, true, false), 1);
        assert_eq!(ch.record_delivery(q(), 2, None, true, false), 2);
        assert!(ch.unacked.is_empty());
    }
}
