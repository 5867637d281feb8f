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
    let config = Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        shards: 2,
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
