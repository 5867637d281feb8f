//! Owns: [`LoginThrottle`], one shard's memory of failed logins per source address
//! (IPv4 address, or IPv6 /64 prefix) and what it decides for the next attempt: answer
//! at once, answer after a delay that doubles with each failure (up to a cap), or drop
//! the connection without a reply once the address failed `burst` times. An address
//! with no failure for the quiet period is forgotten. The table is bounded
//! ([`MAX_TRACKED`] addresses): when full, forgotten addresses go first, then arbitrary
//! ones.
//!
//! The state is per shard: a client's connections spread over the shards (the kernel
//! picks one per connection, `SO_REUSEPORT`), so an address gets at most `burst`
//! failures per quiet period on each shard — the shard count times `burst` in all.
//!
//! [`LoggedThrottle`] is the throttle with its rate-limited log lines (CON-1008 for a
//! refused login, CON-1009 for a dropped attempt), as shards and the management listener
//! use it.
//!
//! Does not: read clocks (it is given `now`), sleep, or touch connections.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::config::limits::LoginThrottleSettings;
use crate::ops::limit_event::LimitEvent;

use super::report::Reporter;

/// Addresses one shard remembers at most (about 48 bytes each).
pub const MAX_TRACKED: usize = 16_384;

/// What to do with a login attempt from an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Answer at once.
    Open,
    /// Answer after this delay (the connection waits; the shard does not).
    Delay(Duration),
    /// Drop the connection without a reply; the address failed this many times.
    Drop { failures: u32 },
}

#[derive(Clone, Copy)]
struct Entry {
    failures: u32,
    last_failure: Instant,
}

/// One shard's failed-login table.
pub struct LoginThrottle {
    settings: LoginThrottleSettings,
    table: HashMap<IpAddr, Entry>,
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
            cap: cap.max(8),
        }
    }

    /// Whether throttling does anything.
    fn enabled(&self) -> bool {
        self.settings.burst > 0 || !self.settings.initial_delay.is_zero()
    }

    fn expired(&self, e: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(e.last_failure) >= self.settings.quiet
    }

    /// The decision for an attempt from `ip` arriving at `now`.
    pub fn gate(&mut self, ip: IpAddr, now: Instant) -> Gate {
        let k = key(ip);
        let Some(e) = self.table.get(&k).copied() else {
            return Gate::Open;
        };
        if self.expired(&e, now) {
            self.table.remove(&k);
            return Gate::Open;
        }
        let s = &self.settings;
        if s.burst > 0 && e.failures >= s.burst {
            return Gate::Drop {
                failures: e.failures,
            };
        }
        if e.failures == 0 || s.initial_delay.is_zero() {
            return Gate::Open;
        }
        let doublings = (e.failures - 1).min(31);
        let delay = s
            .initial_delay
            .saturating_mul(1u32 << doublings)
            .min(s.max_delay);
        Gate::Delay(delay)
    }

    /// Records a failed login from `ip`. Returns the address's failures now.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> u32 {
        if !self.enabled() {
            return 0;
        }
        let k = key(ip);
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
        e.failures = e.failures.saturating_add(1);
        e.last_failure = now;
        e.failures
    }

    /// Frees an eighth of the table at least: forgotten addresses first, then
    /// arbitrary ones (a flood from many addresses cannot grow the table).
    fn make_room(&mut self, now: Instant) {
        let quiet = self.settings.quiet;
        self.table
            .retain(|_, e| now.saturating_duration_since(e.last_failure) < quiet);
        let target = self.cap - self.cap / 8;
        if self.table.len() > target {
            let excess = self.table.len() - target;
            let victims: Vec<IpAddr> = self.table.keys().take(excess).copied().collect();
            for k in victims {
                self.table.remove(&k);
            }
        }
    }

    /// Addresses remembered now.
    pub fn tracked(&self) -> usize {
        self.table.len()
    }
}

/// A [`LoginThrottle`] that logs its decisions: each refused login (CON-1008, with the
/// user, address and mechanism) and each dropped attempt (CON-1009), rate-limited.
pub struct LoggedThrottle {
    throttle: RefCell<LoginThrottle>,
    refused: Reporter,
    dropped: Reporter,
}

impl LoggedThrottle {
    pub fn new(settings: LoginThrottleSettings) -> LoggedThrottle {
        LoggedThrottle {
            throttle: RefCell::new(LoginThrottle::new(settings)),
            refused: Reporter::default(),
            dropped: Reporter::default(),
        }
    }

    /// What to do with a login attempt from `peer` (CON-1009 when dropped).
    pub fn gate(&self, peer: SocketAddr, now: Instant) -> Gate {
        let gate = self.throttle.borrow_mut().gate(peer.ip(), now);
        if let Gate::Drop { failures } = gate {
            if let Some(count) = self.dropped.note(now) {
                LimitEvent::LoginDropped {
                    peer: peer.ip().to_string(),
                    failures,
                    count,
                }
                .emit();
            }
        }
        gate
    }

    /// A login from `peer` as `user` was refused: remembered for throttling, logged
    /// (CON-1008, rate-limited) with the username, address and mechanism.
    pub fn failed(&self, peer: SocketAddr, user: &str, mechanism: &str, now: Instant) {
        self.throttle.borrow_mut().failed(peer.ip(), now);
        if let Some(count) = self.refused.note(now) {
            LimitEvent::LoginRefused {
                user: user.to_owned(),
                peer: peer.to_string(),
                mechanism: mechanism.to_owned(),
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
        }
    }

    #[test]
    fn delay_doubles_to_the_cap_then_drops_then_forgets() {
        let mut t = LoginThrottle::new(settings());
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Instant::now();
        assert_eq!(t.gate(ip, now), Gate::Open);
        let ms = Duration::from_millis;
        let mut seen = Vec::new();
        for _ in 0..6 {
            t.failed(ip, now);
            seen.push(t.gate(ip, now));
        }
        assert_eq!(
            seen,
            vec![
                Gate::Delay(ms(100)),
                Gate::Delay(ms(200)),
                Gate::Delay(ms(400)),
                Gate::Delay(ms(500)),
                Gate::Delay(ms(500)),
                Gate::Drop { failures: 6 },
            ]
        );
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        assert_eq!(t.gate(other, now), Gate::Open);
        assert_eq!(t.gate(ip, now + Duration::from_secs(10)), Gate::Open);
        assert_eq!(t.tracked(), 0);
    }

    #[test]
    fn ipv6_hosts_share_their_64_prefix() {
        let a: IpAddr = "2001:db8::1".parse().expect("ip");
        let b: IpAddr = "2001:db8::ffff:2".parse().expect("ip");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        assert_eq!(key(a), key(b));
        assert_eq!(key(mapped), "10.0.0.1".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn the_table_stays_bounded_under_a_flood_of_addresses() {
        let mut t = LoginThrottle::with_capacity(settings(), 64);
        let now = Instant::now();
        for i in 0..10_000u32 {
            t.failed(IpAddr::V4(i.into()), now);
            assert!(t.tracked() <= 64);
        }
    }
}
