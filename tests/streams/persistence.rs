//! A stream survives a restart and `kill -9`: every confirmed message is there, in order,
//! at its offset; readers come back at different offsets (explicit ones, and tracked
//! ones where the cancel-ok had said their offset was on disk); publishing goes on at the
//! next offset. A torn tail of the newest segment is cut off (MST-1010), nothing before
//! it is lost. Run on two shards (the stream's home and its readers' shards differ) and
//! on one.

use std::collections::BTreeSet;
use std::path::PathBuf;

use amqprs::channel::{BasicAckArguments, BasicCancelArguments};
use amqprs::FieldValue;

use crate::common::{next_delivery, unique, Conn, Event};
use crate::support::*;

macro_rules! stream_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_1() {
                    $crate::common::bounded_for($crate::support::BOUND, super::$name(1)).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn shards_2() {
                    $crate::common::bounded_for($crate::support::BOUND, super::$name(2)).await
                }
            }
        )*
    };
}

stream_tests!(
    restart_keeps_the_log_and_the_tracked_offsets,
    kill9_keeps_every_confirmed_message_and_the_readers_positions,
    a_torn_tail_is_cut_off,
);

/// Reads `n` from offset `from` on a new channel of `conn`.
async fn read_at(conn: &Conn, q: &str, from: i64, n: usize) -> Vec<(i64, String)> {
    let ch = conn.channel().await;
    prefetch(&ch, 100).await;
    let (_, mut rx) = consume(&ch, q, "", &[("x-stream-offset", FieldValue::l(from))]).await;
    take(&ch, &mut rx, n).await
}

/// A tracking reader `tag` (own tag, no offset): reads `n`, acks them all, cancels.
async fn tracked_session(conn: &Conn, q: &str, tag: &str, n: usize) -> Vec<i64> {
    let ch = conn.channel().await;
    prefetch(&ch, 100).await;
    let (tag, mut rx) = consume(&ch, q, tag, &[]).await;
    let got: Vec<i64> = take(&ch, &mut rx, n)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    ch.basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .expect("cancel");
    got
}

async fn restart_keeps_the_log_and_the_tracked_offsets(shards: usize) {
    let node = Node::new(None);
    let mut broker = node.start(shards);
    let q = unique("s");
    {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        declare_stream(&ch, &q, &[]).await;
        // The tracking reader attaches at `next` before anything is published.
        let reader = conn.channel().await;
        prefetch(&reader, 100).await;
        let (tag, mut rx) = consume(&reader, &q, "keeper", &[]).await;
        let mut p = Publisher::open(&conn).await;
        p.publish_all(&q, &bodies("m", 0..100)).await;
        for want in 0..41 {
            let d = next_delivery(&mut rx).await;
            assert_eq!(offset(&d), want);
            reader
                .basic_ack(BasicAckArguments::new(d.delivery_tag, false))
                .await
                .expect("ack");
        }
        reader
            .basic_cancel(BasicCancelArguments::new(&tag))
            .await
            .expect("cancel");
        conn.close().await;
    }
    broker.assert_healthy();
    assert!(broker.stop().success());
    let broker = node.start(shards);
    let conn = broker.connect().await;
    assert_eq!(read_at(&conn, &q, 0, 100).await, expected("m", 0..100));
    assert_eq!(read_at(&conn, &q, 50, 50).await, expected("m", 50..100));
    assert_eq!(read_at(&conn, &q, 99, 1).await, expected("m", 99..100));
    assert_eq!(
        tracked_session(&conn, &q, "keeper", 59).await,
        (41..100).collect::<Vec<i64>>()
    );
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 100..101)).await;
    assert_eq!(read_at(&conn, &q, 100, 1).await, expected("m", 100..101));
    conn.close().await;
}

/// Confirmed publishing with readers at different offsets, then SIGKILL while 100
/// publishes are in flight. After the restart: offsets are contiguous from 0; every
/// confirmed message is there with its body, at the offset its publish order gives it;
/// the reader that cancelled before the kill resumes exactly after its last ack; the one
/// killed mid-read resumes at or before its last ack (at least once).
async fn kill9_keeps_every_confirmed_message_and_the_readers_positions(shards: usize) {
    const CONFIRMED_BEFORE_KILL: u64 = 500;
    const WINDOW: u64 = 100;
    let node = Node::new(None);
    let mut broker = node.start(shards);
    let q = unique("s");
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..50)).await;
    // A reader that cancels: its offset (29) is on disk.
    assert_eq!(
        tracked_session_first(&conn, &q, "cancelled", 30).await,
        (0..30).collect::<Vec<i64>>()
    );
    // A reader that keeps reading and acking while the broker dies.
    let live = conn.channel().await;
    prefetch(&live, 10).await;
    let (_, mut live_rx) = consume(
        &live,
        &q,
        "live",
        &[
            ("x-stream-offset", s("first")),
            ("x-stream-automatic-offset-tracking", FieldValue::t(true)),
        ],
    )
    .await;
    let mut live_acked = -1i64;
    let mut confirmed = 50u64;
    let mut published = 50u64;
    let mut singles = BTreeSet::new();
    while confirmed < CONFIRMED_BEFORE_KILL {
        while published - confirmed < WINDOW {
            p.ch.publish_props(
                "",
                &q,
                Default::default(),
                format!("m-{published}").as_bytes(),
            )
            .await;
            published += 1;
        }
        match p.ch.next_event().await {
            Event::Ack {
                tag,
                multiple: true,
            } => confirmed = confirmed.max(tag),
            Event::Ack { tag, .. } => {
                singles.insert(tag);
            }
            other => panic!("{other:?}"),
        }
        while singles.remove(&(confirmed + 1)) {
            confirmed += 1;
        }
        while let Ok(Some(m)) =
            tokio::time::timeout(std::time::Duration::ZERO, live_rx.recv()).await
        {
            let d = crate::common::Delivery::from(m);
            live.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
                .await
                .expect("ack");
            live_acked = live_acked.max(offset(&d));
        }
    }
    broker.kill9();
    drop(conn);
    let broker = node.start(shards);
    let conn = broker.connect().await;
    // Everything from 0: contiguous, in publish order, at least every confirmed one.
    let ch = conn.channel().await;
    prefetch(&ch, 200).await;
    let (_, mut rx) = consume(&ch, &q, "", &[("x-stream-offset", s("first"))]).await;
    let mut n = 0i64;
    while let Ok(Some(m)) =
        tokio::time::timeout(std::time::Duration::from_millis(500), rx.recv()).await
    {
        let d = crate::common::Delivery::from(m);
        assert_eq!(offset(&d), n);
        assert_eq!(String::from_utf8_lossy(&d.body), format!("m-{n}"));
        ch.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("ack");
        n += 1;
    }
    assert!(
        n as u64 >= confirmed,
        "{n} messages after the restart, {confirmed} confirmed"
    );
    assert!(
        n as u64 <= published,
        "{n} messages, only {published} published"
    );
    assert_eq!(
        tracked_session_first(&conn, &q, "cancelled", 3).await,
        vec![30, 31, 32]
    );
    let ch = conn.channel().await;
    prefetch(&ch, 10).await;
    let (_, mut rx) = consume(
        &ch,
        &q,
        "live",
        &[
            ("x-stream-offset", s("first")),
            ("x-stream-automatic-offset-tracking", FieldValue::t(true)),
        ],
    )
    .await;
    let resumed = offset(&next_delivery(&mut rx).await);
    assert!(
        resumed <= live_acked + 1,
        "resumed at {resumed}, after the last ack {live_acked}"
    );
    conn.close().await;
}

/// [`tracked_session`] with `first` and the tracking flag (so that the first session
/// reads what is already there).
async fn tracked_session_first(conn: &Conn, q: &str, tag: &str, n: usize) -> Vec<i64> {
    let ch = conn.channel().await;
    prefetch(&ch, 100).await;
    let (tag, mut rx) = consume(
        &ch,
        q,
        tag,
        &[
            ("x-stream-offset", s("first")),
            ("x-stream-automatic-offset-tracking", FieldValue::t(true)),
        ],
    )
    .await;
    let got: Vec<i64> = take(&ch, &mut rx, n)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    ch.basic_cancel(BasicCancelArguments::new(&tag))
        .await
        .expect("cancel");
    got
}

/// The one stream directory under the data dir, and its newest segment file.
fn newest_segment(data: &std::path::Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(data.join("streams"))
        .expect("streams dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let mut segs: Vec<PathBuf> = std::fs::read_dir(&dirs[0])
        .expect("stream dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    segs.pop().expect("a segment")
}

async fn a_torn_tail_is_cut_off(shards: usize) {
    let node = Node::new(None);
    let mut broker = node.start(shards);
    let q = unique("s");
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    declare_stream(&ch, &q, &[]).await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..10)).await;
    p.publish_all(&q, &bodies("m", 10..11)).await;
    conn.close().await;
    assert!(broker.stop().success());
    // Tear the last chunk (offset 10, alone in its write): 3 bytes short.
    let seg = newest_segment(node.data());
    let len = std::fs::metadata(&seg).expect("meta").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("open");
    file.set_len(len - 3).expect("truncate");
    drop(file);
    let mut broker = node.start(shards);
    let line = broker
        .wait_for_log("MST-1010", std::time::Duration::from_secs(5))
        .expect("MST-1010 logged");
    assert!(line.contains(&seg.display().to_string()), "{line}");
    let conn = broker.connect().await;
    assert_eq!(read_at(&conn, &q, 0, 10).await, expected("m", 0..10));
    // The torn chunk is gone (in real life a write a crash interrupted, never
    // confirmed; here torn by hand): the log goes on at offset 10.
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("n", 10..11)).await;
    assert_eq!(read_at(&conn, &q, 10, 1).await, expected("n", 10..11));
    conn.close().await;
    broker.assert_healthy();
}
