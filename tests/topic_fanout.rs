//! Fan-out through amq.topic, amq.fanout and direct exchanges with many subscribers spread
//! over many connections (and so over both shards when there are two): every subscriber
//! gets exactly its messages, in publish order, and large bodies arrive intact.
//!
//! Sections (one file each under `tests/topic_fanout/`): `routing` (topic, fanout, direct
//! and headers exchanges, and bindings in force on every shard), `fan_out` (many
//! publishers, wide and large fan-out, per-delivery fields, shared messages, competing
//! consumers), `backpressure` (a stuck or backlogged subscriber); `support` holds the
//! subscriber set-up they share.

#[macro_use]
mod common;

#[path = "topic_fanout/support.rs"]
mod support;

#[path = "topic_fanout/backpressure.rs"]
mod backpressure;
#[path = "topic_fanout/fan_out.rs"]
mod fan_out;
#[path = "topic_fanout/routing.rs"]
mod routing;
