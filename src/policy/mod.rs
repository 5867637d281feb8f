//! Overload policy inputs and decisions.
//!
//! Owns: the pure calculations behind slow-consumer and flow decisions
//! (today the consumption-rate estimator). Does not: read the clock (callers
//! pass `now`), perform a verdict (the shard does), or touch sockets and
//! other shards.

pub mod rate;
