//! Owns: the small identifiers that cross module and shard boundaries — queue ids, queue
//! references (id plus home shard), connection ids, consumer targets — and a hasher for
//! maps keyed by them.
//!
//! Does not: allocate ids (the coordinator and each shard's slab do) or look anything up.

use std::hash::{BuildHasherDefault, Hasher};

/// Index of a shard, `0..shards`.
pub type ShardId = u16;

/// Broker-wide unique id of a queue, allocated by the control-plane coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueId(pub u64);

/// Where a queue lives: its id and its home shard. This is what routing produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueRef {
    pub id: QueueId,
    pub home: ShardId,
}

/// A connection on one shard: its slab slot plus a generation, so that a message sent to a
/// connection that has since closed (and whose slot was reused) is recognised as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub slot: u32,
    pub generation: u32,
}

/// Globally unique identity of a connection: its shard and its id there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnOwner {
    pub shard: ShardId,
    pub conn: ConnId,
}

impl ConnOwner {
    /// The management API as the requester of a declare or bind: no connection, so
    /// never the owner of an exclusive queue (another connection's exclusive queue is
    /// 405 RESOURCE_LOCKED to it, as to any connection). No connection slab reaches this
    /// slot.
    pub const MANAGEMENT: ConnOwner = ConnOwner {
        shard: ShardId::MAX,
        conn: ConnId {
            slot: u32::MAX,
            generation: u32::MAX,
        },
    };
}

/// Where a queue sends a delivery: the consumer's shard, connection, channel and the
/// channel-local consumer number (which maps to the consumer tag there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConsumerTarget {
    pub shard: ShardId,
    pub conn: ConnId,
    pub channel: u16,
    pub consumer: u32,
}

/// One channel of one connection, anywhere in the broker. `epoch` tells a channel apart
/// from a later one that reuses its number on the same connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelRef {
    pub shard: ShardId,
    pub conn: ConnId,
    pub channel: u16,
    pub epoch: u32,
}

impl ChannelRef {
    /// The broker itself as the publisher of a dead-lettered message: no channel, so no
    /// confirm and never flow-stopped.
    pub const fn broker(shard: ShardId) -> ChannelRef {
        ChannelRef {
            shard,
            conn: ConnId {
                slot: u32::MAX,
                generation: u32::MAX,
            },
            channel: 0,
            epoch: 0,
        }
    }

    /// Whether this is [`ChannelRef::broker`].
    pub fn is_broker(&self) -> bool {
        self.channel == 0 && self.conn.slot == u32::MAX && self.conn.generation == u32::MAX
    }
}

/// A `Hasher` for keys that are already well-distributed integers (sequence numbers, ids).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // Multiplicative mix so that sequential ids spread over hashbrown's control bytes.
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b) ^ (self.0 >> 56);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn write_u32(&mut self, n: u32) {
        self.0 ^= u64::from(n);
    }

    fn write_u16(&mut self, n: u16) {
        self.0 ^= u64::from(n);
    }
}

/// `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHasher>>;
