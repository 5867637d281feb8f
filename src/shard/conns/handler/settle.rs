//! Owns: how a channel settles deliveries — ack, nack and reject (single, multiple, tag
//! 0 = all; a stream consumer's acks as one `StreamAck` with the highest offset, its
//! nacks and rejects as nothing but credit), `basic.recover`, the transaction buffer for
//! them — and credit top-ups that follow (the credit rule itself lives in
//! `session::consumer`).
//!
//! Does not: touch queue contents; settlements go to the queue's home shard.

use smallvec::SmallVec;

use crate::model::ids::{ConnId, QueueRef};
use crate::protocol::method::{BasicAck, BasicNack, BasicReject};
use crate::session::channel::{Channel, TxOp};
use crate::session::consumer::{ChannelConsumer, Window};
use crate::session::error::ChannelError;

use super::{AfterFrame, MethodError};
use crate::shard::conns::deliver::Grants;
use crate::shard::conns::ConnSide;
use crate::shard::inbox::QueueOp;
use crate::shard::Shard;

impl ConnSide<'_> {
    /// `basic.ack`.
    pub(super) fn basic_ack(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        ack: BasicAck,
    ) -> Result<AfterFrame, MethodError> {
        self.settle_client(
            shard,
            conn,
            number,
            ack.delivery_tag,
            ack.multiple,
            AckKind::Ack,
        )?;
        Ok(AfterFrame::Continue)
    }

    /// `basic.nack`.
    pub(super) fn basic_nack(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        nack: BasicNack,
    ) -> Result<AfterFrame, MethodError> {
        let how = if nack.requeue {
            AckKind::Requeue
        } else {
            AckKind::Discard
        };
        self.settle_client(shard, conn, number, nack.delivery_tag, nack.multiple, how)?;
        Ok(AfterFrame::Continue)
    }

    /// `basic.reject`.
    pub(super) fn basic_reject(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        reject: BasicReject,
    ) -> Result<AfterFrame, MethodError> {
        let how = if reject.requeue {
            AckKind::Requeue
        } else {
            AckKind::Discard
        };
        self.settle_client(shard, conn, number, reject.delivery_tag, false, how)?;
        Ok(AfterFrame::Continue)
    }

    /// ack / nack / reject from the client; buffered in a transaction.
    pub(super) fn settle_client(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        tag: u64,
        multiple: bool,
        how: AckKind,
    ) -> Result<(), MethodError> {
        let max_tx = shard.config.limits.max_tx_operations;
        let ch = self.channel_mut(conn, number)?;
        if let Some(tx) = ch.tx.as_mut() {
            if tx.len() >= max_tx {
                return Err(MethodError::Channel(ChannelError::TxTooLarge {
                    max: max_tx,
                }));
            }
            tx.push(match how {
                AckKind::Ack => TxOp::Ack { tag, multiple },
                AckKind::Requeue | AckKind::Discard => TxOp::Reject {
                    tag,
                    multiple,
                    requeue: how == AckKind::Requeue,
                },
            });
            return Ok(());
        }
        self.settle_now(shard, conn, number, tag, multiple, how)
    }

    pub(super) fn settle_now(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        tag: u64,
        multiple: bool,
        how: AckKind,
    ) -> Result<(), MethodError> {
        let ch = self.channel_mut(conn, number)?;
        let mut taken = ch
            .take_unacked(tag, multiple)
            .map_err(MethodError::Channel)?;
        if matches!(how, AckKind::Ack) {
            ch.stats.ack += taken.len() as u64;
        }
        let mut touched: SmallVec<[u32; 4]> = SmallVec::new();
        for u in &taken {
            if let Some(id) = u.consumer {
                if !touched.contains(&id) {
                    touched.push(id);
                }
            }
        }
        // A stream consumer's deliveries: an ack tells the stream the highest offset
        // (tracking), anything else only returns credit; nothing goes per delivery.
        let mut stream_acks: SmallVec<[(QueueRef, u64, u64); 2]> = SmallVec::new();
        if ch.consumers.values().any(|c| c.stream) {
            taken.retain(|u| {
                let Some(c) = u.consumer.and_then(|id| ch.consumers.get(&id)) else {
                    return true;
                };
                if !c.stream {
                    return true;
                }
                if how == AckKind::Ack && c.queue_key != 0 {
                    match stream_acks
                        .iter_mut()
                        .find(|(_, key, _)| *key == c.queue_key)
                    {
                        Some(a) => a.2 = a.2.max(u.seq),
                        None => stream_acks.push((u.queue, c.queue_key, u.seq)),
                    }
                }
                false
            });
        }
        for u in taken {
            let op = match how {
                AckKind::Ack => QueueOp::Ack(u.seq),
                AckKind::Requeue => QueueOp::Requeue(u.seq),
                AckKind::Discard => QueueOp::Discard(u.seq),
            };
            self.queues().settle_to(shard, u.queue, op);
        }
        for (queue, key, offset) in stream_acks {
            self.queues()
                .settle_to(shard, queue, QueueOp::StreamAck { key, offset });
        }
        for id in touched {
            self.top_up(shard, conn, number, Some(id));
        }
        Ok(())
    }

    pub(super) fn recover(&mut self, shard: &Shard, conn: ConnId, number: u16) {
        let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        else {
            return;
        };
        let unacked = ch.take_all_unacked();
        for u in unacked {
            self.queues()
                .settle_to(shard, u.queue, QueueOp::Requeue(u.seq));
        }
        self.top_up(shard, conn, number, None);
    }

    /// Grants credit to a channel's consumers (one, or all) as the credit rule allows.
    pub fn top_up(&mut self, shard: &Shard, conn: ConnId, number: u16, only: Option<u32>) {
        let window = crate::shard::conns::deliver::no_ack_window(shard);
        let high_water = shard.config.net.write_high_water;
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let has_room = c.out.queued_bytes() < high_water;
        let Some(ch) = c.channels.get_mut(&number) else {
            return;
        };
        let mut grants = Grants::new();
        top_up_channel(ch, only, has_room, window, &mut grants);
        self.send_grants(shard, &grants);
    }

    /// Tops up every consumer of a connection (its socket drained). Runs after every
    /// write that drained a socket, so once per connection and write pass at 1,000
    /// subscribers: one lookup of the connection, nothing allocated.
    pub fn top_up_conn(&mut self, shard: &Shard, conn: ConnId) {
        let window = crate::shard::conns::deliver::no_ack_window(shard);
        let high_water = shard.config.net.write_high_water;
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let has_room = c.out.queued_bytes() < high_water;
        let mut grants = Grants::new();
        for ch in c.channels.values_mut() {
            top_up_channel(ch, None, has_room, window, &mut grants);
        }
        self.send_grants(shard, &grants);
    }
}

/// Grants a channel's consumers (one, or all) what the credit rule allows, noting each
/// grant for its queue. A channel paused by the client (`channel.flow`) gets none.
fn top_up_channel(
    ch: &mut Channel,
    only: Option<u32>,
    has_room: bool,
    window: Window,
    grants: &mut Grants,
) {
    if !ch.flow_active {
        return;
    }
    if ch.global_prefetch > 0 {
        // The channel-wide room changes with every grant: asked again per consumer.
        let ids: SmallVec<[u32; 8]> = match only {
            Some(id) => SmallVec::from_slice(&[id]),
            None => ch.consumers.keys().copied().collect(),
        };
        for id in ids {
            let global = ch.global_room();
            if let Some(cons) = ch.consumers.get_mut(&id) {
                grant(cons, has_room, window, global, grants);
            }
        }
        return;
    }
    match only {
        Some(id) => {
            if let Some(cons) = ch.consumers.get_mut(&id) {
                grant(cons, has_room, window, None, grants);
            }
        }
        None => {
            for cons in ch.consumers.values_mut() {
                grant(cons, has_room, window, None, grants);
            }
        }
    }
}

fn grant(
    cons: &mut ChannelConsumer,
    has_room: bool,
    window: Window,
    global: Option<u32>,
    grants: &mut Grants,
) {
    if cons.queue_key == 0 {
        return;
    }
    if let Some(grant) = cons.take_top_up(has_room, window, global) {
        grants.push(grant);
    }
}

/// Which settlement a client asked for: `basic.ack`, or `basic.nack` / `basic.reject`
/// with `requeue` set or not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AckKind {
    Ack,
    Requeue,
    Discard,
}
