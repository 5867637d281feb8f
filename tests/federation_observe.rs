//! Seeing a federation link (issue 20): two in-process brokers, root → relay, with the
//! relay's management listener on 127.0.0.1:0. After traffic the relay's
//! `GET /api/federation-links` shows the link `running` with RabbitMQ's field names and
//! exact values (messages forwarded = messages sent; the loop-checked ones dropped at the root),
//! under the API's vhost rules; /metrics has the link's series with the same figures;
//! `sluicectl federation` prints them as a table and `--json` as the API's JSON. With the
//! root stopped the link is `error` with its reason, in the API, `…/state/down`, /metrics
//! and the table.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http::{self, parse_openmetrics, value};
use serde_json::{json, Value};
use sluice::client::{
    encode_properties, Connection, ConsumeOptions, QueueDeclareOptions, NO_PROPERTIES,
};
use sluice::config::federation::{
    AckMode, ExchangeMatch, FederatedExchanges, FederationConfig, Upstream,
};
use sluice::config::Config;
use sluice::protocol::{BasicProperties, FieldTable, FieldValue, LongStr};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(30);
/// Messages published at the root that the relay's subscriber wants.
const SENT: u64 = 500;
/// Messages published at the root that already carry a hop (max_hops 1): the root's
/// `x-federation-upstream` exchange drops them before they cross the link.
const LOOPED: u64 = 3;
/// So the link's own check (for upstreams without that type) drops none.
const DROPPED_AT_LINK: u64 = 0;

const RELAY_AUTH: &str = r#"
[vhosts]
names = ["/", "other"]

[auth]
users = [
  { name = "guest", password = "guest", tags = ["administrator"] },
  { name = "viewer", password = "v", tags = ["management"] },
]
permissions = [
  { user = "guest", vhost = "/", configure = ".*", write = ".*", read = ".*" },
  { user = "viewer", vhost = "other", configure = ".*", write = ".*", read = ".*" },
]
"#;

fn config(node: &str, federation: FederationConfig, http: bool) -> Config {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let data_dir = std::env::temp_dir().join(format!("sluice-fedobs-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    Config {
        listen: vec!["127.0.0.1:0".parse().expect("addr")],
        shards: 2,
        data_dir,
        node_name: node.into(),
        federation,
        http: sluice::config::HttpConfig {
            listen: http.then(|| "127.0.0.1:0".parse().expect("addr")),
            ..Default::default()
        },
        ..Config::default()
    }
}

fn relay_of(root_port: u16) -> FederationConfig {
    FederationConfig {
        upstreams: vec![Upstream {
            name: "root".into(),
            uris: vec![format!("amqp://guest:guest@127.0.0.1:{root_port}/%2f")],
            exchange: None,
            max_hops: 1,
            prefetch_count: 1000,
            reconnect_delay: Duration::from_millis(300),
            ack_mode: AckMode::OnConfirm,
            expires: None,
            message_ttl: None,
            trust_user_id: false,
            queue_arguments: Vec::new(),
        }],
        exchanges: vec![FederatedExchanges {
            vhost: "/".into(),
            exchange: ExchangeMatch::Name("amq.topic".into()),
            upstreams: vec!["root".into()],
        }],
    }
}

/// The log lines written to it, for finding the management listener's BRK-1014 line.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut lines) = self.0.lock() {
            lines.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts a broker whose management listener is on port 0, and reads the port it got
/// from its BRK-1014 line (emitted on this thread while it starts, so a subscriber
/// scoped to this call sees this broker's line only).
fn start_with_http(config: Config) -> (sluice::server::Broker, u16) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let broker = tracing::subscriber::with_default(subscriber, || sluice::server::start(config))
        .expect("relay starts");
    let text = String::from_utf8_lossy(&captured.0.lock().expect("log")).into_owned();
    let marker = "BRK-1014 : Management listening on http://127.0.0.1:";
    let at = text.find(marker).expect("the BRK-1014 line") + marker.len();
    let port: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (broker, port.parse().expect("the management port"))
}

async fn get(
    port: u16,
    path: &'static str,
    auth: Option<(&'static str, &'static str)>,
) -> http::Response {
    tokio::task::spawn_blocking(move || http::request(port, "GET", path, auth))
        .await
        .expect("HTTP request")
}

/// The relay's links, as its API lists them.
async fn links(port: u16) -> Vec<Value> {
    let resp = get(port, "/api/federation-links", Some(("guest", "guest"))).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    match resp.json() {
        Value::Array(all) => all,
        other => panic!("not a list: {other}"),
    }
}

/// Polls the relay's one link until `done` holds for it; returns it. Panics after
/// [`LIMIT`] with the last one seen.
async fn link_when(port: u16, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let all = links(port).await;
        assert!(all.len() <= 1, "one link: {all:?}");
        if let Some(link) = all.into_iter().next() {
            if done(&link) {
                return link;
            }
            assert!(
                start.elapsed() < LIMIT,
                "timed out waiting for {what}: {link}"
            );
        } else {
            assert!(
                start.elapsed() < LIMIT,
                "timed out waiting for {what}: no link"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `epoch` in this machine's local time as RabbitMQ prints a link's timestamp, from
/// `date` (the hour unpadded).
fn local_timestamp(epoch: u64) -> String {
    let out = std::process::Command::new("date")
        .arg("-d")
        .arg(format!("@{epoch}"))
        .arg("+%Y-%m-%d %-H:%M:%S")
        .output()
        .expect("run date");
    assert!(out.status.success(), "date: {out:?}");
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_owned()
}

/// Runs the built `sluicectl` against `port`; its stdout.
async fn sluicectl(port: u16, args: &'static [&'static str]) -> String {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluicectl"))
            .arg("--server")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .output()
            .expect("run sluicectl")
    })
    .await
    .expect("sluicectl");
    assert!(out.status.success(), "sluicectl {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The table's rows, each split at runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

const HEADER: [&str; 10] = [
    "upstream",
    "vhost",
    "exchange",
    "status",
    "uri",
    "forwarded",
    "dropped",
    "lag",
    "since",
    "error",
];

async fn metric(port: u16, name: &str) -> Option<f64> {
    let resp = get(port, "/metrics", Some(("guest", "guest"))).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    let samples = parse_openmetrics(&resp.body);
    let labels = [
        ("vhost", "/"),
        ("exchange", "amq.topic"),
        ("upstream", "root"),
    ];
    value(&samples, name, &labels)
}

/// Properties whose `x-received-from` already has one hop: with max_hops 1 the link
/// drops the message (and acknowledges it upstream).
fn looped_properties() -> bytes::Bytes {
    let s = |v: &str| FieldValue::LongStr(LongStr::from(v));
    let mut hop = FieldTable::new();
    hop.insert("uri", s("amqp://elsewhere"));
    hop.insert("exchange", s("amq.topic"));
    hop.insert("redelivered", FieldValue::Bool(false));
    hop.insert("cluster-name", s("elsewhere"));
    hop.insert("vhost", s("/"));
    let mut headers = FieldTable::new();
    headers.insert(
        "x-received-from",
        FieldValue::Array(vec![FieldValue::Table(hop)]),
    );
    encode_properties(&BasicProperties {
        headers: Some(headers),
        ..BasicProperties::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_is_seen_running_and_down() {
    timeout(Duration::from_secs(120), run())
        .await
        .expect("the test finishes in time");
}

async fn run() {
    let root = sluice::server::start(config("root", FederationConfig::default(), false))
        .expect("root starts");
    let root_port = root.addresses[0].port();
    let mut relay_config = config("relay", relay_of(root_port), true);
    sluice::config::file::apply_text(&mut relay_config, RELAY_AUTH).expect("relay auth");
    let (relay, port) = start_with_http(relay_config);
    let uri = format!("amqp://127.0.0.1:{root_port}/%2f");

    // A subscriber at the relay, then the link running with its binding upstream.
    let relay_conn = Connection::connect(&format!("amqp://guest:guest@{}/", relay.addresses[0]))
        .await
        .expect("connect to the relay");
    let sub = relay_conn.open_channel().await.expect("channel");
    let q = sub
        .queue_declare("", QueueDeclareOptions::default())
        .await
        .expect("queue");
    let queue = q.name.to_string();
    sub.queue_bind(&queue, "amq.topic", "prices.#", FieldTable::new())
        .await
        .expect("bind");
    let mut consumer = sub
        .basic_consume(
            &queue,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .await
        .expect("consume");
    link_when(port, "the link running with its binding", |l| {
        l["status"] == "running" && l["bindings"] == 1
    })
    .await;

    // Traffic at the root: SENT wanted, LOOPED that already made their one hop.
    let root_conn = Connection::connect(&format!("amqp://guest:guest@{}/", root.addresses[0]))
        .await
        .expect("connect to the root");
    let publisher = root_conn.open_channel().await.expect("channel");
    publisher.confirm_select().await.expect("confirms");
    let looped = looped_properties();
    for i in 0..SENT {
        if i % 100 == 50 && i / 100 < LOOPED {
            publisher
                .basic_publish(
                    "amq.topic",
                    "prices.eur",
                    false,
                    looped.clone(),
                    "looped".into(),
                )
                .await
                .expect("publish");
        }
        publisher
            .basic_publish(
                "amq.topic",
                "prices.eur",
                false,
                NO_PROPERTIES,
                i.to_string().into(),
            )
            .await
            .expect("publish");
    }
    assert!(publisher.wait_for_confirms().await.expect("confirms"));
    for i in 0..SENT {
        let d = timeout(LIMIT, consumer.recv())
            .await
            .expect("a delivery in time")
            .expect("delivery");
        assert_eq!(std::str::from_utf8(&d.body).expect("UTF-8"), i.to_string());
    }
    assert!(
        timeout(Duration::from_millis(300), consumer.recv())
            .await
            .is_err(),
        "the looped messages never arrive"
    );

    // The API: every count settled (the lag is read every 5 s).
    let link = link_when(port, "the counts to settle", |l| {
        l["forwarded"] == SENT
            && l["dropped"] == DROPPED_AT_LINK
            && l["lag"] == 0
            && l["unconfirmed"] == 0
    })
    .await;
    let since = link["since"].as_u64().expect("since");
    let expected = json!({
        "node": "relay",
        "exchange": "amq.topic",
        "upstream_exchange": "amq.topic",
        "type": "exchange",
        "vhost": "/",
        "upstream": "root",
        "id": "/:amq.topic:root",
        "status": "running",
        "local_connection": "Federation link (upstream: root, exchange: amq.topic)",
        "uri": uri.as_str(),
        "timestamp": local_timestamp(since),
        "upstream_queue": "federation: amq.topic -> relay",
        "since": since,
        "forwarded": SENT,
        "dropped": DROPPED_AT_LINK,
        "redelivered": 0,
        "reconnects": 0,
        "bindings": 1,
        "binding_changes": 1,
        "lag": 0,
        "unconfirmed": 0,
    });
    assert_eq!(link, expected);
    let of_vhost = get(port, "/api/federation-links/%2F", Some(("guest", "guest"))).await;
    assert_eq!(of_vhost.status, 200, "{}", of_vhost.body);
    assert_eq!(of_vhost.json(), json!([expected]));
    for (path, status, body) in [
        ("/api/federation-links/other", 200, json!([])),
        ("/api/federation-links/state/down", 200, json!([])),
        ("/api/federation-links/%2F/state/down", 200, json!([])),
        (
            "/api/federation-links/%2F/nonsense",
            404,
            json!({"error": "Object Not Found", "reason": "Not Found"}),
        ),
    ] {
        let resp = get(port, path, Some(("guest", "guest"))).await;
        assert_eq!((resp.status, resp.json()), (status, body), "{path}");
    }
    // A management user sees only its vhosts' links, as in the other listings.
    let mine = get(port, "/api/federation-links", Some(("viewer", "v"))).await;
    assert_eq!((mine.status, mine.json()), (200, json!([])));
    let mine = get(port, "/api/federation-links/other", Some(("viewer", "v"))).await;
    assert_eq!((mine.status, mine.json()), (200, json!([])));
    let theirs = get(port, "/api/federation-links/%2F", Some(("viewer", "v"))).await;
    assert_eq!(
        (theirs.status, theirs.json()),
        (
            401,
            json!({"error": "not_authorised", "reason": "User not authorised to access virtual host"})
        )
    );
    let anonymous = get(port, "/api/federation-links", None).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);

    // /metrics.
    for (name, expected) in [
        ("sluice_federation_link_up", 1.0),
        (
            "sluice_federation_link_messages_forwarded_total",
            SENT as f64,
        ),
        (
            "sluice_federation_link_messages_dropped_total",
            DROPPED_AT_LINK as f64,
        ),
        ("sluice_federation_link_redelivered_total", 0.0),
        ("sluice_federation_link_reconnects_total", 0.0),
        ("sluice_federation_link_bindings", 1.0),
        ("sluice_federation_link_binding_changes_total", 1.0),
        ("sluice_federation_link_lag_messages", 0.0),
        ("sluice_federation_link_unconfirmed", 0.0),
    ] {
        assert_eq!(metric(port, name).await, Some(expected), "{name}");
    }

    // sluicectl: the API's JSON, and the table.
    let printed: Value = serde_json::from_str(&sluicectl(port, &["--json", "federation"]).await)
        .expect("sluicectl --json prints JSON");
    assert_eq!(printed, json!([expected]));
    let table = sluicectl(port, &["federation"]).await;
    let timestamp = local_timestamp(since);
    let (day, time) = timestamp.split_once(' ').expect("date and time");
    let forwarded = SENT.to_string();
    let dropped = DROPPED_AT_LINK.to_string();
    let row = [
        "root",
        "/",
        "amq.topic",
        "running",
        uri.as_str(),
        forwarded.as_str(),
        dropped.as_str(),
        "0",
        day,
        time,
    ];
    assert_eq!(rows(&table), vec![HEADER.to_vec(), row.to_vec()], "{table}");
    let other = sluicectl(port, &["federation", "--vhost", "other"]).await;
    assert_eq!(rows(&other), vec![HEADER.to_vec()], "{other}");

    // The root stops: the link is down, with the reason its reconnects fail with.
    drop(root_conn);
    tokio::task::spawn_blocking(move || root.shutdown())
        .await
        .expect("root stops");
    let refused = format!("{uri}: I/O error: Connection refused (os error 111)");
    let down = link_when(port, "the link down, refused", |l| {
        l["status"] == "error" && l["error"] == refused.as_str()
    })
    .await;
    assert!(down.get("local_connection").is_none(), "{down}");
    assert!(down["reconnects"].as_u64() >= Some(1), "{down}");
    assert_eq!(down["forwarded"], SENT, "{down}");
    assert_eq!(
        down["timestamp"],
        local_timestamp(down["since"].as_u64().expect("since")).as_str()
    );
    let listed = get(
        port,
        "/api/federation-links/state/down",
        Some(("guest", "guest")),
    )
    .await;
    let listed = listed.json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["id"], "/:amq.topic:root");
    assert_eq!(listed[0]["status"], "error");
    assert_eq!(metric(port, "sluice_federation_link_up").await, Some(0.0));
    assert!(
        metric(port, "sluice_federation_link_reconnects_total").await >= Some(1.0),
        "reconnects counted"
    );
    let table = sluicectl(port, &["federation"]).await;
    let lines = rows(&table);
    assert_eq!(lines.len(), 2, "{table}");
    assert_eq!(
        lines[1][..5],
        ["root", "/", "amq.topic", "error", uri.as_str()],
        "{table}"
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.ends_with("Connection refused (os error 111)")),
        "{table}"
    );

    drop(relay_conn);
    tokio::task::spawn_blocking(move || relay.shutdown())
        .await
        .expect("relay stops");
}
