//! Owns: the methods of an open channel — exchange, queue, basic, tx and confirm — and
//! content assembly (method, header and body frames become one publish, handed to
//! `publish`). Settlement lives in `settle`.
//!
//! Does not: wait. Anything that needs another shard's answer is returned as a
//! [`Pending`] for the reader to await.

use crate::auth::permissions::Perm::{Configure, Read};
use crate::model::exchange::{ExchangeDef, ExchangeKind};
use crate::model::ids::{ConnId, ConnOwner, QueueRef};
use crate::model::ledger::PartialBytes;
use crate::model::message::ReceivedBody;
use crate::policy::queue_args;
use crate::protocol::frame::{Frame, FrameKind};
use crate::protocol::method::{
    AccessRequestOk, BasicQosOk, BasicRecoverOk, ChannelCloseOk, ChannelFlowOk, ConfirmSelectOk,
    TxRollbackOk, TxSelectOk,
};
use crate::protocol::{ContentHeader, FieldTable, Method, ShortStr};
use crate::session::channel::{Content, TxOp};
use crate::session::confirm::ConfirmTracker;
use crate::session::consumer::ChannelConsumer;
use crate::session::error::{ChannelError, ConnectionError, HardError, MethodId, ObjectKind};

use super::pending::{Pending, PendingOp, Then};
use super::settle::Settle;
use super::{Flow, MethodError, PUBLISH};
use crate::shard::conns::ConnSide;
use crate::shard::control::check_exclusive;
use crate::shard::inbox::ControlRequest;
use crate::shard::{placement, Shard};

impl ConnSide<'_> {
    /// A frame on an open channel: content frames continue a publish, methods are
    /// dispatched.
    pub(super) fn on_open_channel_frame(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        frame: Frame,
    ) -> Result<Flow, HardError> {
        let number = frame.channel;
        let max_size = shard.config.limits.max_message_size;
        let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        else {
            return Ok(Flow::Stop);
        };
        let unexpected =
            |what: String| Err(ConnectionError::UnexpectedFrame(what).on(MethodId::NONE));
        match (frame.kind, std::mem::take(&mut ch.content)) {
            (FrameKind::Method, Content::Idle) => {
                let method = Method::decode(frame.payload)
                    .map_err(|e| ConnectionError::undecodable(&e).on(MethodId::NONE))?;
                let cause = MethodId::of(&method);
                match self.on_channel_method(shard, conn, number, method) {
                    Ok(flow) => Ok(flow),
                    Err(MethodError::Channel(e)) => {
                        self.close_channel(shard, conn, number, &e, cause);
                        Ok(Flow::Continue)
                    }
                    Err(MethodError::Connection(e)) => Err(e.on(cause)),
                }
            }
            (FrameKind::Header, Content::AwaitHeader(publish)) => {
                let header = ContentHeader::decode(frame.payload)
                    .map_err(|e| ConnectionError::Syntax(e.to_string()).on(PUBLISH))?;
                if header.body_size > max_size {
                    let e = ChannelError::MessageTooLarge {
                        size: header.body_size,
                        max: max_size,
                    };
                    self.close_channel(shard, conn, number, &e, PUBLISH);
                    return Ok(Flow::Continue);
                }
                if header.body_size == 0 {
                    self.publish(
                        shard,
                        conn,
                        number,
                        publish,
                        header,
                        ReceivedBody::default(),
                    );
                } else {
                    ch.content = Content::AwaitBody {
                        publish,
                        header,
                        body: ReceivedBody::default(),
                        received: 0,
                        ledger: PartialBytes::default(),
                    };
                }
                Ok(Flow::Continue)
            }
            (
                FrameKind::Body,
                Content::AwaitBody {
                    publish,
                    header,
                    mut body,
                    received,
                    mut ledger,
                },
            ) => {
                let received = received + frame.payload.len() as u64;
                if received > header.body_size {
                    return unexpected(format!(
                        "body of {received} bytes exceeds the {} announced in the content header",
                        header.body_size
                    ));
                }
                if !frame.payload.is_empty() {
                    ledger.add(frame.payload.len() as u64 + u64::from(frame.pinned));
                    body.pinned += u64::from(frame.pinned);
                    body.chunks.push(frame.payload);
                }
                if received == header.body_size {
                    drop(ledger);
                    self.publish(shard, conn, number, publish, header, body);
                } else {
                    ch.content = Content::AwaitBody {
                        publish,
                        header,
                        body,
                        received,
                        ledger,
                    };
                }
                Ok(Flow::Continue)
            }
            (kind, Content::Idle) => unexpected(format!(
                "{kind:?} frame on channel {number} without a preceding basic.publish"
            )),
            (kind, Content::AwaitHeader(_)) => unexpected(format!(
                "expected a content header on channel {number}, got a {kind:?} frame"
            )),
            (kind, Content::AwaitBody { .. }) => unexpected(format!(
                "expected a content body on channel {number}, got a {kind:?} frame"
            )),
        }
    }

    /// Resolves an empty queue name to the channel's last declared queue.
    fn queue_name(&self, conn: ConnId, number: u16, name: ShortStr) -> ShortStr {
        if !name.is_empty() {
            return name;
        }
        self.conn(conn)
            .and_then(|c| c.channels.get(&number))
            .map(|ch| ch.last_queue.clone())
            .unwrap_or_default()
    }

    /// Looks a queue up in the local replica and checks exclusivity.
    fn lookup_queue(
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

    fn reply(&mut self, conn: ConnId, number: u16, method: Method) {
        if let Some(c) = self.conn_mut(conn) {
            c.out.method(number, &method);
        }
        self.mark_writer(conn);
    }

    #[allow(clippy::too_many_lines)]
    fn on_channel_method(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        method: Method,
    ) -> Result<Flow, MethodError> {
        let vhost = self.conn(conn).map(|c| c.vhost).unwrap_or_default();
        let pending = |op| {
            Ok(Flow::Await(Pending {
                conn,
                channel: number,
                op,
            }))
        };
        match method {
            Method::BasicPublish(publish) => {
                if publish.immediate {
                    return Err(MethodError::Connection(ConnectionError::NotImplemented(
                        "immediate=true".into(),
                    )));
                }
                if let Some(ch) = self
                    .conn_mut(conn)
                    .and_then(|c| c.channels.get_mut(&number))
                {
                    ch.content = Content::AwaitHeader(publish);
                }
                Ok(Flow::Continue)
            }
            Method::BasicAck(ack) => {
                self.settle_client(
                    shard,
                    conn,
                    number,
                    ack.delivery_tag,
                    ack.multiple,
                    Settle::Ack,
                )?;
                Ok(Flow::Continue)
            }
            Method::BasicNack(nack) => {
                let how = if nack.requeue {
                    Settle::Requeue
                } else {
                    Settle::Discard
                };
                self.settle_client(shard, conn, number, nack.delivery_tag, nack.multiple, how)?;
                Ok(Flow::Continue)
            }
            Method::BasicReject(reject) => {
                let how = if reject.requeue {
                    Settle::Requeue
                } else {
                    Settle::Discard
                };
                self.settle_client(shard, conn, number, reject.delivery_tag, false, how)?;
                Ok(Flow::Continue)
            }
            Method::ChannelClose(_) => {
                self.release_channel(shard, conn, number);
                if let Some(c) = self.conn_mut(conn) {
                    c.channels.remove(&number);
                    c.out
                        .method(number, &Method::ChannelCloseOk(ChannelCloseOk {}));
                }
                self.mark_writer(conn);
                Ok(Flow::Continue)
            }
            Method::ChannelOpen(_) => Err(MethodError::Connection(ConnectionError::Channel(
                format!("second 'channel.open' seen on channel {number}"),
            ))),
            Method::ChannelFlow(flow) => {
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
                    self.top_up(shard, conn, number, None);
                }
                Ok(Flow::Continue)
            }
            // The client acknowledges a channel.flow we sent; the broker never waited
            // for it.
            Method::ChannelFlowOk(_) => Ok(Flow::Continue),
            Method::AccessRequest(_) => {
                self.reply(
                    conn,
                    number,
                    Method::AccessRequestOk(AccessRequestOk { ticket: 1 }),
                );
                Ok(Flow::Continue)
            }
            Method::ExchangeDeclare(decl) => {
                // A passive declare only checks that the exchange exists: type (even an
                // empty one), flags and arguments are ignored, as RabbitMQ does.
                if decl.passive {
                    // Not even a passive declare may name the default exchange
                    // (RabbitMQ's check_not_default_exchange): 403.
                    if decl.exchange.is_empty() {
                        return Err(MethodError::Channel(ChannelError::DefaultExchange));
                    }
                    self.authorize_any(conn, number, ObjectKind::Exchange, &decl.exchange)?;
                    self.passive_exchange(conn, &decl.exchange)?;
                    if !decl.nowait {
                        self.reply(conn, number, Method::ExchangeDeclareOk(Default::default()));
                    }
                    return Ok(Flow::Continue);
                }
                check_name_characters(ObjectKind::Exchange, &decl.exchange)?;
                // An unknown type is 406 on the channel (RabbitMQ's check_type).
                let Some(kind) = ExchangeKind::parse(decl.kind.as_bytes()) else {
                    return Err(MethodError::Channel(ChannelError::UnknownExchangeType(
                        decl.kind.to_string(),
                    )));
                };
                self.authorize_declare(
                    conn,
                    number,
                    ObjectKind::Exchange,
                    &decl.exchange,
                    &decl.arguments,
                )?;
                let def = ExchangeDef {
                    name: decl.exchange,
                    kind,
                    durable: decl.durable,
                    auto_delete: decl.auto_delete,
                    internal: decl.internal,
                    arguments: decl.arguments,
                };
                pending(PendingOp::Control {
                    req: ControlRequest::DeclareExchange { vhost, def },
                    then: Then::ExchangeDeclareOk {
                        nowait: decl.nowait,
                    },
                })
            }
            Method::ExchangeDelete(del) => {
                self.authorize(conn, number, Configure, ObjectKind::Exchange, &del.exchange)?;
                pending(PendingOp::Control {
                    req: ControlRequest::DeleteExchange {
                        vhost,
                        name: del.exchange,
                        if_unused: del.if_unused,
                    },
                    then: Then::ExchangeDeleteOk { nowait: del.nowait },
                })
            }
            Method::QueueDeclare(decl) => {
                let vhost_name = self
                    .conn(conn)
                    .map(|c| c.vhost_name.clone())
                    .unwrap_or_default();
                if decl.passive {
                    let name = self.queue_name(conn, number, decl.queue);
                    self.authorize_any(conn, number, ObjectKind::Queue, &name)?;
                    let queue = self.lookup_queue(shard, conn, &name)?;
                    return pending(PendingOp::QueueStats {
                        name,
                        queue,
                        nowait: decl.nowait,
                    });
                }
                let name = if decl.queue.is_empty() {
                    let seed = self.conns.next_name_seed();
                    ShortStr::from(placement::generated_name(
                        &vhost_name,
                        shard.id,
                        shard.shards,
                        seed,
                    ))
                } else {
                    check_name_characters(ObjectKind::Queue, &decl.queue)?;
                    if decl.queue.as_bytes().starts_with(b"amq.") {
                        return Err(MethodError::Channel(ChannelError::ReservedPrefix {
                            kind: ObjectKind::Queue,
                            name: decl.queue.to_string(),
                        }));
                    }
                    decl.queue
                };
                self.authorize_declare(conn, number, ObjectKind::Queue, &name, &decl.arguments)?;
                pending(PendingOp::Control {
                    req: ControlRequest::DeclareQueue {
                        vhost,
                        name: name.clone(),
                        durable: decl.durable,
                        exclusive_owner: decl.exclusive.then(|| owner(shard, conn)),
                        auto_delete: decl.auto_delete,
                        arguments: decl.arguments,
                        requester: owner(shard, conn),
                    },
                    then: Then::QueueDeclareOk {
                        name,
                        nowait: decl.nowait,
                        exclusive: decl.exclusive,
                    },
                })
            }
            Method::QueueBind(bind) => {
                let queue = self.queue_name(conn, number, bind.queue);
                self.authorize_bind(conn, number, &bind.exchange, ObjectKind::Queue, &queue)?;
                let binding = (bind.exchange, queue, bind.routing_key, bind.arguments);
                pending(bind_op(shard, conn, vhost, binding, bind.nowait, false))
            }
            Method::QueueUnbind(bind) => {
                // queue.unbind has no nowait flag: it is always answered.
                let queue = self.queue_name(conn, number, bind.queue);
                self.authorize_bind(conn, number, &bind.exchange, ObjectKind::Queue, &queue)?;
                let binding = (bind.exchange, queue, bind.routing_key, bind.arguments);
                pending(bind_op(shard, conn, vhost, binding, false, true))
            }
            Method::QueuePurge(purge) => {
                let name = self.queue_name(conn, number, purge.queue);
                self.authorize(conn, number, Read, ObjectKind::Queue, &name)?;
                let queue = self.lookup_queue(shard, conn, &name)?;
                pending(PendingOp::Purge {
                    queue,
                    nowait: purge.nowait,
                })
            }
            Method::QueueDelete(del) => {
                let name = self.queue_name(conn, number, del.queue);
                self.authorize(conn, number, Configure, ObjectKind::Queue, &name)?;
                // basic.cancel for this channel's consumers goes after delete-ok
                // (`State::complete`), as RabbitMQ orders them.
                self.channel_mut(conn, number)?.hold_cancels();
                pending(PendingOp::Control {
                    req: ControlRequest::DeleteQueue {
                        vhost,
                        name,
                        if_unused: del.if_unused,
                        if_empty: del.if_empty,
                        requester: Some(owner(shard, conn)),
                    },
                    then: Then::QueueDeleteOk { nowait: del.nowait },
                })
            }
            Method::BasicQos(qos) => {
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
                Ok(Flow::Continue)
            }
            Method::BasicConsume(consume) => {
                let name = self.queue_name(conn, number, consume.queue);
                self.authorize(conn, number, Read, ObjectKind::Queue, &name)?;
                let queue = self.lookup_queue(shard, conn, &name)?;
                let priority =
                    queue_args::consumer_priority(&consume.arguments).map_err(|error| {
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
                    return Ok(Flow::Stop);
                };
                let serial = c.serial;
                let Some(ch) = c.channels.get_mut(&number) else {
                    return Ok(Flow::Stop);
                };
                let tag = if consume.consumer_tag.is_empty() {
                    ch.generate_tag(serial)
                } else {
                    consume.consumer_tag
                };
                if ch.consumer_by_tag(&tag).is_some() {
                    return Err(MethodError::Connection(ConnectionError::NotAllowed(
                        format!("attempt to reuse consumer tag '{tag}'"),
                    )));
                }
                let limits = &shard.config.limits.resources;
                if let Err(refusal) =
                    crate::limits::objects::new_consumer(limits, ch.consumers.len())
                {
                    return Err(self.consumer_limit(shard, conn, number, refusal));
                }
                let consumer = ch.add_consumer(ChannelConsumer {
                    tag: tag.clone(),
                    queue,
                    queue_key: 0,
                    no_ack: consume.no_ack,
                    prefetch: ch.prefetch,
                    unacked: 0,
                    credit: 0,
                    credit_bytes: 0,
                });
                pending(PendingOp::Consume {
                    consumer,
                    queue,
                    name,
                    tag,
                    no_ack: consume.no_ack,
                    exclusive: consume.exclusive,
                    priority,
                    nowait: consume.nowait,
                })
            }
            Method::BasicCancel(cancel) => {
                let removed = self
                    .conn_mut(conn)
                    .and_then(|c| c.channels.get_mut(&number))
                    .and_then(|ch| {
                        let id = ch.consumer_by_tag(&cancel.consumer_tag)?;
                        ch.remove_consumer(id)
                    });
                match removed {
                    Some(cons) if cons.queue_key != 0 => pending(PendingOp::Cancel {
                        queue: cons.queue,
                        key: cons.queue_key,
                        tag: cancel.consumer_tag,
                        nowait: cancel.nowait,
                    }),
                    _ => {
                        if !cancel.nowait {
                            self.reply(
                                conn,
                                number,
                                Method::BasicCancelOk(crate::protocol::method::BasicCancelOk {
                                    consumer_tag: cancel.consumer_tag,
                                }),
                            );
                        }
                        Ok(Flow::Continue)
                    }
                }
            }
            Method::BasicGet(get) => {
                let name = self.queue_name(conn, number, get.queue);
                self.authorize(conn, number, Read, ObjectKind::Queue, &name)?;
                let queue = self.lookup_queue(shard, conn, &name)?;
                let epoch = self.channel_mut(conn, number)?.epoch;
                pending(PendingOp::Get {
                    queue,
                    name,
                    no_ack: get.no_ack,
                    epoch,
                })
            }
            Method::BasicRecover(recover) => {
                self.recover(shard, conn, number);
                let _ = recover.requeue;
                self.reply(conn, number, Method::BasicRecoverOk(BasicRecoverOk {}));
                Ok(Flow::Continue)
            }
            Method::BasicRecoverAsync(_) => {
                self.recover(shard, conn, number);
                Ok(Flow::Continue)
            }
            Method::TxSelect(_) => {
                let ch = self.channel_mut(conn, number)?;
                if ch.confirms.is_some() {
                    return Err(MethodError::Channel(ChannelError::TxInConfirm));
                }
                if ch.tx.is_none() {
                    ch.tx = Some(Vec::new());
                }
                self.reply(conn, number, Method::TxSelectOk(TxSelectOk {}));
                Ok(Flow::Continue)
            }
            Method::TxCommit(_) => {
                let ch = self.channel_mut(conn, number)?;
                let Some(ops) = ch.tx.as_mut().map(std::mem::take) else {
                    return Err(MethodError::Channel(ChannelError::TxNotSelected));
                };
                for op in ops {
                    match op {
                        TxOp::Publish { publish, msg } => {
                            self.route_message(shard, conn, number, &publish, msg)?
                        }
                        TxOp::Ack { tag, multiple } => {
                            self.settle_now(shard, conn, number, tag, multiple, Settle::Ack)?;
                        }
                        TxOp::Reject {
                            tag,
                            multiple,
                            requeue,
                        } => {
                            let how = if requeue {
                                Settle::Requeue
                            } else {
                                Settle::Discard
                            };
                            self.settle_now(shard, conn, number, tag, multiple, how)?;
                        }
                    }
                }
                if let Some(ch) = self
                    .conn_mut(conn)
                    .and_then(|c| c.channels.get_mut(&number))
                {
                    ch.committed();
                }
                self.flush_confirms(conn);
                Ok(Flow::Continue)
            }
            Method::TxRollback(_) => {
                let ch = self.channel_mut(conn, number)?;
                let Some(tx) = ch.tx.as_mut() else {
                    return Err(MethodError::Channel(ChannelError::TxNotSelected));
                };
                tx.clear();
                self.reply(conn, number, Method::TxRollbackOk(TxRollbackOk {}));
                Ok(Flow::Continue)
            }
            Method::ConfirmSelect(select) => {
                let ch = self.channel_mut(conn, number)?;
                if ch.tx.is_some() {
                    return Err(MethodError::Channel(ChannelError::ConfirmInTx));
                }
                if ch.confirms.is_none() {
                    ch.confirms = Some(ConfirmTracker::new());
                }
                if !select.nowait {
                    self.reply(conn, number, Method::ConfirmSelectOk(ConfirmSelectOk {}));
                }
                Ok(Flow::Continue)
            }
            Method::ExchangeBind(bind) => {
                let (s, d) = (&bind.source, &bind.destination);
                self.authorize_bind(conn, number, s, ObjectKind::Exchange, d)?;
                pending(PendingOp::Control {
                    req: ControlRequest::BindExchange {
                        vhost,
                        source: bind.source,
                        destination: bind.destination,
                        routing_key: bind.routing_key,
                        arguments: bind.arguments,
                        unbind: false,
                    },
                    then: Then::ExchangeBindOk {
                        nowait: bind.nowait,
                        unbind: false,
                    },
                })
            }
            Method::ExchangeUnbind(unbind) => {
                let (s, d) = (&unbind.source, &unbind.destination);
                self.authorize_bind(conn, number, s, ObjectKind::Exchange, d)?;
                pending(PendingOp::Control {
                    req: ControlRequest::BindExchange {
                        vhost,
                        source: unbind.source,
                        destination: unbind.destination,
                        routing_key: unbind.routing_key,
                        arguments: unbind.arguments,
                        unbind: true,
                    },
                    then: Then::ExchangeBindOk {
                        nowait: unbind.nowait,
                        unbind: true,
                    },
                })
            }
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

    pub(super) fn channel_mut(
        &mut self,
        conn: ConnId,
        number: u16,
    ) -> Result<&mut crate::session::channel::Channel, MethodError> {
        self.conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
            .ok_or_else(|| MethodError::Channel(ChannelError::Internal("channel gone".into())))
    }

    fn passive_exchange(&self, conn: ConnId, name: &ShortStr) -> Result<(), ChannelError> {
        let vhost = self.conn(conn).map(|c| c.vhost).unwrap_or_default();
        let dir = self
            .common
            .directory
            .vhost(vhost)
            .ok_or_else(|| ChannelError::Internal("vhost gone".into()))?;
        if dir.exchange(name).is_some() {
            return Ok(());
        }
        Err(ChannelError::NotFound {
            kind: ObjectKind::Exchange,
            name: name.to_string(),
            vhost: dir.name.clone(),
        })
    }
}

/// The control request for `queue.bind` / `queue.unbind`: (exchange, queue, routing key,
/// arguments).
fn bind_op(
    shard: &Shard,
    conn: ConnId,
    vhost: usize,
    (exchange, queue, routing_key, arguments): (ShortStr, ShortStr, ShortStr, FieldTable),
    nowait: bool,
    unbind: bool,
) -> PendingOp {
    PendingOp::Control {
        req: ControlRequest::Bind {
            vhost,
            exchange,
            queue,
            routing_key,
            arguments,
            requester: owner(shard, conn),
            unbind,
        },
        then: Then::BindOk { nowait, unbind },
    }
}

pub(super) fn owner(shard: &Shard, conn: ConnId) -> ConnOwner {
    ConnOwner {
        shard: shard.id,
        conn,
    }
}

/// Refuses (406) a new queue or exchange name with a character that can break a log
/// line, the set `ops::escape` escapes (RabbitMQ accepts them). Lookups need no check.
fn check_name_characters(kind: ObjectKind, name: &ShortStr) -> Result<(), MethodError> {
    let text = name.as_str_lossy();
    if text.chars().any(crate::ops::escape::breaks_lines) {
        return Err(MethodError::Channel(ChannelError::ControlCharacter {
            kind,
            name: crate::ops::escape::Escaped(&text).to_string(),
        }));
    }
    Ok(())
}
