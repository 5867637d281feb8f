//! Owns: operational events ([`event::OpsEvent`]) and how they reach the log.
//!
//! Does not: decide when an event happens (the shard does) or keep cross-shard state.

pub mod event;
pub mod store_event;
