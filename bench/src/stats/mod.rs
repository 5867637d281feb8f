//! Owns: what a run measures while it runs — message counters and latency histograms
//! (hdrhistogram, nanoseconds), kept apart for fast and throttled subscribers and
//! sharded by subscriber slot so thousands of subscribers on two threads seldom share
//! a lock; each subscriber's own small histogram ([`subhist`]) for the per-subscriber
//! spread; publisher-confirm counters and latencies (publish → `basic.ack`), kept
//! like a group's with one shard per publisher; the per-second [`Sample`] — and the
//! message stamp (intended send time, sequence, publisher) every body starts with.
//! Does not: talk to the broker or decide what a scenario does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use serde::Serialize;

pub mod subhist;

pub use subhist::SubHist;

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

/// Follows the sequence numbers of each publisher's messages as one subscriber sees
/// them.
pub struct Sequence {
    /// Last sequence number seen per publisher (`u64::MAX`: none yet).
    last: Vec<u64>,
}

impl Sequence {
    pub fn new(publishers: usize) -> Sequence {
        Sequence {
            last: vec![u64::MAX; publishers.max(1)],
        }
    }

    /// Sees `seq` of publisher `publ`: the sequence numbers it skipped, and whether
    /// it came out of order (at or below one seen before).
    #[inline]
    pub fn see(&mut self, seq: u64, publ: u32) -> (u64, bool) {
        let Some(l) = self.last.get_mut(publ as usize) else {
            return (0, false);
        };
        if *l == u64::MAX {
            *l = seq;
            return (0, false);
        }
        if seq > *l {
            let skipped = seq - *l - 1;
            *l = seq;
            (skipped, false)
        } else {
            (0, true)
        }
    }
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
    /// Publisher confirms (`basic.ack`) received per second in this interval.
    pub confirmed_per_s: f64,
    /// p99 confirm latency (publish → `basic.ack`) of this interval (ns; 0 when
    /// nothing was confirmed).
    pub confirm_p99_ns: u64,
}

/// Shards of the run's shared counters and histograms: subscribers record into the
/// shard of their slot, so two worker threads rarely touch the same lock or line.
pub const SHARDS: usize = 8;

/// An atomic counter on a cache line of its own.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

/// A counter added to from many tasks (each through its slot's shard), read rarely.
#[derive(Default)]
pub struct Counter {
    cells: [Padded; SHARDS],
}

impl Counter {
    pub fn add(&self, slot: usize, n: u64) {
        self.cells[slot % SHARDS].0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.cells.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

/// One shard of a group's latencies: over the measured window up to the last
/// per-second sample, and since that sample (the two together are the window).
struct Hists {
    total: Histogram<u64>,
    interval: Histogram<u64>,
}

/// Counters and histograms of one group of subscribers (fast or slow), or of the
/// publishers' confirms (`delivered` then counts acks; one shard per publisher).
pub struct Group {
    pub delivered: Counter,
    hists: Vec<Mutex<Hists>>,
}

impl Group {
    fn new() -> Group {
        Group {
            delivered: Counter::default(),
            hists: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Hists {
                        total: new_hist(),
                        interval: new_hist(),
                    })
                })
                .collect(),
        }
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.get()
    }

    /// Records latencies (ns) into `slot`'s shard (its interval histogram, folded
    /// into the whole-window one at each sample).
    pub fn record_all(&self, slot: usize, values: &[u64]) {
        if let Ok(mut h) = self.hists[slot % SHARDS].lock() {
            for &v in values {
                let _ = h.interval.record(v);
            }
        }
    }

    /// The whole-window histogram, every shard merged.
    pub fn total(&self) -> Histogram<u64> {
        let mut out = new_hist();
        for h in &self.hists {
            if let Ok(h) = h.lock() {
                let _ = out.add(&h.total);
                let _ = out.add(&h.interval);
            }
        }
        out
    }

    /// The interval histogram, taken (folded into the total, and reset) for a
    /// per-second sample.
    pub fn take_interval(&self) -> Histogram<u64> {
        let mut out = new_hist();
        for h in &self.hists {
            if let Ok(mut h) = h.lock() {
                let Hists { total, interval } = &mut *h;
                let _ = out.add(&*interval);
                let _ = total.add(&*interval);
                interval.reset();
            }
        }
        out
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
    /// Publisher confirms: acks received, and confirm latency (publish → `basic.ack`)
    /// while measuring.
    pub confirms: Group,
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
            confirms: Group::new(),
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

/// Latencies a subscriber records before it takes its shard's lock.
const PENDING: usize = 64;

/// How long a subscriber may hold latencies before handing them to its shard.
const FLUSH_NS: u64 = 20_000_000;

/// A subscriber's latency recording: its own [`SubHist`] (for its p99), and a few
/// pending values handed to its group's shard every 64 values or 20 ms, so the hot
/// loop takes no lock per message.
pub struct Recorder {
    slot: usize,
    slow: bool,
    /// Receive time of the current batch (one clock read per batch).
    now: u64,
    last_flush: u64,
    pending: Vec<u64>,
    /// This subscriber's latencies in the measured window.
    pub hist: SubHist,
}

impl Recorder {
    pub fn new(slot: usize, slow: bool) -> Recorder {
        Recorder {
            slot,
            slow,
            now: 0,
            last_flush: 0,
            pending: Vec::new(),
            hist: SubHist::new(),
        }
    }

    /// Reads the clock once for the batch about to be recorded.
    pub fn batch_received(&mut self, shared: &Shared) {
        self.now = shared.now_ns();
    }

    /// Records one delivery stamped `sent_ns` (only in the measured window).
    #[inline]
    pub fn record(&mut self, shared: &Shared, sent_ns: u64) {
        if shared.measuring.load(Ordering::Relaxed) {
            let lat = self.now.saturating_sub(sent_ns).max(1);
            self.hist.record(lat);
            if self.pending.capacity() == 0 {
                self.pending.reserve_exact(PENDING);
            }
            self.pending.push(lat);
            if self.pending.len() >= PENDING {
                self.flush(shared);
            }
        }
    }

    /// At the end of a batch: hands over what is pending if it is 20 ms old.
    pub fn maybe_flush(&mut self, shared: &Shared) {
        if !self.pending.is_empty() && self.now.saturating_sub(self.last_flush) >= FLUSH_NS {
            self.flush(shared);
        }
    }

    pub fn flush(&mut self, shared: &Shared) {
        self.last_flush = self.now;
        if self.pending.is_empty() {
            return;
        }
        shared.group(self.slow).record_all(self.slot, &self.pending);
        self.pending.clear();
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
