//! The per-shard routing model.
//!
//! Owns: the pure data structures that decide where a published message
//! goes (exchanges, the topic trie, the routing directory), the shared message
//! itself and what dead-lettering does to its properties, the ids that cross shards, and the per-thread memory ledger that
//! counts message bytes. Does not: perform I/O, read clocks, take locks, or hold
//! queue contents; every value here lives on one shard and is changed only by
//! that shard (a message is shared read-only).

pub mod dead_letter;
pub mod exchange;
pub mod hops;
pub mod ids;
pub mod journal;
pub mod ledger;
pub mod message;
pub mod prefetch;
pub mod routing;
pub mod spare;
pub mod topic_trie;

/// Makes room for one more item in a vector that grows from one slot by doubling (a
/// `Vec` starts with four): most per-subscriber lists hold a single item (issue 23).
pub fn reserve_from_one<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len().max(1));
    }
}

/// Whether a container holding `len` items in room for `capacity` should give its spare
/// room back (after thousands of subscribers left): it is large and mostly empty.
pub fn worth_shrinking(len: usize, capacity: usize) -> bool {
    capacity > 64 && len.saturating_mul(4) < capacity
}
