//! Owns: operational events ([`event::OpsEvent`]) and how they reach the log — their
//! structured parts ([`fields`]), the output format ([`log`]) — and the systemd readiness
//! notifications ([`notify`]).
//!
//! Does not: decide when an event happens (the shard does) or keep cross-shard state.

pub mod admin_event;
pub mod config_event;
pub mod definitions_event;
pub mod escape;
pub mod event;
pub mod federation_event;
pub mod fields;
pub mod limit_event;
pub mod log;
pub mod notify;
pub mod policy_event;
pub mod session_event;
pub mod store_event;
pub mod stream_event;
