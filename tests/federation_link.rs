//! One federation link between two in-process brokers, root → relay, through sluice's
//! own client: the link sets up the upstream as RabbitMQ's does (queue, intermediate
//! exchange, bindings), forwards every message once and in order with
//! `x-received-from`, follows binding interest, and cleans up when the exchange goes.
//! The multi-process trees, kills and interop live in `tests/federation.rs`.

use std::time::{Duration, Instant};

use sluice::client::{Connection, ConsumeOptions, QueueDeclareOptions, NO_PROPERTIES};
use sluice::config::federation::{
    AckMode, ExchangeMatch, FederatedExchanges, FederationConfig, Upstream,
};
use sluice::config::Config;
use sluice::protocol::{FieldTable, FieldValue};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(20);

fn config(node: &str, federation: FederationConfig) -> Config {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let data_dir = std::env::temp_dir().join(format!("sluice-fedlink-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        shards: 2,
        data_dir,
        node_name: node.into(),
        federation,
        http: sluice::config::HttpConfig {
            listen: None,
            ..Default::default()
        },
        ..Config::default()
    }
}

fn upstream(port: u16, ack_mode: AckMode) -> Upstream {
    Upstream {
        name: "root".into(),
        uris: vec![format!("amqp://guest:guest@127.0.0.1:{port}/%2f")],
        exchange: None,
        max_hops: 1,
        prefetch_count: 1000,
        reconnect_delay: Duration::from_millis(300),
        ack_mode,
        expires: None,
        message_ttl: None,
        trust_user_id: false,
        queue_arguments: Vec::new(),
    }
}

fn relay_of(root_port: u16, ack_mode: AckMode) -> FederationConfig {
    FederationConfig {
        upstreams: vec![upstream(root_port, ack_mode)],
        exchanges: vec![FederatedExchanges {
            vhost: "/".into(),
            exchange: ExchangeMatch::Name("amq.topic".into()),
            upstreams: vec!["root".into()],
        }],
    }
}

async fn connect(broker: &sluice::server::Broker) -> Connection {
    let url = format!("amqp://guest:guest@{}/", broker.addresses[0]);
    Connection::connect(&url).await.expect("connect")
}

/// Waits until `f` holds, polling; panics after [`LIMIT`].
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the root has the link's queue with a binding path for `key`: a message
/// published with `key` reaches the link's queue (checked by its depth).
async fn upstream_queue_depth(root: &Connection) -> Option<u32> {
    let ch = root.open_channel().await.ok()?;
    let opts = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("federation: amq.topic -> relay", opts)
        .await
        .ok()
        .map(|q| q.message_count)
}

async fn run_tree(ack_mode: AckMode) {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("info")
        .try_init();
    let root = sluice::server::start(config("root", FederationConfig::default())).expect("root");
    let relay = sluice::server::start(config(
        "relay",
        relay_of(root.addresses[0].port(), ack_mode),
    ))
    .expect("relay");
    let root_conn = connect(&root).await;
    let relay_conn = connect(&relay).await;
    let sub = relay_conn.open_channel().await.unwrap();
    let q = sub
        .queue_declare("", QueueDeclareOptions::default())
        .await
        .unwrap();
    sub.queue_bind(
        &q.name.to_string(),
        "amq.topic",
        "prices.#",
        FieldTable::new(),
    )
    .await
    .unwrap();
    let mut consumer = sub
        .basic_consume(
            &q.name.to_string(),
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // The link has the queue and the binding once a probe message reaches the queue.
    let publisher = root_conn.open_channel().await.unwrap();
    eventually("the link's upstream queue", || async {
        upstream_queue_depth(&root_conn).await.is_some()
    })
    .await;
    // A key nobody downstream binds never crosses: published first, it must not arrive.
    publisher
        .basic_publish(
            "amq.topic",
            "weather.today",
            false,
            NO_PROPERTIES,
            "unwanted".into(),
        )
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        publisher
            .basic_publish(
                "amq.topic",
                "prices.probe",
                false,
                NO_PROPERTIES,
                "probe".into(),
            )
            .await
            .unwrap();
        let got = timeout(Duration::from_millis(200), consumer.recv()).await;
        if matches!(got, Ok(Ok(d)) if &d.body[..] == b"probe") {
            break;
        }
        assert!(start.elapsed() < LIMIT, "the binding did not propagate");
    }
    // Drain any probes still in flight.
    while let Ok(Ok(_)) = timeout(Duration::from_millis(300), consumer.recv()).await {}
    publisher.confirm_select().await.unwrap();
    const N: u32 = 2000;
    for i in 0..N {
        publisher
            .basic_publish(
                "amq.topic",
                "prices.eur",
                false,
                NO_PROPERTIES,
                i.to_string().into(),
            )
            .await
            .unwrap();
    }
    assert!(publisher.wait_for_confirms().await.unwrap());
    for i in 0..N {
        let d = timeout(LIMIT, consumer.recv())
            .await
            .expect("delivery in time")
            .unwrap();
        assert_eq!(
            std::str::from_utf8(&d.body).unwrap(),
            i.to_string(),
            "in order, once"
        );
        assert_eq!(d.routing_key.as_bytes(), b"prices.eur");
        let props = d.properties().unwrap();
        let hops = props
            .headers
            .as_ref()
            .and_then(|h| h.get("x-received-from"))
            .and_then(FieldValue::as_array)
            .expect("x-received-from");
        assert_eq!(hops.len(), 1);
        let hop = hops[0].as_table().unwrap();
        assert_eq!(
            hop.get("exchange").and_then(FieldValue::as_str),
            Some("amq.topic")
        );
        assert_eq!(hop.get("vhost").and_then(FieldValue::as_str), Some("/"));
        let uri = hop.get("uri").and_then(FieldValue::as_str).unwrap();
        assert!(!uri.contains("guest"), "no credentials in {uri}");
    }
    assert!(
        timeout(Duration::from_millis(500), consumer.recv())
            .await
            .is_err(),
        "nothing more: no duplicate, and weather.today never crossed"
    );
    // Everything was acknowledged upstream.
    if ack_mode != AckMode::NoAck {
        eventually("the upstream queue to drain", || async {
            upstream_queue_depth(&root_conn).await == Some(0)
        })
        .await;
    }
    relay.shutdown();
    root.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_to_relay_on_confirm() {
    run_tree(AckMode::OnConfirm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_to_relay_on_publish() {
    run_tree(AckMode::OnPublish).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_to_relay_no_ack() {
    run_tree(AckMode::NoAck).await;
}
