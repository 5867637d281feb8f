//! Owns: what an open channel does differently for a stream — `basic.consume` on a
//! stream (RabbitMQ's consumer-argument checks, then its channel checks: a consumer
//! prefetch, no no-ack, no global qos; the reader's arguments handed to the stream's
//! home shard as [`PendingOp::ConsumeStream`]) and the refusals of `basic.get` and
//! `queue.purge` (RabbitMQ's 540s).
//!
//! Does not: resolve offsets or keep readers (the stream's home shard does), or settle
//! deliveries (`settle`, which sends a stream consumer's acks as `StreamAck`).

use crate::model::ids::{ConnId, QueueRef};
use crate::policy::stream_args::{self, StreamRefusal};
use crate::protocol::method::BasicConsume;
use crate::protocol::ShortStr;
use crate::session::consumer::ChannelConsumer;
use crate::session::error::{ChannelError, ConnectionError};

use super::channel::wait_for;
use super::{AfterFrame, MethodError, PendingOp};
use crate::shard::conns::ConnSide;
use crate::shard::Shard;

impl ConnSide<'_> {
    /// Whether queue `name` of the connection's vhost is a stream.
    pub(super) fn is_stream_queue(&self, conn: ConnId, name: &ShortStr) -> bool {
        let Some(c) = self.conn(conn) else {
            return false;
        };
        self.common
            .directory
            .vhost(c.vhost)
            .and_then(|d| d.queue(name))
            .is_some_and(|m| stream_args::is_stream(&m.arguments))
    }

    /// A stream refuses `refusal` (`basic.get`, `queue.purge`) when `name` is one.
    pub(super) fn refuse_on_stream(
        &self,
        conn: ConnId,
        name: &ShortStr,
        refusal: StreamRefusal,
    ) -> Result<(), MethodError> {
        if !self.is_stream_queue(conn, name) {
            return Ok(());
        }
        Err(MethodError::Channel(self.stream_error(conn, name, refusal)))
    }

    fn stream_error(&self, conn: ConnId, name: &ShortStr, refusal: StreamRefusal) -> ChannelError {
        ChannelError::Stream {
            refusal,
            queue: name.to_string(),
            vhost: self
                .conn(conn)
                .map(|c| c.vhost_name.clone())
                .unwrap_or_default(),
        }
    }

    /// `basic.consume` on stream `name` (already authorized and looked up).
    pub(super) fn stream_consume(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        consume: BasicConsume,
        name: ShortStr,
        queue: QueueRef,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self
            .conn(conn)
            .map(|c| c.vhost_name.clone())
            .unwrap_or_default();
        let args = stream_args::consumer(&consume.arguments).map_err(|error| {
            ChannelError::QueueArgument {
                error,
                queue: name.to_string(),
                vhost: vhost.clone(),
            }
        })?;
        let (prefetch, global) = {
            let ch = self.channel_mut(conn, number)?;
            (ch.prefetch, ch.global_prefetch > 0)
        };
        stream_args::check_consume(prefetch, consume.no_ack, global)
            .map_err(|refusal| self.stream_error(conn, &name, refusal))?;
        let Some(c) = self.conn_mut(conn) else {
            return Ok(AfterFrame::Stop);
        };
        let serial = c.serial;
        let connection = c.name();
        let Some(ch) = c.channels.get_mut(&number) else {
            return Ok(AfterFrame::Stop);
        };
        let generated_tag = consume.consumer_tag.is_empty();
        let tag = if generated_tag {
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
        let consumer = ch.add_consumer(ChannelConsumer {
            stream: true,
            ..ChannelConsumer::new(tag.clone(), queue, false, prefetch)
        });
        wait_for(
            conn,
            number,
            PendingOp::ConsumeStream {
                consumer,
                queue,
                name,
                tag,
                generated_tag,
                connection,
                prefetch,
                args: Box::new(args),
                nowait: consume.nowait,
            },
        )
    }
}
