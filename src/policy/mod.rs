//! Overload policy inputs and decisions.
//!
//! Owns: the pure calculations behind the broker's overload policies — slow consumers
//! (seed 000: thresholds, exemptions, prediction), queue capacity flow control (seed
//! 001: overfull/underfull hysteresis), RabbitMQ's length limits, the broker-wide memory
//! watermark, consumption-rate estimation — and reading their settings from declare
//! arguments, after RabbitMQ's own checks of a classic queue's arguments (`queue_args`).
//!
//! Does not: read the clock (callers pass `now`), perform a verdict (the shard does), or
//! touch sockets and other shards.

pub mod args;
pub mod capacity;
pub mod max_length;
pub mod queue_args;
pub mod rate;
pub mod set;
pub mod slow_consumer;
pub mod stream_args;
pub mod watermark;
