//! Helpers shared by the stream sections: declaring a stream, publishing with confirms,
//! consuming with `x-stream-offset` (and the other consumer arguments), reading each
//! delivery's `x-stream-offset` header, and a data directory kept across restarts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicQosArguments, ConfirmSelectArguments,
    ConsumerMessage, QueueDeclareArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use tokio::sync::mpsc;

use crate::common::{next_delivery, Broker, Chan, Conn, Delivery, Event, TestDir};

/// Upper bound for one test body (some start the broker twice).
pub const BOUND: Duration = Duration::from_secs(60);

/// A field table from pairs.
pub fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in entries {
        t.insert((*k).try_into().expect("short string"), v.clone());
    }
    t
}

/// A long string value.
pub fn s(v: &str) -> FieldValue {
    FieldValue::S(v.try_into().expect("long string"))
}

/// Declares stream `name` (durable, `x-queue-type = stream`) with `extra` arguments.
pub async fn declare_stream(ch: &Chan, name: &str, extra: &[(&str, FieldValue)]) {
    let mut args = vec![("x-queue-type", s("stream"))];
    args.extend(extra.iter().cloned());
    ch.queue_declare(
        QueueDeclareArguments::new(name)
            .durable(true)
            .arguments(table(&args))
            .finish(),
    )
    .await
    .expect("queue.declare")
    .expect("declare-ok");
}

/// A channel in confirm mode that counts its publishes and the confirms it received.
pub struct Publisher {
    pub ch: Chan,
    pub published: u64,
    /// Every publish up to this one is confirmed.
    confirmed: u64,
    /// Confirmed above `confirmed` (single acks out of order).
    singles: std::collections::BTreeSet<u64>,
}

impl Publisher {
    pub async fn open(conn: &Conn) -> Publisher {
        let ch = conn.channel().await;
        ch.confirm_select(ConfirmSelectArguments::default())
            .await
            .expect("confirm.select");
        Publisher {
            ch,
            published: 0,
            confirmed: 0,
            singles: Default::default(),
        }
    }

    /// Waits until every publish so far is confirmed; panics on a nack.
    pub async fn wait_confirmed(&mut self) {
        while self.confirmed < self.published {
            match self.ch.next_event().await {
                Event::Ack { tag, multiple } => {
                    if multiple {
                        self.confirmed = self.confirmed.max(tag);
                    } else {
                        self.singles.insert(tag);
                    }
                    while self.singles.remove(&(self.confirmed + 1)) {
                        self.confirmed += 1;
                    }
                }
                other => panic!(
                    "waiting for confirms up to {}, got {other:?}",
                    self.published
                ),
            }
        }
    }

    /// Publishes `body` with `props` and waits for its confirm.
    pub async fn publish_props(
        &mut self,
        exchange: &str,
        key: &str,
        props: BasicProperties,
        body: &[u8],
    ) {
        self.ch.publish_props(exchange, key, props, body).await;
        self.published += 1;
        self.wait_confirmed().await;
    }

    /// Publishes each body to the default exchange (routing key `queue`), then waits for
    /// every confirm.
    pub async fn publish_all(&mut self, queue: &str, bodies: &[String]) {
        for b in bodies {
            self.ch
                .publish_props("", queue, BasicProperties::default(), b.as_bytes())
                .await;
        }
        self.published += bodies.len() as u64;
        self.wait_confirmed().await;
    }
}

/// `prefix-0`, `prefix-1`, …
pub fn bodies(prefix: &str, range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

/// Sets the channel's consumer prefetch (`basic.qos`, global false).
pub async fn prefetch(ch: &Chan, n: u16) {
    ch.basic_qos(BasicQosArguments::new(0, n, false))
        .await
        .expect("basic.qos");
}

/// `basic.consume` (manual ack) with `tag` (empty: the broker's) and `args`.
pub async fn consume(
    ch: &Chan,
    queue: &str,
    tag: &str,
    args: &[(&str, FieldValue)],
) -> (String, mpsc::UnboundedReceiver<ConsumerMessage>) {
    let a = BasicConsumeArguments::new(queue, tag)
        .manual_ack(true)
        .arguments(table(args))
        .finish();
    ch.basic_consume_rx(a).await.expect("basic.consume")
}

/// The delivery's `x-stream-offset` header (a long).
pub fn offset(d: &Delivery) -> i64 {
    let headers = d.props.headers().expect("headers");
    match headers.get(&"x-stream-offset".try_into().expect("name")) {
        Some(FieldValue::l(n)) => *n,
        other => panic!("x-stream-offset is {other:?}"),
    }
}

/// The next `n` deliveries as (offset, body), each acked.
pub async fn take(
    ch: &Chan,
    rx: &mut mpsc::UnboundedReceiver<ConsumerMessage>,
    n: usize,
) -> Vec<(i64, String)> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let d = next_delivery(rx).await;
        ch.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("basic.ack");
        out.push((offset(&d), String::from_utf8_lossy(&d.body).into_owned()));
    }
    out
}

/// `(offset, body)` pairs for `range` of `prefix` messages published from offset 0.
pub fn expected(prefix: &str, range: std::ops::Range<u64>) -> Vec<(i64, String)> {
    range.map(|i| (i as i64, format!("{prefix}-{i}"))).collect()
}

/// A data directory kept across broker restarts (removed when the test ends).
pub struct Node {
    _dir: TestDir,
    data: PathBuf,
    config: Option<String>,
}

impl Node {
    pub fn new(config: Option<&str>) -> Node {
        let dir = TestDir::new("sluice-streams");
        let data = dir.path().join("data");
        Node {
            _dir: dir,
            data,
            config: config.map(str::to_owned),
        }
    }

    pub fn data(&self) -> &Path {
        &self.data
    }

    pub fn start(&self, shards: usize) -> Broker {
        Broker::start_in(&self.data, shards, self.config.as_deref())
    }
}

// ---------------------------------------------------------------------------------------
// Raw frames: exact field types, table order and close texts
// ---------------------------------------------------------------------------------------

pub use crate::common::wire::{m, Enc, Table, Val};
use crate::common::RawConn;

/// What the broker answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The `-ok` (its arguments' first short string or long, as decoded by the caller).
    Ok,
    /// channel.close: code, text, class id, method id (answered with close-ok, the
    /// channel opened again).
    ChannelClosed(u16, String, u16, u16),
    /// connection.close: code and text.
    ConnectionClosed(u16, String),
}

/// A long string value (raw frames).
pub fn ls(v: &str) -> Val {
    Val::LongStr(v.as_bytes().to_vec())
}

/// An argument (raw frames).
pub fn arg(k: &str, v: Val) -> (String, Val) {
    (k.to_owned(), v)
}

/// Reads the answer to a method on `channel`: its `ok` method, or a close.
pub fn answer(c: &mut RawConn, channel: u16, ok: (u16, u16)) -> Answer {
    let mth = c.read_method().expect("an answer");
    if mth.id == ok {
        return Answer::Ok;
    }
    let mut d = mth.dec();
    match mth.id {
        m::CHANNEL_CLOSE => {
            let closed = Answer::ChannelClosed(d.short(), d.shortstr(), d.short(), d.short());
            c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
                .expect("send channel.close-ok");
            c.channel_open(channel);
            closed
        }
        m::CONNECTION_CLOSE => Answer::ConnectionClosed(d.short(), d.shortstr()),
        other => panic!("unexpected {other:?}, waiting for {ok:?}"),
    }
}

/// queue.declare with flags (durable, exclusive, auto-delete) and `args`.
pub fn raw_declare(
    c: &mut RawConn,
    channel: u16,
    name: &str,
    flags: [bool; 3],
    args: &Table,
) -> Answer {
    let [durable, exclusive, auto_delete] = flags;
    let frame = Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, durable, exclusive, auto_delete, false])
        .table(args)
        .done();
    c.send_method(channel, m::QUEUE_DECLARE, &frame)
        .expect("send queue.declare");
    answer(c, channel, m::QUEUE_DECLARE_OK)
}

/// A stream's declare arguments (raw frames) with `extra` after `x-queue-type`.
pub fn stream_args(extra: &[(String, Val)]) -> Table {
    let mut t = vec![arg("x-queue-type", ls("stream"))];
    t.extend(extra.iter().cloned());
    t
}

/// basic.qos (prefetch count, global).
pub fn raw_qos(c: &mut RawConn, channel: u16, count: u16, global: bool) {
    let frame = Enc::new().long(0).short(count).bits(&[global]).done();
    c.send_method(channel, m::BASIC_QOS, &frame)
        .expect("send basic.qos");
    c.expect_method(channel, m::BASIC_QOS_OK);
}

/// basic.consume with `tag`, no-ack as given, and `args`.
pub fn raw_consume(
    c: &mut RawConn,
    channel: u16,
    queue: &str,
    no_ack: bool,
    args: &Table,
) -> Answer {
    let frame = Enc::new()
        .short(0)
        .shortstr(queue)
        .shortstr("")
        .bits(&[false, no_ack, false, false])
        .table(args)
        .done();
    c.send_method(channel, m::BASIC_CONSUME, &frame)
        .expect("send basic.consume");
    answer(c, channel, m::BASIC_CONSUME_OK)
}

/// One fresh stream name homed on each of the `shards` shards (shard 0's first): with
/// two shards, whichever shard a connection lands on, one of them is on the other.
pub fn one_per_shard(prefix: &str, shards: usize) -> Vec<String> {
    let mut by_shard: Vec<Option<String>> = vec![None; shards];
    while by_shard.iter().any(Option::is_none) {
        let name = crate::common::unique(prefix);
        let h = usize::from(sluice::shard::placement::home_shard(
            "/",
            name.as_bytes(),
            shards,
        ));
        if by_shard[h].is_none() {
            by_shard[h] = Some(name);
        }
    }
    by_shard.into_iter().flatten().collect()
}
