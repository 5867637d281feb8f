//! Exponentially weighted events-per-second estimate.
//!
//! Owns: one rate estimate (for example a subscription's consumption rate),
//! fed with event counts and explicit timestamps. Does not: read the clock
//! (the shard passes `now` from its `Clock`), decide what a rate means, or
//! schedule its own ticks (the shard calls `tick` from a wheel timer).

use std::time::{Duration, Instant};

/// EWMA of events per second with a half-life in wall time.
///
/// `record` counts events; `tick(now)` turns the count since the previous
/// tick into an instantaneous rate and folds it in with weight
/// `alpha = 1 - exp(-elapsed * ln 2 / half_life)`. The weight depends on the
/// elapsed time, so irregular tick spacing is handled, and with no events
/// the estimate halves every `half_life` however often it is ticked.
///
/// The estimate starts at 0 and rises towards the true rate (to within 1%
/// after about 6.6 half-lives); policies judging new subscribers should
/// allow for that warm-up.
///
/// # Invariants
///
/// - `rate` is finite and non-negative.
/// - `pending` counts events recorded since `last_tick` (or since creation
///   while `last_tick` is `None`).
#[derive(Clone, Debug)]
pub struct RateEstimator {
    half_life: Duration,
    pending: u64,
    rate: f64,
    last_tick: Option<Instant>,
}

impl RateEstimator {
    /// An estimator at rate 0 whose memory halves every `half_life`. A zero
    /// half-life keeps no memory: the rate is that of the last interval.
    pub fn new(half_life: Duration) -> Self {
        RateEstimator {
            half_life,
            pending: 0,
            rate: 0.0,
            last_tick: None,
        }
    }

    /// Counts `n` events (saturating).
    pub fn record(&mut self, n: u64) {
        self.pending = self.pending.saturating_add(n);
    }

    /// Folds the events counted since the previous tick into the estimate.
    ///
    /// The first tick only fixes the time origin: events recorded before it
    /// have no interval to be measured over and are dropped. A `now` not
    /// after the previous tick changes nothing (the count keeps
    /// accumulating).
    pub fn tick(&mut self, now: Instant) {
        let Some(last) = self.last_tick else {
            self.last_tick = Some(now);
            self.pending = 0;
            return;
        };
        let elapsed = now.saturating_duration_since(last);
        if elapsed.is_zero() {
            return;
        }
        let secs = elapsed.as_secs_f64();
        let instant_rate = self.pending as f64 / secs;
        let alpha = if self.half_life.is_zero() {
            1.0
        } else {
            1.0 - (-secs * std::f64::consts::LN_2 / self.half_life.as_secs_f64()).exp()
        };
        self.rate += alpha * (instant_rate - self.rate);
        self.pending = 0;
        self.last_tick = Some(now);
    }

    /// The current estimate in events per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// Consumption counted over whole windows, for judging the minimum-rate threshold.
///
/// A window runs only while the subscription is *eligible* to be judged (it has a
/// backlog and a consumer); any check at which it is not restarts the measurement, so a
/// new or idle subscriber is never judged on a partial or idle window. After a full
/// eligible window, [`WindowMeter::observe`] returns the rate measured over it, and a
/// new window begins.
#[derive(Clone, Debug)]
pub struct WindowMeter {
    window: Duration,
    started: Option<Instant>,
    count: u64,
    last: Option<f64>,
}

impl WindowMeter {
    pub fn new(window: Duration) -> WindowMeter {
        WindowMeter {
            window,
            started: None,
            count: 0,
            last: None,
        }
    }

    /// Counts `n` consumed messages.
    pub fn record(&mut self, n: u64) {
        self.count = self.count.saturating_add(n);
    }

    /// A periodic check: returns the rate over the last complete eligible window, if
    /// there is one.
    pub fn observe(&mut self, now: Instant, eligible: bool) -> Option<f64> {
        if !eligible {
            self.started = None;
            self.last = None;
            self.count = 0;
            return None;
        }
        let Some(start) = self.started else {
            self.started = Some(now);
            self.count = 0;
            return None;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= self.window && !elapsed.is_zero() {
            self.last = Some(self.count as f64 / elapsed.as_secs_f64());
            self.started = Some(now);
            self.count = 0;
        }
        self.last
    }

    /// The rate over the last complete eligible window.
    pub fn last(&self) -> Option<f64> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feeds `per_tick` events every `step` for `steps` ticks.
    fn feed(r: &mut RateEstimator, now: &mut Instant, step: Duration, per_tick: u64, steps: u32) {
        for _ in 0..steps {
            r.record(per_tick);
            *now += step;
            r.tick(*now);
        }
    }

    #[test]
    fn window_meter_judges_only_full_eligible_windows() {
        let t0 = Instant::now();
        let mut m = WindowMeter::new(Duration::from_secs(2));
        assert_eq!(m.observe(t0, true), None);
        m.record(10);
        assert_eq!(m.observe(t0 + ms(1000), true), None);
        m.record(10);
        assert_eq!(m.observe(t0 + ms(2000), true), Some(10.0));
        // An idle check restarts the measurement: nothing to judge until a full window.
        m.record(1);
        assert_eq!(m.observe(t0 + ms(2500), false), None);
        assert_eq!(m.observe(t0 + ms(3000), true), None);
        m.record(4);
        assert_eq!(m.observe(t0 + ms(4000), true), None);
        assert_eq!(m.observe(t0 + ms(5000), true), Some(2.0));
        assert_eq!(m.last(), Some(2.0));
    }

    #[test]
    fn constant_rate_converges() {
        let mut now = Instant::now();
        let mut r = RateEstimator::new(Duration::from_secs(1));
        r.tick(now);
        feed(&mut r, &mut now, ms(100), 10, 100); // 100/s for 10 s
        assert!((r.rate() - 100.0).abs() <= 1.0, "rate {}", r.rate());
    }

    #[test]
    fn irregular_ticks_converge_too() {
        let mut now = Instant::now();
        let mut r = RateEstimator::new(Duration::from_secs(1));
        r.tick(now);
        for i in 0..400u64 {
            let step = ms(10 * (1 + (i * 37) % 9)); // 10..=90 ms
            r.record(step.as_millis() as u64 / 10); // 100/s
            now += step;
            r.tick(now);
        }
        assert!((r.rate() - 100.0).abs() <= 1.0, "rate {}", r.rate());
    }

    #[test]
    fn silence_halves_per_half_life() {
        let mut now = Instant::now();
        let hl = Duration::from_secs(2);
        let mut r = RateEstimator::new(hl);
        r.tick(now);
        feed(&mut r, &mut now, ms(100), 10, 400);
        let start = r.rate();
        feed(&mut r, &mut now, ms(50), 0, 40); // one half-life, fine ticks
        assert!((r.rate() - start / 2.0).abs() < 1e-9 * start);
        feed(&mut r, &mut now, ms(500), 0, 4); // another, coarse ticks
        assert!((r.rate() - start / 4.0).abs() < 1e-9 * start);
    }

    #[test]
    fn first_tick_sets_origin_and_zero_elapsed_is_ignored() {
        let now = Instant::now();
        let mut r = RateEstimator::new(Duration::ZERO);
        r.record(1_000);
        r.tick(now);
        assert_eq!(r.rate(), 0.0);
        r.record(5);
        r.tick(now);
        assert_eq!(r.rate(), 0.0);
        r.tick(now + ms(500));
        assert!(
            (r.rate() - 10.0).abs() < 1e-9,
            "zero half-life = last interval"
        );
    }
}
