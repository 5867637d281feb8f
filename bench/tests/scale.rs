//! The scale features of sluice-bench, small: the wire subscriber client (every
//! message delivered to every subscriber, in order, no-ack and manual acks), the
//! many-topics fan-out, the idle scenario, the stream readers, and the wire client
//! refusing what it does not support. Against an embedded (in-process) sluice; bounded in time;
//! never asserts speed.

mod common;

use common::{f, refused, run, run_expecting, u};
use serde_json::Value;

const SHORT: [&str; 8] = [
    "--duration",
    "1.5",
    "--warmup",
    "0.5",
    "--drain-timeout",
    "20",
    "--settle",
    "0.5",
];

/// Every subscriber got every message, in order, and the spread says so.
fn every_message_in_order(v: &Value, per_sub: u64) {
    let subs = v["subscribers"].as_array().unwrap();
    for s in subs {
        assert_eq!(u(s, "delivered"), per_sub, "{s}");
        assert_eq!(u(s, "gaps"), 0, "{s}");
        assert_eq!(u(s, "reordered"), 0, "{s}");
        assert!(s["error"].is_null() && s["closed_code"].is_null(), "{s}");
        assert!(u(s, "measured") > 0 && u(s, "p99_ns") > 0, "{s}");
    }
    let sp = &v["spread"];
    assert_eq!(u(sp, "subscribers"), subs.len() as u64);
    assert_eq!(u(sp, "delivered_min"), per_sub);
    assert_eq!(u(sp, "delivered_max"), per_sub);
    assert_eq!(u(sp, "reordered"), 0);
    assert!(u(sp, "p99_min_ns") <= u(sp, "p99_median_ns"));
    assert!(u(sp, "p99_median_ns") <= u(sp, "p99_max_ns"));
    assert!(u(sp, "window_delivered_min") <= u(sp, "window_delivered_max"));
    let c = &v["connections"];
    assert_eq!(u(c, "subscriber_connections"), subs.len() as u64);
    assert_eq!(c["subscriber_client"], "wire");
    assert!(u(c, "broker_rss_after_disconnect_bytes") > 0, "{c}");
    assert!(f(c, "rss_after_disconnect_pct_of_start") > 0.0, "{c}");
    assert!(f(c, "broker_rss_per_connection_bytes") >= 0.0, "{c}");
}

#[test]
fn wire_subscribers_receive_every_message_in_order() {
    let v = run(
        "wire-fanout",
        &[
            &[
                "fanout",
                "--subscribers",
                "50",
                "--subscriber-client",
                "wire",
                "--rate",
                "2000",
                "--setup-concurrency",
                "8",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    let published = u(&v, "published");
    assert!(published > 0);
    assert_eq!(u(&v, "expected_delivered"), published * 50);
    assert_eq!(u(&v, "delivered"), published * 50);
    every_message_in_order(&v, published);
    assert_eq!(u(&v["connections"], "setup_concurrency"), 8);
}

/// Manual acks (one `multiple` ack per read) under closed-loop pacing with a small
/// prefetch: the broker only goes on delivering if the acks arrive.
#[test]
fn wire_subscribers_ack_and_pace() {
    let v = run(
        "wire-ack",
        &[
            &[
                "fanout",
                "--subscribers",
                "65",
                "--ack",
                "client",
                "--prefetch",
                "20",
                "--max-backlog",
                "200",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    assert_eq!(
        v["connections"]["subscriber_client"], "wire",
        "auto above 64"
    );
    let published = u(&v, "published");
    assert!(published > 200, "acks flowed: {published}");
    assert_eq!(u(&v, "delivered"), published * 65);
    assert_eq!(v["pacing"], "closed loop, max backlog 200");
    every_message_in_order(&v, published);
}

/// 4 topics x 3 subscribers (an exact, a `*` and a `#` binding each): every
/// subscriber gets exactly its topic's messages.
#[test]
fn many_topics_deliver_exactly_each_topic() {
    let v = run(
        "topics",
        &[
            &[
                "fanout",
                "--subscribers",
                "12",
                "--topics",
                "4",
                "--subscriber-client",
                "wire",
                "--max-backlog",
                "500",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    let published = u(&v, "published");
    assert!(published > 0);
    assert_eq!(u(&v, "expected_delivered"), published * 3);
    assert_eq!(u(&v, "delivered"), published * 3, "delivered = expected");
    for s in v["subscribers"].as_array().unwrap() {
        // Round robin: topic t got the messages t, t + 4, t + 8, …
        let topic = u(s, "id") % 4;
        assert_eq!(u(s, "delivered"), (published + 3 - topic) / 4, "{s}");
        assert_eq!(u(s, "gaps") + u(s, "reordered"), 0, "{s}");
    }
    let sp = &v["spread"];
    assert!(u(sp, "delivered_max") - u(sp, "delivered_min") <= 1, "{sp}");
    let notes = v["notes"].as_array().unwrap();
    assert!(notes
        .iter()
        .any(|n| n.as_str().unwrap().starts_with("4 topics x 3 subscribers")));
}

/// The `streams` scenario, small: a stream prefilled with confirms, 70 readers (the
/// wire client above 64) from `next` each get every published message in order with
/// manual acks, and a replaying reader reads the prefill from `first` alongside.
#[test]
fn stream_readers_receive_every_message_and_a_replay_runs_alongside() {
    let v = run(
        "streams",
        &[
            &[
                "streams",
                "--subscribers",
                "70",
                "--rate",
                "500",
                "--prefetch",
                "50",
                "--prefill-bytes",
                "1048576",
                "--replay",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    assert_eq!(v["scenario"], "streams");
    assert_eq!(v["connections"]["subscriber_client"], "wire");
    let published = u(&v, "published");
    assert!(published > 0);
    assert_eq!(u(&v, "delivered"), published * 70);
    every_message_in_order(&v, published);
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("prefill: 16 messages of 65536 B")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("replay from first") && !n.contains("failed")),
        "{notes:?}"
    );
}

#[test]
fn idle_connections_report_rss_per_connection() {
    let v = run_expecting(
        "idle",
        &[
            "idle",
            "--connections",
            "40",
            "--duration",
            "1",
            "--settle",
            "0.5",
            "--setup-concurrency",
            "16",
        ],
        "per connection",
    );
    assert_eq!(v["scenario"], "idle");
    let c = &v["connections"];
    assert_eq!(u(c, "connections"), 40);
    for k in [
        "broker_rss_baseline_bytes",
        "broker_rss_start_bytes",
        "broker_rss_peak_bytes",
        "broker_rss_after_disconnect_bytes",
    ] {
        assert!(u(c, k) > 0, "{k} in {c}");
    }
    assert!(f(c, "broker_rss_per_connection_bytes") >= 0.0);
    assert!(f(c, "rss_after_disconnect_pct_of_start") > 0.0);
    assert!(f(c, "setup_s") > 0.0);
    assert_eq!(u(c, "setup_concurrency"), 16);
    assert!(!v["timeline"].as_array().unwrap().is_empty());
}

#[test]
fn the_wire_client_refuses_what_it_cannot_do() {
    for (args, why) in [
        (&["slowsub", "--subscriber-client", "wire"][..], "throttled"),
        (
            &["fanout", "--subscriber-client", "wire", "--ack", "auto"][..],
            "--ack auto",
        ),
        (
            &["fanout", "--subscriber-client", "wire", "--durable"][..],
            "durable",
        ),
        (
            &["workq", "--subscriber-client", "wire"][..],
            "shared queues",
        ),
    ] {
        let (code, err) = refused(&[args, &["--duration", "0.5", "--warmup", "0"][..]].concat());
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains("--subscriber-client wire does not support") && err.contains(why),
            "{args:?}: {err}"
        );
    }
}
