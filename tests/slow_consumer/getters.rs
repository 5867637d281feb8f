//! A channel that drains a subscription with `basic.get` (manual ack, slowly) is closed
//! with 506 like a consumer's when the subscription is deleted. With two shards the
//! getter's connection is on the other shard than the queue, so the close travels
//! between shards.

use std::time::Duration;

use sluice::client::ClientError;

use crate::harness::*;

slow_tests!(
    slow_basic_get_channel_is_closed,
    client_operations_racing_the_close_report_it,
);

/// sluice's client gets (manual ack, ~10 msg/s) from a queue with max_count 30 while
/// amqprs publishes ~100 msg/s: the backlog passes 30 and the getter's channel gets 506.
/// An amqprs channel whose only basic.get on the queue was more than a rate window
/// (500 ms) before is left open.
async fn slow_basic_get_channel_is_closed(shards: usize) {
    let broker = Cfg::default().start(shards);
    let mut fast = Sub::fast(&broker, "get.tick").await;

    let conn = own_connect(&broker).await;
    let ch = conn.open_channel().await.unwrap();
    let probe = ch
        .queue_declare(
            "",
            sluice::client::QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let getter_shard = home(&probe.name.to_string(), shards);
    let other = (getter_shard + 1) % shards as u16;
    let queue = name_on_shard("get-slow", other, shards);
    own_declare_bound(&ch, &queue, false, &[(MAX_COUNT, Arg::Int(30))], "get.tick").await;

    // A getter from long ago: one basic.get, then more than a rate window passes.
    let (_o, mut old) = publisher(&broker).await;
    assert!(old.get(&queue, true).await.is_none());
    tokio::time::sleep(Duration::from_millis(700)).await;

    let (_p, pch) = publisher(&broker).await;
    let pacer = Pacer::start(&pch, "get.tick", 10, Duration::from_millis(100));

    let mut got = Vec::new();
    let err = tokio::time::timeout(ACT, async {
        loop {
            match ch.basic_get(&queue, false).await {
                Ok(Some(m)) => {
                    got.push(seq_of(&m.body));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Err(e) = ch.basic_ack(m.delivery_tag, false).await {
                        return e;
                    }
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => return e,
            }
        }
    })
    .await
    .expect("the getter's channel was not closed in time");
    // The channel's recorded reason is the broker's close. (The failed operation's own
    // error is checked in `client_operations_racing_the_close_report_it`: a get sent
    // just as the close arrives is where sluice's client can get it wrong.)
    let reason = ch
        .error()
        .unwrap_or_else(|| panic!("channel not ended after {err:?}"));
    assert_too_slow_error(&reason);
    assert_prefix("slow getter", &got);

    let sent = pacer.stop().await;
    publish_end(&pch, "amq.topic", "get.tick").await;
    fast.expect_all(sent).await;
    own_assert_usable_and_gone(&conn, &queue).await;
    let sub = assert_delete_logged(&broker, &queue, "count", 1).await;
    assert!(sub.contains("threshold=count (limit 30)"), "{sub}");

    assert_no_close(&mut old, "the getter from long ago");
    old.declare_server_named().await;
    assert_no_close(&mut old, "the getter from long ago");
    assert_eq!(
        lines_with(&broker, "CHN-1003 : Close : 506").len(),
        1,
        "only the recent getter is closed"
    );
}

/// sluice's client: a basic.get sent just as the broker's 506 close arrives must fail
/// with `ChannelClosed { 506, "Consuming too slow." }`, as the README promises — never as
/// if the connection had ended; the connection carries on. The moment is a matter of
/// timing, so the test sweeps it: in each round a channel registers as a getter of a
/// fresh queue with max_count 0, amqprs publishes one message (the breach), and after a
/// delay growing by 5 µs per round the channel sends its next basic.get.
async fn client_operations_racing_the_close_report_it(shards: usize) {
    const ROUNDS: u32 = 160;
    let broker = Cfg::default().start(shards);
    let conn = own_connect(&broker).await;
    let (_p, pch) = publisher(&broker).await;
    let mut wrong = Vec::new();
    let mut last_queue = String::new();
    for round in 0..ROUNDS {
        let ch = conn.open_channel().await.unwrap();
        let key = format!("race.{round}");
        let queue = own_declare_bound(
            &ch,
            &crate::common::unique("get-race"),
            false,
            &[(MAX_COUNT, Arg::Int(0))],
            &key,
        )
        .await;
        assert!(ch.basic_get(&queue, false).await.unwrap().is_none());
        pch.publish("amq.topic", &key, &body(1, 64)).await;
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_micros(5 * u64::from(round)) {
            std::hint::spin_loop();
        }
        let err = loop {
            match ch.basic_get(&queue, false).await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(e) => break e,
            }
        };
        let reason = ch
            .error()
            .unwrap_or_else(|| panic!("round {round}: channel not ended after {err:?}"));
        assert_too_slow_error(&reason);
        if !matches!(&err, ClientError::ChannelClosed { code: 506, text, .. } if text == TOO_SLOW) {
            wrong.push(format!("round {round} ({} µs): {err:?}", 5 * round));
        }
        last_queue = queue;
    }
    assert!(
        wrong.is_empty(),
        "a basic.get on a channel the broker closed with 506 must fail with that close \
         (the connection is fine: {:?}); instead:\n{}",
        conn.error(),
        wrong.join("\n")
    );
    own_assert_usable_and_gone(&conn, &last_queue).await;
}
