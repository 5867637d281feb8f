//! Owns: [`LoginThrottle`], one shard's memory of failed logins per (source address,
//! username) — the address as IPv4, or its IPv6 /64 prefix — and what it decides for
//! the answer to a *failed* attempt: at once, after a delay that doubles with each
//! earlier failure of that pair (up to a cap), or no answer at all once the pair failed
//! `burst` times. A correct password is never looked up here: it is answered at once,
//! whatever failed before, so a client guessing one user's password (or any user's, from
//! behind the same NAT) never delays or locks out another user, nor the right password
//! of the same user. A pair with no failure for the quiet period is forgotten. The
//! table is bounded ([`MAX_TRACKED`] pairs): when full, forgotten pairs go first, then
//! arbitrary ones.
//!
//! The state is per shard: a client's connections spread over the shards (the kernel
//! picks one per connection, `SO_REUSEPORT`), so a pair gets at most `burst` answered
//! failures per quiet period on each shard — the shard count times `burst` in all.
//! What rotating addresses or users would get around it, the broker-wide
//! [`FailureCeiling`] bounds.
//!
//! [`LoggedThrottle`] is the throttle with the ceiling applied and its rate-limited log
//! lines (CON-1008 for a refused login, CON-1009 for a failure dropped by the burst,
//! CON-1016 for one dropped by the ceiling or the cap on delayed answers), as shards and
//! the management listener use it.
//!
//! Does not: check passwords, read clocks (it is given `now`), sleep, or touch
//! connections.

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::config::limits::LoginThrottleSettings;
use crate::ops::limit_event::{CeilingReason, LimitEvent};

use super::ceiling::FailureCeiling;
use super::report::Reporter;

/// (address, user) pairs one shard remembers at most (about 40 bytes each).
pub const MAX_TRACKED: usize = 16_384;

/// What to do with the answer to a failed login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Answer at once.
    Open,
    /// Answer after this delay (the connection waits; the shard does not).
    Delay(Duration),
    /// Drop the connection without a reply; the pair failed this many times.
    Drop { failures: u32 },
}

#[derive(Clone, Copy)]
struct Entry {
    failures: u32,
    last_failure: Instant,
}

/// The key a pair is throttled under: the address's [`key`] and a keyed hash of the
/// username (a fixed size whatever the name's length; the key is random per table, so
/// a client cannot choose names that collide).
type PairKey = (IpAddr, u64);

/// One shard's failed-login table.
pub struct LoginThrottle {
    settings: LoginThrottleSettings,
    table: HashMap<PairKey, Entry>,
    users: RandomState,
    cap: usize,
}

/// The key an address is throttled under: IPv4 (and IPv4-mapped IPv6) addresses as
/// they are, other IPv6 addresses by their /64 prefix (what one host usually holds).
pub fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

impl LoginThrottle {
    pub fn new(settings: LoginThrottleSettings) -> LoginThrottle {
        LoginThrottle::with_capacity(settings, MAX_TRACKED)
    }

    fn with_capacity(settings: LoginThrottleSettings, cap: usize) -> LoginThrottle {
        LoginThrottle {
            settings,
            table: HashMap::new(),
            users: RandomState::new(),
            cap: cap.max(8),
        }
    }

    /// Whether throttling does anything.
    fn enabled(&self) -> bool {
        self.settings.burst > 0 || !self.settings.initial_delay.is_zero()
    }

    fn pair(&self, ip: IpAddr, user: &str) -> PairKey {
        (key(ip), self.users.hash_one(user))
    }

    /// Records a failed login as `user` from `ip` at `now` and decides its answer from
    /// the pair's earlier failures: the first is answered at once, the next after
    /// `initial_delay`, doubling to `max_delay`; once `burst` were answered, no answer.
    pub fn failed(&mut self, ip: IpAddr, user: &str, now: Instant) -> Gate {
        if !self.enabled() {
            return Gate::Open;
        }
        let k = self.pair(ip, user);
        if !self.table.contains_key(&k) && self.table.len() >= self.cap {
            self.make_room(now);
        }
        let quiet = self.settings.quiet;
        let e = self.table.entry(k).or_insert(Entry {
            failures: 0,
            last_failure: now,
        });
        if now.saturating_duration_since(e.last_failure) >= quiet {
            e.failures = 0;
        }
        let before = e.failures;
        e.failures = e.failures.saturating_add(1);
        e.last_failure = now;
        let s = &self.settings;
        if s.burst > 0 && before >= s.burst {
            return Gate::Drop {
                failures: e.failures,
            };
        }
        if before == 0 || s.initial_delay.is_zero() {
            return Gate::Open;
        }
        let doublings = (before - 1).min(31);
        Gate::Delay(
            s.initial_delay
                .saturating_mul(1u32 << doublings)
                .min(s.max_delay),
        )
    }

    /// Frees an eighth of the table at least: forgotten pairs first, then arbitrary
    /// ones (a flood from many addresses or users cannot grow the table).
    fn make_room(&mut self, now: Instant) {
        let quiet = self.settings.quiet;
        self.table
            .retain(|_, e| now.saturating_duration_since(e.last_failure) < quiet);
        let target = self.cap - self.cap / 8;
        if self.table.len() > target {
            let excess = self.table.len() - target;
            let victims: Vec<PairKey> = self.table.keys().take(excess).copied().collect();
            for k in victims {
                self.table.remove(&k);
            }
        }
    }

    /// Pairs remembered now.
    pub fn tracked(&self) -> usize {
        self.table.len()
    }
}

/// A [`LoginThrottle`] with the broker-wide ceiling applied and its lines logged: each
/// refused login (CON-1008, with the user, address and mechanism), each failure dropped
/// by the pair's burst (CON-1009) or by the ceiling or the cap on delayed answers
/// (CON-1016), each rate-limited.
pub struct LoggedThrottle {
    throttle: RefCell<LoginThrottle>,
    max_delay: Duration,
    refused: Reporter,
    dropped: Reporter,
    ceiling_dropped: Reporter,
}

impl LoggedThrottle {
    pub fn new(settings: LoginThrottleSettings) -> LoggedThrottle {
        LoggedThrottle {
            max_delay: settings.max_delay,
            throttle: RefCell::new(LoginThrottle::new(settings)),
            refused: Reporter::default(),
            dropped: Reporter::default(),
            ceiling_dropped: Reporter::default(),
        }
    }

    /// A login from `peer` as `user` was refused: remembered for throttling, logged
    /// (CON-1008, rate-limited), and its answer decided — the pair's delay, later still
    /// if the broker-wide `ceiling` has no earlier slot, or no answer (the pair's burst
    /// is spent, CON-1009; the ceiling has no slot within `max_delay`, or the answer
    /// would wait while `may_wait` is false — the caller's delayed answers are at their
    /// cap — CON-1016).
    pub fn failed(
        &self,
        peer: SocketAddr,
        user: &str,
        mechanism: &str,
        now: Instant,
        ceiling: &FailureCeiling,
        may_wait: bool,
    ) -> Gate {
        if let Some(count) = self.refused.note(now) {
            LimitEvent::LoginRefused {
                user: user.to_owned(),
                peer: peer.to_string(),
                mechanism: mechanism.to_owned(),
                count,
            }
            .emit();
        }
        let gate = self.throttle.borrow_mut().failed(peer.ip(), user, now);
        let delay = match gate {
            Gate::Drop { failures } => {
                if let Some(count) = self.dropped.note(now) {
                    LimitEvent::LoginDropped {
                        peer: peer.ip().to_string(),
                        user: user.to_owned(),
                        failures,
                        count,
                    }
                    .emit();
                }
                return gate;
            }
            Gate::Delay(_) if !may_wait => {
                self.ceiling_drop(peer, now, CeilingReason::DelayedAnswers);
                return Gate::Drop { failures: 0 };
            }
            Gate::Delay(delay) => delay,
            Gate::Open => Duration::ZERO,
        };
        let max_wait = if may_wait {
            self.max_delay
        } else {
            Duration::ZERO
        };
        match ceiling.reserve(now, max_wait) {
            None => {
                let reason = CeilingReason::PerSecond(ceiling.rate());
                self.ceiling_drop(peer, now, reason);
                Gate::Drop { failures: 0 }
            }
            Some(wait) if wait.max(delay).is_zero() => Gate::Open,
            Some(wait) => Gate::Delay(wait.max(delay)),
        }
    }

    /// Whether an answer that is not a delayed one (HTTP's 429) may go now under the
    /// broker-wide `ceiling` (CON-1016 when not).
    pub fn answer_now(&self, peer: SocketAddr, now: Instant, ceiling: &FailureCeiling) -> bool {
        if ceiling.reserve(now, Duration::ZERO).is_some() {
            return true;
        }
        self.ceiling_drop(peer, now, CeilingReason::PerSecond(ceiling.rate()));
        false
    }

    fn ceiling_drop(&self, peer: SocketAddr, now: Instant, reason: CeilingReason) {
        if let Some(count) = self.ceiling_dropped.note(now) {
            LimitEvent::LoginCeiling {
                peer: peer.to_string(),
                reason,
                count,
            }
            .emit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LoginThrottleSettings {
        LoginThrottleSettings {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            burst: 6,
            quiet: Duration::from_secs(10),
            failures_per_second: 0,
            max_delayed: 16,
        }
    }

    #[test]
    fn delay_doubles_to_the_cap_then_drops_then_forgets() {
        let mut t = LoginThrottle::new(settings());
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Instant::now();
        let ms = Duration::from_millis;
        let seen: Vec<Gate> = (0..8).map(|_| t.failed(ip, "u", now)).collect();
        assert_eq!(
            seen,
            vec![
                Gate::Open,
                Gate::Delay(ms(100)),
                Gate::Delay(ms(200)),
                Gate::Delay(ms(400)),
                Gate::Delay(ms(500)),
                Gate::Delay(ms(500)),
                Gate::Drop { failures: 7 },
                Gate::Drop { failures: 8 },
            ]
        );
        // Another user from the same address, and the same user from another address,
        // start afresh.
        assert_eq!(t.failed(ip, "other", now), Gate::Open);
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        assert_eq!(t.failed(other, "u", now), Gate::Open);
        // Quiet for the quiet period: forgotten.
        assert_eq!(t.failed(ip, "u", now + Duration::from_secs(10)), Gate::Open);
    }

    #[test]
    fn ipv6_hosts_share_their_64_prefix() {
        let a: IpAddr = "2001:db8::1".parse().expect("ip");
        let b: IpAddr = "2001:db8::ffff:2".parse().expect("ip");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(key(a), key(b));
        assert_eq!(key(mapped), "10.0.0.1".parse::<IpAddr>().expect("ip"));
        let mut t = LoginThrottle::new(settings());
        let now = Instant::now();
        assert_eq!(t.failed(a, "u", now), Gate::Open);
        assert_eq!(
            t.failed(b, "u", now),
            Gate::Delay(Duration::from_millis(100))
        );
    }

    #[test]
    fn the_table_stays_bounded_under_a_flood_of_pairs() {
        let mut t = LoginThrottle::with_capacity(settings(), 64);
        let now = Instant::now();
        for i in 0..10_000u32 {
            t.failed(IpAddr::V4(i.into()), "u", now);
            t.failed(IpAddr::V4(1.into()), &i.to_string(), now);
            assert!(t.tracked() <= 64);
        }
    }

    #[test]
    fn the_ceiling_delays_then_drops_and_a_full_cap_drops_what_would_wait() {
        let t = LoggedThrottle::new(settings());
        let ceiling = FailureCeiling::new(2);
        let now = Instant::now();
        let peer = |i: u8| SocketAddr::from(([10, 0, 0, i], 1));
        // Two answers in a second at once, then one slot 500 ms later (max_delay), then
        // nothing within max_delay.
        assert_eq!(
            t.failed(peer(1), "u", "PLAIN", now, &ceiling, true),
            Gate::Open
        );
        assert_eq!(
            t.failed(peer(2), "u", "PLAIN", now, &ceiling, true),
            Gate::Open
        );
        assert_eq!(
            t.failed(peer(3), "u", "PLAIN", now, &ceiling, true),
            Gate::Delay(Duration::from_millis(500))
        );
        assert_eq!(
            t.failed(peer(4), "u", "PLAIN", now, &ceiling, true),
            Gate::Drop { failures: 0 }
        );
        // With no room for a delayed answer, what would wait is dropped instead.
        let later = now + Duration::from_secs(5);
        assert_eq!(
            t.failed(peer(5), "u", "PLAIN", later, &ceiling, true),
            Gate::Open
        );
        assert_eq!(
            t.failed(peer(5), "u", "PLAIN", later, &ceiling, false),
            Gate::Drop { failures: 0 }
        );
        let much_later = later + Duration::from_secs(5);
        assert!(t.answer_now(peer(6), much_later, &ceiling));
        assert!(t.answer_now(peer(6), much_later, &ceiling));
        assert!(!t.answer_now(peer(6), much_later, &ceiling));
    }
}
