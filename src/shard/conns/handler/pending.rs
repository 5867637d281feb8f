//! Owns: channel operations that need another shard's answer — control-plane requests
//! (declare, bind, delete), and queue requests to a remote home (consume, cancel, get,
//! purge, passive declare, a direct reply-to address's declare) — as data ([`PendingOp`]) that the reader awaits with
//! [`resolve`] and then completes with [`ConnSide::complete`].
//!
//! Does not: hold a borrow of the shard across the wait: `resolve` only awaits, and
//! `complete` runs synchronously afterwards.

use std::rc::Rc;

use crate::model::ids::{ConnId, QueueRef};
use crate::protocol::method::{
    BasicCancel, BasicCancelOk, BasicConsume, BasicConsumeOk, BasicGet, BasicGetEmpty, BasicGetOk,
    ExchangeBind, ExchangeBindOk, ExchangeDeclare, ExchangeDeclareOk, ExchangeDelete,
    ExchangeDeleteOk, ExchangeUnbind, ExchangeUnbindOk, QueueBind, QueueBindOk, QueueDeclare,
    QueueDeclareOk, QueueDelete, QueueDeleteOk, QueuePurgeOk, QueueUnbind, QueueUnbindOk,
};
use crate::protocol::{Method, ShortStr};
use crate::queue::{ConsumeRefused, QueueStats};
use crate::session::error::{ChannelError, MethodId, ObjectKind};

use crate::shard::conns::ConnSide;
use crate::shard::control;
use crate::shard::inbox::{
    ControlOk, ControlRequest, GotMessage, QueueOp, QueueReply, QueueRequest,
};
use crate::shard::Shard;

/// An operation a channel waits for.
pub struct Pending {
    pub conn: ConnId,
    pub channel: u16,
    pub op: PendingOp,
}

/// The `-ok` method to send once a control request succeeded (and the method it
/// answers, for a `channel.close` when it failed).
#[derive(Debug)]
pub enum OkReply {
    ExchangeDeclareOk {
        nowait: bool,
    },
    ExchangeDeleteOk {
        nowait: bool,
    },
    QueueDeclareOk {
        name: ShortStr,
        nowait: bool,
        exclusive: bool,
    },
    QueueDeleteOk {
        nowait: bool,
    },
    BindOk {
        nowait: bool,
        unbind: bool,
    },
    /// `exchange.bind-ok` or `exchange.unbind-ok` (both methods have `nowait`).
    ExchangeBindOk {
        nowait: bool,
        unbind: bool,
    },
}

#[derive(Debug)]
pub enum PendingOp {
    Control {
        req: ControlRequest,
        then: OkReply,
    },
    QueueStats {
        name: ShortStr,
        queue: QueueRef,
        nowait: bool,
    },
    Consume {
        consumer: u32,
        queue: QueueRef,
        name: ShortStr,
        tag: ShortStr,
        no_ack: bool,
        exclusive: bool,
        /// `x-priority`.
        priority: i64,
        nowait: bool,
    },
    /// `basic.consume` on a stream (`handler::stream`).
    ConsumeStream {
        consumer: u32,
        queue: QueueRef,
        name: ShortStr,
        tag: ShortStr,
        generated_tag: bool,
        /// The connection's name, for the stream's views of its readers.
        connection: String,
        prefetch: u32,
        args: Box<crate::policy::stream_args::ConsumerArgs>,
        nowait: bool,
    },
    Cancel {
        queue: QueueRef,
        key: u64,
        tag: ShortStr,
        nowait: bool,
    },
    Get {
        queue: QueueRef,
        name: ShortStr,
        no_ack: bool,
        /// The channel's epoch (the queue remembers who drained it).
        epoch: u32,
    },
    Purge {
        queue: QueueRef,
        nowait: bool,
    },
    /// A throttled login's answer, sent after the delay (`handler::login`).
    LoginDelay {
        delay: std::time::Duration,
        outcome: super::login::LoginOutcome,
        /// The delayed answer's place among the shard's `limits.login.max_delayed`,
        /// held until the answer is sent or the connection goes.
        permit: crate::limits::DelayPermit,
    },
    /// A `queue.declare` of a direct reply-to address whose channel lives on another
    /// shard: answered as a passive declare once that shard says whether the channel
    /// has its reply consumer (`handler::direct_reply`).
    ReplyDeclare {
        to: crate::model::ids::ChannelRef,
        name: ShortStr,
        nowait: bool,
    },
    /// A connection closed without a reply once the delay is over (a `start-ok` whose
    /// mechanism was not offered: `handler::login::refuse_mechanism`).
    SilentClose {
        delay: std::time::Duration,
        /// Its place among the shard's `limits.login.max_delayed`.
        permit: crate::limits::DelayPermit,
    },
}

/// The answer to a [`PendingOp`].
pub enum Resolved {
    Control(Result<ControlOk, ChannelError>, OkReply, Option<QueueStats>),
    Stats(ShortStr, QueueReply, bool),
    Consumed {
        consumer: u32,
        name: ShortStr,
        tag: ShortStr,
        nowait: bool,
        reply: QueueReply,
    },
    Cancelled {
        tag: ShortStr,
        nowait: bool,
    },
    Got {
        queue: QueueRef,
        name: ShortStr,
        no_ack: bool,
        reply: QueueReply,
    },
    Purged {
        reply: QueueReply,
        nowait: bool,
    },
    Login(super::login::LoginOutcome),
    /// Close the socket, sending nothing.
    SilentClose,
}

/// Performs the waiting part of an operation.
pub async fn resolve(shard: &Rc<Shard>, conn: ConnId, channel: u16, op: PendingOp) -> Resolved {
    match op {
        PendingOp::LoginDelay {
            delay,
            outcome,
            permit,
        } => {
            super::login::wait(delay).await;
            drop(permit);
            Resolved::Login(outcome)
        }
        PendingOp::ReplyDeclare { to, name, nowait } => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            shard.peers.send(
                to.shard,
                crate::shard::inbox::ShardMsg::ReplyConsumer(to, tx),
            );
            Resolved::Stats(
                name,
                super::direct_reply::declare_reply(rx.await.unwrap_or(false)),
                nowait,
            )
        }
        PendingOp::SilentClose { delay, permit } => {
            super::login::wait(delay).await;
            drop(permit);
            Resolved::SilentClose
        }
        PendingOp::Control { req, then } => {
            let reply = control::request(shard, req).await;
            // A declared queue's counts come from its home shard.
            let stats = match (&reply, &then) {
                (Ok(ControlOk::QueueDeclared { queue }), OkReply::QueueDeclareOk { .. }) => {
                    let req = QueueRequest::Stats {
                        queue: queue.id,
                        touch: true,
                    };
                    match control::queue_request(shard, queue.home, req).await {
                        QueueReply::Stats(stats) => Some(stats),
                        _ => None,
                    }
                }
                _ => None,
            };
            Resolved::Control(reply, then, stats)
        }
        PendingOp::QueueStats {
            name,
            queue,
            nowait,
        } => {
            let req = QueueRequest::Stats {
                queue: queue.id,
                touch: true,
            };
            Resolved::Stats(
                name,
                control::queue_request(shard, queue.home, req).await,
                nowait,
            )
        }
        PendingOp::Consume {
            consumer,
            queue,
            name,
            tag,
            no_ack,
            exclusive,
            priority,
            nowait,
        } => {
            let target = crate::model::ids::ConsumerTarget {
                shard: shard.id,
                conn,
                channel,
                consumer,
            };
            let req = QueueRequest::Consume {
                queue: queue.id,
                target,
                no_ack,
                exclusive,
                priority,
            };
            let reply = control::queue_request(shard, queue.home, req).await;
            Resolved::Consumed {
                consumer,
                name,
                tag,
                nowait,
                reply,
            }
        }
        PendingOp::ConsumeStream {
            consumer,
            queue,
            name,
            tag,
            generated_tag,
            connection,
            prefetch,
            args,
            nowait,
        } => {
            let target = crate::model::ids::ConsumerTarget {
                shard: shard.id,
                conn,
                channel,
                consumer,
            };
            let req = QueueRequest::ConsumeStream {
                queue: queue.id,
                target,
                tag: tag.clone(),
                generated_tag,
                connection,
                prefetch,
                args,
            };
            let reply = control::queue_request(shard, queue.home, req).await;
            Resolved::Consumed {
                consumer,
                name,
                tag,
                nowait,
                reply,
            }
        }
        PendingOp::Cancel {
            queue,
            key,
            tag,
            nowait,
        } => {
            let req = QueueRequest::Cancel {
                queue: queue.id,
                key,
            };
            // A stream reader that tracks its offset: cancel-ok once the offset is
            // on disk, so that a consumer coming back after it resumes exactly there.
            if let QueueReply::CancelledWhenSynced(synced) =
                control::queue_request(shard, queue.home, req).await
            {
                let _ = synced.await;
            }
            Resolved::Cancelled { tag, nowait }
        }
        PendingOp::Get {
            queue,
            name,
            no_ack,
            epoch,
        } => {
            let req = QueueRequest::Get {
                queue: queue.id,
                no_ack,
                from: crate::model::ids::ChannelRef {
                    shard: shard.id,
                    conn,
                    channel,
                    epoch,
                },
            };
            let reply = control::queue_request(shard, queue.home, req).await;
            Resolved::Got {
                queue,
                name,
                no_ack,
                reply,
            }
        }
        PendingOp::Purge { queue, nowait } => {
            let req = QueueRequest::Purge { queue: queue.id };
            Resolved::Purged {
                reply: control::queue_request(shard, queue.home, req).await,
                nowait,
            }
        }
    }
}

impl ConnSide<'_> {
    /// Finishes a waited-for operation: sends its `-ok` or closes the channel.
    pub fn complete(&mut self, shard: &Shard, conn: ConnId, number: u16, resolved: Resolved) {
        let resolved = match resolved {
            Resolved::Login(outcome) => return self.send_login_outcome(shard, conn, outcome),
            Resolved::SilentClose => return self.finish_connection(conn),
            other => other,
        };
        let open = self
            .conn(conn)
            .and_then(|c| c.channels.get(&number))
            .is_some_and(|ch| ch.phase == crate::session::channel::ChannelPhase::Open);
        let vhost_name = self
            .conn(conn)
            .map(|c| c.vhost_name.clone())
            .unwrap_or_default();
        let gone = |name: &ShortStr| ChannelError::NotFound {
            kind: ObjectKind::Queue,
            name: name.to_string(),
            vhost: vhost_name.clone(),
        };
        // The channel's own queue.delete is answered: the cancels it held go after the
        // delete-ok (or nowhere, if the channel is closed).
        let held_cancels = match &resolved {
            Resolved::Control(_, OkReply::QueueDeleteOk { .. }, _) => self
                .conn_mut(conn)
                .and_then(|c| c.channels.get_mut(&number))
                .map(|ch| ch.release_cancels())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let result: Result<Option<Method>, (ChannelError, MethodId)> = match resolved {
            Resolved::Control(reply, then, stats) => {
                let cause = then_cause(&then);
                match reply {
                    Err(e) => Err((e, cause)),
                    Ok(ok) => Ok(self.control_ok(conn, number, ok, then, stats)),
                }
            }
            Resolved::Stats(name, reply, nowait) => match reply {
                QueueReply::Stats(stats) => Ok((!nowait).then(|| {
                    Method::QueueDeclareOk(QueueDeclareOk {
                        queue: name.clone(),
                        message_count: stats.messages,
                        consumer_count: stats.consumers,
                    })
                })),
                _ => Err((gone(&name), method_id!(QueueDeclare))),
            }
            .inspect(|_| self.set_last_queue(conn, number, &name)),
            Resolved::Consumed {
                consumer,
                name,
                tag,
                nowait,
                reply,
            } => match reply {
                QueueReply::Consumed(Ok(key)) => {
                    if open {
                        if let Some(cons) = self
                            .conn_mut(conn)
                            .and_then(|c| c.channels.get_mut(&number))
                            .and_then(|ch| ch.consumers.get_mut(&consumer))
                        {
                            cons.queue_key = key;
                        }
                        if !nowait {
                            self.reply_now(
                                conn,
                                number,
                                Method::BasicConsumeOk(BasicConsumeOk { consumer_tag: tag }),
                            );
                        }
                        self.top_up(shard, conn, number, Some(consumer));
                    } else if let Some(queue) = self.consumer_queue(conn, number, consumer) {
                        self.queues()
                            .settle_to(shard, queue, QueueOp::Cancel { key });
                    }
                    Ok(None)
                }
                QueueReply::SlowConsumerClosed => {
                    self.forget_consumer(conn, number, consumer);
                    Err((ChannelError::ConsumingTooSlow, MethodId::NONE))
                }
                QueueReply::Consumed(Err(ConsumeRefused::ExclusiveInUse)) => {
                    self.forget_consumer(conn, number, consumer);
                    Err((
                        ChannelError::ExclusiveConsumer {
                            queue: name.to_string(),
                            vhost: vhost_name.clone(),
                        },
                        method_id!(BasicConsume),
                    ))
                }
                _ => {
                    self.forget_consumer(conn, number, consumer);
                    Err((gone(&name), method_id!(BasicConsume)))
                }
            },
            Resolved::Cancelled { tag, nowait } => {
                Ok((!nowait).then(|| Method::BasicCancelOk(BasicCancelOk { consumer_tag: tag })))
            }
            Resolved::Got {
                queue,
                name,
                no_ack,
                reply,
            } => match reply {
                QueueReply::Got(Some(GotMessage {
                    seq,
                    msg,
                    redelivered,
                    remaining,
                })) => {
                    if !open {
                        if !no_ack {
                            self.queues().settle_to(shard, queue, QueueOp::Requeue(seq));
                        }
                        return;
                    }
                    if let Some(c) = self.conn_mut(conn) {
                        if let Some(ch) = c.channels.get_mut(&number) {
                            let tag = ch.record_delivery(queue, seq, None, no_ack, redelivered);
                            c.out.method_with_content(
                                number,
                                &Method::BasicGetOk(BasicGetOk {
                                    delivery_tag: tag,
                                    redelivered,
                                    exchange: msg.exchange().clone(),
                                    routing_key: msg.routing_key().clone(),
                                    message_count: remaining,
                                }),
                                &msg,
                            );
                        }
                    }
                    self.mark_writer(conn);
                    Ok(None)
                }
                QueueReply::Got(None) => {
                    if let Some(ch) = self
                        .conn_mut(conn)
                        .and_then(|c| c.channels.get_mut(&number))
                    {
                        ch.stats.get_empty += 1;
                    }
                    Ok(Some(Method::BasicGetEmpty(BasicGetEmpty {
                        cluster_id: ShortStr::default(),
                    })))
                }
                QueueReply::SlowConsumerClosed => {
                    Err((ChannelError::ConsumingTooSlow, MethodId::NONE))
                }
                _ => Err((gone(&name), method_id!(BasicGet))),
            },
            Resolved::Purged { reply, nowait } => match reply {
                QueueReply::Purged(n) => {
                    Ok((!nowait).then(|| Method::QueuePurgeOk(QueuePurgeOk { message_count: n })))
                }
                _ => Ok((!nowait).then(|| Method::QueuePurgeOk(QueuePurgeOk { message_count: 0 }))),
            },
            // Answered above, before any channel is looked at.
            Resolved::Login(_) | Resolved::SilentClose => Ok(None),
        };
        if !open {
            return;
        }
        match result {
            Ok(Some(method)) => self.reply_now(conn, number, method),
            Ok(None) => {}
            Err((e, cause)) => {
                self.close_channel(shard, conn, number, &e, cause);
                return;
            }
        }
        for consumer_tag in held_cancels {
            self.reply_now(
                conn,
                number,
                Method::BasicCancel(BasicCancel {
                    consumer_tag,
                    nowait: true,
                }),
            );
        }
    }

    fn control_ok(
        &mut self,
        conn: ConnId,
        number: u16,
        ok: ControlOk,
        then: OkReply,
        stats: Option<QueueStats>,
    ) -> Option<Method> {
        match (ok, then) {
            (_, OkReply::ExchangeDeclareOk { nowait }) => {
                (!nowait).then_some(Method::ExchangeDeclareOk(ExchangeDeclareOk {}))
            }
            (_, OkReply::ExchangeDeleteOk { nowait }) => {
                (!nowait).then_some(Method::ExchangeDeleteOk(ExchangeDeleteOk {}))
            }
            (
                _,
                OkReply::QueueDeclareOk {
                    name,
                    nowait,
                    exclusive,
                },
            ) => {
                if exclusive {
                    if let Some(c) = self.conn_mut(conn) {
                        if !c.exclusive_queues.contains(&name) {
                            // Most connections declare one (a subscriber's own queue): room
                            // for one, not four (issue 23).
                            crate::model::reserve_from_one(&mut c.exclusive_queues);
                            c.exclusive_queues.push(name.clone());
                        }
                    }
                }
                self.set_last_queue(conn, number, &name);
                let stats = stats.unwrap_or_default();
                (!nowait).then(|| {
                    Method::QueueDeclareOk(QueueDeclareOk {
                        queue: name,
                        message_count: stats.messages,
                        consumer_count: stats.consumers,
                    })
                })
            }
            (ControlOk::QueueDeleted { messages }, OkReply::QueueDeleteOk { nowait }) => (!nowait)
                .then_some(Method::QueueDeleteOk(QueueDeleteOk {
                    message_count: messages,
                })),
            (_, OkReply::QueueDeleteOk { nowait }) => {
                (!nowait).then_some(Method::QueueDeleteOk(QueueDeleteOk { message_count: 0 }))
            }
            (_, OkReply::BindOk { nowait, unbind }) => {
                if unbind {
                    Some(Method::QueueUnbindOk(QueueUnbindOk {}))
                } else {
                    (!nowait).then_some(Method::QueueBindOk(QueueBindOk {}))
                }
            }
            (_, OkReply::ExchangeBindOk { nowait, unbind }) => (!nowait).then(|| {
                if unbind {
                    Method::ExchangeUnbindOk(ExchangeUnbindOk {})
                } else {
                    Method::ExchangeBindOk(ExchangeBindOk {})
                }
            }),
        }
    }

    fn set_last_queue(&mut self, conn: ConnId, number: u16, name: &ShortStr) {
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            ch.last_queue = name.clone();
        }
    }

    fn reply_now(&mut self, conn: ConnId, number: u16, method: Method) {
        if let Some(c) = self.conn_mut(conn) {
            c.out.method(number, &method);
        }
        self.mark_writer(conn);
    }

    fn forget_consumer(&mut self, conn: ConnId, number: u16, consumer: u32) {
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            ch.remove_consumer(consumer);
        }
    }

    fn consumer_queue(&self, conn: ConnId, number: u16, consumer: u32) -> Option<QueueRef> {
        self.conn(conn)
            .and_then(|c| c.channels.get(&number))
            .and_then(|ch| ch.consumers.get(&consumer))
            .map(|c| c.queue)
    }
}

fn then_cause(then: &OkReply) -> MethodId {
    match then {
        OkReply::ExchangeDeclareOk { .. } => method_id!(ExchangeDeclare),
        OkReply::ExchangeDeleteOk { .. } => method_id!(ExchangeDelete),
        OkReply::QueueDeclareOk { .. } => method_id!(QueueDeclare),
        OkReply::QueueDeleteOk { .. } => method_id!(QueueDelete),
        OkReply::BindOk { unbind: false, .. } => method_id!(QueueBind),
        OkReply::BindOk { unbind: true, .. } => method_id!(QueueUnbind),
        OkReply::ExchangeBindOk { unbind: false, .. } => method_id!(ExchangeBind),
        OkReply::ExchangeBindOk { unbind: true, .. } => method_id!(ExchangeUnbind),
    }
}
