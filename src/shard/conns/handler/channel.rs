//! Owns: the frames of an open channel — fed to its publish assembly
//! (`session::content`; a complete publish goes to `publish`) — and the dispatch of its methods by
//! family: `channel.*` and `access.request` here, `exchange.*` in `exchange`, `queue.*`
//! in `queue`, consuming (`basic.qos`, `consume`, `cancel`, `get`, `recover`) in
//! `consume`, ack / nack / reject in `settle`, `tx.*` and `confirm.select` in `modes` —
//! and the lookups those share (queue names, the exclusive check, replies).
//!
//! Does not: wait. Anything that needs another shard's answer is returned as a
//! [`Pending`] for the reader to await.

use crate::model::ids::{ConnId, ConnOwner, QueueRef};
use crate::protocol::frame::Frame;
use crate::protocol::method::{
    AccessRequestOk, BasicPublish, ChannelCloseOk, ChannelFlow, ChannelFlowOk,
};
use crate::protocol::{Method, ShortStr};
use crate::session::content::ContentStep;
use crate::session::error::{ChannelError, ConnectionError, HardError, MethodId, ObjectKind};

use super::pending::{Pending, PendingOp};
use super::{AfterFrame, MethodError, PUBLISH};
use crate::shard::conns::ConnSide;
use crate::shard::control::check_exclusive;
use crate::shard::Shard;

impl ConnSide<'_> {
    /// A frame on an open channel: content frames continue a publish, methods are
    /// dispatched.
    pub(super) fn on_open_channel_frame(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        frame: Frame,
    ) -> Result<AfterFrame, HardError> {
        let number = frame.channel;
        let max_size = shard.config.limits.max_message_size;
        let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        else {
            return Ok(AfterFrame::Stop);
        };
        match ch.content.feed(frame, max_size, number)? {
            ContentStep::Method(payload) => {
                let method = Method::decode(detach_unless_per_message(payload))
                    .map_err(|e| ConnectionError::undecodable(&e).on(MethodId::NONE))?;
                let cause = MethodId::of(&method);
                match self.on_channel_method(shard, conn, number, method) {
                    Ok(flow) => Ok(flow),
                    Err(MethodError::Channel(e)) => {
                        self.close_channel(shard, conn, number, &e, cause);
                        Ok(AfterFrame::Continue)
                    }
                    Err(MethodError::Connection(e)) => Err(e.on(cause)),
                }
            }
            ContentStep::More => Ok(AfterFrame::Continue),
            ContentStep::Complete {
                publish,
                header,
                body,
            } => {
                self.publish(shard, conn, number, publish, header, body);
                Ok(AfterFrame::Continue)
            }
            ContentStep::Refused(e) => {
                self.close_channel(shard, conn, number, &e, PUBLISH);
                Ok(AfterFrame::Continue)
            }
        }
    }

    /// Resolves an empty queue name to the channel's last declared queue.
    pub(super) fn queue_name(&self, conn: ConnId, number: u16, name: ShortStr) -> ShortStr {
        if !name.is_empty() {
            return name;
        }
        self.conn(conn)
            .and_then(|c| c.channels.get(&number))
            .map(|ch| ch.last_queue.clone())
            .unwrap_or_default()
    }

    /// Looks a queue up in the local replica and checks exclusivity.
    pub(super) fn lookup_queue(
        &self,
        shard: &Shard,
        conn: ConnId,
        name: &ShortStr,
    ) -> Result<QueueRef, ChannelError> {
        let c = self
            .conn(conn)
            .ok_or_else(|| ChannelError::Internal("connection gone".into()))?;
        let dir = self
            .common
            .directory
            .vhost(c.vhost)
            .ok_or_else(|| ChannelError::Internal("vhost gone".into()))?;
        let meta = dir.queue(name).ok_or_else(|| ChannelError::NotFound {
            kind: ObjectKind::Queue,
            name: name.to_string(),
            vhost: dir.name.clone(),
        })?;
        check_exclusive(meta, Some(owner(shard, conn)), &dir.name)?;
        Ok(meta.queue)
    }

    /// The index of the connection's vhost.
    pub(super) fn vhost_index(&self, conn: ConnId) -> usize {
        self.conn(conn).map(|c| c.vhost).unwrap_or_default()
    }

    pub(super) fn reply(&mut self, conn: ConnId, number: u16, method: Method) {
        if let Some(c) = self.conn_mut(conn) {
            c.out.method(number, &method);
        }
        self.mark_writer(conn);
    }

    /// A method on an open channel, dispatched to its family's handler.
    fn on_channel_method(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        method: Method,
    ) -> Result<AfterFrame, MethodError> {
        match method {
            // channel.*, access.request and the start of a publish (content assembly)
            Method::ChannelClose(_) => self.channel_close(shard, conn, number),
            Method::ChannelOpen(_) => Err(MethodError::Connection(ConnectionError::Channel(
                format!("second 'channel.open' seen on channel {number}"),
            ))),
            Method::ChannelFlow(flow) => self.channel_flow(shard, conn, number, flow),
            // The client acknowledges a channel.flow we sent; the broker never waited
            // for it.
            Method::ChannelFlowOk(_) => Ok(AfterFrame::Continue),
            Method::AccessRequest(_) => self.access_request(conn, number),
            Method::BasicPublish(publish) => self.basic_publish(conn, number, publish),
            // basic.ack / nack / reject (`settle`)
            Method::BasicAck(ack) => self.basic_ack(shard, conn, number, ack),
            Method::BasicNack(nack) => self.basic_nack(shard, conn, number, nack),
            Method::BasicReject(reject) => self.basic_reject(shard, conn, number, reject),
            // exchange.* (`exchange`)
            Method::ExchangeDeclare(decl) => self.exchange_declare(conn, number, decl),
            Method::ExchangeDelete(del) => self.exchange_delete(conn, number, del),
            Method::ExchangeBind(bind) => self.exchange_bind(conn, number, bind),
            Method::ExchangeUnbind(unbind) => self.exchange_unbind(conn, number, unbind),
            // queue.* (`queue`)
            Method::QueueDeclare(decl) => self.queue_declare(shard, conn, number, decl),
            Method::QueueBind(bind) => self.queue_bind(shard, conn, number, bind),
            Method::QueueUnbind(bind) => self.queue_unbind(shard, conn, number, bind),
            Method::QueuePurge(purge) => self.queue_purge(shard, conn, number, purge),
            Method::QueueDelete(del) => self.queue_delete(shard, conn, number, del),
            // basic.qos / consume / cancel / get / recover (`consume`)
            Method::BasicQos(qos) => self.basic_qos(shard, conn, number, qos),
            Method::BasicConsume(consume) => self.basic_consume(shard, conn, number, consume),
            Method::BasicCancel(cancel) => self.basic_cancel(conn, number, cancel),
            Method::BasicGet(get) => self.basic_get(shard, conn, number, get),
            Method::BasicRecover(recover) => self.basic_recover(shard, conn, number, recover),
            Method::BasicRecoverAsync(_) => self.basic_recover_async(shard, conn, number),
            // tx.* and confirm.select (`modes`)
            Method::TxSelect(_) => self.tx_select(conn, number),
            Method::TxCommit(_) => self.tx_commit(shard, conn, number),
            Method::TxRollback(_) => self.tx_rollback(conn, number),
            Method::ConfirmSelect(select) => self.confirm_select(conn, number, select),
            // Methods only a server sends, and connection methods on a channel.
            Method::ConnectionStart(_)
            | Method::ConnectionStartOk(_)
            | Method::ConnectionSecure(_)
            | Method::ConnectionSecureOk(_)
            | Method::ConnectionTune(_)
            | Method::ConnectionTuneOk(_)
            | Method::ConnectionOpen(_)
            | Method::ConnectionOpenOk(_)
            | Method::ConnectionClose(_)
            | Method::ConnectionCloseOk(_)
            | Method::ConnectionBlocked(_)
            | Method::ConnectionUnblocked(_)
            | Method::ConnectionUpdateSecret(_)
            | Method::ConnectionUpdateSecretOk(_)
            | Method::ChannelOpenOk(_)
            | Method::ChannelCloseOk(_)
            | Method::AccessRequestOk(_)
            | Method::ExchangeDeclareOk(_)
            | Method::ExchangeDeleteOk(_)
            | Method::ExchangeBindOk(_)
            | Method::ExchangeUnbindOk(_)
            | Method::QueueDeclareOk(_)
            | Method::QueueBindOk(_)
            | Method::QueuePurgeOk(_)
            | Method::QueueDeleteOk(_)
            | Method::QueueUnbindOk(_)
            | Method::BasicQosOk(_)
            | Method::BasicConsumeOk(_)
            | Method::BasicCancelOk(_)
            | Method::BasicReturn(_)
            | Method::BasicDeliver(_)
            | Method::BasicGetOk(_)
            | Method::BasicGetEmpty(_)
            | Method::BasicRecoverOk(_)
            | Method::TxSelectOk(_)
            | Method::TxCommitOk(_)
            | Method::TxRollbackOk(_)
            | Method::ConfirmSelectOk(_) => Err(MethodError::Connection(
                ConnectionError::CommandInvalid(format!(
                    "'{}' is not valid from a client on channel {number}",
                    method.name()
                )),
            )),
        }
    }

    /// `basic.publish`.
    pub(super) fn basic_publish(
        &mut self,
        conn: ConnId,
        number: u16,
        publish: BasicPublish,
    ) -> Result<AfterFrame, MethodError> {
        if publish.immediate {
            return Err(MethodError::Connection(ConnectionError::NotImplemented(
                "immediate=true".into(),
            )));
        }
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            ch.content.start(publish);
        }
        Ok(AfterFrame::Continue)
    }

    /// `channel.close`.
    pub(super) fn channel_close(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
    ) -> Result<AfterFrame, MethodError> {
        self.release_channel(shard, conn, number);
        if let Some(c) = self.conn_mut(conn) {
            if c.channels.remove(&number).is_some() {
                shard.limits.close_channel(conn);
            }
            c.out
                .method(number, &Method::ChannelCloseOk(ChannelCloseOk {}));
        }
        self.mark_writer(conn);
        Ok(AfterFrame::Continue)
    }

    /// `channel.flow`.
    pub(super) fn channel_flow(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        flow: ChannelFlow,
    ) -> Result<AfterFrame, MethodError> {
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            ch.flow_active = flow.active;
        }
        self.reply(
            conn,
            number,
            Method::ChannelFlowOk(ChannelFlowOk {
                active: flow.active,
            }),
        );
        if flow.active {
            self.release_held_replies(shard, conn, number);
            self.top_up(shard, conn, number, None);
        }
        Ok(AfterFrame::Continue)
    }

    /// `access.request`.
    pub(super) fn access_request(
        &mut self,
        conn: ConnId,
        number: u16,
    ) -> Result<AfterFrame, MethodError> {
        self.reply(
            conn,
            number,
            Method::AccessRequestOk(AccessRequestOk { ticket: 1 }),
        );
        Ok(AfterFrame::Continue)
    }

    pub(super) fn channel_mut(
        &mut self,
        conn: ConnId,
        number: u16,
    ) -> Result<&mut crate::session::channel::Channel, MethodError> {
        self.conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
            .ok_or_else(|| MethodError::Channel(ChannelError::Internal("channel gone".into())))
    }
}

/// The channel waits for `op`; the reader resolves it and completes the method.
/// The payload of a method on an open channel, in an allocation of its own unless the
/// method is one sent per message (publish, ack, nack, reject), none of whose strings
/// outlive it. A decoded method's names, binding keys, consumer tags and argument
/// tables are slices of its payload, and the payload is a slice of the connection's
/// read buffer: a binding key kept in the directory would keep that whole buffer alive
/// (2 KiB per subscriber, issue 23), unaccounted.
fn detach_unless_per_message(payload: bytes::Bytes) -> bytes::Bytes {
    use crate::protocol::method::{BasicAck, BasicNack, BasicPublish, BasicReject, CLASS_BASIC};
    let per_message = match payload.get(..4) {
        Some(&[c0, c1, m0, m1]) => {
            u16::from_be_bytes([c0, c1]) == CLASS_BASIC
                && matches!(
                    u16::from_be_bytes([m0, m1]),
                    BasicPublish::METHOD_ID
                        | BasicAck::METHOD_ID
                        | BasicNack::METHOD_ID
                        | BasicReject::METHOD_ID
                )
        }
        _ => false,
    };
    if per_message {
        payload
    } else {
        bytes::Bytes::copy_from_slice(&payload)
    }
}

pub(super) fn wait_for(
    conn: ConnId,
    channel: u16,
    op: PendingOp,
) -> Result<AfterFrame, MethodError> {
    Ok(AfterFrame::Await(Pending { conn, channel, op }))
}

pub(super) fn owner(shard: &Shard, conn: ConnId) -> ConnOwner {
    ConnOwner {
        shard: shard.id,
        conn,
    }
}

/// Refuses (406) a new queue or exchange name with a character that can break a log
/// line, the set `ops::escape` escapes (RabbitMQ accepts them). Lookups need no check.
pub(super) fn check_name_characters(kind: ObjectKind, name: &ShortStr) -> Result<(), MethodError> {
    let text = name.as_str_lossy();
    if text.chars().any(crate::ops::escape::breaks_lines) {
        return Err(MethodError::Channel(ChannelError::ControlCharacter {
            kind,
            name: crate::ops::escape::Escaped(&text).to_string(),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::detach_unless_per_message;
    use crate::protocol::method::{BasicPublish, QueueBind};
    use crate::protocol::{FieldTable, Method};

    /// A frame's payload as the reader hands it over: a slice of a larger read buffer.
    fn in_read_buffer(m: &Method) -> (Bytes, Bytes) {
        let mut payload = BytesMut::new();
        m.encode(&mut payload);
        let mut buffer = BytesMut::from(&[0u8; 2048][..]);
        buffer.extend_from_slice(&payload);
        let buffer = buffer.freeze();
        let slice = buffer.slice(2048..);
        (buffer, slice)
    }

    fn within(inner: &[u8], outer: &Bytes) -> bool {
        let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
        i >= o && i < o + outer.len()
    }

    #[test]
    fn a_bind_keeps_no_slice_of_the_read_buffer_and_a_publish_stays_one() {
        let bind = Method::QueueBind(QueueBind {
            ticket: 0,
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "a.b".into(),
            nowait: false,
            arguments: FieldTable::new(),
        });
        let (buffer, payload) = in_read_buffer(&bind);
        let detached = detach_unless_per_message(payload.clone());
        assert_eq!(detached, payload);
        assert!(!within(&detached, &buffer), "copied out");
        let Ok(Method::QueueBind(b)) = Method::decode(detached) else {
            panic!("decodes")
        };
        assert!(!within(b.routing_key.as_bytes(), &buffer));

        let publish = Method::BasicPublish(BasicPublish {
            ticket: 0,
            exchange: "x".into(),
            routing_key: "a.b".into(),
            mandatory: false,
            immediate: false,
        });
        let (buffer, payload) = in_read_buffer(&publish);
        let kept = detach_unless_per_message(payload);
        assert!(within(&kept, &buffer), "per-message methods are not copied");
    }
}
