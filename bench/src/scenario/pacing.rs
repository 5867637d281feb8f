//! Owns: closed-loop pacing of `--rate 0` publishers (`--max-backlog N`, alias
//! `--max-ahead`): a [`Pacer`] per run that the subscribers tell how far they got and
//! the publishers ask for room, so a max-rate run measures what the subscribers can
//! take rather than how fast a backlog grows. A publisher takes a global index for
//! each message and sends it only once `index - reference <= N × scale`, where the
//! reference is
//! - fan-out runs ([`Reference::EachSubscriber`]: fanout, slowsub, matrix): the
//!   fewest messages any pacing subscriber has received (each receives every
//!   publisher's messages; with `--topics T` one in T, so its count is scaled by T),
//!   kept incrementally in levels of N/64 messages so neither side pays
//!   O(subscribers) per message; throttled (`--slow`) subscribers do not pace, and a
//!   subscriber whose channel ended (e.g. closed with 506) stops counting;
//! - shared-queue runs ([`Reference::Total`]: workq, flow, persistent): the messages
//!   all consumers together received.
//!
//! The default N ([`default_max_ahead`]) is 10,000, or half a smaller per-queue bound
//! of the run (`x-slow-consumer-max-count`, …) so fast subscribers stay clear of it.
//! A skipped sequence number (a message the broker discarded for a fan-out
//! subscriber) counts as received. Once blocked, a publisher resumes when it is
//! N/8 under the limit again. A blocked publisher sleeps on a [`Notify`] rung when
//! the reference moves while someone waits, with a short timeout so it still sees
//! the end of the run. When no pacing subscriber is left the publishers run open
//! loop; when the reference does not move for [`STALL`] while a publisher waits
//! (messages lost on the way, a wedged consumer), what is outstanding is written off
//! and counted, so a lost message cannot hold the run.
//! Does not: pace fixed-rate (`--rate R`) publishers, which are open loop by
//! definition.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Messages a closed-loop publisher may be ahead of its subscribers by default.
pub const DEFAULT_MAX_AHEAD: u64 = 10_000;

/// The default `--max-ahead`: [`DEFAULT_MAX_AHEAD`], or half the smallest per-queue
/// bound the run's queue arguments set (`x-slow-consumer-max-count`,
/// `x-slow-consumer-max-depth` over the body size, `x-max-length`) if that is less,
/// so a fast subscriber never nears a threshold meant for slow ones (the broker's
/// count includes deliveries in its write path, which it settles in batches). With
/// the reason, for the report.
pub fn default_max_ahead(queue_args: &[(String, String)], size: usize) -> (u64, Option<String>) {
    let bound = |k: &str, v: &str| -> Option<u64> {
        let n = v.trim().parse::<u64>().ok()?;
        match k {
            "x-slow-consumer-max-count" | "x-max-length" => Some(n),
            "x-slow-consumer-max-depth" => Some(n / size.max(1) as u64),
            _ => None,
        }
    };
    let tightest = queue_args
        .iter()
        .filter_map(|(k, v)| bound(k, v).map(|n| (n, k)))
        .min_by_key(|(n, _)| *n);
    match tightest {
        Some((n, k)) if n / 2 < DEFAULT_MAX_AHEAD => {
            let ahead = (n / 2).max(1);
            let why = format!(
                "max ahead {ahead}: half of {k} ({n} messages), so no fast subscriber nears it"
            );
            (ahead, Some(why))
        }
        _ => (DEFAULT_MAX_AHEAD, None),
    }
}

/// How long the reference may stand still while a publisher waits before what is
/// outstanding is written off.
pub const STALL: Duration = Duration::from_secs(2);

/// How often a waiting publisher looks again without being woken (end of the run,
/// a lost wake-up).
const RECHECK: Duration = Duration::from_millis(5);

/// What publishers are paced against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// Every subscriber has its own queue and receives every message: the slowest
    /// pacing subscriber.
    EachSubscriber,
    /// Consumers share a queue: all deliveries together.
    Total,
}

/// "No pacing subscriber left" in [`Pacer::floor`].
const NONE_LEFT: u64 = u64::MAX;

/// Levels a fan-out pacer's `--max-backlog` is cut into: subscribers report a new
/// level only every `max_backlog / LEVELS` messages.
const LEVELS: u64 = 64;

/// The pacing state of one run, shared by its publishers and subscribers.
///
/// Fan-out runs keep the slowest subscriber incrementally: each pacing subscriber
/// is counted at its *level* (progress / granule) in an ordered map, and moves —
/// one lock — only when it crosses into the next level; the reference is the lowest
/// level with anyone on it. Neither a subscriber's progress nor a publisher's look
/// costs O(subscribers), and publishers are woken only when the lowest level moves.
/// The reference is thus up to one granule (`max_backlog / 64`) conservative.
pub struct Pacer {
    /// 0 = open loop. In messages of the whole stream (`--max-backlog` × scale).
    max_ahead: u64,
    reference: Reference,
    /// Messages of the whole stream per message one subscriber receives (topics
    /// mode: the number of topics, as each subscriber sees one topic).
    scale: u64,
    /// Messages per level (fan-out).
    granule: u64,
    /// Messages publishers took an index for (each is published, or the publisher
    /// stopped with it in hand).
    taken: AtomicU64,
    /// Whether subscriber `i` paces (fan-out: not throttled).
    paces: Vec<bool>,
    /// Fan-out: live pacing subscribers per level.
    levels: Mutex<BTreeMap<u64, usize>>,
    /// Fan-out: the lowest level anyone is on × granule ([`NONE_LEFT`] when none is
    /// left).
    floor: AtomicU64,
    /// Shared queue: deliveries to all consumers together.
    total: AtomicU64,
    /// Shared queue: consumers still receiving.
    live: AtomicUsize,
    /// Messages written off after a stall, added to the reference.
    written_off: AtomicU64,
    stalls: AtomicU64,
    /// Publishers waiting for room.
    waiting: AtomicUsize,
    notify: Notify,
}

impl Pacer {
    /// A pacer for `throttled.len()` subscribers, `throttled[i]` saying whether
    /// subscriber `i` is slow; `max_ahead` (messages per subscriber) 0 paces nothing;
    /// each subscriber sees one in `scale` messages of the stream (topics).
    pub fn new(max_ahead: u64, reference: Reference, throttled: &[bool], scale: u64) -> Arc<Pacer> {
        let scale = scale.max(1);
        let max_ahead = max_ahead.saturating_mul(scale);
        let paces: Vec<bool> = throttled
            .iter()
            .map(|&slow| reference == Reference::Total || !slow)
            .collect();
        let pacing = paces.iter().filter(|&&p| p).count();
        let mut levels = BTreeMap::new();
        if pacing > 0 {
            levels.insert(0, pacing);
        }
        Arc::new(Pacer {
            max_ahead,
            reference,
            scale,
            granule: (max_ahead / LEVELS).max(1),
            taken: AtomicU64::new(0),
            paces,
            levels: Mutex::new(levels),
            floor: AtomicU64::new(if pacing > 0 { 0 } else { NONE_LEFT }),
            total: AtomicU64::new(0),
            live: AtomicUsize::new(throttled.len()),
            written_off: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            notify: Notify::new(),
        })
    }

    pub fn closed_loop(&self) -> bool {
        self.max_ahead > 0
    }

    /// Messages written off after stalls, and how many stalls.
    pub fn written_off(&self) -> (u64, u64) {
        (
            self.written_off.load(Ordering::Relaxed),
            self.stalls.load(Ordering::Relaxed),
        )
    }

    /// The reference with the write-offs, or `None` when no pacing subscriber is
    /// left (the publishers are no longer paced). O(1).
    fn reference(&self) -> Option<u64> {
        let raw = match self.reference {
            Reference::EachSubscriber => match self.floor.load(Ordering::SeqCst) {
                NONE_LEFT => return None,
                f => f,
            },
            Reference::Total => {
                if self.live.load(Ordering::SeqCst) == 0 {
                    return None;
                }
                self.total.load(Ordering::SeqCst)
            }
        };
        Some(raw.saturating_add(self.written_off.load(Ordering::SeqCst)))
    }

    fn wake(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// Moves one fan-out subscriber from level `from` to `to` (`None`: it left);
    /// wakes the publishers when the lowest level moved.
    fn move_level(&self, from: u64, to: Option<u64>) {
        let floor = {
            let Ok(mut levels) = self.levels.lock() else {
                return;
            };
            if let Some(n) = levels.get_mut(&from) {
                *n -= 1;
                if *n == 0 {
                    levels.remove(&from);
                }
            }
            if let Some(to) = to {
                *levels.entry(to).or_insert(0) += 1;
            }
            levels
                .keys()
                .next()
                .map_or(NONE_LEFT, |l| l.saturating_mul(self.granule))
        };
        if self.floor.swap(floor, Ordering::SeqCst) != floor {
            self.wake();
        }
    }

    /// The handle subscriber `slot` reports through; it stops counting when dropped.
    pub fn subscriber(self: &Arc<Pacer>, slot: usize) -> SubPacing {
        SubPacing {
            pacer: Arc::clone(self),
            paces: self.paces.get(slot).copied().unwrap_or(false),
            level: 0,
            last: 0,
        }
    }

    /// A publisher's handle.
    pub fn publisher(self: &Arc<Pacer>) -> PubPacing {
        PubPacing {
            pacer: Arc::clone(self),
            floor: 0,
            released: false,
            waited: Duration::ZERO,
            waits: 0,
            released_at: None,
        }
    }
}

/// A subscriber's side: how far it got, and that it ended.
pub struct SubPacing {
    pacer: Arc<Pacer>,
    paces: bool,
    /// Fan-out: the level it is counted at.
    level: u64,
    /// Shared queue: deliveries already added to the total.
    last: u64,
}

impl SubPacing {
    /// The subscriber has received `delivered` messages and seen `skipped` sequence
    /// numbers go by (fan-out only: on a shared queue each consumer sees a subset).
    pub fn progress(&mut self, delivered: u64, skipped: u64) {
        let p = &self.pacer;
        if !p.closed_loop() || !self.paces {
            return;
        }
        match p.reference {
            Reference::EachSubscriber => {
                let n = delivered.saturating_add(skipped).saturating_mul(p.scale);
                let level = n / p.granule;
                if level > self.level {
                    p.move_level(self.level, Some(level));
                    self.level = level;
                }
            }
            Reference::Total => {
                p.total
                    .fetch_add(delivered.saturating_sub(self.last), Ordering::SeqCst);
                self.last = self.last.max(delivered);
                p.wake();
            }
        }
    }
}

impl Drop for SubPacing {
    /// However the subscriber ended (closed by the broker, an error, the end of the
    /// run, a panic), it no longer holds publishers back.
    fn drop(&mut self) {
        let p = &self.pacer;
        match p.reference {
            Reference::EachSubscriber if self.paces => p.move_level(self.level, None),
            Reference::EachSubscriber => {}
            Reference::Total => {
                p.live.fetch_sub(1, Ordering::SeqCst);
                p.wake();
            }
        }
    }
}

/// A publisher's side: room for the next message, and the time spent waiting for it.
pub struct PubPacing {
    pacer: Arc<Pacer>,
    /// A reference value seen (it only grows): room is known without looking again.
    floor: u64,
    /// No pacing subscriber left: open loop from here on.
    released: bool,
    pub waited: Duration,
    /// Times the publisher had to wait.
    pub waits: u64,
    /// When (seconds since publishing started) the last pacing subscriber went.
    pub released_at: Option<f64>,
}

impl PubPacing {
    /// Takes the global index of the next message (call once per message, not per
    /// attempt).
    pub fn take(&self) -> u64 {
        if self.pacer.closed_loop() {
            self.pacer.taken.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            0
        }
    }

    /// Waits until message `index` (from [`PubPacing::take`]) may be published: at
    /// most `max_ahead` past the reference. Returns early when `stopped()`;
    /// `since_start_s()` stamps the moment pacing ends for want of subscribers.
    pub async fn admit(
        &mut self,
        index: u64,
        stopped: impl Fn() -> bool,
        since_start_s: impl Fn() -> f64,
    ) {
        let p = Arc::clone(&self.pacer);
        if !p.closed_loop() || self.released || index.saturating_sub(self.floor) <= p.max_ahead {
            return;
        }
        if self.look(&p, index, p.max_ahead, &since_start_s) {
            return;
        }
        // Blocked: wait until there is some room again (hysteresis of N/8).
        let resume = p.max_ahead - p.max_ahead / 8;
        let t0 = Instant::now();
        self.waits += 1;
        p.waiting.fetch_add(1, Ordering::SeqCst);
        let mut last = (self.floor, Instant::now());
        while !stopped() {
            let notified = p.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.look(&p, index, resume, &since_start_s) {
                break;
            }
            if self.floor != last.0 {
                last = (self.floor, Instant::now());
            } else if last.1.elapsed() >= STALL {
                self.write_off(&p, index, resume);
                last = (self.floor, Instant::now());
                continue;
            }
            let _ = tokio::time::timeout(RECHECK, notified).await;
        }
        p.waiting.fetch_sub(1, Ordering::SeqCst);
        self.waited += t0.elapsed();
    }

    /// Reads the reference; `true` when `index` is within `limit` of it or pacing
    /// ended.
    fn look(&mut self, p: &Pacer, index: u64, limit: u64, since_start_s: impl Fn() -> f64) -> bool {
        match p.reference() {
            None => {
                self.released = true;
                self.released_at = Some(since_start_s());
                true
            }
            Some(r) => {
                self.floor = self.floor.max(r);
                index.saturating_sub(self.floor) <= limit
            }
        }
    }

    /// Nothing arrived for [`STALL`]: counts the messages up to `index - resume` as
    /// received (once, if several publishers see the same stall).
    fn write_off(&mut self, p: &Pacer, index: u64, resume: u64) {
        let seen = p.written_off.load(Ordering::SeqCst);
        let short = index.saturating_sub(resume).saturating_sub(self.floor);
        if short > 0
            && p.written_off
                .compare_exchange(seen, seen + short, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            p.stalls.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[test]
    fn the_default_stays_clear_of_queue_bounds() {
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(default_max_ahead(&[], 64), (DEFAULT_MAX_AHEAD, None));
        let far = [kv("x-slow-consumer-max-count", "50000")];
        assert_eq!(default_max_ahead(&far, 64).0, DEFAULT_MAX_AHEAD);
        let (n, why) = default_max_ahead(&[kv("x-slow-consumer-max-count", "10000")], 64);
        assert_eq!(n, 5_000);
        assert!(why.is_some_and(|w| w.contains("x-slow-consumer-max-count")));
        let depth = [
            kv("x-slow-consumer-max-count", "10000"),
            kv("x-slow-consumer-max-depth", "65536"),
            kv("x-slow-consumer-policy", "delete"),
        ];
        assert_eq!(default_max_ahead(&depth, 64).0, 512);
        assert_eq!(default_max_ahead(&[kv("x-max-length", "1")], 64).0, 1);
    }

    /// Takes `n` indices; the last one.
    fn take_n(pb: &PubPacing, n: usize) -> u64 {
        let mut last = 0;
        for _ in 0..n {
            last = pb.take();
        }
        last
    }

    fn never() -> bool {
        false
    }

    fn zero() -> f64 {
        0.0
    }

    #[tokio::test(start_paused = true)]
    async fn fanout_is_paced_by_the_slowest_fast_subscriber() {
        // Subscriber 0 is throttled: it never paces.
        let p = Pacer::new(10, Reference::EachSubscriber, &[true, false, false], 1);
        let (mut s0, mut s1, mut s2) = (p.subscriber(0), p.subscriber(1), p.subscriber(2));
        let mut pb = p.publisher();
        for _ in 0..10 {
            let i = pb.take();
            pb.admit(i, never, zero).await;
        }
        assert_eq!(pb.waits, 0);
        s1.progress(5, 0);
        s2.progress(3, 0);
        s0.progress(0, 0);
        assert_eq!(p.reference(), Some(3));
        // Index 14 needs the reference at 4: subscriber 2 delivers, skipping one.
        let i = take_n(&pb, 4);
        let wait = pb.admit(i, never, zero);
        let deliver = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s2.progress(6, 1);
        };
        tokio::join!(wait, deliver);
        assert_eq!(pb.waits, 1);
        assert!(pb.waited >= Duration::from_millis(50));
        // A subscriber that ends stops counting; the last one gone releases.
        drop(s2);
        assert_eq!(p.reference(), Some(5));
        drop(s1);
        assert_eq!(p.reference(), None);
        let i = take_n(&pb, 100);
        pb.admit(i, never, || 1.5).await;
        assert_eq!(pb.released_at, Some(1.5));
        drop(s0);
    }

    #[tokio::test(start_paused = true)]
    async fn shared_queue_counts_every_consumer_and_a_stall_is_written_off() {
        let p = Pacer::new(8, Reference::Total, &[true, false], 1);
        let (mut a, mut b) = (p.subscriber(0), p.subscriber(1));
        a.progress(2, 99);
        b.progress(3, 0);
        assert_eq!(p.reference(), Some(5));
        let mut pb = p.publisher();
        let i = take_n(&pb, 20);
        let t0 = tokio::time::Instant::now();
        pb.admit(i, never, zero).await;
        assert!(t0.elapsed() >= STALL, "waited for the stall");
        assert_eq!(p.written_off().1, 1);
        assert!(p.reference().unwrap_or(0) + 8 >= 20);
        drop((a, b));
    }

    #[tokio::test]
    async fn open_loop_never_waits() {
        let p = Pacer::new(0, Reference::EachSubscriber, &[false], 1);
        let _s = p.subscriber(0);
        let mut pb = p.publisher();
        for _ in 0..1000 {
            let i = pb.take();
            pb.admit(i, never, zero).await;
        }
        assert_eq!((pb.waits, pb.take()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_run_ends_a_wait() {
        let p = Pacer::new(1, Reference::EachSubscriber, &[false], 1);
        let _s = p.subscriber(0);
        let mut pb = p.publisher();
        let i = take_n(&pb, 5);
        let stop = AtomicBool::new(false);
        let wait = pb.admit(i, || stop.load(Ordering::Relaxed), zero);
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stop.store(true, Ordering::Relaxed);
        };
        tokio::join!(wait, stopper);
        assert_eq!(pb.waits, 1);
        assert_eq!(p.written_off().1, 0);
    }
}
