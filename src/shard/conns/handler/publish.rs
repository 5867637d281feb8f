//! Owns: the publish path of a channel — a complete message (method, header, body) is
//! held for `tx.commit` or routed on this shard's directory replica and enqueued: local
//! queues directly (one `Rc` per shard), other shards' queues batched per destination for
//! the end of the turn, each message tagged with its channel — plus `basic.return` for
//! unroutable mandatory publishes and publisher confirms: a publish is confirmed once
//! every queue it was routed to has it (local queues at once, other shards when they
//! report back), and nacked when a queue refused it (`reject-publish`). A publish to a
//! direct reply-to address goes to `direct_reply` instead of the directory.
//!
//! Does not: wait for another shard (the reader sends the batches and awaits room).

use smallvec::SmallVec;

use crate::model::exchange::Targets;
use crate::model::ids::{ChannelRef, ConnId};
use crate::model::message::{parse_expiration, Message, ReceivedBody};
use crate::model::routing::RouteError;
use crate::protocol::method::{BasicAck, BasicNack, BasicPublish, BasicReturn, TxCommitOk};
use crate::protocol::properties::{raw_expiration, raw_headers};
use crate::protocol::{ContentHeader, Method, ShortStr};
use crate::session::channel::TxOp;
use crate::session::confirm::ConfirmReply;
use crate::session::error::{ChannelError, ObjectKind};

use super::{MethodError, PUBLISH};
use crate::shard::conns::flow::{charge_fanout, suspend_past_grace};
use crate::shard::conns::ConnSide;
use crate::shard::inbox::{ConfirmDone, Routed};
use crate::shard::Shard;

impl ConnSide<'_> {
    /// A complete publish: in a transaction it waits for commit; otherwise it is routed.
    pub(super) fn publish(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        publish: BasicPublish,
        header: ContentHeader,
        body: ReceivedBody,
    ) {
        self.note_publish(shard, conn, number, header.body_size);
        if let Err(e) = self.authorize_publish(conn, number, &publish.exchange) {
            return self.close_channel(shard, conn, number, &e, PUBLISH);
        }
        // rabbit_channel's check_expiration_header: an expiration that is not a TTL
        // closes the channel rather than being ignored.
        let ttl_ms = match raw_expiration(&header.raw_properties) {
            None => None,
            Some(raw) => match parse_expiration(raw) {
                Ok(ttl) => Some(ttl),
                Err(reason) => {
                    let e = ChannelError::InvalidExpiration {
                        value: String::from_utf8_lossy(raw).into_owned(),
                        reason,
                    };
                    self.close_channel(shard, conn, number, &e, PUBLISH);
                    return;
                }
            },
        };
        if let Err(e) = self.check_user_id(shard, conn, &header.raw_properties) {
            return self.close_channel(shard, conn, number, &e, PUBLISH);
        }
        // Direct reply-to: `reply_to = amq.rabbitmq.reply-to` names this channel's
        // reply address.
        let raw_properties = match self.rewrite_reply_to(conn, number, &header.raw_properties) {
            Ok(None) => header.raw_properties,
            Ok(Some(rewritten)) => rewritten,
            Err(e) => return self.close_channel(shard, conn, number, &e, PUBLISH),
        };
        shard.counters.message_sizes.record(header.body_size);
        let msg = Message::with_ttl(
            publish.exchange.clone(),
            publish.routing_key.clone(),
            raw_properties,
            body,
            header.body_size,
            ttl_ms,
        );
        let max_tx = shard.config.limits.max_tx_operations;
        let result = match self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            Some(ch) => match ch.count_publish().tx.as_mut() {
                Some(tx) if tx.len() >= max_tx => {
                    Err(MethodError::Channel(ChannelError::TxTooLarge {
                        max: max_tx,
                    }))
                }
                Some(tx) => {
                    tx.push(TxOp::Publish { publish, msg });
                    Ok(())
                }
                None => self.route_message(shard, conn, number, &publish, msg),
            },
            None => Ok(()),
        };
        match result {
            Ok(()) => {}
            Err(MethodError::Channel(e)) => self.close_channel(shard, conn, number, &e, PUBLISH),
            Err(MethodError::Connection(e)) => self.close_connection(shard, conn, &e.on(PUBLISH)),
        }
    }

    /// Routes a message and enqueues it: local queues directly, other shards' queues
    /// into this turn's publish batch for that shard.
    pub(super) fn route_message(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        publish: &BasicPublish,
        msg: Message,
    ) -> Result<(), MethodError> {
        if publish.exchange.is_empty()
            && crate::session::reply_to::is_reply_name(publish.routing_key.as_bytes())
        {
            return self.route_reply(shard, conn, number, publish, msg);
        }
        let now = shard.clock.now();
        let vhost = self.conn(conn).map(|c| c.vhost).unwrap_or_default();
        let mut targets = Targets::new();
        {
            let dir =
                self.common.directory.vhost(vhost).ok_or_else(|| {
                    MethodError::Channel(ChannelError::Internal("vhost gone".into()))
                })?;
            let raw = msg.raw_properties();
            dir.route_publish(
                &publish.exchange,
                &publish.routing_key,
                || raw_headers(raw),
                &mut targets,
            )
            .map_err(|e| {
                MethodError::Channel(match e {
                    RouteError::Internal => ChannelError::InternalExchange {
                        name: publish.exchange.to_string(),
                        vhost: dir.name.clone(),
                    },
                    RouteError::NoExchange => ChannelError::NotFound {
                        kind: ObjectKind::Exchange,
                        name: publish.exchange.to_string(),
                        vhost: dir.name.clone(),
                    },
                })
            })?;
        }
        // The directory yields each queue at most once, through chains of exchanges too
        // (see `model::routing`), so there is nothing to de-duplicate here.
        if targets.is_empty() && publish.mandatory {
            if let Some(c) = self.conn_mut(conn) {
                c.out.method_with_content(
                    number,
                    &Method::BasicReturn(BasicReturn {
                        reply_code: 312,
                        reply_text: ShortStr::from_static("NO_ROUTE"),
                        exchange: publish.exchange.clone(),
                        routing_key: publish.routing_key.clone(),
                    }),
                    &msg,
                );
            }
            self.mark_writer(conn);
        }
        shard
            .turn_fanout
            .set(shard.turn_fanout.get() + targets.len());
        let grace = shard.config.policies.flow.grace_bytes;
        let Some(c) = self.conn_mut(conn) else {
            return Ok(());
        };
        let blocked = c.blocked_sent;
        let Some(ch) = c.channels.get_mut(&number) else {
            return Ok(());
        };
        let past_grace = charge_fanout(ch, blocked, targets.len(), grace);
        if targets.is_empty() {
            let unroutable = if publish.mandatory {
                &mut ch.publishing_mut().return_unroutable
            } else {
                &mut ch.publishing_mut().drop_unroutable
            };
            *unroutable += 1;
        }
        let origin = ChannelRef {
            shard: shard.id,
            conn,
            channel: number,
            epoch: ch.epoch,
        };
        let confirm = ch.tracker_mut().map_or(0, |c| c.assign());
        if let (Some(excess), Some(c)) = (past_grace, self.conn_mut(conn)) {
            suspend_past_grace(c, number, excess, grace);
        }
        let local = targets
            .iter()
            .any(|t| t.home == shard.id)
            .then(|| std::rc::Rc::new(msg.clone()));
        let mut refused = false;
        // Only a confirmed publish needs to know whether it entered durable queues here.
        let staged_before = (confirm != 0).then(|| shard.store.borrow().staged_refs());
        let mut remote_shards: SmallVec<[u16; 4]> = SmallVec::new();
        for (i, target) in targets.iter().enumerate() {
            self.queues()
                .prefetch_ahead(&targets, i, |t| (t.home == shard.id).then_some(t.id));
            if target.home == shard.id {
                if let Some(local) = &local {
                    refused |= !self.queues().enqueue(
                        shard,
                        target.id,
                        std::rc::Rc::clone(local),
                        origin,
                        now,
                    );
                }
            } else if let Some(batch) = self.common.outbox.publish.get_mut(usize::from(target.home))
            {
                match batch.last_mut() {
                    Some(last) if same_message(&last.msg, &msg) => last.queues.push(target.id),
                    _ => {
                        remote_shards.push(target.home);
                        batch.push(Routed {
                            queues: SmallVec::from_slice(&[target.id]),
                            msg: msg.clone(),
                            origin,
                            confirm,
                        });
                    }
                }
            }
        }
        if confirm != 0 {
            // A persistent message that entered durable queues here is confirmed once
            // this shard's store has it on disk: one more report to wait for.
            let stored_here = staged_before != Some(shard.store.borrow().staged_refs());
            if let Some(tracker) = self
                .conn_mut(conn)
                .and_then(|c| c.channels.get_mut(&number))
                .and_then(|ch| ch.tracker_mut())
            {
                let waits = remote_shards.len() as u16 + u16::from(stored_here);
                tracker.record(confirm, waits, refused);
            }
            if stored_here {
                self.queues().hold_confirm(origin, confirm, true);
            }
        }
        Ok(())
    }

    /// Sends the confirms a connection's channels can give: for publishes whose queues
    /// (local, or on other shards that reported back) have them.
    pub fn flush_confirms(&mut self, conn: ConnId) {
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let mut replies = Vec::new();
        let mut wrote = false;
        for ch in c.channels.values_mut() {
            if ch.tx.is_some() {
                // A transaction's publishes are tracked like confirms; its commit-ok
                // goes out once every one of them is in its queues (on disk, for
                // persistent messages on durable queues).
                for _ in 0..ch.take_committed() {
                    c.out.method(ch.number, &Method::TxCommitOk(TxCommitOk {}));
                    wrote = true;
                }
                continue;
            }
            let Some(tracker) = ch.confirms.as_mut() else {
                continue;
            };
            if !tracker.has_ready() {
                continue;
            }
            replies.clear();
            tracker.take_ready(&mut replies);
            for reply in &replies {
                let method = match *reply {
                    ConfirmReply::Ack { tag, multiple } => Method::BasicAck(BasicAck {
                        delivery_tag: tag,
                        multiple,
                    }),
                    ConfirmReply::Nack { tag } => Method::BasicNack(BasicNack {
                        delivery_tag: tag,
                        multiple: false,
                        requeue: false,
                    }),
                };
                c.out.method(ch.number, &method);
                wrote = true;
            }
        }
        if wrote {
            self.mark_writer(conn);
        }
    }

    /// Confirm outcomes reported by queues' home shards.
    pub fn confirms_done(&mut self, _shard: &Shard, done: Vec<ConfirmDone>) {
        let mut touched: SmallVec<[ConnId; 4]> = SmallVec::new();
        for d in done {
            let Some(ch) = self
                .conn_mut(d.channel.conn)
                .and_then(|c| c.channels.get_mut(&d.channel.channel))
                .filter(|ch| ch.epoch == d.channel.epoch)
            else {
                continue;
            };
            if let Some(tracker) = ch.tracker_mut() {
                tracker.complete(d.first, d.last, d.rejected);
                if !touched.contains(&d.channel.conn) {
                    touched.push(d.channel.conn);
                }
            }
        }
        for conn in touched {
            self.flush_confirms(conn);
        }
    }
}

fn same_message(a: &Message, b: &Message) -> bool {
    a.ptr_eq(b)
}
