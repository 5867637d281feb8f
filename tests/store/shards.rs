//! Restarting on the same directory with a different `--shards`: the queues re-home
//! (home = hash(vhost, name) mod N), the broker says how many moved (MST-1007, only when
//! the count changed), and every queue keeps its messages in order.

use crate::common::{Broker, EVENT_TIMEOUT};
use crate::support::*;

store_tests!(shards_2_to_1_and_back, shards_1_to_2);

const PER: u64 = 20;
const SIZE: usize = 100;

/// Queues whose home differs between `old` and `new` shards.
fn moved(qs: &[String], old: usize, new: usize) -> usize {
    qs.iter().filter(|q| home(q, old) != home(q, new)).count()
}

/// Exactly one MST-1007 line, ending with the contract's text for these numbers.
fn expect_rehomed(broker: &Broker, moved: usize, total: usize, old: usize, new: usize) {
    let expected = format!(
        "MST-1007 : Queues re-homed : {moved} of {total} durable queues moved from {old} to \
         {new} shards"
    );
    let line = wait_line(broker, EVENT_TIMEOUT, "MST-1007", |l| {
        l.text.contains("MST-1007 : ")
    });
    assert!(
        line.target == "sluice::ops" && line.text.ends_with(&expected),
        "expected `{expected}`, got `{}` ({})",
        line.text,
        line.target
    );
    assert_eq!(texts_with(broker, "MST-1007").len(), 1, "one MST-1007 line");
}

fn expect_not_rehomed(broker: &Broker) {
    let lines = texts_with(broker, "MST-1007");
    assert!(
        lines.is_empty(),
        "MST-1007 without a change of shard count: {lines:?}"
    );
}

fn assert_meta(node: &Node) {
    let meta = node.data().join("messages").join("store.meta");
    assert!(meta.is_file(), "{} missing", meta.display());
}

/// Declares `qs` durable and publishes messages `range` to each, confirmed.
async fn fill(broker: &Broker, qs: &[String], range: std::ops::Range<u64>, declare: bool) {
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    if declare {
        for q in qs {
            declare_durable(&p.ch, q).await;
        }
    }
    for i in range {
        for q in qs {
            p.publish("", q, persistent(), &body(q, i, SIZE)).await;
        }
    }
    p.wait_all().await;
    conn.close().await;
}

/// Eight durable queues, four homed on each shard under `--shards 2`, 20 persistent
/// messages each (confirmed); SIGTERM.
/// - `--shards 1` on the same directory: `MST-1007 : Queues re-homed : 4 of 8 durable
///   queues moved from 2 to 1 shards`; every queue holds its 20; basic.get takes 0..9 of
///   each, in order, not redelivered; 20..24 published to each (confirmed): 15 each;
///   SIGTERM;
/// - `--shards 2` again: `... 4 of 8 ... from 1 to 2 shards`; each queue holds exactly
///   10..24, in order, not redelivered.
async fn shards_2_to_1_and_back() {
    let node = Node::new(None);
    let qs = queues_on("store-rehome", 2, 4);
    let n = moved(&qs, 2, 1);
    assert_eq!(n, 4, "the queues homed on shard 1 move");

    let mut broker = node.start(2);
    fill(&broker, &qs, 0..PER, true).await;
    expect_not_rehomed(&broker);
    restart(&mut broker, &node, 1);
    expect_rehomed(&broker, n, qs.len(), 2, 1);
    assert_meta(&node);
    {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        for q in &qs {
            assert_eq!(ch.message_count(q).await, PER as u32, "{q} on 1 shard");
            for i in 0..10 {
                let (get_ok, props, content) = ch.get_eventually(q, true).await;
                assert_eq!(parse_body(&content), (q.clone(), i), "basic.get from {q}");
                assert!(content == body(q, i, SIZE), "body of {q}#{i}");
                assert_eq!(props.delivery_mode(), Some(2));
                assert!(!get_ok.redelivered(), "{q}#{i} redelivered");
            }
        }
        conn.close().await;
    }
    fill(&broker, &qs, PER..PER + 5, false).await;
    {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        for q in &qs {
            assert_eq!(
                ch.message_count(q).await,
                15,
                "{q} after publishing on 1 shard"
            );
        }
        conn.close().await;
    }

    restart(&mut broker, &node, 2);
    expect_rehomed(&broker, n, qs.len(), 1, 2);
    let conn = broker.connect().await;
    for q in &qs {
        let got = drain(&conn, q).await;
        assert_series(&got, q, 10..PER + 5, SIZE, |_| false);
    }
    conn.close().await;
    stop(&mut broker);
}

/// From a fresh directory under `--shards 1`: eight durable queues (four of which hash
/// to shard 1 of 2), 20 persistent messages each; SIGTERM.
/// - `--shards 2`: `MST-1007 : Queues re-homed : 4 of 8 durable queues moved from 1 to
///   2 shards`; every queue holds exactly 0..19 in order; then 20..22 published to each
///   are delivered;
/// - `--shards 2` again: no MST-1007 (the count did not change); the queues exist and
///   are empty.
async fn shards_1_to_2() {
    let node = Node::new(None);
    let qs = queues_on("store-rehome", 2, 4);
    let n = moved(&qs, 1, 2);
    assert_eq!(n, 4, "the queues that hash to shard 1 of 2 move");

    let mut broker = node.start(1);
    fill(&broker, &qs, 0..PER, true).await;
    expect_not_rehomed(&broker);
    restart(&mut broker, &node, 2);
    expect_rehomed(&broker, n, qs.len(), 1, 2);
    assert_meta(&node);
    let conn = broker.connect().await;
    for q in &qs {
        let got = drain(&conn, q).await;
        assert_series(&got, q, 0..PER, SIZE, |_| false);
    }
    fill(&broker, &qs, PER..PER + 3, false).await;
    for q in &qs {
        let got = drain(&conn, q).await;
        assert_series(&got, q, PER..PER + 3, SIZE, |_| false);
    }
    conn.close().await;

    restart(&mut broker, &node, 2);
    expect_not_rehomed(&broker);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    for q in &qs {
        assert_eq!(ch.message_count(q).await, 0, "{q}");
    }
    conn.close().await;
    stop(&mut broker);
}
