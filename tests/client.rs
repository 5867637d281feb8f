//! The sluice client against a real sluice (every client operation) and against a
//! scripted fake server (the broker-initiated paths sluice does not trigger on demand:
//! 506 `Consuming too slow.`, `channel.flow`, `connection.blocked`, connection.close).
//! Bounded in time; no speed assertions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice::client::{
    ClientError, Connection, ConnectionOptions, ConsumeOptions, ExchangeDeclareOptions,
    FlowOptions, QueueDeclareOptions, NOTIFY_PERIOD_ENV, NO_PROPERTIES, WAIT_FAILURE_ENV,
};
use sluice::config::Config;
use sluice::protocol::frame::{
    encode_content, encode_method, split_frame, FrameKind, PROTOCOL_HEADER,
};
use sluice::protocol::method::*;
use sluice::protocol::{BasicProperties, FieldTable, LongStr, Method, ShortStr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

fn broker() -> (sluice::server::Broker, String) {
    // Each in-process broker gets its own data dir (a data dir takes one broker).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let data_dir =
        std::env::temp_dir().join(format!("sluice-client-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let config = Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        shards: 2,
        data_dir,
        // In-process brokers run side by side: no management listener on a fixed port.
        http: sluice::config::HttpConfig {
            listen: None,
            ..Default::default()
        },
        ..Config::default()
    };
    let broker = sluice::server::start(config).expect("broker starts");
    let url = format!("amqp://guest:guest@{}/", broker.addresses[0]);
    (broker, url)
}

fn body(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

// Sections, one file each under `tests/client/`.
#[path = "client/flow.rs"]
mod flow;
#[path = "client/operations.rs"]
mod operations;
#[path = "client/scripted.rs"]
mod scripted;
