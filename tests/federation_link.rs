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

/// Whether a mandatory publish on `exchange` with `key` comes back unroutable from the
/// root, i.e. whether the root has no binding for it (the link's included).
async fn unroutable_at_root(root: &Connection, key: &str) -> bool {
    let mut ch = root.open_channel().await.unwrap();
    let mut returns = ch.take_returns().unwrap();
    ch.confirm_select().await.unwrap();
    ch.basic_publish("amq.topic", key, true, NO_PROPERTIES, "probe".into())
        .await
        .unwrap();
    assert!(ch.wait_for_confirms().await.unwrap());
    // A return precedes the confirm of the message it returns.
    returns.try_recv().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_coalesce_and_unbind_upstream() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("info")
        .try_init();
    let root = sluice::server::start(config("root", FederationConfig::default())).expect("root");
    let relay = sluice::server::start(config(
        "relay",
        relay_of(root.addresses[0].port(), AckMode::OnConfirm),
    ))
    .expect("relay");
    let root_conn = connect(&root).await;
    let relay_conn = connect(&relay).await;
    eventually("the link's upstream queue", || async {
        upstream_queue_depth(&root_conn).await.is_some()
    })
    .await;
    assert!(
        unroutable_at_root(&root_conn, "k.1").await,
        "no interest yet"
    );
    let ch = relay_conn.open_channel().await.unwrap();
    let mut names = Vec::new();
    for _ in 0..2 {
        let q = ch
            .queue_declare("", QueueDeclareOptions::default())
            .await
            .unwrap();
        ch.queue_bind(&q.name.to_string(), "amq.topic", "k.1", FieldTable::new())
            .await
            .unwrap();
        names.push(q.name.to_string());
    }
    eventually("k.1 bound upstream", || async {
        !unroutable_at_root(&root_conn, "k.1").await
    })
    .await;
    // One of the two unbinds: the other still wants k.1, so it stays bound upstream.
    ch.queue_unbind(&names[0], "amq.topic", "k.1", FieldTable::new())
        .await
        .unwrap();
    // A later binding is a fence: once it routes, the unbind before it was handled.
    ch.queue_bind(&names[1], "amq.topic", "fence.1", FieldTable::new())
        .await
        .unwrap();
    eventually("the fence", || async {
        !unroutable_at_root(&root_conn, "fence.1").await
    })
    .await;
    assert!(
        !unroutable_at_root(&root_conn, "k.1").await,
        "still bound: q2 wants it"
    );
    // Deleting the second queue removes its bindings: the last k.1 goes upstream too.
    ch.queue_delete(&names[1], false, false).await.unwrap();
    eventually("k.1 unbound upstream", || async {
        unroutable_at_root(&root_conn, "k.1").await
    })
    .await;
    assert!(unroutable_at_root(&root_conn, "fence.1").await);
    relay.shutdown();
    root.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_exchange_removes_the_upstream_side() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("info")
        .try_init();
    let root = sluice::server::start(config("root", FederationConfig::default())).expect("root");
    let mut fed = relay_of(root.addresses[0].port(), AckMode::OnConfirm);
    fed.exchanges[0].exchange = ExchangeMatch::Name("prices".into());
    let relay = sluice::server::start(config("relay", fed)).expect("relay");
    let root_conn = connect(&root).await;
    let relay_conn = connect(&relay).await;
    let ch = relay_conn.open_channel().await.unwrap();
    ch.exchange_declare("prices", "topic", Default::default())
        .await
        .unwrap();
    let queue_exists = |name: &'static str| {
        let root_conn = &root_conn;
        async move {
            let ch = root_conn.open_channel().await.unwrap();
            let opts = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            ch.queue_declare(name, opts).await.is_ok()
        }
    };
    eventually("the link's upstream queue", || {
        queue_exists("federation: prices -> relay")
    })
    .await;
    ch.exchange_delete("prices", false).await.unwrap();
    eventually("the upstream queue to go", || async {
        !queue_exists("federation: prices -> relay").await
    })
    .await;
    let probe = root_conn.open_channel().await.unwrap();
    let passive = sluice::client::ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let gone = probe
        .exchange_declare("federation: prices -> relay A", "fanout", passive)
        .await
        .unwrap_err();
    assert_eq!(gone.reply_code(), Some(404), "{gone}");
    relay.shutdown();
    root.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_federating_each_other_do_not_loop() {
    mutual(1).await;
}

/// With two hops allowed a message could go a → b → a: only the node names in
/// `x-received-from` stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_federating_each_other_do_not_loop_with_two_hops() {
    mutual(2).await;
}

async fn mutual(max_hops: u16) {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("info")
        .try_init();
    // Ports first: each broker names the other as its upstream.
    let probe_a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let probe_b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (pa, pb) = (probe_a.local_addr().unwrap(), probe_b.local_addr().unwrap());
    drop((probe_a, probe_b));
    let mut ca = config("a", relay_of(pb.port(), AckMode::OnConfirm));
    ca.listen = vec![pa];
    ca.federation.upstreams[0].max_hops = max_hops;
    let mut cb = config("b", relay_of(pa.port(), AckMode::OnConfirm));
    cb.listen = vec![pb];
    cb.federation.upstreams[0].max_hops = max_hops;
    let a = sluice::server::start(ca).expect("a");
    let b = sluice::server::start(cb).expect("b");
    let (ca, cb) = (connect(&a).await, connect(&b).await);
    let mut consumers = Vec::new();
    for conn in [&ca, &cb] {
        let ch = conn.open_channel().await.unwrap();
        let q = ch
            .queue_declare("", QueueDeclareOptions::default())
            .await
            .unwrap();
        ch.queue_bind(&q.name.to_string(), "amq.topic", "m.#", FieldTable::new())
            .await
            .unwrap();
        let c = ch
            .basic_consume(
                &q.name.to_string(),
                ConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        consumers.push((ch, c));
    }
    // Both directions carry m.# once each side's binding reached the other.
    let pa_ch = ca.open_channel().await.unwrap();
    eventually("b's binding at a", || async {
        !unroutable_at_root_of(&ca, "m.x").await
    })
    .await;
    eventually("a's binding at b", || async {
        !unroutable_at_root_of(&cb, "m.x").await
    })
    .await;
    // Let the probes of unroutable_at_root_of drain.
    for (_, c) in &mut consumers {
        while let Ok(Ok(_)) = timeout(Duration::from_millis(300), c.recv()).await {}
    }
    const N: usize = 100;
    for i in 0..N {
        pa_ch
            .basic_publish(
                "amq.topic",
                "m.x",
                false,
                NO_PROPERTIES,
                format!("a{i}").into_bytes().into(),
            )
            .await
            .unwrap();
    }
    for (side, (_, c)) in consumers.iter_mut().enumerate() {
        for i in 0..N {
            let d = timeout(LIMIT, c.recv()).await.expect("delivery").unwrap();
            assert_eq!(
                d.body,
                format!("a{i}").into_bytes(),
                "side {side}: once, in order"
            );
        }
        assert!(
            timeout(Duration::from_millis(700), c.recv()).await.is_err(),
            "side {side}: nothing bounced back"
        );
    }
    b.shutdown();
    a.shutdown();
}

/// As [`unroutable_at_root`], on any broker's `amq.topic`.
async fn unroutable_at_root_of(conn: &Connection, key: &str) -> bool {
    unroutable_at_root(conn, key).await
}

/// The links' own login is not a way in: the reserved user with any other password is
/// refused as a wrong password is (403), even when a configured user has that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_link_credential_cannot_be_guessed() {
    let root = sluice::server::start(config("root", FederationConfig::default())).expect("root");
    let mut relay_config = config(
        "relay",
        relay_of(root.addresses[0].port(), AckMode::OnConfirm),
    );
    relay_config.users.push(sluice::config::User {
        name: sluice::auth::local_link::LINK_USER.into(),
        password: sluice::auth::password::Password::Plain("known".into()),
        tags: vec![],
    });
    let relay = sluice::server::start(relay_config).expect("relay");
    for password in ["known", "guest", ""] {
        let url = format!(
            "amqp://{}:{password}@{}/",
            sluice::auth::local_link::LINK_USER,
            relay.addresses[0]
        );
        let refused = Connection::connect(&url).await.err().expect("refused");
        assert_eq!(refused.reply_code(), Some(403), "{password:?}: {refused}");
    }
    relay.shutdown();
    root.shutdown();
}
