//! Filtering: publishers set `x-stream-filter-value`; a reader with `x-stream-filter` (a
//! string or an array of strings) receives exactly the messages carrying one of its
//! values, and those carrying none only with `x-stream-match-unfiltered = true`; a
//! reader without a filter receives everything. Filtered-out messages cost no credit.
//! From the tail cache and from disk.

use std::time::Duration;

use amqprs::{BasicProperties, FieldArray, FieldTable, FieldValue};

use crate::common::{assert_no_delivery, unique, Broker, Conn};
use crate::support::*;

shard_tests!(filters_from_the_cache, filters_from_disk);

/// 12 messages: `r0, b1, n2, r3, …` — red, blue, unfiltered in turn.
async fn publish_colours(conn: &Conn, q: &str) {
    let mut p = Publisher::open(conn).await;
    for i in 0..12u64 {
        let (name, value) = match i % 3 {
            0 => ("r", Some("red")),
            1 => ("b", Some("blue")),
            _ => ("n", None),
        };
        let mut props = BasicProperties::default();
        if let Some(v) = value {
            let mut h = FieldTable::new();
            h.insert("x-stream-filter-value".try_into().expect("name"), s(v));
            props.with_headers(h);
        }
        p.ch.publish_props("", q, props, format!("{name}{i}").as_bytes())
            .await;
        p.published += 1;
    }
    p.wait_confirmed().await;
}

/// The bodies a reader with `args` receives from `first` (prefetch 2: a filter that
/// skipped a message but spent credit on it would stall).
async fn bodies_for(conn: &Conn, q: &str, args: &[(&str, FieldValue)], n: usize) -> Vec<String> {
    let ch = conn.channel().await;
    prefetch(&ch, 2).await;
    let mut all = vec![("x-stream-offset", s("first"))];
    all.extend(args.iter().cloned());
    let (_, mut rx) = consume(&ch, q, "", &all).await;
    let got = take(&ch, &mut rx, n).await;
    assert_no_delivery(&mut rx, Duration::from_millis(200)).await;
    got.into_iter().map(|(_, b)| b).collect()
}

async fn check(broker: &Broker) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(&ch, &q, &[]).await;
    publish_colours(&conn, &q).await;
    assert_eq!(
        bodies_for(&conn, &q, &[("x-stream-filter", s("red"))], 4).await,
        ["r0", "r3", "r6", "r9"]
    );
    assert_eq!(
        bodies_for(
            &conn,
            &q,
            &[
                ("x-stream-filter", s("blue")),
                ("x-stream-match-unfiltered", FieldValue::t(true))
            ],
            8
        )
        .await,
        ["b1", "n2", "b4", "n5", "b7", "n8", "b10", "n11"]
    );
    let both = FieldArray::try_from(vec![s("red"), s("blue")]).expect("array");
    assert_eq!(
        bodies_for(&conn, &q, &[("x-stream-filter", FieldValue::A(both))], 8).await,
        ["r0", "b1", "r3", "b4", "r6", "b7", "r9", "b10"]
    );
    assert_eq!(
        bodies_for(&conn, &q, &[("x-stream-filter", s("green"))], 0).await,
        Vec::<String>::new()
    );
    // No filter: everything; match-unfiltered alone means nothing.
    assert_eq!(
        bodies_for(
            &conn,
            &q,
            &[("x-stream-match-unfiltered", FieldValue::t(true))],
            12
        )
        .await
        .len(),
        12
    );
    conn.close().await;
}

async fn filters_from_the_cache(shards: usize) {
    check(&Broker::start(shards)).await;
}

async fn filters_from_disk(shards: usize) {
    check(&Broker::start_with_config(
        shards,
        "[stream]\ntail_cache_bytes = 0\n",
    ))
    .await;
}
