//! Helpers for the exchange-binding suites: declaring and binding exchanges through
//! amqprs, the raw `exchange.bind`/`exchange.unbind` frames, a confirming publisher (a
//! confirmed publish is in every queue it was routed to, so counts right after it are
//! exact), and queues and connections placed on chosen shards.

use amqprs::channel::{
    BasicPublishArguments, ConfirmSelectArguments, ExchangeBindArguments, ExchangeDeclareArguments,
    ExchangeUnbindArguments, QueueBindArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use sluice::shard::placement::home_shard;

use crate::common::wire::{Enc, Table};
use crate::common::{unique, Broker, Chan, Conn, Event, RawConn};

pub const EXCHANGE_BIND: (u16, u16) = (40, 30);
pub const EXCHANGE_BIND_OK: (u16, u16) = (40, 31);
pub const EXCHANGE_UNBIND: (u16, u16) = (40, 40);
pub const EXCHANGE_UNBIND_OK: (u16, u16) = (40, 51);

/// `exchange.bind` / `exchange.unbind` arguments (same layout): ticket, destination,
/// source, routing key, nowait, arguments.
pub fn bind_args(
    destination: &str,
    source: &str,
    key: &str,
    nowait: bool,
    args: &Table,
) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(destination)
        .shortstr(source)
        .shortstr(key)
        .bits(&[nowait])
        .table(args)
        .done()
}

/// Sends exchange.bind (or unbind) on `channel` without waiting.
pub fn send_bind(c: &mut RawConn, channel: u16, destination: &str, source: &str, unbind: bool) {
    let id = if unbind {
        EXCHANGE_UNBIND
    } else {
        EXCHANGE_BIND
    };
    c.send_method(
        channel,
        id,
        &bind_args(destination, source, "", false, &vec![]),
    )
    .expect("send exchange.bind/unbind");
}

/// A queue name (with `prefix`) whose home is `shard`.
pub fn queue_on(prefix: &str, shard: usize, shards: usize) -> String {
    loop {
        let name = unique(prefix);
        if usize::from(home_shard("/", name.as_bytes(), shards)) == shard {
            return name;
        }
    }
}

/// A connection accepted by `shard` (server-named queues live on the declaring
/// connection's shard), with one channel.
pub async fn connect_on(broker: &Broker, shard: usize) -> (Conn, Chan) {
    for _ in 0..200 {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        let probe = ch.declare_server_named().await;
        if usize::from(home_shard("/", probe.as_bytes(), broker.shards())) == shard {
            return (conn, ch);
        }
        conn.close().await;
    }
    panic!("no connection accepted by shard {shard} in 200 tries");
}

pub async fn declare_exchange(ch: &Chan, name: &str, kind: &str) {
    ch.exchange_declare(ExchangeDeclareArguments::new(name, kind))
        .await
        .unwrap_or_else(|e| panic!("exchange.declare {name}: {e}"));
}

pub async fn declare_auto_delete(ch: &Chan, name: &str, kind: &str) {
    ch.exchange_declare(
        ExchangeDeclareArguments::new(name, kind)
            .auto_delete(true)
            .finish(),
    )
    .await
    .unwrap_or_else(|e| panic!("exchange.declare {name} (auto-delete): {e}"));
}

/// exchange.bind `source` → `destination` with `key`, through amqprs.
pub async fn link(ch: &Chan, source: &str, destination: &str, key: &str) {
    link_with(ch, source, destination, key, FieldTable::new()).await
}

pub async fn link_with(ch: &Chan, source: &str, destination: &str, key: &str, args: FieldTable) {
    ch.exchange_bind(
        ExchangeBindArguments::new(destination, source, key)
            .arguments(args)
            .finish(),
    )
    .await
    .unwrap_or_else(|e| panic!("exchange.bind {source} -> {destination} ({key}): {e}"));
}

pub async fn unlink(ch: &Chan, source: &str, destination: &str, key: &str) {
    ch.exchange_unbind(ExchangeUnbindArguments::new(destination, source, key))
        .await
        .unwrap_or_else(|e| panic!("exchange.unbind {source} -> {destination} ({key}): {e}"));
}

/// Declares `queue` and binds it to `exchange` with `key`.
pub async fn queue_bound(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.declare_queue(queue).await;
    bind_queue(ch, queue, exchange, key).await;
}

pub async fn bind_queue(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.queue_bind(QueueBindArguments::new(queue, exchange, key))
        .await
        .unwrap_or_else(|e| panic!("queue.bind {queue} to {exchange} ({key}): {e}"));
}

/// A headers table of string values.
pub fn headers(pairs: &[(&str, &str)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in pairs {
        t.insert(
            (*k).try_into().expect("field name"),
            FieldValue::S((*v).try_into().expect("long string")),
        );
    }
    t
}

/// Whether an exchange exists (a passive declare on a probe channel).
pub async fn exchange_exists(conn: &Conn, name: &str) -> bool {
    let mut probe = conn.channel().await;
    let r = probe
        .exchange_declare(
            ExchangeDeclareArguments::new(name, "fanout")
                .passive(true)
                .finish(),
        )
        .await;
    match r {
        Ok(()) => true,
        Err(_) => {
            let (code, text) = probe.expect_close().await;
            assert_eq!(code, 404, "passive exchange.declare {name}: {text}");
            false
        }
    }
}

/// Exact message counts (passive declares).
pub async fn assert_counts(ch: &Chan, expected: &[(&str, u32)]) {
    for (queue, n) in expected {
        assert_eq!(
            ch.message_count(queue).await,
            *n,
            "messages in queue {queue}"
        );
    }
}

/// A channel in confirm mode whose every publish waits for its confirm: once `publish`
/// returns, the message is in every queue it was routed to.
pub struct Publisher {
    pub chan: Chan,
    sent: u64,
}

impl Publisher {
    pub async fn new(chan: Chan) -> Publisher {
        chan.confirm_select(ConfirmSelectArguments::default())
            .await
            .expect("confirm.select");
        Publisher { chan, sent: 0 }
    }

    pub async fn publish(&mut self, exchange: &str, key: &str) {
        self.publish_props(exchange, key, BasicProperties::default(), false)
            .await;
    }

    pub async fn publish_headers(&mut self, exchange: &str, key: &str, h: FieldTable) {
        let props = BasicProperties::default().with_headers(h).finish();
        self.publish_props(exchange, key, props, false).await;
    }

    /// A mandatory publish; returns the basic.return (code, text, exchange, key) if the
    /// message was returned (it comes before the confirm).
    pub async fn publish_mandatory(
        &mut self,
        exchange: &str,
        key: &str,
    ) -> Option<(u16, String, String, String)> {
        self.publish_props(exchange, key, BasicProperties::default(), true)
            .await
    }

    async fn publish_props(
        &mut self,
        exchange: &str,
        key: &str,
        props: BasicProperties,
        mandatory: bool,
    ) -> Option<(u16, String, String, String)> {
        self.chan
            .basic_publish(
                props,
                b"e2e".to_vec(),
                BasicPublishArguments::new(exchange, key)
                    .mandatory(mandatory)
                    .finish(),
            )
            .await
            .expect("basic.publish");
        self.sent += 1;
        let mut returned = None;
        loop {
            match self.chan.next_event().await {
                Event::Return {
                    code,
                    text,
                    exchange,
                    routing_key,
                    ..
                } => returned = Some((code, text, exchange, routing_key)),
                Event::Ack { tag, .. } if tag >= self.sent => return returned,
                Event::Ack { .. } => {}
                other => panic!(
                    "waiting for the confirm of publish {}: {other:?}",
                    self.sent
                ),
            }
        }
    }
}
