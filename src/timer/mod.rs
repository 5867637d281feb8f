//! Per-shard time: a coarse clock and a hashed timing wheel.
//!
//! Owns: the shard's notion of "now" (read once per event-loop turn) and
//! the set of armed deadlines, yielding opaque keys when they expire. Does
//! not: run callbacks, spawn threads, keep global state, or know what a key
//! means (heartbeat, consumer timeout, policy tick: that is the shard's
//! business).

pub mod clock;
pub mod wheel;
