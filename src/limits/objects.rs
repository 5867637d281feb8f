//! Owns: the object limits the coordinator checks while it plans a control-plane
//! change — queues per virtual host (`[vhost."V"] max_queues`) and bindings per
//! exchange (`limits.bindings_per_exchange`, to queues and exchanges alike) — and the
//! consumer limit a channel checks on `basic.consume`. Each is exact: the coordinator
//! (shard 0) plans every declaration and binding one after another on its own replica
//! of the directory, and a channel's consumers are its own.
//!
//! Does not: change the directory, or close channels (the caller turns the refusal into
//! the reply).

use std::time::Instant;

use crate::model::exchange::ExchangeBinding;
use crate::model::routing::VhostDirectory;
use crate::protocol::ShortStr;
use crate::session::error::ChannelError;
use crate::session::limit::LimitRefusal;

use super::ShardLimits;
use crate::config::limits::ResourceLimits;

/// A new queue `name` in `dir`: refused when the vhost holds `max_queues` queues
/// (QUE-1010). A redeclaration of an existing queue never reaches this.
pub fn new_queue(
    limits: &ResourceLimits,
    shard: &ShardLimits,
    dir: &VhostDirectory,
    name: &ShortStr,
    now: Instant,
) -> Result<(), ChannelError> {
    let Some(max) = limits.vhost(&dir.name).max_queues else {
        return Ok(());
    };
    if dir.queue_count() < max as usize {
        return Ok(());
    }
    let refusal = LimitRefusal::Queues {
        queue: name.to_string(),
        vhost: dir.name.clone(),
        limit: max,
    };
    shard.object_refused(&refusal, now);
    Err(ChannelError::Limit(refusal))
}

/// A binding from `exchange` that is not there yet (`existing` false): refused when
/// the exchange already has `bindings_per_exchange` bindings (EXH-1010).
pub fn new_binding(
    limits: &ResourceLimits,
    shard: &ShardLimits,
    dir: &VhostDirectory,
    exchange: &ShortStr,
    existing: impl FnOnce() -> bool,
    now: Instant,
) -> Result<(), ChannelError> {
    let max = limits.bindings_per_exchange;
    if max == 0 {
        return Ok(());
    }
    let Some(ex) = dir.exchange(exchange) else {
        return Ok(());
    };
    if ex.binding_count() < max as usize || existing() {
        return Ok(());
    }
    let refusal = LimitRefusal::BindingsPerExchange {
        exchange: exchange.to_string(),
        vhost: dir.name.clone(),
        limit: max,
    };
    shard.object_refused(&refusal, now);
    Err(ChannelError::Limit(refusal))
}

/// [`new_binding`] for an exchange-to-exchange binding.
pub fn new_exchange_binding(
    limits: &ResourceLimits,
    shard: &ShardLimits,
    dir: &VhostDirectory,
    source: &ShortStr,
    binding: (&ShortStr, &ShortStr, &crate::protocol::FieldTable),
    now: Instant,
) -> Result<(), ChannelError> {
    let existing = || {
        let (destination, routing_key, arguments) = binding;
        dir.has_exchange_binding(
            source,
            &ExchangeBinding {
                destination: destination.clone(),
                routing_key: routing_key.clone(),
                arguments: arguments.clone(),
            },
        )
    };
    new_binding(limits, shard, dir, source, existing, now)
}

/// `basic.consume` on a channel holding `consumers` consumers: refused (530, RabbitMQ's
/// `consumer_max_per_channel`) at `consumers_per_channel`.
pub fn new_consumer(limits: &ResourceLimits, consumers: usize) -> Result<(), LimitRefusal> {
    let max = limits.consumers_per_channel;
    if max == 0 || consumers < max as usize {
        return Ok(());
    }
    Err(LimitRefusal::ConsumersPerChannel { limit: max })
}
