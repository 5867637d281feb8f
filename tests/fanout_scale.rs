//! Heavy topic fan-out at scale (issue 9), end to end against child sluice processes on
//! 127.0.0.1, through sluice's own client, amqprs and raw sockets.
//!
//! Sections (one file each under `tests/fanout_scale/`):
//!
//! - `subscribers`: 2,000 subscriber connections on `--shards 2` (1,600 sluice client,
//!   400 amqprs; 95% no-ack, 5% manual ack), each an exclusive server-named queue bound to
//!   amq.topic: every one receives every confirmed message exactly once, in order; and
//!   subscribers that drop their socket, reset it, or close cleanly mid-stream do not
//!   disturb the others, and their exclusive queues are deleted (passive declare: 404);
//! - `emfile`: a child broker under RLIMIT_NOFILE 64 logs BRK-1011, keeps serving its
//!   connections when accept fails, logs CON-1005 rate-limited, does not spin or exit,
//!   and accepts again once descriptors free up;
//! - `declare_race`: a queue.declare racing mandatory confirmed publishes to that queue
//!   from a connection on the other shard: every publish is returned or in the queue;
//! - `bindings`: 10,000 distinct topic patterns on one exchange route exactly as a
//!   reference matcher says, also after an unbind and a queue deletion;
//! - `bursts`: bursts of thousands of small and 1 KiB messages to a few no-ack
//!   subscribers (sluice client, amqprs) reach each whole and in order, on 1 and 2
//!   shards, with queues dispatched at the write and per turn; a no-ack consumer
//!   cancelled mid-burst loses nothing to the next one;
//! - `idle_memory`: 2,000 idle raw-socket subscribers on `--shards 2` cost the broker at
//!   most 8 KiB of RSS each (issue 23), and a message then reaches every one;
//! - `mass_disconnect`: 2,000 subscribers on `--shards 2` that close together leave no
//!   queue or consumer behind, and the broker's peak RSS while it deletes their queues
//!   rises by less than 90% of what setting them up cost; and a client that takes over
//!   the name of an exclusive auto-delete queue as soon as its owner left keeps its new
//!   queue;
//! - `parked_readers`: idle connections' readers park (`net.reader_park_after_ms`),
//!   parked subscribers get every delivery in order, and a method, a clean close, a
//!   dropped socket and missed heartbeats all work on a parked connection.
//!
//! The heavy sections take [`HEAVY`] so that they do not share the two cores with each
//! other.

#[macro_use]
#[allow(unused_macros)]
mod common;

#[path = "fanout_scale/support.rs"]
mod support;

#[path = "fanout_scale/bindings.rs"]
mod bindings;
#[path = "fanout_scale/bursts.rs"]
mod bursts;
#[path = "fanout_scale/declare_race.rs"]
mod declare_race;
#[path = "fanout_scale/emfile.rs"]
mod emfile;
#[path = "fanout_scale/idle_memory.rs"]
mod idle_memory;
#[path = "fanout_scale/mass_disconnect.rs"]
mod mass_disconnect;
#[path = "fanout_scale/parked_readers.rs"]
mod parked_readers;
#[path = "fanout_scale/subscribers.rs"]
mod subscribers;

/// Held by the sections that load both cores for many seconds.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
