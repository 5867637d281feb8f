//! Owns: what a run measures while it runs — message counters and latency histograms
//! (hdrhistogram, nanoseconds), kept apart for fast and throttled subscribers, the
//! per-second [`Sample`] — and the message stamp (intended send time, sequence,
//! publisher) every body starts with.
//! Does not: talk to the broker or decide what a scenario does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Bytes of the stamp at the start of every body: intended send time (ns since the
/// run's base instant), sequence number, publisher id.
pub const STAMP_LEN: usize = 20;

/// Builds stamped bodies out of one large buffer (no allocation per message).
pub struct BodyMaker {
    buf: BytesMut,
    size: usize,
}

impl BodyMaker {
    pub fn new(size: usize) -> BodyMaker {
        BodyMaker {
            buf: BytesMut::with_capacity(1 << 20),
            size: size.max(STAMP_LEN),
        }
    }

    pub fn make(&mut self, sent_ns: u64, seq: u64, publisher: u32) -> Bytes {
        if self.buf.capacity() - self.buf.len() < self.size {
            self.buf = BytesMut::with_capacity((1 << 20).max(self.size * 64));
        }
        self.buf.put_u64(sent_ns);
        self.buf.put_u64(seq);
        self.buf.put_u32(publisher);
        let pad = self.size - STAMP_LEN;
        self.buf.put_bytes(b'x', pad);
        self.buf.split().freeze()
    }
}

/// Reads the stamp: (sent ns, seq, publisher).
pub fn read_stamp(body: &[u8]) -> Option<(u64, u64, u32)> {
    let b = body.get(..STAMP_LEN)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    let sent = u64::from_be_bytes(a);
    a.copy_from_slice(&b[8..16]);
    let seq = u64::from_be_bytes(a);
    let mut p = [0u8; 4];
    p.copy_from_slice(&b[16..20]);
    Some((sent, seq, u32::from_be_bytes(p)))
}

pub fn new_hist() -> Histogram<u64> {
    // 1 ns .. 100 s at 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// One point of the per-second timeline.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    /// Seconds since publishing started.
    pub t: f64,
    /// Messages published per second in this interval.
    pub published_per_s: f64,
    /// Messages delivered per second in this interval (every subscriber).
    pub delivered_per_s: f64,
    /// p99 latency of this interval, every subscriber (ns; 0 when nothing was delivered).
    pub p99_ns: u64,
    /// Delivered per second to the subscribers that are not throttled.
    pub fast_delivered_per_s: f64,
    /// p99 latency of this interval over the subscribers that are not throttled.
    pub fast_p99_ns: u64,
    /// Delivered per second to the throttled (slow) subscribers.
    pub slow_delivered_per_s: f64,
    /// Broker RSS at the sample (bytes; 0 when unknown).
    pub broker_rss: u64,
    /// Ready messages in the run's shared queue (passive `queue.declare` on a separate
    /// connection); `null` for runs without one, or when the probe got no answer.
    pub queue_messages: Option<u64>,
}

/// Counters and histograms of one group of subscribers (fast or slow).
pub struct Group {
    pub delivered: AtomicU64,
    /// Latencies over the whole measured window.
    pub total: Mutex<Histogram<u64>>,
    /// Latencies since the last per-second sample.
    pub interval: Mutex<Histogram<u64>>,
}

impl Group {
    fn new() -> Group {
        Group {
            delivered: AtomicU64::new(0),
            total: Mutex::new(new_hist()),
            interval: Mutex::new(new_hist()),
        }
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// A copy of the whole-window histogram.
    pub fn total(&self) -> Histogram<u64> {
        self.total.lock().map_or_else(|_| new_hist(), |h| h.clone())
    }

    /// The interval histogram, taken (and reset) for a per-second sample.
    pub fn take_interval(&self) -> Histogram<u64> {
        self.interval.lock().map_or_else(
            |_| new_hist(),
            |mut h| {
                let copy = h.clone();
                h.reset();
                copy
            },
        )
    }
}

/// p99 of a histogram, 0 when empty.
pub fn p99(h: &Histogram<u64>) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(0.99)
    }
}

/// Counters and histograms shared by the tasks of one run.
pub struct Shared {
    /// The instant stamps count from.
    pub base: Instant,
    /// When publishing started (ns since `base`; 0 until then).
    pub started_ns: AtomicU64,
    pub published: AtomicU64,
    /// Subscribers that are not throttled.
    pub fast: Group,
    /// Subscribers throttled to `--slow-rate`.
    pub slow: Group,
    /// Publishers stop when set.
    pub stop: AtomicBool,
    /// Consumers stop when set.
    pub stop_consumers: AtomicBool,
    /// Latencies are recorded only while set (after warm-up).
    pub measuring: AtomicBool,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared {
            base: Instant::now(),
            started_ns: AtomicU64::new(0),
            published: AtomicU64::new(0),
            fast: Group::new(),
            slow: Group::new(),
            stop: AtomicBool::new(false),
            stop_consumers: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Seconds since publishing started.
    pub fn since_start_s(&self) -> f64 {
        self.now_ns()
            .saturating_sub(self.started_ns.load(Ordering::Relaxed)) as f64
            / 1e9
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn group(&self, slow: bool) -> &Group {
        if slow {
            &self.slow
        } else {
            &self.fast
        }
    }

    /// Deliveries to every subscriber so far.
    pub fn delivered(&self) -> u64 {
        self.fast.delivered() + self.slow.delivered()
    }
}

/// A consumer's local latency histogram, merged into its group's shared ones every
/// 50 ms so the hot loop takes no lock per message.
pub struct Recorder {
    local: Histogram<u64>,
    last: Instant,
    /// Receive time of the current batch (one clock read per batch).
    now: u64,
    slow: bool,
}

impl Recorder {
    pub fn new(slow: bool) -> Recorder {
        Recorder {
            local: new_hist(),
            last: Instant::now(),
            now: 0,
            slow,
        }
    }

    /// Reads the clock once for the batch about to be recorded.
    pub fn batch_received(&mut self, shared: &Shared) {
        self.now = shared.now_ns();
    }

    pub fn record(&mut self, shared: &Shared, sent_ns: u64) {
        if shared.measuring.load(Ordering::Relaxed) {
            let _ = self.local.record(self.now.saturating_sub(sent_ns).max(1));
        }
    }

    pub fn maybe_flush(&mut self, shared: &Shared) {
        if self.last.elapsed() >= Duration::from_millis(50) {
            self.flush(shared);
        }
    }

    pub fn flush(&mut self, shared: &Shared) {
        self.last = Instant::now();
        if self.local.is_empty() {
            return;
        }
        let g = shared.group(self.slow);
        if let Ok(mut t) = g.total.lock() {
            let _ = t.add(&self.local);
        }
        if let Ok(mut i) = g.interval.lock() {
            let _ = i.add(&self.local);
        }
        self.local.reset();
    }
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1}k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2}s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.2}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

pub fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2}GiB", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1}MiB", b as f64 / (1u64 << 20) as f64)
    } else if b > 0 {
        format!("{}KiB", b >> 10)
    } else {
        "n/a".into()
    }
}
