//! Helpers shared by the store sections: a data directory kept across broker restarts,
//! numbered message bodies that can be checked byte for byte, a confirm-mode publisher
//! that records exactly which sequence numbers the broker confirmed, draining a queue
//! exactly, the segment files of a shard, and the broker's operational lines.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use amqprs::channel::{
    BasicCancelArguments, BasicPublishArguments, ConfirmSelectArguments, QueueBindArguments,
    QueueDeclareArguments,
};
use amqprs::BasicProperties;

use crate::common::{
    next_delivery, next_event, unique, wait_until, Broker, Chan, Conn, Delivery, Event, TestDir,
    EVENT_TIMEOUT,
};

/// The shard count of every test that is not about changing it.
pub const SHARDS: usize = 2;

/// Upper bound for one test body: these tests start the broker two to four times.
pub const BOUND: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// A data directory and the brokers started on it
// ---------------------------------------------------------------------------------------

/// One test's data directory (`<tmp>/sluice-store-…/data`), kept across restarts and
/// removed when the test ends, plus the configuration every broker on it starts with.
pub struct Node {
    /// Removes the directory when the test ends.
    _dir: TestDir,
    data: PathBuf,
    config: Option<String>,
}

impl Node {
    pub fn new(config: Option<&str>) -> Node {
        let dir = TestDir::new("sluice-store");
        let data = dir.path().join("data");
        Node {
            _dir: dir,
            data,
            config: config.map(str::to_owned),
        }
    }

    /// The `--data-dir` (DIR of the contract).
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Starts a broker with `--shards shards` on this data directory.
    pub fn start(&self, shards: usize) -> Broker {
        Broker::start_in(&self.data, shards, self.config.as_deref())
    }
}

/// SIGTERM; the broker must not have panicked and must exit cleanly (status 0).
pub fn stop(broker: &mut Broker) {
    broker.assert_healthy();
    let status = broker.stop();
    assert!(
        status.success(),
        "exit status {status} after SIGTERM; log:\n{}",
        broker.logs().join("\n")
    );
}

/// [`stop`], then a new broker on the same data directory.
pub fn restart(broker: &mut Broker, node: &Node, shards: usize) {
    stop(broker);
    *broker = node.start(shards);
}

/// SIGKILL, then a new broker on the same data directory.
pub fn crash(broker: &mut Broker, node: &Node, shards: usize) {
    broker.kill9();
    *broker = node.start(shards);
}

/// The home shard of `queue` in "/" with `shards` shards (the broker's own function).
pub fn home(queue: &str, shards: usize) -> usize {
    usize::from(sluice::shard::placement::home_shard(
        "/",
        queue.as_bytes(),
        shards,
    ))
}

/// `per_shard` fresh queue names homed on each of the `shards` shards, shard 0's first.
pub fn queues_on(prefix: &str, shards: usize, per_shard: usize) -> Vec<String> {
    let mut by_shard: Vec<Vec<String>> = vec![Vec::new(); shards];
    while by_shard.iter().any(|v| v.len() < per_shard) {
        let name = unique(prefix);
        let h = home(&name, shards);
        if by_shard[h].len() < per_shard {
            by_shard[h].push(name);
        }
    }
    by_shard.into_iter().flatten().collect()
}

// ---------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------

pub fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2).finish()
}

pub fn transient() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(1).finish()
}

/// Body number `i` of series `tag`: `tag#iiiiii|` then filler that depends on `i` and
/// the position, `size` bytes in all (at least the prefix).
pub fn body(tag: &str, i: u64, size: usize) -> Vec<u8> {
    let mut b = format!("{tag}#{i:06}|").into_bytes();
    let mut k = 0u64;
    while b.len() < size {
        b.push(b'a' + ((i.wrapping_mul(7) + k) % 26) as u8);
        k += 1;
    }
    b
}

/// The series tag and number of a [`body`]; panics on anything else.
pub fn parse_body(b: &[u8]) -> (String, u64) {
    let text = String::from_utf8_lossy(b);
    let head = text
        .split_once('|')
        .map(|(h, _)| h)
        .unwrap_or_else(|| panic!("not a numbered body: {:?}", &text[..text.len().min(80)]));
    let (tag, i) = head
        .rsplit_once('#')
        .unwrap_or_else(|| panic!("not a numbered body: {head:?}"));
    (
        tag.to_owned(),
        i.parse()
            .unwrap_or_else(|_| panic!("not a numbered body: {head:?}")),
    )
}

/// Asserts that `d` is body `i` of series `tag` (byte for byte, `size` bytes), persistent,
/// with the given redelivered flag.
pub fn assert_delivery(d: &Delivery, tag: &str, i: u64, size: usize, redelivered: bool) {
    let (got_tag, got_i) = parse_body(&d.body);
    assert_eq!(
        (got_tag.as_str(), got_i),
        (tag, i),
        "wrong message (expected {tag}#{i})"
    );
    assert!(
        d.body == body(tag, i, size),
        "body of {tag}#{i} differs from what was published ({} bytes, expected {size})",
        d.body.len()
    );
    assert_eq!(d.props.delivery_mode(), Some(2), "{tag}#{i}: delivery-mode");
    assert_eq!(d.redelivered, redelivered, "{tag}#{i}: redelivered flag");
}

/// Asserts that `got` are bodies `expected` of series `tag`, in that order, with
/// `redelivered(i)` as their redelivered flag.
pub fn assert_series(
    got: &[Delivery],
    tag: &str,
    expected: impl IntoIterator<Item = u64>,
    size: usize,
    redelivered: impl Fn(u64) -> bool,
) {
    let expected: Vec<u64> = expected.into_iter().collect();
    let got_ids: Vec<u64> = got
        .iter()
        .map(|d| {
            let (t, i) = parse_body(&d.body);
            assert_eq!(t, tag, "a message of another series in {tag}");
            i
        })
        .collect();
    assert_eq!(got_ids, expected, "messages of {tag} (numbers, in order)");
    for (d, &i) in got.iter().zip(&expected) {
        assert_delivery(d, tag, i, size, redelivered(i));
    }
}

// ---------------------------------------------------------------------------------------
// Publishing with confirms
// ---------------------------------------------------------------------------------------

/// A channel in confirm mode that records every confirm, return and channel.flow.
pub struct Publisher {
    pub ch: Chan,
    /// Sequence numbers used so far (the next publish gets `published + 1`).
    pub published: u64,
    /// Sequence numbers the broker confirmed (basic.ack, single or multiple).
    pub acked: BTreeSet<u64>,
    /// Every tag up to this one is in `acked`.
    floor: u64,
    /// basic.return: (reply code, exchange, routing key, body).
    pub returns: Vec<(u16, String, String, Vec<u8>)>,
    /// channel.flow `active` values, in arrival order.
    pub flows: Vec<bool>,
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
            acked: BTreeSet::new(),
            floor: 0,
            returns: Vec::new(),
            flows: Vec::new(),
        }
    }

    /// Publishes; returns the sequence number.
    pub async fn publish(
        &mut self,
        exchange: &str,
        key: &str,
        props: BasicProperties,
        body: &[u8],
    ) -> u64 {
        self.publish_with(BasicPublishArguments::new(exchange, key), props, body)
            .await
    }

    /// Publishes with the mandatory flag; returns the sequence number.
    pub async fn publish_mandatory(
        &mut self,
        exchange: &str,
        key: &str,
        props: BasicProperties,
        body: &[u8],
    ) -> u64 {
        let args = BasicPublishArguments::new(exchange, key)
            .mandatory(true)
            .finish();
        self.publish_with(args, props, body).await
    }

    async fn publish_with(
        &mut self,
        args: BasicPublishArguments,
        props: BasicProperties,
        body: &[u8],
    ) -> u64 {
        self.ch
            .basic_publish(props, body.to_vec(), args)
            .await
            .expect("basic.publish");
        self.published += 1;
        self.published
    }

    pub fn confirmed(&self) -> u64 {
        self.acked.len() as u64
    }

    fn record(&mut self, ev: Event) {
        match ev {
            Event::Ack { tag, multiple } => {
                assert!(
                    tag >= 1 && tag <= self.published,
                    "ack for tag {tag}, only 1..={} published",
                    self.published
                );
                if multiple {
                    for t in self.floor + 1..=tag {
                        self.acked.insert(t);
                    }
                } else {
                    assert!(self.acked.insert(tag), "tag {tag} acked twice");
                }
                while self.acked.contains(&(self.floor + 1)) {
                    self.floor += 1;
                }
            }
            Event::Return {
                code,
                exchange,
                routing_key,
                body,
                ..
            } => self.returns.push((code, exchange, routing_key, body)),
            Event::Flow { active } => self.flows.push(active),
            other => panic!("publisher: unexpected {other:?}"),
        }
    }

    /// Waits for the next server event on the channel (at most [`EVENT_TIMEOUT`]).
    pub async fn next(&mut self) {
        let ev = next_event(&mut self.ch.events).await;
        self.record(ev);
    }

    /// Records the events that already arrived, without waiting.
    pub fn poll(&mut self) {
        while let Ok(ev) = self.ch.events.try_recv() {
            self.record(ev);
        }
    }

    /// Waits until every publish so far is confirmed; panics on a nack, or if the broker
    /// goes quiet for [`EVENT_TIMEOUT`] first.
    pub async fn wait_all(&mut self) {
        while self.confirmed() < self.published {
            self.next().await;
        }
    }

    /// Waits for a channel.flow with `active` (events before it are recorded).
    pub async fn wait_flow(&mut self, active: bool) {
        let seen = self.flows.len();
        loop {
            if self.flows[seen..].contains(&active) {
                return;
            }
            self.next().await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Declaring and reading
// ---------------------------------------------------------------------------------------

/// queue.declare durable=true, non-exclusive, not auto-delete.
pub async fn declare_durable(ch: &Chan, queue: &str) {
    ch.queue_declare(QueueDeclareArguments::durable_client_named(queue))
        .await
        .expect("queue.declare")
        .expect("declare-ok");
}

pub async fn bind(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.queue_bind(QueueBindArguments::new(queue, exchange, key))
        .await
        .expect("queue.bind");
}

/// Consumers of `queue`, from a passive declare.
pub async fn consumer_count(ch: &Chan, queue: &str) -> u32 {
    let (_, _, consumers) = ch
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await
        .expect("passive queue.declare")
        .expect("declare-ok");
    consumers
}

/// Polls until `queue` has no consumer (a consumer that went away with its channel or
/// connection is gone on the broker too), at most [`EVENT_TIMEOUT`].
pub async fn wait_no_consumers(ch: &Chan, queue: &str) {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        let n = consumer_count(ch, queue).await;
        if n == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{queue} still has {n} consumers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every message of `queue`, exactly: reads the count from a passive declare, consumes
/// that many with auto-ack, cancels, and asserts that nothing else arrived and the queue
/// is now empty.
pub async fn drain(conn: &Conn, queue: &str) -> Vec<Delivery> {
    let mut ch = conn.channel().await;
    let n = match ch
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await
    {
        Ok(Some((_, n, _))) => n,
        Ok(None) => unreachable!("passive declare waits for declare-ok"),
        Err(e) => {
            let (code, text) = ch.expect_close().await;
            panic!("queue {queue}: passive declare failed ({e}): {code} {text}");
        }
    };
    let (tag, mut rx) = ch.consume_auto(queue).await;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        out.push(next_delivery(&mut rx).await);
    }
    ch.basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .expect("basic.cancel");
    // Deliveries sent before cancel-ok were dispatched before cancel returned.
    if let Ok(msg) = rx.try_recv() {
        let d = Delivery::from(msg);
        panic!(
            "{queue}: more messages than its count of {n}, e.g. {:?}",
            String::from_utf8_lossy(&d.body[..d.body.len().min(40)])
        );
    }
    assert_eq!(ch.message_count(queue).await, 0, "{queue} after draining");
    let Chan { ch, .. } = ch;
    ch.close().await.expect("channel.close");
    out
}

/// Passive queue.declare (exchange.declare) of a name that must not exist: 404 and the
/// channel is closed.
pub async fn assert_queue_gone(conn: &Conn, queue: &str) {
    let mut ch = conn.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await;
    assert!(r.is_err(), "queue {queue} still exists: {r:?}");
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 404, "passive declare of {queue}: {text}");
}

pub async fn assert_exchange_gone(conn: &Conn, exchange: &str) {
    let mut ch = conn.channel().await;
    let r = ch
        .exchange_declare(
            amqprs::channel::ExchangeDeclareArguments::new(exchange, "direct")
                .passive(true)
                .finish(),
        )
        .await;
    assert!(r.is_err(), "exchange {exchange} still exists");
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 404, "passive declare of exchange {exchange}: {text}");
}

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

/// `DIR/messages/shard-<i>`.
pub fn shard_dir(data: &Path, shard: usize) -> PathBuf {
    data.join("messages").join(format!("shard-{shard}"))
}

/// The segment files of a shard, oldest first, by their number. Every file there must be
/// `<n>.seg` with `n` zero-padded decimal digits.
pub fn segments(data: &Path, shard: usize) -> Vec<(u64, PathBuf)> {
    let dir = shard_dir(data, shard);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.expect("read_dir entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "spare" {
            // A deleted segment kept to be overwritten as the next one (no records of
            // its own); its bytes count in tree_bytes.
            continue;
        }
        let n = name
            .strip_suffix(".seg")
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("unexpected file {name} in {}", dir.display()));
        out.push((n, e.path()));
    }
    out.sort();
    out
}

/// The newest (highest-numbered, active) segment of a shard.
pub fn newest_segment(data: &Path, shard: usize) -> PathBuf {
    segments(data, shard)
        .pop()
        .unwrap_or_else(|| panic!("no segment in {}", shard_dir(data, shard).display()))
        .1
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len()
}

/// Total bytes of the files under `dir`, recursively (0 if it does not exist). Files
/// may disappear while it runs (segment GC).
pub fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            total += tree_bytes(&e.path());
        } else {
            total += meta.len();
        }
    }
    total
}

// ---------------------------------------------------------------------------------------
// Log lines
// ---------------------------------------------------------------------------------------

/// One log line split into level, target and message (`<ts> <LEVEL> <target>: <msg>`).
pub struct Line {
    pub level: String,
    pub target: String,
    pub text: String,
}

pub fn parse_line(raw: &str) -> Option<Line> {
    let s = raw.strip_prefix("[stderr] ").unwrap_or(raw).trim_start();
    let (_ts, s) = s.split_once(' ')?;
    let s = s.trim_start();
    let (level, s) = s.split_once(' ')?;
    let s = s.trim_start();
    let (target, text) = s.split_once(": ")?;
    Some(Line {
        level: level.to_owned(),
        target: target.to_owned(),
        text: text.to_owned(),
    })
}

/// Every parsed line the broker printed so far, in order.
pub fn lines(broker: &Broker) -> Vec<Line> {
    broker.logs().iter().filter_map(|l| parse_line(l)).collect()
}

/// The messages of the lines that contain `needle`.
pub fn texts_with(broker: &Broker, needle: &str) -> Vec<String> {
    lines(broker)
        .into_iter()
        .filter(|l| l.text.contains(needle))
        .map(|l| l.text)
        .collect()
}

/// Waits up to `timeout` for a line whose message satisfies `pred`; panics naming `code`
/// and listing the lines that contain it.
pub fn wait_line(
    broker: &Broker,
    timeout: Duration,
    code: &str,
    pred: impl Fn(&Line) -> bool,
) -> Line {
    let mut found = None;
    wait_until(timeout, || {
        found = lines(broker).into_iter().find(|l| pred(l));
        found.is_some()
    });
    found.unwrap_or_else(|| {
        panic!(
            "no matching {code} line within {timeout:?}; lines with {code}:\n  {}",
            texts_with(broker, code).join("\n  ")
        )
    })
}

/// Waits (up to [`EVENT_TIMEOUT`]) for a `sluice::ops` line whose message is exactly
/// `expected`.
pub fn expect_ops(broker: &Broker, expected: &str) {
    let code = expected
        .split(" : ")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .unwrap_or(expected)
        .to_owned();
    wait_line(broker, EVENT_TIMEOUT, &code, |l| {
        l.target == "sluice::ops" && l.text == expected
    });
}

/// Index (among [`lines`]) of the first line whose message satisfies `pred`.
pub fn position(broker: &Broker, pred: impl Fn(&str) -> bool) -> Option<usize> {
    lines(broker).iter().position(|l| pred(&l.text))
}

/// A number as log lines print it, with or without thousands separators.
pub fn parse_num(s: &str) -> u64 {
    let plain: String = s.chars().filter(|c| *c != ',').collect();
    plain
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// Where the bytes of DIR are, for failure messages.
pub fn disk_report(data: &std::path::Path) -> String {
    let mut out = format!("DIR {} bytes", tree_bytes(data));
    for shard in 0..SHARDS {
        let segs = segments(data, shard);
        out.push_str(&format!(
            "; shard {shard}: {} segments, {} bytes",
            segs.len(),
            segs.iter().map(|(_, p)| file_len(p)).sum::<u64>()
        ));
    }
    out
}
