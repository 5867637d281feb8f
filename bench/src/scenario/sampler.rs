//! Owns: the once-a-second [`Sample`] of a run — rates, p99 (all, fast, slow),
//! confirms per second and their p99 (publish → `basic.ack`), the
//! broker's RSS from /proc, and the depth of the run's shared queue read by a passive
//! `queue.declare` on a connection of its own — and the live line on stderr.
//! Does not: decide the run's phases (the harness starts and stops it).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::client::{Channel, Connection, QueueDeclareOptions};
use tokio::task::JoinHandle;

use super::setup::connect_plain;
use crate::broker::{BrokerKind, BrokerUnderTest};
use crate::stats::{fmt_bytes, fmt_ns, fmt_rate, p99, Sample, Shared};

/// How long a depth probe may take before the sample goes without it.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// Reads a queue's ready-message count on its own connection, reconnecting after a
/// failure (the queue's channel may be closed with 404 once the queue is gone).
pub struct QueueProbe {
    url: String,
    queue: String,
    conn: Option<Connection>,
    ch: Option<Channel>,
}

impl QueueProbe {
    pub fn new(url: &str, queue: &str) -> QueueProbe {
        QueueProbe {
            url: url.into(),
            queue: queue.into(),
            conn: None,
            ch: None,
        }
    }

    /// Messages ready in the queue now, or `None` if the broker did not answer in time.
    pub async fn messages(&mut self) -> Option<u64> {
        tokio::time::timeout(PROBE_TIMEOUT, self.ask())
            .await
            .ok()
            .flatten()
    }

    async fn ask(&mut self) -> Option<u64> {
        if self.conn.as_ref().is_none_or(|c| c.error().is_some()) {
            self.ch = None;
            self.conn = connect_plain(&self.url, "sluice-bench queue probe")
                .await
                .ok();
        }
        if self.ch.as_ref().is_none_or(|c| c.error().is_some()) {
            self.ch = self.conn.as_ref()?.open_channel().await.ok();
        }
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let info = self.ch.as_ref()?.queue_declare(&self.queue, passive).await;
        info.ok().map(|i| u64::from(i.message_count))
    }
}

/// The running sampler: its task and the samples so far.
pub struct Sampler {
    task: JoinHandle<()>,
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Sampler {
    /// Samples every second from `t_start` until [`Sampler::finish`].
    pub fn start(
        shared: Arc<Shared>,
        broker: &BrokerUnderTest,
        t_start: Instant,
        probe: Option<QueueProbe>,
        quiet: bool,
    ) -> Sampler {
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&samples);
        let pid = broker.pid();
        let inproc = matches!(broker.kind, BrokerKind::InProcess(_));
        let task = tokio::spawn(async move {
            let mut probe = probe;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            let (mut lp, mut lf, mut ls, mut lk) = (0u64, 0u64, 0u64, 0u64);
            let mut last = Instant::now();
            loop {
                tick.tick().await;
                let p = shared.published.load(Ordering::Relaxed);
                let f = shared.fast.delivered();
                let s = shared.slow.delivered();
                let k = shared.confirms.delivered();
                let dt = last.elapsed().as_secs_f64().max(1e-6);
                last = Instant::now();
                let fast_h = shared.fast.take_interval();
                let mut all_h = fast_h.clone();
                let _ = all_h.add(shared.slow.take_interval());
                let confirm_h = shared.confirms.take_interval();
                let rss = if inproc {
                    crate::broker::process_usage(std::process::id()).map_or(0, |u| u.rss)
                } else {
                    pid.and_then(crate::broker::process_usage)
                        .map_or(0, |u| u.rss)
                };
                let t = t_start.elapsed().as_secs_f64();
                let queue_messages = match probe.as_mut() {
                    Some(q) => q.messages().await,
                    None => None,
                };
                let sample = Sample {
                    t,
                    published_per_s: (p - lp) as f64 / dt,
                    delivered_per_s: ((f + s) - (lf + ls)) as f64 / dt,
                    p99_ns: p99(&all_h),
                    fast_delivered_per_s: (f - lf) as f64 / dt,
                    fast_p99_ns: p99(&fast_h),
                    slow_delivered_per_s: (s - ls) as f64 / dt,
                    broker_rss: rss,
                    queue_messages,
                    confirmed_per_s: (k - lk) as f64 / dt,
                    confirm_p99_ns: p99(&confirm_h),
                };
                if !quiet {
                    eprintln!("{}", live_line(&sample));
                }
                if let Ok(mut v) = out.lock() {
                    v.push(sample);
                }
                (lp, lf, ls, lk) = (p, f, s, k);
            }
        });
        Sampler { task, samples }
    }

    /// Stops sampling and hands over the samples.
    pub fn finish(self) -> Vec<Sample> {
        self.task.abort();
        self.samples.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

fn live_line(s: &Sample) -> String {
    let mut line = format!(
        "{:>6.1}s  published {:>8}/s  delivered {:>8}/s  p99 {:>9}  broker RSS {:>9}",
        s.t,
        fmt_rate(s.published_per_s),
        fmt_rate(s.delivered_per_s),
        if s.p99_ns == 0 {
            "-".into()
        } else {
            fmt_ns(s.p99_ns)
        },
        fmt_bytes(s.broker_rss)
    );
    if s.confirmed_per_s > 0.0 {
        line.push_str(&format!(
            "  confirmed {:>8}/s  confirm p99 {:>9}",
            fmt_rate(s.confirmed_per_s),
            if s.confirm_p99_ns == 0 {
                "-".into()
            } else {
                fmt_ns(s.confirm_p99_ns)
            }
        ));
    }
    if let Some(q) = s.queue_messages {
        line.push_str(&format!("  queue {q:>8} msgs"));
    }
    line
}
