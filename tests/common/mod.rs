//! Shared harness for the black-box suites in `tests/`.
//!
//! Owns: starting a real `sluice` process on `127.0.0.1:0` (one per test) and collecting its
//! log lines (`broker`), a hand-written AMQP 0-9-1 wire codec over a blocking socket
//! (`wire`, `raw`: `RawConn`), thin helpers around the amqprs client (`amqprs_client`, with
//! `amqprs_events` forwarding server-initiated methods as [`Event`]s), bystander
//! connections (`bystanders`), a small HTTP client (`http`), and here the time bounds,
//! polling waits and unique names every suite uses.
//!
//! Does not: sleep to synchronise. Every wait polls a condition against a deadline, and
//! every test body runs under [`bounded`].
#![allow(dead_code)]

pub mod amqprs_client;
mod amqprs_events;
pub mod broker;
pub mod bystanders;
pub mod http;
pub mod raw;
pub mod wire;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// The names the suites import from `common` itself; each suite uses a different part.
#[allow(unused_imports)]
pub use self::{
    amqprs_client::{
        assert_no_delivery, close_amqprs, next_delivery, next_event, Chan, Conn, Delivery, Event,
    },
    broker::{Broker, TestDir},
    bystanders::Bystanders,
    raw::RawConn,
};

/// Upper bound for one test body.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a single expected event may take to arrive.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Generates `mod $name { shards_1, shards_2 }` wrappers around `async fn $name(shards)`,
/// each one bounded by [`TEST_TIMEOUT`].
#[macro_export]
macro_rules! shard_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_1() {
                    $crate::common::bounded(super::$name(1)).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_2() {
                    $crate::common::bounded(super::$name(2)).await
                }
            }
        )*
    };
}

/// `n` with a comma every three digits, as the log lines print numbers.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Runs `fut` and fails the test if it takes longer than [`TEST_TIMEOUT`].
pub async fn bounded<F: Future<Output = ()>>(fut: F) {
    bounded_for(TEST_TIMEOUT, fut).await
}

/// Runs `fut` and fails the test if it takes longer than `limit`.
pub async fn bounded_for<F: Future<Output = ()>>(limit: Duration, fut: F) {
    if tokio::time::timeout(limit, fut).await.is_err() {
        panic!("test exceeded its time bound of {limit:?}");
    }
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Async version of [`wait_until`]: polls an async condition every 20 ms.
pub async fn eventually<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A name unique across this test process and across concurrently running test binaries.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
