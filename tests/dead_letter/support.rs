//! Helpers for the dead-letter suite: queue names placed on a chosen shard (so that with
//! two shards the dead-letter target lives on the other shard than the source), argument
//! tables, declares, and the headers of a delivered message as plain values.

use std::collections::BTreeMap;

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};

use crate::common::{unique, Chan};

/// `sluice`'s home-shard hash (FNV-1a of vhost, NUL, name), to place queues.
fn home(name: &str, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in "/".as_bytes().iter().chain(&[0u8]).chain(name.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % shards as u64) as usize
}

/// A unique queue name whose home is `shard` (mod `shards`).
pub fn name_on(prefix: &str, shard: usize, shards: usize) -> String {
    loop {
        let n = unique(prefix);
        if home(&n, shards) == shard % shards {
            return n;
        }
    }
}

/// A source queue on shard 0 and a target on shard 1 (the same shard with one).
pub fn source_and_target(shards: usize) -> (String, String) {
    (name_on("dl-src", 0, shards), name_on("dl-dst", 1, shards))
}

pub fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in entries {
        t.insert((*k).try_into().expect("field name"), v.clone());
    }
    t
}

pub fn s(v: &str) -> FieldValue {
    FieldValue::S(v.try_into().expect("long string"))
}

/// Arguments dead-lettering to `exchange`, with a routing key if given.
pub fn dlx(exchange: &str, routing_key: Option<&str>, more: &[(&str, FieldValue)]) -> FieldTable {
    let mut entries = vec![("x-dead-letter-exchange", s(exchange))];
    if let Some(rk) = routing_key {
        entries.push(("x-dead-letter-routing-key", s(rk)));
    }
    entries.extend(more.iter().cloned());
    table(&entries)
}

pub async fn declare(ch: &Chan, name: &str, arguments: FieldTable) {
    ch.ch
        .queue_declare(
            QueueDeclareArguments::new(name)
                .arguments(arguments)
                .finish(),
        )
        .await
        .unwrap_or_else(|e| panic!("queue.declare {name}: {e}"));
}

pub async fn exchange(ch: &Chan, name: &str, kind: &str) {
    ch.ch
        .exchange_declare(ExchangeDeclareArguments::new(name, kind))
        .await
        .unwrap_or_else(|e| panic!("exchange.declare {name}: {e}"));
}

pub async fn bind(ch: &Chan, queue: &str, exchange: &str, key: &str) {
    ch.ch
        .queue_bind(QueueBindArguments::new(queue, exchange, key))
        .await
        .unwrap_or_else(|e| panic!("queue.bind {queue}: {e}"));
}

/// A header value as plain data.
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    Str(String),
    Int(i64),
    Time(u64),
    Arr(Vec<V>),
    Tab(BTreeMap<String, V>),
    Other(String),
}

fn plain(v: &FieldValue) -> V {
    match v {
        FieldValue::S(x) => V::Str(x.to_string()),
        FieldValue::l(x) => V::Int(*x),
        FieldValue::I(x) => V::Int(i64::from(*x)),
        FieldValue::T(x) => V::Time(*x),
        FieldValue::A(a) => V::Arr(
            Vec::<FieldValue>::from(a.clone())
                .iter()
                .map(plain)
                .collect(),
        ),
        FieldValue::F(t) => V::Tab(plain_table(t)),
        other => V::Other(format!("{other:?}")),
    }
}

fn plain_table(t: &FieldTable) -> BTreeMap<String, V> {
    t.as_ref()
        .iter()
        .map(|(k, v)| (k.to_string(), plain(v)))
        .collect()
}

/// The message's headers as plain values (empty without headers).
pub fn headers(props: &BasicProperties) -> BTreeMap<String, V> {
    props.headers().map(plain_table).unwrap_or_default()
}

/// The `x-death` entries, most recent first, with `time` checked (a timestamp within a
/// minute of now) and removed so the rest compares exactly.
pub fn deaths(props: &BasicProperties) -> Vec<BTreeMap<String, V>> {
    let h = headers(props);
    let Some(V::Arr(items)) = h.get("x-death") else {
        panic!("no x-death array in {h:?}");
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    items
        .iter()
        .map(|d| {
            let V::Tab(mut t) = d.clone() else {
                panic!("x-death entry not a table: {d:?}");
            };
            match t.remove("time") {
                Some(V::Time(at)) => assert!(at.abs_diff(now) < 60, "time {at} vs now {now}"),
                other => panic!("x-death time: {other:?}"),
            }
            t
        })
        .collect()
}

/// An expected `x-death` entry (without `time`).
pub fn death(
    count: i64,
    reason: &str,
    queue: &str,
    exchange: &str,
    routing_keys: &[&str],
    original_expiration: Option<&str>,
) -> BTreeMap<String, V> {
    let mut t = BTreeMap::new();
    t.insert("count".into(), V::Int(count));
    t.insert("reason".into(), V::Str(reason.into()));
    t.insert("queue".into(), V::Str(queue.into()));
    t.insert("exchange".into(), V::Str(exchange.into()));
    t.insert(
        "routing-keys".into(),
        V::Arr(routing_keys.iter().map(|k| V::Str((*k).into())).collect()),
    );
    if let Some(e) = original_expiration {
        t.insert("original-expiration".into(), V::Str(e.into()));
    }
    t
}

/// Asserts the `x-first-death-*` and `x-last-death-*` headers.
pub fn assert_first_last(
    props: &BasicProperties,
    first: (&str, &str, &str),
    last: (&str, &str, &str),
) {
    let h = headers(props);
    let get = |k: &str| h.get(k).cloned();
    let st = |v: &str| Some(V::Str(v.into()));
    assert_eq!(get("x-first-death-reason"), st(first.0), "{h:?}");
    assert_eq!(get("x-first-death-queue"), st(first.1), "{h:?}");
    assert_eq!(get("x-first-death-exchange"), st(first.2), "{h:?}");
    assert_eq!(get("x-last-death-reason"), st(last.0), "{h:?}");
    assert_eq!(get("x-last-death-queue"), st(last.1), "{h:?}");
    assert_eq!(get("x-last-death-exchange"), st(last.2), "{h:?}");
}
