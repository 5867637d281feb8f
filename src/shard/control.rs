//! Owns: the control plane. Every declare, bind, unbind and delete goes to one
//! coordinator (shard 0), which validates it against its replica of the directory, turns
//! it into [`DirectoryChange`]s, applies them locally and on every other shard, and
//! answers only when all shards have applied them — so a client that got `bind-ok` can
//! publish on any shard and be routed by the new binding.
//!
//! Does not: run on the hot path. Publishes, deliveries and acks never come here.
//!
//! # Ordering
//! Validation and the local apply happen in one borrow on shard 0, and shard 0's inbox
//! to each shard is FIFO, so every shard applies changes in the coordinator's order.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::model::exchange::headers::HeadersRule;
use crate::model::exchange::{Binding, ExchangeBinding, ExchangeKind};
use crate::model::ids::{ConnOwner, QueueId, QueueRef, ShardId};
use crate::model::routing::{
    Directory, DirectoryChange, QueueMeta, Removal, VhostDirectory, VhostIdx,
};
use crate::ops::event::OpsEvent;
use crate::policy::args::ArgError;
use crate::policy::{capacity, max_length, queue_args, slow_consumer};
use crate::protocol::{FieldTable, FieldValue, ShortStr};
use crate::queue::dispatch_args;
use crate::session::error::{ChannelError, ObjectKind};

use super::inbox::{
    ControlOk, ControlReply, ControlRequest, DeleteRefused, QueueReply, QueueRequest, ShardMsg,
};
use super::{placement, Shard, State};

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

/// Deletes a queue on the broker's own initiative (auto-delete, `x-expires`, exclusive
/// owner gone), in the background.
pub fn spawn_internal_delete(shard: &Rc<Shard>, vhost: VhostIdx, name: ShortStr) {
    let shard = Rc::clone(shard);
    tokio_uring::spawn(async move {
        let req = ControlRequest::DeleteQueue {
            vhost,
            name,
            if_unused: false,
            if_empty: false,
            requester: None,
        };
        if let Err(e) = request(&shard, req).await {
            tracing::debug!("internal queue delete failed: {e}");
        }
    });
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
        other => {
            let planned = {
                let mut st = shard.state.borrow_mut();
                plan(&mut st, shard, other)
            };
            let (changes, ok) = planned?;
            broadcast(shard, changes).await;
            Ok(ok)
        }
    }
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

fn inequivalent(
    kind: ObjectKind,
    name: &ShortStr,
    vhost: &str,
    field: &'static str,
    received: impl ToString,
    current: impl ToString,
) -> ChannelError {
    ChannelError::Inequivalent {
        kind,
        name: name.to_string(),
        vhost: vhost.to_owned(),
        field,
        received: received.to_string(),
        current: current.to_string(),
    }
}

/// RabbitMQ's queue arguments that must match on a redeclare (compared by value).
/// (`x-queue-type` is compared apart: every sluice queue is classic.)
const RABBIT_ARGS: [&str; 6] = [
    queue_args::arg::MESSAGE_TTL,
    queue_args::arg::EXPIRES,
    queue_args::arg::MAX_LENGTH,
    queue_args::arg::MAX_LENGTH_BYTES,
    queue_args::arg::DEAD_LETTER_EXCHANGE,
    queue_args::arg::DEAD_LETTER_ROUTING_KEY,
];

/// Policy arguments that must match on a redeclare (compared by value).
const POLICY_ARGS: [&str; 11] = [
    max_length::arg::OVERFLOW,
    capacity::arg::CAPACITY,
    capacity::arg::FLOW_RESUME_CAPACITY,
    slow_consumer::arg::MAX_DEPTH,
    slow_consumer::arg::MAX_COUNT,
    slow_consumer::arg::MAX_AGE,
    slow_consumer::arg::MIN_RATE,
    slow_consumer::arg::POLICY,
    slow_consumer::arg::INCLUDE_PERSISTENT,
    slow_consumer::arg::INCLUDE_DURABLE,
    crate::model::dead_letter::arg::SLOW_CONSUMER,
];

/// Queue arguments that change how the queue orders and hands out messages
/// (`queue::dispatch_args` reads them; `policy::queue_args` validates them with RabbitMQ's
/// texts); compared on a redeclare.
const DISPATCH_ARGS: [&str; 2] = [
    dispatch_args::arg::MAX_PRIORITY,
    dispatch_args::arg::SINGLE_ACTIVE_CONSUMER,
];

fn arg_error(e: ArgError) -> ChannelError {
    ChannelError::InvalidArgument {
        argument: e.argument,
        reason: e.reason,
    }
}

/// Whether two argument values are the same setting (integers of any width compare by
/// value).
fn same_arg(a: Option<&FieldValue>, b: Option<&FieldValue>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(m), Some(n)) => m == n,
            _ => x == y,
        },
        (None, None) => true,
        _ => false,
    }
}

/// Checks a new queue's arguments: RabbitMQ's own first, with RabbitMQ's texts, then
/// sluice's policy arguments. Arguments neither knows are ignored, as RabbitMQ does.
fn validate_queue_args(
    queue: &ShortStr,
    vhost: &str,
    args: &FieldTable,
) -> Result<(), ChannelError> {
    queue_args::validate(args).map_err(|error| ChannelError::QueueArgument {
        queue: queue.to_string(),
        vhost: vhost.to_owned(),
        error,
    })?;
    max_length::MaxLength::from_arguments(args).map_err(arg_error)?;
    capacity::CapacitySettings::from_arguments(args).map_err(arg_error)?;
    slow_consumer::SlowConsumerSettings::from_arguments(args).map_err(arg_error)?;
    crate::policy::args::boolean(args, crate::model::dead_letter::arg::SLOW_CONSUMER)
        .map_err(arg_error)?;
    Ok(())
}

fn arg_text(v: Option<&FieldValue>) -> String {
    match v {
        None => "none".to_owned(),
        Some(v) => v
            .as_i64()
            .map(|n| n.to_string())
            .or_else(|| v.as_bool().map(|b| b.to_string()))
            .or_else(|| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("{v:?}")),
    }
}

/// Validates a request and computes the changes it makes.
fn plan(
    st: &mut State,
    shard: &Shard,
    req: ControlRequest,
) -> Result<(Vec<DirectoryChange>, ControlOk), ChannelError> {
    match req {
        ControlRequest::DeclareExchange { vhost, def } => {
            let dir = vhost_dir(st, vhost)?;
            if def.name.is_empty() {
                return Err(ChannelError::DefaultExchange);
            }
            if let Some(ex) = dir.exchange(&def.name) {
                let cur = &ex.def;
                let ie = |field, r: &dyn ToString, c: &dyn ToString| {
                    Err(inequivalent(
                        ObjectKind::Exchange,
                        &def.name,
                        &dir.name,
                        field,
                        r.to_string(),
                        c.to_string(),
                    ))
                };
                if cur.kind != def.kind {
                    return ie("type", &def.kind.name(), &cur.kind.name());
                }
                if cur.durable != def.durable {
                    return ie("durable", &def.durable, &cur.durable);
                }
                if cur.auto_delete != def.auto_delete {
                    return ie("auto_delete", &def.auto_delete, &cur.auto_delete);
                }
                if cur.internal != def.internal {
                    return ie("internal", &def.internal, &cur.internal);
                }
                return Ok((Vec::new(), ControlOk::ExchangeDeclared));
            }
            if def.name.as_bytes().starts_with(b"amq.") {
                return Err(ChannelError::ReservedPrefix {
                    kind: ObjectKind::Exchange,
                    name: def.name.to_string(),
                });
            }
            OpsEvent::ExchangeCreate {
                vhost: dir.name.clone(),
                exchange: def.name.to_string(),
                kind: def.kind.name(),
                durable: def.durable,
            }
            .emit();
            Ok((
                vec![DirectoryChange::DeclareExchange { vhost, def }],
                ControlOk::ExchangeDeclared,
            ))
        }
        ControlRequest::DeleteExchange {
            vhost,
            name,
            if_unused,
        } => {
            let dir = vhost_dir(st, vhost)?;
            if name.is_empty() {
                return Err(ChannelError::DefaultExchange);
            }
            if name.as_bytes().starts_with(b"amq.") {
                return Err(ChannelError::ReservedPrefix {
                    kind: ObjectKind::Exchange,
                    name: name.to_string(),
                });
            }
            let Some(ex) = dir.exchange(&name) else {
                return Ok((Vec::new(), ControlOk::ExchangeDeleted));
            };
            // Bindings where it is the source, to queues or exchanges, make it used
            // (RabbitMQ's has_for_source); bindings to it do not, and go with it.
            if if_unused && ex.binding_count() > 0 {
                return Err(ChannelError::InUse {
                    kind: ObjectKind::Exchange,
                    name: name.to_string(),
                    vhost: dir.name.clone(),
                });
            }
            OpsEvent::ExchangeDeleted {
                vhost: dir.name.clone(),
                exchange: name.to_string(),
            }
            .emit();
            let cascade = dir.auto_deleted(Removal::Exchange(&name));
            let mut changes = vec![DirectoryChange::DeleteExchange { vhost, name }];
            changes.extend(auto_deletions(vhost, cascade));
            Ok((changes, ControlOk::ExchangeDeleted))
        }
        ControlRequest::DeclareQueue {
            vhost,
            name,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            requester,
        } => {
            let next_id = st.common.next_queue_id;
            let dir = vhost_dir(st, vhost)?;
            // An existing queue is checked for equivalence only, a new one's arguments
            // are validated (rabbit_channel's order).
            if let Some(meta) = dir.queue(&name) {
                check_exclusive(meta, Some(requester), &dir.name)?;
                let ie = |field, r: bool, c: bool| {
                    Err(inequivalent(
                        ObjectKind::Queue,
                        &name,
                        &dir.name,
                        field,
                        r,
                        c,
                    ))
                };
                if meta.durable != durable {
                    return ie("durable", durable, meta.durable);
                }
                if meta.exclusive_owner.is_some() != exclusive_owner.is_some() {
                    return ie(
                        "exclusive",
                        exclusive_owner.is_some(),
                        meta.exclusive_owner.is_some(),
                    );
                }
                if meta.auto_delete != auto_delete {
                    return ie("auto_delete", auto_delete, meta.auto_delete);
                }
                for key in RABBIT_ARGS
                    .iter()
                    .chain(POLICY_ARGS.iter())
                    .chain(DISPATCH_ARGS.iter())
                {
                    let (r, c) = (arguments.get(key), meta.arguments.get(key));
                    if !same_arg(r, c) {
                        return Err(inequivalent(
                            ObjectKind::Queue,
                            &name,
                            &dir.name,
                            key_static(key),
                            arg_text(r),
                            arg_text(c),
                        ));
                    }
                }
                if !queue_args::is_classic(&arguments) {
                    return Err(inequivalent(
                        ObjectKind::Queue,
                        &name,
                        &dir.name,
                        queue_args::arg::QUEUE_TYPE,
                        arg_text(arguments.get(queue_args::arg::QUEUE_TYPE)),
                        "classic",
                    ));
                }
                return Ok((Vec::new(), ControlOk::QueueDeclared { queue: meta.queue }));
            }
            validate_queue_args(&name, &dir.name, &arguments)?;
            let (limits, now) = (&shard.config.limits.resources, shard.clock.now());
            crate::limits::objects::new_queue(limits, &shard.limits, dir, &name, now)?;
            let home = placement::home_shard(&dir.name, name.as_bytes(), shard.shards);
            let queue = QueueRef {
                id: QueueId(next_id),
                home,
            };
            st.common.next_queue_id += 1;
            let meta = QueueMeta {
                queue,
                name,
                durable,
                exclusive_owner,
                auto_delete,
                arguments,
            };
            Ok((
                vec![DirectoryChange::DeclareQueue { vhost, meta }],
                ControlOk::QueueDeclared { queue },
            ))
        }
        ControlRequest::Bind {
            vhost,
            exchange,
            queue,
            routing_key,
            arguments,
            requester,
            unbind,
        } => {
            let dir = vhost_dir(st, vhost)?;
            if exchange.is_empty() {
                return Err(ChannelError::DefaultExchange);
            }
            let (meta, ex) = (dir.queue(&queue), dir.exchange(&exchange));
            if unbind && (meta.is_none() || ex.is_none()) {
                // Unbinding is idempotent: with the queue or the exchange (or both) gone
                // there is no binding left to remove, and RabbitMQ answers unbind-ok
                // (rabbit_db_binding:delete).
                return Ok((Vec::new(), ControlOk::Bound));
            }
            let meta = meta.ok_or_else(|| not_found(ObjectKind::Queue, &queue, &dir.name))?;
            let ex = ex.ok_or_else(|| not_found(ObjectKind::Exchange, &exchange, &dir.name))?;
            check_exclusive(meta, Some(requester), &dir.name)?;
            if ex.def.kind == crate::model::exchange::ExchangeKind::Headers
                && !HeadersRule::valid_mode(&arguments)
            {
                return Err(ChannelError::InvalidArgument {
                    argument: "x-match".into(),
                    reason: "expected all, any, all-with-x or any-with-x".into(),
                });
            }
            let binding = Binding {
                queue: meta.queue,
                queue_name: queue,
                routing_key,
                arguments,
            };
            if !unbind {
                let (limits, now) = (&shard.config.limits.resources, shard.clock.now());
                let existing = || ex.has_binding(&binding);
                let limiter = &shard.limits;
                crate::limits::objects::new_binding(
                    limits, limiter, dir, &exchange, existing, now,
                )?;
                return Ok((
                    vec![DirectoryChange::Bind {
                        vhost,
                        exchange,
                        binding,
                    }],
                    ControlOk::Bound,
                ));
            }
            if !ex.has_binding(&binding) {
                return Ok((Vec::new(), ControlOk::Bound));
            }
            let cascade = dir.auto_deleted(Removal::QueueBinding { source: &exchange });
            let mut changes = vec![DirectoryChange::Unbind {
                vhost,
                exchange,
                binding,
            }];
            changes.extend(auto_deletions(vhost, cascade));
            Ok((changes, ControlOk::Bound))
        }
        ControlRequest::BindExchange {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
            unbind,
        } => {
            let dir = vhost_dir(st, vhost)?;
            if !unbind {
                let (limits, now) = (&shard.config.limits.resources, shard.clock.now());
                let binding = (&destination, &routing_key, &arguments);
                let limiter = &shard.limits;
                crate::limits::objects::new_exchange_binding(
                    limits, limiter, dir, &source, binding, now,
                )?;
            }
            plan_exchange_binding(
                dir,
                vhost,
                source,
                destination,
                routing_key,
                arguments,
                unbind,
            )
        }
        ControlRequest::DeleteQueue { .. } => Err(ChannelError::Internal(
            "queue deletion is planned by delete_queue".into(),
        )),
    }
}

/// `exchange.bind` / `exchange.unbind` (RabbitMQ's `binding_action_with_checks`): the
/// default exchange may be neither end (403); a bind needs both exchanges (404 naming
/// the source first); an unbind of a missing exchange or binding is ok. Unbinding the
/// last binding of an auto-delete source deletes it.
fn plan_exchange_binding(
    dir: &VhostDirectory,
    vhost: VhostIdx,
    source: ShortStr,
    destination: ShortStr,
    routing_key: ShortStr,
    arguments: FieldTable,
    unbind: bool,
) -> Result<(Vec<DirectoryChange>, ControlOk), ChannelError> {
    if destination.is_empty() || source.is_empty() {
        return Err(ChannelError::DefaultExchange);
    }
    let binding = ExchangeBinding {
        destination,
        routing_key,
        arguments,
    };
    if unbind {
        if !dir.has_exchange_binding(&source, &binding) {
            return Ok((Vec::new(), ControlOk::Bound));
        }
        let cascade = dir.auto_deleted(Removal::ExchangeBinding {
            source: &source,
            binding: &binding,
        });
        let mut changes = vec![DirectoryChange::UnbindExchange {
            vhost,
            source,
            binding,
        }];
        changes.extend(auto_deletions(vhost, cascade));
        return Ok((changes, ControlOk::Bound));
    }
    let src = dir
        .exchange(&source)
        .ok_or_else(|| not_found(ObjectKind::Exchange, &source, &dir.name))?;
    if dir.exchange(&binding.destination).is_none() {
        return Err(not_found(
            ObjectKind::Exchange,
            &binding.destination,
            &dir.name,
        ));
    }
    if src.def.kind == ExchangeKind::Headers && !HeadersRule::valid_mode(&binding.arguments) {
        return Err(ChannelError::InvalidArgument {
            argument: "x-match".into(),
            reason: "expected all, any, all-with-x or any-with-x".into(),
        });
    }
    Ok((
        vec![DirectoryChange::BindExchange {
            vhost,
            source,
            binding,
        }],
        ControlOk::Bound,
    ))
}

/// The deletions of auto-delete exchanges a removal left without bindings.
fn auto_deletions(vhost: VhostIdx, names: Vec<ShortStr>) -> impl Iterator<Item = DirectoryChange> {
    names
        .into_iter()
        .map(move |name| DirectoryChange::DeleteExchange { vhost, name })
}

fn key_static(key: &str) -> &'static str {
    RABBIT_ARGS
        .iter()
        .chain(POLICY_ARGS.iter())
        .chain(DISPATCH_ARGS.iter())
        .find(|k| **k == key)
        .copied()
        .unwrap_or("arguments")
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
            dir.auto_deleted(Removal::Queue(meta.queue)),
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
    shard.persist_definitions(&changes).await;
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
    st.common.directory.apply(change);
    let mut queues = st.queue_side();
    match change {
        DirectoryChange::DeclareQueue { vhost, meta } => {
            if meta.queue.home == shard.id {
                queues.create_home_queue(&shard.live(), *vhost, meta, now);
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

/// The topic bindings of this shard's home queues that a change adds (`true`) or
/// removes (`false`), worked out before it is applied: a queue is a topic
/// subscription while it has one (seed 000).
fn topic_bindings_changed_by(
    directory: &Directory,
    shard: &Shard,
    change: &DirectoryChange,
) -> Vec<(QueueId, String, String, bool)> {
    let topic_exchange = |vhost: VhostIdx, name: &ShortStr| {
        directory
            .vhost(vhost)
            .and_then(|d| d.exchange(name))
            .filter(|ex| ex.def.kind == ExchangeKind::Topic)
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
