//! sluice's own client under the real broker's flow control: a publish on a stopped
//! channel waits, warns every notify period, fails with `FlowControlTimeout` after the
//! wait-failure period without sending the message, and the channel stays usable.
//! (tests/client.rs checks the same against a scripted fake server.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice::client::{ClientError, FlowOptions, QueueDeclareOptions, NO_PROPERTIES};

use crate::common::{bounded, eventually, unique, Broker};
use crate::support::*;

/// Each test runs its client on the test's own thread (current-thread runtime), so the
/// thread-local log capture sees the client's WARN lines.
#[tokio::test]
async fn notify_and_wait_failure_shards_1() {
    bounded(notify_and_wait_failure(1)).await
}

#[tokio::test]
async fn notify_and_wait_failure_shards_2() {
    bounded(notify_and_wait_failure(2)).await
}

/// WARN lines written on this thread while the guard lives.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn capture_warnings() -> (LogBuf, tracing::subscriber::DefaultGuard) {
    let buf = LogBuf::default();
    let w = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    (buf, tracing::subscriber::set_default(subscriber))
}

/// Notify 200 ms, wait-failure 700 ms: a publish on a channel stopped by an overfull
/// queue warns at 0.2 s, 0.4 s and 0.6 s, then fails; the queue did not get the message;
/// the channel works on, and once the queue is drained a publish goes through at once.
async fn notify_and_wait_failure(shards: usize) {
    let (warnings, _guard) = capture_warnings();
    let broker = Broker::start(shards);
    let flow = FlowOptions {
        notify_period: Duration::from_millis(200),
        wait_failure: Duration::from_millis(700),
        honour_flow: true,
    };
    let conn = sluice_connect(&broker, flow).await;
    let ch = conn.open_channel().await.expect("channel");
    let q = unique("client-flow");
    ch.queue_declare(
        &q,
        QueueDeclareOptions {
            arguments: sluice_capacity_args(1000, Some(500)),
            ..Default::default()
        },
    )
    .await
    .expect("declare");
    let publish = |n: u64| {
        ch.basic_publish(
            "",
            q.as_str(),
            false,
            NO_PROPERTIES,
            Bytes::from(numbered(n)),
        )
    };
    for n in 1..=11 {
        publish(n).await.expect("publish below the capacity");
    }
    assert!(
        eventually(Duration::from_secs(5), || async { ch.is_flow_held() }).await,
        "the channel was not stopped after 1,100 bytes in a queue of capacity 1,000"
    );
    assert_eq!(sluice_count(&ch, &q).await, 11);
    expect_line(&broker, &overfull_line(&q, 1100, 1000));

    let started = Instant::now();
    match publish(12).await {
        Err(ClientError::FlowControlTimeout { waited }) => {
            assert!(waited >= flow.wait_failure, "reported {waited:?}");
        }
        other => panic!("expected FlowControlTimeout, got {other:?}"),
    }
    assert!(started.elapsed() >= flow.wait_failure);
    let delayed: Vec<String> = warnings
        .lines()
        .into_iter()
        .filter(|l| l.contains("due to broker enforced flow control"))
        .collect();
    assert_eq!(delayed.len(), 3, "{delayed:#?}");
    for (line, secs) in delayed.iter().zip(["0.2", "0.4", "0.6"]) {
        assert!(
            line.contains(&format!(
                "Message send delayed by {secs}s due to broker enforced flow control"
            )),
            "{line}"
        );
    }

    // Not sent: a request on the same channel is answered after any earlier publish.
    assert!(
        ch.error().is_none(),
        "the channel was closed: {:?}",
        ch.error()
    );
    assert_eq!(
        sluice_count(&ch, &q).await,
        11,
        "the timed-out message reached the queue"
    );
    let stats = ch.flow_stats();
    assert_eq!(
        (stats.channel_flow_stops, stats.waits, stats.timeouts),
        (1, 1, 1)
    );

    // Lift the flow (from another connection): the next publish goes straight out.
    let (other, och) = conn_and_channel(&broker).await;
    assert_eq!(purge(&och, &q).await, 11);
    assert!(
        eventually(Duration::from_secs(5), || async { !ch.is_flow_held() }).await,
        "the channel was not released after the purge"
    );
    publish(13).await.expect("publish after release");
    assert_eq!(sluice_count(&ch, &q).await, 1);
    let got = och.get_eventually(&q, true).await;
    assert_eq!(number_of(&got.2), 13);
    assert_eq!(
        ch.flow_stats().waits,
        1,
        "the publish after the release must not wait"
    );
    other.close().await;
    conn.close().await.expect("close");
}
