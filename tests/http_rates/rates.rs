//! Rates: with `[http] stats_interval_ms = 200`, a steady publisher's queue shows a
//! `publish_details.rate` near the achieved rate (within a wide factor: never a speed
//! assertion), and the rate goes back to 0 once publishing stops.

use std::time::Duration;

use tokio::time::Instant;

use super::api_json;
use super::common::{bounded, Broker};

const CONFIG: &str = "[http]\nstats_interval_ms = 200\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_rate_follows_a_steady_publisher_and_returns_to_zero() {
    let broker = Broker::start_with_config(1, CONFIG);
    bounded(async {
        let port = broker.http_port();
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        ch.declare_queue("rated").await;
        let path = "/api/queues/%2F/rated";
        let rate = |v: &serde_json::Value| {
            v["message_stats"]["publish_details"]["rate"]
                .as_f64()
                .unwrap_or_else(|| panic!("no publish rate: {v}"))
        };
        // 50 a second for 3 s, the rate read after the first second.
        let start = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let mut sent = 0u64;
        let mut seen = Vec::new();
        while start.elapsed() < Duration::from_secs(3) {
            tick.tick().await;
            ch.publish("", "rated", b"r").await;
            sent += 1;
            if start.elapsed() > Duration::from_secs(1) && sent % 10 == 0 {
                seen.push(rate(&api_json(port, path).await));
            }
        }
        let achieved = sent as f64 / start.elapsed().as_secs_f64();
        assert!(!seen.is_empty());
        seen.sort_by(f64::total_cmp);
        let median = seen[seen.len() / 2];
        assert!(
            median > 0.3 * achieved && median < 3.0 * achieved,
            "publish rate {median} (of {seen:?}) against {achieved:.1}/s achieved"
        );
        ch.wait_message_count("rated", sent as u32).await;
        let q = api_json(port, path).await;
        assert_eq!(q["message_stats"]["publish"], sent, "{q}");
        // Stopped: within a few intervals the rate is 0 again (bounded: 5 s).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let q = api_json(port, path).await;
            if rate(&q) == 0.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "rate still {} after 5 s: {q}",
                rate(&q)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The overview's publish rate also falls back to 0.
        let o = api_json(port, "/api/overview").await;
        assert_eq!(o["message_stats"]["publish"], sent, "{o}");
        assert_eq!(o["message_stats"]["publish_details"]["rate"], 0.0, "{o}");
        conn.close().await;
    })
    .await;
}
