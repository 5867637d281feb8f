//! Owns: the shard side of the management API's debugging messages — routing a
//! message published over HTTP on this shard's directory replica
//! ([`ObserveRequest::Route`]), putting it into this shard's home queues as a routed
//! AMQP publish goes in ([`ObserveRequest::Enqueue`]: the queue's policies, persistence
//! of a persistent message on a durable queue, flow and limits, dispatch to consumers
//! on any shard), and taking messages from a home queue as `basic.get` takes them, then
//! settling them as the get's ack mode says ([`ObserveRequest::Get`]).
//!
//! Each request is answered in the turn it arrives, from the shard's own state; the
//! inbox loop flushes after it (dispatch, the store's group commit, outboxes).
//!
//! Does not: parse or format JSON (`http::messages` does), check permissions (the
//! management API checks them for the requesting user), or send to another shard: the
//! management thread sends the message to each home shard itself, holding that shard's
//! publish byte budget, so nothing between an HTTP client and a queue is unbounded.
//!
//! [`ObserveRequest::Route`]: crate::shard::inbox::observe::ObserveRequest::Route
//! [`ObserveRequest::Enqueue`]: crate::shard::inbox::observe::ObserveRequest::Enqueue
//! [`ObserveRequest::Get`]: crate::shard::inbox::observe::ObserveRequest::Get

use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use crate::model::exchange::Targets;
use crate::model::ids::{ChannelRef, QueueId, QueueRef};
use crate::model::message::Message;
use crate::model::routing::RouteError;
use crate::protocol::properties::raw_headers;
use crate::protocol::ShortStr;
use crate::shard::inbox::observe::{AckMode, GotView, RouteRefused};
use crate::shard::inbox::{AddressedQueueOp, QueueOp, QueueReply, QueueRequest};
use crate::shard::Shard;

/// The queues a message published to `exchange` in `vhost` reaches, from this replica.
pub fn route(
    shard: &Shard,
    vhost: &str,
    exchange: &ShortStr,
    routing_key: &ShortStr,
    raw_properties: &Bytes,
) -> Result<Vec<QueueRef>, RouteRefused> {
    let st = shard.state.borrow();
    let directory = &st.common.directory;
    let dir = directory
        .vhost_index(vhost)
        .filter(|i| !directory.is_closed(*i))
        .and_then(|i| directory.vhost(i))
        .ok_or(RouteRefused::NoVhost)?;
    let mut targets = Targets::new();
    dir.route_publish(
        exchange,
        routing_key,
        || raw_headers(raw_properties),
        &mut targets,
    )
    .map_err(|e| match e {
        RouteError::Internal => RouteRefused::Internal,
        RouteError::NoExchange => RouteRefused::NoExchange,
    })?;
    Ok(targets.into_vec())
}

/// Puts `msg` into each of `queues` (home queues of this shard) with the broker as its
/// publisher, then gives the sender's `permits` back. False when a queue refused it.
pub fn enqueue(shard: &Shard, queues: &[QueueId], msg: Message, permits: u32) -> bool {
    let now = shard.clock.now();
    let local = Rc::new(msg);
    let origin = ChannelRef::broker(shard.id);
    let mut accepted = true;
    {
        let mut st = shard.state.borrow_mut();
        for (i, queue) in queues.iter().enumerate() {
            st.home.prefetch_ahead(queues, i, |&q| Some(q));
            accepted &= st
                .queue_side()
                .enqueue(shard, *queue, Rc::clone(&local), origin, now);
        }
    }
    shard.peers.release_budget(shard.id, permits);
    accepted
}

/// Takes up to `count` messages from the home queue `name` of `vhost`, then settles
/// them as `mode` says; `None` when it is not a home queue of this shard.
/// Whether queue `name` of `vhost` is a stream homed on this shard.
pub fn is_stream(shard: &Shard, vhost: &str, name: &str) -> bool {
    let st = shard.state.borrow();
    st.common
        .directory
        .vhost_index(vhost)
        .and_then(|v| st.common.directory.vhost(v))
        .and_then(|d| d.queue(&ShortStr::from(name)))
        .is_some_and(|m| m.queue.home == shard.id && st.home.stream(m.queue.id).is_some())
}

pub fn get(
    shard: &Shard,
    vhost: &str,
    name: &str,
    count: u32,
    mode: AckMode,
) -> Option<Vec<GotView>> {
    let mut st = shard.state.borrow_mut();
    let queue = st
        .common
        .directory
        .vhost_index(vhost)
        .and_then(|v| st.common.directory.vhost(v))
        .and_then(|d| d.queue(&ShortStr::from(name)))
        .map(|m| m.queue)
        .filter(|q| q.home == shard.id)?;
    let no_ack = mode == AckMode::AckRequeueFalse;
    let mut taken = Vec::new();
    let mut views = Vec::new();
    for _ in 0..count {
        let req = QueueRequest::Get {
            queue: queue.id,
            no_ack,
            from: ChannelRef::broker(shard.id),
        };
        match st.queue_side().queue_request(shard, req) {
            QueueReply::Got(Some(got)) => {
                taken.push(got.seq);
                views.push(GotView {
                    exchange: got.msg.exchange().as_str_lossy().into_owned(),
                    routing_key: got.msg.routing_key().as_str_lossy().into_owned(),
                    raw_properties: got.msg.raw_properties().clone(),
                    body: body_of(&got.msg),
                    redelivered: got.redelivered,
                    remaining: got.remaining,
                });
            }
            QueueReply::Gone => return None,
            _ => break,
        }
    }
    // As RabbitMQ's management does: every message is taken first, then each is settled,
    // so a requeued one is not taken again by the same get.
    let settle = match mode {
        AckMode::AckRequeueFalse => None,
        AckMode::AckRequeueTrue | AckMode::RejectRequeueTrue => {
            Some(QueueOp::Requeue as fn(u64) -> QueueOp)
        }
        AckMode::RejectRequeueFalse => Some(QueueOp::Discard as fn(u64) -> QueueOp),
    };
    if let Some(op) = settle {
        for seq in taken {
            st.queue_side().settle(
                shard,
                AddressedQueueOp {
                    queue: queue.id,
                    op: op(seq),
                },
            );
        }
    }
    Some(views)
}

/// The message's body in one piece.
fn body_of(msg: &Message) -> Bytes {
    match msg.body() {
        [one] => one.clone(),
        chunks => {
            let mut out = BytesMut::with_capacity(msg.body_size() as usize);
            for chunk in chunks {
                out.extend_from_slice(chunk);
            }
            out.freeze()
        }
    }
}
