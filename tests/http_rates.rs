//! The management API's message statistics and list paging against a child broker:
//! `message_stats` counts exact for a queue, an exchange, a channel and the overview
//! (publish, deliver, get, ack, redeliver), with one shard and with the publisher and
//! the consumer on different shards (`counts`); rates sampled every
//! `http.stats_interval_ms` (`rates`); and RabbitMQ's `page`/`page_size`/`name`/
//! `use_regex`, `columns` and `sort`/`sort_reverse` on the lists, plain arrays without
//! them (`paging`).

#[macro_use]
mod common;

#[path = "http_rates/counts.rs"]
mod counts;
#[path = "http_rates/paging.rs"]
mod paging;
#[path = "http_rates/rates.rs"]
mod rates;

use serde_json::Value;

use common::http::{self, Response};
use common::{Broker, Conn};

/// `GET path` as guest, off the async workers.
pub async fn api(port: u16, path: &str) -> Response {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || http::get(port, &path))
        .await
        .expect("HTTP request")
}

/// `GET path` as guest: 200 and its JSON.
pub async fn api_json(port: u16, path: &str) -> Value {
    let r = api(port, path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.json()
}

/// The names of the connections the broker lists, with their home shards.
async fn connections(port: u16) -> Vec<(String, u64)> {
    let list = api_json(port, "/api/connections").await;
    list.as_array()
        .expect("a list")
        .iter()
        .map(|c| {
            let name = c["name"].as_str().expect("name").to_owned();
            (name, c["home_shard"].as_u64().expect("home_shard"))
        })
        .collect()
}

/// Opens a connection whose home shard is `shard` (bounded: 64 tries; the others are
/// closed again), and returns it with its name.
pub async fn connect_on(broker: &Broker, shard: u64) -> (Conn, String) {
    let port = broker.http_port();
    for _ in 0..64 {
        let before = connections(port).await;
        let conn = broker.connect().await;
        let after = connections(port).await;
        let new = after
            .into_iter()
            .find(|(n, _)| !before.iter().any(|(b, _)| b == n));
        match new {
            Some((name, s)) if s == shard => return (conn, name),
            _ => conn.close().await,
        }
    }
    panic!("64 connections and none on shard {shard}");
}

/// Polls `GET path` until `done` holds of its JSON (bounded: 5 s); returns the last.
pub async fn eventually(port: u16, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + common::EVENT_TIMEOUT;
    loop {
        let v = api_json(port, path).await;
        if done(&v) || tokio::time::Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
