//! Flow control and confirms when the publisher's connection and the queue live on
//! different shards (queue home = fnv1a(vhost, name) mod shards; a connection's shard is
//! read off the server-named queue it declares, which is named to live there).

use std::collections::BTreeMap;

use amqprs::channel::ConfirmSelectArguments;
use amqprs::{FieldTable, FieldValue};

use crate::common::{bounded, next_event, Broker, Event};
use crate::support::*;

/// Three publisher connections (wherever SO_REUSEPORT put them), each with a queue on the
/// other shard and one on its own: every one goes through the full flow cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flow_control_across_shards() {
    bounded(async {
        const SHARDS: usize = 2;
        let broker = Broker::start(SHARDS);
        let limits = Limits {
            capacity: 1000,
            resume: 500,
        };
        let mut placements = Vec::new();
        for _ in 0..3 {
            let (conn, mut remote_ch) = conn_and_channel(&broker).await;
            let home = shard_of(&remote_ch, SHARDS).await;
            placements.push(home);
            let remote = name_on("xshard-remote", SHARDS, |s| s != home);
            declare_with(&remote_ch, &remote, capacity_args(1000, Some(500))).await;
            flow_cycle(&broker, &mut remote_ch, &remote, limits).await;

            let mut local_ch = conn.channel().await;
            let local = name_on("xshard-local", SHARDS, |s| s == home);
            declare_with(&local_ch, &local, capacity_args(1000, Some(500))).await;
            flow_cycle(&broker, &mut local_ch, &local, limits).await;
            conn.close().await;
        }
        eprintln!("publisher connections landed on shards {placements:?}");
    })
    .await
}

shard_tests!(reject_publish_nacks_from_the_home_shard);

/// x-max-length 5 with x-overflow reject-publish, publisher in confirm mode on a
/// connection of the other shard (with two shards): 8 publishes give acks for 1..=5 and
/// a nack (multiple=false) for each of 6, 7, 8; the queue holds 5; QUE-1006 counts the
/// 3 refusals. After one message is taken, the next publish is acked again.
async fn reject_publish_nacks_from_the_home_shard(shards: usize) {
    let broker = Broker::start_with_config(shards, "[policy]\nhousekeeping_interval_ms = 300\n");
    let (conn, mut pch) = conn_and_channel(&broker).await;
    let home = shard_of(&pch, shards).await;
    let q = name_on("reject", shards, |s| shards == 1 || s != home);
    let mut args = FieldTable::new();
    args.insert("x-max-length".try_into().unwrap(), FieldValue::l(5));
    args.insert(
        "x-overflow".try_into().unwrap(),
        FieldValue::S("reject-publish".try_into().unwrap()),
    );
    declare_with(&pch, &q, args).await;
    pch.confirm_select(ConfirmSelectArguments::default())
        .await
        .expect("confirm.select");
    for n in 1..=8 {
        pch.publish("", &q, &numbered(n)).await;
    }
    let outcomes = settle(&mut pch.events, 8).await;
    let expected: BTreeMap<u64, bool> = (1..=8).map(|t| (t, t <= 5)).collect();
    assert_eq!(outcomes, expected, "tag -> acked (true) / nacked (false)");
    pch.wait_message_count(&q, 5).await;
    expect_line(
        &broker,
        &format!(
            "[vh(/)/qu({q})] QUE-1006 : Rejected : 3 publishes since the last report \
             (x-overflow reject-publish) : Count : 5, Depth : 500 bytes"
        ),
    );

    let got = pch.get_eventually(&q, true).await;
    assert_eq!(number_of(&got.2), 1, "the oldest stays first");
    pch.publish("", &q, &numbered(9)).await;
    match next_event(&mut pch.events).await {
        Event::Ack { tag: 9, .. } => {}
        other => panic!("publish 9 into a queue with room: expected ack 9, got {other:?}"),
    }
    pch.wait_message_count(&q, 5).await;
    conn.close().await;
}

/// Collects confirms until tags 1..=n are settled; returns tag -> acked. Panics on a
/// tag settled twice, a multiple nack, or an ack/nack beyond `n`.
async fn settle(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>,
    n: u64,
) -> BTreeMap<u64, bool> {
    let mut out = BTreeMap::new();
    while (out.len() as u64) < n {
        let (tag, multiple, acked) = match next_event(events).await {
            Event::Ack { tag, multiple } => (tag, multiple, true),
            Event::Nack { tag, multiple } => {
                assert!(
                    !multiple,
                    "reject-publish nacks are multiple=false (tag {tag})"
                );
                (tag, multiple, false)
            }
            other => panic!("waiting for confirms: {other:?}"),
        };
        assert!((1..=n).contains(&tag), "confirm for unknown tag {tag}");
        if multiple {
            for t in 1..=tag {
                out.entry(t).or_insert(acked);
            }
        } else {
            assert!(out.insert(tag, acked).is_none(), "tag {tag} settled twice");
        }
    }
    out
}
