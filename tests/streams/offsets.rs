//! Where a reader starts (`x-stream-offset`): `first`, `last` (the start of the last
//! chunk), `next` (the default), an offset (clamped to the log), a timestamp (AMQP `T`,
//! seconds: the first chunk written at or after it), an interval string (now minus
//! it); from the tail cache and from disk (a broker with no tail cache).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use amqprs::FieldValue;

use crate::common::{assert_no_delivery, next_delivery, unique, Broker, Conn};
use crate::support::*;

shard_tests!(every_offset_spec, timestamps_and_intervals, from_disk_only);

/// Reads `n` from a new reader with `args` on a new channel (prefetch 100).
async fn read(conn: &Conn, q: &str, args: &[(&str, FieldValue)], n: usize) -> Vec<(i64, String)> {
    let ch = conn.channel().await;
    prefetch(&ch, 100).await;
    let (_, mut rx) = consume(&ch, q, "", args).await;
    let got = take(&ch, &mut rx, n).await;
    assert_no_delivery(&mut rx, Duration::from_millis(200)).await;
    got
}

/// 10 messages in one batch, then one alone (its own chunk).
async fn publish_eleven(conn: &Conn, q: &str) -> Publisher {
    let mut p = Publisher::open(conn).await;
    p.publish_all(q, &bodies("m", 0..10)).await;
    p.publish_all(q, &bodies("m", 10..11)).await;
    p
}

async fn check_specs(broker: &Broker) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(&ch, &q, &[]).await;
    let mut p = publish_eleven(&conn, &q).await;
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", s("first"))], 11).await,
        expected("m", 0..11)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", s("last"))], 1).await,
        expected("m", 10..11)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", FieldValue::l(4))], 7).await,
        expected("m", 4..11)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", FieldValue::I(-3))], 11).await,
        expected("m", 0..11)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", FieldValue::B(9))], 2).await,
        expected("m", 9..11)
    );
    // Past the end: the next message published.
    let c = conn.channel().await;
    prefetch(&c, 10).await;
    let (_, mut beyond) = consume(&c, &q, "", &[("x-stream-offset", FieldValue::l(1000))]).await;
    let c2 = conn.channel().await;
    prefetch(&c2, 10).await;
    let (_, mut next) = consume(&c2, &q, "", &[("x-stream-offset", s("next"))]).await;
    let c3 = conn.channel().await;
    prefetch(&c3, 10).await;
    let (_, mut default) = consume(&c3, &q, "", &[]).await;
    for rx in [&mut beyond, &mut next, &mut default] {
        assert_no_delivery(rx, Duration::from_millis(200)).await;
    }
    p.publish_all(&q, &bodies("m", 11..12)).await;
    for rx in [&mut beyond, &mut next, &mut default] {
        let d = next_delivery(rx).await;
        assert_eq!((offset(&d), d.body.as_slice()), (11, &b"m-11"[..]));
    }
    conn.close().await;
}

async fn every_offset_spec(shards: usize) {
    let broker = Broker::start(shards);
    check_specs(&broker).await;
}

/// The same with no tail cache: every reader reads from disk.
async fn from_disk_only(shards: usize) {
    let broker = Broker::start_with_config(shards, "[stream]\ntail_cache_bytes = 0\n");
    check_specs(&broker).await;
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Batch A, then (once a new second has begun) batch B: a reader at B's second's
/// timestamp gets B only, one at a time before A gets everything, one after B waits for
/// the next message; `"2s"` right after B gets B only, `"1h"` everything.
async fn timestamps_and_intervals(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    let before = now_secs().floor() as u64;
    p.publish_all(&q, &bodies("m", 0..5)).await;
    // The time passing is what is tested: B is written at second `t` or later, A at
    // least two seconds before (so that "2s" from now falls between them while the
    // reads take less than two seconds).
    let t = now_secs().floor() as u64 + 3;
    while now_secs() < t as f64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p.publish_all(&q, &bodies("m", 5..10)).await;
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", FieldValue::T(t))], 5).await,
        expected("m", 5..10)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", FieldValue::T(before))], 10).await,
        expected("m", 0..10)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", s("2s"))], 5).await,
        expected("m", 5..10)
    );
    assert_eq!(
        read(&conn, &q, &[("x-stream-offset", s("1h"))], 10).await,
        expected("m", 0..10)
    );
    let c = conn.channel().await;
    prefetch(&c, 10).await;
    let (_, mut later) = consume(&c, &q, "", &[("x-stream-offset", FieldValue::T(t + 3600))]).await;
    assert_no_delivery(&mut later, Duration::from_millis(200)).await;
    p.publish_all(&q, &bodies("m", 10..11)).await;
    assert_eq!(offset(&next_delivery(&mut later).await), 10);
    conn.close().await;
}
