//! Owns: planning a control request on the coordinator — validating it against the
//! coordinator's replica of the directory (equivalence on a redeclare, names, queue
//! arguments, exclusivity, the object limits) and computing the [`DirectoryChange`]s it
//! makes, one function per request: exchange declare / delete / bind, queue declare /
//! bind.
//!
//! Does not: apply the changes or talk to other shards (`control` does both), or plan a
//! queue deletion (which asks the queue's home shard first: `control::delete_queue`).

use crate::model::exchange::headers::HeadersRule;
use crate::model::exchange::upstream::{self, UpstreamArgError};
use crate::model::exchange::{Binding, ExchangeBinding, ExchangeDef, ExchangeKind};
use crate::model::ids::{ConnOwner, QueueId, QueueRef};
use crate::model::routing::{DirectoryChange, QueueMeta, Removal, VhostDirectory, VhostIdx};
use crate::ops::event::OpsEvent;
use crate::policy::args::ArgError;
use crate::policy::{capacity, max_length, queue_args, slow_consumer, stream_args};
use crate::protocol::{FieldTable, FieldValue, ShortStr};
use crate::queue::dispatch_args;
use crate::session::error::{ChannelError, ObjectKind};

use super::{auto_deletions, check_exclusive, not_found, vhost_dir};
use crate::shard::inbox::{ControlOk, ControlRequest};
use crate::shard::{placement, Shard, State};
/// Validates a request and computes the changes it makes.
pub(super) fn plan(st: &mut State, shard: &Shard, req: ControlRequest) -> Planned {
    match req {
        ControlRequest::DeclareExchange { vhost, def } => {
            Planner { st, shard, vhost }.declare_exchange(def)
        }
        ControlRequest::DeleteExchange {
            vhost,
            name,
            if_unused,
        } => Planner { st, shard, vhost }.delete_exchange(name, if_unused),
        ControlRequest::DeclareQueue {
            vhost,
            name,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            requester,
        } => Planner { st, shard, vhost }.declare_queue(
            name,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            requester,
        ),
        ControlRequest::Bind {
            vhost,
            exchange,
            queue,
            routing_key,
            arguments,
            requester,
            unbind,
        } => Planner { st, shard, vhost }.bind_queue(
            exchange,
            queue,
            routing_key,
            arguments,
            requester,
            unbind,
        ),
        ControlRequest::BindExchange {
            vhost,
            source,
            destination,
            routing_key,
            arguments,
            unbind,
        } => Planner { st, shard, vhost }.bind_exchange(
            source,
            destination,
            routing_key,
            arguments,
            unbind,
        ),
        ControlRequest::DeleteQueue { .. }
        | ControlRequest::EmptyVhost { .. }
        | ControlRequest::DeleteOwnQueues { .. } => Err(ChannelError::Internal(
            "queue deletions are planned by delete_queue, empty_vhost and own_deletes".into(),
        )),
    }
}

/// What planning a request yields: the changes to apply everywhere and the answer.
type Planned = Result<(Vec<DirectoryChange>, ControlOk), ChannelError>;

/// Plans one request on the coordinator, in one borrow of its state.
struct Planner<'a> {
    st: &'a mut State,
    shard: &'a Shard,
    vhost: VhostIdx,
}

impl Planner<'_> {
    /// `exchange.declare`: an existing exchange is checked for equivalence, a new one may
    /// not take the reserved `amq.` prefix.
    fn declare_exchange(self, def: ExchangeDef) -> Planned {
        let vhost = self.vhost;
        let dir = vhost_dir(self.st, vhost)?;
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
            if cur.kind == ExchangeKind::FederationUpstream {
                upstream::check_equivalent(&cur.arguments, &def.arguments)
                    .map_err(|e| upstream_error(&def, &dir.name, e))?;
            }
            return Ok((Vec::new(), ControlOk::ExchangeDeclared));
        }
        if def.name.as_bytes().starts_with(b"amq.") {
            return Err(ChannelError::ReservedPrefix {
                kind: ObjectKind::Exchange,
                name: def.name.to_string(),
            });
        }
        if def.kind == ExchangeKind::FederationUpstream {
            upstream::validate(&def.arguments).map_err(|e| upstream_error(&def, &dir.name, e))?;
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

    /// `exchange.delete`, with the auto-delete exchanges it leaves without bindings.
    fn delete_exchange(self, name: ShortStr, if_unused: bool) -> Planned {
        let vhost = self.vhost;
        let dir = vhost_dir(self.st, vhost)?;
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

    /// `queue.declare`: an existing queue is checked for equivalence only, a new one's
    /// arguments are validated and it gets its id and home shard.
    fn declare_queue(
        self,
        name: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnOwner>,
        auto_delete: bool,
        arguments: FieldTable,
        requester: ConnOwner,
    ) -> Planned {
        let vhost = self.vhost;
        let next_id = self.st.common.next_queue_id;
        let dir = vhost_dir(self.st, vhost)?;
        // A new queue's arguments are validated, then a stream's properties, whether it
        // exists or not (rabbit_amqqueue:declare checks the arguments and runs the
        // queue type's declare before it looks at an existing queue); an existing
        // queue is then checked for equivalence (rabbit_channel's order).
        let existing_stream = dir
            .queue(&name)
            .is_some_and(|m| stream_args::is_stream(&m.arguments));
        if dir.queue(&name).is_none() {
            validate_queue_args(&name, &dir.name, &arguments)?;
        }
        if existing_stream || stream_args::is_stream(&arguments) {
            stream_args::check_properties(
                durable,
                exclusive_owner.is_some(),
                auto_delete,
                &arguments,
            )
            .map_err(|refusal| ChannelError::Stream {
                refusal,
                queue: name.to_string(),
                vhost: dir.name.clone(),
            })?;
        }
        if let Some(meta) = dir.queue(&name) {
            check_exclusive(meta, Some(requester), &dir.name)?;
            if existing_stream {
                return stream_equivalent(meta, &name, &dir.name, &arguments);
            }
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
        // The limits in force (changed at run time by the admin thread or SIGHUP).
        let live = self.shard.live();
        let (limits, now) = (&live.limits.resources, self.shard.clock.now());
        crate::limits::objects::new_queue(limits, &self.shard.limits, dir, &name, now)?;
        let home = placement::home_shard(&dir.name, name.as_bytes(), self.shard.shards);
        let queue = QueueRef {
            id: QueueId(next_id),
            home,
        };
        self.st.common.next_queue_id += 1;
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

    /// `queue.bind` / `queue.unbind`; an unbind may leave an auto-delete exchange to
    /// delete.
    fn bind_queue(
        self,
        exchange: ShortStr,
        queue: ShortStr,
        routing_key: ShortStr,
        arguments: FieldTable,
        requester: ConnOwner,
        unbind: bool,
    ) -> Planned {
        let vhost = self.vhost;
        let dir = vhost_dir(self.st, vhost)?;
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
            // The limits in force (changed at run time by the admin thread or SIGHUP).
            let live = self.shard.live();
            let (limits, now) = (&live.limits.resources, self.shard.clock.now());
            let existing = || ex.has_binding(&binding);
            let limiter = &self.shard.limits;
            crate::limits::objects::new_binding(limits, limiter, dir, &exchange, existing, now)?;
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

    /// `exchange.bind` / `exchange.unbind`, within the binding limits.
    fn bind_exchange(
        self,
        source: ShortStr,
        destination: ShortStr,
        routing_key: ShortStr,
        arguments: FieldTable,
        unbind: bool,
    ) -> Planned {
        let vhost = self.vhost;
        let dir = vhost_dir(self.st, vhost)?;
        if !unbind {
            // The limits in force (changed at run time by the admin thread or SIGHUP).
            let live = self.shard.live();
            let (limits, now) = (&live.limits.resources, self.shard.clock.now());
            let binding = (&destination, &routing_key, &arguments);
            let limiter = &self.shard.limits;
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
}

/// An `x-federation-upstream` declaration's refusal (RabbitMQ's `validate` and
/// `assert_args_equivalence` of that type).
fn upstream_error(def: &ExchangeDef, vhost: &str, error: UpstreamArgError) -> ChannelError {
    ChannelError::UpstreamArgument {
        exchange: def.name.to_string(),
        vhost: vhost.to_owned(),
        error: Box::new(error),
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
    if stream_args::is_stream(args) {
        // sluice's overload arguments are for classic queues; RabbitMQ ignores what it
        // does not know, and so does a stream.
        return Ok(());
    }
    max_length::MaxLength::from_arguments(args).map_err(arg_error)?;
    capacity::CapacitySettings::from_arguments(args).map_err(arg_error)?;
    slow_consumer::SlowConsumerSettings::from_arguments(args).map_err(arg_error)?;
    crate::policy::args::boolean(args, crate::model::dead_letter::arg::SLOW_CONSUMER)
        .map_err(arg_error)?;
    Ok(())
}

/// The arguments a stream compares on a redeclare (`rabbit_stream_queue`'s
/// `queue_arguments`).
const STREAM_ARGS: [&str; 7] = [
    stream_args::arg::MAX_LENGTH_BYTES,
    stream_args::arg::QUEUE_TYPE,
    stream_args::arg::MAX_AGE,
    stream_args::arg::MAX_SEGMENT_SIZE,
    stream_args::arg::FILTER_SIZE,
    stream_args::arg::INITIAL_CLUSTER_SIZE,
    stream_args::arg::LEADER_LOCATOR,
];

/// A redeclared stream: its own arguments must match (by value).
fn stream_equivalent(
    meta: &QueueMeta,
    name: &ShortStr,
    vhost: &str,
    arguments: &FieldTable,
) -> Planned {
    for key in STREAM_ARGS {
        let (r, c) = (arguments.get(key), meta.arguments.get(key));
        if !same_arg(r, c) {
            return Err(inequivalent(
                ObjectKind::Queue,
                name,
                vhost,
                key,
                arg_text(r),
                arg_text(c),
            ));
        }
    }
    Ok((Vec::new(), ControlOk::QueueDeclared { queue: meta.queue }))
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

fn key_static(key: &str) -> &'static str {
    RABBIT_ARGS
        .iter()
        .chain(POLICY_ARGS.iter())
        .chain(DISPATCH_ARGS.iter())
        .find(|k| **k == key)
        .copied()
        .unwrap_or("arguments")
}
