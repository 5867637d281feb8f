//! The persistent store (issue 8), end to end: a child sluice on 127.0.0.1:0 with
//! `--data-dir` on a directory the test owns, stopped (SIGTERM) or killed (SIGKILL) and
//! started again on the same directory inside the test, through amqprs and raw sockets.
//! The behaviour asserted is the one README.md ("Persistence") and ARCHITECTURE.md
//! describe. Every test runs with
//! `--shards 2` except where the shard count is what changes.
//!
//! Sections (one file each under `tests/store/`):
//!
//! - `restart`: durable exchanges, queues and bindings and persistent messages on durable
//!   queues survive a restart, with bodies, properties, exchange and routing key, in
//!   order; non-durable and exclusive ones, transient messages and messages on
//!   non-durable queues do not; delivered-but-unacked messages come back redelivered,
//!   the others not; a durable subscription on amq.topic keeps its binding and every
//!   persistent message published while its subscriber was away;
//! - `crash`: kill -9 in the middle of confirmed publishing to queues on both shards:
//!   every confirmed message is there, in order; acked messages do not come back after
//!   kill -9 (the contract's deterministic ack procedure); tx.commit-ok means durable;
//! - `torn`: a truncated or bit-flipped last record of the newest segment is cut off
//!   (MST-1010 naming the file and offset), everything before it is kept, and the cut is
//!   real (later restarts keep everything written after it);
//! - `resync`: a flipped byte in the middle of the newest segment, or of the oldest of
//!   several, costs only that message (MST-1010 with the file, the damaged record's
//!   bytes and offset); every later message is kept and the file keeps its length;
//! - `disk`: the store quota blocks publishers (channel.flow, connection.blocked
//!   "store overfull", MST-1008) with a bounded overshoot and releases them (MST-1009)
//!   once consumers ack; segment GC brings the files back to about one segment per shard;
//! - `compaction`: an old message nobody consumes is copied forward, so it does not keep
//!   the segments after it; recycled segment files bring nothing of their past back;
//! - `eviction`: under memory pressure bodies leave memory and come back, in order, for
//!   consumers and `basic.get`;
//! - `shards`: restarting with `--shards 1` after `--shards 2` and back, and 1 → 2: the
//!   queues re-home (MST-1007 with the exact moved count) and keep their messages;
//! - `lines`: the recovery lines (MST-1004/1005/1006), the shutdown line MST-1003, and
//!   the files the contract names.

#[macro_use]
#[allow(unused_macros)]
mod common;

#[path = "store/support.rs"]
mod support;

/// `mod $name { #[tokio::test] async fn run() }` around `async fn $name()`, bounded by
/// [`support::BOUND`].
macro_rules! store_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn run() {
                    $crate::common::bounded_for(
                        $crate::support::BOUND,
                        super::$name(),
                    )
                    .await
                }
            }
        )*
    };
}

#[path = "store/compaction.rs"]
mod compaction;
#[path = "store/crash.rs"]
mod crash;
#[path = "store/disk.rs"]
mod disk;
#[path = "store/eviction.rs"]
mod eviction;
#[path = "store/lines.rs"]
mod lines;
#[path = "store/restart.rs"]
mod restart;
#[path = "store/resync.rs"]
mod resync;
#[path = "store/shards.rs"]
mod shards;
#[path = "store/torn.rs"]
mod torn;
