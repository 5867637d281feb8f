//! Exchange federation (issue 20) across several `sluice` processes on loopback, each
//! started by the test with its own ports, data directory and `node_name`, `--shards 2`,
//! and with RabbitMQ where `rabbitmq-server` is installed.
//!
//! What a user relies on, one file each under `federation/`:
//!
//! - `tree`: root → 2 relays → subscribers: every subscriber gets every message once and
//!   in order per publisher; root → mid → leaf with `max_hops` 1 (the leaf gets nothing,
//!   and its interest does not reach the root) and 2 (it gets everything).
//! - `mutual`: two brokers federating each other's exchange: no loop, each message once
//!   per subscriber on each side, none bounced back.
//! - `bindings`: a relay's bindings reach the upstream and only wanted messages cross;
//!   coalescing of two local queues with one key; unbinding the last removes the upstream
//!   binding; 10,000 distinct bindings propagate (the time is printed, not asserted).
//! - `kill`: `kill -9` of a relay and of the root mid-stream with on-confirm, persistent
//!   messages and durable queues: nothing the root confirmed is missing at the relay's
//!   subscriber (duplicates counted and printed); the link is back within
//!   reconnect_delay plus a margin.
//! - `backpressure`: a relay with a 64 MiB memory watermark and a stuck subscriber: the
//!   root's RSS stays bounded and its link queue is the ring its queue_arguments ask for.
//! - `rabbitmq`: a sluice relay federating `amq.topic` from a private RabbitMQ node, and
//!   that node federating an exchange from sluice (skipped, with a message, where
//!   `rabbitmq-server` is not installed).
//! - `netns`: the two-level tree with each broker in its own network namespace over veth
//!   pairs, with `tc netem` delay where the kernel has it (skipped, with a message,
//!   unless root and `ip netns` work).
//!
//! The harness is `federation/cluster.rs` (nodes, configs, waits) with
//! `federation/rabbit.rs` (a private RabbitMQ node) and `federation/namespaces.rs`.
//! Every test runs under a time bound; waits poll conditions against deadlines; nothing
//! asserts speed.

#[macro_use]
mod common;

/// Generates a `#[tokio::test]` per `name => limit` around `async fn name()`, bounded by
/// `limit` seconds.
macro_rules! fed_tests {
    ($($name:ident => $secs:expr),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::common::bounded_for(
                    std::time::Duration::from_secs($secs),
                    super::$name(),
                )
                .await
            }
        )*
    };
}

#[path = "federation/cluster.rs"]
mod cluster;
#[path = "federation/namespaces.rs"]
mod namespaces;
#[path = "federation/rabbit.rs"]
mod rabbit;

#[path = "federation/backpressure.rs"]
mod backpressure;
#[path = "federation/bindings.rs"]
mod bindings;
#[path = "federation/kill.rs"]
mod kill;
#[path = "federation/mutual.rs"]
mod mutual;
#[path = "federation/netns.rs"]
mod netns;
#[path = "federation/rabbitmq.rs"]
mod rabbitmq;
#[path = "federation/tree.rs"]
mod tree;
