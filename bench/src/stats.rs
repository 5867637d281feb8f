//! Owns: what a run measures while it runs — message counters, latency histograms
//! (hdrhistogram, nanoseconds), the per-second timeline and the live line — and the
//! message stamp (intended send time, sequence, publisher) every body starts with.
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
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the start of the run.
    pub t: f64,
    /// Messages published per second in this interval.
    pub published_per_s: f64,
    /// Messages delivered per second in this interval.
    pub delivered_per_s: f64,
    /// p99 latency of this interval (ns; 0 when nothing was delivered).
    pub p99_ns: u64,
    /// Broker RSS at the sample (bytes; 0 when unknown).
    pub broker_rss: u64,
}

/// Counters and histograms shared by the tasks of one run.
pub struct Shared {
    /// The instant stamps count from.
    pub base: Instant,
    pub published: AtomicU64,
    pub delivered: AtomicU64,
    /// Publishers stop when set.
    pub stop: AtomicBool,
    /// Consumers stop when set.
    pub stop_consumers: AtomicBool,
    /// Latencies are recorded only while set (after warm-up).
    pub measuring: AtomicBool,
    pub total: Mutex<Histogram<u64>>,
    pub interval: Mutex<Histogram<u64>>,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared {
            base: Instant::now(),
            published: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            stop_consumers: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            total: Mutex::new(new_hist()),
            interval: Mutex::new(new_hist()),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A consumer's local latency histogram, merged into the shared ones every 50 ms so
/// the hot loop takes no lock per message.
pub struct Recorder {
    local: Histogram<u64>,
    last: Instant,
    /// Receive time of the current batch (one clock read per batch).
    now: u64,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            local: new_hist(),
            last: Instant::now(),
            now: 0,
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
        if let Ok(mut t) = shared.total.lock() {
            let _ = t.add(&self.local);
        }
        if let Ok(mut i) = shared.interval.lock() {
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
