//! The pages sluice exists for, in a browser: a slow subscriber rising to the top of
//! "subscriptions at risk" with its prediction, then closed by its delete policy and
//! gone from the page; and a publisher held by a queue's capacity, shown held with that
//! cause on the connections page and the queue's page; the disk alarm's banner, and a
//! publisher held by it; the store quota's banner naming its vhost, and its publishers
//! held with that cause, both gone once the store is below its underfull size.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicQosArguments, QueueBindArguments, QueueDeclareArguments, QueuePurgeArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};

use serde_json::json;

use crate::browser::Browser;
use crate::browser_test;
use crate::common::{http, unique, Broker, Event};

const RISK: &str = r#"
[policy]
housekeeping_interval_ms = 100
rate_window_ms = 1000

[vhost."/".slow_consumer]
policy = "delete"
max_count = 400
"#;

browser_test!(
    a_slow_subscriber_rises_to_the_top_of_subscriptions_at_risk,
    1,
    Some(RISK)
);
browser_test!(a_held_publisher_shows_its_flow_state_and_cause, 1);
browser_test!(
    the_disk_alarm_shows_a_banner_and_holds_publishers,
    1,
    Some(DISK_ALARM)
);

browser_test!(
    the_store_quota_shows_a_banner_and_its_held_publishers,
    2,
    Some(STORE_QUOTA)
);

/// A 256 KiB store quota on vhost "/" (64 KiB segments, so the store's size on disk
/// follows what is written).
const STORE_QUOTA: &str = "[store]\nsegment_size = 65536\n\n[vhost.\"/\"]\n\
    store_overfull_size = 262144\nstore_underfull_size = 131072\n";

/// A free-space limit no disk meets: the disk alarm is raised at start.
const DISK_ALARM: &str = "[store]\ndisk_free_limit = 4611686018427387904\n";

/// A topic subscriber on amq.topic with `key`: prefetch 1, acking nothing when `slow`,
/// auto-ack otherwise (drained by a task). Returns its connection, channel, queue name
/// and, when slow, its deliveries (kept so that the consumer stays).
async fn subscriber(broker: &Broker, key: &str, slow: bool) -> Subscriber {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = ch.declare_server_named().await;
    ch.queue_bind(QueueBindArguments::new(&queue, "amq.topic", key))
        .await
        .expect("queue.bind");
    if slow {
        ch.basic_qos(BasicQosArguments::new(0, 1, false))
            .await
            .expect("basic.qos");
        // Deliveries are never acked: the queue grows by the arrival rate.
        let (_tag, rx) = ch.consume_manual(&queue).await;
        return (conn, ch, queue, Some(rx));
    }
    let (_tag, mut rx) = ch.consume_auto(&queue).await;
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    (conn, ch, queue, None)
}

type Subscriber = (
    crate::common::Conn,
    crate::common::Chan,
    String,
    Option<tokio::sync::mpsc::UnboundedReceiver<amqprs::channel::ConsumerMessage>>,
);

async fn a_slow_subscriber_rises_to_the_top_of_subscriptions_at_risk(broker: &Broker, b: &Browser) {
    let key = unique("risk");
    let (_fast_conn, _fast, fast_q, _) = subscriber(broker, &format!("{key}.#"), false).await;
    let (_slow_conn, mut slow, slow_q, _held) = subscriber(broker, &format!("{key}.#"), true).await;
    // A steady publisher: 40 messages a second, so the slow queue reaches its 400 in
    // about ten seconds.
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let stop = Arc::clone(&stop);
        let conn = broker.connect().await;
        let key = format!("{key}.tick");
        tokio::spawn(async move {
            let ch = conn.channel().await;
            let mut tick = tokio::time::interval(Duration::from_millis(25));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                ch.publish("amq.topic", &key, b"tick").await;
            }
            conn.close().await;
        })
    };
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/risk").await;
    // The slow subscriber's queue comes first, with a prediction of the count threshold;
    // the fast one is below it.
    let table = b
        .wait_text("#risk tbody", |t| {
            let first = t.lines().next().unwrap_or_default();
            first.contains(&slow_q) && first.contains("count") && t.contains(&fast_q)
        })
        .await;
    assert!(
        table.find(&slow_q) < table.find(&fast_q),
        "slow before fast: {table}"
    );
    // Its delete policy fires: its channel is closed with 506 and the page drops it.
    let closed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match slow.events.recv().await {
                Some(Event::ChannelClose { code, .. }) => return code,
                Some(_) => continue,
                None => panic!("the slow channel's events ended without a close"),
            }
        }
    })
    .await
    .expect("the delete policy closes the slow subscriber");
    assert_eq!(closed, 506);
    b.wait_text("#risk tbody", |t| {
        t.contains(&fast_q) && !t.contains(&slow_q)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    publisher.await.expect("publisher");
}

async fn a_held_publisher_shows_its_flow_state_and_cause(broker: &Broker, b: &Browser) {
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let queue = unique("console-held");
    let mut args = FieldTable::new();
    args.insert(
        "x-qpid-capacity".try_into().expect("name"),
        FieldValue::l(1000),
    );
    ch.queue_declare(QueueDeclareArguments::new(&queue).arguments(args).finish())
        .await
        .expect("queue.declare")
        .expect("declare-ok");
    // 20 x 100 bytes: past the capacity, so the channel is told to stop.
    for _ in 0..20 {
        ch.publish("", &queue, &[b'x'; 100]).await;
    }
    loop {
        if let Event::Flow { active: false } = ch.next_event().await {
            break;
        }
    }
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/connections").await;
    b.wait_text("#channel-list tbody", |t| {
        t.contains("flow: queue capacity")
    })
    .await;
    b.wait_text("#connection-list tbody", |t| {
        t.contains("flow: queue capacity")
    })
    .await;
    b.goto(&format!("#/queues/%2F/{queue}")).await;
    b.wait_text("#queue-live", |t| {
        t.contains("blocked: its publishers are stopped")
    })
    .await;
    conn.close().await;
}

async fn the_disk_alarm_shows_a_banner_and_holds_publishers(broker: &Broker, b: &Browser) {
    b.login("guest", "guest").await;
    b.wait_text("#disk-alarm", |t| t.contains("Disk alarm"))
        .await;
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = unique("console-disk");
    ch.declare_queue(&queue).await;
    ch.publish("", &queue, b"held").await;
    b.goto("#/connections").await;
    b.wait_text("#connection-list tbody", |t| t.contains(": disk alarm"))
        .await;
    // The banner stays on every page while the alarm lasts.
    b.wait_text("#disk-alarm", |t| t.contains("Disk alarm"))
        .await;
    drop(ch);
    drop(conn);
}

async fn the_store_quota_shows_a_banner_and_its_held_publishers(broker: &Broker, b: &Browser) {
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.wait_text("#banners", |t| !t.contains("Store quota"))
        .await;
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let queue = unique("console-quota");
    ch.queue_declare(QueueDeclareArguments::durable_client_named(&queue))
        .await
        .expect("queue.declare")
        .expect("declare-ok");
    // Persistent 4 KiB messages over the API, each answered once it is on disk, until
    // the quota refuses one: the store is then over its 256 KiB, and nothing is in
    // flight that could fill it again later.
    let port = broker.http_port();
    let body = json!({
        "properties": {"delivery_mode": 2},
        "routing_key": queue,
        "payload": "q".repeat(4096),
        "payload_encoding": "string",
    });
    let mut stored = 0;
    let refused = loop {
        let r = tokio::task::block_in_place(|| {
            http::request_json(
                port,
                "POST",
                "/api/exchanges/%2F/amq.default/publish",
                Some(("guest", "guest")),
                &body,
            )
        });
        if r.status != 200 {
            break r;
        }
        stored += 1;
        assert!(stored < 200, "the store quota never refused a publish");
    };
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(stored >= 64, "refused after {stored} of 4 KiB");
    let banner = b.wait_text("#banners", |t| t.contains("Store quota")).await;
    assert!(
        banner.contains("vhost '/'") && banner.contains("256 KiB"),
        "the banner names the vhost and its overfull size: {banner}"
    );
    // An AMQP publisher now: held, with the quota of its vhost as the cause.
    ch.publish_props(
        "",
        &queue,
        BasicProperties::default().with_delivery_mode(2).finish(),
        b"one more",
    )
    .await;
    b.goto("#/connections").await;
    b.wait_text("#connection-list tbody", |t| t.contains(": store quota"))
        .await;
    // Purged, the store's segments are collected and the banner goes. (The publish that
    // found the connection blocked was taken: it is the reading after it that waits.)
    let purger = broker.connect().await;
    let purge_ch = purger.channel().await;
    let purged = purge_ch
        .queue_purge(QueuePurgeArguments::new(&queue))
        .await
        .expect("queue.purge");
    assert_eq!(purged, Some(stored + 1));
    b.wait_text("#banners", |t| !t.contains("Store quota"))
        .await;
    b.wait_text("#connection-list tbody", |t| !t.contains("store quota"))
        .await;
    drop(ch);
    drop(conn);
}
