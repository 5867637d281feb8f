//! Owns: direct reply-to, as RabbitMQ's `rabbit_channel` does it — a channel's reply
//! consumer (`basic.consume` on `amq.rabbitmq.reply-to`, no-ack only, one per channel,
//! and its `basic.cancel`), the (always passive) `queue.declare` of the pseudo-queue and
//! of reply addresses, the rewrite of a publish's `reply_to = amq.rabbitmq.reply-to`
//! to the channel's reply address, and the delivery of a publish to the default exchange
//! with such an address as its routing key: straight into the consuming channel's
//! outbound buffer when it lives on this shard, else with this turn's publishes to its
//! shard (`ShardMsg::Publish`, the same bounded inbox and byte budget), with no queue in
//! between. While the client has paused the consuming channel (`channel.flow
//! active=false`) its replies are held by its reply consumer and written, in order, when
//! it resumes. A reply whose consumer is gone (channel closed, cancelled, connection gone,
//! or an address that does not check), or whose consumer's connection already holds its
//! cap, is dropped, and returned with 312 NO_ROUTE under `mandatory`; a confirmed one is
//! acked once the consumer's shard handled it (delivered or held).
//!
//! Does not: mint or check tokens (`session::reply_to`) or route through the directory.

use bytes::Bytes;

use crate::model::ids::{ChannelRef, ConnId, QueueId, QueueRef, ShardId};
use crate::model::message::Message;
use crate::protocol::method::{
    BasicCancelOk, BasicConsume, BasicConsumeOk, BasicPublish, BasicReturn, QueueDeclare,
    QueueDeclareOk,
};
use crate::protocol::properties::{raw_reply_to, with_reply_to};
use crate::protocol::{Method, ShortStr};
use crate::queue::QueueStats;
use crate::session::channel::ChannelPhase;
use crate::session::connection::Conn;
use crate::session::error::{ChannelError, ConnectionError, DirectReplyRefusal, ObjectKind};
use crate::session::reply_consumer::ReplyConsumer;
use crate::session::reply_to;

use super::channel::wait_for;
use super::{AfterFrame, MethodError, PendingOp};
use crate::shard::conns::ConnSide;
use crate::shard::inbox::{ConfirmDone, DirectReply, QueueReply, ReturnedReply};
use crate::shard::Shard;

/// What a declare of a reply address answers: RabbitMQ's declare-ok of 0 messages and
/// 1 consumer while the reply consumer exists, else 404.
pub(super) fn declare_reply(alive: bool) -> QueueReply {
    if alive {
        QueueReply::Stats(QueueStats {
            consumers: 1,
            ..QueueStats::default()
        })
    } else {
        QueueReply::Gone
    }
}

/// A reply is dropped when its consumer's connection already has this many times
/// `net.write_high_water` bytes waiting to be written (to a paused channel: waiting to
/// be written plus held by its channels' reply consumers): a reply consumer has no
/// credit (RabbitMQ's is unlimited too), so this bounds what a requester that stopped
/// reading, or paused its channel, can make the broker hold.
const OUTBOUND_CAP_FACTOR: usize = 16;

/// The pseudo consumer id a reply delivery is counted under (never a real one).
const REPLY_CONSUMER: u32 = u32::MAX;

impl ConnSide<'_> {
    /// `basic.consume` on `amq.rabbitmq.reply-to`.
    pub(super) fn reply_consume(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        consume: BasicConsume,
    ) -> Result<AfterFrame, MethodError> {
        let Some(c) = self.conn_mut(conn) else {
            return Ok(AfterFrame::Stop);
        };
        let serial = c.serial;
        let Some(ch) = c.channels.get_mut(&number) else {
            return Ok(AfterFrame::Stop);
        };
        let taken = |tag: &ShortStr| {
            ch.consumer_by_tag(tag).is_some()
                || ch.direct_reply.as_ref().is_some_and(|r| &r.tag == tag)
        };
        if !consume.consumer_tag.is_empty() && taken(&consume.consumer_tag) {
            return Err(MethodError::Connection(ConnectionError::NotAllowed(
                format!("attempt to reuse consumer tag '{}'", consume.consumer_tag),
            )));
        }
        if !consume.no_ack {
            return Err(ChannelError::DirectReply(DirectReplyRefusal::ManualAck).into());
        }
        if ch.direct_reply.is_some() {
            return Err(ChannelError::DirectReply(DirectReplyRefusal::AlreadySet).into());
        }
        let me = ChannelRef {
            shard: shard.id,
            conn,
            channel: number,
            epoch: ch.epoch,
        };
        let address = reply_to::address(&me)
            .ok_or_else(|| ChannelError::Internal("no randomness for a reply address".into()))?;
        let tag = if consume.consumer_tag.is_empty() {
            ch.generate_tag(serial)
        } else {
            consume.consumer_tag
        };
        ch.direct_reply = Some(Box::new(ReplyConsumer::new(
            tag.clone(),
            ShortStr::from(address),
        )));
        if !consume.nowait {
            self.reply(
                conn,
                number,
                Method::BasicConsumeOk(BasicConsumeOk { consumer_tag: tag }),
            );
        }
        Ok(AfterFrame::Continue)
    }

    /// `queue.declare` of a name in direct reply-to's namespace, always passive (as
    /// `rabbit_channel`): the pseudo-queue exists; an address exists while the channel
    /// it names has its reply consumer (asked of that channel's shard when it is
    /// another); anything else is 404.
    pub(super) fn reply_declare(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        decl: QueueDeclare,
    ) -> Result<AfterFrame, MethodError> {
        let name = decl.queue;
        let to =
            reply_to::resolve(name.as_bytes()).filter(|to| usize::from(to.shard) < shard.shards);
        let alive = match to {
            _ if name.as_bytes() == reply_to::PSEUDO_QUEUE.as_bytes() => true,
            Some(to) if to.shard != shard.id => {
                return wait_for(
                    conn,
                    number,
                    PendingOp::ReplyDeclare {
                        to,
                        name,
                        nowait: decl.nowait,
                    },
                );
            }
            Some(to) => self.reply_consumer_alive(to),
            None => false,
        };
        if !alive {
            return Err(ChannelError::NotFound {
                kind: ObjectKind::Queue,
                name: name.to_string(),
                vhost: self
                    .conn(conn)
                    .map(|c| c.vhost_name.clone())
                    .unwrap_or_default(),
            }
            .into());
        }
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            ch.last_queue = name.clone();
        }
        if !decl.nowait {
            self.reply(
                conn,
                number,
                Method::QueueDeclareOk(QueueDeclareOk {
                    queue: name,
                    message_count: 0,
                    consumer_count: 1,
                }),
            );
        }
        Ok(AfterFrame::Continue)
    }

    /// Whether channel `to` (of this shard) has its reply consumer.
    pub fn reply_consumer_alive(&self, to: ChannelRef) -> bool {
        self.conns
            .get(to.conn)
            .and_then(|c| c.channels.get(&to.channel))
            .is_some_and(|ch| {
                ch.epoch == to.epoch && ch.phase == ChannelPhase::Open && ch.direct_reply.is_some()
            })
    }

    /// `basic.cancel` of the channel's reply consumer: true when `tag` was it (then
    /// answered here).
    pub(super) fn reply_cancel(
        &mut self,
        conn: ConnId,
        number: u16,
        tag: &ShortStr,
        nowait: bool,
    ) -> bool {
        let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        else {
            return false;
        };
        if ch.direct_reply.as_ref().is_none_or(|r| &r.tag != tag) {
            return false;
        }
        ch.direct_reply = None;
        if !nowait {
            self.reply(
                conn,
                number,
                Method::BasicCancelOk(BasicCancelOk {
                    consumer_tag: tag.clone(),
                }),
            );
        }
        true
    }

    /// A publish's properties with `reply_to = amq.rabbitmq.reply-to` rewritten to the
    /// channel's reply address (`Ok(None)`: nothing to rewrite; one flag test when the
    /// publish has no reply_to). Without a reply consumer on the channel: 406, as
    /// `rabbit_channel` refuses it.
    pub(super) fn rewrite_reply_to(
        &self,
        conn: ConnId,
        number: u16,
        raw: &[u8],
    ) -> Result<Option<Bytes>, ChannelError> {
        if raw_reply_to(raw) != Some(reply_to::PSEUDO_QUEUE.as_bytes()) {
            return Ok(None);
        }
        let address = self
            .conn(conn)
            .and_then(|c| c.channels.get(&number))
            .and_then(|ch| ch.direct_reply.as_ref())
            .map(|r| r.address.clone())
            .ok_or(ChannelError::DirectReply(DirectReplyRefusal::NoConsumer))?;
        with_reply_to(raw, address.as_bytes())
            .map(Some)
            .ok_or_else(|| ChannelError::Internal("malformed properties".into()))
    }

    /// A publish to the default exchange whose routing key is in direct reply-to's
    /// namespace: to the reply consumer it names, wherever it lives.
    pub(super) fn route_reply(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        publish: &BasicPublish,
        msg: Message,
    ) -> Result<(), MethodError> {
        let to = reply_to::resolve(publish.routing_key.as_bytes())
            .filter(|to| usize::from(to.shard) < shard.shards);
        let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        else {
            return Ok(());
        };
        let origin = ChannelRef {
            shard: shard.id,
            conn,
            channel: number,
            epoch: ch.epoch,
        };
        let confirm = ch.tracker_mut().map_or(0, |t| t.assign());
        let (delivered, waits) = match to {
            Some(to) if to.shard == shard.id => (self.deliver_reply(shard, to, &msg), 0),
            Some(to) => {
                if let Some(batch) = self.common.outbox.replies.get_mut(usize::from(to.shard)) {
                    batch.push(DirectReply {
                        to,
                        msg: msg.clone(),
                        origin,
                        confirm,
                        mandatory: publish.mandatory,
                    });
                }
                (true, 1)
            }
            None => (false, 0),
        };
        if !delivered {
            if let Some(ch) = self
                .conn_mut(conn)
                .and_then(|c| c.channels.get_mut(&number))
            {
                let unroutable = if publish.mandatory {
                    &mut ch.publishing_mut().return_unroutable
                } else {
                    &mut ch.publishing_mut().drop_unroutable
                };
                *unroutable += 1;
            }
            if publish.mandatory {
                self.return_reply(origin, &msg);
            }
        }
        if confirm != 0 {
            if let Some(tracker) = self
                .conn_mut(conn)
                .and_then(|c| c.channels.get_mut(&number))
                .and_then(|ch| ch.tracker_mut())
            {
                tracker.record(confirm, waits, false);
            }
        }
        Ok(())
    }

    /// Writes `msg` to the reply consumer of channel `to` (on this shard) as
    /// `basic.deliver`, or holds it there while the client has paused the channel
    /// (`channel.flow active=false`); false when there is no such consumer, or its
    /// connection already holds the cap: unwritten bytes, and with a paused channel the
    /// replies every channel of the connection holds as well.
    fn deliver_reply(&mut self, shard: &Shard, to: ChannelRef, msg: &Message) -> bool {
        let cap = shard
            .config
            .net
            .write_high_water
            .saturating_mul(OUTBOUND_CAP_FACTOR) as u64;
        let Some(c) = self.conns.get_mut(to.conn) else {
            return false;
        };
        let Some(paused) = c
            .channels
            .get(&to.channel)
            .filter(|ch| {
                ch.epoch == to.epoch && ch.phase == ChannelPhase::Open && ch.direct_reply.is_some()
            })
            .map(|ch| !ch.flow_active)
        else {
            return false;
        };
        let unwritten = c.out.queued_bytes() as u64;
        if paused {
            // Only here is every channel's hold summed: a paused reply consumer is rare.
            let held: u64 = c
                .channels
                .values()
                .filter_map(|ch| ch.direct_reply.as_deref())
                .map(ReplyConsumer::held_bytes)
                .sum();
            if unwritten + held >= cap {
                return false;
            }
            if let Some(reply) = c
                .channels
                .get_mut(&to.channel)
                .and_then(|ch| ch.direct_reply.as_mut())
            {
                reply.hold(msg.clone());
            }
            return true;
        }
        if unwritten >= cap {
            return false;
        }
        write_reply(c, to.channel, shard.id, msg);
        self.mark_writer(to.conn);
        true
    }

    /// `channel.flow active=true`: the replies held while the channel was paused, written
    /// in the order they arrived.
    pub(super) fn release_held_replies(&mut self, shard: &Shard, conn: ConnId, number: u16) {
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        let held = c
            .channels
            .get_mut(&number)
            .and_then(|ch| ch.direct_reply.as_deref_mut())
            .map(ReplyConsumer::take_held)
            .unwrap_or_default();
        if held.is_empty() {
            return;
        }
        for msg in &held {
            write_reply(c, number, shard.id, msg);
        }
        self.mark_writer(conn);
    }

    /// `basic.return` 312 NO_ROUTE of a reply on its publishing channel (on this shard).
    fn return_reply(&mut self, origin: ChannelRef, msg: &Message) {
        let Some(c) = self.conns.get_mut(origin.conn) else {
            return;
        };
        if !c
            .channels
            .get(&origin.channel)
            .is_some_and(|ch| ch.epoch == origin.epoch && ch.phase == ChannelPhase::Open)
        {
            return;
        }
        c.out.method_with_content(
            origin.channel,
            &Method::BasicReturn(BasicReturn {
                reply_code: 312,
                reply_text: ShortStr::from_static("NO_ROUTE"),
                exchange: msg.exchange().clone(),
                routing_key: msg.routing_key().clone(),
            }),
            msg,
        );
        self.mark_writer(origin.conn);
    }

    /// Direct replies from other shards' publishers for reply consumers here: delivered,
    /// or returned to the publisher under mandatory; each confirmed to its publisher
    /// (the return goes first: `Shard::flush` sends returns before confirms).
    pub fn direct_replies(&mut self, shard: &Shard, replies: Vec<DirectReply>) {
        for r in replies {
            let delivered = self.deliver_reply(shard, r.to, &r.msg);
            let outbox = &mut self.common.outbox;
            if !delivered && r.mandatory {
                if let Some(v) = outbox.returns.get_mut(usize::from(r.origin.shard)) {
                    v.push(ReturnedReply {
                        origin: r.origin,
                        msg: r.msg,
                    });
                }
            }
            if r.confirm != 0 {
                outbox.confirm(
                    r.origin.shard,
                    ConfirmDone {
                        channel: r.origin,
                        first: r.confirm,
                        last: r.confirm,
                        rejected: false,
                    },
                );
            }
        }
    }

    /// Mandatory direct replies another shard found no consumer for.
    pub fn replies_returned(&mut self, returns: Vec<ReturnedReply>) {
        for r in returns {
            if let Some(ch) = self
                .conn_mut(r.origin.conn)
                .and_then(|c| c.channels.get_mut(&r.origin.channel))
                .filter(|ch| ch.epoch == r.origin.epoch)
            {
                ch.publishing_mut().return_unroutable += 1;
            }
            self.return_reply(r.origin, &r.msg);
        }
    }
}

/// Writes `msg` to the reply consumer of `c`'s channel `number` as `basic.deliver`: no
/// queue, so its delivery tag is counted as a no-ack delivery and nothing is remembered.
fn write_reply(c: &mut Conn, number: u16, home: ShardId, msg: &Message) {
    let Some(ch) = c.channels.get_mut(&number) else {
        return;
    };
    let Some(tag) = ch.direct_reply.as_ref().map(|r| r.tag.clone()) else {
        return;
    };
    let none = QueueRef {
        id: QueueId(0),
        home,
    };
    let delivery_tag = ch.record_delivery(none, 0, Some(REPLY_CONSUMER), true, false);
    c.out.deliver(number, &tag, delivery_tag, false, msg);
}
