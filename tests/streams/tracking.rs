//! Offset tracking (sluice's, as LavinMQ's): a consumer with its own tag and no
//! `x-stream-offset`, or with `x-stream-automatic-offset-tracking = true`, resumes after
//! the highest offset it acknowledged when it comes back with the same tag; a
//! server-generated tag, an explicit offset without the flag, or the flag set to false
//! do not track. `basic.cancel-ok` of a tracking consumer means its offset is on disk:
//! it survives a restart and `kill -9`. Without the cancel, a kill -9 resumes at or
//! before the last ack (at least once), never after it.

use amqprs::channel::{BasicAckArguments, BasicCancelArguments};
use amqprs::FieldValue;

use crate::common::{next_delivery, unique, Broker, Chan, Conn};
use crate::support::*;

shard_tests!(
    own_tags_and_the_flag_track,
    generated_tags_and_explicit_offsets_do_not
);

/// Consumes with `tag` and `args` (prefetch 100) on a new channel, acks each delivery
/// up to and including offset `ack_upto` (the ones after stay unacked), reads `n`, then
/// cancels (waiting for cancel-ok). Returns the offsets received.
async fn session(
    conn: &Conn,
    q: &str,
    tag: &str,
    args: &[(&str, FieldValue)],
    n: usize,
    ack_upto: i64,
) -> Vec<i64> {
    let ch: Chan = conn.channel().await;
    prefetch(&ch, 100).await;
    let (tag, mut rx) = consume(&ch, q, tag, args).await;
    let mut got = Vec::new();
    for _ in 0..n {
        let d = next_delivery(&mut rx).await;
        let o = offset(&d);
        if o <= ack_upto {
            ch.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
                .await
                .expect("ack");
        }
        got.push(o);
    }
    ch.basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .expect("basic.cancel");
    got
}

async fn own_tags_and_the_flag_track(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..10)).await;
    // An own tag, no offset, nothing tracked yet: `next`. It sees what comes next.
    let ch1 = conn.channel().await;
    prefetch(&ch1, 100).await;
    let (_, mut rx) = consume(&ch1, &q, "app-1", &[]).await;
    p.publish_all(&q, &bodies("m", 10..20)).await;
    for want in 10..20 {
        let d = next_delivery(&mut rx).await;
        assert_eq!(offset(&d), want);
        if want <= 15 {
            ch1.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
                .await
                .expect("ack");
        }
    }
    ch1.basic_cancel(BasicCancelArguments::new("app-1"))
        .await
        .expect("cancel");
    // Back with the same tag: after its highest ack (15), the unacked ones again.
    let again = session(&conn, &q, "app-1", &[], 4, -1).await;
    assert_eq!(again, vec![16, 17, 18, 19]);
    // The flag with an offset: the first time from that offset, then resumed.
    let flag = [
        ("x-stream-offset", s("first")),
        ("x-stream-automatic-offset-tracking", FieldValue::t(true)),
    ];
    assert_eq!(
        session(&conn, &q, "app-2", &flag, 5, 2).await,
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        session(&conn, &q, "app-2", &flag, 3, 99).await,
        vec![3, 4, 5]
    );
    assert_eq!(session(&conn, &q, "app-2", &flag, 2, 99).await, vec![6, 7]);
    conn.close().await;
}

async fn generated_tags_and_explicit_offsets_do_not(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..10)).await;
    let first = [("x-stream-offset", s("first"))];
    // An explicit offset without the flag: the offset, every time.
    assert_eq!(
        session(&conn, &q, "own", &first, 3, 99).await,
        vec![0, 1, 2]
    );
    assert_eq!(
        session(&conn, &q, "own", &first, 3, 99).await,
        vec![0, 1, 2]
    );
    // The flag set to false with an own tag and no offset: `next` every time.
    let off = [("x-stream-automatic-offset-tracking", FieldValue::t(false))];
    let ch1 = conn.channel().await;
    prefetch(&ch1, 10).await;
    let (tag, mut rx) = consume(&ch1, &q, "quiet", &off).await;
    p.publish_all(&q, &bodies("m", 10..11)).await;
    let d = next_delivery(&mut rx).await;
    assert_eq!(offset(&d), 10);
    ch1.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
        .await
        .expect("ack");
    ch1.basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .expect("cancel");
    let ch2 = conn.channel().await;
    prefetch(&ch2, 10).await;
    let (_, mut rx) = consume(&ch2, &q, "quiet", &off).await;
    crate::common::assert_no_delivery(&mut rx, std::time::Duration::from_millis(200)).await;
    // A server-generated tag is never tracked: `first` each time.
    assert_eq!(session(&conn, &q, "", &first, 2, 99).await, vec![0, 1]);
    assert_eq!(session(&conn, &q, "", &first, 2, 99).await, vec![0, 1]);
    conn.close().await;
}
