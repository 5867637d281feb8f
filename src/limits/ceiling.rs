//! Owns: [`FailureCeiling`], the broker-wide ceiling on failed logins *answered* per
//! second (`limits.login.failures_per_second`), shared by every shard and the management
//! listener inside the `Arc<ConnectionCounts>`. It is one `AtomicU64` run as a generic
//! cell rate algorithm (GCRA): each answer takes the next free slot of a schedule that
//! advances by `1 / rate` per answer and may run at most one second ahead of the
//! clock, so any window of `w` seconds holds at most `rate × (w + 1)` answers, whatever
//! the number of source addresses, users or shards. A failure whose slot is too far
//! ahead gets no slot: the caller drops it without a reply.
//!
//! Does not: know addresses or users (the per-(address, user) throttle is
//! `login::LoginThrottle`), read clocks (it is given `now`), or sleep.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The broker-wide schedule of failed-login answers.
pub struct FailureCeiling {
    /// The instant the schedule's nanoseconds count from.
    base: Instant,
    /// Nanoseconds between two answers at the ceiling; 0 = no ceiling.
    interval: u64,
    /// How far ahead of the clock the schedule may run (a second's burst), nanoseconds.
    tolerance: u64,
    /// The theoretical time of the next answer (GCRA's TAT), nanoseconds after `base`.
    next: AtomicU64,
    rate: u32,
}

impl FailureCeiling {
    /// A ceiling of `per_second` answers (0 = none).
    pub fn new(per_second: u32) -> FailureCeiling {
        let interval = if per_second == 0 {
            0
        } else {
            1_000_000_000 / u64::from(per_second)
        };
        FailureCeiling {
            base: crate::timer::clock::os_now(),
            interval,
            tolerance: interval.saturating_mul(u64::from(per_second.saturating_sub(1))),
            next: AtomicU64::new(0),
            rate: per_second,
        }
    }

    /// The configured answers per second (0 = none).
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Takes the next answer slot for a failure at `now`: `Some(wait)` (zero when the
    /// answer may go at once) if the slot is at most `max_wait` away, `None` (nothing
    /// taken) otherwise.
    pub fn reserve(&self, now: Instant, max_wait: Duration) -> Option<Duration> {
        if self.interval == 0 {
            return Some(Duration::ZERO);
        }
        let now_ns = nanos(now.saturating_duration_since(self.base));
        let max_wait = nanos(max_wait);
        let mut wait = 0;
        let taken = self
            .next
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
                // The earliest moment this answer conforms to the schedule.
                let at = next.saturating_sub(self.tolerance);
                wait = at.saturating_sub(now_ns);
                (wait <= max_wait).then(|| next.max(now_ns).saturating_add(self.interval))
            });
        taken.ok().map(|_| Duration::from_nanos(wait))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers (slots taken at once, or within `max_wait`) in the window `[t0, t0+w)`
    /// for `n` failures spread evenly over it.
    fn answered(c: &FailureCeiling, t0: Instant, w: Duration, n: u32, max_wait: Duration) -> u32 {
        (0..n)
            .filter_map(|i| {
                let now = t0 + w.mul_f64(f64::from(i) / f64::from(n));
                c.reserve(now, max_wait).map(|wait| now + wait)
            })
            .filter(|at| *at < t0 + w)
            .count() as u32
    }

    #[test]
    fn a_flood_gets_at_most_rate_times_window_plus_one_second() {
        let c = FailureCeiling::new(50);
        let t0 = Instant::now() + Duration::from_secs(1);
        // 10,000 failures in 4 s: at most 50 × (4 + 1) answered, at once or delayed.
        let n = answered(&c, t0, Duration::from_secs(4), 10_000, Duration::ZERO);
        assert!((200..=250).contains(&n), "{n} answered");
        let c = FailureCeiling::new(50);
        let n = answered(
            &c,
            t0,
            Duration::from_secs(4),
            10_000,
            Duration::from_secs(1),
        );
        assert!((200..=250).contains(&n), "{n} answered with waits");
    }

    #[test]
    fn under_the_ceiling_nothing_waits_and_over_it_the_wait_is_bounded() {
        let c = FailureCeiling::new(10);
        let t0 = Instant::now();
        // A second's burst goes at once.
        for _ in 0..10 {
            assert_eq!(c.reserve(t0, Duration::ZERO), Some(Duration::ZERO));
        }
        assert_eq!(c.reserve(t0, Duration::ZERO), None);
        // The next slot is 100 ms away; taking it moves the following one further.
        let wait = c.reserve(t0, Duration::from_secs(1)).expect("a slot");
        assert_eq!(wait, Duration::from_millis(100));
        assert_eq!(
            c.reserve(t0, Duration::from_secs(1)),
            Some(Duration::from_millis(200))
        );
        // Once the clock catches up, answers go at once again.
        assert_eq!(
            c.reserve(t0 + Duration::from_secs(3), Duration::ZERO),
            Some(Duration::ZERO)
        );
        let off = FailureCeiling::new(0);
        for _ in 0..1000 {
            assert_eq!(off.reserve(t0, Duration::ZERO), Some(Duration::ZERO));
        }
    }
}
