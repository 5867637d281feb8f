//! Slow-consumer policies (seed 000, issue 6) against a child `sluice` over TCP, with the
//! amqprs client and sluice's own client, on one shard and on two.
//!
//! What a user relies on, section by section (one file each under `slow_consumer/`):
//!
//! - `thresholds`: each of count, depth, age and rate alone deletes a lagging
//!   subscription — 506 `Consuming too slow.` to its channel, the connection still usable,
//!   the queue gone, the SUB-1003 / CHN-1003 / QUE-1002 lines — while a fast subscriber
//!   on the same topic gets every message, in order; a reader that never acks is caught,
//!   and so is a no-ack reader that stopped reading its socket.
//! - `memory`: the messages of a deleted subscription are released (BRK-1010 back to 0).
//! - `exemptions`: durable subscriptions and queues holding persistent messages.
//! - `cycle`: the ring keeps exactly the newest messages (by count, depth or age) and
//!   never drops an unacked one.
//! - `rate`: a new or idle subscriber is spared; under `cycle` a breach is only logged
//!   (the cut-off itself is in `thresholds`).
//! - `getters`: a channel draining a queue with `basic.get` is closed too; sluice's
//!   client reports the close on an operation that crosses it on the wire.
//! - `placement`: the subscriber's channel on another shard than its queue.
//! - `rabbit_args`: `x-max-length`, `x-max-length-bytes`, `x-overflow`.
//! - `invalid_args`: 406 naming the argument.
//! - `warning`: SUB-1004 before SUB-1003 for a subscriber falling steadily behind.
//! - `config_levels`: vhost default < `[[topic]]` entry < declare arguments; topic
//!   queues only.
//!
//! Every test runs under a time bound; waits poll conditions (sleeps only pace deliberately
//! slow consumers and publishers, or let a rate window pass before asserting that nothing
//! happened); nothing asserts speed.

#[macro_use]
mod common;

/// Generates `mod $name { shards_1, shards_2 }` around `async fn $name(shards)`, each
/// bounded by [`harness::LIMIT`].
macro_rules! slow_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_1() {
                    $crate::common::bounded_for($crate::harness::LIMIT, super::$name(1)).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_2() {
                    $crate::common::bounded_for($crate::harness::LIMIT, super::$name(2)).await
                }
            }
        )*
    };
}

#[path = "slow_consumer/amqp.rs"]
mod amqp;
#[path = "slow_consumer/harness.rs"]
mod harness;
#[path = "slow_consumer/own.rs"]
mod own;

#[path = "slow_consumer/config_levels.rs"]
mod config_levels;
#[path = "slow_consumer/cycle.rs"]
mod cycle;
#[path = "slow_consumer/exemptions.rs"]
mod exemptions;
#[path = "slow_consumer/getters.rs"]
mod getters;
#[path = "slow_consumer/invalid_args.rs"]
mod invalid_args;
#[path = "slow_consumer/memory.rs"]
mod memory;
#[path = "slow_consumer/placement.rs"]
mod placement;
#[path = "slow_consumer/rabbit_args.rs"]
mod rabbit_args;
#[path = "slow_consumer/rate.rs"]
mod rate;
#[path = "slow_consumer/thresholds.rs"]
mod thresholds;
#[path = "slow_consumer/warning.rs"]
mod warning;
