//! Owns: the queue methods of an open channel — `queue.declare` (passive or not, with
//! server-named queues), `queue.bind`, `queue.unbind`, `queue.purge` and
//! `queue.delete` — checked here (names, permissions, exclusivity) and handed to the
//! control plane or the queue's home shard as a [`PendingOp`].
//!
//! Does not: touch a queue's contents or wait for another shard.

use crate::auth::permissions::Perm::{Configure, Read};
use crate::model::ids::ConnId;
use crate::protocol::method::{QueueBind, QueueDeclare, QueueDelete, QueuePurge, QueueUnbind};
use crate::protocol::{FieldTable, ShortStr};
use crate::session::error::{ChannelError, ObjectKind};

use super::channel::{check_name_characters, owner, wait_for};
use super::pending::OkReply;
use super::{AfterFrame, MethodError, PendingOp};
use crate::shard::conns::ConnSide;
use crate::shard::inbox::ControlRequest;
use crate::shard::{placement, Shard};

impl ConnSide<'_> {
    /// `queue.declare`.
    pub(super) fn queue_declare(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        decl: QueueDeclare,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        let vhost_name = self
            .conn(conn)
            .map(|c| c.vhost_name.clone())
            .unwrap_or_default();
        if crate::session::reply_to::is_reply_name(decl.queue.as_bytes()) {
            return self.reply_declare(shard, conn, number, decl);
        }
        if decl.passive {
            let name = self.queue_name(conn, number, decl.queue);
            self.authorize_any(conn, number, ObjectKind::Queue, &name)?;
            let queue = self.lookup_queue(shard, conn, &name)?;
            return wait_for(
                conn,
                number,
                PendingOp::QueueStats {
                    name,
                    queue,
                    nowait: decl.nowait,
                },
            );
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
        wait_for(
            conn,
            number,
            PendingOp::Control {
                req: ControlRequest::DeclareQueue {
                    vhost,
                    name: name.clone(),
                    durable: decl.durable,
                    exclusive_owner: decl.exclusive.then(|| owner(shard, conn)),
                    auto_delete: decl.auto_delete,
                    arguments: decl.arguments,
                    requester: owner(shard, conn),
                },
                then: OkReply::QueueDeclareOk {
                    name,
                    nowait: decl.nowait,
                    exclusive: decl.exclusive,
                },
            },
        )
    }

    /// `queue.bind`.
    pub(super) fn queue_bind(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        bind: QueueBind,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        let queue = self.queue_name(conn, number, bind.queue);
        self.authorize_bind(conn, number, &bind.exchange, ObjectKind::Queue, &queue)?;
        let binding = (bind.exchange, queue, bind.routing_key, bind.arguments);
        wait_for(
            conn,
            number,
            bind_op(shard, conn, vhost, binding, bind.nowait, false),
        )
    }

    /// `queue.unbind`.
    pub(super) fn queue_unbind(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        bind: QueueUnbind,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        // queue.unbind has no nowait flag: it is always answered.
        let queue = self.queue_name(conn, number, bind.queue);
        self.authorize_bind(conn, number, &bind.exchange, ObjectKind::Queue, &queue)?;
        let binding = (bind.exchange, queue, bind.routing_key, bind.arguments);
        wait_for(
            conn,
            number,
            bind_op(shard, conn, vhost, binding, false, true),
        )
    }

    /// `queue.purge`.
    pub(super) fn queue_purge(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        purge: QueuePurge,
    ) -> Result<AfterFrame, MethodError> {
        let name = self.queue_name(conn, number, purge.queue);
        self.authorize(conn, number, Read, ObjectKind::Queue, &name)?;
        let queue = self.lookup_queue(shard, conn, &name)?;
        self.refuse_on_stream(
            conn,
            &name,
            crate::policy::stream_args::StreamRefusal::Purge,
        )?;
        wait_for(
            conn,
            number,
            PendingOp::Purge {
                queue,
                nowait: purge.nowait,
            },
        )
    }

    /// `queue.delete`.
    pub(super) fn queue_delete(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        del: QueueDelete,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        let name = self.queue_name(conn, number, del.queue);
        self.authorize(conn, number, Configure, ObjectKind::Queue, &name)?;
        // basic.cancel for this channel's consumers goes after delete-ok
        // (`ConnSide::complete`), as RabbitMQ orders them.
        self.channel_mut(conn, number)?.hold_cancels();
        wait_for(
            conn,
            number,
            PendingOp::Control {
                req: ControlRequest::DeleteQueue {
                    vhost,
                    name,
                    if_unused: del.if_unused,
                    if_empty: del.if_empty,
                    requester: Some(owner(shard, conn)),
                },
                then: OkReply::QueueDeleteOk { nowait: del.nowait },
            },
        )
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
        then: OkReply::BindOk { nowait, unbind },
    }
}
