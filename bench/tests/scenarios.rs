//! Each scenario runs for about two seconds against an embedded (in-process) sluice
//! through the real command line, and its `--json` has every field filled and
//! internally consistent. Bounded in time; never asserts speed.

mod common;

use common::{f, run, u};
use serde_json::Value;

/// The fields every report has, filled and consistent.
fn common(v: &Value, with_latency: bool) {
    for k in ["tool", "version", "scenario", "date_utc"] {
        assert!(!v[k].as_str().unwrap_or("").is_empty(), "{k}");
    }
    assert!(u(v, "machine_cores") >= 1);
    assert!(!v["broker"]["label"].as_str().unwrap().is_empty());
    assert!(v["config"].is_object());
    assert!(u(v, "published") > 0, "published");
    assert!(u(v, "delivered") > 0, "delivered");
    assert!(f(v, "window_s") > 0.0);
    assert!(u(v, "published_in_window") <= u(v, "published"));
    assert!(u(v, "delivered_in_window") <= u(v, "delivered"));
    // A flow run's publishers may be held through the whole (short) window.
    assert!(f(v, "publish_rate") > 0.0 || v["scenario"] == "flow");
    assert!(f(v, "deliver_rate") > 0.0);
    assert!(
        v["broker_cpu_ns"].as_u64().is_some(),
        "broker CPU measured (in-process shards)"
    );
    assert!(f(v, "broker_cpu_ns_per_delivered") >= 0.0);
    assert!(u(v, "broker_rss_max_bytes") > 0, "broker RSS");
    assert!(f(v, "tool_cpu_ns_per_message") >= 0.0);
    let timeline = v["timeline"].as_array().unwrap();
    assert!(!timeline.is_empty(), "timeline");
    for sample in timeline {
        for k in [
            "t",
            "published_per_s",
            "delivered_per_s",
            "p99_ns",
            "fast_delivered_per_s",
            "fast_p99_ns",
            "slow_delivered_per_s",
        ] {
            assert!(sample[k].is_number(), "{k} in {sample}");
        }
        assert!(
            u(sample, "broker_rss") > 0,
            "RSS sampled each second: {sample}"
        );
        let q = sample
            .get("queue_messages")
            .expect("queue_messages in every sample");
        assert!(q.is_null() || q.is_u64(), "{sample}");
    }
    assert!(f(v, "window_end_s") >= f(v, "window_start_s"));
    assert!(
        v["broker_rss_window_min_bytes"].as_u64() <= v["broker_rss_window_max_bytes"].as_u64(),
        "RSS range"
    );
    for g in ["fast", "slow"] {
        let g = &v[g];
        for k in ["subscribers", "delivered", "delivered_in_window"] {
            assert!(g[k].is_u64(), "{k} in {g}");
        }
        assert!(g["deliver_rate_per_subscriber"].is_number() && g["latency"].is_object());
    }
    assert_eq!(
        u(&v["fast"], "subscribers") + u(&v["slow"], "subscribers"),
        v["subscribers"].as_array().unwrap().len() as u64
    );
    assert_eq!(
        u(&v["fast"], "delivered") + u(&v["slow"], "delivered"),
        u(v, "delivered"),
        "fast + slow = every delivery"
    );
    for p in v["publishers"].as_array().unwrap() {
        for k in [
            "flow_held_ms",
            "flow_waits",
            "flow_timeouts",
            "channel_flow_stops",
            "connection_blocks",
            "send_blocked_ms",
            "pacing_wait_ms",
            "pacing_waits",
            "run_ms",
        ] {
            assert!(p[k].is_u64(), "{k} in {p}");
        }
    }
    let pacing = v["pacing"].as_str().expect("pacing");
    assert!(
        pacing.starts_with("closed loop, max backlog ") || pacing.starts_with("open loop"),
        "{pacing}"
    );
    for sub in v["subscribers"].as_array().unwrap() {
        for k in ["closed_code", "closed_text", "closed_at_s", "gaps"] {
            assert!(sub.get(k).is_some(), "{k} in {sub}");
        }
    }
    assert!(v["broker_log_codes"].is_object());
    let c = &v["connections"];
    assert!(u(c, "connections") >= 1, "{c}");
    assert_eq!(
        u(c, "subscriber_connections"),
        v["subscribers"].as_array().unwrap().len() as u64
            / v["cells"].as_array().map_or(1, |a| a.len().max(1) as u64),
        "{c}"
    );
    assert!(["wire", "full"].contains(&c["subscriber_client"].as_str().unwrap()));
    assert!(f(c, "setup_s") >= 0.0);
    assert!(u(c, "broker_rss_baseline_bytes") > 0 && u(c, "broker_rss_start_bytes") > 0);
    assert!(u(c, "broker_rss_peak_bytes") >= u(c, "broker_rss_start_bytes"));
    let sp = &v["spread"];
    assert_eq!(u(sp, "subscribers"), u(&v["fast"], "subscribers"));
    assert!(u(sp, "delivered_min") <= u(sp, "delivered_max"));
    // (A flow run's consumers are all throttled: no fast subscriber to spread.)
    if with_latency && u(sp, "subscribers") > 0 {
        let (lo, mid, hi) = (
            u(sp, "p99_min_ns"),
            u(sp, "p99_median_ns"),
            u(sp, "p99_max_ns"),
        );
        assert!(lo > 0 && lo <= mid && mid <= hi, "{sp}");
        assert_eq!(u(sp, "reordered"), 0, "in order");
    }
    assert!(f(v, "tool_cpu_ns_per_delivered") >= 0.0);
    let subs: u64 = v["subscribers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| u(s, "delivered"))
        .sum();
    assert_eq!(subs, u(v, "delivered"), "subscriber counts add up");
    let pubs: u64 = v["publishers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(p, "published"))
        .sum();
    assert_eq!(pubs, u(v, "published"), "publisher counts add up");
    if with_latency {
        let l = &v["latency"];
        assert!(u(l, "count") > 0);
        let (p50, p90, p99, p999, max) = (
            u(l, "p50_ns"),
            u(l, "p90_ns"),
            u(l, "p99_ns"),
            u(l, "p999_ns"),
            u(l, "max_ns"),
        );
        assert!(
            p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max,
            "{l}"
        );
        assert!(!v["latency_distribution"].as_array().unwrap().is_empty());
    }
}

const SHORT: [&str; 8] = [
    "--duration",
    "2",
    "--warmup",
    "0.5",
    "--drain-timeout",
    "20",
    "--settle",
    "0.2",
];

#[test]
fn fanout_delivers_every_message_to_every_subscriber() {
    let v = run(
        "fanout",
        &[
            &["fanout", "--subscribers", "4", "--rate", "3000"][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    assert_eq!(u(&v, "expected_delivered"), u(&v, "published") * 4);
    assert_eq!(
        u(&v, "delivered"),
        u(&v, "published") * 4,
        "delivered = published x subscribers"
    );
    assert!(v["latency"]["from_intended_send_time"].as_bool().unwrap());
    for s in v["subscribers"].as_array().unwrap() {
        assert_eq!(u(s, "delivered"), u(&v, "published"));
        assert_eq!(u(s, "gaps"), 0);
    }
    assert_eq!(v["pacing"], "open loop (fixed rate 3000/s per publisher)");
}

/// `--rate 0` is closed loop: the publisher stays at most `--max-ahead` messages
/// ahead of its subscribers and reports the time it waited for them.
#[test]
fn fanout_at_max_rate_is_closed_loop() {
    let v = run(
        "fanout-closed",
        &[
            &["fanout", "--subscribers", "3", "--max-ahead", "1000"][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    assert_eq!(v["pacing"], "closed loop, max backlog 1000");
    assert_eq!(u(&v, "pacing_max_ahead"), 1000);
    assert_eq!(
        u(&v, "delivered"),
        u(&v, "published") * 3,
        "delivered = published x subscribers"
    );
    let p = &v["publishers"][0];
    assert!(u(p, "pacing_wait_ms") <= u(p, "run_ms"));
    assert_eq!(
        u(&v, "pacing_wait_ms"),
        u(p, "pacing_wait_ms"),
        "one publisher"
    );
}

/// `--open-loop` restores publishing as fast as possible, however far ahead.
#[test]
fn open_loop_flag_turns_pacing_off() {
    let v = run(
        "fanout-open",
        &[
            "fanout",
            "--subscribers",
            "2",
            "--open-loop",
            "--duration",
            "1",
            "--warmup",
            "0.5",
            "--drain-timeout",
            "20",
        ],
    );
    common(&v, true);
    assert_eq!(v["pacing"], "open loop");
    assert!(v["pacing_max_ahead"].is_null());
    assert_eq!(u(&v, "pacing_wait_ms") + u(&v, "pacing_waits"), 0);
}

#[test]
fn fanout_manual_ack_with_prefetch() {
    let v = run(
        "fanout-ack",
        &[
            &[
                "fanout",
                "--subscribers",
                "2",
                "--ack",
                "client",
                "--prefetch",
                "100",
                "--rate",
                "5000",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    assert_eq!(u(&v, "delivered"), u(&v, "published") * 2);
}

#[test]
fn workq_delivers_each_message_once() {
    let v = run(
        "workq",
        &[
            &[
                "workq",
                "--publishers",
                "2",
                "--consumers",
                "2",
                "--rate",
                "2000",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    assert_eq!(u(&v, "delivered"), u(&v, "published"));
}

#[test]
fn slowsub_reports_the_slow_subscriber() {
    let v = run(
        "slowsub",
        &[
            &[
                "slowsub",
                "--subscribers",
                "3",
                "--rate",
                "1000",
                "--slow-rate",
                "50",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    let subs = v["subscribers"].as_array().unwrap();
    let slow: Vec<_> = subs
        .iter()
        .filter(|s| s["slow"].as_bool().unwrap())
        .collect();
    assert_eq!(slow.len(), 1);
    for s in subs.iter().filter(|s| !s["slow"].as_bool().unwrap()) {
        assert_eq!(
            u(s, "delivered"),
            u(&v, "published"),
            "fast subscribers get everything"
        );
    }
    assert!(u(slow[0], "delivered") < u(&v, "published"));
}

/// The fields the slow-consumer runs are read from. The policy flags only add queue
/// arguments: whether the broker acted on them is for tests/slow_consumer.rs.
#[test]
fn slowsub_with_policy_flags_reports_fast_and_slow_apart() {
    let v = run(
        "slowsub-policy",
        &[
            &[
                "slowsub",
                "--subscribers",
                "3",
                "--rate",
                "1000",
                "--slow-rate",
                "50",
                "--policy",
                "cycle",
                "--max-count",
                "100",
            ][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    let args = v["config"]["queue_args"].as_array().unwrap();
    for kv in [
        ["x-slow-consumer-policy", "cycle"],
        ["x-slow-consumer-max-count", "100"],
    ] {
        assert!(
            args.iter().any(|a| a == &serde_json::json!(kv)),
            "{kv:?} in {args:?}"
        );
    }
    assert_eq!(u(&v["fast"], "subscribers"), 2);
    assert_eq!(u(&v["slow"], "subscribers"), 1);
    assert!(
        u(&v["fast"]["latency"], "count") > 0,
        "fast latency measured"
    );
    assert!(f(&v["fast"], "deliver_rate_per_subscriber") > 0.0);
    assert!(v["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["queue_messages"].is_null()));
}

/// Small capacity so a broker that enforces it releases the publishers quickly at
/// the end; a short wait-failure bounds a publisher held by one that never does.
const FLOW_SMALL: [&str; 8] = [
    "--queue-arg",
    "x-qpid-capacity=262144",
    "--queue-arg",
    "x-qpid-flow-resume-capacity=131072",
    "--flow-wait-failure-ms",
    "3000",
    "--flow-notify-period-ms",
    "1000",
];

fn flow_common(v: &Value) {
    for k in [
        "flow_held_ms",
        "flow_waits",
        "flow_timeouts",
        "flow_channel_stops",
        "flow_connection_blocks",
        "send_blocked_ms",
    ] {
        let _ = u(v, k);
    }
    let depth: Vec<u64> = v["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["queue_messages"].as_u64())
        .collect();
    assert!(!depth.is_empty(), "queue depth sampled each second");
    assert!(v["queue_messages_min"].as_u64() <= v["queue_messages_max"].as_u64());
    assert_eq!(
        u(&v["slow"], "subscribers"),
        1,
        "the one consumer is throttled"
    );
}

#[test]
fn flow_reports_publishers_and_flow_fields() {
    let v = run(
        "flow",
        &[
            &["flow", "--rate", "2000", "--slow-rate", "1000"][..],
            &FLOW_SMALL,
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    flow_common(&v);
    assert_eq!(v["publishers"].as_array().unwrap().len(), 4);
    assert!(
        v["calibration"].is_null(),
        "--slow-rate given: no calibration"
    );
    assert_eq!(v["config"]["flow_wait_failure_ms"], 3000);
    assert_eq!(v["config"]["flow_notify_period_ms"], 1000);
}

/// `--ignore-flow` publishers at their maximum rate, the consumer at 10 % of the
/// rate a calibration run measured first.
#[test]
fn flow_ignoring_publishers_after_calibration() {
    let v = run(
        "flow-ignore",
        &[
            &[
                "flow",
                "--ignore-flow",
                "--publishers",
                "2",
                "--size",
                "64",
                "--calibrate",
                "0.5",
                "--duration",
                "1.5",
                "--warmup",
                "0.5",
                "--drain-timeout",
                "2",
            ][..],
            &FLOW_SMALL,
        ]
        .concat(),
    );
    common(&v, false);
    flow_common(&v);
    assert_eq!(v["config"]["ignore_flow"], true);
    let c = &v["calibration"];
    assert!(f(c, "publish_rate") > 0.0, "{c}");
    assert_eq!(f(c, "fraction"), 0.1);
    assert_eq!(u(c, "slow_rate"), u(&v["config"], "slow_rate"));
    assert_eq!(u(&v, "flow_waits"), 0, "ignoring publishers never wait");
    assert_eq!(u(&v, "flow_held_ms"), 0);
}

#[test]
fn persistent_confirms_every_message() {
    let v = run(
        "persistent",
        &[
            &["persistent", "--rate", "2000", "--confirm", "50"][..],
            &SHORT,
        ]
        .concat(),
    );
    common(&v, true);
    assert_eq!(u(&v, "confirmed") + u(&v, "nacked"), u(&v, "published"));
    assert_eq!(u(&v, "delivered"), u(&v, "published"));
    // Confirm latency (publish → basic.ack) apart from delivery latency.
    let cl = &v["confirm_latency"];
    assert!(u(cl, "count") > 0, "confirms timed in the window: {cl}");
    assert!(
        u(cl, "p50_ns") > 0 && u(cl, "p50_ns") <= u(cl, "p99_ns"),
        "{cl}"
    );
    assert!(u(&v, "confirmed_in_window") > 0 && f(&v, "confirm_rate") > 0.0);
    // An in-process broker's log is not read: no fsync figures, and why.
    assert!(v["store"].is_null());
    assert!(v["store_unavailable"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
}

#[test]
fn matrix_has_every_cell() {
    let v = run(
        "matrix",
        &[
            "matrix",
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--rate",
            "500",
            "--slow-rate",
            "50",
            "--drain-timeout",
            "1",
        ],
    );
    common(&v, false);
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(
        cells.len(),
        20,
        "5 ack modes x 2 consume modes x 2 topic types"
    );
    for c in cells {
        assert!(c["error"].is_null(), "{c}");
        assert!(u(c, "published") > 0, "{c}");
        assert!(c["policy_fired"].is_string() && c["as_configured"].is_boolean());
        assert!(u(c, "fast_subscribers") >= 1);
    }
}
