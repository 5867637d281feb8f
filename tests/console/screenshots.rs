//! A PNG of each console page, over a broker with some traffic: a steady topic stream
//! with a fast and a slow subscriber (the slow one on its way to a threshold), a queue
//! holding messages, a publisher held by a queue's capacity. Written to the directory in
//! `SLUICE_CONSOLE_SCREENSHOTS` (the README's are made with
//! `SLUICE_CONSOLE_SCREENSHOTS=docs/console cargo test --test console screenshots`,
//! which also lets the charts fill for a minute), otherwise to a temporary directory;
//! either way each page must have rendered its own content first.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicQosArguments, QueueBindArguments, QueueDeclareArguments,
};
use amqprs::{FieldTable, FieldValue};

use crate::browser::Browser;
use crate::browser_test;
use crate::common::{http, unique, Broker};

const TRAFFIC: &str = r#"
[broker]
node_name = "sluice@console"

[policy]
housekeeping_interval_ms = 200
rate_window_ms = 2000

[vhost."/".slow_consumer]
policy = "delete"
max_count = 30000
"#;

browser_test!(screenshots, 2, Some(TRAFFIC));

async fn screenshots(broker: &Broker, b: &Browser) {
    let (dir, fill) = match std::env::var_os("SLUICE_CONSOLE_SCREENSHOTS") {
        Some(dir) => (PathBuf::from(dir), Duration::from_secs(60)),
        None => (
            std::env::temp_dir().join(unique("sluice-console-shots")),
            Duration::from_secs(6),
        ),
    };
    std::fs::create_dir_all(&dir).expect("screenshot directory");

    // Subscribers of one stream: a fast one, one that acks about half of what arrives,
    // one that acks nothing (its delete policy's count is ahead) and a ring (cycle)
    // discarding its oldest.
    let conn = broker.connect().await;
    let mut channels = Vec::new();
    let mut deliveries = Vec::new();
    for kind in ["fast", "half", "stuck", "ring"] {
        let ch = conn.channel().await;
        let mut args = FieldTable::new();
        if kind == "ring" {
            let name = |n: &str| n.try_into().expect("name");
            args.insert(
                name("x-slow-consumer-policy"),
                FieldValue::S("cycle".try_into().expect("value")),
            );
            args.insert(name("x-slow-consumer-max-count"), FieldValue::l(2000));
        }
        let (q, _, _) = ch
            .queue_declare(
                QueueDeclareArguments::exclusive_server_named()
                    .arguments(args)
                    .finish(),
            )
            .await
            .expect("declare")
            .expect("declare-ok");
        ch.queue_bind(QueueBindArguments::new(&q, "amq.topic", "prices.#"))
            .await
            .expect("bind");
        match kind {
            "fast" => {
                let (_t, mut rx) = ch.consume_auto(&q).await;
                tokio::spawn(async move { while rx.recv().await.is_some() {} });
            }
            "half" => {
                ch.basic_qos(BasicQosArguments::new(0, 10, false))
                    .await
                    .expect("qos");
                let (_t, mut rx) = ch.consume_manual(&q).await;
                let acker = ch.ch.clone();
                tokio::spawn(async move {
                    while let Some(m) = rx.recv().await {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let Some(d) = m.deliver else { break };
                        let ack = BasicAckArguments::new(d.delivery_tag(), false);
                        if acker.basic_ack(ack).await.is_err() {
                            break;
                        }
                    }
                });
            }
            _ => {
                ch.basic_qos(BasicQosArguments::new(0, 1, false))
                    .await
                    .expect("qos");
                // Never acked: kept so that the consumer stays.
                deliveries.push(ch.consume_manual(&q).await.1);
            }
        }
        channels.push(ch);
    }
    // A work queue with a backlog, and one held by its capacity.
    let ch = conn.channel().await;
    ch.declare_queue("orders").await;
    for _ in 0..250 {
        ch.publish("", "orders", b"{\"order\": 1}").await;
    }
    let mut args = FieldTable::new();
    args.insert(
        "x-qpid-capacity".try_into().expect("name"),
        FieldValue::l(2000),
    );
    ch.queue_declare(QueueDeclareArguments::new("audit").arguments(args).finish())
        .await
        .expect("declare")
        .expect("declare-ok");
    let held = broker.connect().await;
    let hch = held.channel().await;
    for _ in 0..30 {
        hch.publish("", "audit", &[b'a'; 100]).await;
    }
    // A policy, for the admin page and the queue's.
    let port = broker.http_port();
    let policy = serde_json::json!({
        "pattern": "^orders$", "apply-to": "queues", "priority": 1,
        "definition": { "max-length": 10000 },
    });
    let put = tokio::task::spawn_blocking(move || {
        http::request_json(
            port,
            "PUT",
            "/api/policies/%2F/orders-cap",
            Some(("guest", "guest")),
            &policy,
        )
    })
    .await
    .expect("put policy");
    assert!(put.status < 300, "PUT policy: {}", put.body);
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let stop = Arc::clone(&stop);
        let conn = broker.connect().await;
        tokio::spawn(async move {
            let ch = conn.channel().await;
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                ch.publish("amq.topic", "prices.eur", b"1.0842").await;
            }
            conn.close().await;
        })
    };

    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    tokio::time::sleep(fill).await;
    let pages = [
        ("overview", "#/", "#chart-busy"),
        ("risk", "#/risk", "#risk tbody a"),
        ("queues", "#/queues", "#queue-list tbody a"),
        ("queue", "#/queues/%2F/orders", "#q-messages"),
        ("connections", "#/connections", "#connection-list tbody a"),
        ("exchanges", "#/exchanges", "#exchange-list tbody a"),
        (
            "exchange",
            "#/exchanges/%2F/amq.topic",
            "#exchange-live table",
        ),
        ("admin", "#/admin", "#users-list table"),
    ];
    for (name, hash, ready) in pages {
        b.goto(hash).await;
        b.find(ready).await;
        // Past the first refresh, so live parts show numbers, not "Loading".
        tokio::time::sleep(Duration::from_millis(800)).await;
        b.assert_no_script_error().await;
        // Nothing rendered from a field the API does not have.
        let text = b.find("#main").await.text().await.expect("page text");
        for word in text.split_whitespace() {
            assert!(
                !["undefined", "NaN", "null", "[object"].contains(&word),
                "{name}: {word} on the page: {text}"
            );
        }
        let png = b.screenshot().await;
        assert!(png.starts_with(b"\x89PNG"), "{name}: a PNG");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
    stop.store(true, Ordering::Relaxed);
    publisher.await.expect("publisher");
    drop((channels, deliveries));
    held.close().await;
    conn.close().await;
}
