//! Streams (issue 25): `x-queue-type = stream` over AMQP 0-9-1 with RabbitMQ's
//! semantics, end to end against a child sluice on 127.0.0.1:0, through amqprs and raw
//! frames (exact reply codes and texts), on one shard and two.
//!
//! Sections (one file each under `tests/streams/`):
//!
//! - `basics`: offsets from 0, the `x-stream-offset` header on every delivery, any
//!   exchange, readers on the stream's shard and on another.

#[macro_use]
#[allow(unused_macros)]
mod common;

#[path = "streams/support.rs"]
#[allow(dead_code)]
mod support;

#[path = "streams/basics.rs"]
mod basics;
