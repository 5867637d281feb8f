//! Owns: the control plane. Every declare, bind, unbind and delete goes to one
//! coordinator (shard 0), which validates it against its replica of the directory, turns
//! it into [`DirectoryChange`]s, applies them locally and on every other shard, and
//! answers only when all shards have applied them — so a client that got `bind-ok` can
//! publish on any shard and be routed by the new binding.
//!
//! Does not: run on the hot path. Publishes, deliveries and acks never come here.
//!
//! Validating a request and computing its changes (one function per request) is
//! `plan`'s (`control/plan.rs`); the coordinator's round trips (`coordinate`,
//! `delete_queue`, `broadcast`) and applying a change on a shard ([`apply_change`]) are
//! here. The queues the broker deletes on its own go to the coordinator in rounds, one
//! task per shard (`control/own_deletes.rs`).
//!
//! # Ordering
//! Validation and the local apply happen in one borrow on shard 0, and shard 0's inbox
//! to each shard is FIFO, so every shard applies changes in the coordinator's order.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::model::exchange::{Binding, ExchangeKind};
use crate::model::ids::{ConnOwner, QueueId, ShardId};
use crate::model::routing::{
    Directory, DirectoryChange, QueueMeta, Removal, VhostDirectory, VhostIdx,
};
use crate::protocol::ShortStr;
use crate::session::error::{ChannelError, ObjectKind};

use super::inbox::{
    ControlOk, ControlReply, ControlRequest, DeleteRefused, QueueReply, QueueRequest, ShardMsg,
};
use super::{Shard, State};

mod own_deletes;
mod plan;

pub use own_deletes::start as start_own_deletes;

use plan::plan;

/// Sends a control request to the coordinator and waits for its answer.
pub async fn request(shard: &Rc<Shard>, req: ControlRequest) -> ControlReply {
    if shard.id == 0 {
        return coordinate(shard, req).await;
    }
    let (tx, rx) = oneshot::channel();
    shard.peers.send(0, ShardMsg::Control(req, tx));
    rx.await
        .unwrap_or_else(|_| Err(ChannelError::Internal("broker is shutting down".into())))
}

/// Sends a request to a queue's home shard and waits for its answer.
pub async fn queue_request(shard: &Rc<Shard>, home: ShardId, req: QueueRequest) -> QueueReply {
    if home == shard.id {
        let reply = shard
            .state
            .borrow_mut()
            .queue_side()
            .queue_request(shard, req);
        return reply;
    }
    // What this shard's turn has for the queue's shard so far (acks, requeues, credit)
    // goes first: the request is answered after them (and, for a durable queue, the
    // next confirmed publish after it follows their store records).
    shard.flush();
    let (tx, rx) = oneshot::channel();
    shard.peers.send(home, ShardMsg::Queue(req, tx));
    rx.await.unwrap_or(QueueReply::Gone)
}

/// Serves a control request on the coordinator.
pub async fn coordinate(shard: &Rc<Shard>, req: ControlRequest) -> ControlReply {
    debug_assert_eq!(shard.id, 0, "the coordinator is shard 0");
    match req {
        ControlRequest::DeleteQueue {
            vhost,
            name,
            if_unused,
            if_empty,
            requester,
        } => delete_queue(shard, vhost, name, if_unused, if_empty, requester).await,
        ControlRequest::EmptyVhost { vhost } => empty_vhost(shard, vhost).await,
        ControlRequest::DeleteOwnQueues { queues } => {
            own_deletes::delete_own_queues(shard, queues).await
        }
        other => {
            let planned = {
                let mut st = shard.state.borrow_mut();
                plan(&mut st, shard, other)
            };
            let (changes, ok) = planned?;
            if let ControlOk::QueueDeclared { .. } = ok {
                super::ShardCounters::bump(&shard.counters.queues_declared);
            }
            broadcast(shard, changes).await;
            Ok(ok)
        }
    }
}

/// Deletes every queue of a vhost (one at a time, as `queue.delete` would: consumers
/// cancelled, messages dropped), then its exchanges other than the predeclared ones.
/// The answer counts the messages dropped.
async fn empty_vhost(shard: &Rc<Shard>, vhost: VhostIdx) -> ControlReply {
    let queues: Vec<ShortStr> = {
        let st = shard.state.borrow();
        vhost_dir(&st, vhost)?
            .queues()
            .map(|q| q.name.clone())
            .collect()
    };
    let mut messages = 0u32;
    for name in queues {
        if let Ok(ControlOk::QueueDeleted { messages: n }) =
            delete_queue(shard, vhost, name, false, false, None).await
        {
            messages = messages.saturating_add(n);
        }
    }
    let changes: Vec<DirectoryChange> = {
        let st = shard.state.borrow();
        let predeclared = |name: &ShortStr| {
            crate::model::routing::PREDECLARED
                .iter()
                .any(|(p, _)| p.as_bytes() == name.as_bytes())
        };
        vhost_dir(&st, vhost)?
            .exchanges()
            .filter(|ex| !ex.def.name.is_empty() && !predeclared(&ex.def.name))
            .map(|ex| DirectoryChange::DeleteExchange {
                vhost,
                name: ex.def.name.clone(),
            })
            .collect()
    };
    broadcast(shard, changes).await;
    Ok(ControlOk::QueueDeleted { messages })
}

fn vhost_dir(st: &State, vhost: VhostIdx) -> Result<&VhostDirectory, ChannelError> {
    st.common
        .directory
        .vhost(vhost)
        .ok_or_else(|| ChannelError::Internal(format!("unknown vhost index {vhost}")))
}

fn not_found(kind: ObjectKind, name: &ShortStr, vhost: &str) -> ChannelError {
    ChannelError::NotFound {
        kind,
        name: name.to_string(),
        vhost: vhost.to_owned(),
    }
}

/// Checks that `requester` may use a queue: another connection's exclusive queue is 405.
pub fn check_exclusive(
    meta: &QueueMeta,
    requester: Option<ConnOwner>,
    vhost: &str,
) -> Result<(), ChannelError> {
    match (meta.exclusive_owner, requester) {
        (Some(owner), Some(req)) if owner != req => Err(ChannelError::ExclusiveLocked {
            queue: meta.name.to_string(),
            vhost: vhost.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// The deletions of auto-delete exchanges a removal left without bindings.
fn auto_deletions(vhost: VhostIdx, names: Vec<ShortStr>) -> impl Iterator<Item = DirectoryChange> {
    names
        .into_iter()
        .map(move |name| DirectoryChange::DeleteExchange { vhost, name })
}

async fn delete_queue(
    shard: &Rc<Shard>,
    vhost: VhostIdx,
    name: ShortStr,
    if_unused: bool,
    if_empty: bool,
    requester: Option<ConnOwner>,
) -> ControlReply {
    let (meta, vhost_name) = {
        let st = shard.state.borrow();
        let dir = vhost_dir(&st, vhost)?;
        let Some(meta) = dir.queue(&name) else {
            return Ok(ControlOk::QueueDeleted { messages: 0 });
        };
        check_exclusive(meta, requester, &dir.name)?;
        (meta.clone(), dir.name.clone())
    };
    let check = QueueRequest::CheckDelete {
        queue: meta.queue.id,
        if_unused,
        if_empty,
    };
    let messages = match queue_request(shard, meta.queue.home, check).await {
        QueueReply::DeleteChecked(Ok(n)) => n,
        QueueReply::DeleteChecked(Err(DeleteRefused::InUse)) => {
            return Err(ChannelError::InUse {
                kind: ObjectKind::Queue,
                name: name.to_string(),
                vhost: vhost_name,
            })
        }
        QueueReply::DeleteChecked(Err(DeleteRefused::NotEmpty)) => {
            return Err(ChannelError::NotEmpty {
                queue: name.to_string(),
                vhost: vhost_name,
            })
        }
        _ => 0,
    };
    let changes = {
        let st = shard.state.borrow();
        let dir = vhost_dir(&st, vhost)?;
        // The queue may have been deleted while we waited.
        if dir.queue(&name).map(|m| m.queue) != Some(meta.queue) {
            return Ok(ControlOk::QueueDeleted { messages: 0 });
        }
        let mut changes = vec![DirectoryChange::DeleteQueue {
            vhost,
            queue: meta.queue,
            name: name.clone(),
        }];
        changes.extend(auto_deletions(
            vhost,
            dir.auto_deleted(Removal::Queues(&[meta.queue])),
        ));
        changes
    };
    broadcast(shard, changes).await;
    Ok(ControlOk::QueueDeleted { messages })
}

/// Applies changes on this shard, then on every other, and waits for all of them.
async fn broadcast(shard: &Rc<Shard>, changes: Vec<DirectoryChange>) {
    if changes.is_empty() {
        return;
    }
    // Durable changes are on disk before anyone applies them, so nothing can be
    // confirmed into a queue the definitions do not have yet.
    super::home::persist::persist_definitions(shard, &changes).await;
    let counters = &shard.counters;
    for change in &changes {
        match change {
            DirectoryChange::DeclareQueue { .. } => {
                super::ShardCounters::bump(&counters.queues_created)
            }
            DirectoryChange::DeleteQueue { .. } => {
                super::ShardCounters::bump(&counters.queues_deleted)
            }
            _ => {}
        }
    }
    let changes = Arc::new(changes);
    {
        let mut st = shard.state.borrow_mut();
        let now = shard.clock.now();
        for change in changes.iter() {
            apply_change(&mut st, shard, change, now);
        }
    }
    let mut acks = Vec::with_capacity(shard.shards);
    for other in 1..shard.shards {
        let (tx, rx) = oneshot::channel();
        shard
            .peers
            .send(other as ShardId, ShardMsg::Apply(Arc::clone(&changes), tx));
        acks.push(rx);
    }
    for ack in acks {
        let _ = ack.await;
    }
}

/// Applies one directory change to this shard's replica and to its home queues.
pub fn apply_change(st: &mut State, shard: &Shard, change: &DirectoryChange, now: Instant) {
    let topic = topic_bindings_changed_by(&st.common.directory, shard, change);
    let watched = shard.binding_watch.events_of(&st.common.directory, change);
    st.common.directory.apply(change);
    if let Some(events) = watched {
        shard.binding_watch.send(events);
    }
    let mut queues = st.queue_side();
    match change {
        DirectoryChange::DeclareQueue { vhost, meta } => {
            if meta.queue.home == shard.id {
                let start = shard.clock.start();
                queues.create_home_queue(&shard.live(), *vhost, meta, now, start);
            }
            queues.queue_declared(shard, meta.queue.id, now);
        }
        DirectoryChange::DeleteQueue { queue, .. } if queue.home == shard.id => {
            queues.delete_home_queue(shard, queue.id);
        }
        _ => {}
    }
    for (queue, exchange, key, added) in topic {
        queues.topic_binding_changed(shard, queue, &exchange, &key, added);
    }
    // Consumers of a deleted queue hear of it now, before the deleting channel's
    // delete-ok.
    st.hand_to_connections(shard);
}

/// Puts a reload's vhost slots (`Config::vhost_slots`) into this replica: a vhost created
/// at run time gets its slot (every shard appends in the same order, so the index is the
/// same everywhere), a deleted one is closed to lookups by name (the coordinator then
/// empties it through its index, `ControlRequest::EmptyVhost`).
pub fn apply_vhost_slots(st: &mut State, shard: &Shard) {
    let live = shard.live();
    let dir = &mut st.common.directory;
    for (i, slot) in live.vhost_slots.iter().enumerate() {
        while dir.vhost_count() <= i {
            dir.add_vhost(slot.as_deref().unwrap_or(""));
        }
        if slot.is_none() {
            dir.close_vhost(i);
        }
    }
}

/// The topic bindings of this shard's home queues that a change adds (`true`) or
/// removes (`false`), worked out before it is applied: a queue is a topic
/// subscription while it has one (seed 000). A binding to an `x-federation-upstream`
/// exchange (a federation link's queue) counts as one.
fn topic_bindings_changed_by(
    directory: &Directory,
    shard: &Shard,
    change: &DirectoryChange,
) -> Vec<(QueueId, String, String, bool)> {
    let topic_exchange = |vhost: VhostIdx, name: &ShortStr| {
        directory
            .vhost(vhost)
            .and_then(|d| d.exchange(name))
            // A federation link's upstream queue subscribes through its
            // x-federation-upstream exchange: a subscription like a topic queue, so the
            // slow-consumer policy its declare arguments ask for applies to it.
            .filter(|ex| {
                matches!(
                    ex.def.kind,
                    ExchangeKind::Topic | ExchangeKind::FederationUpstream
                )
            })
    };
    let mine = |b: &Binding| b.queue.home == shard.id;
    let entry = |ex: &ShortStr, b: &Binding, added| {
        (b.queue.id, ex.to_string(), b.routing_key.to_string(), added)
    };
    match change {
        DirectoryChange::Bind {
            vhost,
            exchange,
            binding,
        } if mine(binding) => match topic_exchange(*vhost, exchange) {
            Some(ex) if !ex.has_binding(binding) => vec![entry(exchange, binding, true)],
            _ => Vec::new(),
        },
        DirectoryChange::Unbind {
            vhost,
            exchange,
            binding,
        } if mine(binding) => match topic_exchange(*vhost, exchange) {
            Some(ex) if ex.has_binding(binding) => vec![entry(exchange, binding, false)],
            _ => Vec::new(),
        },
        DirectoryChange::DeleteExchange { vhost, name } => match topic_exchange(*vhost, name) {
            Some(ex) => ex
                .bindings()
                .filter(|b| mine(b))
                .map(|b| entry(name, b, false))
                .collect(),
            None => Vec::new(),
        },
        _ => Vec::new(),
    }
}
