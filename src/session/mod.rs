//! Owns: per-connection protocol state — the connection (handshake, limits,
//! capabilities, outbound buffer, its phase), its channels (publish assembly in
//! `content`, delivery tags, unacked, qos, transactions), publisher confirms
//! (`confirm`), a publisher's flow-control state (`publisher`), consumers and their
//! credit rule (`consumer`; a channel's set of them by id and tag: `channel_consumers`),
//! direct reply-to's addresses (`reply_to`) and a channel's reply consumer
//! with the replies it holds while paused (`reply_consumer`) — and the typed errors that
//! close a channel or a connection.
//!
//! Does not: do I/O or reach another shard; the shard's handler drives this state.

pub mod channel;
pub mod channel_consumers;
pub mod channel_table;
pub mod confirm;
pub mod connection;
pub mod consumer;
pub mod content;
pub mod error;
pub mod limit;
pub mod outbound;
pub mod properties_cache;
pub mod publisher;
pub mod reply_consumer;
pub mod reply_to;
pub mod signal;
