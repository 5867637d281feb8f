//! Owns: one publisher's confirms — at most N in flight (the publisher asks for room
//! *before* it stamps and sends a message, so time spent waiting for room is not
//! counted as confirm latency), and the time of each one's `basic.ack`. Every
//! pending confirm is polled once, when it is tracked, with a waker of its own
//! slot; the client's connection task, settling it as it reads the ack (one, or a
//! `multiple` ack covering many, or acks out of order from several home shards),
//! wakes that waker, which notes the slot and the time right there. So a confirm is
//! timed when the client receives its ack — not when the publisher next looks —
//! without a task of its own or a wake-up per message. The publisher collects what
//! was settled whenever it asks for room: latency (stamp → ack; the stamp is the
//! intended send time at a fixed `--rate`) to the run's `confirms` group while the
//! window is measured, and every ack to its counter.
//! Does not: publish (the publisher does), or time deliveries (subscribers do).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use sluice::client::ClientError;
use tokio::sync::Notify;
use tokio::task::Unconstrained;

use crate::stats::Shared;

/// What the publisher's confirms came to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    pub acked: u64,
    pub nacked: u64,
}

/// How often a publisher waiting for room looks at whether the run stopped.
const RECHECK: Duration = Duration::from_millis(100);

/// Slots whose confirm settled since the publisher last looked, with the time each
/// was woken (ns on the run's clock), and the publisher to wake.
struct ReadyList {
    base: Instant,
    woken: Mutex<Vec<(usize, u64)>>,
    notify: Notify,
}

/// The waker of one slot: it notes the slot and the time, and wakes the publisher.
struct SlotWaker {
    slot: usize,
    ready: Arc<ReadyList>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let now = self.ready.base.elapsed().as_nanos() as u64;
        if let Ok(mut w) = self.ready.woken.lock() {
            w.push((self.slot, now));
        }
        self.ready.notify.notify_one();
    }
}

struct Pending<F> {
    sent_ns: u64,
    /// Polled outside tokio's cooperative budget, so a poll never returns `Pending`
    /// (with a wake-up) for want of budget: its waker fires only when it settles.
    confirm: Unconstrained<F>,
}

/// A publisher's confirms in flight (a small `FuturesUnordered` whose wakers also
/// stamp the time).
pub struct Tracker<F> {
    window: usize,
    slots: Vec<Option<Pending<F>>>,
    /// One waker per slot, made once and reused by every confirm the slot holds.
    wakers: Vec<Waker>,
    free: Vec<usize>,
    live: usize,
    ready: Arc<ReadyList>,
    shared: Arc<Shared>,
    /// The publisher's shard of the confirms group.
    slot: usize,
    settled: Settled,
    /// Acks already added to the confirms group's counter.
    counted: u64,
    /// The first failed confirm (the channel or connection went away).
    error: Option<ClientError>,
    /// Latencies collected, handed to the confirms group in one go.
    latencies: Vec<u64>,
}

impl<F> Tracker<F>
where
    F: Future<Output = Result<bool, ClientError>> + Unpin,
{
    /// The confirms of publisher `slot` (its shard of the run's confirms group), at
    /// most `window` in flight.
    pub fn new(shared: Arc<Shared>, slot: usize, window: usize) -> Tracker<F> {
        Tracker {
            window: window.max(1),
            slots: Vec::new(),
            wakers: Vec::new(),
            free: Vec::new(),
            live: 0,
            ready: Arc::new(ReadyList {
                base: shared.base,
                woken: Mutex::new(Vec::new()),
                notify: Notify::new(),
            }),
            shared,
            slot,
            settled: Settled::default(),
            counted: 0,
            error: None,
            latencies: Vec::new(),
        }
    }

    /// Waits until fewer than `window` confirms are in flight; `false` if
    /// `stopped()` turned true first.
    pub async fn room(&mut self, stopped: impl Fn() -> bool) -> bool {
        self.collect();
        while self.live >= self.window {
            let _ = tokio::time::timeout(RECHECK, self.ready.notify.notified()).await;
            self.collect();
            if self.live >= self.window && stopped() {
                return false;
            }
        }
        true
    }

    /// A message stamped `sent_ns` went out; `confirm` settles when the broker
    /// confirms it.
    pub fn track(&mut self, sent_ns: u64, confirm: F) {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.slots.len();
                self.slots.push(None);
                self.wakers.push(Waker::from(Arc::new(SlotWaker {
                    slot: i,
                    ready: Arc::clone(&self.ready),
                })));
                i
            }
        };
        self.slots[i] = Some(Pending {
            sent_ns,
            confirm: tokio::task::unconstrained(confirm),
        });
        self.live += 1;
        // The first poll registers the slot's waker (or finds it already settled:
        // then it is timed now).
        self.poll_slot(i, None);
        self.flush();
    }

    /// Takes in what settled since the last look.
    fn collect(&mut self) {
        let woken = self
            .ready
            .woken
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        for (i, at) in woken {
            self.poll_slot(i, Some(at));
        }
        self.flush();
    }

    /// Polls slot `i`, woken at `woken_ns` (`None`: not woken, time it now).
    fn poll_slot(&mut self, i: usize, woken_ns: Option<u64>) {
        let Some(p) = self.slots.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let mut cx = Context::from_waker(&self.wakers[i]);
        let Poll::Ready(r) = Pin::new(&mut p.confirm).poll(&mut cx) else {
            return;
        };
        let sent_ns = p.sent_ns;
        self.slots[i] = None;
        self.free.push(i);
        self.live -= 1;
        match r {
            Ok(true) => {
                self.settled.acked += 1;
                if self
                    .shared
                    .measuring
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    let at = woken_ns.unwrap_or_else(|| self.shared.now_ns());
                    self.latencies.push(at.saturating_sub(sent_ns).max(1));
                }
            }
            Ok(false) => self.settled.nacked += 1,
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Hands the acks and latencies collected to the run's confirms group.
    fn flush(&mut self) {
        let acked = self.settled.acked;
        if acked > self.counted {
            let more = acked - self.counted;
            self.shared.confirms.delivered.add(self.slot, more);
            self.counted = acked;
        }
        if !self.latencies.is_empty() {
            self.shared.confirms.record_all(self.slot, &self.latencies);
            self.latencies.clear();
        }
    }

    /// Waits (at most `limit`) for every confirm in flight: the counts, and why not
    /// all of them settled, if so.
    pub async fn finish(mut self, limit: Duration) -> (Settled, Option<String>) {
        let deadline = tokio::time::Instant::now() + limit;
        self.collect();
        while self.live > 0 {
            let woken = tokio::time::timeout_at(deadline, self.ready.notify.notified()).await;
            self.collect();
            if woken.is_err() {
                break;
            }
        }
        let why = match (&self.error, self.live) {
            (Some(e), _) => Some(format!("publisher confirm: {e}")),
            (None, 0) => None,
            (None, n) => Some(format!(
                "publisher confirms: {n} still unconfirmed after {:.0} s",
                limit.as_secs_f64()
            )),
        };
        (self.settled.clone(), why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use tokio::sync::oneshot;

    /// A confirm the test settles by hand.
    struct Manual(oneshot::Receiver<bool>);

    impl Future for Manual {
        type Output = Result<bool, ClientError>;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            Pin::new(&mut self.0).poll(cx).map(|r| {
                r.map_err(|_| ClientError::UnexpectedReply {
                    expected: "a confirm",
                    got: "a dropped sender",
                })
            })
        }
    }

    fn pair() -> (oneshot::Sender<bool>, Manual) {
        let (tx, rx) = oneshot::channel();
        (tx, Manual(rx))
    }

    /// Real time: latencies are read from the run's clock (`std::time::Instant`).
    #[tokio::test(flavor = "current_thread")]
    async fn each_confirm_is_timed_when_its_ack_arrives_in_any_order() {
        let shared = Shared::new();
        shared.measuring.store(true, Ordering::Relaxed);
        let mut t: Tracker<Manual> = Tracker::new(Arc::clone(&shared), 0, 3);
        let mut senders = Vec::new();
        let sent = shared.now_ns();
        for _ in 0..3 {
            assert!(t.room(|| false).await);
            let (tx, c) = pair();
            t.track(sent, c);
            senders.push(Some(tx));
        }
        // The window is full: a fourth publish waits for room.
        let waited = tokio::time::timeout(Duration::from_millis(5), t.room(|| false)).await;
        assert!(waited.is_err(), "no room with 3 of 3 in flight");
        assert!(
            !t.room(|| true).await,
            "a stopped publisher gives up waiting"
        );
        // The last one is acked first (another home shard); the first two 200 ms
        // later (as by one `multiple` ack), the first one nacked. Nobody looks until
        // 100 ms after that: the times are those of the acks.
        let _ = senders[2].take().map(|s| s.send(true));
        let first_ack = shared.now_ns() - sent;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = senders[0].take().map(|s| s.send(false));
        let _ = senders[1].take().map(|s| s.send(true));
        let second_ack = shared.now_ns() - sent;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(t.room(|| false).await);
        assert_eq!(shared.confirms.delivered(), 2);
        let h = shared.confirms.total();
        assert_eq!(h.len(), 2);
        let ms = |v: u64| v as f64 / 1e6;
        let near = |got: u64, want: u64| got.abs_diff(want) < 50_000_000;
        assert!(
            near(h.min(), first_ack),
            "the out-of-order ack timed on its own: {} ms, acked at {} ms",
            ms(h.min()),
            ms(first_ack)
        );
        assert!(
            near(h.max(), second_ack),
            "timed at the ack, not when looked at: {} ms, acked at {} ms",
            ms(h.max()),
            ms(second_ack)
        );
        assert_eq!(
            t.finish(Duration::from_secs(1)).await,
            (
                Settled {
                    acked: 2,
                    nacked: 1
                },
                None
            )
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_confirm_that_never_comes_is_reported() {
        let shared = Shared::new();
        let mut t: Tracker<Manual> = Tracker::new(Arc::clone(&shared), 1, 10);
        let (tx_keep, c) = pair();
        t.track(0, c);
        let (tx_ok, c) = pair();
        t.track(0, c);
        let _ = tx_ok.send(true);
        let (s, err) = t.finish(Duration::from_secs(2)).await;
        assert_eq!((s.acked, s.nacked), (1, 0));
        let err = err.unwrap_or_default();
        assert!(err.contains("1 still unconfirmed after 2 s"), "{err}");
        drop(tx_keep);
        // Not measuring: counted, not timed.
        assert_eq!(shared.confirms.delivered(), 1);
        assert!(shared.confirms.total().is_empty());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_confirm_is_the_error() {
        let mut t: Tracker<Manual> = Tracker::new(Shared::new(), 0, 10);
        let (tx, c) = pair();
        t.track(0, c);
        drop(tx);
        let (s, err) = t.finish(Duration::from_secs(1)).await;
        assert_eq!(s, Settled::default());
        let err = err.unwrap_or_default();
        assert!(err.contains("publisher confirm: "), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_confirms_settle_across_threads() {
        let shared = Shared::new();
        shared.measuring.store(true, Ordering::Relaxed);
        let mut t: Tracker<Manual> = Tracker::new(Arc::clone(&shared), 2, 100);
        let (acks, mut pending) = tokio::sync::mpsc::unbounded_channel::<oneshot::Sender<bool>>();
        let broker = tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(tx) = pending.recv().await {
                let _ = tx.send(true);
                n += 1;
            }
            n
        });
        for _ in 0..10_000 {
            assert!(t.room(|| false).await);
            let (tx, c) = pair();
            t.track(shared.now_ns(), c);
            let _ = acks.send(tx);
        }
        drop(acks);
        assert_eq!(broker.await.ok(), Some(10_000));
        let (s, err) = t.finish(Duration::from_secs(10)).await;
        assert_eq!((s.acked, s.nacked, err), (10_000, 0, None));
        assert_eq!(shared.confirms.total().len(), 10_000);
        assert_eq!(shared.confirms.delivered(), 10_000);
    }
}
