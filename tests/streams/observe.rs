//! What operators see of a stream: `/api/queues` gives its type, offsets, segments and
//! each reader with its lag (messages and bytes behind the committed end); `/metrics`
//! has the same per reader (`sluice_stream_reader_lag_messages`, …) and per stream.
//! The management API's get and purge are refused as RabbitMQ refuses them.

use amqprs::channel::BasicAckArguments;

use crate::common::{eventually, http, next_delivery, unique, Broker};
use crate::support::*;

shard_tests!(lag_in_the_api_and_metrics);

async fn lag_in_the_api_and_metrics(shards: usize) {
    let broker = Broker::start(shards);
    let port = broker.http_port();
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("s");
    declare_stream(
        &ch,
        &q,
        &[("x-max-length-bytes", amqprs::FieldValue::l(1 << 30))],
    )
    .await;
    let mut p = Publisher::open(&conn).await;
    p.publish_all(&q, &bodies("m", 0..50)).await;
    // A reader that took 10 and acked them; it has credit for none beyond 10.
    let r = conn.channel().await;
    prefetch(&r, 10).await;
    let (_, mut rx) = consume(&r, &q, "laggard", &[("x-stream-offset", s("first"))]).await;
    let mut last = 0;
    for _ in 0..10 {
        let d = next_delivery(&mut rx).await;
        last = d.delivery_tag;
    }
    let view = || http::get(port, &format!("/api/queues/%2F/{q}")).json();
    // Its position is 10 once the ten are delivered (credit spent, nothing loaded).
    assert!(
        eventually(std::time::Duration::from_secs(5), || async {
            view()["stream"]["readers"][0]["offset"] == 10
        })
        .await,
        "{}",
        view()
    );
    let v = view();
    assert_eq!(v["type"], "stream");
    assert_eq!(v["messages"], 50);
    assert_eq!(v["consumers"], 1);
    let st = &v["stream"];
    assert_eq!(st["first_offset"], 0);
    assert_eq!(st["committed_offset"], 50);
    assert_eq!(st["max_length_bytes"], 1u64 << 30);
    let reader = &st["readers"][0];
    assert_eq!(reader["consumer_tag"], "laggard");
    assert_eq!(reader["lag_messages"], 40);
    assert!(reader["lag_bytes"].as_u64().expect("bytes") > 0);
    assert!(
        reader["lag_bytes"].as_u64().expect("bytes") <= st["disk_bytes"].as_u64().expect("disk")
    );
    assert_eq!(reader["prefetch_count"], 10);
    // An own tag with an explicit offset and no flag: not tracked.
    assert_eq!(reader["offset_tracking"], false);
    let metrics = http::parse_openmetrics(&http::get(port, "/metrics").body);
    let labels = [("queue", q.as_str()), ("consumer_tag", "laggard")];
    assert_eq!(
        http::value(&metrics, "sluice_stream_reader_lag_messages", &labels),
        Some(40.0)
    );
    assert_eq!(
        http::value(&metrics, "sluice_stream_reader_offset", &labels),
        Some(10.0)
    );
    assert_eq!(
        http::value(
            &metrics,
            "sluice_stream_committed_offset",
            &[("queue", q.as_str())]
        ),
        Some(50.0)
    );
    assert_eq!(
        http::value(
            &metrics,
            "sluice_stream_reader_max_lag_messages",
            &[("queue", q.as_str())]
        ),
        Some(40.0)
    );
    // It catches up: no lag.
    r.basic_ack(BasicAckArguments::new(last, true))
        .await
        .expect("ack");
    let rest = take(&r, &mut rx, 40).await;
    assert_eq!(rest.last().map(|l| l.0), Some(49));
    assert!(
        eventually(std::time::Duration::from_secs(5), || async {
            view()["stream"]["readers"][0]["lag_messages"] == 0
        })
        .await
    );
    // The management API's get and purge: RabbitMQ's refusals.
    let body = serde_json::json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"});
    let got = http::request_json(
        port,
        "POST",
        &format!("/api/queues/%2F/{q}/get"),
        Some(("guest", "guest")),
        &body,
    );
    assert_eq!(got.status, 400, "{}", got.body);
    assert_eq!(
        got.json()["reason"],
        format!(
            "NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{q}' in vhost '/'"
        )
    );
    let purged = http::request(
        port,
        "DELETE",
        &format!("/api/queues/%2F/{q}/contents"),
        Some(("guest", "guest")),
    );
    assert_eq!(purged.status, 400, "{}", purged.body);
    conn.close().await;
}
