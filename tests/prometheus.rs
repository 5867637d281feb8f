//! The Prometheus listener (`http.prometheus_listen`), as rabbitmq_prometheus serves
//! port 15692: no credentials, the text format 0.0.4, RabbitMQ's own metric names and
//! labels, aggregated on `/metrics` and per queue on `/metrics/per-object`, with exact
//! figures for queues, connections, channels, consumers and logins; and the metric
//! names the queries of RabbitMQ's published "RabbitMQ-Overview" Grafana dashboard use.

mod common;

use std::time::Duration;

use common::http::{self, parse_prometheus_text, value, Sample};
use common::raw::RawConn;
use common::{wait_until, Broker};

const FILE: &str = "[http]\nprometheus_listen = \"127.0.0.1:0\"\n";

/// Every metric name the queries of RabbitMQ-Overview.json (rabbitmq-server,
/// deps/rabbitmq_prometheus/docker/grafana/dashboards) use, as a dashboard scrapes
/// them from `/metrics`.
const OVERVIEW_DASHBOARD: &[&str] = &[
    "rabbitmq_build_info",
    "rabbitmq_channels",
    "rabbitmq_channels_closed_total",
    "rabbitmq_channels_opened_total",
    "rabbitmq_connections",
    "rabbitmq_connections_closed_total",
    "rabbitmq_connections_opened_total",
    "rabbitmq_disk_space_available_bytes",
    "rabbitmq_disk_space_available_limit_bytes",
    "rabbitmq_erlang_uptime_seconds",
    "rabbitmq_global_consumers",
    "rabbitmq_global_messages_acknowledged_total",
    "rabbitmq_global_messages_confirmed_total",
    "rabbitmq_global_messages_delivered_consume_auto_ack_total",
    "rabbitmq_global_messages_delivered_consume_manual_ack_total",
    "rabbitmq_global_messages_delivered_get_auto_ack_total",
    "rabbitmq_global_messages_delivered_get_manual_ack_total",
    "rabbitmq_global_messages_delivered_total",
    "rabbitmq_global_messages_get_empty_total",
    "rabbitmq_global_messages_received_confirm_total",
    "rabbitmq_global_messages_received_total",
    "rabbitmq_global_messages_redelivered_total",
    "rabbitmq_global_messages_routed_total",
    "rabbitmq_global_messages_unroutable_dropped_total",
    "rabbitmq_global_messages_unroutable_returned_total",
    "rabbitmq_global_publishers",
    "rabbitmq_identity_info",
    "rabbitmq_message_size_bytes_bucket",
    "rabbitmq_message_size_bytes_sum",
    "rabbitmq_process_max_fds",
    "rabbitmq_process_open_fds",
    "rabbitmq_queue_messages_ready",
    "rabbitmq_queue_messages_unacked",
    "rabbitmq_queues",
    "rabbitmq_queues_created_total",
    "rabbitmq_queues_declared_total",
    "rabbitmq_queues_deleted_total",
    "rabbitmq_resident_memory_limit_bytes",
];

fn prometheus_port(broker: &Broker) -> u16 {
    let marker = "Prometheus listening on http://127.0.0.1:";
    let line = broker
        .wait_for_log(marker, Duration::from_secs(10))
        .expect("BRK-1023 line (the Prometheus listener)");
    let rest = &line[line.find(marker).expect("marker") + marker.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().expect("Prometheus port")
}

fn scrape(port: u16, path: &str) -> Vec<Sample> {
    let r = http::request(port, "GET", path, None);
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    assert_eq!(
        r.headers.get("content-type").map(String::as_str),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse_prometheus_text(&r.body)
}

fn one(samples: &[Sample], name: &str) -> f64 {
    value(samples, name, &[]).unwrap_or_else(|| panic!("{name} is not served"))
}

/// An open connection with channel 1 and `queues` declared on it (not durable).
fn with_queues(broker: &Broker, queues: &[&str]) -> RawConn {
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    for queue in queues {
        c.queue_declare(1, queue, false, false, false);
    }
    c
}

fn publish(c: &mut RawConn, queue: &str, n: usize) {
    for i in 0..n {
        c.publish(
            1,
            "",
            queue,
            &Default::default(),
            format!("m{i}").as_bytes(),
        )
        .expect("publish");
    }
}

#[test]
fn rabbitmq_names_and_figures_without_credentials() {
    let broker = Broker::start_with_config(2, FILE);
    let port = prometheus_port(&broker);
    let mut a = with_queues(&broker, &["prom.a", "prom.b"]);
    publish(&mut a, "prom.a", 3);
    publish(&mut a, "prom.b", 2);
    let mut b = RawConn::connect(&broker.addr());
    b.handshake();
    b.channel_open(1);
    b.channel_open(2);
    b.basic_consume(1, "prom.b", false);
    b.read_delivery(1);
    b.read_delivery(1);
    // One failed login.
    let mut bad = RawConn::connect(&broker.addr());
    bad.send_protocol_header();
    bad.read_start();
    bad.send_start_ok("PLAIN", b"\0guest\0wrong");
    // (Its answer may be delayed by the login throttle; the attempt counts at once.)
    let failed = |s: &[Sample]| {
        value(
            s,
            "rabbitmq_auth_attempts_failed_total",
            &[("protocol", "amqp091")],
        )
    };
    assert!(wait_until(Duration::from_secs(10), || failed(&scrape(
        port, "/metrics"
    )) == Some(1.0)));
    drop(bad);

    let figures = |s: &[Sample]| {
        (
            one(s, "rabbitmq_queue_messages_ready"),
            one(s, "rabbitmq_queue_messages_unacked"),
            one(s, "rabbitmq_connections"),
        )
    };
    assert!(
        wait_until(Duration::from_secs(10), || figures(&scrape(
            port, "/metrics"
        )) == (3.0, 2.0, 2.0)),
        "3 ready in prom.a, 2 unacked in prom.b, the failed login's socket gone: {:?}",
        figures(&scrape(port, "/metrics"))
    );
    let s = scrape(port, "/metrics");
    assert_eq!(one(&s, "rabbitmq_queue_messages"), 5.0);
    assert_eq!(one(&s, "rabbitmq_queues"), 2.0);
    assert_eq!(one(&s, "rabbitmq_connections"), 2.0);
    assert_eq!(one(&s, "rabbitmq_channels"), 3.0);
    assert_eq!(one(&s, "rabbitmq_consumers"), 1.0);
    assert_eq!(one(&s, "rabbitmq_queue_consumers"), 1.0);
    assert_eq!(one(&s, "rabbitmq_queue_messages_published_total"), 5.0);
    assert_eq!(
        value(&s, "rabbitmq_global_consumers", &[("protocol", "amqp091")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "rabbitmq_global_messages_delivered_total",
            &[("protocol", "amqp091")]
        ),
        Some(2.0)
    );
    assert!(one(&s, "rabbitmq_connections_opened_total") >= 2.0);
    assert_eq!(one(&s, "rabbitmq_channels_opened_total"), 3.0);
    assert_eq!(one(&s, "rabbitmq_channels_closed_total"), 0.0);
    assert_eq!(
        value(
            &s,
            "rabbitmq_auth_attempts_failed_total",
            &[("protocol", "amqp091")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "rabbitmq_auth_attempts_succeeded_total",
            &[("protocol", "amqp091")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &s,
            "rabbitmq_auth_attempts_total",
            &[("protocol", "amqp091")]
        ),
        Some(3.0)
    );
    // Node figures: descriptors, memory, disk, as plausible as the kernel says.
    let open = one(&s, "rabbitmq_process_open_fds");
    assert!(open >= 4.0, "sockets, files: {open}");
    assert!(one(&s, "rabbitmq_process_max_fds") >= open);
    assert!(one(&s, "rabbitmq_process_resident_memory_bytes") > 1e6);
    assert!(one(&s, "rabbitmq_resident_memory_limit_bytes") > 0.0);
    assert!(one(&s, "rabbitmq_disk_space_available_bytes") > 0.0);
    assert!(one(&s, "rabbitmq_disk_space_available_limit_bytes") >= 0.0);
    assert!(one(&s, "rabbitmq_erlang_uptime_seconds") >= 0.0);
    assert_eq!(one(&s, "rabbitmq_alarms_memory_used_watermark"), 0.0);
    assert_eq!(one(&s, "rabbitmq_alarms_free_disk_space_watermark"), 0.0);
    let identity = s
        .iter()
        .find(|x| x.name == "rabbitmq_identity_info")
        .expect("identity");
    let node = identity.labels.get("rabbitmq_node").expect("node label");
    assert!(!node.is_empty());
    assert_eq!(identity.labels.get("rabbitmq_cluster"), Some(node));
    assert_eq!(
        identity.labels.get("rabbitmq_endpoint").map(String::as_str),
        Some("aggregated")
    );
    // Aggregated: one row per family, no per-queue labels.
    let ready_rows = s
        .iter()
        .filter(|x| x.name == "rabbitmq_queue_messages_ready")
        .count();
    assert_eq!(ready_rows, 1);

    // Per object: each queue on its own row.
    let per = scrape(port, "/metrics/per-object");
    let row = |name: &str, queue: &str| value(&per, name, &[("vhost", "/"), ("queue", queue)]);
    assert_eq!(row("rabbitmq_queue_messages_ready", "prom.a"), Some(3.0));
    assert_eq!(row("rabbitmq_queue_messages_ready", "prom.b"), Some(0.0));
    assert_eq!(row("rabbitmq_queue_messages_unacked", "prom.b"), Some(2.0));
    assert_eq!(row("rabbitmq_queue_consumers", "prom.b"), Some(1.0));
    assert_eq!(
        row("rabbitmq_queue_messages_published_total", "prom.a"),
        Some(3.0)
    );
    assert!(per.iter().any(|x| x.name == "rabbitmq_identity_info"
        && x.labels.get("rabbitmq_endpoint").map(String::as_str) == Some("per-object")));

    // Closing the consumer's connection: the churn totals move, the unacked come back.
    drop(b);
    assert!(wait_until(Duration::from_secs(10), || {
        let s = scrape(port, "/metrics");
        one(&s, "rabbitmq_connections") == 1.0 && one(&s, "rabbitmq_queue_messages_ready") == 5.0
    }));
    let s = scrape(port, "/metrics");
    assert!(one(&s, "rabbitmq_connections_closed_total") >= 1.0);
    assert_eq!(one(&s, "rabbitmq_channels"), 1.0);
    assert_eq!(one(&s, "rabbitmq_channels_closed_total"), 2.0);

    // Only the two paths, only reads; the management API is not on this listener.
    assert_eq!(
        http::request(port, "GET", "/api/overview", None).status,
        404
    );
    assert_eq!(http::request(port, "POST", "/metrics", None).status, 405);
}

#[test]
fn the_overview_dashboards_metric_names_are_served() {
    let broker = Broker::start_with_config(1, FILE);
    let port = prometheus_port(&broker);
    let mut c = with_queues(&broker, &["dash"]);
    publish(&mut c, "dash", 1);
    let s = scrape(port, "/metrics");
    let served: Vec<&str> = OVERVIEW_DASHBOARD
        .iter()
        .copied()
        .filter(|name| s.iter().any(|x| x.name == *name))
        .collect();
    let missing: Vec<&str> = OVERVIEW_DASHBOARD
        .iter()
        .copied()
        .filter(|name| !served.contains(name))
        .collect();
    assert_eq!(
        missing,
        Vec::<&str>::new(),
        "every name the dashboard queries is served"
    );
    // The dashboard joins every query on rabbitmq_identity_info's rabbitmq_cluster.
    assert!(s
        .iter()
        .any(|x| x.name == "rabbitmq_identity_info" && x.labels.contains_key("rabbitmq_cluster")));
}

#[test]
fn off_by_default() {
    let broker = Broker::start(1);
    assert!(broker
        .wait_for_log("Prometheus listening", Duration::from_millis(500))
        .is_none());
}

/// Sends basic.publish with the mandatory flag, its header and one body frame.
fn publish_mandatory(c: &mut RawConn, key: &str, body: &[u8]) {
    use common::wire;
    let mut bytes = wire::frame(
        wire::FRAME_METHOD,
        1,
        &wire::method_payload(
            wire::m::BASIC_PUBLISH,
            &RawConn::publish_args("", key, true, false),
        ),
    );
    bytes.extend(wire::frame(
        wire::FRAME_HEADER,
        1,
        &wire::content_header_payload(body.len() as u64, &Default::default()),
    ));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, body));
    c.send(&bytes).expect("publish");
}

/// Reads methods on the connection until `basic.ack` of `tag` (multiple or not).
fn await_ack(c: &mut RawConn, tag: u64) {
    loop {
        let mth = c.read_method().expect("a method");
        if mth.id == common::wire::m::BASIC_RETURN {
            c.read_frame().expect("returned header");
            c.read_frame().expect("returned body");
            continue;
        }
        assert_eq!(mth.id, common::wire::m::BASIC_ACK);
        if mth.dec().longlong() >= tag {
            return;
        }
    }
}

fn basic_get(
    c: &mut RawConn,
    channel: u16,
    queue: &str,
    no_ack: bool,
) -> Option<common::raw::RawDelivery> {
    use common::wire::{m, Enc};
    let args = Enc::new().short(0).shortstr(queue).bits(&[no_ack]).done();
    c.send_method(channel, m::BASIC_GET, &args)
        .expect("basic.get");
    let mth = c.read_method().expect("get-ok or get-empty");
    if mth.id == m::BASIC_GET_EMPTY {
        return None;
    }
    assert_eq!(mth.id, m::BASIC_GET_OK);
    let header = c.read_frame().expect("header");
    let mut d = common::wire::Dec::new(&header.2);
    let (_class, _weight, size) = (d.short(), d.short(), d.longlong());
    let mut body = Vec::new();
    while (body.len() as u64) < size {
        body.extend(c.read_frame().expect("body").2);
    }
    Some(common::raw::RawDelivery {
        method: mth,
        header_payload: header.2,
        props: Default::default(),
        body,
        frame_sizes: Vec::new(),
    })
}

/// RabbitMQ's global counters count what clients did since the broker started, closed
/// channels included: publishes received (in confirm mode too), routed, returned and
/// dropped; confirms; deliveries by kind, get-empty, redeliveries and acks; queues
/// declared, created and deleted; and the published sizes in RabbitMQ's buckets.
#[test]
fn global_counters_count_what_clients_did() {
    let broker = Broker::start_with_config(2, FILE);
    let port = prometheus_port(&broker);
    let mut p = with_queues(&broker, &["g.a", "g.b", "g.a"]);
    p.confirm_select(1);
    publish(&mut p, "g.a", 4);
    publish_mandatory(&mut p, "nowhere", &[b'r'; 500]);
    p.publish(1, "", "nowhere", &Default::default(), &[b'd'; 5000])
        .expect("publish");
    await_ack(&mut p, 6);

    let mut c = with_queues(&broker, &[]);
    c.basic_consume(1, "g.a", false);
    for _ in 0..4 {
        c.read_delivery(1);
    }
    let ack = common::wire::Enc::new().longlong(2).bits(&[true]).done();
    c.send_method(1, common::wire::m::BASIC_ACK, &ack)
        .expect("ack");
    c.channel_open(2);
    assert!(basic_get(&mut c, 2, "g.b", false).is_none(), "g.b is empty");
    // The consumer's connection goes: its two unacked come back, its counts stay.
    drop(c);
    let mut g = with_queues(&broker, &[]);
    assert!(wait_until(Duration::from_secs(10), || {
        one(&scrape(port, "/metrics"), "rabbitmq_connections") == 2.0
    }));
    let got = basic_get(&mut g, 1, "g.a", true).expect("a requeued message");
    let mut d = got.method.dec();
    let (_tag, redelivered) = (d.longlong(), d.octet());
    assert_eq!(redelivered, 1);
    let del = common::wire::Enc::new()
        .short(0)
        .shortstr("g.b")
        .bits(&[false, false, false])
        .done();
    g.send_method(1, (50, 40), &del).expect("queue.delete");
    g.expect_method(1, (50, 41));

    let s = scrape(port, "/metrics");
    let amqp = [("protocol", "amqp091")];
    let classic = [
        ("protocol", "amqp091"),
        ("queue_type", "rabbit_classic_queue"),
    ];
    let figure = |name: &str, labels: &[(&str, &str)]| {
        value(&s, name, labels).unwrap_or_else(|| panic!("{name} is not served"))
    };
    for (name, want) in [
        ("rabbitmq_global_messages_received_total", 6.0),
        ("rabbitmq_global_messages_received_confirm_total", 6.0),
        ("rabbitmq_global_messages_routed_total", 4.0),
        ("rabbitmq_global_messages_unroutable_returned_total", 1.0),
        ("rabbitmq_global_messages_unroutable_dropped_total", 1.0),
        ("rabbitmq_global_messages_confirmed_total", 6.0),
    ] {
        assert_eq!(figure(name, &amqp), want, "{name}");
    }
    for (name, want) in [
        ("rabbitmq_global_messages_delivered_total", 5.0),
        (
            "rabbitmq_global_messages_delivered_consume_manual_ack_total",
            4.0,
        ),
        (
            "rabbitmq_global_messages_delivered_consume_auto_ack_total",
            0.0,
        ),
        (
            "rabbitmq_global_messages_delivered_get_manual_ack_total",
            0.0,
        ),
        ("rabbitmq_global_messages_delivered_get_auto_ack_total", 1.0),
        ("rabbitmq_global_messages_get_empty_total", 1.0),
        ("rabbitmq_global_messages_redelivered_total", 1.0),
        ("rabbitmq_global_messages_acknowledged_total", 2.0),
    ] {
        assert_eq!(figure(name, &classic), want, "{name}");
    }
    assert_eq!(one(&s, "rabbitmq_queues_declared_total"), 3.0);
    assert_eq!(one(&s, "rabbitmq_queues_created_total"), 2.0);
    assert_eq!(one(&s, "rabbitmq_queues_deleted_total"), 1.0);
    let bucket = |le: &str| {
        figure(
            "rabbitmq_message_size_bytes_bucket",
            &[("protocol", "amqp091"), ("le", le)],
        )
    };
    assert_eq!(
        (
            bucket("100.0"),
            bucket("1000.0"),
            bucket("10000.0"),
            bucket("+Inf")
        ),
        (4.0, 5.0, 6.0, 6.0)
    );
    assert_eq!(
        figure("rabbitmq_message_size_bytes_sum", &amqp),
        8.0 + 500.0 + 5000.0
    );
    assert_eq!(figure("rabbitmq_message_size_bytes_count", &amqp), 6.0);
}
