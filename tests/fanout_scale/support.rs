//! Helpers shared by the fan-out-at-scale sections: the open-files limit, numbered
//! bodies, sluice's own client, queue placement on shards (re-derived here so the suite
//! does not share a bug with src/shard/placement.rs), the reference topic matcher, and
//! "this queue is gone" as another connection sees it, and subscribers (sluice client and
//! amqprs) on a server-named queue bound to amq.topic.

use std::time::Duration;

use amqprs::channel::{BasicQosArguments, QueueBindArguments};
use bytes::Bytes;
use sluice::client::{
    Channel, ClientError, Connection, ConnectionOptions, ConsumeOptions, Consumer,
    QueueDeclareOptions,
};
use tokio::sync::mpsc;

use crate::common::raw::RawConn;
use crate::common::{Broker, Chan, Conn};

/// Size of every numbered body (the workloads use 64-byte messages).
pub const BODY: usize = 64;

/// Raises this process's soft RLIMIT_NOFILE to the hard limit; returns (soft, hard).
/// Panics if the hard limit cannot hold `need` descriptors.
pub fn raise_nofile(need: u64) -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    unsafe {
        assert_eq!(
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim),
            0,
            "getrlimit"
        );
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
    let (soft, hard) = (lim.rlim_cur as u64, lim.rlim_max as u64);
    assert!(
        soft >= need,
        "this test needs {need} descriptors; RLIMIT_NOFILE is {soft} (hard {hard})"
    );
    (soft, hard)
}

/// A [`BODY`]-byte body starting with the zero-padded sequence number.
pub fn body(seq: u32) -> Bytes {
    let mut b = format!("{seq:08}:").into_bytes();
    b.resize(BODY, b'.');
    Bytes::from(b)
}

/// The body that ends a numbered sequence.
pub const END: &[u8] = b"end-of-sequence";

/// The sequence number a [`body`] starts with; `None` for anything else.
pub fn seq_of(body: &[u8]) -> Option<u32> {
    std::str::from_utf8(body.get(..8)?).ok()?.parse().ok()
}

/// A short readable form of a body for failure messages.
pub fn show(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(24)]).into_owned()
}

/// Checks that `got` is exactly 1..=n.
pub fn check_sequence(who: &str, got: &[u32], n: u32) -> Result<(), String> {
    if got.len() == n as usize && got.iter().copied().eq(1..=n) {
        return Ok(());
    }
    let first_bad = got
        .iter()
        .enumerate()
        .find(|(i, &s)| s != *i as u32 + 1)
        .map(|(i, s)| format!("position {i} holds {s}"))
        .unwrap_or_else(|| "a prefix".into());
    Err(format!(
        "{who}: got {} messages, expected 1..={n} in order ({first_bad}; first {:?}, last {:?})",
        got.len(),
        &got[..got.len().min(5)],
        &got[got.len().saturating_sub(5)..]
    ))
}

// ---------------------------------------------------------------------------------------
// sluice's own client
// ---------------------------------------------------------------------------------------

pub fn url(broker: &Broker) -> String {
    format!("amqp://guest:guest@{}/", broker.addr())
}

/// Connection options for the many-connection tests: no heartbeats (a busy debug-build
/// test must not lose a connection to a late heartbeat), a small command queue.
pub fn quiet_options() -> ConnectionOptions {
    ConnectionOptions {
        heartbeat: 0,
        command_queue: 256,
        connect_timeout: Duration::from_secs(30),
        ..ConnectionOptions::default()
    }
}

pub async fn connect(broker: &Broker) -> Connection {
    Connection::connect_with(&url(broker), quiet_options())
        .await
        .expect("sluice client connects")
}

pub fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

pub fn exclusive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    }
}

/// The exact text of the 404 a passive declare of a missing queue gets.
pub fn no_queue_text(queue: &str) -> String {
    format!("NOT_FOUND - no queue '{queue}' in vhost '/'")
}

/// Polls passive declares of `queue` from `conn` (a fresh channel each time: the 404
/// closes the channel) until the broker answers 404 NOT_FOUND as a channel close, or
/// `timeout` passes. Returns the close's (code, text), or the last message count seen.
pub async fn wait_queue_gone(
    conn: &Connection,
    queue: &str,
    timeout: Duration,
) -> Result<(u16, String), u32> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let ch = conn.open_channel().await.expect("open channel");
        match ch.queue_declare(queue, passive()).await {
            Err(ClientError::ChannelClosed { code, text, .. }) => return Ok((code, text)),
            Err(e) => panic!("passive declare of {queue}: unexpected {e}"),
            Ok(info) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(info.message_count);
                }
            }
        }
        drop(ch);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Placement: home = fnv1a(vhost, name) mod shards (ARCHITECTURE.md)
// ---------------------------------------------------------------------------------------

pub fn home_shard(name: &str, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in b"/".iter().chain(&[0u8]).chain(name.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % shards as u64) as usize
}

/// A fresh queue name (with `prefix`) whose home is `shard`.
pub fn name_on(prefix: &str, shard: usize, shards: usize) -> String {
    loop {
        let name = crate::common::unique(prefix);
        if home_shard(&name, shards) == shard {
            return name;
        }
    }
}

/// The shard a connection was accepted on: server-named queues are named so that they
/// live on the declaring connection's shard (ARCHITECTURE.md, "Control plane").
pub fn shard_of_queue(server_named: &str, shards: usize) -> usize {
    home_shard(server_named, shards)
}

// ---------------------------------------------------------------------------------------
// Topic patterns
// ---------------------------------------------------------------------------------------

/// Reference matcher for AMQP topic patterns: words split on '.', `*` is exactly one word,
/// `#` is zero or more words.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|skip| go(rest, &k[skip..])),
            Some((&"*", rest)) => !k.is_empty() && go(rest, &k[1..]),
            Some((word, rest)) => k.first() == Some(word) && go(rest, &k[1..]),
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

/// Median of a non-empty list.
pub fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------
// subscribers
// ---------------------------------------------------------------------------------------

/// How a subscriber acknowledges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ack {
    /// no-ack consumer.
    None,
    /// manual ack, prefetch 50, acking every 10th delivery with `multiple`.
    Manual,
}

/// Sets up one sluice-client subscriber: connection, channel, exclusive server-named
/// queue bound to amq.topic with `pattern`, consumer.
pub async fn sluice_subscriber(
    broker: &Broker,
    pattern: &str,
    ack: Ack,
) -> (sluice::client::Connection, Channel, Consumer, String) {
    let conn = connect(broker).await;
    let ch = conn.open_channel().await.expect("open channel");
    let q = ch
        .queue_declare("", exclusive())
        .await
        .expect("declare server-named queue")
        .name
        .to_string();
    ch.queue_bind(&q, "amq.topic", pattern, Default::default())
        .await
        .expect("queue.bind");
    if ack == Ack::Manual {
        ch.basic_qos(50, false).await.expect("basic.qos");
    }
    let consumer = ch
        .basic_consume(
            &q,
            ConsumeOptions {
                no_ack: ack == Ack::None,
                buffer: 512,
                ..ConsumeOptions::default()
            },
        )
        .await
        .expect("basic.consume");
    (conn, ch, consumer, q)
}

/// Sets up one amqprs subscriber, as [`sluice_subscriber`].
pub async fn amqprs_subscriber(
    broker: &Broker,
    pattern: &str,
    ack: Ack,
) -> (
    Conn,
    Chan,
    mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    String,
) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    ch.queue_bind(QueueBindArguments::new(&q, "amq.topic", pattern))
        .await
        .expect("queue.bind");
    let rx = match ack {
        Ack::None => ch.consume_auto(&q).await.1,
        Ack::Manual => {
            ch.basic_qos(BasicQosArguments::new(0, 50, false))
                .await
                .expect("basic.qos");
            ch.consume_manual(&q).await.1
        }
    };
    (conn, ch, rx, q)
}

/// The next delivery of a sluice-client consumer by `deadline`; an error says how many
/// (`so_far`) came before.
pub async fn next_sluice(
    consumer: &mut Consumer,
    deadline: tokio::time::Instant,
    so_far: usize,
) -> Result<sluice::client::Delivery, String> {
    match tokio::time::timeout_at(deadline, consumer.recv()).await {
        Err(_) => Err(format!("timed out after {so_far} messages")),
        Ok(Err(e)) => Err(format!("consumer ended after {so_far} messages: {e}")),
        Ok(Ok(d)) => Ok(d),
    }
}

/// [`next_sluice`] for an amqprs consumer.
pub async fn next_amqprs(
    rx: &mut mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>,
    deadline: tokio::time::Instant,
    so_far: usize,
) -> Result<amqprs::channel::ConsumerMessage, String> {
    match tokio::time::timeout_at(deadline, rx.recv()).await {
        Err(_) => Err(format!("timed out after {so_far} messages")),
        Ok(None) => Err(format!("consumer ended after {so_far} messages")),
        Ok(Some(m)) => Ok(m),
    }
}

/// A raw-socket subscriber: an exclusive server-named queue bound to amq.topic with
/// `key`, and a no-ack consumer on it (channel 1).
pub fn raw_subscriber(broker: &Broker, key: &str) -> RawConn {
    let mut raw = broker.raw();
    raw.channel_open(1);
    let q = raw.queue_declare(1, "", false, true, false);
    raw.queue_bind(1, &q, "amq.topic", key);
    raw.basic_consume(1, &q, true);
    raw
}
