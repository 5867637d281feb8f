//! amqprs helpers: declaring and binding with arguments, subscribers (fast, never
//! acking, manual with prefetch), numbered publishes and gets, publisher confirms, and
//! the checks of a slow-consumer close as an amqprs user sees it: 506 `Consuming too
//! slow.` on the channel, the connection still usable, the queue gone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicPublishArguments, BasicQosArguments, ConfirmSelectArguments,
    QueueBindArguments, QueueDeclareArguments,
};
use amqprs::BasicProperties;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::{next_delivery, next_event, Broker, Chan, Conn, Event};
use crate::harness::{
    amqprs_table, assert_delete_logged, assert_seqs, body, home, seq_of, Arg, ACT, END, TOO_SLOW,
};

// ---------------------------------------------------------------------------------------
// amqprs: declare, subscribe, publish
// ---------------------------------------------------------------------------------------

/// Declares queue `name` (empty: server-named exclusive) with `args`, binds it to
/// `exchange` with `key`, and returns its name.
pub async fn declare_bound(
    ch: &Chan,
    name: &str,
    durable: bool,
    args: &[(&str, Arg)],
    exchange: &str,
    key: &str,
) -> String {
    let mut a = if name.is_empty() {
        QueueDeclareArguments::exclusive_server_named()
    } else {
        QueueDeclareArguments::new(name)
    };
    a.durable(durable).arguments(amqprs_table(args));
    let (queue, _, _) = ch
        .queue_declare(a.finish())
        .await
        .expect("queue.declare")
        .expect("declare-ok");
    ch.queue_bind(QueueBindArguments::new(&queue, exchange, key))
        .await
        .expect("queue.bind");
    queue
}

/// A subscriber on its own connection: its queue, bound to `amq.topic` with `key`.
pub struct Sub {
    pub conn: Conn,
    pub ch: Chan,
    pub queue: String,
    pub rx: UnboundedReceiver<amqprs::channel::ConsumerMessage>,
}

impl Sub {
    /// A fast subscriber: server-named queue, no policy, auto-ack.
    pub async fn fast(broker: &Broker, key: &str) -> Sub {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        let queue = declare_bound(&ch, "", false, &[], "amq.topic", key).await;
        let (_, rx) = ch.consume_auto(&queue).await;
        Sub {
            conn,
            ch,
            queue,
            rx,
        }
    }

    /// A subscriber that reads every delivery but never acks (manual ack, prefetch 0:
    /// no limit on unacked deliveries). `name` empty: a server-named exclusive queue.
    pub async fn never_acking(broker: &Broker, name: &str, args: &[(&str, Arg)], key: &str) -> Sub {
        Sub::manual(broker, name, false, args, key, 0).await
    }

    /// A manual-ack subscriber with `prefetch` (0 = unlimited).
    pub async fn manual(
        broker: &Broker,
        name: &str,
        durable: bool,
        args: &[(&str, Arg)],
        key: &str,
        prefetch: u16,
    ) -> Sub {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        let queue = declare_bound(&ch, name, durable, args, "amq.topic", key).await;
        if prefetch > 0 {
            ch.basic_qos(BasicQosArguments::new(0, prefetch, false))
                .await
                .expect("basic.qos");
        }
        let (_, rx) = ch.consume_manual(&queue).await;
        Sub {
            conn,
            ch,
            queue,
            rx,
        }
    }

    /// Reads numbered deliveries up to the END sentinel and asserts they are exactly
    /// 1..=n, in order.
    pub async fn expect_all(&mut self, n: u32) {
        let got = read_to_end(&mut self.rx).await;
        assert_seqs(&format!("subscriber {}", self.queue), &got, 1..=n);
    }

    /// Acks every delivery up to `tag`.
    pub async fn ack_upto(&self, tag: u64) {
        self.ch
            .basic_ack(BasicAckArguments::new(tag, true))
            .await
            .expect("basic.ack");
    }
}

/// Reads deliveries up to the END sentinel; returns their sequence numbers.
pub async fn read_to_end(rx: &mut UnboundedReceiver<amqprs::channel::ConsumerMessage>) -> Vec<u32> {
    let mut got = Vec::new();
    loop {
        let d = next_delivery(rx).await;
        if d.body == END {
            return got;
        }
        got.push(seq_of(&d.body));
    }
}

/// Drains whatever deliveries are already buffered (no waiting).
pub fn buffered(rx: &mut UnboundedReceiver<amqprs::channel::ConsumerMessage>) -> Vec<u32> {
    let mut got = Vec::new();
    while let Ok(m) = rx.try_recv() {
        let d = crate::common::Delivery::from(m);
        if d.body != END {
            got.push(seq_of(&d.body));
        }
    }
    got
}

/// A publisher connection and channel.
pub async fn publisher(broker: &Broker) -> (Conn, Chan) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    (conn, ch)
}

/// A publisher in confirm mode.
pub async fn confirming_publisher(broker: &Broker) -> (Conn, Chan) {
    let (conn, ch) = publisher(broker).await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .expect("confirm.select");
    (conn, ch)
}

/// Publishes the numbered messages `seqs` with `size`-byte bodies.
pub async fn publish_seqs(
    ch: &Chan,
    exchange: &str,
    key: &str,
    seqs: impl IntoIterator<Item = u32>,
    size: usize,
) {
    for i in seqs {
        ch.publish(exchange, key, &body(i, size)).await;
    }
}

/// Publishes the END sentinel.
pub async fn publish_end(ch: &Chan, exchange: &str, key: &str) {
    ch.publish(exchange, key, END).await;
}

/// A publisher at a steady pace: `per_tick` numbered 64-byte messages (1, 2, 3, …) to
/// `amq.topic` with `key`, then `tick` of sleep, until stopped.
pub struct Pacer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u32>,
}

impl Pacer {
    pub fn start(ch: &Chan, key: &str, per_tick: u32, tick: Duration) -> Pacer {
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (stop, ch, key) = (Arc::clone(&stop), ch.ch.clone(), key.to_owned());
            tokio::spawn(async move {
                let mut sent = 0u32;
                while !stop.load(Ordering::Acquire) {
                    for _ in 0..per_tick {
                        sent += 1;
                        ch.basic_publish(
                            BasicProperties::default(),
                            body(sent, 64),
                            BasicPublishArguments::new("amq.topic", &key),
                        )
                        .await
                        .expect("basic.publish");
                    }
                    tokio::time::sleep(tick).await;
                }
                sent
            })
        };
        Pacer { stop, task }
    }

    /// Stops publishing; returns how many messages were published.
    pub async fn stop(self) -> u32 {
        self.stop.store(true, Ordering::Release);
        self.task.await.expect("publisher task")
    }
}

/// `basic.get` (no-ack) until the queue is empty; returns the sequence numbers and the
/// redelivered flags.
pub async fn get_all(ch: &Chan, queue: &str) -> Vec<(u32, bool)> {
    let mut got = Vec::new();
    while let Some(m) = ch.get(queue, true).await {
        let redelivered = m.0.redelivered();
        got.push((seq_of(&m.2), redelivered));
    }
    got
}

// ---------------------------------------------------------------------------------------
// amqprs: the slow-consumer close
// ---------------------------------------------------------------------------------------

/// Waits for the broker's channel.close and asserts 506 `Consuming too slow.` with class
/// and method 0.
pub async fn expect_too_slow(ch: &mut Chan) {
    let deadline = tokio::time::Instant::now() + ACT;
    loop {
        let ev = tokio::time::timeout_at(deadline, ch.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no channel.close within {ACT:?}"))
            .expect("channel event stream ended");
        match ev {
            Event::ChannelClose {
                code,
                text,
                class_id,
                method_id,
            } => {
                assert_eq!(
                    (code, text.as_str(), class_id, method_id),
                    (506, TOO_SLOW, 0, 0),
                    "slow-consumer close"
                );
                return;
            }
            Event::Flow { .. } => continue,
            other => panic!("expected channel.close 506, got {other:?}"),
        }
    }
}

/// The connection survived the close: no connection.close arrived, and a new channel
/// can declare a queue, publish to it and get the message back.
pub async fn assert_usable(conn: &mut Conn) {
    if let Ok(ev) = conn.events.try_recv() {
        panic!("the subscriber's connection got {ev:?}");
    }
    assert!(
        conn.conn.is_open(),
        "the subscriber's connection was closed"
    );
    let ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    ch.publish("", &q, b"still usable").await;
    let m = ch.get_eventually(&q, true).await;
    assert_eq!(m.2, b"still usable");
    ch.ch.clone().close().await.expect("channel.close");
}

/// Whether `queue` exists: a passive declare on a fresh channel (404 = gone).
pub async fn queue_exists(conn: &Conn, queue: &str) -> bool {
    let mut ch = conn.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await;
    match r {
        Ok(_) => {
            ch.ch.clone().close().await.expect("channel.close");
            true
        }
        Err(_) => {
            let (code, text) = ch.expect_close().await;
            assert_eq!(code, 404, "passive queue.declare of {queue}: {text}");
            assert_eq!(text, format!("NOT_FOUND - no queue '{queue}' in vhost '/'"));
            false
        }
    }
}

/// Everything a user relies on after a slow-consumer delete, seen from amqprs: the 506
/// close, the connection usable, the queue gone, and the log lines.
pub async fn assert_slow_deleted(broker: &Broker, sub: &mut Sub, threshold: &str) -> String {
    expect_too_slow(&mut sub.ch).await;
    assert_usable(&mut sub.conn).await;
    wait_queue_gone(&sub.conn, &sub.queue).await;
    assert_delete_logged(broker, &sub.queue, threshold, 1).await
}

/// Polls passive declares until `queue` is gone (404).
pub async fn wait_queue_gone(conn: &Conn, queue: &str) {
    let deadline = tokio::time::Instant::now() + ACT;
    while queue_exists(conn, queue).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "queue {queue} still exists {ACT:?} after the delete"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts `rx` has no channel.close (or other server event) pending.
pub fn assert_no_close(ch: &mut Chan, what: &str) {
    if let Ok(ev) = ch.events.try_recv() {
        panic!("{what}: unexpected {ev:?}");
    }
    assert!(ch.ch.is_open(), "{what}: channel closed");
}

// ---------------------------------------------------------------------------------------
// Shards (amqprs)
// ---------------------------------------------------------------------------------------

/// The shard an amqprs connection landed on: server-named queues are created on the
/// declaring connection's shard.
pub async fn shard_of(conn: &Conn, shards: usize) -> u16 {
    let ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    ch.ch.clone().close().await.expect("channel.close");
    home(&q, shards)
}

// ---------------------------------------------------------------------------------------
// Publisher confirms (amqprs)
// ---------------------------------------------------------------------------------------

/// Collects the confirms of tags `first..=last` (earlier tags were confirmed before):
/// tag -> acked. A multiple ack covers every tag not yet confirmed; a nack must not be
/// `multiple`; no tag is confirmed twice.
pub async fn confirms(ch: &mut Chan, first: u64, last: u64) -> BTreeMap<u64, bool> {
    let mut state = BTreeMap::new();
    let want = (last + 1 - first) as usize;
    while state.len() < want {
        match next_chan_event(ch).await {
            Event::Ack { tag, multiple } => {
                assert!(
                    tag >= first && tag <= last,
                    "ack for tag {tag}, waiting for {first}..={last}"
                );
                if multiple {
                    for t in first..=tag {
                        state.entry(t).or_insert(true);
                    }
                } else {
                    assert!(
                        state.insert(tag, true).is_none(),
                        "tag {tag} confirmed twice"
                    );
                }
            }
            Event::Nack { tag, multiple } => {
                assert!(!multiple, "basic.nack with multiple=true for tag {tag}");
                assert!(
                    tag >= first && tag <= last,
                    "nack for tag {tag}, waiting for {first}..={last}"
                );
                assert!(
                    state.insert(tag, false).is_none(),
                    "tag {tag} confirmed twice"
                );
            }
            other => panic!("waiting for confirms, got {other:?}"),
        }
    }
    state
}

/// Waits until tags `first..=last` are all acked.
pub async fn wait_all_acked(ch: &mut Chan, first: u64, last: u64) {
    let got = confirms(ch, first, last).await;
    let nacked: Vec<u64> = got.iter().filter(|(_, a)| !**a).map(|(t, _)| *t).collect();
    assert!(nacked.is_empty(), "publishes nacked: {nacked:?}");
}

/// Next amqprs channel event.
pub async fn next_chan_event(ch: &mut Chan) -> Event {
    next_event(&mut ch.events).await
}
