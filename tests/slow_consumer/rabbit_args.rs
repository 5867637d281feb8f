//! RabbitMQ's length limits on any queue, as RabbitMQ behaves: `x-max-length` and
//! `x-max-length-bytes` with the default `x-overflow = drop-head` keep the newest ready
//! messages (unacked deliveries do not count); `reject-publish` refuses what does not fit
//! — basic.nack (multiple=false) under confirms, dropped and counted (QUE-1006)
//! otherwise — and never enqueues it.

use std::collections::BTreeMap;

use bytes::Bytes;
use sluice::client::NO_PROPERTIES;

use crate::common::{unique, Chan};
use crate::harness::*;

slow_tests!(
    max_length_drop_head_keeps_the_newest_ready,
    max_length_bytes_drop_head_and_reject,
    reject_publish_nacks_and_drops,
);

/// Declares `name` with `args` (amqprs), not bound to any topic exchange.
async fn declare(ch: &Chan, name: &str, args: &[(&str, Arg)]) {
    ch.queue_declare(
        amqprs::channel::QueueDeclareArguments::new(name)
            .arguments(amqprs_table(args))
            .finish(),
    )
    .await
    .expect("queue.declare")
    .expect("declare-ok");
}

/// amqprs. x-max-length 10 keeps 41..=50 of 50 (QUE-1005 counts 40); with two messages
/// taken by basic.get and not acked, x-max-length 3 still keeps three ready messages.
async fn max_length_drop_head_keeps_the_newest_ready(shards: usize) {
    let broker = Cfg::default().start(shards);
    let (_c, mut ch) = confirming_publisher(&broker).await;
    let q = unique("maxlen");
    declare(&ch, &q, &[("x-max-length", Arg::Int(10))]).await;
    publish_seqs(&ch, "", &q, 1..=50, 64).await;
    wait_all_acked(&mut ch, 1, 50).await;
    let seqs: Vec<u32> = get_all(&ch, &q).await.into_iter().map(|(s, _)| s).collect();
    assert_seqs("x-max-length 10", &seqs, 41..=50);
    let lines = wait_reported(&broker, &q, "QUE-1005", "Discarded : ", 40, ACT).await;
    assert!(
        lines
            .iter()
            .all(|l| l.contains("oldest first (x-max-length drop-head)")),
        "{lines:#?}"
    );

    // Unacked deliveries do not count towards x-max-length.
    let (_g, getter) = publisher(&broker).await;
    let q3 = unique("maxlen-ready");
    declare(&ch, &q3, &[("x-max-length", Arg::Int(3))]).await;
    publish_seqs(&ch, "", &q3, 1..=3, 64).await;
    wait_all_acked(&mut ch, 51, 53).await;
    let mut tags = Vec::new();
    for want in 1..=2 {
        let (ok, _, b) = getter.get(&q3, false).await.expect("get-ok");
        assert_eq!(seq_of(&b), want);
        tags.push(ok.delivery_tag());
    }
    publish_seqs(&ch, "", &q3, 4..=10, 64).await;
    wait_all_acked(&mut ch, 54, 60).await;
    let seqs: Vec<u32> = get_all(&ch, &q3)
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_seqs("x-max-length 3 beside 2 unacked", &seqs, 8..=10);
    getter
        .basic_ack(amqprs::channel::BasicAckArguments::new(tags[1], true))
        .await
        .expect("the unacked deliveries are still there to ack");
    ch.wait_message_count(&q3, 0).await;
}

/// sluice's client. x-max-length-bytes 1,000 with 100-byte bodies keeps 41..=50 of 50;
/// x-max-length-bytes 300 with reject-publish acks three 100-byte publishes and nacks
/// the rest.
async fn max_length_bytes_drop_head_and_reject(shards: usize) {
    let broker = Cfg::default().start(shards);
    let conn = own_connect(&broker).await;
    let ch = conn.open_channel().await.unwrap();
    ch.confirm_select().await.unwrap();
    let declare = |name: String, args: Vec<(&'static str, Arg)>| {
        let ch = &ch;
        async move {
            ch.queue_declare(
                &name,
                sluice::client::QueueDeclareOptions {
                    arguments: own_table(&args),
                    ..Default::default()
                },
            )
            .await
            .expect("queue.declare");
            name
        }
    };

    let q = declare(
        unique("maxbytes"),
        vec![("x-max-length-bytes", Arg::Int(1000))],
    )
    .await;
    for i in 1..=50 {
        ch.basic_publish(
            "",
            q.as_str(),
            false,
            NO_PROPERTIES,
            Bytes::from(body(i, 100)),
        )
        .await
        .unwrap();
    }
    assert!(
        ch.wait_for_confirms().await.unwrap(),
        "drop-head nacked a publish"
    );
    let mut seqs = Vec::new();
    while let Some(m) = ch.basic_get(&q, true).await.unwrap() {
        seqs.push(seq_of(&m.body));
    }
    assert_seqs("x-max-length-bytes 1,000", &seqs, 41..=50);

    let r = declare(
        unique("maxbytes-reject"),
        vec![
            ("x-max-length-bytes", Arg::Int(300)),
            ("x-overflow", Arg::Str("reject-publish")),
        ],
    )
    .await;
    let mut confirms = Vec::new();
    for i in 1..=5 {
        confirms.push(
            ch.basic_publish_confirmed(
                "",
                r.as_str(),
                false,
                NO_PROPERTIES,
                Bytes::from(body(i, 100)),
            )
            .await
            .unwrap(),
        );
    }
    let mut outcome = Vec::new();
    for c in confirms {
        outcome.push(c.await.unwrap());
    }
    assert_eq!(
        outcome,
        [true, true, true, false, false],
        "acked = enqueued"
    );
    let mut seqs = Vec::new();
    while let Some(m) = ch.basic_get(&r, true).await.unwrap() {
        seqs.push(seq_of(&m.body));
    }
    assert_seqs("reject-publish by bytes", &seqs, 1..=3);
}

/// amqprs. x-max-length 5 with reject-publish: under confirms 1..=5 are acked and 6..=8
/// nacked one by one; three more without confirms are dropped; QUE-1006 counts all six;
/// the queue holds exactly 1..=5.
async fn reject_publish_nacks_and_drops(shards: usize) {
    let broker = Cfg::default().start(shards);
    let (_c, mut ch) = confirming_publisher(&broker).await;
    let q = unique("reject");
    declare(
        &ch,
        &q,
        &[
            ("x-max-length", Arg::Int(5)),
            ("x-overflow", Arg::Str("reject-publish")),
        ],
    )
    .await;
    publish_seqs(&ch, "", &q, 1..=8, 64).await;
    let outcome = confirms(&mut ch, 1, 8).await;
    let want: BTreeMap<u64, bool> = (1..=8).map(|t| (t, t <= 5)).collect();
    assert_eq!(outcome, want, "tag -> acked (true) / nacked (false)");

    let (_p, plain) = publisher(&broker).await;
    publish_seqs(&plain, "", &q, 9..=11, 64).await;
    let lines = wait_reported(&broker, &q, "QUE-1006", "Rejected : ", 6, ACT).await;
    assert!(
        lines
            .iter()
            .all(|l| l.contains("publishes since the last report (x-overflow reject-publish)")),
        "{lines:#?}"
    );
    let seqs: Vec<u32> = get_all(&ch, &q).await.into_iter().map(|(s, _)| s).collect();
    assert_seqs("reject-publish queue", &seqs, 1..=5);
}
