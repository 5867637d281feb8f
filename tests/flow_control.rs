//! Producer flow control and the memory watermark (seed 001, issue 7), end to end against
//! a child sluice on 127.0.0.1:0, through amqprs, raw sockets and sluice's own client.
//! The behaviour asserted is /work/contract-policies.md ("Producer flow control").
//!
//! Sections (one file each under `tests/flow_control/`):
//!
//! - `capacity`: capacity and resume capacity set by declare arguments, a `[[queue]]`
//!   entry and the vhost default, each shown by the channel.flow off/on sequence and the
//!   exact QUE-1003 / CHN-1005 / QUE-1004 / CHN-1006 lines; unacked deliveries count
//!   toward the size; bad arguments (406 naming the argument) and bad configuration
//!   (start-up error naming the key);
//! - `channels`: a blocked channel leaves the connection's other channels, deliveries and
//!   acks alone; nothing lost or duplicated across block/unblock cycles with confirms;
//!   a channel stopped by two queues is released only when both are underfull;
//! - `enforcement`: a client that ignores channel.flow is held within the documented
//!   margin and not disconnected for heartbeats; one that also consumes with manual ack
//!   on the same socket gets 506 after the enforcement timeout instead of a deadlock;
//! - `memory`: the memory watermark blocks and releases every publisher, including one
//!   that connects while the alarm is on;
//! - `client`: sluice's client waits, warns and fails under real flow control;
//! - `shards`: publisher and queue on different shards; reject-publish nacks from the
//!   queue's home shard.

#[macro_use]
mod common;

#[path = "flow_control/support.rs"]
mod support;

#[path = "flow_control/capacity.rs"]
mod capacity;
#[path = "flow_control/channels.rs"]
mod channels;
#[path = "flow_control/client.rs"]
mod client;
#[path = "flow_control/enforcement.rs"]
mod enforcement;
#[path = "flow_control/memory.rs"]
mod memory;
#[path = "flow_control/shards.rs"]
mod shards;
