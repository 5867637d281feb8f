//! Streams (issue 25): `x-queue-type = stream` over AMQP 0-9-1 with RabbitMQ's
//! semantics, end to end against a child sluice on 127.0.0.1:0, through amqprs and raw
//! frames (exact reply codes and texts), on one shard and two.
//!
//! Sections (one file each under `tests/streams/`):
//!
//! - `basics`: offsets from 0, the `x-stream-offset` header on every delivery, any
//!   exchange (delivered with its exchange and routing key), readers on the stream's
//!   shard and on another.
//! - `consume`: RabbitMQ's consumer rules and 406/540 texts (prefetch, no-ack, global
//!   qos, arguments, basic.get, queue.purge); acks return credit, nack and reject
//!   return credit and redeliver nothing.
//! - `declare`: RabbitMQ's declare rules and 406 texts (properties, other types'
//!   arguments, the stream's own values), equivalence on a redeclare.
//! - `filtering`: `x-stream-filter-value`, `x-stream-filter` (string, array),
//!   `x-stream-match-unfiltered`, exact per message, from the cache and from disk.
//! - `memory`: a slow reader holds no more than its credit; the tail cache is bounded.
//! - `observe`: the management API's and /metrics' view of a stream and its readers'
//!   lag; the API's get and purge refused.
//! - `offsets`: `first`, `last`, `next`, numbers (clamped), timestamps, intervals; from
//!   the tail cache and from disk.
//! - `persistence`: restart and kill -9 with readers at different offsets; a torn
//!   tail.
//! - `retention`: by bytes and by age, per segment, oldest first; a reader left behind
//!   warned (STR-1001), moved on (STR-1002); files deleted.
//! - `tracking`: offset tracking for own tags and `x-stream-automatic-offset-tracking`.

#[macro_use]
#[allow(unused_macros)]
mod common;

#[path = "streams/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "streams/basics.rs"]
mod basics;
#[path = "streams/consume.rs"]
mod consume;
#[path = "streams/declare.rs"]
mod declare;
#[path = "streams/filtering.rs"]
mod filtering;
#[path = "streams/memory.rs"]
mod memory;
#[path = "streams/observe.rs"]
mod observe;
#[path = "streams/offsets.rs"]
mod offsets;
#[path = "streams/persistence.rs"]
mod persistence;
#[path = "streams/retention.rs"]
mod retention;
#[path = "streams/tracking.rs"]
mod tracking;
