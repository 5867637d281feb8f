//! The shard's coarse clock, and the one function through which code without a shard's
//! clock reads the OS clock.
//!
//! Owns: one cached `Instant` per shard, refreshed once per event-loop turn, so
//! everything handled in that turn sees the same "now" and pays for one clock read (and
//! the same time as an 8-byte [`Stamp`] since the clock started, converted once); and
//! [`os_now`], the OS clock for threads without a shard (the management listener, the
//! start) and for the shard paths that have no `&Shard` at hand.
//!
//! Does not: run a background thread or hold global state (the LavinMQ `RoughTime`
//! pattern this replaces). Logic below the shard (`queue`, `policy`, `session`, the
//! counters of `limits`) takes `now` as a parameter and reads no clock.
//!
//! Where the OS clock is read (`Instant::now()`, or an `elapsed()`), and why:
//! - [`Clock::refresh`], once per turn of a shard (`net::reader`, `shard::mailbox`,
//!   `shard::housekeeping`, `shard::turn`), and [`Clock::new`];
//! - [`os_now`]: the management thread (`http`: the login throttle and the connection
//!   cap's log limit), the start (`server::start`, the epoch of `limits::ceiling`), and
//!   the permission-refusal log limit (`shard::conns::handler::access`, whose checks are not
//!   given the shard);
//! - directly, still: `Shard::new` (the start of its clock and wheel);
//!   `store::open`, timing the recovery it logs (MST-1006) once, before any shard
//!   exists (the store does not depend on `timer`); the management thread's uptime
//!   (`elapsed()` of the start) and its deadlines (a connection's idle timeout, an
//!   answer from the shards), which are tokio's clock (`tokio::time::Instant`, as its
//!   timers are); sluice's own client (`client` depends on `protocol` only); and tests,
//!   which make their own `now`.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The OS clock, read now: for code that has no shard's [`Clock`] (another thread,
/// or a shard path not given the shard). A shard's turn reads [`Clock::now`] instead.
pub fn os_now() -> Instant {
    Instant::now()
}

/// A time as 8 bytes: nanoseconds since a base `Instant` (16 bytes) — a queue's entries
/// keep their times so (issue 23: 56 → 40 bytes per entry, for every message waiting in
/// every queue), with the base of the shard's clock ([`Clock::start`]), and the clock
/// gives the turn's time as a stamp ([`Clock::stamp`]) so that an enqueue into
/// thousands of queues converts it once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// No time (an entry without expiry): later than any stamp [`Stamp::of`] gives.
    pub const NEVER: Stamp = Stamp(u64::MAX);

    /// `t` as nanoseconds since `base` (a time before `base` counts as `base`, one 584
    /// years after it as the last stamp before [`Stamp::NEVER`]).
    #[inline]
    pub fn of(t: Instant, base: Instant) -> Stamp {
        let nanos = t.saturating_duration_since(base).as_nanos();
        Stamp(u64::try_from(nanos).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1)))
    }

    /// The `Instant` of this stamp from `base`.
    pub fn instant(self, base: Instant) -> Instant {
        base + Duration::from_nanos(self.0)
    }
}

/// Cached time for one shard.
///
/// `Cell` makes it `!Sync`: it belongs to one shard thread. Tests drive it
/// with [`set`](Clock::set) and [`advance`](Clock::advance) instead of
/// sleeping.
///
/// # Invariants
///
/// `now` only changes through `refresh`, `set` and `advance`; `refresh` and
/// `advance` never move it backwards (`set` may, for tests).
#[derive(Debug)]
pub struct Clock {
    now: Cell<Instant>,
    /// `now` as a [`Stamp`] from `start`, converted once per change of `now`.
    stamp: Cell<Stamp>,
    /// When the clock was made: the base of its stamps.
    start: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock reading the current time.
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A clock frozen at `now` until refreshed, set or advanced.
    pub fn starting_at(now: Instant) -> Self {
        Clock {
            now: Cell::new(now),
            stamp: Cell::new(Stamp::of(now, now)),
            start: now,
        }
    }

    /// Reads `Instant::now()` once. Call once per event-loop turn.
    pub fn refresh(&self) {
        let t = Instant::now();
        if t > self.now.get() {
            self.set(t);
        }
    }

    /// The time cached by the last refresh, set or advance.
    pub fn now(&self) -> Instant {
        self.now.get()
    }

    /// The cached time as a stamp from [`Clock::start`].
    pub fn stamp(&self) -> Stamp {
        self.stamp.get()
    }

    /// When the clock was made: the base of [`Clock::stamp`].
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Replaces the cached time (for tests and simulations).
    pub fn set(&self, now: Instant) {
        self.now.set(now);
        self.stamp.set(Stamp::of(now, self.start));
    }

    /// Moves the cached time forward by `by` (for tests and simulations).
    pub fn advance(&self, by: Duration) {
        self.set(self.now.get() + by);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_control() {
        let t0 = Instant::now();
        let clock = Clock::starting_at(t0);
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.now(), t0 + Duration::from_millis(5));
        clock.set(t0);
        assert_eq!(clock.now(), t0);
    }

    /// The turn's stamp follows the cached time, from the clock's start.
    #[test]
    fn the_stamp_follows_now() {
        let t0 = Instant::now();
        let clock = Clock::starting_at(t0);
        assert_eq!(clock.start(), t0);
        assert_eq!(clock.stamp(), Stamp::of(t0, t0));
        clock.advance(Duration::from_millis(7));
        assert_eq!(clock.stamp(), Stamp::of(t0 + Duration::from_millis(7), t0));
        assert_eq!(clock.stamp().instant(t0), clock.now());
        clock.refresh();
        assert_eq!(clock.stamp(), Stamp::of(clock.now(), t0));
        assert!(clock.stamp() < Stamp::NEVER);
    }

    #[test]
    fn refresh_is_cached_and_monotonic() {
        let clock = Clock::new();
        let ahead = Instant::now() + Duration::from_secs(3600);
        clock.set(ahead);
        clock.refresh();
        assert_eq!(clock.now(), ahead, "refresh never moves backwards");
        let clock = Clock::starting_at(Instant::now() - Duration::from_secs(1));
        let before = clock.now();
        clock.refresh();
        assert!(clock.now() > before);
        let cached = clock.now();
        assert_eq!(clock.now(), cached, "now() does not read the clock");
    }
}
