//! Where a subscription's policy comes from, most specific first: declare arguments >
//! a `[[topic]]` entry matching exchange + binding key > the vhost's
//! `[vhost."/".slow_consumer]` default > off; field by field. Only topic subscriptions:
//! a queue bound only to amq.direct is untouched whatever its arguments say.

use crate::common::{next_delivery, unique};
use crate::harness::*;

slow_tests!(config_levels_resolve_most_specific_first);

const LEVELS: &str = r#"
[vhost."/".slow_consumer]
max_count = 5

[[topic]]
vhost = "/"
exchange = "amq.topic"
binding = "lvl.ring.#"
slow_consumer = { policy = "cycle", max_count = 3 }

[[topic]]
queue = "lvl-durable-sub"
slow_consumer = { max_count = 2, include_durable = true }
"#;

/// amqprs throughout.
async fn config_levels_resolve_most_specific_first(shards: usize) {
    let broker = Cfg::with(LEVELS).start(shards);
    let (_p, mut pch) = confirming_publisher(&broker).await;

    // vhost default (delete, max_count 5) on a plain topic subscriber: five held are
    // allowed, the sixth fires.
    let mut plain = Sub::never_acking(&broker, "", &[], "lvl.plain").await;
    publish_seqs(&pch, "amq.topic", "lvl.plain", 1..=5, 64).await;
    for want in 1..=5 {
        assert_eq!(seq_of(&next_delivery(&mut plain.rx).await.body), want);
    }
    assert_not_detected(&broker, &plain.queue);
    assert_no_close(&mut plain.ch, "plain subscriber at the vhost limit");

    // A queue bound only to amq.direct: no topic binding, so neither its own
    // x-slow-consumer-max-count nor the vhost default applies.
    let direct_conn = broker.connect().await;
    let direct_ch = direct_conn.channel().await;
    let direct_q = declare_bound(
        &direct_ch,
        &unique("lvl-direct"),
        false,
        &[(MAX_COUNT, Arg::Int(2))],
        "amq.direct",
        "lvl.direct",
    )
    .await;
    let (_, direct_rx) = direct_ch.consume_manual(&direct_q).await;
    let mut direct = Sub {
        conn: direct_conn,
        ch: direct_ch,
        queue: direct_q,
        rx: direct_rx,
    };

    // Queues bound with the [[topic]] entry's binding key.
    let (_d, dch) = publisher(&broker).await;
    let ring3 = declare_bound(
        &dch,
        &unique("lvl-ring3"),
        false,
        &[],
        "amq.topic",
        "lvl.ring.#",
    )
    .await;
    let ring6 = declare_bound(
        &dch,
        &unique("lvl-ring6"),
        false,
        &[(MAX_COUNT, Arg::Int(6))],
        "amq.topic",
        "lvl.ring.#",
    )
    .await;
    // A [[topic]] entry naming a durable subscription by its queue.
    let durable_sub = declare_bound(
        &dch,
        "lvl-durable-sub",
        true,
        &[],
        "amq.topic",
        "lvl.durable",
    )
    .await;
    let delete3 = declare_bound(
        &dch,
        &unique("lvl-delete3"),
        false,
        &[(POLICY, Arg::Str("delete"))],
        "amq.topic",
        "lvl.ring.#",
    )
    .await;

    publish_seqs(&pch, "amq.topic", "lvl.plain", 6..=6, 64).await;
    publish_seqs(&pch, "amq.topic", "lvl.ring.a", 1..=10, 64).await;
    publish_seqs(&pch, "amq.direct", "lvl.direct", 1..=10, 64).await;
    publish_seqs(&pch, "amq.topic", "lvl.durable", 1..=3, 64).await;
    wait_all_acked(&mut pch, 1, 29).await;
    publish_end(&pch, "amq.direct", "lvl.direct").await;

    // The vhost default fired for the plain subscriber at its sixth message.
    assert_slow_deleted(&broker, &mut plain, "count").await;
    let sub = lines_with(&broker, &queue_line(&plain.queue, "SUB-1003")).join("\n");
    assert!(
        sub.contains("threshold=count (limit 5)") && sub.contains(" count=6 "),
        "{sub}"
    );

    // [[topic]] entry over the vhost default: a cycle ring of 3.
    let newest = |q: String| {
        let dch = &dch;
        async move {
            get_all(dch, &q)
                .await
                .into_iter()
                .map(|(s, _)| s)
                .collect::<Vec<u32>>()
        }
    };
    assert_seqs("[[topic]] ring of 3", &newest(ring3.clone()).await, 8..=10);
    // Declare arguments over the entry, field by field: count 6, still cycle.
    assert_seqs(
        "declared count 6 over the ring",
        &newest(ring6.clone()).await,
        5..=10,
    );
    // Declared policy delete over the entry's cycle, with the entry's count 3.
    let sub = assert_delete_logged(&broker, &delete3, "count", 1).await;
    assert!(sub.contains("threshold=count (limit 3)"), "{sub}");
    wait_queue_gone(&direct.conn, &delete3).await;
    // The durable subscription named by the entry: include_durable, max_count 2.
    let sub = assert_delete_logged(&broker, &durable_sub, "count", 1).await;
    assert!(sub.contains("threshold=count (limit 2)"), "{sub}");
    wait_queue_gone(&direct.conn, &durable_sub).await;
    for q in [&ring3, &ring6] {
        assert!(queue_exists(&direct.conn, q).await);
        assert_not_detected(&broker, q);
    }

    // amq.direct only: the never-acking consumer holds all ten, untouched.
    direct.expect_all(10).await;
    assert_no_close(&mut direct.ch, "amq.direct subscriber");
    assert!(queue_exists(&direct.conn, &direct.queue).await);
    assert_not_detected(&broker, &direct.queue);
    assert!(lines_with(&broker, &queue_line(&direct.queue, "SUB-100")).is_empty());
    assert!(lines_with(&broker, &queue_line(&direct.queue, "QUE-1005")).is_empty());
}
