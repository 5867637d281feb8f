//! The per-shard routing model.
//!
//! Owns: the pure data structures that decide where a published message
//! goes (today the topic trie and its result cache). Does not: perform I/O,
//! read clocks, take locks or atomics, or hold queue contents; every value
//! here lives on one shard and is changed only by that shard.

pub mod exchange;
pub mod ids;
pub mod ledger;
pub mod message;
pub mod routing;
pub mod topic_trie;
