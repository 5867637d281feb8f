//! Helpers shared by the flow-control sections: reading the broker's operational lines
//! exactly, the declare arguments of a capacity, the raw-socket pieces (channel.flow,
//! connection.blocked, a publisher that ignores both), sluice's own client, and the one
//! flow cycle every way of setting a capacity must produce.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use amqprs::channel::{QueueDeclareArguments, QueuePurgeArguments};
use amqprs::{FieldTable, FieldValue};

use crate::common::raw::{client_properties, Method, RawConn, Tune};
pub use crate::common::thousands;
use crate::common::wire::{self, m, Enc, Props, Val};
use crate::common::{wait_until, Broker, Chan, Conn, Event, EVENT_TIMEOUT};

/// Body size of the messages whose sizes the log lines are checked against.
pub const BODY: u64 = 100;

// ---------------------------------------------------------------------------------------
// Operational log lines
// ---------------------------------------------------------------------------------------

/// The text of a `sluice::ops` line after the tracing prefix (timestamp, level, target).
pub fn ops_text(line: &str) -> Option<&str> {
    line.split_once("sluice::ops: ").map(|(_, text)| text)
}

/// Every operational line printed so far, without the tracing prefix.
pub fn ops_lines(broker: &Broker) -> Vec<String> {
    broker
        .logs()
        .iter()
        .filter_map(|l| ops_text(l).map(str::to_owned))
        .collect()
}

/// The first operational line satisfying `pred`, polling up to `timeout`.
pub fn wait_ops(broker: &Broker, timeout: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
    let mut found = None;
    wait_until(timeout, || {
        found = ops_lines(broker).into_iter().find(|l| pred(l));
        found.is_some()
    });
    found
}

/// Waits (up to [`EVENT_TIMEOUT`]) for an operational line equal to `expected`; panics
/// with the related lines when it does not appear.
pub fn expect_line(broker: &Broker, expected: &str) {
    if wait_ops(broker, EVENT_TIMEOUT, |l| l == expected).is_none() {
        let code = expected
            .split(" : ")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .unwrap_or(expected);
        panic!(
            "the broker did not log\n  {expected}\nlines with {code}:\n  {}",
            lines_containing(broker, code).join("\n  ")
        );
    }
}

/// Operational lines containing `needle`.
pub fn lines_containing(broker: &Broker, needle: &str) -> Vec<String> {
    ops_lines(broker)
        .into_iter()
        .filter(|l| l.contains(needle))
        .collect()
}

/// Parses a number printed with thousands separators.
pub fn parse_thousands(s: &str) -> Option<u64> {
    let plain: String = s.chars().filter(|c| *c != ',').collect();
    if plain.is_empty() || thousands(plain.parse().ok()?) != s {
        return None;
    }
    plain.parse().ok()
}

pub fn overfull_line(queue: &str, size: u64, capacity: u64) -> String {
    format!(
        "[vh(/)/qu({queue})] QUE-1003 : Overfull : Size : {} bytes, Capacity : {}",
        thousands(size),
        thousands(capacity)
    )
}

pub fn underfull_line(queue: &str, size: u64, resume: u64) -> String {
    format!(
        "[vh(/)/qu({queue})] QUE-1004 : Underfull : Size : {} bytes, Resume Capacity : {}",
        thousands(size),
        thousands(resume)
    )
}

pub fn enforced_queue(queue: &str) -> String {
    format!("CHN-1005 : Flow Control Enforced (Queue {queue})")
}

pub const ENFORCED_MEMORY: &str = "CHN-1005 : Flow Control Enforced (Memory high watermark)";
pub const REMOVED: &str = "CHN-1006 : Flow Control Removed";

/// A line about a connection or one of its channels:
/// `[con:N(guest@127.0.0.1:PORT/)/ch:C] REST` (without `/ch:C` for the connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnLine {
    pub conn: u64,
    pub port: u16,
    pub channel: Option<u16>,
    pub rest: String,
}

fn digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Parses the Qpid-style connection subject strictly; `None` for any other line.
pub fn parse_conn_line(text: &str) -> Option<ConnLine> {
    let s = text.strip_prefix("[con:")?;
    let (conn, s) = digits(s);
    let s = s.strip_prefix("(guest@127.0.0.1:")?;
    let (port, s) = digits(s);
    let s = s.strip_prefix("/)")?;
    let (channel, s) = match s.strip_prefix("/ch:") {
        Some(s) => {
            let (ch, s) = digits(s);
            (Some(ch.parse().ok()?), s)
        }
        None => (None, s),
    };
    let rest = s.strip_prefix("] ")?;
    Some(ConnLine {
        conn: conn.parse().ok()?,
        port: port.parse().ok()?,
        channel,
        rest: rest.to_owned(),
    })
}

/// Every connection line printed so far whose text after the subject is `rest`.
pub fn conn_lines(broker: &Broker, rest: &str) -> Vec<ConnLine> {
    ops_lines(broker)
        .iter()
        .filter_map(|l| parse_conn_line(l))
        .filter(|l| l.rest == rest)
        .collect()
}

/// Waits for exactly the channel line `rest` for channel `channel` and returns it (the
/// first one).
pub fn expect_channel_line(broker: &Broker, channel: u16, rest: &str) -> ConnLine {
    expect_conn_channel_line(broker, None, channel, rest)
}

/// As [`expect_channel_line`], for the connection of `like` (same number and client
/// port: connection numbers are counted per shard, so only both together identify a
/// connection) when given.
pub fn expect_conn_channel_line(
    broker: &Broker,
    like: Option<&ConnLine>,
    channel: u16,
    rest: &str,
) -> ConnLine {
    let mut found = None;
    wait_until(EVENT_TIMEOUT, || {
        found = conn_lines(broker, rest).into_iter().find(|l| {
            l.channel == Some(channel) && like.is_none_or(|c| (c.conn, c.port) == (l.conn, l.port))
        });
        found.is_some()
    });
    found.unwrap_or_else(|| {
        panic!(
            "no `[con:..(guest@127.0.0.1:..)/ch:{channel}] {rest}` line; CHN lines:\n  {}",
            lines_containing(broker, "CHN-").join("\n  ")
        )
    })
}

// ---------------------------------------------------------------------------------------
// Capacities through amqprs
// ---------------------------------------------------------------------------------------

/// `x-qpid-capacity` (and `x-qpid-flow-resume-capacity`) as a declare-argument table.
pub fn capacity_args(capacity: i64, resume: Option<i64>) -> FieldTable {
    let mut t = FieldTable::new();
    t.insert(
        "x-qpid-capacity".try_into().unwrap(),
        FieldValue::l(capacity),
    );
    if let Some(r) = resume {
        t.insert(
            "x-qpid-flow-resume-capacity".try_into().unwrap(),
            FieldValue::l(r),
        );
    }
    t
}

/// Declares `queue` with `args`; panics on failure.
pub async fn declare_with(ch: &Chan, queue: &str, args: FieldTable) {
    ch.queue_declare(QueueDeclareArguments::new(queue).arguments(args).finish())
        .await
        .expect("queue.declare")
        .expect("declare-ok");
}

/// Purges `queue`; returns how many messages went.
pub async fn purge(ch: &Chan, queue: &str) -> u32 {
    ch.queue_purge(QueuePurgeArguments::new(queue))
        .await
        .expect("queue.purge")
        .expect("purge-ok")
}

/// A [`BODY`]-byte body starting with `n`.
pub fn numbered(n: u64) -> Vec<u8> {
    let mut b = format!("{n:08}:").into_bytes();
    b.resize(BODY as usize, b'.');
    b
}

/// The number a [`numbered`] (or [`flood`]) body starts with.
pub fn number_of(body: &[u8]) -> u64 {
    std::str::from_utf8(&body[..8])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("body without a number: {:?}", &body[..body.len().min(16)]))
}

/// The next event on `ch`, which must be channel.flow; returns its `active`.
pub async fn expect_flow(ch: &mut Chan) -> bool {
    match ch.next_event().await {
        Event::Flow { active } => active,
        other => panic!("expected channel.flow, got {other:?}"),
    }
}

/// Asserts that no server-initiated event reaches `ch` within `quiet`.
pub async fn assert_no_event(ch: &mut Chan, quiet: Duration, why: &str) {
    if let Ok(Some(ev)) = tokio::time::timeout(quiet, ch.events.recv()).await {
        panic!("{why}: unexpected {ev:?}");
    }
}

/// A queue's capacity and resume capacity as the broker is expected to apply them.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub capacity: u64,
    pub resume: u64,
}

/// One full flow cycle on `queue`, as a publisher (`pch`) and the log see it:
///
/// 1. [`BODY`]-byte messages are published until one takes the queue above its capacity,
///    and one more: the publisher gets `channel.flow(active=false)` once, the broker logs
///    QUE-1003 with the size after that message, and CHN-1005 naming the queue for the
///    publishing channel;
/// 2. messages are taken with basic.get until the size is below the resume capacity: the
///    broker logs QUE-1004 once, with the size at that moment; the publisher gets
///    `channel.flow(active=true)`, logged as CHN-1006 for the same connection and channel;
/// 3. a publish afterwards is accepted and causes no further flow signal.
///
/// Returns the publisher's CHN-1005 line.
pub async fn flow_cycle(broker: &Broker, pch: &mut Chan, queue: &str, limits: Limits) -> ConnLine {
    let observer = broker.connect().await;
    let och = observer.channel().await;
    // The first message after which the size exceeds the capacity, plus one more.
    let overfull_at = limits.capacity / BODY + 1;
    let published = overfull_at + 1;
    for n in 1..=published {
        pch.publish("", queue, &numbered(n)).await;
    }
    och.wait_message_count(queue, published as u32).await;
    assert!(!expect_flow(pch).await, "first flow signal must stop");
    expect_line(
        broker,
        &overfull_line(queue, overfull_at * BODY, limits.capacity),
    );
    let channel = pch.channel_id();
    let enforced = expect_channel_line(broker, channel, &enforced_queue(queue));
    assert_eq!(
        conn_lines(broker, &enforced_queue(queue)).len(),
        1,
        "CHN-1005 is logged once per channel and queue"
    );

    // Underfull once the size is below the resume capacity: (resume - 1) / BODY left.
    let left = (limits.resume - 1) / BODY;
    for n in 1..=published - left {
        let got = och.get_eventually(queue, true).await;
        assert_eq!(number_of(&got.2), n, "basic.get returns the oldest message");
    }
    expect_line(broker, &underfull_line(queue, left * BODY, limits.resume));
    assert_eq!(
        lines_containing(broker, &format!("qu({queue})] QUE-1004")).len(),
        1,
        "QUE-1004 once, when the size first fell below the resume capacity"
    );
    assert!(expect_flow(pch).await, "second flow signal must release");
    expect_conn_channel_line(broker, Some(&enforced), channel, REMOVED);

    // Publishing works again, and below the capacity nothing is signalled.
    pch.publish("", queue, &numbered(published + 1)).await;
    och.wait_message_count(queue, left as u32 + 1).await;
    assert_no_event(pch, Duration::from_millis(100), "below capacity").await;
    observer.close().await;
    enforced
}

/// Opens a connection, a channel on it, and returns both.
pub async fn conn_and_channel(broker: &Broker) -> (Conn, Chan) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    (conn, ch)
}

// ---------------------------------------------------------------------------------------
// Placement (ARCHITECTURE.md: home = fnv1a(vhost, name) mod shards), re-derived here
// so the suite does not share a bug with src/shard/placement.rs
// ---------------------------------------------------------------------------------------

pub fn home_shard(vhost: &str, name: &str, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in vhost.as_bytes().iter().chain(&[0u8]).chain(name.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % shards as u64) as usize
}

/// A fresh queue name (with `prefix`) whose home shard satisfies `want`.
pub fn name_on(prefix: &str, shards: usize, want: impl Fn(usize) -> bool) -> String {
    loop {
        let name = crate::common::unique(prefix);
        if want(home_shard("/", &name, shards)) {
            return name;
        }
    }
}

/// The shard the amqprs connection behind `ch` was accepted on: server-named queues are
/// named to live on the declaring connection's shard.
pub async fn shard_of(ch: &Chan, shards: usize) -> usize {
    let name = ch.declare_server_named().await;
    home_shard("/", &name, shards)
}

// ---------------------------------------------------------------------------------------
// Raw sockets
// ---------------------------------------------------------------------------------------

pub const CHANNEL_FLOW: (u16, u16) = (20, 20);
pub const CONNECTION_BLOCKED: (u16, u16) = (10, 60);
pub const CONNECTION_UNBLOCKED: (u16, u16) = (10, 61);

/// `active` of a channel.flow method.
pub fn flow_active(mth: &Method) -> bool {
    assert_eq!(mth.id, CHANNEL_FLOW);
    mth.dec().bits(1)[0]
}

/// The next method on `raw` (heartbeats skipped); panics on a read error.
pub fn next_method(raw: &mut RawConn, waiting_for: &str) -> Method {
    raw.read_method()
        .unwrap_or_else(|e| panic!("waiting for {waiting_for}: {e}"))
}

/// Reads the next method and asserts it is channel.flow on `channel`; returns `active`.
pub fn raw_expect_flow(raw: &mut RawConn, channel: u16) -> bool {
    let mth = next_method(raw, "channel.flow");
    assert_eq!(
        (mth.id, mth.channel),
        (CHANNEL_FLOW, channel),
        "expected channel.flow on channel {channel}"
    );
    flow_active(&mth)
}

/// The log subject of a raw connection, `con:N(guest@127.0.0.1:PORT/)`, from its CON-1001
/// line.
pub fn raw_subject(broker: &Broker, raw: &RawConn) -> String {
    let port = raw.stream.local_addr().expect("local addr").port();
    let needle = format!("(guest@127.0.0.1:{port}/)] CON-1001 : Open");
    let line = wait_ops(broker, EVENT_TIMEOUT, |l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no CON-1001 line for port {port}"));
    line[1..line.find("] CON-1001").unwrap()].to_owned()
}

/// A raw connection whose start-ok announces no capabilities at all (no
/// `connection.blocked`), as old clients do.
pub fn raw_without_capabilities(broker: &Broker) -> RawConn {
    let mut raw = RawConn::connect(&broker.addr());
    raw.send_protocol_header();
    raw.read_start();
    let props: Vec<(String, Val)> = vec![(
        "product".into(),
        Val::LongStr(b"sluice-itests-old-client".to_vec()),
    )];
    let args = Enc::new()
        .table(&props)
        .shortstr("PLAIN")
        .longstr(b"\0guest\0guest")
        .shortstr("en_US")
        .done();
    raw.send_method(0, m::CONNECTION_START_OK, &args)
        .expect("send start-ok");
    let offer = raw.read_tune();
    raw.send_tune_ok(Tune {
        heartbeat: 0,
        ..offer
    });
    raw.send_open("/");
    raw.read_open_ok();
    raw
}

/// Whether the default raw handshake announces `connection.blocked` (the memory tests
/// rely on it).
pub fn raw_announces_blocked() -> bool {
    let props = client_properties();
    matches!(
        wire::get(&props, "capabilities"),
        Some(Val::Table(caps)) if wire::get(caps, "connection.blocked") == Some(&Val::Bool(true))
    )
}

/// The frames of one basic.publish to the default exchange (body in one frame).
pub fn publish_frames(channel: u16, queue: &str, body: &[u8]) -> Vec<u8> {
    let mut out = wire::frame(
        wire::FRAME_METHOD,
        channel,
        &wire::method_payload(
            m::BASIC_PUBLISH,
            &RawConn::publish_args("", queue, false, false),
        ),
    );
    out.extend(wire::frame(
        wire::FRAME_HEADER,
        channel,
        &wire::content_header_payload(body.len() as u64, &Props::default()),
    ));
    out.extend(wire::frame(wire::FRAME_BODY, channel, body));
    out
}

pub fn raw_qos(raw: &mut RawConn, channel: u16, prefetch: u16) {
    let args = Enc::new().long(0).short(prefetch).bits(&[false]).done();
    raw.send_method(channel, m::BASIC_QOS, &args)
        .expect("send basic.qos");
    raw.expect_method(channel, m::BASIC_QOS_OK);
}

pub fn raw_ack(raw: &mut RawConn, channel: u16, tag: u64, multiple: bool) {
    let args = Enc::new().longlong(tag).bits(&[multiple]).done();
    raw.send_method(channel, m::BASIC_ACK, &args)
        .expect("send basic.ack");
}

/// Sends a passive queue.declare (the answer is left to the caller).
pub fn raw_send_passive_declare(raw: &mut RawConn, channel: u16, queue: &str) {
    let args = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[true, false, false, false, false])
        .table(&vec![])
        .done();
    raw.send_method(channel, m::QUEUE_DECLARE, &args)
        .expect("send passive queue.declare");
}

/// connection.close from the client; reads (skipping channel.flow and blocked/unblocked)
/// until close-ok.
pub fn raw_close(raw: &mut RawConn) {
    raw.send_close();
    loop {
        let mth = next_method(raw, "connection.close-ok");
        match mth.id {
            m::CONNECTION_CLOSE_OK => return,
            CHANNEL_FLOW | CONNECTION_BLOCKED | CONNECTION_UNBLOCKED => continue,
            other => panic!("expected connection.close-ok, got {other:?}"),
        }
    }
}

/// A publisher that ignores the broker entirely: from its own thread, over a clone of a
/// raw connection's socket, it writes `count` publishes of `size`-byte bodies numbered
/// 0.. (the first 8 bytes), never reading anything.
pub struct Flood {
    handle: JoinHandle<std::io::Result<()>>,
    written: Arc<AtomicU64>,
}

pub fn flood(raw: &RawConn, channel: u16, queue: &str, size: usize, count: u64) -> Flood {
    let mut stream = raw.stream.try_clone().expect("clone socket");
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let queue = queue.to_owned();
    let written = Arc::new(AtomicU64::new(0));
    let progress = Arc::clone(&written);
    let handle = std::thread::spawn(move || {
        const PER_WRITE: u64 = 16;
        let mut n = 0;
        while n < count {
            let mut buf = Vec::new();
            for i in n..(n + PER_WRITE).min(count) {
                let mut body = format!("{i:08}:").into_bytes();
                body.resize(size, b'x');
                buf.extend(publish_frames(channel, &queue, &body));
            }
            stream.write_all(&buf)?;
            n = (n + PER_WRITE).min(count);
            progress.store(n, Ordering::Relaxed);
        }
        Ok(())
    });
    Flood { handle, written }
}

impl Flood {
    /// Publishes handed to the socket so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Waits for the thread; panics if a write failed (the broker stopped reading for
    /// longer than the write timeout, or closed the socket).
    pub fn finish(self) {
        self.handle
            .join()
            .expect("flood thread panicked")
            .expect("every publish was written");
    }

    /// Waits for the thread, whatever became of its writes.
    pub fn finish_ignoring_errors(self) {
        let _ = self.handle.join();
    }
}

// ---------------------------------------------------------------------------------------
// sluice's own client
// ---------------------------------------------------------------------------------------

/// A sluice client connection to `broker` with the given flow-control options.
pub async fn sluice_connect(
    broker: &Broker,
    flow: sluice::client::FlowOptions,
) -> sluice::client::Connection {
    let opts = sluice::client::ConnectionOptions {
        flow,
        ..sluice::client::ConnectionOptions::default()
    };
    sluice::client::Connection::connect_with(
        &format!("amqp://guest:guest@{}/", broker.addr()),
        opts,
    )
    .await
    .expect("sluice client connects")
}

/// `x-qpid-capacity` / `x-qpid-flow-resume-capacity` for the sluice client.
pub fn sluice_capacity_args(capacity: i64, resume: Option<i64>) -> sluice::protocol::FieldTable {
    use sluice::protocol::FieldValue as V;
    let mut t = sluice::protocol::FieldTable::new();
    t.insert("x-qpid-capacity", V::I64(capacity));
    if let Some(r) = resume {
        t.insert("x-qpid-flow-resume-capacity", V::I64(r));
    }
    t
}

/// Ready messages in `queue` (passive declare on `ch`; answered after every earlier
/// publish on the same channel was handled).
pub async fn sluice_count(ch: &sluice::client::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue,
        sluice::client::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
    )
    .await
    .expect("passive declare")
    .message_count
}
