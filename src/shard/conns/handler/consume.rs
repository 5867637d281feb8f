//! Owns: the consuming methods of an open channel — `basic.qos` (prefetch),
//! `basic.consume` (tags, consumer limits, priority; the direct reply-to pseudo-queue is
//! `direct_reply`'s, a stream `stream`'s), `basic.cancel`, `basic.get` and
//! `basic.recover` / `recover-async`.
//!
//! Does not: deliver (`conns::deliver`) or settle (`settle`), or wait for the queue's
//! home shard (a consume, cancel or get is returned as a [`PendingOp`]).

use crate::auth::permissions::Perm::Read;
use crate::model::ids::ConnId;
use crate::policy::queue_args;
use crate::policy::stream_args::StreamRefusal;
use crate::protocol::method::{
    BasicCancel, BasicCancelOk, BasicConsume, BasicGet, BasicQos, BasicQosOk, BasicRecover,
    BasicRecoverOk,
};
use crate::protocol::Method;
use crate::session::consumer::ChannelConsumer;
use crate::session::error::{ChannelError, ConnectionError, ObjectKind};

use super::channel::wait_for;
use super::{AfterFrame, MethodError, PendingOp};
use crate::shard::conns::ConnSide;
use crate::shard::Shard;

impl ConnSide<'_> {
    /// `basic.qos`.
    pub(super) fn basic_qos(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        qos: BasicQos,
    ) -> Result<AfterFrame, MethodError> {
        if qos.prefetch_size != 0 {
            return Err(MethodError::Connection(ConnectionError::NotImplemented(
                format!("prefetch_size!=0 ({})", qos.prefetch_size),
            )));
        }
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            if qos.global {
                ch.global_prefetch = u32::from(qos.prefetch_count);
            } else {
                ch.prefetch = u32::from(qos.prefetch_count);
            }
        }
        self.reply(conn, number, Method::BasicQosOk(BasicQosOk {}));
        self.top_up(shard, conn, number, None);
        Ok(AfterFrame::Continue)
    }

    /// `basic.consume`.
    pub(super) fn basic_consume(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        consume: BasicConsume,
    ) -> Result<AfterFrame, MethodError> {
        if consume.queue.as_bytes() == crate::session::reply_to::PSEUDO_QUEUE.as_bytes() {
            return self.reply_consume(shard, conn, number, consume);
        }
        let name = self.queue_name(conn, number, consume.queue.clone());
        self.authorize(conn, number, Read, ObjectKind::Queue, &name)?;
        let queue = self.lookup_queue(shard, conn, &name)?;
        if self.is_stream_queue(conn, &name) {
            return self.stream_consume(shard, conn, number, consume, name, queue);
        }
        let priority = queue_args::consumer_priority(&consume.arguments).map_err(|error| {
            ChannelError::QueueArgument {
                error,
                queue: name.to_string(),
                vhost: self
                    .conn(conn)
                    .map(|c| c.vhost_name.clone())
                    .unwrap_or_default(),
            }
        })?;
        let Some(c) = self.conn_mut(conn) else {
            return Ok(AfterFrame::Stop);
        };
        let serial = c.serial;
        let Some(ch) = c.channels.get_mut(&number) else {
            return Ok(AfterFrame::Stop);
        };
        let tag = if consume.consumer_tag.is_empty() {
            ch.generate_tag(serial)
        } else {
            consume.consumer_tag
        };
        if ch.consumer_by_tag(&tag).is_some()
            || ch.direct_reply.as_ref().is_some_and(|r| r.tag == tag)
        {
            return Err(MethodError::Connection(ConnectionError::NotAllowed(
                format!("attempt to reuse consumer tag '{tag}'"),
            )));
        }
        let limits = &shard.config.limits.resources;
        if let Err(refusal) = crate::limits::objects::new_consumer(limits, ch.consumers.len()) {
            return Err(self.consumer_limit(shard, conn, number, refusal));
        }
        let consumer = ch.add_consumer(ChannelConsumer::new(
            tag.clone(),
            queue,
            consume.no_ack,
            ch.prefetch,
        ));
        wait_for(
            conn,
            number,
            PendingOp::Consume {
                consumer,
                queue,
                name,
                tag,
                no_ack: consume.no_ack,
                exclusive: consume.exclusive,
                priority,
                nowait: consume.nowait,
            },
        )
    }

    /// `basic.cancel`.
    pub(super) fn basic_cancel(
        &mut self,
        conn: ConnId,
        number: u16,
        cancel: BasicCancel,
    ) -> Result<AfterFrame, MethodError> {
        if self.reply_cancel(conn, number, &cancel.consumer_tag, cancel.nowait) {
            return Ok(AfterFrame::Continue);
        }
        let removed = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
            .and_then(|ch| {
                let id = ch.consumer_by_tag(&cancel.consumer_tag)?;
                ch.remove_consumer(id)
            });
        match removed {
            Some(cons) if cons.queue_key != 0 => wait_for(
                conn,
                number,
                PendingOp::Cancel {
                    queue: cons.queue,
                    key: cons.queue_key,
                    tag: cancel.consumer_tag,
                    nowait: cancel.nowait,
                },
            ),
            _ => {
                if !cancel.nowait {
                    self.reply(
                        conn,
                        number,
                        Method::BasicCancelOk(BasicCancelOk {
                            consumer_tag: cancel.consumer_tag,
                        }),
                    );
                }
                Ok(AfterFrame::Continue)
            }
        }
    }

    /// `basic.get`.
    pub(super) fn basic_get(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        get: BasicGet,
    ) -> Result<AfterFrame, MethodError> {
        let name = self.queue_name(conn, number, get.queue);
        self.authorize(conn, number, Read, ObjectKind::Queue, &name)?;
        let queue = self.lookup_queue(shard, conn, &name)?;
        self.refuse_on_stream(conn, &name, StreamRefusal::Get)?;
        let epoch = self.channel_mut(conn, number)?.epoch;
        wait_for(
            conn,
            number,
            PendingOp::Get {
                queue,
                name,
                no_ack: get.no_ack,
                epoch,
            },
        )
    }

    /// `basic.recover`.
    pub(super) fn basic_recover(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        recover: BasicRecover,
    ) -> Result<AfterFrame, MethodError> {
        self.recover(shard, conn, number);
        let _ = recover.requeue;
        self.reply(conn, number, Method::BasicRecoverOk(BasicRecoverOk {}));
        Ok(AfterFrame::Continue)
    }

    /// `basic.recover-async`.
    pub(super) fn basic_recover_async(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
    ) -> Result<AfterFrame, MethodError> {
        self.recover(shard, conn, number);
        Ok(AfterFrame::Continue)
    }
}
