//! The warning before the policy fires: for a subscriber falling steadily behind, the
//! broker predicts the breach from its arrival and consumption rates and logs SUB-1004
//! before the SUB-1003 delete.

use std::sync::Arc;
use std::time::Duration;

use sluice::client::ConsumeOptions;

use crate::common::unique;
use crate::harness::*;

slow_tests!(warning_precedes_the_delete);

/// Publisher ~200 msg/s (amqprs), consumer acking ~20 msg/s (sluice's client, prefetch
/// 1), max_count 300, warn horizon 10 s, housekeeping 100 ms.
async fn warning_precedes_the_delete(shards: usize) {
    let broker = Cfg {
        housekeeping_ms: 100,
        alert_gap_ms: 10_000,
        ..Cfg::default()
    }
    .start(shards);
    let conn = own_connect(&broker).await;
    let ch = Arc::new(conn.open_channel().await.unwrap());
    let queue = own_declare_bound(
        &ch,
        &unique("warn"),
        false,
        &[(MAX_COUNT, Arg::Int(300))],
        "warn.tick",
    )
    .await;
    ch.basic_qos(1, false).await.unwrap();
    let mut consumer = ch
        .basic_consume(&queue, ConsumeOptions::default())
        .await
        .unwrap();
    let acker = {
        let ch = Arc::clone(&ch);
        tokio::spawn(async move {
            loop {
                let d = match consumer.recv().await {
                    Ok(d) => d,
                    Err(e) => return e,
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Err(e) = ch.basic_ack(d.delivery_tag, false).await {
                    return e;
                }
            }
        })
    };

    let (_p, pch) = publisher(&broker).await;
    let pacer = Pacer::start(&pch, "warn.tick", 20, Duration::from_millis(100));

    let err = tokio::time::timeout(Duration::from_secs(20), acker)
        .await
        .expect("the lagging consumer was not closed in time")
        .unwrap();
    pacer.stop().await;
    assert_too_slow_error(&err);

    let logs = broker.logs();
    let (warn_at, warn) = find_line(&logs, &queue_line(&queue, "SUB-1004"))
        .unwrap_or_else(|| panic!("no SUB-1004 line for {queue}; log tail:\n{}", tail(&broker)));
    let (fire_at, fire) = find_line(&logs, &queue_line(&queue, "SUB-1003"))
        .unwrap_or_else(|| panic!("no SUB-1003 line for {queue}"));
    assert!(
        warn_at < fire_at,
        "SUB-1004 must come before SUB-1003:\n{warn}\n{fire}"
    );
    assert!(
        warn.contains("Slow consumer predicted : threshold=count (limit 300) in ")
            && warn.contains(&format!(" s : queue={queue} "))
            && warn.contains(" arrival=")
            && warn.contains(" growth=+")
            && warn.ends_with(" policy=delete"),
        "SUB-1004 line: {warn}"
    );
    let secs: f64 = warn
        .split(" in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no prediction in {warn}"));
    assert!(
        secs < 10.0,
        "predicted {secs} s, beyond the 10 s horizon: {warn}"
    );
    assert_delete_logged(&broker, &queue, "count", 1).await;
    own_assert_usable_and_gone(&conn, &queue).await;
}
